"""``remat plan``'s arithmetic: how a chain grows with the batch (or a sequence length), and the
largest size whose schedule fits a memory at a bounded overhead. Pure: no torch, no profiling.

* :class:`GrowthModel`: every stage field (and ``input_size``) as a function of the size ``x``
  fitted through real profiles. Sizes are interpolated in exact rational arithmetic and rounded
  *up* to whole bytes, so a conv/linear stack (sizes linear in the batch) is predicted to the byte;
  times are interpolated as floats (measured ones fitted by least squares).
* :func:`fit_growth`: per field, the lowest degree (1 = linear, 2 = quadratic, ...) whose
  polynomial through the largest profiled sizes reproduces every other profile (sizes exactly,
  times within ``time_rtol``), profiling one more size while a field needs it to tell; where no
  degree holds (transient overheads: maxima of linear terms), piecewise-linear interpolation.
  Attention's scores are quadratic in the sequence length: a linear fit fails there and a
  quadratic one holds.
* :func:`largest_fitting`: the largest size whose schedule by a strategy (solved by the public
  :func:`remat.solver.solve`, hence checked by the simulator) fits the activation budget with at
  most the allowed overhead; exponential then binary search, so the next size is known not to fit.
  :func:`confirmed_largest` re-profiles the answer and the next size for real and refits if needed.

Units: bytes, milliseconds; overheads are fractions (0.1 = +10% over the store-all step time).
See docs/plan.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError, Schedule, Stage, format_size
from remat.schedules.chain_profile import lowest_backward_overhead
from remat.solver.registry import solve  # remat plan solves by strategy name, through the public entry point

SIZE_FIELDS = (
    "output_size",
    "saved_size",
    "forward_overhead",
    "forward_nograd_overhead",
    "backward_overhead",
    "param_size",
    "handed_on",
)
TIME_FIELDS = ("forward_ms", "backward_ms")
DEGREE_NAMES = {0: "piecewise linear", 1: "linear", 2: "quadratic", 3: "cubic"}
ADAM_COPIES = 4  # parameters, their gradients, Adam's first and second moments (same dtype)
PIECEWISE = 0  # a field no polynomial up to the maximum degree reproduces


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


def _evaluate(xs: Sequence[int], ys: Sequence[Fraction], degree: int, x: int) -> Fraction:
    """A field's value at ``x``: the polynomial of ``degree`` through the *last* degree + 1 points
    (small sizes are the special cases, e.g. batch 1), or for PIECEWISE the segment between the
    neighbouring points (the first or last segment extended outside them)."""
    if degree != PIECEWISE:
        return _lagrange(xs[-(degree + 1) :], ys[-(degree + 1) :], x)
    k = next((k for k in range(1, len(xs) - 1) if x <= xs[k]), len(xs) - 1)
    return _lagrange(xs[k - 1 : k + 1], ys[k - 1 : k + 1], x)


def _degree(xs: Sequence[int], ys: Sequence[Fraction], max_degree: int, close: Callable) -> int | None:
    """The lowest degree whose polynomial through the last degree + 1 points reproduces every other
    point; PIECEWISE if none up to ``max_degree`` does; None if another point is needed to tell."""
    for degree in range(1, max_degree + 1):
        if len(xs) < degree + 2:
            return None
        fit = degree + 1
        if all(close(_lagrange(xs[-fit:], ys[-fit:], x), y) for x, y in zip(xs[:-fit], ys[:-fit], strict=True)):
            return degree
    return PIECEWISE


def _field(stage: Stage, name: str) -> float:
    # an absent no-grad transient is the recording forward's (docs/model.md): fit the value in force
    return stage.nograd_overhead if name == "forward_nograd_overhead" else getattr(stage, name)


def _fields(profile: ChainProfile) -> list[tuple[str, float]]:
    """Every (label, value) the growth model predicts, in a fixed order: input size, then per stage."""
    values: list[tuple[str, float]] = [("input_size", profile.input_size)]
    for i, stage in enumerate(profile.stages):
        values += [(f"stage {i} ({stage.name}) {f}", _field(stage, f)) for f in SIZE_FIELDS + TIME_FIELDS]
    return values


@dataclass(frozen=True)
class GrowthModel:
    """A chain whose every size and time is a function of ``x`` fitted through real profiles.

    Attributes:
        points: every profiled size, increasing.
        profiles: the real profiles there (same stages).
        degrees: per field of :func:`_fields` (input size, then each stage's sizes and times), the
            degree of its polynomial (1 linear, 2 quadratic, ...) or PIECEWISE (0).
        time_rtol: relative tolerance the times were checked with; None: measured times, fitted by
            least squares of the sizes' highest degree (they are noisy).
    """

    points: tuple[int, ...]
    profiles: tuple[ChainProfile, ...]
    degrees: tuple[int, ...]
    time_rtol: float | None = None
    _memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def kind(self) -> str:
        """The sizes' growth in words: ``linear``, ``quadratic``, ... (+ ``piecewise linear`` parts)."""
        sizes = [d for (label, _), d in zip(_fields(self.profiles[0]), self.degrees, strict=True) if "_ms" not in label]
        top = DEGREE_NAMES.get(max(sizes), f"degree-{max(sizes)}")
        return top + (" with piecewise-linear fields" if PIECEWISE in sizes and max(sizes) > 0 else "")

    def describe(self) -> list[str]:
        """The fields that are not linear, grouped by degree (empty: everything is linear)."""
        labels = [label for label, _ in _fields(self.profiles[0])]
        lines = []
        for degree in sorted(set(self.degrees) - {1}):
            chosen = [label for label, d in zip(labels, self.degrees, strict=True) if d == degree]
            shown = ", ".join(chosen[:3]) + (f" and {len(chosen) - 3} more" if len(chosen) > 3 else "")
            lines.append(f"{DEGREE_NAMES.get(degree, degree)}: {len(chosen)} fields ({shown})")
        return lines

    def _values(self, x: int) -> list[Fraction | float]:
        rows = [[Fraction(v) for _, v in _fields(p)] for p in self.profiles]
        labels = [label for label, _ in _fields(self.profiles[0])]
        top = max([d for label, d in zip(labels, self.degrees, strict=True) if "_ms" not in label] + [1])
        values: list[Fraction | float] = []
        for j, (label, degree) in enumerate(zip(labels, self.degrees, strict=True)):
            ys = [row[j] for row in rows]
            if "_ms" in label and self.time_rtol is None:
                coefficients = np.polyfit(self.points, [float(y) for y in ys], min(top, len(ys) - 1))
                values.append(float(np.polyval(coefficients, x)))
            else:
                values.append(_evaluate(self.points, ys, degree, x))
        return values

    def profile_at(self, x: int) -> ChainProfile:
        """The chain predicted at size ``x``: sizes rounded up to whole bytes (>= 0 but
        ``backward_overhead``, which may be negative), times floats >= 0.
        A profiled size returns its real profile. Memoized per model (a search touches ~2 log2 x sizes)."""
        if x in self.points:
            return self.profiles[self.points.index(x)]
        if x in self._memo:
            return self._memo[x]
        values = iter(self._values(x))
        input_size = max(0, math.ceil(next(values)))
        stages = []
        for stage in self.profiles[0].stages:
            sizes = {f: math.ceil(next(values)) for f in SIZE_FIELDS}
            sizes = {f: v if f == "backward_overhead" else max(0, v) for f, v in sizes.items()}
            sizes["handed_on"] = min(sizes["handed_on"], sizes["output_size"])
            sizes["saved_size"] = max(sizes["saved_size"], sizes["output_size"] - sizes["handed_on"])
            # the one signed field (early release, docs/model.md)
            floor = lowest_backward_overhead(sizes["saved_size"], sizes["output_size"])
            sizes["backward_overhead"] = max(sizes["backward_overhead"], floor)
            times = {f: max(0.0, float(next(values))) for f in TIME_FIELDS}
            stages.append(Stage(name=stage.name, **sizes, **times))
        first = self.profiles[0]
        metadata = {k: v for k, v in first.metadata.items() if k != "forward_overheads_nograd"}
        metadata.update(_input_at(self.profiles, x))
        metadata["growth"] = {"model": self.kind, "points": list(self.points), "x": x}
        profile = ChainProfile(name=f"{first.name}@{x}", input_size=input_size, stages=tuple(stages), metadata=metadata)
        if len(self._memo) < 256:
            self._memo[x] = profile
        return profile


def mismatches(model: GrowthModel, real: ChainProfile, x: int, time_rtol: float | None) -> list[str]:
    """What the prediction at ``x`` gets wrong against the real profile there (empty: it matches).

    Sizes must be equal to the byte; times within ``time_rtol`` relative (None: not compared)."""
    predicted = _fields(model.profile_at(x))
    found = []
    for (label, got), (_, want) in zip(predicted, _fields(real), strict=True):
        if "_ms" not in label and got != want:
            found.append(f"{label}: predicted {got}, profiled {want}")
        elif "_ms" in label and time_rtol is not None and abs(got - want) > time_rtol * max(abs(want), 1e-12):
            found.append(f"{label}: predicted {got:.6g} ms, profiled {want:.6g} ms")
    return found


def _input_at(profiles: Sequence[ChainProfile], x: int) -> dict[str, Any]:
    """The predicted profile's input shape (and batch size): the profiled shapes with the varied
    dimension set to ``x``, so that ``remat execute`` checks it against the input it runs on."""
    shapes = [p.metadata.get("input_shape") for p in profiles]
    if any(not isinstance(shape, list) for shape in shapes) or len({len(shape) for shape in shapes}) != 1:
        return {}
    varied = [d for d in range(len(shapes[0])) if len({shape[d] for shape in shapes}) > 1]
    if len(varied) != 1:
        return {}
    shape = list(shapes[0])
    shape[varied[0]] = x
    return {"input_shape": shape, "batch_size": shape[0]}


def _same_stages(profiles: Mapping[int, ChainProfile]) -> None:
    (x0, first), *rest = sorted(profiles.items())
    names = [s.name for s in first.stages]
    for x, profile in rest:
        if [s.name for s in profile.stages] != names:
            raise RematError(f"the model's chain changes with the size: at {x} it has other stages than at {x0}")


def fit_growth(
    profile_at: Callable[[int], ChainProfile],
    sizes: Sequence[int],
    max_degree: int = 3,
    time_rtol: float | None = 1e-6,
    known: Mapping[int, ChainProfile] | None = None,
    upper: int | None = None,
) -> GrowthModel:
    """Fit every field of the chain, separately, with the lowest polynomial degree that reproduces
    all other profiled sizes (sizes to the byte, times within ``time_rtol``; None: times not
    checked), falling back to piecewise-linear interpolation where no degree up to ``max_degree``
    holds (transient overheads are maxima of linear terms: the weight-gradient buffer and the
    activation temporaries).

    ``profile_at(x)`` profiles the real model at size ``x``; ``sizes`` (at least 3 increasing
    positive integers) are profiled first (``known`` profiles are reused), then one more size (the
    same spacing again) while a field needs it to tell its degree, up to max_degree + 2 sizes, and
    never above ``upper`` (the largest size a search may ask for): a field still undecided there is
    interpolated piecewise-linearly between the profiled sizes."""
    xs = sorted({int(x) for x in sizes})
    if len(xs) < 3 or len(xs) != len(sizes) or xs[0] < 1 or list(sizes) != xs:
        raise RematError(f"--points: need at least 3 increasing positive sizes (fit 2, check 1), got {list(sizes)}")
    profiles = dict(known or {})
    while True:
        for x in xs:
            if x not in profiles:
                profiles[x] = profile_at(x)
        chosen = {x: profiles[x] for x in sorted(set(xs) | set(profiles))}
        _same_stages(chosen)
        points = sorted(chosen)
        table = [[Fraction(v) for _, v in _fields(p)] for p in chosen.values()]
        labels = [label for label, _ in _fields(chosen[points[0]])]
        degrees = []
        for j, label in enumerate(labels):
            ys = [row[j] for row in table]
            timed = "_ms" in label
            if timed and time_rtol is None:
                degrees.append(1)
                continue

            def close(got: Fraction, want: Fraction, timed: bool = timed) -> bool:
                if not timed:
                    return got == want
                return abs(float(got) - float(want)) <= time_rtol * max(abs(float(want)), 1e-12)

            degrees.append(_degree(points, ys, max_degree, close))
        following = points[-1] + (points[-1] - points[-2])
        if None in degrees and upper is not None and following > upper:
            degrees = [PIECEWISE if d is None else d for d in degrees]
        if None not in degrees:
            return GrowthModel(tuple(points), tuple(chosen.values()), tuple(degrees), time_rtol)
        xs = [*points, following]


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
        which = "fastest schedule" if strategy == "optimal" else "schedule"
        return None, f"its {which} within the budget needs +{100 * overhead(schedule):.1f}% overhead"
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
            return Fit(strategy, upper, schedule, upper + 1, f"not searched (the largest size searched is {upper})")
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


def confirmed_largest(
    growth: GrowthModel,
    profile_at: Callable[[int], ChainProfile],
    budget: int,
    max_overhead: float,
    strategy: str,
    rounds: int = 4,
    upper: int = 2**40,
) -> tuple[Fit, GrowthModel]:
    """:func:`largest_fitting`, then real profiles at the answer x and at x + 1: if either differs
    from the prediction (a piecewise field changed piece beyond the profiled sizes), they join the
    fit and the search runs again. Returns the fit and the (possibly refined) growth model; the
    answer's and the next size's predicted profiles then equal real ones (sizes to the byte)."""
    for _ in range(rounds):
        fit = largest_fitting(growth, budget, max_overhead, strategy, upper=upper)
        sizes = [x for x in (fit.size, fit.next_size) if x is not None and x <= upper]
        real = {x: profile_at(x) for x in sizes if x not in growth.points}
        if all(not mismatches(growth, p, x, growth.time_rtol) for x, p in real.items()):
            return fit, growth
        known = dict(zip(growth.points, growth.profiles, strict=True)) | real
        growth = fit_growth(profile_at, growth.points[:3], time_rtol=growth.time_rtol, known=known, upper=upper)
    raise RematError(f"the growth model still mispredicts the {strategy} answer after {rounds} refinements")


PLAN_STRATEGIES = ("optimal", "chen-sqrt", "store-all")


def overhead_curve(
    growth: GrowthModel,
    budget: int,
    overheads: Sequence[float],
    strategies: Sequence[str] = PLAN_STRATEGIES,
    upper: int = 2**40,
) -> dict[str, list[int | None]]:
    """Per strategy, the largest size that fits ``budget`` bytes at each allowed overhead (fractions,
    increasing); None where not even size 1 fits. A larger tolerance never lowers the answer, so each
    search starts at the previous answer."""
    curves: dict[str, list[int | None]] = {}
    for strategy in strategies:
        sizes: list[int | None] = []
        for allowed in overheads:
            start = next((s for s in reversed(sizes) if s is not None), 1)
            sizes.append(largest_fitting(growth, budget, allowed, strategy, lower=start, upper=upper).size)
        curves[strategy] = sizes
    return curves


__all__ = [
    "ADAM_COPIES",
    "Fit",
    "GrowthModel",
    "confirmed_largest",
    "fit_growth",
    "fixed_bytes_auto",
    "largest_fitting",
    "mismatches",
    "overhead_curve",
    "PLAN_STRATEGIES",
    "overhead",
    "try_size",
]
