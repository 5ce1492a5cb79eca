"""``remat pareto``: the memory/compute trade-off of a profile, summarized, plotted and written as rows.

A chain's front is the optimal DP's (remat.solver.pareto.chain) with each baseline swept over
budgets; a graph's is every graph strategy solved at a sweep of budgets (remat.solver.pareto.graph).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from remat.cli.args import (
    TIME_LIMIT_HELP,
    check_paths,
    cpu_count,
    integer_at_least,
    integer_between,
    output_file,
    plot_file,
    refuse_unless_applies,
    seconds,
)
from remat.plots import plot_front, preload  # matplotlib itself is imported only when called
from remat.schedules import RematError, format_size, load_profile
from remat.solver import STRATEGIES, strategy_names
from remat.solver.budget import profile_kind
from remat.solver.chain.optimal import DEFAULT_SLOTS
from remat.solver.front import overhead_percent, write_front_csv, write_front_json
from remat.solver.pareto.chain import chain_front
from remat.solver.pareto.graph import graph_front

DEFAULT_POINTS = 24
DEFAULT_GRAPH_TIME_LIMIT = 10.0  # seconds per graph solve: a sweep makes many
DEFAULT_WORKERS = 1


@dataclass(frozen=True)
class _Front:
    """What the summary, the files and the plot read from either kind of front."""

    points: list
    by_strategy: dict
    marks: dict
    store_all_ms: float
    failed: tuple = ()
    notes: tuple = ()
    left_out: tuple = ()  # (strategy, one-line reason) for each strategy that refused this profile


def run(args: argparse.Namespace) -> int:
    """Sweep the front, print one line per strategy (and the marked points), write ``--csv``, ``--json``, ``--plot``."""
    if args.old_output is not None:  # -o was the plot before it meant a command's main output
        raise RematError(
            f"-o {args.old_output}: pareto draws its plot with --plot {args.old_output} (--csv, --json: the points)"
        )
    check_paths(args, {"PROFILE": "profile"}, {"--plot": "plot", "--csv": "csv", "--json": "json"})
    profile = load_profile(args.profile)
    kind = profile_kind(profile)
    strategies = _strategies(args.strategies, kind)
    _check_options(args, kind, strategies)
    front = _chain_front(profile, strategies, args) if kind == "chain" else _graph_front(profile, strategies, args)
    if not front.points:
        failed = front.failed
        first = f": {failed[0].strategy} at {format_size(failed[0].budget)}: {failed[0].message}" if failed else ""
        raise RematError(f"no strategy produced a schedule for this profile{first}")
    _print_summary(front)
    _print_failed(front.failed)
    _print_notes(front.notes)
    _print_left_out(front.left_out)
    if args.csv:
        write_front_csv(front.points, args.csv)
        print(f"wrote {args.csv}")
    if args.json:
        write_front_json(profile, front.points, front.store_all_ms, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        title = f"{profile.name}: step time vs peak memory"
        plot_front(title, front.by_strategy, front.store_all_ms, args.plot, front.marks)
        print(f"wrote {args.plot}")
    return 0


def _check_options(args: argparse.Namespace, kind: str, strategies: list[str]) -> None:
    """Refuse (one line) an option that this profile kind or these strategies never read."""
    refuse_unless_applies(kind == "chain" and args.workers is not None, "--workers", _CHAIN_ONLY_DP)
    refuse_unless_applies(kind == "chain" and args.time_limit is not None, "--time-limit", _CHAIN_ONLY_DP)
    refuse_unless_applies(kind == "graph" and args.points is not None, "--points", _GRAPH_SWEEP)
    refuse_unless_applies(kind == "graph" and args.slots is not None, "--slots", _GRAPH_SWEEP)
    baselines = [name for name in strategies if name != "optimal"]
    refuse_unless_applies(
        kind == "chain" and args.points is not None and not baselines,
        "--points",
        "with --strategies optimal alone (it sets how many budgets each baseline is swept at)",
    )
    limited = [name for name in strategies if name in TIME_LIMITED]
    refuse_unless_applies(
        # an unknown name is graph_front's to refuse, with the list of known ones
        kind == "graph"
        and args.time_limit is not None
        and not limited
        and set(strategies) <= set(strategy_names(kind)),
        "--time-limit",
        f"to {', '.join(strategies)} (only {' and '.join(TIME_LIMITED)} have a time limit)",
    )


_CHAIN_ONLY_DP = "to a chain profile (graphs only: a chain's front is the DP's, exact, with no solver processes)"
_GRAPH_SWEEP = "to a graph profile (chains only: a graph's front sweeps its own budgets, with no DP slots)"
# the graph strategies that read --time-limit (remat strategies lists their options): ilp, lp-rounding
TIME_LIMITED = tuple(name for (kind, name), s in STRATEGIES.items() if kind == "graph" and "time_limit" in s.options)


def _strategies(text: str | None, kind: str) -> list[str]:
    """``--strategies`` as names; every strategy of ``kind`` when it is not given."""
    if text is None:
        return strategy_names(kind)
    strategies = [name.strip() for name in text.split(",") if name.strip()]
    if not strategies:
        raise RematError(f"--strategies: no strategy names in {text!r} (give e.g. optimal,chen-sqrt)")
    return strategies


def _chain_front(profile, strategies: list[str], args: argparse.Namespace) -> _Front:
    # matplotlib's import (~0.5 s) overlaps the DP's last tables instead of following them
    waiting = preload if args.plot else None
    front = chain_front(
        profile,
        strategies,
        slots=args.slots or DEFAULT_SLOTS,
        points=DEFAULT_POINTS if args.points is None else args.points,
        progress=True,
        while_waiting=waiting,
    )
    return _Front(list(front.points), front.by_strategy(), front.marks(), front.store_all_ms, left_out=front.left_out)


def _graph_front(profile, strategies: list[str], args: argparse.Namespace) -> _Front:
    front = graph_front(
        profile,
        strategies=strategies,
        budgets=None,
        time_limit=DEFAULT_GRAPH_TIME_LIMIT if args.time_limit is None else args.time_limit,
        workers=DEFAULT_WORKERS if args.workers is None else args.workers,
        progress=True,
    )
    points = list(front.points)
    by_strategy: dict[str, list] = {}
    for point in points:
        by_strategy.setdefault(point.strategy, []).append(point)
    return _Front(points, by_strategy, {}, profile.store_all_compute_ms, front.failed, front.notes)


def _print_summary(front: _Front) -> None:
    """Per strategy: its points and its least memory at that point's step time; then the marked points."""
    print(f"{'strategy':<14} {'points':>6}  {'least memory':>14}  {'its step time':>16}")
    for name, group in front.by_strategy.items():
        least = min(group, key=lambda p: p.peak_memory)
        overhead = max(0.0, overhead_percent(least.compute_ms, front.store_all_ms))
        size = format_size(least.peak_memory)
        print(f"{name:<14} {len(group):>6}  {size:>14}  {least.compute_ms:>9.2f} ms +{overhead:.0f}%")
    for label, point in front.marks.items():
        overhead = max(0.0, overhead_percent(point.compute_ms, front.store_all_ms))
        print(f"{label}: {format_size(point.peak_memory)}, {point.compute_ms:.2f} ms (+{overhead:.1f}%)")


def _print_failed(failed) -> None:
    """The (strategy, budget) pairs of a graph front that gave no schedule: one line per strategy
    for its expected refusals (the count, the budgets, the reason at the largest), and every
    unexpected one on its own line with its message."""
    if not failed:
        return
    by_strategy: dict[str, list] = {}
    for f in failed:
        by_strategy.setdefault(f.strategy, []).append(f)
    for name, group in by_strategy.items():
        expected = sorted((f for f in group if not f.unexpected), key=lambda f: f.budget)
        if expected:
            span = format_size(expected[0].budget)
            if len(expected) > 1:
                span = f"{len(expected)} budgets from {span} to {format_size(expected[-1].budget)}; at the largest"
            print(f"{name}: no schedule at {span}: {expected[-1].message}")
        for f in group:
            if f.unexpected:
                print(f"{name}: FAILED at {format_size(f.budget)} ({f.budget} bytes), please report: {f.message}")


def _print_notes(notes) -> None:
    """One line per strategy whose solves left notes (e.g. the time limit was too short to beat
    the warm start): at how many budgets, and the note at the largest."""
    by_strategy: dict[str, list] = {}
    for name, budget, note in notes:
        by_strategy.setdefault(name, []).append((budget, note))
    for name, group in by_strategy.items():
        budget, note = max(group)
        print(f"{name}: note at {len(group)} budget(s); at {format_size(budget)}: {note}")


def _print_left_out(left_out) -> None:
    """One line per asked-for strategy that refused this chain (too long for it), with its reason:
    the front is drawn without it, and the user is told so rather than finding it missing."""
    for name, reason in left_out:
        print(f"{name}: left out: {reason}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``pareto`` to ``remat``'s subcommands."""
    pareto = sub.add_parser(
        "pareto",
        help="plot the memory/compute Pareto front",
        description="Sweep the memory/compute trade-off of PROFILE: the optimal front (chain DP, or the "
        "graph solvers) and each baseline at a sweep of budgets; plot it and write CSV/JSON rows.",
        epilog="example: remat pareto examples/resnet_like.json --plot front.png --csv front.csv",
    )
    pareto.add_argument("profile", help="chain or graph profile (JSON)")
    pareto.add_argument("--plot", type=plot_file, help="write the plot (PNG, or .pdf, .svg) here")
    # -o is each command's main output; pareto's plot was -o before: refused in run(), naming --plot
    pareto.add_argument("-o", "--output", dest="old_output", help=argparse.SUPPRESS)
    pareto.add_argument("--csv", type=output_file, help="write one row per front point (CSV) here")
    pareto.add_argument("--json", type=output_file, help="write the front points (JSON) here")
    pareto.add_argument(
        "--strategies", help="comma-separated strategy names (default: every strategy for the profile kind)"
    )
    pareto.add_argument(
        "--slots",
        type=integer_at_least(1),
        help=f"optimal: memory discretization levels (default {DEFAULT_SLOTS})",
    )
    pareto.add_argument(
        "--points",
        type=integer_at_least(1),
        help=f"budgets per baseline sweep (chains; default {DEFAULT_POINTS})",
    )
    pareto.add_argument(
        "--time-limit",
        type=seconds,
        help=f"graphs: per ILP / LP-rounding solve, {TIME_LIMIT_HELP} (default {DEFAULT_GRAPH_TIME_LIMIT:g})",
    )
    pareto.add_argument(
        "--workers",
        type=integer_between(1, lambda: 4 * cpu_count(), "4 x this machine's CPUs"),
        help=f"graphs: solver processes (default {DEFAULT_WORKERS})",
    )
    pareto.set_defaults(func=run)


__all__ = ["DEFAULT_GRAPH_TIME_LIMIT", "DEFAULT_POINTS", "DEFAULT_WORKERS", "add_parser", "run"]
