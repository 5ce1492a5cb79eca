"""THE simulator: the single source of truth for validity, peak memory and compute time.

Every solver's claimed cost must equal what :func:`simulate` says, and the executor's
"predicted" column comes from here. Semantics follow docs/model.md ("Chains", "Graphs", "What
the simulator reports"):

Chain (items ``a[i]``, ``abar[i+1]``, ``g[i]``; the state starts with ``a[0]``, never removed):

=========  =====================================  ==========  =================================
op         needs                                  adds        removes after
=========  =====================================  ==========  =================================
F_ck i     a_i present (a[i] or inside abar[i])   a[i+1]      --
F_n i      a[i]                                   a[i+1]      a[i]
F_all i    a_i present                            abar[i+1]   --
F_all i k  a_i present                            abar[i+1]   --  (recorded with option k)
B i        abar[i+1], g[i+1], a_i present         g[i]        abar[i+1], g[i+1], a[i]
=========  =====================================  ==========  =================================

``F_all i k`` records stage i with its option k (:attr:`Stage.options`; k = 0 is the stage's
own fields): abar[i+1] then holds the option's ``saved_size``, the forward's transient is its
``forward_overhead``, and ``B i`` costs the option's ``backward_ms`` and ``backward_overhead``.

``g[n]`` appears just before the first ``B``; the ``B`` ops run once each, n-1 down to 0. An op's
peak is the memory before it + what it adds + its transient overhead (``forward_overhead`` for
``F_all``, the stage's ``nograd_overhead`` for ``F_ck``/``F_n``, ``backward_overhead`` for ``B``).
Adding an item that is already held (e.g. ``F_ck i`` twice with no release between) is rejected: it would hold one
tensor twice.

Graph: ``compute v`` needs every predecessor's output present and adds v's output; ``free v``
drops it. Peak is measured right after each compute, plus the node's transient ``overhead``
(bytes live only while it is computed). Every node is computed at least once, the last node
last; a node with ``recompute`` false is computed exactly once.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from remat.cache import KeyedCache
from remat.schedules.errors import ScheduleError
from remat.schedules.profiles import ChainProfile, GraphProfile
from remat.schedules.schedule import Op, Prediction, Schedule, parse_ops


@dataclass(frozen=True)
class OpRecord:
    """Memory around one op (bytes): before it, at its peak (incl. transient), after it."""

    position: int
    op: str
    index: int
    memory_before: int
    peak: int
    memory_after: int


@dataclass(frozen=True)
class SimulationResult:
    """Outcome of simulating a valid schedule.

    Attributes:
        peak_memory: bytes, the largest op peak.
        compute_ms: milliseconds of all ops.
        recompute_ms: forward time of the reruns: ``compute_ms`` minus the store-all step time.
        timeline: one :class:`OpRecord` per op.
    """

    peak_memory: int
    compute_ms: float
    recompute_ms: float
    timeline: tuple[OpRecord, ...]

    @property
    def prediction(self) -> Prediction:
        return Prediction(self.peak_memory, self.compute_ms, self.recompute_ms)


def _op_label(position: int, op: str, index: int, option: int = 0) -> str:
    return f"op {position} ({op} {index}{f' option {option}' if option else ''})"


FAST_FROM_OPS = 256  # shorter op lists are simulated in Python (no compiled code to load)


def simulate_chain(profile: ChainProfile, ops: Iterable[Op], timeline: bool = True) -> SimulationResult:
    """Simulate chain ops; raise :class:`ScheduleError` naming the op and the missing item.

    Without a timeline, long op lists go through the compiled copy of this loop
    (:mod:`remat.schedules.fast_chain`, identical results); an invalid op list is then rerun here
    for the error message."""
    if not timeline:
        ops = ops if isinstance(ops, (list, tuple)) else list(ops)
        if len(ops) >= FAST_FROM_OPS:
            fast = _simulate_chain_fast(profile, ops)
            if fast is not None:
                return fast
    return _simulate_chain_reference(profile, ops, timeline)


def _simulate_chain_fast(profile: ChainProfile, ops: Sequence[Op]) -> SimulationResult | None:
    """The compiled simulation, or None when it cannot be used or the op list is invalid."""
    # imported here (and below): fast_chain compiles with numba, a heavy import that
    # `import remat.schedules` and short op lists never pay
    from remat.schedules import fast_chain

    arrays = _profile_arrays(profile)
    encoded = fast_chain.encode(ops)
    if arrays is None or encoded is None:
        return None
    valid, peak, compute, recompute = fast_chain.chain_costs(*encoded, *arrays)
    if not valid:
        return None
    return SimulationResult(int(peak), float(compute), float(recompute), ())


_ARRAYS = KeyedCache(items=8)  # a profile's arrays for the compiled simulator, per profile digest


def _profile_arrays(profile: ChainProfile) -> tuple | None:
    from remat.schedules import fast_chain

    return _ARRAYS.get_or_put(profile.sha256, lambda: fast_chain.profile_arrays(profile))


def _simulate_chain_reference(profile: ChainProfile, ops: Iterable[Op], timeline: bool = True) -> SimulationResult:
    """The reference simulation in Python integers (see :func:`simulate_chain`)."""
    state = _ChainState(profile)
    records: list[OpRecord] = []
    for position, (op, i, *rest) in enumerate(ops):
        option = rest[0] if rest else 0
        label = _op_label(position, op, i, option)
        state.check(label, op, i, option)
        if op == "F_ck" or op == "F_n" or op == "F_all":
            before, op_peak = state.forward(label, op, i, option)
        elif op == "B":
            before, op_peak = state.backward(label, i)
        else:
            raise ScheduleError(f"{label}: unknown chain op {op!r} (use F_ck, F_n, F_all, B)")
        state.peak_memory = max(state.peak_memory, op_peak)
        if timeline:
            records.append(OpRecord(position, op, i, before, op_peak, state.memory))
    return state.result(tuple(records))


class _ChainState:
    """What the reference simulation holds between ops: the items in memory (``a[i]``,
    ``abar[i]``, ``g[i]`` flags), the memory and its peak (bytes), the time so far (ms), and what
    the recompute time is summed from (forward runs per stage, the options' extra backward time)."""

    def __init__(self, profile: ChainProfile) -> None:
        n = profile.length
        self.profile = profile
        self.n = n
        self.act = [profile.activation_size(i) for i in range(n + 1)]
        self.a_held = [False] * (n + 1)
        self.abar_held = [False] * (n + 1)
        self.g_held = [False] * (n + 1)
        self.a_held[0] = True
        self.memory = self.act[0]
        self.peak_memory = self.memory
        self.compute_ms = 0.0
        self.next_backward = n - 1
        self.forward_runs = [0] * n  # recompute = sum of (runs - 1) * forward_ms: exact 0 when nothing is rerun
        self.recorded = [0] * (n + 1)  # the option abar[i+1] was recorded with
        self.option_extra_ms = 0.0  # what the options' backwards add over the stages' own (recompute inside)

    def check(self, label: str, op: str, i: int, option: int) -> None:
        """The checks every op passes first: its stage index, its option, not after the last ``B``."""
        n = self.n
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n:
            raise ScheduleError(f"{label}: stage index out of range (chain has {n} stages)")
        if option and (op != "F_all" or not 0 <= option < self.profile.stages[i].option_count):
            count = self.profile.stages[i].option_count
            what = "only F_all takes an option" if op != "F_all" else f"stage {i} has options 0..{count - 1}"
            raise ScheduleError(f"{label}: option index out of range ({what})")
        if self.next_backward < 0:
            raise ScheduleError(f"{label}: comes after the last backward (B 0)")

    def forward(self, label: str, op: str, i: int, option: int) -> tuple[int, int]:
        """Run ``F_ck i``, ``F_n i`` or ``F_all i option``; returns (memory before, op peak) in bytes."""
        stage = self.profile.stages[i]
        a_held, abar_held = self.a_held, self.abar_held
        before = self.memory
        present = a_held[i] or abar_held[i]
        if op == "F_n" and not a_held[i]:
            reason = "is only held inside abar" if present else "is not in memory"
            raise ScheduleError(f"{label}: needs a[{i}], which {reason}")
        if not present:
            raise ScheduleError(f"{label}: needs a_{i} (a[{i}] or abar[{i}]), which is not in memory")
        if op == "F_n" and stage.handed_on and abar_held[i + 1]:
            # abar[i+1] counts no bytes of what stage i hands on: they are a_i's, which must stay
            # (docs/model.md); a_{i+1} is in memory already, inside abar[i+1]
            raise ScheduleError(
                f"{label}: would drop a[{i}] while abar[{i + 1}] shares the tensors stage {i} hands on; "
                f"a_{i + 1} is in memory inside abar[{i + 1}]"
            )
        if op == "F_all":
            if abar_held[i + 1]:
                raise ScheduleError(f"{label}: abar[{i + 1}] is already in memory")
            added = stage.recording(option).saved_size
            abar_held[i + 1] = True
            self.recorded[i + 1] = option
        else:
            if a_held[i + 1]:
                raise ScheduleError(f"{label}: a[{i + 1}] is already in memory")
            added = self.act[i + 1]
            a_held[i + 1] = True
        transient = stage.recording(option).forward_overhead if op == "F_all" else stage.nograd_overhead
        op_peak = before + added + transient
        self.memory = before + added
        if op == "F_n" and i != 0:
            a_held[i] = False
            self.memory -= self.act[i]
        self.compute_ms += stage.forward_ms
        self.forward_runs[i] += 1
        return before, op_peak

    def backward(self, label: str, i: int) -> tuple[int, int]:
        """Run ``B i`` (``g[n]`` appears just before ``B n-1``); returns (memory before, op peak) in bytes."""
        n, act = self.n, self.act
        stage = self.profile.stages[i]
        if i != self.next_backward:
            raise ScheduleError(f"{label}: expected B {self.next_backward} (backwards run once each, n-1 down to 0)")
        if i == n - 1:
            self.g_held[n] = True
            self.memory += act[n]
        before = self.memory
        if not self.abar_held[i + 1]:
            raise ScheduleError(f"{label}: needs abar[{i + 1}], which is not in memory")
        if not (self.a_held[i] or self.abar_held[i]):
            raise ScheduleError(f"{label}: needs a_{i} (a[{i}] or abar[{i}]), which is not in memory")
        recording = stage.recording(self.recorded[i + 1])
        op_peak = before + act[i] + recording.backward_overhead
        memory = before + act[i]
        self.g_held[i] = True
        self.abar_held[i + 1] = False
        memory -= recording.saved_size
        self.g_held[i + 1] = False
        memory -= act[i + 1]
        if self.a_held[i] and i != 0:
            self.a_held[i] = False
            memory -= act[i]
        self.memory = memory
        self.compute_ms += recording.backward_ms
        self.option_extra_ms += recording.backward_ms - stage.backward_ms
        self.next_backward -= 1
        return before, op_peak

    def result(self, timeline: tuple[OpRecord, ...]) -> SimulationResult:
        """The outcome once every op ran; an error if some ``B`` never did."""
        if self.next_backward >= 0:
            raise ScheduleError(f"schedule ends before B {self.next_backward}: every B must run once, n-1 down to 0")
        # Every stage ran forward at least once (its B needed its abar), so runs - 1 >= 0.
        stages = self.profile.stages
        recompute_ms = sum((runs - 1) * stage.forward_ms for runs, stage in zip(self.forward_runs, stages, strict=True))
        recompute_ms += self.option_extra_ms  # adds exact 0.0 when no option is used: old results unchanged
        return SimulationResult(
            peak_memory=self.peak_memory,
            compute_ms=self.compute_ms,
            recompute_ms=recompute_ms,
            timeline=timeline,
        )


def simulate_graph(profile: GraphProfile, ops: Iterable[Op], timeline: bool = True) -> SimulationResult:
    """Simulate graph ops; raise :class:`ScheduleError` naming the op and the missing output."""
    count = profile.size
    preds = profile.predecessors
    present = [False] * count
    computed = [False] * count
    memory = 0
    peak_memory = 0
    compute_ms = 0.0
    last_compute = -1
    runs = [0] * count
    records: list[OpRecord] = []
    for position, (op, v) in enumerate(ops):
        # the op's label only when an error names it (a string per op: 3% of a joint solve's time)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < count:
            raise ScheduleError(f"{_op_label(position, op, v)}: node index out of range (graph has {count} nodes)")
        before = memory
        node = profile.nodes[v]
        if op == "compute":
            for u in preds[v]:
                if not present[u]:
                    raise ScheduleError(
                        f"{_op_label(position, op, v)}: needs the output of node {u} "
                        f"('{profile.nodes[u].name}'), which is not in memory"
                    )
            if present[v]:
                raise ScheduleError(f"{_op_label(position, op, v)}: node {v} ('{node.name}') is already in memory")
            if computed[v] and not node.recompute:
                raise ScheduleError(
                    f"{_op_label(position, op, v)}: node {v} ('{node.name}') cannot be recomputed (it is computed once)"
                )
            present[v] = True
            computed[v] = True
            memory += node.size
            op_peak = memory + node.overhead
            peak_memory = max(peak_memory, op_peak)
            compute_ms += node.time_ms
            runs[v] += 1
            last_compute = v
        elif op == "free":
            if not present[v]:
                raise ScheduleError(f"{_op_label(position, op, v)}: node {v} ('{node.name}') is not in memory")
            present[v] = False
            memory -= node.size
            op_peak = before
        else:
            raise ScheduleError(f"{_op_label(position, op, v)}: unknown graph op {op!r} (use compute, free)")
        if timeline:
            records.append(OpRecord(position, op, v, before, op_peak, memory))
    missing = [v for v in range(count) if not computed[v]]
    if missing:
        raise ScheduleError(
            f"schedule never computes node {missing[0]} ('{profile.nodes[missing[0]].name}')"
            + (f" and {len(missing) - 1} other(s)" if len(missing) > 1 else "")
        )
    if last_compute != count - 1:
        raise ScheduleError(f"the last computed node must be the last node ({count - 1}), not {last_compute}")
    return SimulationResult(
        peak_memory=peak_memory,
        compute_ms=compute_ms,
        recompute_ms=sum((r - 1) * node.time_ms for r, node in zip(runs, profile.nodes, strict=True)),
        timeline=tuple(records),
    )


def simulate(
    profile: ChainProfile | GraphProfile, ops: Sequence[Op] | Schedule, timeline: bool = True
) -> SimulationResult:
    """Simulate a schedule (or an op list) on a chain or graph profile."""
    if isinstance(ops, Schedule):
        ops = ops.ops
    ops = parse_ops(list(ops))
    if isinstance(profile, ChainProfile):
        if ops and ops[0][0] in ("compute", "free"):
            raise ScheduleError("schedule has graph ops (compute/free) but the profile is a chain")
        return simulate_chain(profile, ops, timeline)
    if ops and ops[0][0] not in ("compute", "free"):
        raise ScheduleError("schedule has chain ops (F_ck, F_n, F_all, B) but the profile is a graph")
    return simulate_graph(profile, ops, timeline)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def check_schedule(
    profile: ChainProfile | GraphProfile, schedule: Schedule, check_budget: bool = True
) -> SimulationResult:
    """Check that ``schedule`` belongs to ``profile``, is valid, fits its budget, and that its
    predicted cost equals the simulated one. Returns the simulation."""
    if schedule.profile_sha256 != profile.sha256:
        raise ScheduleError(
            f"schedule was solved for profile '{schedule.profile}' (sha256 {schedule.profile_sha256[:12]}...), "
            f"not for '{profile.name}' (sha256 {profile.sha256[:12]}...)"
        )
    result = simulate(profile, schedule.ops, timeline=False)
    if check_budget and result.peak_memory > schedule.budget:
        raise ScheduleError(f"schedule peak {result.peak_memory} bytes exceeds its budget {schedule.budget} bytes")
    claimed = schedule.predicted
    if claimed.peak_memory != result.peak_memory:
        raise ScheduleError(
            f"predicted.peak_memory: schedule claims {claimed.peak_memory} bytes, "
            f"the simulator says {result.peak_memory}"
        )
    for key in ("compute_ms", "recompute_ms"):
        if not _close(getattr(claimed, key), getattr(result, key)):
            raise ScheduleError(
                f"predicted.{key}: schedule claims {getattr(claimed, key)} ms, "
                f"the simulator says {getattr(result, key)}"
            )
    return result
