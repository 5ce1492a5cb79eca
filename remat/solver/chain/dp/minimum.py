"""The exact least memory of any persistent schedule of a chain, in bytes, and one schedule that
reaches it (for :mod:`remat.solver.chain.dp.single`).

The ``optimal`` table's lower bounds ``lo`` (:mod:`remat.solver.chain.dp.table`) say, for every
segment, the least free memory at which the segment can be run at all. Computed with a slot of
one byte nothing is rounded, so ``lo[0, n]`` is exact: the recurrence takes, for each segment,
the minimum over its two ways to start (record the first stage, or checkpoint some ``a[j]``) of
the largest requirement of that way's ops and sub-segments, and feasibility is monotone in the
free memory, so this minimum is the least free memory of any persistent schedule. The option
that attains it is kept per segment (``arg``); reading the schedule back along those options
gives a schedule whose simulated peak is that minimum. No memory levels are involved: the cost is
the bounds pass alone, O(n**3) integer steps in the compiled kernel.

Units: bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from remat.schedules import ChainProfile
from remat.solver.chain.dp.kernel import bounds
from remat.solver.chain.dp.table import Sizes, chain_sizes

_BIG_SLOTS = 1 << 62


@dataclass(frozen=True)
class MinimumMemory:
    """The exact minimum of one chain, shaped like a table for :func:`remat.solver.chain.dp.readback.plan`.

    Attributes:
        free: least free memory (bytes above the input a_0) of any persistent schedule.
        need: (n+1, n+1) least free bytes of every segment.
        arg: (n+1, n+1) the option attaining it: 0 record stage s, j > s checkpoint a[j],
            -2 store the whole segment.
        sizes: the chain's sizes with a slot of one byte.
    """

    free: int
    need: np.ndarray
    arg: np.ndarray
    sizes: Sizes
    slots: int = _BIG_SLOTS  # plan() clamps to it; no clamp applies in bytes

    def decision(self, s: int, t: int, k: int) -> int:
        """The minimum-memory option of segment [s, t), or -1 below its least free bytes ``k``."""
        if k < int(self.need[s, t]):
            return -1
        return int(self.arg[s, t])


def exact_minimum(profile: ChainProfile) -> MinimumMemory:
    """The exact least free memory of a persistent schedule of ``profile`` (see the module doc)."""
    n = profile.length
    sizes = chain_sizes(profile, 1)
    act = np.array(sizes.act, dtype=np.int64)
    saved = np.array([st.saved_size for st in profile.stages], dtype=np.int64)
    need, _, _, arg = bounds(
        n,
        0,
        1,
        sizes.act_slots,
        sizes.g_slots,
        sizes.saved_slots,
        np.ascontiguousarray(sizes.forward_slots[:, 0]),
        np.ascontiguousarray(sizes.forward_slots[:, 1]),
        act,
        np.ascontiguousarray(sizes.record_bytes[:, 0]),
        np.ascontiguousarray(sizes.record_bytes[:, 1]),
        saved,
    )
    return MinimumMemory(int(need[0, n]), need, arg, sizes)
