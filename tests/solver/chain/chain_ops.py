"""Hand-written chain schedules for the executor tests (op lists; the strategies live on other branches)."""

from __future__ import annotations


def store_all(n: int) -> list[tuple[str, int]]:
    """Record every forward, then every backward."""
    return [("F_all", i) for i in range(n)] + [("B", i) for i in reversed(range(n))]


def segments(n: int, bounds: list[int]) -> list[tuple[str, int]]:
    """checkpoint_sequential style: keep a[b] at each segment start, recompute a segment before its backwards.

    Uses F_ck at a segment start and F_n inside it during the forward phase, F_all on recompute.
    """
    b = [0] + sorted(set(bounds) - {0, n}) + [n]
    ops: list[tuple[str, int]] = []
    for j in range(len(b) - 2):
        ops.append(("F_ck", b[j]))
        ops += [("F_n", i) for i in range(b[j] + 1, b[j + 1])]
    ops += [("F_all", i) for i in range(b[-2], n)]
    ops += [("B", i) for i in reversed(range(b[-2], n))]
    for j in reversed(range(len(b) - 2)):
        ops += [("F_all", i) for i in range(b[j], b[j + 1])]
        ops += [("B", i) for i in reversed(range(b[j], b[j + 1]))]
    return ops


def recompute_all(n: int) -> list[tuple[str, int]]:
    """Least memory: keep only a[0]; before each B i recompute a_i from the input with F_n."""
    ops = [("F_n", i) for i in range(n - 1)] + [("F_all", n - 1), ("B", n - 1)]
    for i in reversed(range(n - 1)):
        ops += [("F_n", k) for k in range(i)] + [("F_all", i), ("B", i)]
    return ops


def mixed(n: int) -> list[tuple[str, int]]:
    """F_ck checkpoints at every other stage, recorded recomputation between them."""
    return segments(n, list(range(2, n, 2)))
