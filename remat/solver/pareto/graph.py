"""The memory/compute front of a graph profile across strategies: many budgets, solved in parallel.

:func:`graph_front` solves each (strategy, budget) pair in a process pool (the ILP is CPU-bound
Python + C++, so processes, not threads), shows a tqdm progress bar on stderr, and returns one
:class:`FrontPoint` per solved pair, each with its proven lower bound and gap when the strategy
gives one. A (strategy, budget) pair that gives no schedule is kept as a :class:`FailedPoint`
with its one-line message, an unexpected exception in one solve included (it fails that point,
not the whole front). Above the registry (it solves strategies by name); no strategy imports it.
Units: bytes, ms, seconds.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from remat.schedules import GraphProfile, RematError
from remat.solver.front import FrontPoint
from remat.solver.graph.baselines import store_all_plan
from remat.solver.graph.stages import memory_lower_bound, plan_peak
from remat.solver.registry import get_strategy, solve

TIME_LIMITED = ("ilp", "lp-rounding")


@dataclass(frozen=True)
class FailedPoint:
    """A (strategy, budget bytes) pair without a schedule: ``message`` says why; ``unexpected``
    marks an exception that is not a user-facing remat error (a bug to report)."""

    strategy: str
    budget: int
    message: str
    unexpected: bool = False


@dataclass(frozen=True)
class GraphFront:
    """The solved points (iterating over a front gives them), the pairs that failed, and the
    solvers' notes as (strategy, budget bytes, note), e.g. a time limit too short to beat a
    baseline."""

    points: tuple[FrontPoint, ...]
    failed: tuple[FailedPoint, ...] = ()
    notes: tuple[tuple[str, int, str], ...] = ()

    def __iter__(self) -> Iterator[FrontPoint]:
        return iter(self.points)


def default_budgets(profile: GraphProfile, count: int = 10) -> list[int]:
    """``count`` budgets (bytes) evenly spaced from the provable lower bound (the largest node plus
    its inputs) to the store-all peak, both included."""
    low = memory_lower_bound(profile)
    high = plan_peak(profile, store_all_plan(profile))
    if count <= 1 or high <= low:
        return [high]
    return sorted({round(low + (high - low) * k / (count - 1)) for k in range(count)})


def _solve_point(profile_dict: dict[str, Any], strategy: str, budget: int, time_limit: float, cp_workers: int):
    profile = GraphProfile.from_dict(profile_dict)
    options: dict[str, Any] = {}
    if strategy in TIME_LIMITED:
        options["time_limit"] = time_limit
    if strategy == "ilp":
        options["workers"] = cp_workers
    try:
        schedule = solve(profile, budget, strategy, **options)
    except RematError as error:
        return strategy, budget, None, FailedPoint(strategy, budget, str(error)), None
    except Exception as error:  # noqa: BLE001 - one solve's bug fails its point, not the front
        return strategy, budget, None, FailedPoint(strategy, budget, f"{type(error).__name__}: {error}", True), None
    p = schedule.predicted
    return (
        strategy,
        budget,
        FrontPoint(
            strategy=strategy,
            budget=budget,
            peak_memory=p.peak_memory,
            compute_ms=p.compute_ms,
            recompute_ms=p.recompute_ms,
            checkpoints=None,
            lower_bound_ms=schedule.extra.get("lower_bound_ms"),
            gap=schedule.extra.get("gap"),
        ),
        None,
        schedule.extra.get("note"),
    )


def graph_front(
    profile: GraphProfile,
    strategies: list[str],
    budgets: list[int] | None = None,
    time_limit: float = 60.0,
    workers: int = 2,
    progress: bool = True,
) -> GraphFront:
    """Solve every strategy at every budget (bytes; default :func:`default_budgets`) with
    ``workers`` processes; ``time_limit`` seconds per ILP / LP solve (the whole solve, see
    :mod:`remat.solver.deadline`). Returns the points found and the pairs that failed, each
    sorted by strategy then budget."""
    for name in strategies:
        get_strategy(name, "graph")  # unknown names fail before any work starts
    budgets = default_budgets(profile) if budgets is None else [int(b) for b in budgets]
    tasks = [(name, budget) for name in strategies for budget in budgets]
    workers = max(1, int(workers))
    # CP-SAT threads per ILP: share the machine between the processes.
    cp_workers = max(1, 8 // workers)
    data = profile.to_dict()
    results = []
    bar = None
    if progress:
        bar = tqdm(total=len(tasks), desc=f"front {profile.name}", unit="solve", file=sys.stderr, disable=None)
    try:
        if workers == 1:
            for name, budget in tasks:
                results.append(_solve_point(data, name, budget, time_limit, cp_workers))
                if bar:
                    bar.update()
        else:
            pool = ProcessPoolExecutor(max_workers=workers)
            try:
                futures = {pool.submit(_solve_point, data, n, b, time_limit, cp_workers): (n, b) for n, b in tasks}
                for future in as_completed(futures):
                    results.append(_outcome(future, *futures[future]))
                    if bar:
                        bar.update()
            except BaseException:  # Ctrl-C, SIGTERM: the solves must not outlive the front
                _stop(pool)
                raise
            pool.shutdown()
    finally:
        if bar:
            bar.close()
    order = {name: index for index, name in enumerate(strategies)}
    points = sorted((r[2] for r in results if r[2] is not None), key=lambda p: (order[p.strategy], p.budget))
    failed = sorted((r[3] for r in results if r[3] is not None), key=lambda f: (order[f.strategy], f.budget))
    notes = sorted(((r[0], r[1], r[4]) for r in results if r[4]), key=lambda n: (order[n[0]], n[1]))
    return GraphFront(tuple(points), tuple(failed), tuple(notes))


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the pool now (NOTE [No solver takes a signal], remat/solver/deadline.py): the solves not
    started are cancelled and the running ones' processes terminated, instead of ``shutdown``'s
    wait for every solve in the queue (their HiGHS children stop when they see their parent gone)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(1.0)
    # The pool's manager thread sees its workers gone and closes its wake-up pipe; if it is still
    # doing so when the interpreter exits, concurrent.futures' atexit hook writes to that pipe as it
    # closes and prints "OSError: [Errno 9] Bad file descriptor" after the CLI's one line. Waiting
    # for the thread here orders the two.
    if manager is not None:
        manager.join(2.0)


def _outcome(future, name: str, budget: int):
    """A pool future's result; a worker that died (or could not return) fails only its point."""
    try:
        return future.result()
    except Exception as error:  # noqa: BLE001 - e.g. BrokenProcessPool: report it with the point
        return name, budget, None, FailedPoint(name, budget, f"{type(error).__name__}: {error}", True), None
