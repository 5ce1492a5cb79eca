"""Profiling a chain into a ChainProfile: per-stage times (ms) and sizes (bytes), recording options,
batch-size profiles, FLOP-based time estimates (docs/architecture.md)."""
