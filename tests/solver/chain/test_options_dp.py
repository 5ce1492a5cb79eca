"""The multi-option chain DP (remat.solver.chain.dp.options, .options_front) against the single-option DP, a brute
force over every persistent schedule, and the simulator; `remat solve`/`remat pareto` on it."""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.cli import main
from remat.schedules import (
    ChainProfile,
    InfeasibleBudgetError,
    Stage,
    StageOption,
    check_schedule,
    load_schedule,
    save_profile,
    simulate,
)
from remat.solver.chain import optimal
from remat.solver.chain.dp.options import build_options_table, read_plan
from remat.solver.chain.dp.table import build_table
from remat.solver.chain.store_all import store_all_peak
from tests.solver.chain.chain_strategies import random_chains


@st.composite
def _with_options(draw, max_length: int = 6):
    """A random chain whose stages get 0-2 options: smaller saved sizes, slower backwards."""
    sizes = st.integers(0, 40)
    chain = draw(random_chains(sizes, st.floats(0.0, 5.0, allow_nan=False), max_length=max_length))
    stages = []
    for stage in chain.stages:
        options = []
        for _ in range(draw(st.integers(0, 2))):
            saved = draw(st.integers(stage.output_size, stage.saved_size))
            extra = draw(st.floats(0.0, 3.0, allow_nan=False))
            options.append(StageOption("o", saved, stage.backward_ms + extra, draw(sizes), draw(sizes)))
        stages.append(dataclasses.replace(stage, options=tuple(options)))
    return ChainProfile("options", chain.input_size, tuple(stages))


@settings(max_examples=60, deadline=None)
@given(random_chains(st.integers(0, 60), st.floats(0.0, 5.0, allow_nan=False), max_length=7), st.data())
def test_without_options_the_table_is_the_single_option_dps(profile, data):
    free = data.draw(st.integers(1, max(1, store_all_peak(profile))))
    slots = data.draw(st.integers(1, 40))
    ours = build_options_table(profile, free, slots)
    theirs = build_table(profile, ours.slot, ours.levels)
    assert np.array_equal(np.isinf(ours.top), np.isinf(theirs.top))
    finite = np.isfinite(ours.top)
    assert np.allclose(ours.top[finite], theirs.top[finite], rtol=1e-5, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(_with_options(), st.data())
def test_every_level_replays_in_the_simulator_as_claimed(profile, data):
    free = data.draw(st.integers(1, max(1, store_all_peak(profile))))
    table = build_options_table(profile, free, data.draw(st.integers(1, 30)))
    for k in range(table.levels + 1):
        if math.isinf(table.top[k]):
            continue
        plan = read_plan(profile, table, k)
        result = simulate(profile, plan.ops, timeline=False)
        assert result.peak_memory == plan.peak_memory <= profile.input_size + k * table.slot
        assert math.isclose(result.compute_ms, plan.compute_ms, rel_tol=1e-9, abs_tol=1e-9)
        assert math.isclose(plan.compute_ms, table.top[k], rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=40, deadline=None)
@given(_with_options(max_length=7), st.data())
def test_the_options_table_is_never_slower_than_the_single_option_table(profile, data):
    """Same slots, same levels: options can only add candidates to the record branch."""
    free = data.draw(st.integers(1, max(1, store_all_peak(profile))))
    slots = data.draw(st.integers(1, 40))
    ours = build_options_table(profile, free, slots)
    plain = build_options_table(profile.without_options(), free, slots)
    assert (ours.slot, ours.levels) == (plain.slot, plain.levels)
    assert np.all(ours.top <= plain.top + 1e-9)


@settings(max_examples=25, deadline=None)
@given(_with_options(max_length=8))
def test_options_are_never_worse_and_the_front_dominates(profile):
    plain = profile.without_options()
    ours = optimal.optimal_front(profile, slots=60)
    for point in optimal.optimal_front(plain, slots=60):
        # times equal up to float summation order (the front's own tolerance, pareto_order)
        slack = 1e-9 * max(1.0, point.compute_ms)
        assert any(p.peak_memory <= point.peak_memory and p.compute_ms <= point.compute_ms + slack for p in ours)
    peak = store_all_peak(profile)
    for budget in sorted({profile.input_size + (peak - profile.input_size) * q // 10 for q in range(11)}):
        try:
            without = optimal.solve(plain, budget, slots=60).predicted.compute_ms
        except InfeasibleBudgetError:
            without = math.inf
        try:
            schedule = optimal.solve(profile, budget, slots=60)
        except InfeasibleBudgetError:
            assert without == math.inf
            continue
        assert check_schedule(profile, schedule).compute_ms <= without + 1e-9


# -- brute force: Dijkstra over the states of persistent schedules, options included ----------------


def brute_force(profile: ChainProfile, budget: int) -> float | None:
    """Least step time (ms) of any persistent schedule whose every op peak is <= budget bytes.

    Written from docs/model.md's op table, independently of the DP: a state is which a[i] are
    held, which option each held abar[i] was recorded with, the next backward, and the activation
    the last op produced (persistence: F_n may only consume that one, never a stored checkpoint)."""
    n = profile.length
    act = [profile.activation_size(i) for i in range(n + 1)]
    st_ = profile.stages

    def memory(a_mask: int, abar: tuple[int, ...], nb: int) -> int:
        total = sum(act[i] for i in range(n + 1) if a_mask >> i & 1)
        total += sum(st_[i - 1].recording(o).saved_size for i, o in enumerate(abar) if o >= 0)
        return total + (act[nb + 1] if nb < n - 1 else 0)

    start = (1, (-1,) * (n + 1), n - 1, -1)
    dist = {start: 0.0}
    heap = [(0.0, start)]
    while heap:
        cost, state = heapq.heappop(heap)
        if cost > dist[state]:
            continue
        a_mask, abar, nb, fresh = state
        if nb < 0:
            return cost
        mem = memory(a_mask, abar, nb)
        moves = []
        for i in range(n):
            stage = st_[i]
            if not (a_mask >> i & 1 or abar[i] >= 0):
                continue
            if not a_mask >> (i + 1) & 1 and mem + act[i + 1] + stage.nograd_overhead <= budget:
                moves.append(((a_mask | 1 << (i + 1), abar, nb, i + 1), stage.forward_ms))
                if a_mask >> i & 1 and i != 0 and fresh == i:
                    moves.append((((a_mask | 1 << (i + 1)) & ~(1 << i), abar, nb, i + 1), stage.forward_ms))
            if abar[i + 1] < 0:
                for o in range(stage.option_count):
                    option = stage.recording(o)
                    if mem + option.saved_size + option.forward_overhead <= budget:
                        recorded = abar[: i + 1] + (o,) + abar[i + 2 :]
                        moves.append(((a_mask, recorded, nb, -1), stage.forward_ms))
        i = nb
        if abar[i + 1] >= 0 and (a_mask >> i & 1 or abar[i] >= 0):
            option = st_[i].recording(abar[i + 1])
            before = mem + (act[n] if i == n - 1 else 0)
            if before + act[i] + option.backward_overhead <= budget:
                new_a = a_mask & ~(1 << i) if i != 0 else a_mask
                released = abar[: i + 1] + (-1,) + abar[i + 2 :]
                moves.append(((new_a, released, i - 1, -1), option.backward_ms))
        for new_state, dt in moves:
            if cost + dt < dist.get(new_state, math.inf) - 1e-12:
                dist[new_state] = cost + dt
                heapq.heappush(heap, (cost + dt, new_state))
    return None


def _tiny_chain(rng: random.Random, n: int) -> ChainProfile:
    stages = []
    for i in range(n):
        out = rng.randint(1, 4)
        saved = out + rng.randint(0, 5)
        backward = round(rng.uniform(0.5, 4.0), 3)
        options = tuple(
            StageOption(
                f"o{k}",
                rng.randint(out, saved),
                backward + round(rng.uniform(0.0, 2.0), 3),
                rng.choice([0, 0, 1, 2]),
                rng.choice([0, 1, 3]),
            )
            for k in range(rng.randint(0, 2))
        )
        stages.append(
            Stage(
                f"s{i}",
                round(rng.uniform(0.5, 3.0), 3),
                backward,
                out,
                saved,
                rng.choice([0, 0, 1, 2]),
                rng.choice([0, 0, 1, 3]),
                options=options,
            )
        )
    return ChainProfile(f"tiny{n}", rng.randint(1, 3), tuple(stages))


def test_brute_force_agrees_with_the_simulator_on_a_hand_case():
    # docs/model.md's example: 90 bytes store-all, 75 with stage 0's option
    stage = Stage("s", 1.0, 2.0, 10, 30)
    profile = ChainProfile("two", 10, (dataclasses.replace(stage, options=(StageOption("o", 15, 2.5),)), stage))
    assert brute_force(profile, 90) == 6.0
    assert brute_force(profile, 75) == 6.5
    assert brute_force(profile.without_options(), 75) > 6.5


@pytest.mark.slow
def test_the_dp_is_the_persistent_optimum_over_options_on_tiny_chains():
    """One-byte slots (exact): at every integer budget of 3-4 stage chains (every fifth of 5), the DP's table equals
    the brute force's persistent optimum, and is infeasible exactly where the brute force is."""
    rng = random.Random(5)
    compared = better = 0
    for _ in range(12):
        profile = _tiny_chain(rng, rng.randint(3, 5))
        peak = store_all_peak(profile)
        step = 1 if profile.length < 5 else 5  # five stages: every fifth budget (the search is slow)
        for budget in range(profile.input_size, peak + 1, step):
            free = budget - profile.input_size
            exact = brute_force(profile, budget)
            if free == 0:
                continue
            table = build_options_table(profile, free, free)
            assert table.slot == 1 and table.levels == free
            ours = float(table.top[free])
            if exact is None:
                assert math.isinf(ours), (profile, budget)
                continue
            assert math.isclose(ours, exact, rel_tol=1e-9, abs_tol=1e-9), (profile, budget, ours, exact)
            compared += 1
            plain = brute_force(profile.without_options(), budget)
            better += plain is None or plain > exact + 1e-9
    assert compared > 50
    assert better > 5  # the options changed the optimum often enough for this to test something


# -- the CLI -------------------------------------------------------------------------------------


def _gpt_like() -> ChainProfile:
    """Twelve blocks: each with a 'save matmul outputs' option at 40% of its saved bytes."""
    block = Stage("block", 2.0, 4.0, 1 << 20, 9 << 20, 0, 1 << 20)
    option = StageOption("save matmul outputs", 4 << 20, 5.0, 0, 1 << 20)
    stages = (dataclasses.replace(block, name=f"block{i}", options=(option,)) for i in range(12))
    return ChainProfile("gpt-like", 1 << 20, tuple(stages))


def test_remat_solve_and_pareto_on_a_profile_with_options(tmp_path, capsys):
    path = tmp_path / "gpt.json"
    profile = _gpt_like()
    save_profile(profile, path)
    out = tmp_path / "s.json"
    assert main(["solve", str(path), "--budget", "40%", "--strategy", "optimal", "-o", str(out)]) == 0
    schedule = load_schedule(out)
    check_schedule(profile, schedule)
    assert any(len(op) == 3 for op in schedule.ops)
    assert ["F_all", 0, 1] in json.loads(out.read_text())["ops"] or schedule.extra["options_used"] > 0
    plain_out = tmp_path / "plain.json"
    save_profile(profile.without_options(), tmp_path / "plain-profile.json")
    assert (
        main(
            [
                "solve",
                str(tmp_path / "plain-profile.json"),
                "--budget",
                "40%",
                "--strategy",
                "optimal",
                "-o",
                str(plain_out),
            ]
        )
        == 0
    )
    assert schedule.budget == load_schedule(plain_out).budget  # same store-all peak: same 40%
    assert schedule.predicted.compute_ms < load_schedule(plain_out).predicted.compute_ms
    assert main(["simulate", str(path), str(out)]) == 0
    front = tmp_path / "front.json"
    assert main(["pareto", str(path), "--json", str(front), "--strategies", "optimal,chen-sqrt"]) == 0
    capsys.readouterr()
    points = json.loads(front.read_text())
    assert points
