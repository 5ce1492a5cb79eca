"""Moccasin's retention-interval model (Bartan et al. 2023) on OR-Tools CP-SAT, for ``ilp --formulation moccasin``.

Instead of Checkmate's O(n^2) stage variables, each node v gets up to ``C_v`` computations
(``copies``); copy c is an optional interval of *steps*: it is computed at step ``s[v, c]`` and
held through step ``e[v, c]`` (freed right after the compute of that step). A step computes
exactly one node, so the op list is: for each step in order, compute its node, then free every
copy whose interval ends there. Variables and constraints (sizes in units of the gcd):

* ``a[v, c]`` (bool): copy c of v is computed; ``a[v, 0] = 1``, ``a[v, c+1] <= a[v, c]``;
  a node with ``recompute`` false has one copy; copies of one node do not overlap
  (``e[v, c] < s[v, c+1]``: the simulator refuses to compute a held node);
* one compute per step: the unit intervals ``[s, s+1)`` of the present copies do not overlap;
* inputs held: for each edge (u, v) and present copy (v, c), some present copy (u, c') has
  ``s[u, c'] < s[v, c] <= e[u, c']`` (a bool per pair, O(E C^2) in all);
* the last node (n-1) is computed last, once (the simulator's rule), at step (number of
  computations - 1), so no step is empty;
* memory: ``AddCumulative`` of the intervals ``[s, e+1)`` with demand ``size_v``, plus the unit
  intervals with demand ``overhead_v``, capacity = budget. At a step this is exactly the
  simulator's memory right after that step's compute (everything held, the new output, the
  node's transient overhead): the frees of a step happen after its compute.

Objective: the milliseconds of the recomputations (copies c >= 1), costs scaled to integers
like :mod:`remat.solver.graph.ilp.checkmate_model` (rounded down, so the bound stays a bound).

The search space is every op order in which each node is computed at most ``C_v`` times
(``copies``, default 2), not only Checkmate's frontier-advancing stages: with enough copies
its optimum is the optimum over all schedules, which can be lower than Checkmate's. Every
decoded schedule is checked by the simulator (``make_schedule``). Units: bytes, milliseconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce

from remat.schedules import GraphProfile, Op
from remat.solver.deadline import Deadline, TimeUp, as_deadline, interruptible
from remat.solver.graph.ilp.checkmate_model import TIME_STEPS, cp_sat_solver

DEFAULT_COPIES = 2


@dataclass(frozen=True)
class IntervalResult:
    """CP-SAT's answer: status, ops (or None), the peak of its intervals (bytes), the proven lower
    bound and the cost (ms), search seconds and the number of model variables."""

    status: str
    ops: list[Op] | None
    peak_memory: int | None
    lower_bound_ms: float | None
    objective_ms: float | None
    solve_seconds: float
    variables: int


class _Intervals:
    """The CP-SAT model: a, s, e per copy; built once, searched from a hint."""

    def __init__(self, profile: GraphProfile, budget: int, copies: Sequence[int], deadline: Deadline):
        from ortools.sat.python import cp_model  # heavy: imported only where a model is built

        self.cp, self.m, self.profile, self.copies = cp_model, cp_model.CpModel(), profile, list(copies)
        n = profile.size
        nodes = profile.nodes
        unit = reduce(math.gcd, [x for nd in nodes for x in (nd.size, nd.overhead) if x > 0], 0) or 1
        self.unit, self.horizon = unit, sum(self.copies)
        slowest = max((nd.time_ms for nd in nodes), default=0.0)
        self.scale = TIME_STEPS / slowest if slowest > 0 else 1.0
        self.a, self.s, self.e = {}, {}, {}
        units, sizes, demands = [], [], []
        for v in range(n):
            deadline.check("building the moccasin model")
            for c in range(self.copies[v]):
                a = self.m.NewConstant(1) if c == 0 else self.m.NewBoolVar(f"a[{v},{c}]")
                s = self.m.NewIntVar(0, self.horizon - 1, f"s[{v},{c}]")
                e = self.m.NewIntVar(0, self.horizon - 1, f"e[{v},{c}]")
                length = self.m.NewIntVar(1, self.horizon, f"len[{v},{c}]")
                held = self.m.NewOptionalIntervalVar(s, length, e + 1, a, f"held[{v},{c}]")
                step = self.m.NewOptionalFixedSizeIntervalVar(s, 1, a, f"step[{v},{c}]")
                self.a[v, c], self.s[v, c], self.e[v, c] = a, s, e
                units.append(step)
                sizes.append((held, nodes[v].size // unit))
                demands.append((step, nodes[v].overhead // unit))
                if c > 0:
                    self.m.AddImplication(a, self.a[v, c - 1])
                    self.m.Add(self.e[v, c - 1] < s).OnlyEnforceIf(a)
        self.m.AddNoOverlap(units)
        pairs = [x for x in sizes + demands if x[1] > 0]
        self.m.AddCumulative([i for i, _ in pairs], [d for _, d in pairs], budget // unit)
        self._inputs(deadline)
        last = self.s[n - 1, 0]
        # no empty steps (the last node's step is the number of computes - 1): breaks the symmetry
        # of shifted schedules, which otherwise kept CP-SAT from proving 6-node optima in 10 s
        self.m.Add(last == sum(self.a.values()) - 1)
        for (v, c), s in self.s.items():
            if v != n - 1:
                self.m.Add(s < last).OnlyEnforceIf(self.a[v, c])
        costs = {v: math.floor(nodes[v].time_ms * self.scale) for v in range(n)}
        self.m.Minimize(sum(costs[v] * a for (v, c), a in self.a.items() if c > 0 and costs[v] > 0))

    def _inputs(self, deadline: Deadline) -> None:
        """Each present copy of v finds every input u held: one bool per (copy of u, copy of v)."""
        for u, v in self.profile.edges:
            deadline.check("building the moccasin model")
            for c in range(self.copies[v]):
                options = []
                for d in range(self.copies[u]):
                    z = self.m.NewBoolVar(f"z[{u},{d},{v},{c}]")
                    self.m.AddImplication(z, self.a[u, d])
                    self.m.Add(self.s[u, d] < self.s[v, c]).OnlyEnforceIf(z)
                    self.m.Add(self.s[v, c] <= self.e[u, d]).OnlyEnforceIf(z)
                    options.append(z)
                self.m.AddBoolOr(options).OnlyEnforceIf(self.a[v, c])

    def hint(self, ops: Sequence[Op]) -> None:
        """Hint a, s, e from an op list (a node computed more often than its copies: no hint)."""
        start, end, count = {}, {}, {}
        step = -1
        for name, v in ops:
            if name == "compute":
                step += 1
                c = count.get(v, 0)
                count[v] = c + 1
                start[v, c] = step
            else:
                end[v, count[v] - 1] = step
        if any(count[v] > self.copies[v] for v in count):
            return
        for (v, c), a in self.a.items():
            present = (v, c) in start
            if c > 0:
                self.m.AddHint(a, int(present))
            if present:
                self.m.AddHint(self.s[v, c], start[v, c])
                self.m.AddHint(self.e[v, c], end.get((v, c), step))

    def stop(self) -> None:
        """Ask a search running in another thread to end now (it returns its best so far)."""
        solver = getattr(self, "_solver", None)
        if solver is not None:
            solver.StopSearch()

    def search(self, deadline: Deadline, workers: int) -> IntervalResult:
        left = deadline.left()
        if left <= 0:
            raise TimeUp("the moccasin search")
        solver = cp_sat_solver(self.cp, left, workers)
        self._solver = solver  # before the search, so that another thread can stop it
        start = time.perf_counter()
        code = interruptible(lambda: solver.Solve(self.m), solver.StopSearch)
        seconds = time.perf_counter() - start
        names = {self.cp.OPTIMAL: "optimal", self.cp.FEASIBLE: "feasible", self.cp.INFEASIBLE: "infeasible"}
        status = names.get(code, "unknown")
        bound = solver.BestObjectiveBound()
        lower = self.profile.store_all_compute_ms + bound / self.scale if math.isfinite(bound) else None
        if status not in ("optimal", "feasible"):
            return IntervalResult(status, None, None, lower if status == "unknown" else None, None, seconds, 0)
        ops, peak = self._decode(solver)
        cost = sum(self.profile.nodes[v].time_ms for name, v in ops if name == "compute")
        return IntervalResult(status, ops, peak, lower, cost, seconds, len(self.m.Proto().variables))

    def _decode(self, solver) -> tuple[list[Op], int]:
        """The op list (compute at s, free after the compute at e) and the intervals' own peak."""
        present = [(v, c) for (v, c), a in self.a.items() if solver.Value(a)]
        spans = {k: (solver.Value(self.s[k]), solver.Value(self.e[k])) for k in present}
        nodes = self.profile.nodes
        ops: list[Op] = []
        peak = 0
        order = sorted(present, key=lambda k: spans[k][0])
        for i, (v, c) in enumerate(order):
            step = spans[v, c][0]
            following = spans[order[i + 1]][0] if i + 1 < len(order) else self.horizon
            ops.append(("compute", v))
            held = sum(nodes[w].size for (w, d), (s, e) in spans.items() if s <= step <= e)
            peak = max(peak, held + nodes[v].overhead)
            # steps without a compute are allowed: a copy ending at one is freed after this compute
            ops.extend(("free", w) for (w, d), (s, e) in sorted(spans.items()) if step <= e < following)
        return ops, peak


def solve_intervals(
    profile: GraphProfile,
    budget: int,
    time_limit: float | Deadline,
    workers: int,
    copies: int = DEFAULT_COPIES,
    hint: Sequence[Op] | None = None,
) -> IntervalResult:
    """Build and search the retention-interval model for ``budget`` bytes within ``time_limit``
    (seconds or a shared :class:`Deadline`, building included; raises :class:`TimeUp` if it runs
    out first), each node computed at most ``copies`` times (once if it cannot be recomputed)."""
    deadline = as_deadline(time_limit)
    return build_intervals(profile, budget, deadline, copies, hint).search(deadline, workers)


def build_intervals(
    profile: GraphProfile,
    budget: int,
    deadline: Deadline,
    copies: int = DEFAULT_COPIES,
    hint: Sequence[Op] | None = None,
) -> _Intervals:
    """The model of :func:`solve_intervals`, hinted, ready for ``.search(deadline, workers)``
    (and ``.stop()`` from another thread)."""
    n = profile.size
    per_node = [1 if (v == n - 1 or not profile.nodes[v].recompute) else copies for v in range(n)]
    if hint is not None:
        counts = [0] * n
        for name, v in hint:
            counts[v] += name == "compute"
        per_node = [max(k, counts[v]) for v, k in enumerate(per_node)]
    model = _Intervals(profile, budget, per_node, deadline)
    if hint is not None:
        model.hint(hint)
    return model


__all__ = ["DEFAULT_COPIES", "IntervalResult", "build_intervals", "solve_intervals"]
