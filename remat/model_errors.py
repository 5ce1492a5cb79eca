"""Errors raised by the user's model while remat runs it, as one line naming where.

``remat profile`` and ``remat execute`` run the user's model; a wrong input shape or a stage
that cannot take its predecessor's output raises deep inside torch. The CLI turns such an
exception into one line naming the stage (when the model ran as a chain), the innermost module
and the user's own source line, instead of a traceback or a misleading "internal error".
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from collections.abc import Callable, Iterator

from remat.schedules import RematError

_REMAT_DIR = os.path.dirname(os.path.abspath(__file__))


def _torch_dir() -> str | None:
    torch = sys.modules.get("torch")
    return os.path.dirname(os.path.abspath(torch.__file__)) if torch is not None else None


def _frames(tb: types.TracebackType | None):
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


def where_in_model(error: BaseException) -> str | None:
    """``stage 'x', in Conv2d, at model.py:12`` for an exception raised while a torch module ran,
    or None when no module is on the traceback (then it is not the model's error)."""
    nn = getattr(sys.modules.get("torch"), "nn", None)
    if nn is None:
        return None
    torch_dir, stage, innermost, user_line = _torch_dir(), None, None, None
    for frame, line in _frames(error.__traceback__):
        owner = frame.f_locals.get("self")
        if isinstance(owner, nn.Module):
            innermost = type(owner).__name__
            if type(owner).__name__ == "Chain" and "stage" in frame.f_locals:
                modules = list(owner.stages)
                current = frame.f_locals["stage"]
                stage = next((owner.names[i] for i, m in enumerate(modules) if m is current), stage)
        path = os.path.abspath(frame.f_code.co_filename)
        internal = (torch_dir and path.startswith(torch_dir)) or (
            path.startswith(_REMAT_DIR) and os.sep + "zoo" + os.sep not in path
        )
        if not internal and not path.startswith("<"):
            user_line = f"{os.path.basename(path)}:{line}"
    if innermost is None:
        return None
    parts = ([f"stage '{stage}'"] if stage is not None else []) + [f"in {innermost}"]
    if user_line:
        parts.append(f"at {user_line}")
    return ", ".join(parts)


def first_line(error: BaseException) -> str:
    """``IndexError: index out of range in self``: the exception's type and its first non-empty line."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else '(no message)'}"


def model_error(error: Exception, model: str, shape: str) -> RematError | None:
    """The one-line error for ``error`` raised while running ``model`` on an input of ``shape``,
    or None if it did not come from running a module."""
    where = where_in_model(error)
    if where is None:
        return None
    return RematError(f"--model {model}: running it on an input of shape {shape} failed ({where}): {first_line(error)}")


@contextlib.contextmanager
def one_line_errors(what: str, locate: Callable[[BaseException], str | None] | None = None) -> Iterator[None]:
    """Inside: an exception raised while the user's model (or loss) runs leaves as one line,
    ``model: running it on <what> failed (<where>): <first line>``; any other passes unchanged.
    ``locate``: where the error was raised, when it can say better than the traceback (a traced
    stage: the node's module and the user's source line)."""
    try:
        yield
    except RematError:
        raise
    except Exception as error:  # noqa: BLE001 - only errors from running the user's code are turned into lines
        where = (locate and locate(error)) or where_in_model(error)
        if where is None:
            raise
        where = where.replace("in TrainingStep", "in the loss")  # remat's wrapper of model + loss
        raise RematError(f"model: running it on {what} failed ({where}): {first_line(error)}") from None
