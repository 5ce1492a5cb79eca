"""Every private name of torch that :mod:`remat.joint` uses, in one place, behind a version check.

``remat.compile`` partitions AOTAutograd's joint graphs itself. Inductor calls it through the
public hook ``torch._inductor.config.custom_partitioner_fn`` (a :class:`CustomPartitionerFn`,
pytorch PR #157580), but what a partitioner must do (which placeholders are primals or tangents,
which nodes must stay in the forward or the backward, how torch extracts the forward and backward
graphs of a save set, what its own min-cut partitioner saves) is only in torch's private
partitioner module, ``torch._functorch.partitioners``, and its neighbours. Private names change
between torch releases without notice, so they are read here and nowhere else in
:mod:`remat.joint` (``tests/joint/test_torch_private.py`` checks that by reading the source), and
the torch releases they were tested on are declared: another release is refused in one line
(:func:`check_torch`) before any of them is imported, unless the user opts in with
``REMAT_UNTESTED_TORCH=1``.

To support a new torch release: run ``python -m pytest tests/joint`` on it, fix what moved here,
and add the release to :data:`TESTED_TORCH`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from remat.schedules import RematError

TESTED_TORCH = ((2, 13),)  # (major, minor) releases tests/joint passed on; any patch level of each
TESTED_RANGE = ">=2.13, <2.14"  # TESTED_TORCH, as a requirement string (docs/compile.md)
UNTESTED_OPT_IN = "REMAT_UNTESTED_TORCH"  # set to 1 to run on an untested torch anyway


def torch_release(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a torch version string (``"2.13.0+cpu"``, ``"2.14.0a0+git1234"``), or None."""
    match = re.match(r"\s*(\d+)\.(\d+)", str(version))
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def check_torch(version: str | None = None) -> None:
    """Refuse, in one line (:class:`RematError`), a torch release outside :data:`TESTED_TORCH`
    (``version``: the running torch's by default), unless ``REMAT_UNTESTED_TORCH=1``."""
    version = str(torch.__version__ if version is None else version)
    if torch_release(version) in TESTED_TORCH or os.environ.get(UNTESTED_OPT_IN) == "1":
        return
    raise RematError(
        f"remat.compile: torch {version} is untested with remat's partitioner (tested: torch{TESTED_RANGE}); "
        f"install a tested torch, or set {UNTESTED_OPT_IN}=1 to try it anyway"
    )


check_torch()  # before any private import: on another release, they may not exist or mean something else

# ruff: noqa: E402 - the imports below wait for the version check above
from torch._functorch import config as _functorch_config
from torch._functorch import partitioners as _partitioners
from torch._functorch.compile_utils import fx_graph_cse as _fx_graph_cse
from torch._guards import TracingContext as _TracingContext
from torch._inductor import config as _inductor_config
from torch._inductor.custom_graph_pass import CustomPartitionerFn as _CustomPartitionerFn
from torch._ops import OpOverload as _OpOverload
from torch._subclasses.fake_tensor import FakeScriptObject as _FakeScriptObject
from torch._subclasses.fake_tensor import unset_fake_temporarily as _unset_fake_temporarily
from torch.fx._lazy_graph_module import _use_lazy_graph_module
from torch.utils import _pytree

# -- types and pytree ------------------------------------------------------------------------
CustomPartitionerFn = _CustomPartitionerFn  # the base class of inductor's custom_partitioner_fn
OpOverload = _OpOverload  # an aten/prims op at one overload (torch.ops.aten.add.Tensor)
FakeScriptObject = _FakeScriptObject  # an opaque script object a joint graph may save
tree_flatten = _pytree.tree_flatten
tree_map = _pytree.tree_map
unset_fake_temporarily = _unset_fake_temporarily  # real tensors inside a compile (remat.joint.timing)

# -- what torch's partitioner knows of a joint graph's nodes -----------------------------------
is_primal = _partitioners._is_primal
is_tangent = _partitioners._is_tangent
is_fwd_seed_offset = _partitioners._is_fwd_seed_offset
is_bwd_seed_offset = _partitioners._is_bwd_seed_offset
is_backward_state = _partitioners._is_backward_state
must_be_in_backward = _partitioners._must_be_in_backward
must_be_in_forward = _partitioners._must_be_in_forward
has_tag_must_be_in_forward = _partitioners._has_tag_must_be_in_forward
is_sym_node = _partitioners.is_sym_node
is_builtin = _partitioners.is_builtin
has_recomputable_ops = _partitioners.has_recomputable_ops
extract_fwd_bwd_outputs = _partitioners._extract_fwd_bwd_outputs

# -- torch's passes and graphs -----------------------------------------------------------------
fx_graph_cse = _fx_graph_cse
force_save_collectives = _partitioners.force_save_collectives
force_save_effectful_ops = _partitioners.force_save_effectful_ops
force_save_bw_mutation_src = _partitioners.force_save_bw_mutation_src
default_partition = _partitioners.default_partition
min_cut_rematerialization_partition = _partitioners.min_cut_rematerialization_partition
reordering_to_mimic_autograd_engine = _partitioners.reordering_to_mimic_autograd_engine
raise_getitems = _partitioners.raise_getitems


def cse_enabled() -> bool:
    """Whether torch's partitioner merges common subexpressions first (``functorch.config.cse``)."""
    return bool(_functorch_config.cse)


def collectives_optimizable() -> bool:
    """``functorch.config.unsafe_allow_optimization_of_collectives``: False makes collectives must-save."""
    return bool(_functorch_config.unsafe_allow_optimization_of_collectives)


def impure_random() -> bool:
    """Whether random ops count as impure in dead-code elimination, as ``Graph.eliminate_dead_code``
    decides it: inductor's ``fallback_random`` inside a compile, True outside one."""
    return bool(_inductor_config.fallback_random) if _TracingContext.try_get() else True


def is_wait_tensor(node: Any) -> bool:
    """True for a functional collective's wait (``_c10d_functional.wait_tensor``)."""
    return torch.distributed.is_available() and node.target is torch.ops._c10d_functional.wait_tensor.default


def op_schema_name(target: OpOverload) -> str:
    """The op's schema name without its namespace (``"rand"`` for ``prims::rand``)."""
    return target._schema.name.split("::")[-1]


def op_argument(node: Any, name: str) -> Any:
    """The value of argument ``name`` of the op ``node`` calls: given by keyword, by position, or its
    schema's default (None where it has none); KeyError where the op has no such argument."""
    for i, argument in enumerate(node.target._schema.arguments):
        if argument.name != name:
            continue
        if name in node.kwargs:
            return node.kwargs[name]
        if i < len(node.args) and not argument.kwarg_only:
            return node.args[i]
        return argument.default_value if argument.has_default_value() else None
    raise KeyError(name)


def extract_fwd_bwd_modules(
    gm: Any, saved_values: list, saved_sym_nodes: list, num_fwd_outputs: int, static_inputs: list
) -> tuple[Any, Any]:
    """Torch's forward and backward graph modules of ``gm`` saving ``saved_values`` (torch drops
    those its backward never reads), the backward reordered as autograd runs it and the getitems
    of both raised, as torch's min-cut partitioner returns them; lazy graph modules (as
    AOTAutograd makes them: their Python code is generated when they first run)."""
    with _use_lazy_graph_module(True):
        fw, bw = _partitioners._extract_fwd_bwd_modules(
            gm,
            saved_values,
            saved_sym_nodes=saved_sym_nodes,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_nodes=_partitioners.OrderedSet(static_inputs),
        )
        bw = _partitioners.reordering_to_mimic_autograd_engine(bw)
        return _partitioners.raise_getitems(fw), _partitioners.raise_getitems(bw)


# -- torch's min-cut chooser, read at several ratios in one partitioner call -------------------
choose_saved_values_set = _partitioners.choose_saved_values_set
solve_min_cut = _partitioners.solve_min_cut


@contextmanager
def chooser_replaced(choose: Callable[..., Any], min_cut: Callable[..., Any]) -> Iterator[None]:
    """Torch's partitioner with its chooser (``choose_saved_values_set``) and its min-cut
    (``solve_min_cut``) replaced while the block runs, restored after it.

    Why a patch: the public hook, ``custom_partitioner_fn`` (PR #157580), replaces torch's whole
    partitioner (remat's own partition uses it, :mod:`remat.joint.partition`) and gives no way to
    read torch's choice; the other hook, a ``CustomKnapsackSolver`` as
    ``functorch.config.activation_memory_budget_solver``, replaces one knapsack at one ratio, and
    the partitioner never reaches it at a ratio its first min-cut already meets. Reading the
    chooser at every ratio in one call (NOTE [Every ratio in one partitioner call],
    :mod:`remat.joint.min_cut`) needs the two module functions replaced; the partitioner looks
    them up in its module's globals at call time, so the replacement is seen. Not thread-safe, as
    every compile of torch's is not."""
    saved = _partitioners.choose_saved_values_set, _partitioners.solve_min_cut
    _partitioners.choose_saved_values_set, _partitioners.solve_min_cut = choose, min_cut
    try:
        yield
    finally:
        _partitioners.choose_saved_values_set, _partitioners.solve_min_cut = saved


__all__ = [
    "TESTED_RANGE",
    "TESTED_TORCH",
    "UNTESTED_OPT_IN",
    "CustomPartitionerFn",
    "FakeScriptObject",
    "OpOverload",
    "check_torch",
    "choose_saved_values_set",
    "chooser_replaced",
    "collectives_optimizable",
    "cse_enabled",
    "default_partition",
    "extract_fwd_bwd_modules",
    "extract_fwd_bwd_outputs",
    "force_save_bw_mutation_src",
    "force_save_collectives",
    "force_save_effectful_ops",
    "fx_graph_cse",
    "has_recomputable_ops",
    "has_tag_must_be_in_forward",
    "impure_random",
    "is_backward_state",
    "is_builtin",
    "is_bwd_seed_offset",
    "is_fwd_seed_offset",
    "is_primal",
    "is_sym_node",
    "is_tangent",
    "is_wait_tensor",
    "min_cut_rematerialization_partition",
    "must_be_in_backward",
    "must_be_in_forward",
    "op_argument",
    "op_schema_name",
    "raise_getitems",
    "reordering_to_mimic_autograd_engine",
    "solve_min_cut",
    "torch_release",
    "tree_flatten",
    "tree_map",
    "unset_fake_temporarily",
]
