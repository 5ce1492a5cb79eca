"""Stage plans: the R/S description of a graph schedule shared by the ILP, LP rounding and baselines.

Checkmate (Jain et al. 2020) describes a schedule of an n-node DAG as n *frontier-advancing*
stages: stage t computes node t last, and before it any nodes ``i < t`` it needs again
(recomputations), in ascending index order. Two sets per stage describe it:

* ``R[t]``: nodes computed in stage t (always contains t, only nodes <= t);
* ``S[t]``: nodes whose output is held at the start of stage t (only nodes < t; ``S[0]`` empty).

Frees are implied (Checkmate's FREE): in stage t a held node i that is not kept into stage t+1
(``i not in S[t+1]``; nothing is kept after the last stage) is freed right after its last use in
the stage (the last computed consumer, or its own computation if no consumer in the stage reads
it); a node held at the start of the stage that nothing in the stage reads and that is not kept
is freed at the end of the stage. :func:`plan_ops` turns a plan into the compute/free ops of
docs/model.md ("Graphs") with exactly these frees, and :func:`plan_memory` computes Checkmate's
U[t, k] (bytes held right after computing k in stage t) the same way, so
``max (U[t, k] + overhead_k)`` equals the simulator's peak (a node's optional ``overhead`` is
transient: live only while it is computed): the ILP's memory constraints are the simulator's,
not an approximation of them.

A node with ``recompute`` false (the output gradient of a real model's graph) is computed only
in its own stage. The plans built here (:func:`plan_from_s`, :func:`plan_from_policy`) keep it,
and its direct consumers, from their stage until their last consumer: recomputing a consumer
later would need the node again.

Units: bytes and milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from remat.schedules import GraphProfile, Op, ScheduleError


@dataclass(frozen=True)
class StagePlan:
    """R and S of a frontier-advancing schedule, one frozenset of node indices per stage."""

    R: tuple[frozenset[int], ...]
    S: tuple[frozenset[int], ...]

    def cost_ms(self, profile: GraphProfile) -> float:
        """Milliseconds of every computation in the plan (the ILP objective)."""
        return sum(profile.nodes[i].time_ms for stage in self.R for i in sorted(stage))

    def check(self, profile: GraphProfile) -> None:
        """Raise :class:`ScheduleError` if the plan breaks a Checkmate constraint."""
        n = profile.size
        if len(self.R) != n or len(self.S) != n:
            raise ScheduleError(f"stage plan: needs {n} stages, has {len(self.R)} R and {len(self.S)} S")
        if self.S[0]:
            raise ScheduleError("stage plan: S[0] must be empty")
        for t in range(n):
            if t not in self.R[t] or max(self.R[t]) > t:
                raise ScheduleError(f"stage plan: R[{t}] must contain {t} and only nodes <= {t}")
            if self.S[t] and max(self.S[t]) >= t:
                raise ScheduleError(f"stage plan: S[{t}] may only hold nodes < {t}")
            if self.R[t] & self.S[t]:
                raise ScheduleError(f"stage plan: stage {t} recomputes held nodes {sorted(self.R[t] & self.S[t])}")
            for v in self.R[t]:
                for u in profile.predecessors[v]:
                    if u not in self.S[t] and u not in self.R[t]:
                        raise ScheduleError(f"stage plan: stage {t} computes {v} without its input {u}")
            if t + 1 < n and not self.S[t + 1] <= (self.R[t] | self.S[t]):
                raise ScheduleError(f"stage plan: S[{t + 1}] keeps nodes stage {t} does not hold")
            again = sorted([i for i in self.R[t] if i != t and not profile.nodes[i].recompute])
            if again:
                raise ScheduleError(f"stage plan: stage {t} recomputes node {again[0]}, which cannot be recomputed")


def free_points(profile: GraphProfile, plan: StagePlan, t: int) -> tuple[dict[int, list[int]], list[int]]:
    """Checkmate's FREE for stage t: ``{k: nodes freed right after computing k}`` and the nodes
    freed at the end of the stage (held at its start, unused in it, not kept)."""
    succs = profile.successors
    n = profile.size
    keep = plan.S[t + 1] if t + 1 < n else frozenset()
    computed = plan.R[t]
    after: dict[int, list[int]] = {}
    at_end: list[int] = []
    for i in sorted(computed | plan.S[t]):
        if i in keep:
            continue
        uses = [k for k in succs[i] if k in computed]
        if i in computed:
            uses.append(i)
        if uses:
            after.setdefault(max(uses), []).append(i)
        else:
            at_end.append(i)
    return after, at_end


def plan_ops(profile: GraphProfile, plan: StagePlan) -> list[Op]:
    """The compute/free op list (docs/model.md, "Graphs") of a plan (frees exactly where Checkmate's FREE puts them)."""
    ops: list[Op] = []
    for t in range(profile.size):
        after, at_end = free_points(profile, plan, t)
        for k in sorted(plan.R[t]):
            ops.append(("compute", k))
            ops += [("free", i) for i in after.get(k, ())]
        ops += [("free", i) for i in at_end]
    return ops


def plan_memory(profile: GraphProfile, plan: StagePlan) -> dict[tuple[int, int], int]:
    """Checkmate's U[t, k] for every computed k: bytes held right after computing k in stage t.

    Same recursion as the ILP: U[t, first] = sum of S[t] sizes + size(first); each later
    computation adds its output after removing what FREE released after the previous one.
    """
    size = [node.size for node in profile.nodes]
    memory: dict[tuple[int, int], int] = {}
    for t in range(profile.size):
        after, _ = free_points(profile, plan, t)
        # NOTE [No generator per element in a solve]: 12 million resumptions in a ResNet-50 solve
        held = sum(map(size.__getitem__, plan.S[t]))
        for k in sorted(plan.R[t]):
            held += size[k]
            memory[(t, k)] = held
            held -= sum(map(size.__getitem__, after.get(k, ())))
    return memory


def stage_peaks(profile: GraphProfile, plan: StagePlan) -> list[int]:
    """Per stage t, max over its computations k of (U[t, k] + overhead_k), in bytes."""
    nodes = profile.nodes
    peaks = [0] * profile.size
    for (t, k), held in plan_memory(profile, plan).items():
        peaks[t] = max(peaks[t], held + nodes[k].overhead)
    return peaks


def plan_peak(profile: GraphProfile, plan: StagePlan) -> int:
    """max (U[t, k] + overhead_k): the peak memory (bytes) of the plan, equal to the simulator's
    peak of :func:`plan_ops` (the transient overhead of k is live only while k is computed)."""
    return max(stage_peaks(profile, plan))


def pinned(profile: GraphProfile) -> frozenset[int]:
    """The nodes that may not be recomputed (``recompute`` false) and their direct consumers:
    a heuristic plan keeps these from their stage to their last use, so it never needs one again."""
    once = [v for v, node in enumerate(profile.nodes) if not node.recompute]
    return frozenset(once) | frozenset(w for v in once for w in profile.successors[v])


def plan_from_ops(profile: GraphProfile, ops: Sequence[Op]) -> StagePlan | None:
    """Read a frontier-advancing op list back into R/S (e.g. to warm-start the ILP).

    Returns None if the ops are not in that form (a first computation out of index order, a
    stage computing out of index order, or a held node recomputed).
    """
    n = profile.size
    R: list[set[int]] = [set() for _ in range(n)]
    S: list[frozenset[int]] = [frozenset() for _ in range(n)]
    held: set[int] = set()
    stage = 0
    last = -1
    current: set[int] = set()
    for name, v in ops:
        if name == "free":
            held.discard(v)
            continue
        if stage >= n or v in held or v < last or v > stage:
            return None
        if not current and stage > 0:
            # what is held when the stage starts: after the previous stage's last frees
            S[stage] = frozenset(held)
        current.add(v)
        held.add(v)
        last = v
        if v == stage:
            R[stage] = current
            current = set()
            stage += 1
            last = -1
    if stage != n or current:
        return None
    return StagePlan(tuple(frozenset(r) for r in R), tuple(S))


def needed_closure(
    profile: GraphProfile, t: int, held: frozenset[int], extra: frozenset[int] = frozenset()
) -> set[int]:
    """Cheapest R[t] given S[t] = ``held``: node t and the nodes in ``extra`` (e.g. ones the next
    stage must keep), plus every input they need that is not held, recursively (Checkmate's
    ``solve_r_opt``: with S fixed, each of these computations is forced, so this R is optimal)."""
    preds = profile.predecessors
    need = {t} | set(extra)
    stack = sorted(need)
    while stack:
        v = stack.pop()
        for u in preds[v]:
            if u not in held and u not in need:
                need.add(u)
                stack.append(u)
    return need


def plan_from_s(profile: GraphProfile, S: Sequence[frozenset[int]] | Sequence[set[int]]) -> StagePlan:
    """Phase two of Checkmate's rounding: given a wish list S (possibly inconsistent), compute the
    cheapest R and a consistent S.

    Entries of S[t] that are useless (no consumer at or after stage t) are dropped; a kept node
    that stage t-1 neither computes nor holds is computed there (with its missing inputs).
    """
    n = profile.size
    last_use = [max(profile.successors[i], default=-1) for i in range(n)]
    once = pinned(profile)
    # a node that cannot be recomputed (and its consumers) is kept until its last use, whatever S says
    wish = [frozenset({i for i in set(S[t]) | once if i < t and last_use[i] >= t}) for t in range(n)]
    R: list[frozenset[int]] = []
    held_list: list[frozenset[int]] = [frozenset()]
    for t in range(n):
        held = held_list[t]
        keep_next = wish[t + 1] if t + 1 < n else frozenset()
        compute = needed_closure(profile, t, held, keep_next - held)
        R.append(frozenset(compute))
        if t + 1 < n:
            held_list.append(keep_next & (held | compute))
    return StagePlan(tuple(R), tuple(held_list))


def plan_from_policy(
    profile: GraphProfile, keep: Callable[[int, int, frozenset[int]], bool] | None = None
) -> StagePlan:
    """Forward simulation of a keep policy: stage t computes the closure of t over what is held;
    afterwards node i stays held into stage t+1 iff it still has a consumer after t and
    ``keep(i, t, computed_in_stage_t)`` (None: keep everything, store-all)."""
    n = profile.size
    last_use = [max(profile.successors[i], default=-1) for i in range(n)]
    once = pinned(profile)
    R: list[frozenset[int]] = []
    S: list[frozenset[int]] = [frozenset()]
    for t in range(n):
        held = S[t]
        computed = frozenset(needed_closure(profile, t, held))
        R.append(computed)
        if t + 1 < n:
            # NOTE [No generator per element in a solve]: comprehensions, not a generator resumed
            # per element: inside some torch.compile processes each resumption cost far more
            # (dynamo's frame hook, we think), and this line was most of an 8-layer Llama's solve
            # (16-17 s, 7.3 s without it; issue 26)
            alive = {i for i in held | computed if last_use[i] > t}
            if keep is not None:
                alive = {i for i in alive if i in once or keep(i, t, computed)}
            S.append(frozenset(alive))
    return StagePlan(tuple(R), tuple(S))


def memory_lower_bound(profile: GraphProfile) -> int:
    """A provable lower bound (bytes) on the peak of any valid schedule: computing node v needs
    all its inputs held, and the peak is measured right after (plus v's transient overhead), so
    peak >= size(v) + overhead(v) + sum of its inputs' sizes for every v."""
    size = [node.size for node in profile.nodes]
    return max(
        size[v] + profile.nodes[v].overhead + sum(size[u] for u in profile.predecessors[v]) for v in range(profile.size)
    )
