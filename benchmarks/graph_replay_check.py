"""Graph schedules replayed on real models (CPU): predicted vs measured peak memory and step time.

For a ResNet with skips, a U-Net with long skips and a small transformer (the replay tests'
models, tests/graph_models.py), graph profiles are built with torch.fx, every registered graph
strategy is solved at budgets (percent of the store-all peak), and each schedule is replayed with
:class:`remat.executor.graph_replay.GraphReplay` and measured with the live-storage tracker:

* ``after``: largest |measured - predicted| live bytes right after an op (the graph model's
  accounting; should be a few bytes of bookkeeping);
* ``peak``: measured peak including each op's transients vs the simulator's peak;
* ``step``: median step milliseconds, and the plain model's in the same run (ratio).

    python benchmarks/graph_replay_check.py --budgets 100,80,60 --time-limit 10

Writes benchmarks/results/graph_replay_check.json with the machine it ran on. One intra-op
thread (the machine is shared; two threads per op mostly wait on each other).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the test models

import torch  # noqa: E402
from graph_models import TinyTransformer, small_resnet, small_unet  # noqa: E402

from remat.executor.graph_profile import profile_graph  # noqa: E402
from remat.executor.graph_replay import GraphReplay, measure_graph  # noqa: E402
from remat.schedules import InfeasibleBudgetError, format_size  # noqa: E402
from remat.solver.registry import get_strategy, solve, strategy_names  # noqa: E402

MODELS = {
    "resnet": (small_resnet, lambda: torch.randn(4, 3, 32, 32)),
    "unet": (small_unet, lambda: torch.randn(2, 3, 32, 32)),
    "transformer": (TinyTransformer, lambda: torch.randint(0, 50, (8, 16))),
}


def plain_step_ms(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        begin = time.perf_counter()
        out = model(x)
        out.float().sum().backward()
        times.append((time.perf_counter() - begin) * 1e3)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="100,80,60", help="percent of the store-all peak")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds for ilp / lp-rounding")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per schedule")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "graph_replay_check.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    budgets = [int(b) for b in args.budgets.split(",")]
    rows = []
    header = (
        f"{'model':<12} {'strategy':<12} {'budget':>6} {'predicted':>10} {'measured':>10} {'peak err':>8} "
        f"{'after err':>9} {'step ms':>8} {'plain ms':>8}"
    )
    print(header)
    for name, (factory, make_input) in MODELS.items():
        torch.manual_seed(0)
        model = factory()
        x = make_input()
        profile = profile_graph(model, example_inputs=x, name=name)
        plain = plain_step_ms(copy.deepcopy(model), x, args.steps)
        store_all = solve(profile, 2**62, "store-all").predicted.peak_memory
        for strategy in strategy_names("graph"):
            options = {"time_limit": args.time_limit} if "time_limit" in get_strategy(strategy, "graph").options else {}
            for percent in budgets:
                budget = store_all * percent // 100
                try:
                    schedule = solve(profile, budget, strategy, **options)
                except InfeasibleBudgetError:
                    print(f"{name:<12} {strategy:<12} {percent:>5}% infeasible")
                    continue
                wrapped = GraphReplay(copy.deepcopy(model), schedule, profile)
                m = measure_graph(wrapped, [x], timed_steps=args.steps)
                after_err = max(abs(a - b) for a, b in zip(m.measured_after, m.predicted_after, strict=True))
                row = {
                    "model": name,
                    "strategy": strategy,
                    "budget_percent": percent,
                    "budget": budget,
                    "predicted_peak": m.predicted_peak,
                    "measured_peak": m.measured_peak,
                    "peak_error": m.peak_error,
                    "max_after_error_bytes": after_err,
                    "step_ms": m.step_ms,
                    "plain_step_ms": plain,
                    "predicted_compute_ms_flops_estimate": m.predicted_ms,
                    "recompute_ms": schedule.predicted.recompute_ms,
                    "extra": {k: v for k, v in schedule.extra.items() if isinstance(v, (int, float, str))},
                }
                rows.append(row)
                print(
                    f"{name:<12} {strategy:<12} {percent:>5}% {format_size(m.predicted_peak):>10} "
                    f"{format_size(m.measured_peak):>10} {100 * m.peak_error:>+7.1f}% {after_err:>8}B "
                    f"{m.step_ms:>8.1f} {plain:>8.1f}"
                )
    result = {
        "benchmark": "graph_replay_check",
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_average_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "note": "2-core machine shared with other sessions: step times are noisy",
        },
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
