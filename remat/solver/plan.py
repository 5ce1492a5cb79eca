"""``remat plan``'s arithmetic: how a chain grows with the batch (or a sequence length), and the
largest size whose schedule fits a memory at a bounded overhead. Pure: no torch, no profiling.

* :class:`GrowthModel`: every stage field (and ``input_size``) as the polynomial through profiles
  at a few sizes ``x``. Sizes are interpolated in exact rational arithmetic and rounded *up* to
  whole bytes, so a conv/linear stack (sizes linear in the batch) is predicted to the byte; times
  are interpolated as floats.
* :func:`fit_growth`: the lowest degree (1 = linear, 2 = quadratic, ...) whose fit through the
  first ``degree + 1`` profiles reproduces every later one (sizes exactly, times within
  ``time_rtol``); it profiles one more size when all given ones are used up (attention's scores
  are quadratic in the sequence length, so a linear fit fails there and a quadratic one holds).
* :func:`largest_fitting`: the largest size whose schedule by a strategy (solved by the public
  :func:`remat.solver.solve`, hence checked by the simulator) fits the activation budget with at
  most the allowed overhead; exponential then binary search, so the next size is known not to fit.

Units: bytes, milliseconds; overheads are fractions (0.1 = +10% over the store-all step time).
See docs/plan.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError, Schedule, Stage, format_size

SIZE_FIELDS = ("output_size", "saved_size", "forward_overhead", "backward_overhead", "param_size")
TIME_FIELDS = ("forward_ms", "backward_ms")
DEGREE_NAMES = {1: "linear", 2: "quadratic", 3: "cubic"}
ADAM_COPIES = 4  # parameters, their gradients, Adam's first and second moments (same dtype)


def _lagrange(xs: Sequence[int], ys: Sequence[Fraction], x: int) -> Fraction:
    """The value at ``x`` of the polynomial through the points (xs, ys), exactly."""
    total = Fraction(0)
    for j, (xj, yj) in enumerate(zip(xs, ys, strict=True)):
        term = Fraction(yj)
        for m, xm in enumerate(xs):
            if m != j:
                term *= Fraction(x - xm, xj - xm)
        total += term
    return total


@dataclass(frozen=True)
class GrowthModel:
    """A chain whose sizes and times are polynomials in ``x`` through ``profiles`` at ``points``.

    Attributes:
        points: the sizes the polynomial passes through (degree = len(points) - 1).
        profiles: the real profiles at those sizes (same stages).
        checked: sizes at which a real profile was compared with the prediction and matched.
        time_rtol: relative tolerance the times were checked with (None: times not checked).
    """

    points: tuple[int, ...]
    profiles: tuple[ChainProfile, ...]
    checked: tuple[int, ...] = ()
    time_rtol: float | None = None
    _memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def degree(self) -> int:
        return len(self.points) - 1

    @property
    def kind(self) -> str:
        """``linear``, ``quadratic``, ... (the polynomial degree in words)."""
        return DEGREE_NAMES.get(self.degree, f"degree-{self.degree}")

    def _size(self, values: Sequence[int], x: int) -> int:
        exact = _lagrange(self.points, [Fraction(v) for v in values], x)
        return max(0, math.ceil(exact))  # never predict fewer bytes than the polynomial says

    def _time(self, values: Sequence[float], x: int) -> float:
        return max(0.0, float(_lagrange(self.points, [Fraction(v) for v in values], x)))

    def profile_at(self, x: int) -> ChainProfile:
        """The chain predicted at size ``x`` (a positive integer); cached per model (a handful of sizes)."""
        if x in self._memo:
            return self._memo[x]
        if x in self.points:
            return self.profiles[self.points.index(x)]
        stages = []
        for i, stage in enumerate(self.profiles[0].stages):
            row = [p.stages[i] for p in self.profiles]
            sizes = {f: self._size([getattr(s, f) for s in row], x) for f in SIZE_FIELDS}
            sizes["saved_size"] = max(sizes["saved_size"], sizes["output_size"])
            times = {f: self._time([getattr(s, f) for s in row], x) for f in TIME_FIELDS}
            stages.append(Stage(name=stage.name, **sizes, **times))
        first = self.profiles[0]
        metadata = {k: v for k, v in first.metadata.items() if k != "forward_overheads_nograd"}
        metadata["growth"] = {"model": self.kind, "points": list(self.points), "checked": list(self.checked), "x": x}
        profile = ChainProfile(
            name=f"{first.name}@{x}",
            input_size=self._size([p.input_size for p in self.profiles], x),
            stages=tuple(stages),
            metadata=metadata,
        )
        if len(self._memo) < 64:  # bounded: a search touches ~2 log2(x) sizes
            self._memo[x] = profile
        return profile


def mismatches(model: GrowthModel, real: ChainProfile, x: int, time_rtol: float | None) -> list[str]:
    """What the prediction at ``x`` gets wrong against the real profile there (empty: it matches).

    Sizes must be equal to the byte; times within ``time_rtol`` relative (None: not compared)."""
    predicted = model.profile_at(x)
    found = []
    if predicted.input_size != real.input_size:
        found.append(f"input_size: predicted {predicted.input_size}, profiled {real.input_size}")
    for i, (p, r) in enumerate(zip(predicted.stages, real.stages, strict=True)):
        for name in SIZE_FIELDS:
            if getattr(p, name) != getattr(r, name):
                found.append(f"stage {i} ({r.name}) {name}: predicted {getattr(p, name)}, profiled {getattr(r, name)}")
        for name in TIME_FIELDS if time_rtol is not None else ():
            want, got = getattr(r, name), getattr(p, name)
            if abs(got - want) > time_rtol * max(abs(want), 1e-12):
                found.append(f"stage {i} ({r.name}) {name}: predicted {got:.6g} ms, profiled {want:.6g} ms")
    return found


def _same_stages(profiles: Sequence[ChainProfile], xs: Sequence[int]) -> None:
    names = [s.name for s in profiles[0].stages]
    for profile, x in zip(profiles[1:], xs[1:], strict=True):
        if [s.name for s in profile.stages] != names:
            raise RematError(f"the model's chain changes with the size: at {x} it has other stages than at {xs[0]}")


def fit_growth(
    profile_at: Callable[[int], ChainProfile],
    sizes: Sequence[int],
    max_degree: int = 3,
    time_rtol: float | None = 1e-6,
) -> tuple[GrowthModel, list[str]]:
    """The lowest-degree growth model that reproduces every real profile beyond its fit points.

    ``profile_at(x)`` profiles the real model at size ``x``; ``sizes`` (at least 3, increasing
    positive integers) are profiled first, and one more size (the next step of the same spacing)
    is profiled whenever a degree fails and no unused size is left. Returns the model and the notes
    on the degrees that failed (what went wrong, briefly). Raises ``RematError`` if no degree up to
    ``max_degree`` holds."""
    xs = [int(x) for x in sizes]
    if len(xs) < 3 or any(x < 1 for x in xs) or any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
        raise RematError(f"--points: need at least 3 increasing positive sizes (fit 2, check 1), got {list(sizes)}")
    profiles = [profile_at(x) for x in xs]
    _same_stages(profiles, xs)
    notes: list[str] = []
    for degree in range(1, max_degree + 1):
        while len(xs) < degree + 2:
            xs.append(xs[-1] + (xs[-1] - xs[-2]))
            profiles.append(profile_at(xs[-1]))
            _same_stages(profiles, xs)
        fit = degree + 1
        model = GrowthModel(tuple(xs[:fit]), tuple(profiles[:fit]), tuple(xs[fit:]), time_rtol)
        wrong = []
        for x, real in zip(xs[fit:], profiles[fit:], strict=True):
            wrong += mismatches(model, real, x, time_rtol)
        if not wrong:
            return model, notes
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        notes.append(f"{model.kind} fit through {list(xs[:fit])} fails at {xs[fit:]}: {wrong[0]}{more}")
    raise RematError(f"no polynomial growth of degree <= {max_degree} holds: {notes[-1]}")


def overhead(schedule: Schedule) -> float:
    """Recomputation as a fraction of the store-all step time (0.1 = +10%)."""
    predicted = schedule.predicted
    base = predicted.compute_ms - predicted.recompute_ms
    return predicted.recompute_ms / base if base > 0 else 0.0


def fixed_bytes_auto(profile: ChainProfile) -> int:
    """Parameters + their gradients + Adam's two moments: 4 x the profile's parameter bytes."""
    return ADAM_COPIES * sum(s.param_size for s in profile.stages)


@dataclass(frozen=True)
class Fit:
    """The largest size that fits for one strategy.

    Attributes:
        strategy: the strategy name.
        size: the largest size x whose schedule fits (None: not even ``lower``).
        schedule: that schedule (solved for the activation budget), or None.
        next_size: ``size + 1`` (or ``lower``), which does not fit ...
        next_reason: ... for this reason (one line).
    """

    strategy: str
    size: int | None
    schedule: Schedule | None
    next_size: int
    next_reason: str

    @property
    def overhead(self) -> float | None:
        return overhead(self.schedule) if self.schedule is not None else None


def try_size(
    growth: GrowthModel, x: int, budget: int, max_overhead: float, strategy: str, solve: Callable
) -> tuple[Schedule | None, str]:
    """The strategy's schedule at size ``x`` if it fits ``budget`` bytes within ``max_overhead``;
    else (None, why not)."""
    profile = growth.profile_at(x)
    try:
        schedule = solve(profile, budget, strategy)
    except InfeasibleBudgetError as error:
        if error.min_budget is None:
            return None, str(error)
        return None, f"its least memory, {format_size(error.min_budget)} ({error.min_budget} bytes), exceeds the budget"
    if overhead(schedule) > max_overhead + 1e-12:
        return None, f"its fastest schedule within the budget needs +{100 * overhead(schedule):.1f}% overhead"
    return schedule, ""


def largest_fitting(
    growth: GrowthModel,
    budget: int,
    max_overhead: float,
    strategy: str,
    lower: int = 1,
    upper: int = 2**40,
) -> Fit:
    """The largest x in [lower, upper] whose ``strategy`` schedule (by :func:`remat.solver.solve`)
    fits ``budget`` activation bytes with at most ``max_overhead``.

    Assumes fitting is monotone in x (memory grows with x; so does the least memory at a given
    overhead); the search ends on an x that fits and x + 1 that does not, both by the simulator."""
    from remat.solver import solve

    if budget < 0:
        raise RematError(f"the activation budget is negative ({budget} bytes): the fixed bytes exceed the memory")
    best, reason = try_size(growth, lower, budget, max_overhead, strategy, solve)
    if best is None:
        return Fit(strategy, None, None, lower, reason)
    lo, hi, hi_reason = lower, None, ""
    step = 1
    while hi is None:  # exponential search for a size that does not fit
        probe = min(upper, lo + step)
        schedule, why = try_size(growth, probe, budget, max_overhead, strategy, solve)
        if schedule is None:
            hi, hi_reason = probe, why
        elif probe == upper:
            return Fit(strategy, upper, schedule, upper + 1, f"the search stops at {upper}")
        else:
            lo, best, step = probe, schedule, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        schedule, why = try_size(growth, mid, budget, max_overhead, strategy, solve)
        if schedule is None:
            hi, hi_reason = mid, why
        else:
            lo, best = mid, schedule
    return Fit(strategy, lo, best, hi, hi_reason)


PLAN_STRATEGIES = ("optimal", "chen-sqrt", "store-all")


def overhead_curve(
    growth: GrowthModel, budget: int, overheads: Sequence[float], strategies: Sequence[str] = PLAN_STRATEGIES
) -> dict[str, list[int | None]]:
    """Per strategy, the largest size that fits ``budget`` bytes at each allowed overhead (fractions,
    increasing); None where not even size 1 fits. A larger tolerance never lowers the answer, so each
    search starts at the previous answer."""
    curves: dict[str, list[int | None]] = {}
    for strategy in strategies:
        sizes: list[int | None] = []
        for allowed in overheads:
            start = next((s for s in reversed(sizes) if s is not None), 1)
            sizes.append(largest_fitting(growth, budget, allowed, strategy, lower=start).size)
        curves[strategy] = sizes
    return curves


__all__ = [
    "ADAM_COPIES",
    "Fit",
    "GrowthModel",
    "fit_growth",
    "fixed_bytes_auto",
    "largest_fitting",
    "mismatches",
    "overhead_curve",
    "PLAN_STRATEGIES",
    "overhead",
    "try_size",
]
