"""remat's partitioner for inductor: ``torch._inductor.config.custom_partitioner_fn``.

Inductor calls it once per compiled region (each graph between graph breaks, again for each new
input shape) with AOTAutograd's joint graph, after its own joint-graph passes. It profiles the
joint graph (:mod:`remat.joint.joint_profile`, :mod:`remat.joint.timing`), solves the region's share of
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

import hashlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import fx

from remat.joint import torch_private as tp
from remat.joint.heap import collect_garbage, paused_collector
from remat.joint.joint_profile import JointProfile, apply_torch_safety, joint_profile
from remat.joint.min_cut import MIN_CUT_RATIOS, check_ratios, min_cut_save_sets
from remat.joint.plan import Realized, realize
from remat.joint.solve import BelowLeast, Front, solve_front
from remat.joint.timing import TIME_SOURCES, node_times
from remat.schedules import RematError, Schedule
from remat.schedules.units import is_share, resolve_budget  # the one resolver, re-exported
from remat.solver.common import make_schedule


@dataclass(frozen=True)
class RegionPlan:
    """What remat chose for one compiled region (one joint graph, one input shape).

    Attributes:
        region: the region's place among those compiled in its call (0 = first).
        shapes: the shapes of the joint graph's primal inputs (parameters and inputs).
        share: the region's budget (bytes); ``held_before``: bytes the earlier regions hold.
            After a probe (NOTE [A faster plan just above the budget], ``remat.joint.compile``)
            the shares add up to at most 5% above the budget; the step then measured within it.
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
    """The budget and options of one ``remat.compile``, the fronts solved so far (by graph
    structure: a recompile of the same graph reuses its front), the choices fixed by
    :func:`remat.joint.split.split`, and every region plan made."""

    def __init__(
        self,
        budget: int | float | str,
        times: str,
        ilp_seconds: float,
        repeats: int,
        min_cut_ratios: Sequence[float] = MIN_CUT_RATIOS,
    ) -> None:
        self.min_cut_ratios = check_ratios(min_cut_ratios)
        if times not in TIME_SOURCES:
            raise RematError(f"times: expected one of {', '.join(TIME_SOURCES)}, got {times!r}")
        resolve_budget(budget, None)  # its form only: a malformed size, a fraction outside (0, 1], a negative int
        self.budget, self.times, self.ilp_seconds, self.repeats = budget, times, float(ilp_seconds), int(repeats)
        self.plans: list[RegionPlan] = []
        self.joints: dict[str, tuple[JointProfile, Front]] = {}
        self.assigned: dict[tuple[int, str], frozenset[int]] = {}
        self.assigned_by = "split across regions"  # what set ``assigned``, for the plans' sources
        self.resplit = True  # False while a fixed assignment runs (RematCompiled._rival): no split
        self.step_budget: int | None = None  # set for the reruns of one signature's first call
        self.margin = 0  # bytes the step budget lies below the budget after an overshoot (RematCompiled._remeasure)
        self.begin_call()

    def begin_call(self) -> None:
        """Forget the regions of the previous call (each call's regions compile in forward order)."""
        self.call_plans: list[RegionPlan] = []
        self.call_keys: list[tuple[int, str]] = []
        self.call_fronts: list[Front] = []
        self.over_share: list[str] = []  # refusals of greedy shares taken back for the split


def structure_key(jp: JointProfile) -> str:
    """A digest of the joint profile without its times: the same graph at the same shapes."""
    nodes = [(n.name, n.size, n.backward, n.recompute) for n in jp.profile.nodes]
    return hashlib.sha256(repr((nodes, jp.profile.edges, sorted(jp.pinned))).encode()).hexdigest()


class RematPartitioner(tp.CustomPartitionerFn):
    """The partitioner inductor calls; its ``uuid`` is unique to it, so inductor's caches never
    hand another partitioner's graphs back (a cache hit would skip the partitioner)."""

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
        tangents = [n for n in gm.graph.nodes if n.op == "placeholder" and tp.is_tangent(n)]
        if not any(n.users for n in tangents):
            return tp.default_partition(
                gm, joint_inputs, num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=static_indices
            )
        with paused_collector():  # NOTE [The solve's garbage collection]
            return self._partition(gm, joint_inputs, num_fwd_outputs, static_indices)

    def _front(
        self,
        gm: fx.GraphModule,
        joint_inputs: Sequence[object],
        num_fwd_outputs: int,
        static_indices: Sequence[int],
        static: list[fx.Node],
    ) -> tuple[JointProfile, Front, str, str]:
        """The joint profile and front of ``gm`` (solved, or reused for a graph seen before), its
        structure key and its times' source."""
        session = self.session
        region = len(session.call_keys)
        held_before = sum(p.held for p in session.call_plans)
        untimed = joint_profile(gm, {}, num_fwd_outputs, name=f"region{region}")
        key = structure_key(untimed)
        if key in session.joints:
            jp, front = session.joints[key]
            source = "reused"
        else:

            def share_of(store_all_peak: int) -> int:
                return resolve_budget(session.budget, held_before + store_all_peak) - held_before

            times = node_times(gm, joint_inputs, session.times, session.repeats)
            jp = joint_profile(gm, times.ms, num_fwd_outputs, name=f"region{region}")
            cuts = min_cut_save_sets(jp, gm, joint_inputs, static_indices, session.min_cut_ratios)
            collect_garbage()  # NOTE [The solve's garbage collection]
            front, _ = solve_front(jp, gm, share_of, static, session.ilp_seconds, cuts)
            session.joints[key] = (jp, front)
            source = times.source
        return jp, front, key, source

    def _share(self, front: Front, held_before: int) -> int:
        """The region's share of the budget (bytes)."""
        session = self.session
        if session.step_budget is not None:
            return session.step_budget - held_before
        return resolve_budget(session.budget, held_before + front.store_all.peak) - held_before

    def _pick(self, front: Front, share: int, region: int, key: str, held_before: int) -> tuple[int, str]:
        """The index of the candidate this region runs, and its source."""
        session = self.session
        assigned = session.assigned.get((region, key))
        if assigned is not None:
            pick = front.candidates.index(front.candidate(assigned))
            return pick, f"{front.sources[pick]} ({session.assigned_by})"
        try:
            chosen, source = front.choose(share)
        except RematError as error:
            message = str(error)
            if held_before:
                message += f" (region {region}: its share after {held_before} bytes held by earlier regions)"
            if not is_share(session.budget) or session.step_budget is not None:
                raise BelowLeast(message) from None
            # a fraction of the step's store-all peak, whose later regions are not known yet:
            # take the least here and let the split over all regions decide (RematCompiled)
            chosen, source = min(front.candidates, key=lambda c: (c.peak, c.ms)), "least, over its greedy share"
            session.over_share.append(message)
        return front.candidates.index(chosen), source

    def _partition(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], num_fwd_outputs: int, static_indices: Sequence[int]
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        session = self.session
        start = time.perf_counter()
        apply_torch_safety(gm)
        primals = [n for n in gm.graph.nodes if n.op == "placeholder" and tp.is_primal(n)]
        static = [p for i, p in enumerate(primals) if i in set(static_indices)]
        region = len(session.call_keys)
        held_before = sum(p.held for p in session.call_plans)
        jp, front, key, times = self._front(gm, joint_inputs, num_fwd_outputs, static_indices, static)
        session.call_keys.append((region, key))
        session.call_fronts.append(front)
        while True:
            share = self._share(front, held_before)
            pick, source = self._pick(front, share, region, key, held_before)
            # inductor rewrites the graphs it is given: every compile gets its own, from this joint graph
            chosen = realize(jp, gm, front.candidates[pick].saved, static)
            if chosen.ops == front.candidates[pick].ops:
                break
            # NOTE [Costing a save set without building its graphs]: torch's graphs are the truth
            front = front.replaced(pick, replace(chosen, forward=None, backward=None))
            collect_garbage()  # the graphs just built and set aside
            session.joints[key] = (jp, front)
            session.call_fronts[-1] = front
        extra = {"source": source}
        schedule = make_schedule(jp.profile, max(share, chosen.peak), "remat.compile", chosen.ops, extra=extra)
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
            held=chosen.held,
            schedule=schedule,
            joint=jp,
            graph=gm,
            times=times,
            solve_seconds=time.perf_counter() - start,
            candidates=len(front.candidates),
        )
        session.plans.append(plan)
        session.call_plans.append(plan)
        return chosen.forward, chosen.backward


__all__ = ["Front", "RegionPlan", "RematPartitioner", "Session", "resolve_budget"]
