"""The child process of :mod:`remat.solver.graph.ilp.highs_search`: HiGHS's branch and cut
(``highspy``) on a CP-SAT model file, started from the model's solution hint.

Run as ``python highs_child.py MODEL RESULT END``: MODEL is a binary ``CpModelProto`` whose
constraints are all linear, RESULT the ``.npz`` to write, END the ``time.time()`` to stop by. It
imports nothing of remat (so it starts in well under a second) and writes RESULT whole (aside,
then renamed), so a parent that kills it never reads half an answer: each better bound as it
comes (status "running"), then the final answer.

``highspy`` is imported here only, never in a process that has loaded OR-Tools' solvers: each
ships its own HiGHS, and loading both fails with undefined symbols (``cp_model_pb2`` is plain
protobuf and loads none of OR-Tools' native code).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

# CP-SAT writes an unbounded side of a domain as the int64 extremes.
INFINITE = 2**62
# Constraints with this name are left out: they hold at every optimum and do not change the LP value
# (checkmate_model.FORCED_FREE says why; the same string, so that this file imports nothing of remat).
LEFT_OUT = "forced free"
# The environment variable in which the launcher passes its pid (highs_search.py sets it).
PARENT_VARIABLE = "REMAT_HIGHS_PARENT"


def read_model(path: str) -> dict:
    """The model's arrays: objective ``c`` (with ``offset`` and ``factor``: objective = factor *
    (c x + offset)), the CSR rows of ``A`` with ``row_lower``/``row_upper`` (less the constraints
    named :data:`LEFT_OUT`), the variables' bounds and the hint ``x0``. Raises ValueError for
    anything but integer variables, one-interval domains and plain linear constraints."""

    from ortools.sat import cp_model_pb2  # heavy: the child imports it only to read its model

    with open(path, "rb") as stream:
        proto = cp_model_pb2.CpModelProto.FromString(stream.read())
    if proto.HasField("floating_point_objective"):
        raise ValueError("a floating-point objective")
    n = len(proto.variables)
    col_lower = np.empty(n)
    col_upper = np.empty(n)
    for j, var in enumerate(proto.variables):
        domain = list(var.domain)  # (indexing the repeated field with -1 read 0 in protobuf 6.33)
        if len(domain) != 2:
            raise ValueError(f"variable {var.name} has a domain of {len(domain) // 2} intervals")
        col_lower[j], col_upper[j] = domain
    indices: list[int] = []
    values: list[int] = []
    starts = [0]
    row_lower: list[float] = []
    row_upper: list[float] = []
    for ct in proto.constraints:
        if ct.WhichOneof("constraint") != "linear" or len(ct.enforcement_literal):
            raise ValueError("a constraint that is not plain linear")
        if ct.name == LEFT_OUT:
            continue
        linear = ct.linear
        indices.extend(linear.vars)
        values.extend(linear.coeffs)
        starts.append(len(indices))
        domain = list(linear.domain)
        if len(domain) != 2:
            raise ValueError("a linear constraint whose domain has several intervals")
        row_lower.append(domain[0])
        row_upper.append(domain[1])
    if indices and min(indices) < 0:
        raise ValueError("a negated literal in a linear constraint")
    c = np.zeros(n)
    objective = proto.objective
    np.add.at(c, np.asarray(objective.vars, dtype=np.int64), np.asarray(objective.coeffs, dtype=float))
    x0 = np.zeros(n)
    x0[np.asarray(proto.solution_hint.vars, dtype=np.int64)] = np.asarray(proto.solution_hint.values, dtype=float)
    lower = np.asarray(row_lower, dtype=float)
    upper = np.asarray(row_upper, dtype=float)
    return {
        "c": c,
        "offset": float(objective.offset),
        "factor": float(objective.scaling_factor or 1.0),
        "A": (np.asarray(values, dtype=float), np.asarray(indices, dtype=np.int64), np.asarray(starts, dtype=np.int64)),
        "row_lower": np.where(lower <= -INFINITE, -np.inf, lower),
        "row_upper": np.where(upper >= INFINITE, np.inf, upper),
        "col_lower": col_lower,
        "col_upper": col_upper,
        "x0": x0,
    }


def solve(model: dict, end: float, progress=lambda answer: None) -> dict:
    """HiGHS on the model until ``end`` (a ``time.time()``), from the hint: the model status, the
    dual bound (in the objective's units, or NaN) and the best solution x (integers, or empty).
    ``progress`` gets the answer so far (status "running", no solution) when the bound rises."""
    import highspy  # heavy: only the child, which runs HiGHS, imports it

    n = len(model["c"])
    values, indices, starts = model["A"]
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, len(starts) - 1
    lp.col_cost_, lp.offset_ = model["c"], model["offset"]
    lp.col_lower_, lp.col_upper_ = model["col_lower"], model["col_upper"]
    lp.row_lower_ = np.where(np.isinf(model["row_lower"]), -highspy.kHighsInf, model["row_lower"])
    lp.row_upper_ = np.where(np.isinf(model["row_upper"]), highspy.kHighsInf, model["row_upper"])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = starts, indices, values
    lp.integrality_ = [highspy.HighsVarType.kInteger] * n
    highs = highspy.Highs()
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("time_limit", max(0.1, end - time.time()))
    highs.setOptionValue("mip_rel_gap", 0.0)  # "optimal" must mean proven (HiGHS's default stops at 0.01%)
    highs.setOptionValue("threads", 1)
    # It starts from the hint, so its feasibility-jump heuristic (before the root LP) is not needed:
    # without it the second round of root cuts on the ResNet-50 graph at 50% came ~5 s sooner.
    highs.setOptionValue("mip_heuristic_run_feasibility_jump", False)
    highs.passModel(lp)
    start = highspy.HighsSolution()
    start.col_value = list(model["x0"])
    start.value_valid = True
    highs.setSolution(start)
    best = [-np.inf]
    parent = os.getppid()

    def stop_now() -> bool:  # the end, or the parent gone (killed: nobody will read the answer)
        return time.time() >= end or os.getppid() != parent

    # HiGHS checks its own time limit only now and then (on the GPT-2 graph one round of cut
    # separation took 28 s, and it ended 6 s late): the interrupt callbacks, called far more
    # often, stop it at ``end`` (or once its parent is gone), and hand on each better bound, so a
    # killed child still has one.
    def on_mip(event) -> None:
        bound = event.data_out.mip_dual_bound
        if np.isfinite(bound) and bound > best[0]:
            best[0] = bound
            progress({"status": "running", "bound": model["factor"] * bound, "x": np.zeros(0, np.int64)})
        if stop_now():
            event.interrupt()

    def on_lp(event) -> None:
        if stop_now():
            event.interrupt()

    highs.cbMipInterrupt += on_mip
    highs.cbSimplexInterrupt += on_lp
    highs.run()
    if _stale_solution(highs, model):
        # NOTE [HiGHS's stale start]: HiGHS 1.16 can report "Optimal" with an objective below the
        # start's while getSolution() still returns the start it was given (seen where presolve
        # solves the whole model: random 6-node graphs, tests/solver/graph/test_highs_search.py).
        # The solution is then solved again without the start, which such a model takes at once.
        highs.clearSolver()
        highs.passModel(lp)
        highs.run()
    info = highs.getInfo()
    status = highs.modelStatusToString(highs.getModelStatus())
    found = info.primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible
    x = np.rint(np.asarray(highs.getSolution().col_value)).astype(np.int64) if found else np.zeros(0, np.int64)
    if found and _stale_solution(highs, model):
        status = "Time limit reached"  # its x is not the optimum it reports: a bound only, never "optimal"
    bound = max(info.mip_dual_bound, best[0])
    return {
        "status": status,
        "bound": model["factor"] * bound if np.isfinite(bound) else np.nan,
        "x": x,
    }


_TOLERANCE = 1e-9  # relative: HiGHS's objective against c x of its own (rounded) solution


def _objective(model: dict, x: np.ndarray) -> float:
    """c x + offset: the objective HiGHS minimises (before ``factor``)."""
    return float(model["c"] @ x + model["offset"])


def _stale_solution(highs, model: dict) -> bool:  # noqa: ANN001 - a highspy.Highs
    """Whether HiGHS's solution is worse than the objective it reports (NOTE [HiGHS's stale start])."""
    info = highs.getInfo()
    x = np.asarray(highs.getSolution().col_value)
    if len(x) != len(model["c"]) or not np.isfinite(info.objective_function_value):
        return False
    return _objective(model, x) > info.objective_function_value + _TOLERANCE * max(1.0, abs(_objective(model, x)))


def _die_with_parent() -> None:
    """On Linux, ask the kernel to SIGKILL this process when its parent dies. The interrupt
    callbacks check for a gone parent too, but HiGHS calls them only between steps (presolve or one
    LP can run for seconds without one), and a parent killed by SIGTERM (a front's solver process)
    has no time to kill its child: without this the child outlived a stopped ``remat pareto``."""
    # The launcher's pid, from the launcher: a parent that died while this process was starting
    # has left it a child of init already, and os.getppid() would not tell.
    parent = int(os.environ.get(PARENT_VARIABLE, os.getppid()))
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the callbacks' check remains
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def main(argv: list[str]) -> int:
    # A terminal's Ctrl-C reaches the whole process group, this child included: the parent owns
    # it and kills this process (NOTE [No solver takes a signal], remat/solver/deadline.py).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    model_path, result_path, end = argv[1], argv[2], float(argv[3])
    model = read_model(model_path)

    def write(answer: dict) -> None:
        aside = result_path + ".part.npz"
        np.savez(aside, **answer)
        os.replace(aside, result_path)

    write(solve(model, end, write))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
