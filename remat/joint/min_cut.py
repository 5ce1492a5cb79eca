"""torch's own partitions of a joint graph, as save sets remat judges beside its solvers' (docs/compile.md,
"The candidates").

``torch.compile``'s partitioner, :func:`torch._functorch.partitioners.min_cut_rematerialization_partition`,
chooses what the forward saves by a min-cut over the joint graph and, under
``torch._functorch.config.activation_memory_budget`` r in [0, 1], a knapsack on its own proxy
(the saved activations' share of its store-all). It knows which ops inductor fuses (pointwise
ops it prefers to recompute), which remat's solvers do not. For each ratio in ``ratios`` it runs
on a copy of the joint graph, and the tensors its forward hands to its backward are read back as
a save set of the joint profile. Each such save set is then realized by :func:`remat.joint.plan.realize`
and costed by remat's simulator, as every other candidate is, so remat's front holds what
``torch.compile`` would do at each of those ratios, and the byte budget chooses among all.

Units: ratios are fractions in [0, 1].
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence

import torch
from torch import fx
from torch._functorch import partitioners as tp

from remat.joint.profile import JointProfile
from remat.schedules import RematError

MIN_CUT_RATIOS = tuple(k / 10 for k in range(11))  # torch.compile's activation_memory_budget, 0.0 to 1.0


def check_ratios(ratios: object) -> tuple[float, ...]:
    """``ratios`` as a tuple of floats in [0, 1]; a one-line :class:`RematError` otherwise."""
    if isinstance(ratios, (str, bytes)) or not isinstance(ratios, Sequence):
        raise RematError(f"min_cut_ratios: expected a sequence of fractions in [0, 1], got {ratios!r}")
    out = []
    for r in ratios:
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r <= 1.0:
            raise RematError(f"min_cut_ratios: expected fractions in [0, 1], got {r!r}")
        out.append(float(r))
    return tuple(out)


def min_cut_save_sets(
    jp: JointProfile,
    gm: fx.GraphModule,
    joint_inputs: Sequence[object],
    static_indices: Sequence[int],
    ratios: Sequence[float],
) -> list[tuple[float, frozenset[int]]]:
    """``(ratio, save set)`` of torch's min-cut partition of ``gm`` at each ratio: the forward
    profile nodes whose tensors its forward graph outputs for the backward. A ratio at which
    torch's partitioner fails is skipped with a warning (remat's own candidates remain)."""
    found = []
    for ratio in ratios:
        graph = copy.deepcopy(gm)  # the partitioner rewrites the graph it is given (CSE, tags)
        try:
            with torch._functorch.config.patch(activation_memory_budget=ratio):
                forward, _ = tp.min_cut_rematerialization_partition(
                    graph,
                    joint_inputs,
                    num_fwd_outputs=jp.num_fwd_outputs,
                    static_lifetime_input_indices=list(static_indices),
                )
        except Exception as error:  # noqa: BLE001 - torch's partitioner is a candidate, not a requirement
            warnings.warn(f"remat.compile: torch's min-cut partition at {ratio} failed, skipped: {error}", stacklevel=2)
            continue
        (output,) = forward.graph.find_nodes(op="output")
        handed = output.args[0][jp.num_fwd_outputs :]
        names = [n.name for n in handed if isinstance(n, fx.Node)]
        forward_nodes = jp.forward
        found.append((ratio, frozenset(jp.group[n] for n in names if jp.group.get(n) in forward_nodes)))
    return found


__all__ = ["MIN_CUT_RATIOS", "check_ratios", "min_cut_save_sets"]
