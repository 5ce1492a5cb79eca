"""``ilp``: Checkmate's MILP (Jain et al. 2020) solved with OR-Tools CP-SAT, warm-started.

Optimal among frontier-advancing schedules (stage t computes node t last, recomputations
before it in index order; see :mod:`remat.solver.graph.ilp.checkmate_model`), which is Checkmate's claim
too: with the profile's fixed topological order, not over every possible op order.

Phases, all on one deadline (:mod:`remat.solver.deadline`):

1. warm starts: the best graph baseline that fits (store-all, chen-sqrt, chen-greedy and greedy
   variants, up to a quarter of the time), then each provider of :data:`WARM_STARTS` (or the
   ``warm_starts`` argument), ``(profile, budget, deadline) -> StagePlan | None``, each given
   :data:`PROVIDER_SHARE` of the time left; plans are checked, over-budget ones ignored;
2. while Moccasin's much smaller model (:mod:`remat.solver.graph.ilp.moccasin`) searches from the
   best warm start on the cores left free, the CP-SAT model of Checkmate's MILP is built (once),
   CP-SAT searches it briefly (:data:`QUICK_SECONDS`; small models end here, proven optimal), and
   HiGHS's branch and cut runs on that very model, from the best plan so far, in a child
   process on one core (:mod:`remat.solver.graph.ilp.highs_search`), for :data:`HIGHS_SHARE` of the
   time left or until it proves the optimum (stopped at :data:`HIGHS_GIVE_UP` of that if it has
   no bound yet);
3. then that search is stopped and CP-SAT searches Checkmate's model, with every worker and the
   rest of the time, from the best plan (the warm start or HiGHS's).

The answer is the cheapest schedule found; Moccasin's may be in any op order (not
frontier-advancing), and it wins only when it is faster than every frontier-advancing one found.

The schedule's ``extra`` reports ``status`` (optimal / feasible), ``lower_bound_ms`` (the larger
of CP-SAT's and HiGHS's bounds, both proven; HiGHS's, once its root LP is solved, is at least the
LP relaxation's value), ``gap`` = (compute_ms - lower_bound_ms) / compute_ms, ``phases_seconds``,
the warm start and ``highs`` when HiGHS gave no answer (why). ``formulation="moccasin"`` replaces phases 2-3
by Moccasin's retention-interval model (:mod:`remat.solver.graph.ilp.moccasin`: any op order, each
node computed at most twice; its bound holds for that space).
Units: bytes, milliseconds, seconds for the time limit.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager

from remat.schedules import GraphProfile, InfeasibleBudgetError, RematError, Schedule, ScheduleError
from remat.schedules.units import format_size
from remat.solver.common import SolverBug, Strategy, make_schedule, require_graph
from remat.solver.deadline import Deadline, TimeUp, check_time_limit
from remat.solver.graph.baselines import best_baseline_plan, store_all_plan
from remat.solver.graph.hierarchical import hierarchical_fine_plan, hierarchical_plan
from remat.solver.graph.ilp.checkmate_search import BACKEND_CHOICE, DEFAULT_WORKERS, build_model, minimum_peak, search
from remat.solver.graph.ilp.highs_search import branch_and_cut
from remat.solver.graph.ilp.moccasin import DEFAULT_COPIES, build_intervals, solve_intervals
from remat.solver.graph.stages import StagePlan, memory_lower_bound, plan_memory, plan_ops, plan_peak

NAME = "ilp"
DEFAULT_TIME_LIMIT = 60.0
# Up to this share of the time left goes to HiGHS's branch and cut (one core) while Moccasin's
# model searches from the warm start on the other cores; CP-SAT then searches Checkmate's model,
# with every worker, from the best frontier-advancing plan. HiGHS is there for its bound: on the
# ResNet-50 graph at 50% (60 s, 2 cores) its root LP ends ~15 s after it starts and its second
# round of cuts, the one that brings the hierarchical plan within 1% of the bound, ~40 s after;
# CP-SAT's own bound moved 0.06% above the LP value in 600 s. It ends early when it proves the
# optimum (the U-Net graph at 70%: 15 s). Before it, Checkmate's LP rounding had this place; since
# the hierarchical warm start, its plan never won on the bundled graphs (docs/strategies.md).
HIGHS_SHARE = 0.9
# ... and is stopped when it has no bound (its root LP unsolved) after this share of its time, so
# that CP-SAT's own bound gets the rest: on ViT-B/16 at 70% HiGHS's root LP did not end in 48 s,
# while CP-SAT's bound had been within 1.05% (ResNet-50's first bound comes at ~40% of its share).
HIGHS_GIVE_UP = 0.6
# Before HiGHS, CP-SAT searches for this share of the time left, at most QUICK_SECONDS: enough to
# prove the optimum of a small model (tens of nodes), so that HiGHS's child process (~1 s to start)
# runs only where it can help.
QUICK_SHARE = 0.02
QUICK_SECONDS = 1.0
BASELINE_SHARE = 0.25
PROVIDER_SHARE = 0.1
FORMULATIONS = ("checkmate", "moccasin")
DEFAULT_FORMULATION = "checkmate"


def background_workers(workers: int) -> int:
    """CP-SAT workers while HiGHS runs: the cores its single thread leaves free (at least 1), so
    that it is not slowed down by more search threads than cores."""
    return max(1, min(workers, (os.cpu_count() or 1) - 1))


def default_workers() -> int:
    """CP-SAT search workers: 8 or the core count if larger (more workers than cores still helped:
    see the measurement in :mod:`remat.solver.graph.ilp.checkmate_search`)."""
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


# A warm-start provider: (profile, budget bytes, deadline) -> a plan, or None when it has none.
WarmStart = Callable[[GraphProfile, int, Deadline], "StagePlan | None"]


# Extra warm starts tried after the baselines, each given PROVIDER_SHARE of the time left; the
# cheapest plan within the budget is CP-SAT's first hint. The hierarchical solver's plan is often
# far better than the baselines' on large graphs (DenseNet-121, ViT: docs/strategies.md).
WARM_STARTS: tuple[tuple[str, WarmStart], ...] = (
    ("hierarchical", hierarchical_plan),
    ("hierarchical, fine slots", hierarchical_fine_plan),
)


def solve(
    profile: GraphProfile,
    budget: int,
    time_limit: float = DEFAULT_TIME_LIMIT,
    workers: int | None = None,
    warm_starts: Sequence[tuple[str, WarmStart]] | None = None,
    formulation: str = DEFAULT_FORMULATION,
) -> Schedule:
    """The cheapest frontier-advancing schedule within ``budget`` bytes, or the best found in
    ``time_limit`` seconds for the whole solve (warm starts, model building, Moccasin beside HiGHS,
    CP-SAT; within the margin of :mod:`remat.solver.deadline`), with its proven lower bound
    and gap. ``warm_starts`` replaces :data:`WARM_STARTS` (the baselines always run);
    ``formulation`` is one of :data:`FORMULATIONS` (``moccasin``: :mod:`remat.solver.graph.ilp.moccasin`,
    CP-SAT alone from the best warm start, no LP)."""
    profile = require_graph(profile, NAME)
    if formulation not in FORMULATIONS:
        raise RematError(f"strategy '{NAME}': unknown formulation {formulation!r} (use {', '.join(FORMULATIONS)})")
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
        extra = _timing(deadline, phases) | {"status": "optimal", "warm_start": name, "formulation": formulation}
        return _finish(profile, budget, plan, plan_memory(profile, plan), total, extra)
    offered = WARM_STARTS if warm_starts is None else tuple(warm_starts)
    warm = _cheapest(profile, [warm, *_provided(profile, budget, deadline, offered, phases)])
    if formulation == "moccasin":
        return _solve_intervals(profile, budget, deadline, workers, warm, phases)
    run = _Run(profile, budget, deadline, workers, phases)
    searched = None
    # Moccasin's small model searches from the warm start on the cores left free while this
    # thread builds Checkmate's model and HiGHS's branch and cut runs on it in a child process
    # (one core; its own share): the best proven bound, and on small graphs the proven optimum.
    with _beside(lambda: run.intervals(warm, background_workers(workers)), run.stop_intervals, deadline.cancel):
        run.build()
        # a short CP-SAT try first: it proves small models optimal in far less than HiGHS's start-up
        run.search(warm, workers, "cp_sat_quick", deadline.share(QUICK_SHARE, at_most=QUICK_SECONDS))
        if run.model is not None and run.status != "optimal":
            start = _cheapest(profile, [warm, run.best])
            # killed, if it overruns, only at the solve's own deadline (CP-SAT then gets less time)
            share = deadline.share(HIGHS_SHARE)
            give_up = HIGHS_GIVE_UP * share.left()
            searched = branch_and_cut(run.model, start[1] if start else None, budget, share, deadline, give_up)
    if searched is not None:
        phases["highs"] = round(searched.seconds, 3)
        run.offer("highs", searched.plan)
        if searched.status == "optimal":
            run.status, run.ran_out = "optimal", None
        else:
            # then CP-SAT on Checkmate's model, every worker, the rest of the time, from the best plan
            run.search(_cheapest(profile, [warm, run.best]), workers, "cp_sat")
    return _answer(profile, budget, time_limit, deadline, warm, run, searched)


def _solve_intervals(profile, budget, deadline, workers, warm, phases) -> Schedule:
    """The retention-interval model from the warm start for the rest of the deadline; the
    cheaper of its schedule and the warm start. Its bound holds for its own search space (each
    node computed at most ``DEFAULT_COPIES`` times, in any order)."""
    ran_out = None
    try:
        hint = plan_ops(profile, warm[1]) if warm else None
        result = solve_intervals(profile, budget, deadline, workers, DEFAULT_COPIES, hint)
    except TimeUp as up:
        result, ran_out = None, up.phase
    if result is not None and result.status == "infeasible":
        detail = f"no schedule computing each node at most {DEFAULT_COPIES} times fits, proven by the moccasin model"
        raise InfeasibleBudgetError(NAME, budget, memory_lower_bound(profile), detail, bound="at least")
    extra = {"formulation": "moccasin", "warm_start": warm[0] if warm else None}
    extra["status"] = result.status if result is not None and result.status == "optimal" else "feasible"
    if result is not None:
        phases["moccasin_search"] = round(result.solve_seconds, 3)
        extra["variables"] = result.variables
    lower = max((result.lower_bound_ms or 0.0) if result else 0.0, profile.store_all_compute_ms)
    if result is not None and result.ops and (warm is None or result.objective_ms < warm[1].cost_ms(profile)):
        cost, extra["source"] = result.objective_ms, "solver"
        extra |= _timing(deadline, phases) | _gap(cost, lower)
        return make_schedule(profile, budget, NAME, result.ops, cost, result.peak_memory, extra=extra)
    if warm is None:
        raise RematError(
            f"strategy '{NAME}' (moccasin) found no schedule for {format_size(budget)} within {deadline.limit:g} s "
            "and no baseline fits this budget; try a larger --time-limit or budget"
        )
    extra["source"] = f"warm start ({warm[0]})"
    note = _shortfall(extra["status"], extra["source"], ran_out, deadline.limit)
    extra |= {"note": note} if note else {}
    return _finish(profile, budget, warm[1], plan_memory(profile, warm[1]), lower, _timing(deadline, phases) | extra)


def _gap(cost: float, lower: float) -> dict:
    lower = min(lower, cost)
    return {"lower_bound_ms": lower, "gap": (cost - lower) / cost if cost > 0 else 0.0}


def _answer(profile, budget, time_limit, deadline, warm, run, searched) -> Schedule:
    """The cheapest of the searches' plans (CP-SAT's, HiGHS's), the warm start and Moccasin's
    schedule, with the best proven bound on frontier-advancing schedules (CP-SAT's or HiGHS's)."""
    plan, memory, source = (run.best[1], run.memory, run.best[0]) if run.best else (None, None, "")
    # on a tie the warm start is named: the searches started from it and found nothing faster
    if warm is not None and (plan is None or warm[1].cost_ms(profile) <= plan.cost_ms(profile) + 1e-9):
        plan, memory, source = warm[1], plan_memory(profile, warm[1]), f"warm start ({warm[0]})"
    side = run.side
    if plan is None and side is None:
        raise RematError(
            f"strategy '{NAME}' found no schedule for {format_size(budget)} within {time_limit:g} s and no baseline "
            "fits this budget; try a larger --time-limit or budget"
        )
    highs_bound = searched.lower_bound_ms if searched is not None else None
    lower = max(run.lower, highs_bound or 0.0, profile.store_all_compute_ms)
    extra = _timing(deadline, run.phases) | {"status": run.status, "warm_start": warm[0] if warm else None}
    extra["formulation"] = "checkmate"
    extra |= {"variables": run.variables} if run.variables else {}
    if searched is not None and searched.detail:
        extra["highs"] = f"{searched.status}: {searched.detail}"
    if side is not None and (plan is None or side.objective_ms < plan.cost_ms(profile)):
        # Moccasin's schedule (any op order) beat every frontier-advancing one found; the bound
        # is still Checkmate's, a bound on every frontier-advancing schedule.
        extra |= {"source": "moccasin search beside HiGHS"} | _gap(side.objective_ms, lower)
        return make_schedule(profile, budget, NAME, side.ops, side.objective_ms, side.peak_memory, extra=extra)
    extra["source"] = source
    note = _shortfall(run.status, source, run.ran_out, time_limit)
    if note:
        extra["note"] = note
    return _finish(profile, budget, plan, memory, lower, extra)


def _cheapest(profile: GraphProfile, candidates) -> tuple[str, StagePlan] | None:
    """The cheapest (name, plan) among the candidates that are not None (the first on ties)."""
    present = [c for c in candidates if c is not None]
    return min(present, key=lambda c: c[1].cost_ms(profile)) if present else None


def _provided(profile, budget, deadline, providers, phases) -> list[tuple[str, StagePlan]]:
    """The plans within ``budget`` that the providers return, each checked; each provider gets
    PROVIDER_SHARE of the time left (one that runs out or has no plan adds nothing)."""
    plans = []
    for name, provide in providers:
        started = deadline.elapsed()
        try:
            plan = provide(profile, budget, deadline.share(PROVIDER_SHARE))
        except TimeUp:
            plan = None
        phases[f"warm_start {name}"] = round(deadline.elapsed() - started, 3)
        if plan is None:
            continue
        try:
            plan.check(profile)
        except ScheduleError as error:
            raise SolverBug(f"{NAME}: warm start '{name}' returned an invalid plan: {error}") from None
        if plan_peak(profile, plan) <= budget:
            plans.append((name, plan))
    return plans


class _Run:
    """One CP-SAT model, built once and searched from successive hints; keeps the best plan
    found, the best proven bound (ms), the status and where the time ran out."""

    def __init__(self, profile: GraphProfile, budget: int, deadline: Deadline, workers: int, phases: dict):
        self.profile, self.budget, self.deadline, self.workers = profile, budget, deadline, workers
        self.phases = phases
        self.model = None
        self.best: tuple[str, StagePlan] | None = None
        self.memory: dict | None = None
        self.lower = 0.0
        self.status = "feasible"
        self.ran_out: str | None = None
        self.variables = 0
        self.side = None  # Moccasin's result from beside HiGHS (an IntervalResult with ops)
        self._intervals = None
        self._stopping = False

    def build(self) -> None:
        started = self.deadline.elapsed()
        try:
            self.model = build_model(self.profile, self.budget, self.deadline)
        except TimeUp as up:
            self.ran_out = up.phase
            return
        self.phases["cp_sat_build"] = round(self.deadline.elapsed() - started, 3)
        self.variables = self.model.count

    def search(
        self, warm: tuple[str, StagePlan] | None, workers: int, phase: str, until: Deadline | None = None
    ) -> None:
        """Search until ``until`` (default: the solve's deadline) from ``warm``; raises
        :class:`InfeasibleBudgetError` if CP-SAT proves the budget infeasible."""
        if self.model is None or self.status == "optimal":
            return
        try:
            result = search(self.model, until or self.deadline, workers, warm[1] if warm else None)
        except TimeUp as up:
            self.ran_out = up.phase
            return
        self.phases[phase] = round(result.solve_seconds, 3)
        self.ran_out = None
        if result.status == "infeasible":
            raise infeasible(self.profile, self.budget, NAME, self.deadline, self.workers)
        self.lower = max(self.lower, result.lower_bound_ms or 0.0)
        self.status = "optimal" if result.status == "optimal" else self.status
        plan, memory, _ = _solver_plan(self.profile, result)
        if plan is not None and (self.best is None or plan.cost_ms(self.profile) < self.best[1].cost_ms(self.profile)):
            self.best, self.memory = ("solver", plan), memory

    def offer(self, name: str, plan: StagePlan | None) -> None:
        """Keep ``plan`` (checked, within the budget) as the best if it is the cheapest yet."""
        if plan is not None and (self.best is None or plan.cost_ms(self.profile) < self.best[1].cost_ms(self.profile)):
            self.best, self.memory = (name, plan), plan_memory(self.profile, plan)

    def intervals(self, warm: tuple[str, StagePlan] | None, workers: int) -> None:
        """Moccasin's model from ``warm`` until the deadline or :meth:`stop_intervals`; keeps its
        schedule in ``self.side`` (any op order: not a hint for Checkmate's model)."""
        hint = plan_ops(self.profile, warm[1]) if warm else None
        try:
            self._intervals = build_intervals(self.profile, self.budget, self.deadline, DEFAULT_COPIES, hint)
            if self._stopping:
                return
            result = self._intervals.search(self.deadline, workers)
        except TimeUp:
            return
        self.phases["moccasin_during_highs"] = round(result.solve_seconds, 3)
        if result.ops is not None:
            self.side = result

    def stop_intervals(self) -> None:
        self._stopping = True
        if self._intervals is not None:
            self._intervals.stop()


@contextmanager
def _beside(work: Callable[[], None], stop: Callable[[], None], cancel: Callable[[], None]):
    """Run ``work`` in a thread (CP-SAT releases the GIL) while the body runs; call ``stop`` until
    it ends once the body is done, and re-raise what it raised. A body ended by an exception
    (Ctrl-C, SIGTERM: NOTE [No solver takes a signal]) first calls ``cancel`` (the solve's deadline),
    so that ``work`` stops building its model too."""
    failed: list[BaseException] = []

    def target() -> None:
        try:
            work()
        except BaseException as error:  # re-raised in the caller's thread
            failed.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield
    except BaseException:
        cancel()
        raise
    finally:
        while thread.is_alive():  # a stop asked before the search began would be lost: ask again
            stop()
            thread.join(0.05)
    if failed:
        raise failed[0]


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
    options=("time_limit", "workers", "formulation"),
    reference="Jain et al. 2020, Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization",
)
