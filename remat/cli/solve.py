"""``remat solve``: a schedule for a profile under a memory budget, printed in plain words (text.py)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Iterator

from tqdm import tqdm

from remat.cli.args import (
    TIME_LIMIT_HELP,
    check_paths,
    integer_at_least,
    integer_between,
    max_solver_workers,
    output_file,
    seconds,
)
from remat.cli.text import solve_lines
from remat.schedules import load_profile, save_schedule
from remat.schedules.simulator import check_schedule
from remat.solver import STRATEGIES, solve
from remat.solver.budget import budget_bytes, profile_kind, reference_peak
from remat.solver.chain.optimal import DEFAULT_SLOTS
from remat.solver.graph.hierarchical import SLOTS as HIERARCHICAL_SLOTS
from remat.solver.graph.ilp import DEFAULT_TIME_LIMIT, FORMULATIONS

DEFAULT_BUDGET_PERCENT = 100
# without --strategy: the strategy that meets every budget it can be met at, fastest (docs/strategies.md)
DEFAULT_STRATEGIES = {"chain": "optimal", "graph": "hierarchical"}
# the one example every help text shows (remat --help, remat solve --help)
EXAMPLE = "remat solve examples/resnet_like.json --budget 40% --strategy optimal -o schedule.json"
# the options a strategy may take, passed to it by name (each strategy says which it reads)
STRATEGY_OPTIONS = ("segments", "checkpoints", "slots", "time_limit", "workers", "formulation")


def run(args: argparse.Namespace) -> int:
    """Solve, check the schedule in the simulator, write it (``-o``) and print what it is."""
    check_paths(args, {"PROFILE": "profile"}, {"-o": "output"})
    profile = load_profile(args.profile)
    budget = budget_bytes(profile, args.budget, "--budget")
    strategy = args.strategy if args.strategy is not None else DEFAULT_STRATEGIES[profile_kind(profile)]
    options = {name: getattr(args, name, None) for name in STRATEGY_OPTIONS}
    with _elapsed_bar(profile, strategy, args.time_limit):
        schedule = solve(profile, budget, strategy, **options)
    check_schedule(profile, schedule)
    if args.output:
        save_schedule(schedule, args.output)
    for label, text in solve_lines(schedule, args.budget, reference_peak(profile)):
        print(f"{label:<12} {text}")
    if args.output:
        print(f"wrote {args.output}")
    return 0


@contextlib.contextmanager
def _elapsed_bar(profile, strategy: str, time_limit: float | None) -> Iterator[None]:
    """A progress bar of elapsed seconds against the time limit (stderr) while a time-limited
    solver (ilp, lp-rounding) runs; nothing for the other strategies."""
    chosen = STRATEGIES.get((profile_kind(profile), strategy))
    if chosen is None or "time_limit" not in chosen.options:
        yield
        return
    # the ilp default; lp-rounding usually ends sooner
    total = float(time_limit) if time_limit else DEFAULT_TIME_LIMIT
    done = threading.Event()
    bar = tqdm(
        total=round(total), desc=f"{strategy} (time limit)", unit="s", file=sys.stderr, leave=False, disable=None
    )
    start = time.monotonic()

    def tick() -> None:
        while not done.wait(0.5):
            bar.n = min(round(time.monotonic() - start), bar.total)
            bar.refresh()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        bar.close()


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``solve`` to ``remat``'s subcommands."""
    solve_cmd = sub.add_parser(
        "solve",
        help="solve a schedule for a profile under a memory budget",
        description="Solve a checkpointing schedule for PROFILE under a memory budget.",
        epilog=f"example: {EXAMPLE}",
    )
    solve_cmd.add_argument("profile", help="chain or graph profile (JSON)")
    solve_cmd.add_argument(
        "--budget",
        default=f"{DEFAULT_BUDGET_PERCENT}%",
        help="memory budget: bytes, 6GiB, 500MB, a percentage of the store-all peak like 40%%, or a fraction "
        f"of it like 0.4 (docs/formats.md, 'Budgets'; default {DEFAULT_BUDGET_PERCENT}%%)",
    )
    solve_cmd.add_argument(
        "--strategy",
        help="strategy name (see 'remat strategies'; default: "
        + ", ".join(f"{name} for a {kind} profile" for kind, name in DEFAULT_STRATEGIES.items())
        + ")",
    )
    solve_cmd.add_argument("--segments", type=integer_at_least(1), help="sequential: force this many segments")
    solve_cmd.add_argument(
        "--checkpoints",
        type=integer_at_least(1),
        help="revolve: force this many checkpoint slots (the input's included)",
    )
    solve_cmd.add_argument(
        "--slots",
        type=integer_at_least(1),
        help=f"optimal (default {DEFAULT_SLOTS}), hierarchical ({HIERARCHICAL_SLOTS}): memory discretization levels",
    )
    solve_cmd.add_argument(
        "--time-limit", type=seconds, help=f"ilp, lp-rounding: {TIME_LIMIT_HELP} (ilp default {DEFAULT_TIME_LIMIT:g})"
    )
    solve_cmd.add_argument(
        "--workers",
        type=integer_between(1, max_solver_workers, "4 x this machine's CPUs, at least 64"),
        help="ilp: CP-SAT search workers (default: 8, or the core count if larger)",
    )
    solve_cmd.add_argument(
        "--formulation",
        choices=FORMULATIONS,
        help="ilp: Checkmate's stage MILP (default) or Moccasin's retention intervals (docs/strategies.md)",
    )
    solve_cmd.add_argument("-o", "--output", type=output_file, help="write the schedule JSON here")
    solve_cmd.set_defaults(func=run)


__all__ = ["DEFAULT_BUDGET_PERCENT", "DEFAULT_STRATEGIES", "EXAMPLE", "add_parser", "run"]
