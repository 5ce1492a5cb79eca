"""``ilp``: Checkmate's MILP (Jain et al. 2020) solved with OR-Tools CP-SAT, warm-started.

Optimal among frontier-advancing schedules (stage t computes node t last, recomputations
before it in index order; see :mod:`remat.solver.graph.checkmate_model`), which is Checkmate's claim
too: with the profile's fixed topological order, not over every possible op order.

The solver is warm-started with the cheaper of the best graph baseline that fits (store-all,
chen-sqrt, chen-greedy and greedy variants) and Checkmate's LP rounding (given up to 60% of the time
limit), so a time-limited solve always returns a schedule when either fits. The schedule's
``extra`` reports ``status`` (optimal / feasible), ``lower_bound_ms`` (the larger of CP-SAT's
bound and the LP value, both proven), ``gap`` = (compute_ms - lower_bound_ms) / compute_ms,
``solve_seconds`` (LP + CP-SAT) and the warm start.
Units: bytes, milliseconds, seconds for the time limit.
"""

from __future__ import annotations

import os

from remat.schedules import GraphProfile, InfeasibleBudgetError, RematError, Schedule
from remat.schedules.units import format_size
from remat.solver.common import SolverBug, Strategy, make_schedule, require_graph
from remat.solver.deadline import Deadline, TimeUp, check_time_limit
from remat.solver.graph.baselines import best_baseline_plan, store_all_plan
from remat.solver.graph.checkmate_model import BACKEND_CHOICE, DEFAULT_WORKERS, minimum_peak, solve_model
from remat.solver.graph.lp_rounding import round_relaxation
from remat.solver.graph.stages import StagePlan, memory_lower_bound, plan_memory, plan_ops, plan_peak

NAME = "ilp"
DEFAULT_TIME_LIMIT = 60.0
# Up to this share of the time limit goes to LP rounding before CP-SAT. Measured on the ResNet-50
# graph at 90% with a 60 s limit: the LP alone needed 34 s; with a 0.3 share it did not finish, the
# warm start fell back to a baseline and CP-SAT ended at +10.1% where LP rounding alone reaches
# +1.1%. On small graphs the LP ends in seconds and CP-SAT gets the rest anyway.
LP_SHARE = 0.6
BASELINE_SHARE = 0.25


def default_workers() -> int:
    """CP-SAT search workers: 8 or the core count if larger (more workers than cores still helped:
    see the measurement in :mod:`remat.solver.graph.checkmate_model`)."""
    return max(DEFAULT_WORKERS, os.cpu_count() or 1)


def infeasible(
    profile: GraphProfile, budget: int, strategy: str, time_limit: float | Deadline, workers: int
) -> Exception:
    """The error for a budget no schedule meets, with the smallest feasible budget when the
    min-peak model proves it within ``time_limit`` (seconds or the solve's deadline), else its
    best peak and bound."""
    floor = memory_lower_bound(profile)
    try:
        best, lower, status = minimum_peak(profile, time_limit, workers, hint=store_all_plan(profile))
    except TimeUp:
        detail = "the time limit ran out before the smallest feasible budget was found"
        return InfeasibleBudgetError(strategy, budget, floor, detail, bound="at least")
    lower = max(lower or 0, floor)
    if status == "optimal" and best is not None:
        return InfeasibleBudgetError(strategy, budget, best, "proven by the min-peak ILP")
    if best is None:
        return InfeasibleBudgetError(strategy, budget, lower, "proven by the min-peak ILP", bound="at least")
    detail = f"and it needs at least {format_size(lower)} ({lower} bytes), proven"
    return InfeasibleBudgetError(strategy, budget, best, detail, bound="found")


def solve(
    profile: GraphProfile, budget: int, time_limit: float = DEFAULT_TIME_LIMIT, workers: int | None = None
) -> Schedule:
    """The cheapest frontier-advancing schedule within ``budget`` bytes, or the best found in
    ``time_limit`` seconds for the whole solve (baselines, LP rounding, model building, CP-SAT;
    within the margin of :mod:`remat.solver.deadline`), with its proven lower bound and gap."""
    profile = require_graph(profile, NAME)
    deadline = Deadline(check_time_limit(time_limit, NAME))
    workers = default_workers() if workers is None else int(workers)
    _refuse_below_floor(profile, budget)
    total = profile.store_all_compute_ms
    # The greedy variants may use a quarter of the time (the first ones always run: a warm start).
    warm = best_baseline_plan(profile, budget, deadline.share(BASELINE_SHARE))
    phases = {"baselines": round(deadline.elapsed(), 3)}
    if warm is not None and plan_peak(profile, warm[1]) <= budget and warm[1].cost_ms(profile) <= total:
        # Store-all fits: nothing is recomputed, which no schedule can beat.
        name, plan = warm
        extra = _timing(deadline, phases) | {"status": "optimal", "warm_start": name}
        return _finish(profile, budget, plan, plan_memory(profile, plan), total, extra)
    # Spend up to LP_SHARE of the time left on LP rounding (Checkmate's approximation): its
    # schedule is often a much better warm start than the baselines, and the LP value is a second
    # lower bound. CP-SAT (building included) gets whatever is left of the one deadline.
    rounded = round_relaxation(profile, budget, deadline.share(LP_SHARE))
    phases["lp_rounding"] = round(rounded.seconds, 3)
    if rounded.plan is not None and (warm is None or rounded.plan.cost_ms(profile) < warm[1].cost_ms(profile)):
        warm = ("lp-rounding", rounded.plan)
    result, ran_out = _cp_sat(profile, budget, deadline, workers, warm[1] if warm else None, phases)
    plan, memory, source = _solver_plan(profile, result)
    if warm is not None and (plan is None or warm[1].cost_ms(profile) < plan.cost_ms(profile)):
        plan, memory, source = warm[1], plan_memory(profile, warm[1]), f"warm start ({warm[0]})"
    if plan is None:
        raise RematError(
            f"strategy '{NAME}' found no schedule for {format_size(budget)} within {time_limit:g} s and no baseline "
            "fits this budget; try a larger --time-limit or budget"
        )
    status = "feasible" if result is None or result.status == "unknown" else result.status
    lp_bound = rounded.value if rounded.status == "optimal" else None
    lower = max((result.lower_bound_ms or 0.0) if result else 0.0, lp_bound or 0.0, total)
    extra = _timing(deadline, phases) | {"status": status, "warm_start": warm[0] if warm else None}
    extra |= {"source": source} | ({"variables": result.variables} if result else {})
    note = _shortfall(status, source, ran_out, time_limit)
    if note:
        extra["note"] = note
    return _finish(profile, budget, plan, memory, lower, extra)


def _refuse_below_floor(profile: GraphProfile, budget: int) -> None:
    """Below the largest node plus its inputs no schedule exists: say so, and whether that floor
    is exact (a baseline meets it) or only a bound."""
    floor = memory_lower_bound(profile)
    if budget >= floor:
        return
    detail = "computing some node needs it and all its inputs in memory at once"
    if best_baseline_plan(profile, floor) is not None:
        raise InfeasibleBudgetError(NAME, budget, floor, detail + ", and a schedule fits that")
    raise InfeasibleBudgetError(NAME, budget, floor, detail, bound="at least")


def _cp_sat(profile: GraphProfile, budget: int, deadline: Deadline, workers: int, hint, phases: dict):
    """CP-SAT (building included) with what is left of ``deadline``: (result or None, the phase
    the time ran out in or None); records its phases; raises if the budget is infeasible."""
    phases["cp_sat_given"] = round(deadline.left(), 3)
    try:
        result = solve_model(profile, budget, deadline, workers, BACKEND_CHOICE, hint=hint)
    except TimeUp as up:
        return None, up.phase
    phases["cp_sat_build"] = round(result.build_seconds, 3)
    phases["cp_sat_search"] = round(result.solve_seconds, 3)
    if result.status == "infeasible":
        raise infeasible(profile, budget, NAME, deadline, workers)
    return result, None


def _solver_plan(profile: GraphProfile, result) -> tuple[StagePlan | None, dict | None, str]:
    """CP-SAT's plan and its U (checked against the exact memory), or (None, None, "")."""
    if result is None or result.plan is None:
        return None, None, ""
    if plan_memory(profile, result.plan) != result.memory:
        raise SolverBug(f"{NAME}: the model's U differs from the exact memory of its plan")
    if not result.free_matches:
        raise SolverBug(f"{NAME}: the model's FREE differs from where the decoded schedule frees")
    return result.plan, result.memory, "solver"


def _shortfall(status: str, source: str, ran_out: str | None, time_limit: float) -> str | None:
    """Plain words when the time limit was too short for CP-SAT to do better than its warm start."""
    if ran_out:
        return (
            f"the {time_limit:g} s time limit ran out during {ran_out}: this is the {source[len('warm start (') : -1]} "
            "schedule, not an ILP result; a larger --time-limit may find a faster one"
        )
    if status != "optimal" and source.startswith("warm start"):
        return (
            f"in {time_limit:g} s CP-SAT found nothing faster than its warm start "
            f"({source[len('warm start (') : -1]}); a larger --time-limit may"
        )
    return None


def _timing(deadline: Deadline, phases: dict[str, float]) -> dict:
    """The time limit, the seconds each phase took (or was given), and the whole solve so far."""
    return {
        "time_limit_seconds": deadline.limit,
        "elapsed_seconds": round(deadline.elapsed(), 3),
        "phases_seconds": dict(phases),
    }


def _finish(
    profile: GraphProfile, budget: int, plan: StagePlan, memory: dict[tuple[int, int], int], lower: float, extra: dict
) -> Schedule:
    cost = plan.cost_ms(profile)
    lower = min(lower, cost)
    extra = {**extra, "lower_bound_ms": lower, "gap": (cost - lower) / cost if cost > 0 else 0.0}
    extra["backend"] = BACKEND_CHOICE
    return make_schedule(
        profile,
        budget,
        NAME,
        plan_ops(profile, plan),
        claimed_compute_ms=cost,
        # the solver's U right after each compute, plus that node's transient overhead
        claimed_peak_memory=max(held + profile.nodes[k].overhead for (_, k), held in memory.items()),
        extra=extra,
    )


STRATEGY = Strategy(
    name=NAME,
    kind="graph",
    description="Checkmate's MILP on OR-Tools CP-SAT: optimal (or best within --time-limit, with its gap)",
    solve=solve,
    options=("time_limit", "workers"),
    reference="Jain et al. 2020, Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization",
)
