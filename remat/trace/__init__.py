"""Turning a model into a chain of stages: name-based chains, the traced cut (TorchDynamo), its mask
branches, fused hand-offs, and the proof that the chain is the model (docs/architecture.md)."""
