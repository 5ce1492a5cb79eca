"""``sequential``: what ``torch.utils.checkpoint.checkpoint_sequential(functions, k, input)`` does.

torch splits the n modules into k segments of ``size = n // k`` modules each, except the last,
which takes the remainder: segments ``[0, size)``, ``[size, 2 size)``, ...,
``[(k-1) size, n)``, so the last one can be much longer than the others (n = 10, k = 4 gives
sizes 2, 2, 2, 4). The first k-1 segments run under ``checkpoint``: their input is stored, their
forward runs without recording (``F_ck`` on the first stage, ``F_n`` on the rest), and in the
backward each is rerun recorded from its stored input and backpropagated at once. The last
segment runs normally, i.e. recorded (``F_all``). The op list is built by
:func:`remat.solver.chain.segments.segment_ops`. torch requires ``1 <= k <= n`` (k = 1 is plain
store-all).

With ``segments=k`` the strategy uses that k; with only a budget it costs every k in 1..n
(closed form, :func:`remat.solver.chain.segments.segment_costs`, once per profile) and returns the
fastest that fits (ties: lower peak, then fewer segments). When nothing fits, the error states
the smallest peak over the k it was allowed to use."""

from __future__ import annotations

from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError, Schedule
from remat.solver.chain.segments import Candidate, best_segmentation, evaluate, pick, segment_ops
from remat.solver.common import ProfileCache, Strategy, make_schedule, require_chain

NAME = "sequential"


def torch_segment_starts(length: int, segments: int) -> tuple[int, ...]:
    """Segment starts of ``checkpoint_sequential`` with ``segments`` segments over ``length`` modules."""
    if isinstance(segments, bool) or not isinstance(segments, int) or not 1 <= segments <= length:
        raise RematError(f"segments: must be an integer between 1 and the number of stages ({length}), got {segments}")
    size = length // segments
    return tuple(range(0, size * (segments - 1) + 1, size))


_CANDIDATES = ProfileCache()


def _all_counts(profile: ChainProfile) -> tuple[list[Candidate], dict[tuple[int, ...], int]]:
    """Every segment count's segmentation with its closed-form cost, computed once per profile."""

    def compute():
        by_starts: dict[tuple[int, ...], int] = {}
        for k in range(1, profile.length + 1):
            by_starts.setdefault(torch_segment_starts(profile.length, k), k)
        return evaluate(profile, list(by_starts)), by_starts

    return _CANDIDATES.get(profile, "counts", compute)


def choose(profile: ChainProfile, budget: int) -> tuple[int, ...] | None:
    """The segment starts :func:`solve` returns at ``budget`` bytes (no ``segments`` option), or None."""
    return pick(_all_counts(require_chain(profile, NAME))[0], budget)[0]


def solve(profile: ChainProfile, budget: int, segments: int | None = None) -> Schedule:
    """The fastest torch-style segmentation within ``budget`` bytes (or exactly ``segments`` segments)."""
    profile = require_chain(profile, NAME)
    n = profile.length
    if segments is None:
        candidates, by_starts = _all_counts(profile)
        starts, min_peak = pick(candidates, budget)
    else:
        by_starts = {torch_segment_starts(n, segments): segments}
        starts, min_peak = best_segmentation(profile, list(by_starts), budget)
    if starts is None:
        detail = f"with {segments} segments" if segments is not None else "over every segment count 1..n"
        raise InfeasibleBudgetError(NAME, budget, min_peak, detail)
    k = by_starts[starts]
    return make_schedule(
        profile,
        budget,
        NAME,
        segment_ops(n, starts),
        extra={"segments": k, "segment_starts": list(starts)},
    )


STRATEGY = Strategy(
    name=NAME,
    kind="chain",
    description="torch checkpoint_sequential: k equal segments, last one recorded; k forced or the fastest that fits",
    solve=solve,
    options=("segments",),
    reference="torch.utils.checkpoint.checkpoint_sequential",
    choose=choose,
)
