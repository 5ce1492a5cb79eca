"""Profiling a model as a graph of pieces (torch.fx) into a GraphProfile (docs/architecture.md)."""
