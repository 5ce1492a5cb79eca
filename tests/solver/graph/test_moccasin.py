"""``ilp --formulation moccasin``: the retention-interval model (remat/solver/graph/ilp/moccasin.py).

With enough copies per node its optimum is brute force's optimum over every op order (which is
never above Checkmate's frontier-advancing optimum); the model's own peak is the simulator's; the
strategy returns simulator-checked schedules no worse than its warm start, with a bound below."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.cli import main
from remat.schedules import RematError, simulate
from remat.schedules.simulator import check_schedule
from remat.solver import solve
from remat.solver.graph.baselines import best_baseline_plan, store_all_plan
from remat.solver.graph.ilp.moccasin import solve_intervals
from remat.solver.graph.stages import memory_lower_bound, plan_peak
from tests.solver.graph._graph_bruteforce import frontier_optimum, general_optimum, random_graph


def _budgets(profile):
    low, high = memory_lower_bound(profile), plan_peak(profile, store_all_plan(profile))
    return list(range(low, high + 64, 64))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_enough_copies_give_the_optimum_over_every_op_order(seed):
    profile = random_graph(6, seed)
    for budget in _budgets(profile):
        anywhere = general_optimum(profile, budget)
        result = solve_intervals(profile, budget, 30, workers=2, copies=profile.size)
        if anywhere is None:
            assert result.status == "infeasible"
            continue
        assert result.status == "optimal"
        assert result.objective_ms == pytest.approx(anywhere, abs=1e-9)
        frontier = frontier_optimum(profile, budget)
        assert frontier is not None and result.objective_ms <= frontier + 1e-9  # Checkmate's space is smaller
        simulated = simulate(profile, result.ops, timeline=False)
        assert simulated.peak_memory == result.peak_memory <= budget
        assert simulated.compute_ms == pytest.approx(result.objective_ms)
        assert result.lower_bound_ms == pytest.approx(result.objective_ms, abs=1e-6)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000), st.integers(5, 9), st.floats(0.0, 1.0))
def test_the_strategy_is_checked_and_never_worse_than_its_warm_start(seed, n, where):
    profile = random_graph(n, seed)
    budgets = _budgets(profile)
    budget = budgets[int(where * (len(budgets) - 1))]
    warm = best_baseline_plan(profile, budget)
    try:
        schedule = solve(profile, budget, "ilp", time_limit=10, workers=2, formulation="moccasin")
    except RematError:
        assert general_optimum(profile, budget) is None or warm is None
        return
    check_schedule(profile, schedule)
    assert schedule.extra["formulation"] == "moccasin"
    assert schedule.predicted.peak_memory <= budget
    if warm is not None:
        assert schedule.predicted.compute_ms <= warm[1].cost_ms(profile) + 1e-9
    anywhere = general_optimum(profile, budget) if n <= 7 else None
    if anywhere is not None:
        assert schedule.predicted.compute_ms >= anywhere - 1e-9  # nothing beats every op order
    assert schedule.extra["lower_bound_ms"] <= schedule.predicted.compute_ms + 1e-9


def test_unknown_formulation_is_one_line(tmp_path, capsys):
    profile = random_graph(6, 1)
    with pytest.raises(RematError, match="unknown formulation 'gurobi'"):
        solve(profile, 10**9, "ilp", formulation="gurobi")
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(profile.to_dict()))
    budget = str(next(b for b in _budgets(profile) if general_optimum(profile, b) is not None))
    out = tmp_path / "schedule.json"
    args = ["solve", str(path), "--strategy", "ilp", "--budget", budget, "--time-limit", "5", "-o", str(out)]
    assert main([*args, "--formulation", "moccasin"]) == 0
    assert json.loads(out.read_text())["formulation"] == "moccasin"
    capsys.readouterr()
    assert main(["solve", str(path), "--strategy", "chen-sqrt", "--budget", budget, "--formulation", "moccasin"]) == 2
    err = capsys.readouterr().err.strip()
    assert "option 'formulation' does not apply" in err and "\n" not in err
