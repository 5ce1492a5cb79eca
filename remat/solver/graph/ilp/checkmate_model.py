"""Checkmate's MILP (Jain et al. 2020) on OR-Tools, for the ``ilp`` and ``lp-rounding`` strategies.

Variables (names as in the paper), for an n-node graph with frontier-advancing stages:

* ``R[t, i]`` (binary, i <= t): node i is computed in stage t; ``R[t, t] = 1``.
* ``S[t, i]`` (binary, i < t): node i's output is held at the start of stage t.
* ``FREE[t, i, k]`` (binary, k <= t, i = k or i an input of k): i is freed right after
  computing k in stage t.
* ``U[t, k]`` (integer bytes / continuous): memory held right after computing k in stage t.

Constraints:

* dependencies: ``R[t, v] <= R[t, u] + S[t, u]`` for every edge (u, v), v <= t;
* keeping: ``S[t+1, i] <= R[t, i] + S[t, i]``;
* no duplicate: ``R[t, i] + S[t, i] <= 1`` (the simulator refuses to compute a held node; a
  recomputation of a held node is never useful, so this costs no optimality);
* FREE is exactly "R[t, k] and not S[t+1, i] and no consumer j > k of i computed in stage t"
  (Checkmate's num_hazards, written as one inequality per hazard, which is also a tighter LP);
* memory, Checkmate's recursion: ``U[t, 0] = sum_i S[t, i] M_i + R[t, 0] M_0`` and
  ``U[t, k] = U[t, k-1] - sum_i FREE[t, i, k-1] M_i + R[t, k] M_k``, ``U[t, k] <= budget``;
  with a node's transient overhead O_k (bytes live only while k is computed, the optional
  ``overhead`` of docs/model.md, "Graphs"): ``U[t, k] + O_k R[t, k] <= budget``;
* a node that cannot be recomputed (``recompute`` false) is computed in its own stage only:
  ``R[t, i] = 0`` for t > i, i.e. ``sum_t R[t, i] = 1``.

This U is *exactly* the simulator's memory right after each compute (the simulator measures
its peak there, including everything held, plus the node's overhead; frees happen after): see
:mod:`remat.solver.graph.stages`, whose ``plan_memory`` is the same recursion in Python; every decoded
schedule is checked by ``make_schedule`` to have simulator peak == max (U + O R) and simulator
time == objective.

Objective: ``sum_t sum_i time_i R[t, i]`` (milliseconds).

Building and searching it for the strategies, and the measured choice of backend:
:mod:`remat.solver.graph.ilp.checkmate_search`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import reduce
from typing import Any

from remat.schedules import GraphProfile
from remat.solver.deadline import Deadline, TimeUp, interruptible
from remat.solver.graph.stages import StagePlan, free_points

# Integer objective for CP-SAT: node times are scaled to integers with this many steps for the
# slowest node, rounded DOWN, so the solver's bound divided by the scale is a valid lower bound on
# the true milliseconds (the true cost of any plan is >= its rounded-down cost).
TIME_STEPS = 10**6
LP_TIME_SHARE = 0.85
# The name of the constraints that force FREE up to Checkmate's rule (FREE >= 1 - sum(hazards)).
# They keep the decoded frees exact, but no optimum needs them (without them FREE may only be
# smaller; raising it to the rule's value lowers U and keeps the cost, so the optimum is the
# same), and on the bundled graphs the LP value is the same without them: HiGHS's child leaves
# them out (~26k of the ResNet-50 graph's 158k rows; its second round of root cuts came ~10%
# sooner). See remat/solver/graph/ilp/highs_child.py.
FORCED_FREE = "forced free"


def cp_sat_solver(cp: Any, seconds: float, workers: int) -> Any:
    """A CP-SAT solver (``cp``: the ``cp_model`` module) for ``seconds`` with ``workers`` search
    threads that never takes a signal over (NOTE [No solver takes a signal], remat/solver/deadline.py)."""
    solver = cp.CpSolver()
    solver.parameters.max_time_in_seconds = float(seconds)
    solver.parameters.num_workers = max(1, int(workers))
    solver.parameters.catch_sigint_signal = False
    return solver


class CheckmateModel:
    """R, S, FREE, U over one backend. Fixed entries (R[t, t] = 1, S[0, i] = 0) are Python ints."""

    def __init__(
        self,
        profile: GraphProfile,
        budget: int,
        backend: str,
        relax: bool = False,
        minimize_peak: bool = False,
        deadline: Deadline | None = None,
    ):
        # Building is Python loops over O(n^2) variables (seconds on a few hundred nodes): it
        # checks the deadline once per stage, so a time limit also bounds the building.
        self.deadline = deadline or Deadline(float("inf"))
        self.phase = "building the LP relaxation" if relax else f"building the {backend} model"
        self.profile = profile
        self.backend = backend
        self.relax = relax
        self._units(budget, minimize_peak)
        self._solver_model()
        self.count = 0
        self.R: dict[tuple[int, int], Any] = {}
        self.S: dict[tuple[int, int], Any] = {}
        self.FREE: dict[tuple[int, int, int], Any] = {}
        self.U: dict[tuple[int, int], Any] = {}
        self._stage_variables()
        for t in range(profile.size):
            self.deadline.check(self.phase)
            self._stage_constraints(t)
            self._free_constraints(t)
            self._memory_constraints(t)
        self._objective(minimize_peak)

    def _units(self, budget: int, minimize_peak: bool) -> None:
        """Memory in units of the gcd of the sizes and overheads (exact, and smaller coefficients),
        the memory cap in those units, and the node times as integer steps (:data:`TIME_STEPS`)."""
        profile = self.profile
        sizes = [node.size for node in profile.nodes]
        overheads = [node.overhead for node in profile.nodes]
        self.unit = reduce(math.gcd, [s for s in sizes + overheads if s > 0], 0) or 1
        self.mem = [s // self.unit for s in sizes]
        self.over = [o // self.unit for o in overheads]
        self.cap = budget // self.unit
        if minimize_peak:
            self.cap = sum(self.mem) + max(self.over, default=0)
        slowest = max((node.time_ms for node in profile.nodes), default=0.0)
        self.scale = TIME_STEPS / slowest if slowest > 0 else 1.0
        self.cost = [math.floor(node.time_ms * self.scale) for node in profile.nodes]

    def _solver_model(self) -> None:
        """The backend's empty model (``self.m``; ``self.cp`` the CP-SAT module for CP-SAT).
        OR-Tools is imported here: a heavy import that the rest of remat.solver never pays."""
        backend, relax = self.backend, self.relax
        if backend == "cp-sat":
            from ortools.sat.python import cp_model

            self.cp = cp_model
            self.m = cp_model.CpModel()
            return
        from ortools.linear_solver import pywraplp

        name = {"scip": "SCIP", "highs": "HIGHS"}[backend]
        if relax:
            # HiGHS's LP solver: 3.4 s on the U-Net graph's relaxation where GLOP did not
            # finish in 60 s and PDLP took 70 s (same value, 46842.4 ms).
            name = "HIGHS_LP"
        self.m = pywraplp.Solver.CreateSolver(name)
        if self.m is None:
            raise RuntimeError(f"OR-Tools has no {name} solver")
        self.m.SuppressOutput()
        if name == "SCIP":  # NOTE [No solver takes a signal] (remat/solver/deadline.py)
            self.m.SetSolverSpecificParametersAsString("misc/catchctrlc = FALSE")
        if relax:
            # Keeps HiGHS from printing its banner on stdout at each solve.
            self.m.SetSolverSpecificParametersAsString("output_flag=false")

    def _stage_variables(self) -> None:
        """R[t, i] (i <= t; fixed to 1 on the diagonal, to 0 for a node that is computed once) and S[t, i] (i < t)."""
        profile = self.profile
        for t in range(profile.size):
            self.deadline.check(self.phase)
            for i in range(t + 1):
                if i == t:
                    self.R[t, i] = 1
                elif not profile.nodes[i].recompute:
                    self.R[t, i] = 0  # computed in its own stage only
                else:
                    self.R[t, i] = self._bool(f"R[{t},{i}]")
            for i in range(t):
                self.S[t, i] = self._bool(f"S[{t},{i}]")

    def _stage_constraints(self, t: int) -> None:
        """Stage t: a node is computed or held, not both; a computed node's inputs are there; what
        stage t+1 holds was computed or held in stage t."""
        add = self._add
        n = self.profile.size
        preds = self.profile.predecessors
        for i in range(t):
            add(self.R[t, i] + self.S[t, i] <= 1)
        for v in range(t + 1):
            for u in preds[v]:
                add(self.R[t, v] <= self.R[t, u] + self.S[t, u])
        if t + 1 < n:
            for i in range(t + 1):
                add(self.S[t + 1, i] <= self.R[t, i] + (self.S[t, i] if i < t else 0))

    def _free_constraints(self, t: int) -> None:
        """FREE[t, i, k]: node i's output is freed after computing k in stage t, exactly when no
        hazard keeps it (Checkmate's rule; the forcing half is named :data:`FORCED_FREE`)."""
        add = self._add
        n = self.profile.size
        preds = self.profile.predecessors
        succs = self.profile.successors
        for k in range(t + 1):
            for i in (*preds[k], k):
                free = self._bool(f"FREE[{t},{i},{k}]")
                self.FREE[t, i, k] = free
                hazards = [1 - self.R[t, k]] if k != t else []
                if t + 1 < n:
                    hazards.append(self.S[t + 1, i])
                hazards += [self.R[t, j] for j in succs[i] if k < j <= t]
                for h in hazards:
                    add(free + h <= 1)
                add(free >= 1 - sum(hazards), FORCED_FREE)

    def _memory_constraints(self, t: int) -> None:
        """U[t, k]: memory (in units) after computing k in stage t, within the cap with k's transient."""
        add = self._add
        preds = self.profile.predecessors
        previous = None
        for k in range(t + 1):
            u = self._int(0, self.cap, f"U[{t},{k}]")
            self.U[t, k] = u
            if previous is None:
                add(u == sum(self.S[t, i] * self.mem[i] for i in range(t)) + self.R[t, 0] * self.mem[0])
            else:
                freed = sum(self.FREE[t, i, k - 1] * self.mem[i] for i in (*preds[k - 1], k - 1))
                add(u == previous - freed + self.R[t, k] * self.mem[k])
            if self.over[k] and not isinstance(self.R[t, k], int):
                add(u + self.over[k] * self.R[t, k] <= self.cap)
            elif self.over[k] and self.R[t, k] == 1:
                add(u <= self.cap - self.over[k])
            previous = u

    def _objective(self, minimize_peak: bool) -> None:
        """The recompute cost in time steps, or (``minimize_peak``) the largest op peak in units."""
        add = self._add
        n = self.profile.size
        if minimize_peak:
            self.peak = self._int(0, self.cap, "peak")
            for (t, k), u in self.U.items():
                add(self.peak >= u + self.over[k] * self.R[t, k])
            self.m.Minimize(self.peak)
            self.scale = 1.0 / self.unit  # so that bound / scale is in bytes
        else:
            objective = sum(self.cost[i] * self.R[t, i] for t in range(n) for i in range(t) if self.cost[i] > 0)
            self.m.Minimize(objective)

    def _bool(self, name: str) -> Any:
        self.count += 1
        if self.backend == "cp-sat":
            return self.m.NewBoolVar(name)
        return self.m.NumVar(0.0, 1.0, name) if self.relax else self.m.BoolVar(name)

    def _int(self, lb: int, ub: int, name: str) -> Any:
        self.count += 1
        if self.backend == "cp-sat":
            return self.m.NewIntVar(lb, ub, name)
        return self.m.NumVar(float(lb), float(ub), name)

    def _add(self, constraint: Any, name: str | None = None) -> None:
        if isinstance(constraint, bool):
            if not constraint:
                raise AssertionError("trivially false constraint")
            return
        added = self.m.Add(constraint)
        if name is not None and self.backend == "cp-sat":
            added.WithName(name)

    def hint(self, plan: StagePlan) -> None:
        """Give the solver a complete solution: R, S from the plan; FREE and U by Checkmate's rules
        (replacing any earlier hint, so one built model can be searched again from a better plan)."""
        n = self.profile.size
        if self.backend == "cp-sat":
            self.m.ClearHints()
        values: list[tuple[Any, int]] = []
        for (t, i), var in self.R.items():
            if not isinstance(var, int):
                values.append((var, int(i in plan.R[t])))
        for (t, i), var in self.S.items():
            values.append((var, int(i in plan.S[t])))
        for t in range(n):
            self.deadline.check("giving the warm start to the solver")
            after, _ = free_points(self.profile, plan, t)
            freed = {(i, k) for k, nodes in after.items() for i in nodes}
            held = sum(self.mem[i] for i in plan.S[t])
            for k in range(t + 1):
                for i in (*self.profile.predecessors[k], k):
                    values.append((self.FREE[t, i, k], int((i, k) in freed)))
                if k in plan.R[t]:
                    held += self.mem[k]
                values.append((self.U[t, k], held))
                held -= sum(self.mem[i] for i in after.get(k, ()))
        if self.backend == "cp-sat":
            for var, value in values:
                self.m.AddHint(var, value)
        else:
            self.m.SetHint([v for v, _ in values], [float(x) for _, x in values])

    def stop(self) -> None:
        """Ask a CP-SAT search running in another thread to end now (it returns its best so far)."""
        solver = getattr(self, "_solver", None)
        if solver is not None:
            solver.StopSearch()

    def value(self, var: Any) -> float:
        if isinstance(var, int):
            return float(var)
        if self.backend == "cp-sat":
            return float(self._solver.Value(var))
        return var.solution_value()

    def solve(self, workers: int, deadline: Deadline | None = None) -> tuple[str, float | None, float]:
        """Run the backend until ``deadline`` (default: the building deadline); return (status,
        bound in scaled units or None, seconds)."""
        time_limit = (deadline or self.deadline).left()
        if time_limit <= 0:
            raise TimeUp("the LP solve" if self.relax else f"the {self.backend} search")
        start = time.perf_counter()
        if self.backend == "cp-sat":
            solver = cp_sat_solver(self.cp, time_limit, workers)
            self._solver = solver  # before the search, so that another thread can stop it
            code = interruptible(lambda: solver.Solve(self.m), solver.StopSearch)
            seconds = time.perf_counter() - start
            status = {
                self.cp.OPTIMAL: "optimal",
                self.cp.FEASIBLE: "feasible",
                self.cp.INFEASIBLE: "infeasible",
            }.get(code, "unknown")
            bound = solver.BestObjectiveBound() if status in ("optimal", "feasible") else None
            if status == "unknown":
                bound = solver.BestObjectiveBound()
                bound = bound if math.isfinite(bound) else None
            return status, bound, seconds
        from ortools.linear_solver import pywraplp  # heavy: imported only where a model is solved (see _solver_model)

        # HiGHS overran its own limit by ~2 s of 12 on the ResNet-50 graph's LP on a loaded machine
        # (benchmarks/time_limits.py): it gets 85% of what is left, so the whole solve keeps its limit.
        self.m.SetTimeLimit(max(1, int(LP_TIME_SHARE * time_limit * 1000)))  # milliseconds; 0 = no limit
        if workers > 1 and not self.relax:
            self.m.SetNumThreads(int(workers))
        code = interruptible(self.m.Solve, self.m.InterruptSolve)
        seconds = time.perf_counter() - start
        status = {
            pywraplp.Solver.OPTIMAL: "optimal",
            pywraplp.Solver.FEASIBLE: "feasible",
            pywraplp.Solver.INFEASIBLE: "infeasible",
        }.get(code, "unknown")
        bound = None
        if status in ("optimal", "feasible"):
            bound = self.m.Objective().Value() if self.relax else self.m.Objective().BestBound()
        return status, bound, seconds

    def plan(self, value: Callable[[Any], float] | None = None) -> StagePlan:
        """The plan in the solver's values, or in ``value(var)`` (e.g. another solver's)."""
        value = value or self.value
        n = self.profile.size
        R = tuple(frozenset(i for i in range(t + 1) if value(self.R[t, i]) > 0.5) for t in range(n))
        S = tuple(frozenset(i for i in range(t) if value(self.S[t, i]) > 0.5) for t in range(n))
        return StagePlan(R, S)

    def free_matches(self, plan: StagePlan) -> bool:
        """True iff every FREE[t, i, k] equals "i is freed right after k" in the decoded ops."""
        for t in range(self.profile.size):
            after, _ = free_points(self.profile, plan, t)
            freed = {(i, k) for k, nodes in after.items() for i in nodes}
            for (tt, i, k), var in self.FREE.items():
                if tt == t and (self.value(var) > 0.5) != ((i, k) in freed):
                    return False
        return True

    def memory(self, plan: StagePlan) -> dict[tuple[int, int], int]:
        return {(t, k): round(self.value(self.U[t, k])) * self.unit for t in range(len(plan.R)) for k in plan.R[t]}
