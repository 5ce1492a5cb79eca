"""An exception raised by the user's model while a stage of a cut runs, as one line.

A traced stage is a graph module: Dynamo inlined the user's modules, so a Python traceback of a
failing stage shows torch's functions and the module's generated code (``<eval_with_key>``), and
torch.fx prints that traceback to stderr itself before it re-raises the error with its frames cut
off. The one line names what the user wrote instead (docs/models.md, "The proof"):

    model: stage 'encoder.block.0-1' fails to run (in Embedding
    'encoder.block.0.layer.0.SelfAttention.relative_attention_bias', at modeling_t5.py:277):
    IndexError: index out of range in self; refused

(T5 whose ``relative_buckets`` a stage changed in place, at the stage's second run, before
:mod:`remat.trace.repeatable` copied them.)

The node that raised is the one whose line of the generated code is on the traceback
(``GraphModule._lineno_map``); when torch.fx has cut those frames off (an error raised by the
generated code itself), the stage's body is run again, node by node (:class:`torch.fx.Interpreter`),
from the same input and side values. Each node of a Dynamo graph carries the module that made it
(``nn_module_stack``) and the user's source line (``stack_trace``).

:func:`running_stage` wraps every stage run of the trace room (the cut, the fused hand-offs, the
proof): it keeps fx's printed traceback off stderr, puts the grad mode back (NOTE [Grad mode
inside a stage]) and turns the exception into that line.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from remat.model_errors import first_line, where_in_model
from remat.rewrite.nodes import module_path
from remat.schedules import RematError
from remat.trace.boundary import can_have_grad, detached, each, is_boundary, tensors

_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_REMAT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_line(node: fx.Node) -> str | None:
    """``modeling_t5.py:412``: the innermost frame of ``node``'s recorded stack that is the user's
    code (neither torch's nor remat's), or None when Dynamo recorded none."""
    frames = _FILE_LINE.findall(node.meta.get("stack_trace") or "")
    user = [(f, n) for f, n in frames if not os.path.abspath(f).startswith((_TORCH_DIR, _REMAT_DIR))]
    if not user:
        return None
    path, line = user[-1]
    return f"{os.path.basename(path)}:{line}"


def node_location(node: fx.Node) -> str:
    """``in T5Attention 'encoder.block.0.layer.0.SelfAttention', at modeling_t5.py:412`` for a node
    of a traced step (the module is left out when the node is the step's own code, the loss)."""
    parts = []
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        kind = list(stack.values())[-1][1]
        kind = kind.__name__ if isinstance(kind, type) else str(kind).rsplit(".", 1)[-1].strip("'>")
        path = module_path(node)
        parts.append(f"in {kind}" + (f" '{path}'" if path else ""))
    line = source_line(node)
    if line:
        parts.append(f"at {line}")
    return ", ".join(parts) or f"node {node.name}"


class _Locator(fx.Interpreter):
    """Runs a graph module node by node and remembers the node that raised."""

    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.extra_traceback = False
        self.failed: fx.Node | None = None

    def run_node(self, n: fx.Node) -> Any:
        try:
            return super().run_node(n)
        except Exception:
            self.failed = n
            raise


def failing_node(stage: nn.Module, x: Any) -> fx.Node | None:
    """The node of ``stage``'s traced body that raises when it runs on ``x`` (and the stage's side
    values of the current call), or None: not a traced stage, or it does not raise again. Tried
    without grad, then recording from a leaf of ``x`` (an in-place op on a leaf that requires grad
    fails only there)."""
    body, sides, context = (getattr(stage, name, None) for name in ("body", "sides", "context"))
    if not isinstance(body, fx.GraphModule) or sides is None or context is None:
        return None
    values = getattr(context, "values", {})
    if any(name not in values for name in sides) or not is_boundary(x):
        return None
    leaf = each(lambda t: t.detach().requires_grad_(can_have_grad(t)), x)
    for grad, first in ((False, detached(x)), (True, leaf)):
        locator = _Locator(body)
        with torch.set_grad_enabled(grad):
            try:
                locator.run(*tensors(first), *(values[name] for name in sides))
            except Exception:  # noqa: BLE001 - the same error again: the node that raised is what we want
                return locator.failed
    return None


def raising_node(error: BaseException) -> fx.Node | None:
    """The node of a graph module whose generated code line is on ``error``'s traceback (the
    innermost one), or None (torch.fx cuts those frames off an error raised in that code itself)."""
    found = None
    tb = error.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, fx.GraphModule) and tb.tb_frame.f_code.co_filename.startswith("<eval_with_key"):
            index = (getattr(owner, "_lineno_map", None) or {}).get(tb.tb_lineno - getattr(owner, "_prologue_start", 0))
            nodes = list(owner.graph.nodes)
            found = nodes[index] if index is not None and index < len(nodes) else found
        tb = tb.tb_next
    return found


def traced_location(error: BaseException) -> str | None:
    """Where in a traced stage ``error`` was raised (its node's module and the user's source line),
    or None when no stage's generated code is on its traceback."""
    node = raising_node(error)
    return None if node is None else node_location(node)


def stage_error(name: str, stage: nn.Module, x: Any, error: BaseException, kind: str = "") -> RematError:
    """The one-line :class:`RematError` for ``error``, raised while stage ``name`` ran on ``x``
    (as ``kind``, a forward kind of the replay, when given)."""
    node = raising_node(error) or failing_node(stage, x)
    where = node_location(node) if node is not None else where_in_model(error)
    where = re.sub(r"^stage '[^']*', |, at <[^>]*>\S*", "", where or "")  # generated code is no place to name
    how = f" in {kind}" if kind else ""
    where = f" ({where})" if where else ""
    return RematError(f"model: stage '{name}' fails to run{how}{where}: {first_line(error)}; refused")


@contextlib.contextmanager
def running_stage(name: str, stage: nn.Module, x: Any, kind: str = "") -> Iterator[None]:
    """Run a stage of the trace room inside: a model error becomes :func:`stage_error`'s line, the
    grad mode is put back, and what torch.fx prints of a failing graph module stays off stderr
    (what else was written to stderr meanwhile is passed on)."""
    mode, held = torch.is_grad_enabled(), io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            yield
    except RematError:
        torch.set_grad_enabled(mode)
        raise
    except Exception as error:  # noqa: BLE001 - the user's model failed inside a stage: one line
        torch.set_grad_enabled(mode)
        sys.stderr.write(held.getvalue().split("Traceback (most recent call last):", 1)[0])
        raise stage_error(name, stage, x, error, kind) from None
    else:
        sys.stderr.write(held.getvalue())


__all__ = ["failing_node", "node_location", "raising_node", "running_stage", "source_line", "stage_error"]
