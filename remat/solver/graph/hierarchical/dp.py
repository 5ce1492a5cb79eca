"""The chain DP over blocks with several options each, for ``hierarchical`` (bytes, ms).

It is the rotor-style persistent DP of :mod:`remat.solver.chain.dp.options` (same two ways
to start a segment), but in the graph's terms, where a block's gradient ``G_i`` (``Γ_i`` bytes)
is not the size of its input ``c_{i-1}`` (``A_i`` bytes): that chain model ties the two, so the
recurrence is re-derived here with separate sizes and each op's excess taken as measured on the
block (:mod:`remat.solver.graph.hierarchical.block_options`).

Notation: blocks ``0..n-1``; ``A_0 = 0`` (the model input is not a graph node), ``Γ_0 = Γ_n = 0``;
``f_s`` the block's forward ms; ``fn_s`` the non-recording forward's excess; option ``o`` of
block s: ``sv`` (bytes it keeps), ``fr`` (its recording forward's excess), ``E`` and ``b`` (its
backward's excess and ms, recomputation included). ``C(s, t, m)``: the least time to run the
backward of blocks ``s..t-1`` given ``c_{s-1}`` and ``G_t`` held and ``m`` bytes free above what is
held; afterwards ``G_s`` is held instead of ``G_t`` and nothing else of the segment.

1. Record block s with option o: ``F_all s o`` (peak ``fr``), the rest ``[s+1, t)`` with
   ``m - sv`` free, then ``B s o``, whose memory before is ``sv + Γ_{s+1} - Γ_t`` above the
   segment's start (peak that plus ``E``); it frees the record and ``G_{s+1}``.
2. Checkpoint ``c_{j-1}`` (s < j < t): ``F_ck s, F_n s+1 .. F_n j-1`` (each ``F_n k`` holds
   ``A_k`` and frees it after: peak ``max_k A_k [k > s] + fn_k``), then ``[j, t)`` with
   ``m - A_j`` free, free ``c_{j-1}``, then ``[s, j)`` with ``m + Γ_t - Γ_j`` free.

::

    C(t, t, m) = 0 (m >= 0)
    C(s, t, m) = min( min_o f_s + b_o + C(s+1, t, m - sv_o)
                          if max(fr_o, sv_o + Γ_{s+1} - Γ_t + E_o) <= m,
                      min_j sum(f_s..f_{j-1}) + C(j, t, m - A_j) + C(s, j, m + Γ_t - Γ_j)
                          if max_k (A_k [k > s] + fn_k) <= m )

Memory is in slots of S bytes; requirements are rounded up, subtractions up and additions down
(``floor`` of a signed change), so a schedule read from the table fits its real budget. The
least peak among the same schedules is found exactly, in bytes, by the same recurrence with
``max`` for ``+`` and ``min`` over branches (:func:`least_peak`). Units: bytes, milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from remat.solver.graph.hierarchical.block_options import NO_PEAK, BlockModel

CHECK = 1 << 20  # decisions >= CHECK: checkpoint at j = decision - CHECK; else record option
MAX_CELLS = 16_000_000  # segments x levels: 16 bytes each (cost and decision), ~256 MB at most


@dataclass(frozen=True)
class Chain:
    """The numbers the recurrence needs, from the block models (bytes, ms)."""

    A: tuple[int, ...]  # A[i] = bytes of c_{i-1}, A[0] = 0; length n+1
    G: tuple[int, ...]  # G[i] = Γ_i, G[0] = G[n] = 0
    f: tuple[float, ...]
    fn: tuple[int, ...]
    options: tuple[tuple[tuple[int, int, int, int, float], ...], ...]  # (u, sv, fr, E, b) per block s

    @property
    def n(self) -> int:
        return len(self.f)

    def record_need(self, s: int, t: int, o: int) -> int:
        u, sv, fr, e, _ = self.options[s][o]
        return max(fr, sv + self.G[u] - self.G[t] + e)

    def span_ms(self, s: int, u: int) -> float:
        return sum(self.f[s:u])

    def sweep_need(self, s: int, j: int) -> int:
        return max((self.A[k] if k > s else 0) + self.fn[k] for k in range(s, j))


def chain_of(models: dict[tuple[int, int], BlockModel]) -> Chain:
    """The recurrence's numbers from the models of single blocks ``(s, s+1)`` and of merged runs
    ``(s, u)`` (their options become block s's options that end at u)."""
    n = max(u for _, u in models)
    single = [models[(s, s + 1)] for s in range(n)]
    A = tuple(m.input_size for m in single) + (single[-1].output_size,)
    G = tuple(m.grad_size for m in single) + (0,)
    options = tuple(
        tuple(
            (u, o.saved, o.forward.peak, o.backward.peak, o.backward.ms)
            for (start, u), m in sorted(models.items())
            if start == s
            for o in m.options
        )
        for s in range(n)
    )
    return Chain(A, G, tuple(m.nograd.ms for m in single), tuple(m.nograd.peak for m in single), options)


def _up(x: int, slot: int) -> int:
    return -(-x // slot)


@dataclass(frozen=True)
class Table:
    """``cost[(s, t)]``: C(s, t, k) for k = 0..levels (inf where infeasible); ``choice`` alike."""

    slot: int
    levels: int
    cost: dict[tuple[int, int], np.ndarray]
    choice: dict[tuple[int, int], np.ndarray]


def _groups(chain: Chain, s: int, prefix: list[float]) -> dict[int, tuple[np.ndarray, ...]]:
    """Block s's options by the block they end at: (option index, sv, fr, E, forward + backward ms)."""
    by_end: dict[int, list[int]] = {}
    for o, option in enumerate(chain.options[s]):
        by_end.setdefault(option[0], []).append(o)
    groups = {}
    for u, index in by_end.items():
        rows = [chain.options[s][o] for o in index]
        groups[u] = (
            np.array(index, dtype=np.int64),
            *(np.array([r[k] for r in rows], dtype=np.int64) for k in (1, 2, 3)),
            np.array([prefix[u] - prefix[s] + r[4] for r in rows]),
        )
    return groups


def fill(chain: Chain, budget: int, slots: int) -> Table:
    """The table for ``budget`` bytes in at most ``slots`` levels (fewer where the table would
    pass :data:`MAX_CELLS` cells: one array of levels per segment)."""
    n = chain.n
    slots = max(1, min(slots, MAX_CELLS // (n * (n + 1) // 2) - 1))
    slot = max(1, _up(budget, slots))
    K = budget // slot
    ks = np.arange(K + 1)
    zero = np.zeros(K + 1)
    cost: dict[tuple[int, int], np.ndarray] = {}
    choice: dict[tuple[int, int], np.ndarray] = {}
    prefix = [0.0]
    for f in chain.f:
        prefix.append(prefix[-1] + f)
    groups = [_groups(chain, s, prefix) for s in range(n)]
    for length in range(1, n + 1):
        for s in range(0, n - length + 1):
            t = s + length
            best = np.full(K + 1, math.inf)
            pick = np.full(K + 1, -1, dtype=np.int64)
            for u, (index, sv, fr, e, ms) in groups[s].items():
                if u > t:
                    continue
                shift = -(-sv // slot)
                need = np.maximum(np.maximum(-(-fr // slot), -(-(sv + chain.G[u] - chain.G[t] + e) // slot)), shift)
                sub = cost[(u, t)] if u < t else zero
                at = np.maximum(ks[None, :] - shift[:, None], 0)
                value = np.where(ks[None, :] >= need[:, None], sub[at] + ms[:, None], math.inf)
                row = np.argmin(value, axis=0)
                value = value[row, ks]
                better = value < best
                best[better] = value[better]
                pick[better] = index[row[better]]
            for j in range(s + 1, t):
                need = max(_up(chain.sweep_need(s, j), slot), _up(chain.A[j], slot))
                if need > K:
                    continue
                shift = _up(chain.A[j], slot)
                delta = (chain.G[t] - chain.G[j]) // slot  # floor of a signed change
                left_index = np.clip(ks + delta, -1, K)
                left = np.where(left_index >= 0, cost[(s, j)][np.maximum(left_index, 0)], math.inf)
                value = np.full(K + 1, math.inf)
                value[need:] = prefix[j] - prefix[s] + cost[(j, t)][need - shift : K + 1 - shift] + left[need:]
                better = value < best
                best[better] = value[better]
                pick[better] = CHECK + j
            cost[(s, t)] = best
            choice[(s, t)] = pick
    return Table(slot, K, cost, choice)


def read_ops(chain: Chain, table: Table) -> list[tuple] | None:
    """Block-level ops of the table's schedule at its full budget, or None if infeasible.

    Ops: ``("Fck", s)``, ``("Fn", k)``, ``("Fall", s, o)``, ``("B", s, o)``, ``("drop", j)`` (free
    the checkpoint ``c_{j-1}``)."""
    n, K = chain.n, table.levels
    if not math.isfinite(table.cost[(0, n)][K]):
        return None
    ops: list[tuple] = []
    stack: list[tuple] = [("seg", 0, n, K)]
    slot = table.slot
    while stack:
        item = stack.pop()
        if item[0] != "seg":
            ops.append(item)
            continue
        _, s, t, k = item
        if s == t:
            continue
        d = int(table.choice[(s, t)][k])
        if d < 0:
            raise AssertionError(f"hierarchical: no decision for blocks [{s}, {t}) at {k} slots")
        if d < CHECK:
            u, sv = chain.options[s][d][:2]
            stack += [("B", s, d), ("seg", u, t, k - _up(sv, slot)), ("Fall", s, d)]
        else:
            j = d - CHECK
            left = min(K, k + (chain.G[t] - chain.G[j]) // slot)
            sweep = [("Fck", s)] + [("Fn", i) for i in range(s + 1, j)]
            stack += [("seg", s, j, left), ("drop", j), ("seg", j, t, k - _up(chain.A[j], slot))]
            stack += reversed(sweep)
    return ops


def least_peak(chain: Chain) -> tuple[int, list[tuple]]:
    """The least peak (bytes above the start) of any schedule of the recurrence, exactly, and its
    block-level ops (among equal peaks, the first branch found)."""
    n = chain.n
    peak: dict[tuple[int, int], int] = {(t, t): NO_PEAK for t in range(n + 1)}
    pick: dict[tuple[int, int], int] = {}
    for length in range(1, n + 1):
        for s in range(0, n - length + 1):
            t = s + length
            best, choice = None, -1
            for o, (u, sv, _, _, _) in enumerate(chain.options[s]):
                if u > t:
                    continue
                value = max(chain.record_need(s, t, o), sv + peak[(u, t)])
                if best is None or value < best:
                    best, choice = value, o
            for j in range(s + 1, t):
                value = max(chain.sweep_need(s, j), chain.A[j] + peak[(j, t)], chain.G[j] - chain.G[t] + peak[(s, j)])
                if value < best:
                    best, choice = value, CHECK + j
            peak[(s, t)], pick[(s, t)] = best, choice
    ops: list[tuple] = []
    stack: list[tuple] = [("seg", 0, n)]
    while stack:
        item = stack.pop()
        if item[0] != "seg":
            ops.append(item)
            continue
        _, s, t = item
        if s == t:
            continue
        d = pick[(s, t)]
        if d < CHECK:
            stack += [("B", s, d), ("seg", chain.options[s][d][0], t), ("Fall", s, d)]
        else:
            j = d - CHECK
            stack += [("seg", s, j), ("drop", j), ("seg", j, t)]
            stack += reversed([("Fck", s)] + [("Fn", i) for i in range(s + 1, j)])
    return peak[(0, n)], ops


def walk(chain: Chain, ops: list[tuple]) -> tuple[int, float]:
    """Peak (bytes above the start) and time (ms) of block-level ops by the recurrence's own
    accounting (the simulator checks this claim for every schedule returned)."""
    held, peak, ms = 0, NO_PEAK, 0.0
    for op in ops:
        name, i = op[0], op[1]
        if name in ("Fck", "Fn"):
            peak = max(peak, held + chain.fn[i])
            held += chain.A[i + 1] - (chain.A[i] if name == "Fn" else 0)
            ms += chain.f[i]
        elif name == "Fall":
            u, sv, fr, _, _ = chain.options[i][op[2]]
            peak = max(peak, held + fr)
            held += sv
            ms += chain.span_ms(i, u)
        elif name == "B":
            u, sv, _, e, b = chain.options[i][op[2]]
            peak = max(peak, held + e)
            held += chain.G[i] - sv - chain.G[u]
            ms += b
        else:
            held -= chain.A[op[1]]
    return peak, ms
