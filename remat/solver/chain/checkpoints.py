"""How many checkpoints a chain schedule holds: the most activations ``a[i]`` (i >= 1) at once.

What a front point's ``checkpoints`` column says, for any chain strategy's op list.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from remat.schedules import Op, fast_chain
from remat.schedules.simulator import FAST_FROM_OPS


def chain_checkpoints(ops: Sequence[Op]) -> int:
    """Most activations ``a[i]`` (i >= 1) held at once by a chain schedule (long op lists are
    counted by the compiled :func:`remat.schedules.fast_chain.most_held`, same rules)."""
    if len(ops) >= FAST_FROM_OPS:
        encoded = fast_chain.encode(ops)
        if encoded is not None:
            return int(fast_chain.most_held(*encoded))
    return checkpoints_reference(ops)


def checkpoints_reference(ops: Iterable[Op]) -> int:
    """:func:`chain_checkpoints` op by op in Python (the rules the compiled count follows)."""
    held: set[int] = set()
    most = 0
    for name, i, *_ in ops:
        if name in ("F_ck", "F_n"):
            held.add(i + 1)
            if name == "F_n":
                held.discard(i)
        elif name == "B":
            held.discard(i)
        most = max(most, len(held))
    return most
