"""How one stage or piece runs: recording options (selective-checkpoint policies), compiled stages, and
the replay core (RNG, autocast, buffers, recomputation, gradient sink) (docs/architecture.md)."""
