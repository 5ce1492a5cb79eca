"""HiGHS's branch and cut on Checkmate's model, for the ``ilp`` strategy: a bound, sometimes a plan.

Why HiGHS beside CP-SAT. On the ResNet-50 graph at 50% of its store-all peak, CP-SAT's proven bound
rose only from the LP value 16871.4 ms to 16881.0 ms in 600 s (8 workers, 2 cores); HiGHS's root
cuts (one core, started from the hierarchical plan) reach 16882.7 ms in ~40 s,
which puts the hierarchical plan (17050.7 ms) within 1% of the bound. On the U-Net graph at 70%
HiGHS proves the optimum in 15 s. Its own plans are rarely better than CP-SAT's; its bound is the
point (measurements: docs/strategies.md).

Why a child process (:mod:`remat.solver.graph.ilp.highs_child`). ``highspy`` cannot share a process
with OR-Tools: each loads its own HiGHS, and loading both fails with undefined symbols. A child
also keeps the strategy's time limit whatever HiGHS does: it is killed. The model travels as
CP-SAT's own binary model file, hint included, so the child solves exactly the model CP-SAT
does, from the same start.

A plan decoded from HiGHS's solution is checked like every other (``StagePlan.check``, exact peak
within the budget) and dropped if it fails (HiGHS works in floating point with tolerances).
Units: bytes, milliseconds, seconds.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from remat.schedules import GraphProfile, ScheduleError
from remat.solver.deadline import Deadline, TimeUp
from remat.solver.graph.ilp.highs_child import PARENT_VARIABLE
from remat.solver.graph.stages import StagePlan, plan_peak

CHILD = Path(__file__).with_name("highs_child.py")
# HiGHS is told to stop this long before its deadline (to write its answer). Its callbacks stop it
# at that time (its own clock checks can be 28 s apart), and the child is killed only at ``kill_at``
# (default: GRACE_SECONDS after the deadline); killed, it gives the last bound it wrote.
HEADROOM_SECONDS = 0.5
GRACE_SECONDS = 1.0
# With less than this left after the headroom, HiGHS is not started (its start-up alone is ~1 s).
MINIMUM_SECONDS = 1.0
# HiGHS's model status, as its modelStatusToString writes it.
_STATUS = {
    "Optimal": "optimal",
    "Time limit reached": "time limit",
    "Interrupted by user": "time limit",  # its callbacks stop it at the deadline (highs_child.py)
    "Infeasible": "infeasible",
}


@dataclass(frozen=True)
class BranchAndCut:
    """What HiGHS found before its deadline.

    Attributes:
        status: "optimal" (proven), "time limit", "infeasible", "failed", "killed" (past its
            deadline and the grace; its bound is the last it wrote), "gave up" (no bound in
            time) or "not run".
        lower_bound_ms: proven lower bound on a frontier-advancing schedule's time (ms), or None.
        plan: HiGHS's best plan, checked and within the budget, or None.
        seconds: wall time from starting the child to its answer (seconds).
        detail: why there is no answer (the child's last error line), or None.
    """

    status: str
    lower_bound_ms: float | None
    plan: StagePlan | None
    seconds: float
    detail: str | None = None


def branch_and_cut(
    model: Any,
    start: StagePlan | None,
    budget: int,
    deadline: Deadline,
    kill_at: Deadline | None = None,
    give_up_after: float | None = None,
) -> BranchAndCut:
    """Run HiGHS on ``model`` (a CP-SAT :class:`~remat.solver.graph.ilp.checkmate_model` model) from
    ``start`` until ``deadline``; blocks until the child answers, or kills it at ``kill_at``
    (default: :data:`GRACE_SECONDS` after ``deadline``), or after ``give_up_after`` seconds if it
    has no bound by then (its root LP unsolved: the time is better spent elsewhere)."""
    began = time.perf_counter()
    if deadline.left() <= HEADROOM_SECONDS + MINIMUM_SECONDS:
        return BranchAndCut("not run", None, None, 0.0, "no time was left for it")
    if start is not None:
        model.deadline = deadline
        try:
            model.hint(start)
        except TimeUp:
            seconds = time.perf_counter() - began
            return BranchAndCut("not run", None, None, seconds, "the time ran out giving it its start")
    with tempfile.TemporaryDirectory(prefix="remat-highs-") as folder:
        model_path, result_path = Path(folder, "model.pb"), Path(folder, "result.npz")
        model.m.ExportToFile(str(model_path))
        end = time.time() + deadline.left() - HEADROOM_SECONDS
        wait = kill_at.left() if kill_at is not None else deadline.left() + GRACE_SECONDS
        command = [sys.executable, str(CHILD), str(model_path), str(result_path), repr(end)]
        environment = {**os.environ, PARENT_VARIABLE: str(os.getpid())}
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environment
        )
        try:
            errors, stopped = _wait(child, lambda: _has_bound(result_path), wait, give_up_after)
        except BaseException:  # Ctrl-C, SIGTERM: the child must not outlive the solve
            child.kill()
            child.communicate()
            raise
        if stopped is not None:
            lower = _bound_ms(model, _read(result_path)[1]) if result_path.exists() else None
            return BranchAndCut(stopped[0], lower, None, time.perf_counter() - began, stopped[1])
        if child.returncode != 0 or not result_path.exists():
            lines = errors.decode(errors="replace").strip().splitlines() or [f"exit status {child.returncode}"]
            return BranchAndCut("failed", None, None, time.perf_counter() - began, lines[-1])
        said, bound, x = _read(result_path)
    seconds = time.perf_counter() - began
    status = _STATUS.get(said, "failed")
    lower = _bound_ms(model, bound)
    plan = _plan(model, x, budget) if len(x) else None
    if status == "optimal" and plan is None:
        status = "time limit"  # an optimum we cannot use is only a bound
    detail = None
    if status == "failed":
        detail = f"HiGHS ended with '{said}'"
    elif lower is None and status != "infeasible":
        detail = "no bound yet (its root LP was not solved in time)"
    return BranchAndCut(status, lower, plan, seconds, detail)


def _wait(
    child: subprocess.Popen, has_bound: Callable[[], bool], wait: float, give_up_after: float | None
) -> tuple[bytes, tuple[str, str] | None]:
    """The child's stderr once it ends, and None; or, having killed it, (status, why): "killed"
    past ``wait`` seconds, or "gave up" with no bound (``has_bound``) after ``give_up_after``."""
    began = time.perf_counter()
    try:
        if give_up_after is not None and give_up_after < wait:
            try:
                return child.communicate(timeout=give_up_after)[1], None
            except subprocess.TimeoutExpired:
                if not has_bound():
                    child.kill()
                    child.communicate()
                    return b"", ("gave up", f"no bound after {give_up_after:.0f} s (its root LP unsolved)")
        return child.communicate(timeout=max(0.0, wait - (time.perf_counter() - began)))[1], None
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return b"", ("killed", "it ran past its time")


def _has_bound(path: Path) -> bool:
    """Whether the child has written a bound above 0 recomputation steps (store-all's time): before
    its root LP, HiGHS's bound is 0, which says nothing."""
    return path.exists() and _read(path)[1] > 0


def _read(path: Path) -> tuple[str, float, np.ndarray]:
    """The child's answer: HiGHS's status, its bound (objective units, NaN if none) and x."""
    with np.load(path) as answer:
        return str(answer["status"]), float(answer["bound"]), answer["x"]


def _bound_ms(model: Any, bound: float) -> float | None:
    """The proven bound in ms: the objective counts recomputations in integer steps (rounded
    down), so any schedule's steps are an integer >= the bound, less HiGHS's tolerance."""
    if not math.isfinite(bound):
        return None
    steps = math.ceil(bound - 1e-6 * max(1.0, abs(bound)))
    return model.profile.store_all_compute_ms + max(0, steps) / model.scale


def _plan(model: Any, x: np.ndarray, budget: int) -> StagePlan | None:
    """The plan in HiGHS's solution, or None if it is not a valid plan within ``budget`` bytes."""

    def value(var: Any) -> float:
        return float(var) if isinstance(var, int) else float(x[var.Index()])

    plan = model.plan(value)
    profile: GraphProfile = model.profile
    try:
        plan.check(profile)
    except ScheduleError:
        return None
    return plan if plan_peak(profile, plan) <= budget else None


__all__ = ["BranchAndCut", "branch_and_cut", "GRACE_SECONDS"]
