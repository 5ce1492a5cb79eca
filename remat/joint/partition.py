"""remat's partitioner for inductor: ``torch._inductor.config.custom_partitioner_fn``.

Inductor calls it once per compiled region (each graph between graph breaks, again for each new
input shape) with AOTAutograd's joint graph, after its own joint-graph passes. It profiles the
joint graph (:mod:`remat.joint.profile`, :mod:`remat.joint.timing`), solves the region's share of
the budget (:mod:`remat.joint.solve`), records the :class:`RegionPlan` on its session and returns
the forward and backward graphs of the chosen save set (:mod:`remat.joint.plan`).

**One budget across regions.** In the step, region r's forward runs after regions 0..r-1 have
run theirs and its backward before theirs, so what they hold after their forward (saved values
and outputs, ``RegionPlan.held``) is held through all of region r. Regions compile in forward
order within a call, so region r's share is the budget minus what the regions compiled before it
in the same call hold: ``share_r = budget - sum(held_j, j < r)``; the step's predicted peak is
``max_r(sum(held_j, j < r) + peak_r)``, within the budget by construction. This split is greedy
(an early region takes the fastest plan that fits its share, which can leave a later region too
little; it then refuses, naming its share and least). A fraction or percentage is of the step's
store-all peak as known when the region compiles: ``sum(held_j, j < r)`` plus the region's own
store-all peak.

Units: bytes (int), milliseconds (float), seconds (float) for solve times.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx
from torch._functorch import partitioners as tp
from torch._inductor.custom_graph_pass import CustomPartitionerFn

from remat.joint.plan import Realized
from remat.joint.profile import JointProfile, apply_torch_safety, joint_profile
from remat.joint.solve import Front, solve_front
from remat.joint.timing import TIME_SOURCES, node_times
from remat.schedules import RematError, Schedule
from remat.schedules.units import parse_size
from remat.solver.common import make_schedule


def resolve_budget(budget: int | float | str, reference: int) -> int:
    """Bytes from ``budget``: an int (bytes), a size (``"6GiB"``), a percentage (``"40%"``) or a
    float in (0, 1] (a fraction) of ``reference`` bytes (remat.checkpoint's forms)."""
    if isinstance(budget, float):
        if not 0.0 < budget <= 1.0:
            raise RematError(f"budget: a float is a fraction of the store-all peak in (0, 1], got {budget}")
        return int(budget * reference)
    return parse_size(budget, reference=reference)


@dataclass(frozen=True)
class RegionPlan:
    """What remat chose for one compiled region (one joint graph, one input shape).

    Attributes:
        region: the region's place among those compiled in its call (0 = first).
        shapes: the shapes of the joint graph's primal inputs (parameters and inputs).
        share: the region's budget (bytes); ``held_before``: bytes the earlier regions hold.
        chosen: the realized partition (save set, recomputed set, peak, time).
        source: which solver (and solver budget) proposed it.
        least: the least peak (bytes) among the candidates; store_all: the store-all partition.
        held: bytes this region holds after its forward (saved values and forward outputs).
        schedule: the partition as a remat graph schedule on ``joint.profile``.
        times: where the node times came from (:mod:`remat.joint.timing`).
        solve_seconds: seconds from the joint graph to the chosen plan (profiling included).
    """

    region: int
    shapes: tuple[tuple[int, ...], ...]
    share: int
    held_before: int
    chosen: Realized
    source: str
    least: int
    store_all: Realized
    held: int
    schedule: Schedule
    joint: JointProfile = field(repr=False)
    graph: fx.GraphModule = field(repr=False, compare=False, default=None)
    times: str = "measured"
    solve_seconds: float = 0.0
    candidates: int = 0

    @property
    def saved(self) -> tuple[str, ...]:
        """Names of the values the forward saves."""
        return tuple(self.joint.profile.nodes[g].name for g in sorted(self.chosen.saved))

    @property
    def recomputed(self) -> tuple[str, ...]:
        """Names of the forward values the backward computes."""
        return tuple(self.joint.profile.nodes[g].name for g in sorted(self.chosen.recomputed))

    @property
    def step_peak(self) -> int:
        """The step's predicted peak while this region runs (bytes): ``held_before + peak``."""
        return self.held_before + self.chosen.peak


class Session:
    """The budget and options of one ``remat.compile`` and every region plan it made."""

    def __init__(self, budget: int | float | str, times: str, ilp_seconds: float, repeats: int) -> None:
        if times not in TIME_SOURCES:
            raise RematError(f"times: expected one of {', '.join(TIME_SOURCES)}, got {times!r}")
        if isinstance(budget, bool) or not isinstance(budget, (int, float, str)):
            raise RematError(
                f"budget: expected bytes (int), a size or percentage (str) or a fraction (float), got {budget!r}"
            )
        if isinstance(budget, str):
            parse_size(budget, reference=1 << 40)  # a malformed size is refused before any compile
        self.budget, self.times, self.ilp_seconds, self.repeats = budget, times, float(ilp_seconds), int(repeats)
        self.plans: list[RegionPlan] = []
        self.call_plans: list[RegionPlan] = []  # the regions compiled in the current call

    def begin_call(self) -> None:
        self.call_plans = []


class RematPartitioner(CustomPartitionerFn):
    """The partitioner inductor calls; its ``uuid`` is unique to its session, so inductor's caches
    never hand one session's graphs to another (a cache hit would skip the partitioner)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.token = f"remat-{uuid.uuid4()}"

    def uuid(self) -> Any:
        return self.token

    def __call__(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        num_fwd_outputs = int(kwargs["num_fwd_outputs"])
        static_indices = kwargs.get("static_lifetime_input_indices") or []
        gm.graph.eliminate_dead_code()
        gm.recompile()
        if tp.has_recomputable_ops(gm):
            raise RematError(
                "remat.compile: the model checkpoints itself (torch.utils.checkpoint) inside the compiled "
                "region; remove it, remat chooses what to recompute"
            )
        tangents = [n for n in gm.graph.nodes if n.op == "placeholder" and tp._is_tangent(n)]
        if not any(n.users for n in tangents):
            return tp.default_partition(
                gm, joint_inputs, num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=static_indices
            )
        return self._partition(gm, joint_inputs, num_fwd_outputs, static_indices)

    def _partition(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], num_fwd_outputs: int, static_indices: Sequence[int]
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        session = self.session
        start = time.perf_counter()
        apply_torch_safety(gm)
        primals = [n for n in gm.graph.nodes if n.op == "placeholder" and tp._is_primal(n)]
        static = [p for i, p in enumerate(primals) if i in set(static_indices)]
        region = len(session.call_plans)
        times = node_times(gm, joint_inputs, session.times, session.repeats)
        jp = joint_profile(gm, times.ms, num_fwd_outputs, name=f"region{region}")
        held_before = sum(p.held for p in session.call_plans)

        def share_of(store_all_peak: int) -> int:
            return resolve_budget(session.budget, held_before + store_all_peak) - held_before

        front, share = solve_front(jp, gm, share_of, static, session.ilp_seconds)
        try:
            chosen, source = front.choose(share)
        except RematError as error:
            if held_before:
                raise RematError(
                    f"{error} (region {region}: its share after {held_before} bytes held by earlier regions)"
                ) from None
            raise
        schedule = make_schedule(jp.profile, share, "remat.compile", chosen.ops, extra={"source": source})
        outputs = {jp.group[n.name] for n in _outputs(chosen.forward) if n.name in jp.group}
        held = sum(jp.profile.nodes[g].size for g in outputs)
        shapes = tuple(
            tuple(int(d) for d in p.meta["val"].shape) for p in primals if isinstance(p.meta.get("val"), torch.Tensor)
        )
        plan = RegionPlan(
            region=region,
            shapes=shapes,
            share=share,
            held_before=held_before,
            chosen=chosen,
            source=source,
            least=front.least,
            store_all=front.store_all,
            held=held,
            schedule=schedule,
            joint=jp,
            graph=gm,
            times=times.source,
            solve_seconds=time.perf_counter() - start,
            candidates=len(front.candidates),
        )
        session.plans.append(plan)
        session.call_plans.append(plan)
        return chosen.forward, chosen.backward


def _outputs(gm: fx.GraphModule) -> list[fx.Node]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return list(out.all_input_nodes)


__all__ = ["Front", "RegionPlan", "RematPartitioner", "Session", "resolve_budget"]
