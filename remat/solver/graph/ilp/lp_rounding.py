"""``lp-rounding``: Checkmate's LP relaxation and two-phase rounding (Jain et al. 2020, section 5).

Solve the LP relaxation of the MILP in :mod:`remat.solver.graph.ilp.checkmate_model` (OR-Tools, HiGHS's LP
solver), round the fractional S (deterministically at a few thresholds, and randomly with S as probabilities,
seeded), then recompute the cheapest R for each rounded S (:func:`plan_from_s`: with S fixed,
every computation it implies is forced). The cheapest rounded schedule within the budget wins.
The LP value is a proven lower bound on the optimum (``extra["lower_bound_ms"]``, with ``gap``).

Rounding ignores the memory constraint, so a rounded schedule can exceed the budget; Checkmate
reports the same. If every candidate does, the LP is solved again at 0.9, 0.8, ..., 0.5 times the
budget and rounded again (the bound stays the LP value at the real budget). If still none
fits, the strategy raises :class:`InfeasibleBudgetError` saying so (the budget may well be
feasible: use ``ilp``). Units: bytes, milliseconds, seconds.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from remat.schedules import GraphProfile, InfeasibleBudgetError, RematError, Schedule, ScheduleError
from remat.schedules.units import format_size
from remat.solver.common import Strategy, make_schedule, require_graph
from remat.solver.deadline import Deadline, TimeUp, as_deadline, check_time_limit
from remat.solver.graph.baselines import store_all_plan
from remat.solver.graph.ilp import infeasible
from remat.solver.graph.ilp.checkmate_search import solve_relaxation
from remat.solver.graph.stages import StagePlan, memory_lower_bound, plan_from_s, plan_ops, plan_peak

NAME = "lp-rounding"
THRESHOLDS = (0.5, 0.25, 0.1, 0.01, 0.75, 0.9)
RANDOM_SAMPLES = 16
SHRINK = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)


def solve(profile: GraphProfile, budget: int, time_limit: float = 60.0) -> Schedule:
    """Round the LP relaxation; the cheapest rounded schedule within ``budget`` bytes, all of it
    (LP building and solving, re-solves, rounding) within ``time_limit`` seconds plus the margin
    of :mod:`remat.solver.deadline`."""
    profile = require_graph(profile, NAME)
    deadline = Deadline(check_time_limit(time_limit, NAME))
    floor = memory_lower_bound(profile)
    if budget < floor:
        raise InfeasibleBudgetError(
            NAME, budget, floor, "computing some node needs it and all its inputs in memory at once", bound="at least"
        )
    total = profile.store_all_compute_ms
    base = store_all_plan(profile)
    if plan_peak(profile, base) <= budget:
        return _finish(profile, budget, base, total, {"lp_status": "not needed (store-all fits)"}, deadline)
    result = round_relaxation(profile, budget, deadline)
    if result.status == "infeasible":
        raise infeasible(profile, budget, NAME, deadline, 1)
    if result.value is None:
        why = (
            f"was not solved: the time ran out during {result.ran_out}"
            if result.ran_out
            else (f"ended with status '{result.status}'")
        )
        raise RematError(
            f"strategy '{NAME}': the LP relaxation {why} (time limit {time_limit:g} s), so there is nothing to "
            "round; try a larger --time-limit"
        )
    if result.plan is None and result.lowest_peak is None:
        raise RematError(
            f"strategy '{NAME}': the {time_limit:g} s time limit ran out during {result.ran_out or 'rounding'}, "
            "before any rounding of the LP was checked; try a larger --time-limit"
        )
    if result.plan is None:
        stopped = f" (rounding stopped early: the time limit ran out during {result.ran_out})" if result.ran_out else ""
        raise InfeasibleBudgetError(
            NAME,
            budget,
            None,
            f"every rounding of the LP exceeds the budget, the lowest peaks at {format_size(result.lowest_peak)} "
            f"({result.lowest_peak} bytes){stopped}; the budget may still be feasible: try the 'ilp' strategy",
        )
    extra = {"lp_status": result.status, "lp_seconds": round(result.seconds, 3), "rounding": result.how}
    if result.ran_out:
        extra["note"] = f"the time limit ran out during {result.ran_out}: a larger --time-limit may round better"
    return _finish(profile, budget, result.plan, min(result.value, result.plan.cost_ms(profile)), extra, deadline)


@dataclass(frozen=True)
class Rounded:
    """LP relaxation + rounding outcome: LP status and value (ms, a lower bound when optimal), the
    cheapest rounded plan within the budget (or None), how it was rounded, the lowest peak
    (bytes) of any rounding tried, the seconds spent, and the phase the deadline ended (or None)."""

    status: str
    value: float | None
    plan: StagePlan | None
    how: str
    lowest_peak: int | None
    seconds: float
    ran_out: str | None = None


def round_relaxation(profile: GraphProfile, budget: int, time_limit: float | Deadline) -> Rounded:
    """Solve the LP at ``budget`` bytes and round it (shrinking the LP's budget if no rounding
    fits), all before the deadline (``time_limit`` seconds from now, or a shared :class:`Deadline`)."""
    deadline = as_deadline(time_limit)
    start = time.perf_counter()
    floor = memory_lower_bound(profile)
    try:
        status, value, fractional = solve_relaxation(profile, budget, deadline)
    except TimeUp as up:
        return Rounded("time limit", None, None, "", None, time.perf_counter() - start, up.phase)
    if value is None:
        return Rounded(status, None, None, "", None, time.perf_counter() - start)
    scored: list = []
    fitting: list = []
    ran_out = None
    # Rounding ignores memory, so if nothing fits, round the LP of a smaller budget: its rounded
    # schedules hold less (the lower bound stays the LP value at the real budget).
    for factor in SHRINK:
        if factor < 1.0:
            shrunk = int(budget * factor)
            if shrunk < floor:
                break
            try:
                status_f, _, fractional = solve_relaxation(profile, shrunk, deadline)
            except TimeUp as up:
                ran_out = up.phase
                break
            if status_f != "optimal":
                break
        for how, plan in _roundings(profile, fractional):
            if deadline.left() <= 0:
                ran_out = "rounding"
                break
            try:
                plan.check(profile)  # safety net: a rounding must be a valid plan (the simulator checks it again)
            except ScheduleError:
                continue
            candidate = (plan.cost_ms(profile), plan_peak(profile, plan), f"{how}, LP at {factor:g} x budget", plan)
            scored.append(candidate)
            if candidate[1] <= budget:
                fitting.append(candidate)
        if fitting or ran_out:
            break
    seconds = time.perf_counter() - start
    lowest = min(c[1] for c in scored) if scored else None
    if not fitting:
        return Rounded(status, value, None, "", lowest, seconds, ran_out)
    cost, _, how, plan = min(fitting, key=lambda c: (c[0], c[1]))
    return Rounded(status, value, plan, how, lowest, seconds, ran_out)


def _roundings(profile: GraphProfile, fractional: list[dict]):
    """(description, plan) for each deterministic threshold and each seeded random rounding of S."""
    for threshold in THRESHOLDS:
        S = [frozenset(i for i, x in stage.items() if x >= threshold - 1e-9) for stage in fractional]
        yield f"threshold {threshold}", plan_from_s(profile, S)
    rng = random.Random(0)
    for sample in range(RANDOM_SAMPLES):
        S = [frozenset(i for i, x in stage.items() if rng.random() < x) for stage in fractional]
        yield f"random sample {sample}", plan_from_s(profile, S)


def _finish(profile: GraphProfile, budget: int, plan, lower: float, extra: dict, deadline: Deadline) -> Schedule:
    cost = plan.cost_ms(profile)
    lower = max(min(lower, cost), 0.0)
    extra = {"lower_bound_ms": lower, "gap": (cost - lower) / cost if cost > 0 else 0.0, **extra}
    extra |= {"time_limit_seconds": deadline.limit, "elapsed_seconds": round(deadline.elapsed(), 3)}
    return make_schedule(
        profile,
        budget,
        NAME,
        plan_ops(profile, plan),
        claimed_compute_ms=cost,
        claimed_peak_memory=plan_peak(profile, plan),
        extra=extra,
    )


STRATEGY = Strategy(
    name=NAME,
    kind="graph",
    description="Checkmate's LP relaxation + two-phase rounding (fast; may miss tight budgets); LP bound in extra",
    solve=solve,
    options=("time_limit",),
    reference="Jain et al. 2020, Checkmate, section 5 (two-phase rounding)",
)
