"""hypothesis strategy for random chain profiles, shared by the solver and simulator property tests
(each test file picks the size, time and transient distributions that stress what it checks)."""

from __future__ import annotations

from hypothesis import strategies as st

from remat.schedules import ChainProfile, Stage


@st.composite
def random_chains(
    draw,
    sizes: st.SearchStrategy[int],
    times: st.SearchStrategy[float],
    overheads: st.SearchStrategy[int] | None = None,
    max_length: int = 12,
) -> ChainProfile:
    """Chains of 1..max_length stages: output and extra saved bytes from ``sizes``, transients from
    ``overheads`` (default ``sizes``), the no-grad transient absent or drawn likewise; ms from ``times``."""
    overheads = sizes if overheads is None else overheads
    stages = []
    for _ in range(draw(st.integers(1, max_length))):
        out = draw(sizes)
        stages.append(
            Stage(
                "s",
                draw(times),
                draw(times),
                out,
                out + draw(sizes),
                draw(overheads),
                draw(overheads),
                forward_nograd_overhead=draw(st.one_of(st.none(), overheads)),
            )
        )
    return ChainProfile("random", draw(sizes), tuple(stages))
