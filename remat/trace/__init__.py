"""Turning a model into a chain of stages: name-based chains, the traced cut (TorchDynamo), fused
hand-offs, and the proof that the chain is the model (docs/architecture.md). The traced program's
rewrites and its node classification live one room below, in :mod:`remat.rewrite`."""
