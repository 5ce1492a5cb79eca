"""``remat plan``: growth models fitted from profiles at a few sizes, and the largest size that fits."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError, Stage, simulate
from remat.solver import solve
from remat.solver.chain.store_all import store_all_peak
from remat.solver.plan import (
    confirmed_largest,
    fit_growth,
    fixed_bytes_auto,
    largest_fitting,
    overhead,
    overhead_curve,
)


def polynomial_chain(coefficients, x: int, quadratic: int = 0, knee: int = 0) -> ChainProfile:
    """Stage i: output o0 + o1 x, saved s0 + s1 x (+ quadratic x^2 on stage 0), times f x and 2 f x;
    backward overhead max(knee, 7 x): a constant buffer until the activation temporaries outgrow it."""
    stages = []
    for i, (o0, o1, s0, s1, f) in enumerate(coefficients):
        output = o0 + o1 * x
        saved = output + s0 + s1 * x + (quadratic * x * x if i == 0 else 0)
        stages.append(
            Stage(
                f"s{i}",
                forward_ms=f * x,
                backward_ms=2 * f * x,
                output_size=output,
                saved_size=saved,
                backward_overhead=max(knee, 7 * x),
                param_size=7,
            )
        )
    return ChainProfile(name="poly", input_size=3 * x, stages=tuple(stages))


COEFFS = [(4, 10, 0, 20, 1.0), (0, 30, 5, 60, 2.5), (2, 10, 0, 10, 0.5), (0, 20, 1, 40, 1.5), (1, 10, 0, 30, 1.0)]


def _same_sizes(predicted: ChainProfile, real: ChainProfile) -> bool:
    fields = ("output_size", "saved_size", "forward_overhead", "backward_overhead", "param_size")
    return predicted.input_size == real.input_size and all(
        getattr(p, f) == getattr(r, f) for p, r in zip(predicted.stages, real.stages, strict=True) for f in fields
    )


def test_linear_growth_predicts_sizes_exactly() -> None:
    profiled = []
    growth = fit_growth(lambda x: profiled.append(x) or polynomial_chain(COEFFS, x), [2, 4, 6])
    assert (growth.kind, growth.points, growth.describe()) == ("linear", (2, 4, 6), [])
    assert profiled == [2, 4, 6]
    for x in (1, 37, 1000):
        predicted, real = growth.profile_at(x), polynomial_chain(COEFFS, x)
        assert _same_sizes(predicted, real)
        for p, r in zip(predicted.stages, real.stages, strict=True):
            assert p.forward_ms == pytest.approx(r.forward_ms, rel=1e-12)


def test_quadratic_term_rejects_linear_and_profiles_one_more_size() -> None:
    profiled = []
    growth = fit_growth(lambda x: profiled.append(x) or polynomial_chain(COEFFS, x, quadratic=3), [8, 16, 24])
    assert growth.kind == "quadratic" and growth.points == (8, 16, 24, 32)
    assert profiled == [8, 16, 24, 32]
    assert growth.describe() == ["quadratic: 1 fields (stage 0 (s0) saved_size)"]
    assert _same_sizes(growth.profile_at(100), polynomial_chain(COEFFS, 100, quadratic=3))


def test_a_knee_is_piecewise_linear_and_exact_beyond_it() -> None:
    growth = fit_growth(lambda x: polynomial_chain(COEFFS, x, knee=100), [4, 12, 20])  # 7x = 100 at x ~ 14
    assert growth.points == (4, 12, 20, 28, 36) and growth.kind == "linear with piecewise-linear fields"
    assert growth.describe()[0].startswith("piecewise linear: 5 fields (stage 0 (s0) backward_overhead")
    for x in (4, 20, 50, 500):
        assert _same_sizes(growth.profile_at(x), polynomial_chain(COEFFS, x, knee=100))
    assert (
        growth.profile_at(13).stages[0].backward_overhead
        >= polynomial_chain(COEFFS, 13, knee=100).stages[0].backward_overhead
    )


def test_a_knee_beyond_the_profiled_sizes_is_found_by_confirmation() -> None:
    """Profiled below the knee, the overhead looks constant; the real profile at the answer shows
    otherwise, and the refined model's answer is right by the true chain."""

    def true(x: int) -> ChainProfile:
        return polynomial_chain(COEFFS, x, knee=2000)

    growth = fit_growth(true, [1, 2, 3])
    assert growth.profile_at(1000).stages[0].backward_overhead == 2000  # wrong: the truth is 7000
    fit, refined = confirmed_largest(growth, true, 300_000, 0.3, "store-all")
    assert len(refined.points) > len(growth.points)
    assert _fits(true(fit.size), 300_000, 0.3, "store-all") and not _fits(true(fit.size + 1), 300_000, 0.3, "store-all")


def test_bad_points_and_changing_chains_are_errors() -> None:
    def one(x: int) -> ChainProfile:
        return ChainProfile("e", 1, (Stage("s", 1.0, 1.0, x, x),))

    for points in ([1, 2], [4, 2, 6], [0, 1, 2], [1, 1, 2]):
        with pytest.raises(RematError, match="at least 3 increasing"):
            fit_growth(one, points)

    def renamed(x: int) -> ChainProfile:
        return ChainProfile("r", 1, (Stage(f"s{x}", 1.0, 1.0, 1, 1),))

    with pytest.raises(RematError, match="other stages"):
        fit_growth(renamed, [1, 2, 3])


def test_times_checked_within_tolerance() -> None:
    def noisy(x: int) -> ChainProfile:
        profile = polynomial_chain(COEFFS, x)
        stage = profile.stages[0]
        bumped = Stage(stage.name, stage.forward_ms * (1.1 if x == 6 else 1.0), stage.backward_ms,
                       stage.output_size, stage.saved_size)  # fmt: skip
        return ChainProfile(profile.name, profile.input_size, (bumped, *profile.stages[1:]))

    growth = fit_growth(noisy, [2, 4, 6], time_rtol=None)  # measured times: least squares, sizes decide
    assert growth.points == (2, 4, 6) and growth.describe() == []
    assert growth.profile_at(8).stages[0].forward_ms == pytest.approx(8.8)  # the line through (2, 2), (4, 4), (6, 6.6)
    growth = fit_growth(noisy, [2, 4, 6], time_rtol=1e-6)  # estimated times: the bump is seen
    assert any("stage 0 (s0) forward_ms" in line for line in growth.describe())


def _fits(profile: ChainProfile, budget: int, allowed: float, strategy: str) -> bool:
    """Independent of plan.py: solve the true profile and check budget (simulator) and overhead."""
    try:
        schedule = solve(profile, budget, strategy)
    except InfeasibleBudgetError:
        return False
    result = simulate(profile, schedule.ops)
    base = result.compute_ms - result.recompute_ms
    return result.peak_memory <= budget and result.recompute_ms <= allowed * base + 1e-9


chain_coefficients = st.lists(
    st.tuples(st.integers(0, 50), st.integers(1, 100), st.integers(0, 50), st.integers(0, 300), st.floats(0.1, 5.0)),
    min_size=2,
    max_size=6,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chain_coefficients,
    st.integers(2_000, 200_000),
    st.sampled_from([0.0, 0.1, 0.3, 1.0]),
    st.sampled_from(["optimal", "chen-sqrt", "store-all"]),
)
def test_planned_size_fits_and_the_next_does_not(coefficients, budget, allowed, strategy) -> None:
    growth = fit_growth(lambda x: polynomial_chain(coefficients, x), [1, 2, 3])
    fit = largest_fitting(growth, budget, allowed, strategy)
    if fit.size is None:
        assert not _fits(polynomial_chain(coefficients, 1), budget, allowed, strategy)
        return
    assert fit.next_size == fit.size + 1
    assert fit.schedule.predicted.peak_memory <= budget and overhead(fit.schedule) <= allowed + 1e-12
    assert _fits(polynomial_chain(coefficients, fit.size), budget, allowed, strategy)
    assert not _fits(polynomial_chain(coefficients, fit.size + 1), budget, allowed, strategy)


@settings(max_examples=15, deadline=None)
@given(chain_coefficients, st.integers(2_000, 100_000))
def test_store_all_size_is_the_brute_force_one_and_optimal_is_at_least_it(coefficients, budget) -> None:
    growth = fit_growth(lambda x: polynomial_chain(coefficients, x), [1, 2, 3])
    brute = 0
    while store_all_peak(polynomial_chain(coefficients, brute + 1)) <= budget:
        brute += 1
    assert (largest_fitting(growth, budget, 0.0, "store-all").size or 0) == brute
    assert (largest_fitting(growth, budget, 0.0, "optimal").size or 0) >= brute


def test_overhead_curve_never_decreases() -> None:
    growth = fit_growth(lambda x: polynomial_chain(COEFFS, x), [1, 2, 3])
    curves = overhead_curve(growth, 50_000, [0.0, 0.1, 0.3, 0.6, 1.0])
    for sizes in curves.values():
        values = [s or 0 for s in sizes]
        assert values == sorted(values)
    assert curves["optimal"][-1] > curves["store-all"][-1] > 0
    assert curves["chen-sqrt"][0] is None  # sqrt(n) always recomputes


def test_fixed_bytes_auto_is_four_copies_of_the_parameters() -> None:
    assert fixed_bytes_auto(polynomial_chain(COEFFS, 3)) == 4 * 7 * len(COEFFS)


def test_negative_budget_is_an_error() -> None:
    growth = fit_growth(lambda x: polynomial_chain(COEFFS, x), [1, 2, 3])
    with pytest.raises(RematError, match="negative"):
        largest_fitting(growth, -1, 0.1, "optimal")


# --- with torch: real models profiled on meta and on the CPU -------------------------------------------

torch = pytest.importorskip("torch")

from remat.cli import main  # noqa: E402
from remat.profile.batch import chain_profiler  # noqa: E402
from remat.solver.plan import mismatches  # noqa: E402

CPU = torch.device("cpu")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "shape"), [("remat.zoo.small:mlp", (16, 64)), ("remat.zoo.small:cnn", (4, 3, 16, 16))]
)
def test_conv_and_linear_stacks_grow_linearly_in_the_batch_to_the_byte(spec, shape) -> None:
    profile_at = chain_profiler(spec, shape, 0, "meta", torch.float32, CPU)
    growth = fit_growth(profile_at, [4, 8, 12])
    assert growth.kind == "linear" and growth.describe() == []
    assert mismatches(growth, profile_at(29), 29, 1e-6) == []  # a fourth, unrelated batch
    # a real CPU profile: activation sizes are the meta ones to the byte; its transients are the
    # allocator's (kernel buffers meta tensors cannot see), so they are compared apart
    measured = chain_profiler(spec, shape, 0, "measured", torch.float32, CPU)(5)
    assert [m for m in mismatches(growth, measured, 5, None) if "overhead" not in m] == []


@pytest.mark.slow
def test_attention_is_quadratic_in_the_sequence_length() -> None:
    profile_at = chain_profiler("remat.zoo.small:transformer", (2, 16, 32), 1, "meta", torch.float32, CPU)
    growth = fit_growth(profile_at, [8, 16, 24])
    assert growth.kind.startswith("quadratic") and growth.points[:4] == (8, 16, 24, 32)
    assert any(line.startswith("quadratic") and "saved_size" in line for line in growth.describe())
    assert mismatches(growth, profile_at(40), 40, 1e-6) == []


@pytest.mark.slow
def test_cli_plan_output_and_plot(tmp_path, capsys) -> None:
    plot = tmp_path / "plan.png"
    args = ["plan", "--model", "remat.zoo.small:cnn", "--input-shape", "4,3,16,16", "--memory", "20MB"]
    assert main([*args, "--max-overhead", "40%", "--plot", str(plot)]) == 0  # chen-sqrt costs +33% here
    out = capsys.readouterr().out
    assert "growth       linear" in out and "4 x " in out and "confirmed" in out
    for name in ("optimal", "chen-sqrt", "store-all"):
        assert any(line.startswith(name) and "does not fit" in line for line in out.splitlines())
    assert plot.stat().st_size > 1000


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--memory", "12XB"], "unknown unit"),
        (["--memory", "1MB", "--vary", "dim=9"], "--vary"),
        (["--memory", "1MB", "--fixed-bytes", "2MB"], "--fixed-bytes"),
        (["--memory", "1MB", "--points", "8,4,2"], "--points"),
        (["--memory", "1MB", "--points", "a,b"], "--points"),
        (["--memory", "1MB", "--max-overhead", "lots"], "--max-overhead"),
    ],
)
def test_cli_plan_bad_input_is_one_line_and_exit_2(extra, message, capsys) -> None:
    args = ["plan", "--model", "remat.zoo.small:mlp", "--input-shape", "4,64", *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and err.startswith("remat: error:")


@pytest.mark.slow
def test_sizes_the_model_cannot_take_are_one_line_errors_unless_excluded(capsys) -> None:
    args = ["plan", "--model", "remat.zoo.gpt2:gpt2_tiny", "--input-shape", "2,16,32", "--vary", "dim=1"]
    args += ["--memory", "2MB", "--max-overhead", "30%"]
    assert main(args) == 2  # positions exist for 64 tokens only: the search runs past them
    err = capsys.readouterr().err.strip()
    assert err.startswith("remat: error: profiling the model at input dimension 1 =") and "\n" not in err
    assert main([*args, "--max-size", "64"]) == 0
    out = capsys.readouterr().out
    # 64, the largest size a search may ask for, is profiled; 80 (the next point a fit would ask
    # for) never is: the search ends at --max-size
    assert "growth       quadratic" in out and "in dim 1" in out and "65 not searched" in out
    assert "at dim 1 16, 32, 48, 64\n" in out


@pytest.mark.slow
def test_planned_batch_runs_within_the_memory_and_the_next_does_not_fit(tmp_path, capsys) -> None:
    """CPU validation: plan from meta profiles (sizes equal the CPU's, checked above), execute the planned
    batch on the CPU with remat execute, and measure its peak."""
    schedule, profile, report = tmp_path / "s.json", tmp_path / "p.json", tmp_path / "r.json"
    spec, memory, fixed = "remat.zoo.small:mlp", 400_000, 100_000
    args = ["plan", "--model", spec, "--input-shape", "4,64", "--memory", str(memory), "--fixed-bytes", str(fixed)]
    assert main([*args, "--max-overhead", "30%", "-o", str(schedule),
                 "--save-profile", str(profile)]) == 0  # fmt: skip
    saved = json.loads(profile.read_text())["metadata"]  # a predicted profile, or the real one plan confirmed
    planned = saved["growth"]["x"] if "growth" in saved else saved["batch_size"]
    assert planned > 4
    capsys.readouterr()
    shape = f"{planned},64"
    run = ["execute", "--model", spec, "--input-shape", shape, "--device", "cpu", "--schedule", str(schedule)]
    # the saved profile is a meta one, which remat execute refuses on the CPU; without --profile it
    # profiles the planned batch on the CPU and measures the step with the allocator
    assert main([*run, "--profile", str(profile), "--steps", "1"]) == 2
    assert "measured on meta, not cpu" in capsys.readouterr().err
    assert main([*run, "--json", str(report), "--steps", "1"]) == 0
    measured = json.loads(report.read_text())["peak_memory"]["measured"]
    assert measured <= memory - fixed
    # the next batch, profiled for real (not from the growth model), has no schedule within 30%
    real_next = chain_profiler(spec, (4, 64), 0, "meta", torch.float32, CPU)(planned + 1)
    assert not _fits(real_next, memory - fixed, 0.3, "optimal")


class _Doubled(torch.nn.Module):
    """Its stages are two Linears, but its forward also doubles: a cut that is not the model."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def remat_stages(self):
        return [("a", self.a), ("b", self.b)]

    def forward(self, x):
        return 2 * self.b(self.a(x))


def test_a_chain_that_differs_from_the_model_is_refused() -> None:
    from remat.profile.batch import check_chain_matches
    from remat.trace.chain import as_chain

    model, x = _Doubled(), torch.randn(3, 4)
    with pytest.raises(RematError, match="does not compute what the model computes"):
        check_chain_matches(model, as_chain(model), x)
    plain = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 4))
    check_chain_matches(plain, as_chain(plain), x)  # equal, dropout included (same RNG)
