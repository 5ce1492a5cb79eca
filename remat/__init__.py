"""remat: optimal activation checkpointing (rematerialization) under a memory budget."""

__version__ = "0.1.0"
