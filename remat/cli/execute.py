"""``remat execute``: replay a schedule as training steps of a model; predicted vs measured memory and time.

A chain schedule replays on the model's chain (remat.replay.chain), a graph schedule on its traced
graph (remat.replay.graph). Those modules import torch: they are imported inside the functions
that need them, so ``import remat.cli`` stays free of torch's ~1 s import.
"""

from __future__ import annotations

import argparse
import sys

from remat.cli.args import check_paths, integer_at_least, output_file, plot_file
from remat.cli.options import add_model_options, build_model, compiled_if, model_command
from remat.plots import comparison_figure, save_figure
from remat.schedules import ChainProfile, GraphProfile, RematError, load_profile, load_schedule, write_json

DEFAULT_STEPS = 3


def run(args: argparse.Namespace) -> int:
    """``remat execute`` for a chain schedule (a graph schedule goes to :func:`_execute_graph`)."""
    from remat.models.loading import chain_for, resolve_device
    from remat.profile.chain import profile_chain
    from remat.replay.chain import RematChain, check_ops_for_chain
    from remat.replay.report import compare

    check_paths(args, {"--schedule": "schedule", "--profile": "profile"}, {"--json": "json", "--plot": "plot"})
    schedule = load_schedule(args.schedule)
    if schedule.kind != "chain":
        return _execute_graph(args, schedule)
    device = resolve_device(args.device)
    model, x = build_model(args, device)
    chain = chain_for(model, x)
    if args.profile:
        profile = load_profile(args.profile)
        if not isinstance(profile, ChainProfile):
            raise RematError("--profile: 'remat execute' needs a chain profile")
        _check_compile_flag(profile, args.compile)
        check_ops_for_chain(schedule.ops, len(chain), profile)  # before compiling: seconds per stage
        options = any(stage.options for stage in profile.stages)
        wrapped = RematChain(compiled_if(args.compile, chain, x, options), schedule, profile)
    else:
        check_ops_for_chain(schedule.ops, len(chain))  # before compiling and profiling
        wrapped = RematChain(compiled_if(args.compile, chain, x, False), schedule.ops)
        print("no --profile given: profiling the model for the prediction")
        profile = profile_chain(wrapped.chain, x, repeats=5, progress=True)
    report = compare(profile, schedule, wrapped, x, steps=args.steps)
    _note_threads(profile)
    return _print_report(report, args)


def _execute_graph(args: argparse.Namespace, schedule) -> int:
    """``remat execute`` for a graph schedule: the graph replay (remat.replay.graph)."""
    from remat.graph.profiler import profile_graph
    from remat.models.loading import resolve_device
    from remat.replay.graph import GraphReplay, compare_graph

    if args.compile:
        raise RematError("--compile: compiles a chain's stages; a graph schedule replays eager ops")
    device = resolve_device(args.device)
    model, x = build_model(args, device)
    if args.profile:
        profile = load_profile(args.profile)
        if not isinstance(profile, GraphProfile):
            raise RematError("--profile: a graph schedule needs the graph profile it was solved for")
        wrapped = GraphReplay(model, schedule, profile)
    else:
        print("no --profile given: profiling the model's graph for the prediction")
        profile = profile_graph(
            model,
            example_inputs=x,
            device=device,
            dtype=str(x.dtype).replace("torch.", ""),
            time_source="measured",
            name=schedule.profile,
            repeats=5,
        )
        wrapped = GraphReplay(model, schedule.ops, profile)  # checks the ops against the model's graph
    report = compare_graph(profile, schedule, wrapped, [x], steps=args.steps)
    return _print_report(report, args)


def _check_compile_flag(profile, compile_stages: bool) -> None:
    """A profile measured on compiled stages is replayed on compiled stages, an eager one eagerly:
    the prediction rests on the kernels that were timed (docs/executor.md, "Compiled stages")."""
    compiled = profile.metadata.get("compiled")
    if compiled and not compile_stages:
        raise RematError(f"--profile: '{profile.name}' was measured with {compiled}: pass --compile to replay it")
    if compile_stages and not compiled:
        raise RematError(f"--compile: '{profile.name}' was measured with eager stages; profile with --compile")


def _note_threads(profile) -> None:
    """Warn (stderr) when a CPU profile was timed with another torch thread count than this run's."""
    import torch  # see the module docstring

    threads = profile.metadata.get("threads")
    if threads is not None and profile.metadata.get("device_type") == "cpu" and threads != torch.get_num_threads():
        print(
            f"note: the profile was timed with {threads} threads, this run uses {torch.get_num_threads()} "
            "(--threads): step times are not comparable",
            file=sys.stderr,
        )


def _print_report(report, args: argparse.Namespace) -> int:

    print(report.table())
    if args.json:
        write_json(report.to_dict(), args.json)
        print(f"wrote {args.json}")
    if args.plot:
        _plot(report, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _plot(report, path: str) -> None:
    """Predicted and measured memory per op (remat.plots.comparison_figure), saved atomically."""
    import matplotlib.pyplot as plt

    figure = comparison_figure(report)
    try:
        save_figure(figure, path)
    finally:
        plt.close(figure)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``execute`` to ``remat``'s subcommands."""
    execute_cmd = sub.add_parser(
        "execute",
        help="train a model with a schedule; print predicted vs measured memory and time",
        description="Replay SCHEDULE as training steps of MODEL and compare with the simulator's prediction.",
        epilog="example: remat execute --model remat.zoo.small:cnn --input-shape 8,3,32,32 "
        "--schedule s.json --profile cnn.json",
    )
    add_model_options(execute_cmd)
    execute_cmd.add_argument("--schedule", required=True, help="chain or graph schedule (JSON)")
    execute_cmd.add_argument("--profile", help="the profile the schedule was solved for (default: profile now)")
    execute_cmd.add_argument(
        "--compile",
        action="store_true",
        help="chain: replay on compiled stages (torch.compile, checked against the eager stage); "
        "for a profile written by 'remat profile --compile'",
    )
    execute_cmd.add_argument(
        "--steps",
        type=integer_at_least(1),
        default=DEFAULT_STEPS,
        help=f"measured steps (default {DEFAULT_STEPS})",
    )
    execute_cmd.add_argument("--json", type=output_file, help="write the report JSON here")
    execute_cmd.add_argument(
        "--plot", type=plot_file, help="draw predicted and measured memory per op (MiB) into this PNG"
    )
    execute_cmd.set_defaults(func=model_command(run))


__all__ = ["DEFAULT_STEPS", "add_parser", "run"]
