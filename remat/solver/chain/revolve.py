"""``revolve``: Griewank-Walther binomial checkpointing (Griewank 1992; Griewank & Walther 2000,
"Algorithm 799: revolve").

Classic setting: reverse a chain of ``l`` steps holding at most ``c`` checkpoints (states a_i)
at once, the input's included, besides the one working state being advanced. Reversing step i
("adjoint step") needs the state a_i; it runs the step once more, recorded, then its backward.
Revolve minimises the number of *forward steps* (advances that only move a state along) and
needs, with ``r`` the smallest integer such that ``C(c + r, c) >= l``::

    t(l, c) = r * l - C(c + r, r - 1)

forward steps (every stage is counted alike, whatever its time or size).

In the ops of docs/model.md ("Chains"), a checkpoint is an ``a[i]`` item; advancing from a checkpoint ``a[s]`` by m
steps is ``F_ck s, F_n s+1, ..., F_n s+m-1`` (keeps ``a[s]``, ends holding ``a[s+m]``, nothing in
between); an adjoint step is ``F_all i, B i`` (``B i`` also releases the checkpoint ``a[i]``). So
the schedule has exactly ``t(l, c)`` ``F_ck``/``F_n`` ops and ``l`` ``F_all`` ops. The schedule is
the binomial recursion, not a search: to reverse stages ``[s, e)`` from checkpoint ``a[s]`` with
``c`` slots, advance by m, reverse ``[s+m, e)`` with ``c-1`` slots, then ``[s, s+m)`` with ``c``;
with one slot, walk forward from ``a[s]`` before each adjoint step. The split m is the smallest of
the optimal ones, ``max(C(c+r-2, c), l - C(c+r-1, c-1))`` (Griewank & Walther 2000, Prop. 1,
whose range of optimal splits the tests check against the DP).

Which ``c``: with ``checkpoints=c`` that c is used; with only a budget every c from 1 to n-1
(beyond that the schedule no longer changes) is built and simulated once per profile (the
compiled simulator, on op arrays built by :mod:`remat.solver.chain.revolve_kernel`; a sweep
over budgets reuses the peaks), and the largest c whose schedule fits is returned: the fewest
forward steps that fit. On identical stages this is revolve's
optimum for that memory. On heterogeneous chains it is not optimal in time or memory: the
checkpoint positions count steps, not milliseconds or bytes, so a stage with a big output may
become a checkpoint where a cheaper neighbour would do, and a larger c can even peak lower or
higher than a smaller one (hence every c is simulated). Revolve's model also never keeps a
recorded forward from the first sweep, so even with unlimited slots it does ``l - 1`` extra
forwards over store-all. When no c fits, the error states the smallest peak over all c."""

from __future__ import annotations

from math import comb

from remat.cache import memo
from remat.schedules import ChainProfile, InfeasibleBudgetError, Op, RematError, Schedule
from remat.schedules.fast_chain import chain_costs, profile_arrays
from remat.schedules.simulator import simulate_chain
from remat.solver.chain.limits import MAX_OPS
from remat.solver.chain.revolve_kernel import revolve_codes
from remat.solver.common import ProfileCache, Strategy, make_schedule, require_chain

NAME = "revolve"


def _beta(c: int, r: int) -> int:
    """Longest chain reversible with c checkpoints and at most r evaluations of any step: C(c+r, c)."""
    return comb(c + r, c) if r >= 0 else 0


def repetitions(length: int, slots: int) -> int:
    """The smallest r with C(slots + r, slots) >= length."""
    r = 0
    while _beta(slots, r) < length:
        r += 1
    return r


def split(length: int, slots: int) -> int:
    """How many steps to advance before placing the next checkpoint (``length >= 2``, ``slots >= 2``)."""
    r = repetitions(length, slots)
    return max(1, _beta(slots, r - 2), length - _beta(slots - 1, r))


def revolve_ops(length: int, slots: int) -> list[Op]:
    """Binomial checkpointing ops for a chain of ``length`` stages with ``slots`` checkpoints (a[0] included)."""
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise RematError(f"slots: must be a positive integer (a[0] takes one slot), got {slots!r}")
    ops: list[Op] = []
    f_ck, f_n, f_all, b = _op_tuples(length)

    def advance(start: int, stop: int) -> None:
        ops.append(f_ck[start])
        ops.extend(f_n[start + 1 : stop])  # slices of shared tuples: a sweep builds millions of ops

    # Reverse stages start .. end-1 with c slots; invariant: a_start is held (a[start]) and g[end]
    # is available. The recursion (advance by m, reverse [start+m, end) with c-1 slots, then
    # [start, start+m) with c) runs on an explicit stack: c can be in the thousands.
    stack = [(0, length, slots)]
    while stack:
        start, end, c = stack.pop()
        if end - start > 1 and c > 1:
            m = split(end - start, c)
            advance(start, start + m)
            stack.append((start, start + m, c))  # then the left part, with the same slots
            stack.append((start + m, end, c - 1))  # first the right part, one slot fewer
            continue
        for i in reversed(range(start, end)):
            if i > start:
                advance(start, i)
            ops.append(f_all[i])
            ops.append(b[i])
    return ops


@memo(4)
def _op_tuples(length: int) -> tuple[list[Op], ...]:
    """The ops ``F_ck i``, ``F_n i``, ``F_all i`` and ``B i`` for i < ``length``, built once per length."""
    return tuple([(name, i) for i in range(length)] for name in ("F_ck", "F_n", "F_all", "B"))


def forward_steps(ops: list[Op]) -> int:
    """Number of advances (``F_ck`` and ``F_n`` ops): revolve's cost measure."""
    return sum(1 for name, _ in ops if name in ("F_ck", "F_n"))


_PEAKS = ProfileCache()


def _peaks(profile: ChainProfile, choices: tuple[int, ...]) -> list[int]:
    """Simulated peak of each slot count's schedule (bytes), computed once per profile."""

    def compute():
        arrays = profile_arrays(profile)
        if arrays is not None and len(choices) > 1:  # compiled: every count's ops as arrays
            costs = [chain_costs(*revolve_codes(profile.length, c), *arrays) for c in choices]
            if all(valid for valid, *_ in costs):
                return [int(peak) for _, peak, *_ in costs]
        # the op lists are built here, well formed: the simulator proper, without re-parsing them
        return [simulate_chain(profile, revolve_ops(profile.length, c), timeline=False).peak_memory for c in choices]

    return _PEAKS.get(profile, choices, compute)


LONG_CHAIN = 10_000  # stages: above this, a sweep tries every count up to 64, then ~10% apart


def fits_limit(length: int, slots: int) -> bool:
    """Whether the schedule for ``slots`` stays within the ops limit: ``r`` repetitions of each
    step bound its forward steps by ``r * length``, plus one ``F_all`` and one ``B`` per stage."""
    return (repetitions(length, slots) + 2) * length <= MAX_OPS


def _choices(profile: ChainProfile, slots: int | None) -> tuple[int, ...]:
    """The slot counts tried: every one from 1 to n-1 whose schedule stays within the ops limit
    (:mod:`remat.solver.chain.limits`); above :data:`LONG_CHAIN` stages the counts up to 64 and
    then about 10% apart (each count's schedule is costed in O(r n): all n-1 of them would be
    O(n**2))."""
    n = profile.length
    if slots is not None:
        return (slots,)
    top = max(1, n - 1)
    counts = range(1, top + 1)
    if n > LONG_CHAIN:
        grid = {*range(1, min(64, top) + 1), top}
        c = 64
        while c < top:
            c = max(c + 1, int(c * 1.1))
            grid.add(min(c, top))
        counts = sorted(grid)
    kept = tuple(c for c in counts if fits_limit(n, c))
    return kept or (top,)


def _largest_fit(profile: ChainProfile, budget: int, slots: int | None) -> tuple[int | None, int]:
    """(largest slot count whose schedule fits ``budget`` bytes or None, smallest peak of all)."""
    choices = _choices(profile, slots)
    peaks = _peaks(profile, choices)
    fitting = [c for c, peak in zip(choices, peaks, strict=True) if peak <= budget]
    return (fitting[-1] if fitting else None), min(peaks)


def choose(profile: ChainProfile, budget: int) -> int | None:
    """The slot count :func:`solve` uses at ``budget`` bytes (no ``checkpoints`` option), or None."""
    return _largest_fit(require_chain(profile, NAME), budget, None)[0]


def solve(profile: ChainProfile, budget: int, checkpoints: int | None = None) -> Schedule:
    """Binomial checkpointing with ``checkpoints`` slots (a[0] included), or the largest count that fits
    ``budget`` bytes. (The option is not called ``slots``: that name is the DP's memory discretization.)"""
    slots = checkpoints
    profile = require_chain(profile, NAME)
    if slots is not None:
        revolve_ops(1, slots)  # a bad count is a one-line error before anything else
        if not fits_limit(profile.length, slots):
            raise RematError(
                f"revolve: {slots} slots on {profile.length} stages make a schedule of about "
                f"{(repetitions(profile.length, slots) + 2) * profile.length} ops, more than the {MAX_OPS} a schedule "
                f"may hold; give more --checkpoints"
            )
    c, min_peak = _largest_fit(profile, budget, slots)
    if c is None:
        choices = _choices(profile, slots)
        tried = f"over {len(choices)} slot counts from {choices[0]} to {choices[-1]}"
        detail = f"with {slots} slots" if slots is not None else tried
        raise InfeasibleBudgetError(NAME, budget, min_peak, detail)
    ops = revolve_ops(profile.length, c)
    return make_schedule(profile, budget, NAME, ops, extra={"checkpoints": c, "forward_steps": forward_steps(ops)})


STRATEGY = Strategy(
    name=NAME,
    kind="chain",
    description="Griewank-Walther binomial checkpointing: fewest forward steps for c slots (c from the budget)",
    solve=solve,
    options=("checkpoints",),
    reference="Griewank & Walther 2000, Algorithm 799: revolve, ACM TOMS 26(1)",
    choose=choose,
)
