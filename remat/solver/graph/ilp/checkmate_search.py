"""Building and searching Checkmate's MILP (:mod:`remat.solver.graph.ilp.checkmate_model`) for the
``ilp`` and ``lp-rounding`` strategies: one call each to build it, search it (again, from a better
warm start), find the least peak, or solve its LP relaxation.

Solver choice, measured (OR-Tools 9.15, this 2-core machine shared with other sessions, so
times are noisy): a 30-stage random chain as a graph (62 nodes, 10,201 model variables) at 50%
of its store-all peak, warm start chen-sqrt = 229.27 ms, 20 s per run:

==========================  ============  ===============
backend                     best (ms)     bound (ms)
==========================  ============  ===============
CP-SAT, 1 worker (10 s)     229.27        179.27
CP-SAT, 2 workers           210.53        179.27
CP-SAT, 8 workers           209.14        194.71
SCIP (pywraplp, hinted)     229.27        192.82
HiGHS (pywraplp)            none          none (and it segfaults when given a hint)
==========================  ============  ===============

The U-Net graph of examples/graph_unet.json (63 nodes) at 70% of its store-all peak, warm start
59293 ms (``python benchmarks/ilp_speed.py --compare-backends --graphs unet --budgets 70
--limits 30`` plus two runs with other CP-SAT parameters), 30 s per run:

==========================  ============  ===============
backend                     best (ms)     bound (ms)
==========================  ============  ===============
CP-SAT, 1 worker            59292         46810
CP-SAT, 2 workers           55976         46810
CP-SAT, 8 workers           49553         46969
CP-SAT, 16 workers          50605         46969
CP-SAT, 8 w., lin. level 2  53636         46969
SCIP (pywraplp, hinted)     59293         46899
HiGHS (pywraplp, no hint)   none          none
==========================  ============  ===============

CP-SAT with 8 workers finds the best schedule and the best bound; its portfolio (LP-based
search, LNS, core-based bounds) pays off even with more workers than cores. It also works in
exact integers (memory in bytes / gcd of the sizes, costs scaled to integers), so a decoded
schedule can never exceed the budget by a floating-point feasibility tolerance, and it takes a
complete warm-start hint. SCIP remains available (``backend="scip"``) for comparison.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from remat.schedules import GraphProfile
from remat.solver.deadline import Deadline, as_deadline
from remat.solver.graph.ilp.checkmate_model import CheckmateModel
from remat.solver.graph.stages import StagePlan, plan_peak

# See the measurement in the module docstring.
BACKEND_CHOICE = "cp-sat"
DEFAULT_WORKERS = 8
BACKENDS = ("cp-sat", "scip", "highs")


@dataclass(frozen=True)
class ModelResult:
    """Outcome of one solve.

    Attributes:
        plan: the best plan found (None if none).
        status: "optimal", "feasible", "infeasible" or "unknown" (no plan and no proof).
        lower_bound_ms: proven lower bound on the objective (milliseconds), or None.
        objective_ms: the plan's cost in milliseconds (recomputed exactly from R), or None.
        solve_seconds: wall time of the solver call (seconds), excluding model building.
        build_seconds: wall time of building the model (seconds).
        memory: U[t, k] as the solver holds it (bytes), for the computed k, or None.
        variables: number of model variables.
        free_matches: whether the solver's FREE values are exactly Checkmate's rule applied to its
            R and S (which is where the decoded ops free), or None without a plan.
    """

    plan: StagePlan | None
    status: str
    lower_bound_ms: float | None
    objective_ms: float | None
    solve_seconds: float
    build_seconds: float
    memory: dict[tuple[int, int], int] | None
    variables: int
    free_matches: bool | None = None


def solve_model(
    profile: GraphProfile,
    budget: int,
    time_limit: float | Deadline,
    workers: int = DEFAULT_WORKERS,
    backend: str = BACKEND_CHOICE,
    hint: StagePlan | None = None,
) -> ModelResult:
    """Build and solve Checkmate's MILP for ``budget`` bytes, building included, within
    ``time_limit`` (seconds from now, or a shared :class:`Deadline`); raises :class:`TimeUp` if
    the time runs out before the solver starts."""
    deadline = as_deadline(time_limit)
    start = time.perf_counter()
    model = build_model(profile, budget, deadline, backend)
    build = time.perf_counter() - start
    return search(model, deadline, workers, hint, build)


def build_model(profile: GraphProfile, budget: int, time_limit: float | Deadline, backend: str = BACKEND_CHOICE):
    """Checkmate's MILP for ``budget`` bytes, ready for :func:`search` (once or several times,
    e.g. again from a better warm start); raises :class:`TimeUp` if building outlasts ``time_limit``."""
    return CheckmateModel(profile, budget, backend, deadline=as_deadline(time_limit))


def search(
    model: CheckmateModel,
    time_limit: float | Deadline,
    workers: int = DEFAULT_WORKERS,
    hint: StagePlan | None = None,
    build_seconds: float = 0.0,
) -> ModelResult:
    """Search a built model until ``time_limit`` (seconds or a :class:`Deadline`), from ``hint``
    when given (it replaces the previous search's hint); raises :class:`TimeUp` if no time is left."""
    deadline = as_deadline(time_limit)
    profile = model.profile
    start = time.perf_counter()
    if hint is not None:
        model.deadline = deadline
        model.hint(hint)
    status, bound, seconds = model.solve(workers, deadline)
    build_seconds += time.perf_counter() - start - seconds  # the hint is part of the set-up
    plan = None
    objective = None
    memory = None
    lower = None
    matches = None
    if status in ("optimal", "feasible"):
        plan = model.plan()
        objective = plan.cost_ms(profile)
        memory = model.memory(plan)
        matches = model.free_matches(plan)
    if bound is not None:
        # The objective counts recomputations only (the R[t, t] are fixed); integer costs were
        # rounded down, so bound / scale is a valid lower bound on the recomputation milliseconds.
        lower = profile.store_all_compute_ms + bound / model.scale
    return ModelResult(plan, status, lower, objective, seconds, build_seconds, memory, model.count, matches)


def minimum_peak(
    profile: GraphProfile, time_limit: float | Deadline, workers: int = DEFAULT_WORKERS, hint: StagePlan | None = None
) -> tuple[int | None, int | None, str]:
    """The smallest peak (bytes) of any frontier-advancing schedule, by the same model with the
    objective ``min max U``: (best peak found, proven lower bound, status); building included in
    ``time_limit`` (raises :class:`TimeUp` if it runs out first)."""
    model = CheckmateModel(profile, 0, BACKEND_CHOICE, minimize_peak=True, deadline=as_deadline(time_limit))
    if hint is not None:
        model.hint(hint)
        model.m.AddHint(model.peak, plan_peak(profile, hint) // model.unit)
    status, bound, _ = model.solve(workers)
    best = None
    if status in ("optimal", "feasible"):
        best = plan_peak(profile, model.plan())
    lower = None if bound is None else math.ceil(round(bound, 6)) * model.unit
    return best, lower, status


def solve_relaxation(
    profile: GraphProfile, budget: int, time_limit: float | Deadline
) -> tuple[str, float | None, list[dict]]:
    """The LP relaxation (HiGHS LP): status, LP value in milliseconds (a lower bound on the ILP optimum
    when optimal), and the fractional S[t, i] as one dict per stage. Building is included in
    ``time_limit`` (raises :class:`TimeUp` if it runs out first)."""
    model = CheckmateModel(profile, budget, "scip", relax=True, deadline=as_deadline(time_limit))
    status, bound, _ = model.solve(1)
    if status != "optimal":
        return status, None, []
    fractional = [
        {i: model.value(model.S[t, i]) for i in range(t) if model.value(model.S[t, i]) > 1e-9}
        for t in range(profile.size)
    ]
    return status, profile.store_all_compute_ms + bound / model.scale, fractional


__all__ = [
    "ModelResult",
    "solve_model",
    "build_model",
    "search",
    "solve_relaxation",
    "BACKENDS",
    "BACKEND_CHOICE",
    "minimum_peak",
]
