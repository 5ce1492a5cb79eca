"""``remat simulate``: a schedule checked against its profile in the simulator; peak memory and time."""

from __future__ import annotations

import argparse
import sys

from remat.cli.args import check_paths, plot_file
from remat.plots import plot_timeline
from remat.schedules import format_size, load_profile, load_schedule, simulate
from remat.schedules.simulator import check_schedule


def run(args: argparse.Namespace) -> int:
    """Print the simulated peak and times; exit 1 (after printing) when the peak exceeds the budget."""
    check_paths(args, {"PROFILE": "profile", "SCHEDULE": "schedule"}, {"--plot": "plot"})
    profile = load_profile(args.profile)
    schedule = load_schedule(args.schedule)
    if schedule.profile_sha256 != profile.sha256 and not args.ignore_hash:
        check_schedule(profile, schedule, check_budget=False)  # raises the mismatch error
    result = simulate(profile, schedule.ops)
    base = result.compute_ms - result.recompute_ms
    overhead = 100.0 * result.recompute_ms / base if base > 0 else 0.0
    rows = [
        ("strategy", schedule.strategy),
        ("ops", str(len(schedule.ops))),
        ("budget", f"{format_size(schedule.budget)} ({schedule.budget} bytes)"),
        ("peak memory", f"{format_size(result.peak_memory)} ({result.peak_memory} bytes)"),
        ("within budget", "yes" if result.peak_memory <= schedule.budget else "NO"),
        ("compute", f"{result.compute_ms:.3f} ms"),
        ("recompute", f"{result.recompute_ms:.3f} ms (+{overhead:.1f}% over store-all)"),
    ]
    if schedule.predicted.peak_memory != result.peak_memory:
        rows.append(("note", f"the file's predicted peak ({schedule.predicted.peak_memory}) differs"))
    for key, value in rows:
        print(f"{key:<14} {value}")
    if args.plot:
        plot_timeline(profile, schedule, result, args.plot)
        print(f"wrote {args.plot}")
    if result.peak_memory > schedule.budget:
        print(
            f"remat: error: peak {result.peak_memory} bytes exceeds the schedule's budget {schedule.budget} bytes",
            file=sys.stderr,
        )
        return 1
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``simulate`` to ``remat``'s subcommands."""
    simulate_cmd = sub.add_parser(
        "simulate",
        help="simulate a schedule: peak memory, time, recompute",
        description="Check SCHEDULE against PROFILE with the simulator and print its peak memory and time.",
        epilog="example: remat simulate examples/resnet_like.json schedule.json --plot timeline.png",
    )
    simulate_cmd.add_argument("profile", help="chain or graph profile (JSON)")
    simulate_cmd.add_argument("schedule", help="schedule (JSON)")
    simulate_cmd.add_argument("--plot", type=plot_file, help="draw memory over ops into this PNG (or .pdf, .svg)")
    simulate_cmd.add_argument(
        "--ignore-hash", action="store_true", help="simulate even if the schedule was solved for another profile"
    )
    simulate_cmd.set_defaults(func=run)


__all__ = ["add_parser", "run"]
