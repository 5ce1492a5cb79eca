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

NOTE [Every ratio in one partitioner call]: torch's partitioner prepares the graph (CSE, the
safety tags, the node classification, each node's distance from the backward) and then calls
``choose_saved_values_set(joint_graph, node_info, memory_budget)``, whose first two or three
min-cuts (the default one and two more aggressive ones) do not depend on the ratio; only the
knapsack and one last min-cut do. So :func:`min_cut_save_sets` calls the partitioner once, with
``choose_saved_values_set`` replaced for that call by one that runs torch's own chooser at every
ratio, with ``solve_min_cut`` memoized on its options and banned set, and then stops the
partitioner (the graphs it would extract are not needed: remat realizes every save set itself).
On an 8-layer GPT-2 this took the 11 ratios from 11 partitioner calls to one (docs/compile.md).
The save sets are the chooser's own: ``tests/joint/test_min_cut.py`` checks, at every ratio, that
realized they hand the backward what torch's unpatched partitioner hands it (plus the pinned
values remat never recomputes).

Units: ratios are fractions in [0, 1].
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

from torch import fx

from remat.joint import torch_private as tp
from remat.joint.joint_profile import JointProfile
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


class _EveryRatioRead(Exception):
    """Raised by the replaced chooser once every ratio is read: the partitioner stops there."""


def min_cut_save_sets(
    jp: JointProfile,
    gm: fx.GraphModule,
    joint_inputs: Sequence[object],
    static_indices: Sequence[int],
    ratios: Sequence[float],
) -> list[tuple[float, frozenset[int]]]:
    """``(ratio, save set)`` of torch's min-cut partition of ``gm`` at each ratio: the forward
    profile nodes whose values its chooser saves (NOTE [Every ratio in one partitioner call]).
    A ratio at which torch's chooser fails is skipped with a warning (remat's own candidates
    remain), as are all of them where its partitioner fails before choosing."""
    if not ratios:
        return []
    choose, min_cut = tp.choose_saved_values_set, tp.solve_min_cut
    cuts: dict[tuple, tuple[list[fx.Node], Any]] = {}
    chosen: dict[float, list[str]] = {}

    def min_cut_once(joint_graph: fx.Graph, node_info: Any, options: Any, dont_ban: Any = None) -> tuple:
        key = (dataclasses.astuple(options), None if dont_ban is None else frozenset(n.name for n in dont_ban))
        if key not in cuts:
            cuts[key] = min_cut(joint_graph, node_info, options, dont_ban)
        saved, banned = cuts[key]
        return list(saved), type(banned)(banned)  # copies: the chooser may extend what it is given

    def choose_every_ratio(joint_graph: fx.Graph, node_info: Any, memory_budget: float = 1) -> list[fx.Node]:
        for ratio in ratios:
            try:
                chosen[ratio] = [n.name for n in choose(joint_graph, node_info, memory_budget=ratio)]
            except Exception as error:  # noqa: BLE001 - torch's partitioner is a candidate, not a requirement
                message = f"remat.compile: torch's min-cut partition at {ratio} failed, skipped: {error}"
                warnings.warn(message, stacklevel=4)
        raise _EveryRatioRead

    # the partitioner rewrites the graph it is given (CSE, tags): it gets a copy of the graph; the
    # module's tensors are shared, not copied (a deepcopy of the module fails on T5, whose joint
    # graph holds a fake tensor constant: "set the storage of a tensor on device meta")
    graph = fx.GraphModule(gm, copy.deepcopy(gm.graph))
    graph.meta = dict(getattr(gm, "meta", {}))
    try:
        # torch's two functions are replaced for this one call only, and restored after it
        with tp.chooser_replaced(choose_every_ratio, min_cut_once):
            tp.min_cut_rematerialization_partition(
                graph,
                joint_inputs,
                num_fwd_outputs=jp.num_fwd_outputs,
                static_lifetime_input_indices=list(static_indices),
            )
    except _EveryRatioRead:
        pass
    except Exception as error:  # noqa: BLE001 - as above
        message = f"remat.compile: torch's min-cut partitioner failed, its candidates skipped: {error}"
        warnings.warn(message, stacklevel=2)
    forward = jp.forward
    return [
        (ratio, frozenset(jp.group[n] for n in chosen[ratio] if jp.group.get(n) in forward))
        for ratio in ratios
        if ratio in chosen
    ]


__all__ = ["MIN_CUT_RATIOS", "check_ratios", "min_cut_save_sets"]
