"""remat: optimal activation checkpointing (rematerialization) under a memory budget."""

__version__ = "0.1.0"


def checkpoint(*args, **kwargs):  # noqa: ANN002, ANN003 - forwards to remat.api.checkpoint
    """``remat.checkpoint(model, example_inputs, budget=...)``: see :func:`remat.api.checkpoint`.

    Imported lazily so that ``import remat`` (and the solvers) stay free of torch.
    """
    from remat.api import checkpoint as _checkpoint

    return _checkpoint(*args, **kwargs)
