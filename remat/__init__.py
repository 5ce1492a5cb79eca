"""remat: optimal activation checkpointing (rematerialization) under a memory budget."""

__version__ = "0.1.0"

# NOTE [import remat takes no signal]: importing remat installs no signal handler: a program that
# imports it keeps Python's own Ctrl-C. Only the command does (remat/__main__.py, remat.cli.main).


def checkpoint(*args, **kwargs):  # noqa: ANN002, ANN003 - forwards to remat.api.checkpoint
    """``remat.checkpoint(model, example_inputs, budget=...)``: see :func:`remat.api.checkpoint`.

    Imported lazily so that ``import remat`` (and the solvers) stay free of torch.
    """
    from remat.api import checkpoint as _checkpoint

    return _checkpoint(*args, **kwargs)


def __getattr__(name: str):  # noqa: ANN202 - module attribute hook
    """``remat.RematModel`` (the model ``remat.checkpoint`` returns), imported lazily like it."""
    if name == "RematModel":
        from remat.api import RematModel

        return RematModel
    raise AttributeError(f"module 'remat' has no attribute {name!r}")


def compile(*args, **kwargs):  # noqa: A001, ANN002, ANN003 - forwards to remat.joint.compile.compile
    """``remat.compile(model, budget=...)``: see :func:`remat.joint.compile.compile`.

    Imported lazily so that ``import remat`` stays free of torch.
    """
    from remat.joint.compile import compile as _compile

    return _compile(*args, **kwargs)
