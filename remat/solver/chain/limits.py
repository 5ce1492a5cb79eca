"""How long a chain schedule may be: the one limit the chain strategies share.

A schedule is held as a list of ops and written as JSON; recompute-all on 100,000 stages would
be n(n+3)/2 = 5 billion ops (hundreds of GB), and a sweep that builds every slot count's revolve
schedule just as many. A strategy refuses (in one line, saying why and the limit) a schedule
longer than :data:`MAX_OPS`, or leaves such candidates out of its search, so that every chain
strategy stays within bounded memory on long chains.
"""

from __future__ import annotations

MAX_OPS = 20_000_000  # ops in one schedule: ~160 MB as a list, ~350 MB as JSON


def recompute_all_ops_count(length: int) -> int:
    """Ops of recompute-all on ``length`` stages: n(n-1)/2 F_n, n F_all, n B."""
    return length * (length + 3) // 2
