"""The ``remat`` command. Thin: parse arguments, call schedules/solver/executor, print.

Every user error (bad file, bad budget, infeasible budget, invalid schedule) is printed as one
line ``remat: error: ...`` with exit status 2; no tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence

from remat.cli.args import (
    TIME_LIMIT_HELP,
    integer_at_least,
    join_negative_values,
    output_file,
    plot_file,
    seconds,
)
from remat.cli.plan import add_plan_parser
from remat.schedules import (
    ChainProfile,
    RematError,
    format_size,
    load_profile,
    load_schedule,
    parse_size,
    save_schedule,
    simulate,
)
from remat.schedules.simulator import check_schedule

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit 2, like every other remat error."""

    def __init__(self, *args, **kwargs) -> None:
        # Keep examples in epilogs on one line each.
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # noqa: D102 - argparse API
        self.exit(EXIT_USER_ERROR, f"remat: error: {message} (see '{self.prog} --help')\n")


def _kind(profile) -> str:
    return "chain" if isinstance(profile, ChainProfile) else "graph"


def reference_peak(profile) -> int:
    """Store-all peak (bytes) of a profile: the simulated peak of the store-all strategy's
    schedule, the one reference for budgets given as percentages (and for every "% of the
    store-all peak" remat prints)."""
    from remat.solver import get_strategy

    # a budget no profile can exceed (sizes are Python ints): the strategy never refuses it
    unbounded = sum(_item_sizes(profile)) * 2 + 1
    return get_strategy("store-all", _kind(profile)).solve(profile, unbounded).predicted.peak_memory


def _item_sizes(profile) -> Iterator[int]:
    """Every byte count in the profile (each integer field of its stages or nodes)."""
    import dataclasses

    items = profile.stages if isinstance(profile, ChainProfile) else profile.nodes
    if isinstance(profile, ChainProfile):
        yield profile.input_size
    for item in items:
        for f in dataclasses.fields(item):
            value = getattr(item, f.name)
            if isinstance(value, int) and not isinstance(value, bool):
                yield value


def parse_budget(text: str, profile) -> int:
    """Bytes from ``6GiB``, ``500MB``, ``123`` or ``40%`` (of the store-all peak)."""
    reference = reference_peak(profile) if text.strip().endswith("%") else None
    try:
        return parse_size(text, reference)
    except RematError as error:
        raise RematError(f"--budget: {error}") from None


@contextlib.contextmanager
def _elapsed_bar(profile, strategy: str, time_limit: float | None) -> Iterator[None]:
    """A progress bar of elapsed seconds against the time limit (stderr) while a time-limited
    solver (ilp, lp-rounding) runs; nothing for the other strategies."""
    from remat.solver import STRATEGIES

    chosen = STRATEGIES.get((_kind(profile), strategy))
    if chosen is None or "time_limit" not in chosen.options:
        yield
        return
    import threading
    import time

    from tqdm import tqdm

    total = float(time_limit) if time_limit else 60.0  # the ilp default; lp-rounding usually ends sooner
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


def _cmd_solve(args: argparse.Namespace) -> int:
    from remat.solver import solve

    profile = load_profile(args.profile)
    budget = parse_budget(args.budget, profile)
    names = ("segments", "checkpoints", "slots", "time_limit", "formulation")
    options = {name: getattr(args, name, None) for name in names}
    with _elapsed_bar(profile, args.strategy, args.time_limit):
        schedule = solve(profile, budget, args.strategy, **options)
    check_schedule(profile, schedule)
    if args.output:
        save_schedule(schedule, args.output)
    from remat.cli.text import solve_lines

    for label, text in solve_lines(schedule, args.budget, reference_peak(profile)):
        print(f"{label:<12} {text}")
    if args.output:
        print(f"wrote {args.output}")
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
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
        from remat.plots import plot_timeline

        plot_timeline(profile, schedule, result, args.plot)
        print(f"wrote {args.plot}")
    if result.peak_memory > schedule.budget:
        print(
            f"remat: error: peak {result.peak_memory} bytes exceeds the schedule's budget {schedule.budget} bytes",
            file=sys.stderr,
        )
        return 1
    return 0


def _cmd_pareto(args: argparse.Namespace) -> int:
    from remat.solver import strategy_names

    profile = load_profile(args.profile)
    kind = _kind(profile)
    failed, notes = (), ()
    if args.strategies is not None:
        strategies = [name.strip() for name in args.strategies.split(",") if name.strip()]
        if not strategies:
            raise RematError(f"--strategies: no strategy names in {args.strategies!r} (give e.g. optimal,chen-sqrt)")
    else:
        strategies = strategy_names(kind)
    if kind == "chain":
        from remat.plots import preload  # matplotlib itself is imported only when called
        from remat.solver.chain.pareto import chain_front

        # matplotlib's import (~0.5 s) overlaps the DP's last tables instead of following them
        waiting = preload if args.output else None
        front = chain_front(
            profile, strategies, slots=args.slots or 500, points=args.points, progress=True, while_waiting=waiting
        )
        points = list(front.points)
        by_strategy = front.by_strategy()
        marks = front.marks()
        store_all_ms = front.store_all_ms
    else:
        try:
            from remat.solver.graph.pareto import graph_front
        except ImportError as error:
            raise RematError(
                "pareto for graph profiles needs remat.solver.graph.pareto, which is not in this build"
            ) from error

        front = graph_front(
            profile,
            strategies=strategies,
            budgets=None,
            time_limit=args.time_limit,
            workers=args.workers,
            progress=True,
        )
        points = list(front.points)
        failed, notes = front.failed, front.notes
        by_strategy = {}
        for point in points:
            by_strategy.setdefault(point.strategy, []).append(point)
        marks = {}
        store_all_ms = profile.store_all_compute_ms
    if not points:
        first = f": {failed[0].strategy} at {format_size(failed[0].budget)}: {failed[0].message}" if failed else ""
        raise RematError(f"no strategy produced a schedule for this profile{first}")
    from remat.solver.chain.pareto import overhead_percent, write_front_csv, write_front_json

    print(f"{'strategy':<14} {'points':>6}  {'least memory':>14}  {'its step time':>16}")
    for name, group in by_strategy.items():
        least = min(group, key=lambda p: p.peak_memory)
        overhead = max(0.0, overhead_percent(least.compute_ms, store_all_ms))
        size = format_size(least.peak_memory)
        print(f"{name:<14} {len(group):>6}  {size:>14}  {least.compute_ms:>9.2f} ms +{overhead:.0f}%")
    for label, point in marks.items():
        overhead = max(0.0, overhead_percent(point.compute_ms, store_all_ms))
        print(f"{label}: {format_size(point.peak_memory)}, {point.compute_ms:.2f} ms (+{overhead:.1f}%)")
    _print_failed(failed)
    _print_notes(notes)
    if args.csv:
        write_front_csv(points, args.csv)
        print(f"wrote {args.csv}")
    if args.json:
        write_front_json(profile, points, store_all_ms, args.json)
        print(f"wrote {args.json}")
    if args.output:
        from remat.plots import plot_front

        plot_front(f"{profile.name}: step time vs peak memory", by_strategy, store_all_ms, args.output, marks)
        print(f"wrote {args.output}")
    return 0


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


def _cmd_strategies(args: argparse.Namespace) -> int:
    from remat.solver import STRATEGIES

    width = max(len(name) for _, name in STRATEGIES)
    for (kind, name), strategy in sorted(STRATEGIES.items()):
        options = (
            f"  [options: {', '.join('--' + o.replace('_', '-') for o in strategy.options)}]"
            if strategy.options
            else ""
        )
        print(f"{name:<{width}}  {kind:<5}  {strategy.description}{options}")
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    from remat.models.loading import build, model_options, parse_dtype, parse_shape, resolve_device

    if args.graph and args.options:
        raise RematError("--options: measures a chain's stage options; it does not apply with --graph")
    if args.graph and args.compile:
        raise RematError("--compile: compiles a chain's stages; it does not apply with --graph")

    device = resolve_device(args.device)
    model, x = build(args.model, parse_shape(args.input_shape), device, parse_dtype(args.dtype), **model_options(args))
    name = args.name or f"{args.model.split(':')[-1]}-b{x.shape[0]}-{device.type}"
    if args.graph:
        try:
            from remat.graph.profile import profile_graph
        except ImportError as error:
            raise RematError(
                "--graph: the graph profiler (remat.graph.profile) is not available in this build"
            ) from error
        profile = profile_graph(
            model,
            example_inputs=x,
            device=device,
            dtype=args.dtype,  # the model's dtype; integer inputs (token ids) keep theirs
            time_source=args.time_source,
            name=name,
            repeats=args.repeats,
        )
        from remat.schedules import save_profile

        save_profile(profile, args.output)
        peak = reference_peak(profile)  # the one store-all peak: what --budget 40% is 40% of
        print(
            f"graph profile: {profile.size} nodes, {len(profile.edges)} edges; times: {args.time_source}; "
            f"store-all peak {format_size(peak)} ({peak} bytes); device {profile.metadata['device']}"
        )
        print(f"wrote {args.output}")
        return 0
    from remat.models.loading import chain_for
    from remat.profile.chain import profile_chain
    from remat.schedules import save_profile

    chain = _compiled_if(args.compile, chain_for(model, x), x, args.options)
    profile = profile_chain(chain, x, name=name, repeats=args.repeats, progress=True, options=args.options)
    save_profile(profile, args.output)
    width = max(len(s.name) for s in profile.stages)
    header = ("fwd ms", "bwd ms", "output", "saved", "fwd tmp", "bwd tmp")
    print(f"{'stage':<{width}}  " + "  ".join(f"{h:>{8 if 'ms' in h else 10}}" for h in header))
    for s in profile.stages:
        print(
            f"{s.name:<{width}}  {s.forward_ms:>8.3f}  {s.backward_ms:>8.3f}  {format_size(s.output_size):>10}  "
            f"{format_size(s.saved_size):>10}  {format_size(s.forward_overhead):>10}  "
            f"{format_size(s.backward_overhead):>10}"
        )
    for s in profile.stages:  # --options: one line per measured option (docs/model.md)
        for k, o in enumerate(s.options, start=1):
            print(f"  {s.name} option {k} '{o.name}': saved {format_size(o.saved_size)}, bwd {o.backward_ms:.3f} ms")
    print(f"input {format_size(profile.input_size)}; {profile.length} stages; device {profile.metadata['device']}")
    print(f"wrote {args.output}")
    return 0


def _cmd_execute(args: argparse.Namespace) -> int:
    from remat.models.loading import build, chain_for, model_options, parse_dtype, parse_shape, resolve_device
    from remat.profile.chain import profile_chain
    from remat.replay.chain import RematChain, check_ops_for_chain
    from remat.replay.report import compare

    schedule = load_schedule(args.schedule)
    if schedule.kind != "chain":
        return _execute_graph(args, schedule)
    device = resolve_device(args.device)
    model, x = build(args.model, parse_shape(args.input_shape), device, parse_dtype(args.dtype), **model_options(args))
    chain = chain_for(model, x)
    if args.profile:
        profile = load_profile(args.profile)
        if not isinstance(profile, ChainProfile):
            raise RematError("--profile: 'remat execute' needs a chain profile")
        _check_compile_flag(profile, args.compile)
        check_ops_for_chain(schedule.ops, len(chain), profile)  # before compiling: seconds per stage
        options = any(stage.options for stage in profile.stages)
        wrapped = RematChain(_compiled_if(args.compile, chain, x, options), schedule, profile)
    else:
        check_ops_for_chain(schedule.ops, len(chain))  # before compiling and profiling
        wrapped = RematChain(_compiled_if(args.compile, chain, x, False), schedule.ops)
        print("no --profile given: profiling the model for the prediction")
        profile = profile_chain(wrapped.chain, x, repeats=5, progress=True)
    report = compare(profile, schedule, wrapped, x, steps=args.steps)
    _note_threads(profile)
    return _print_report(report, args)


def _compiled_if(compile_stages: bool, chain, x, options: bool):
    """``chain`` with every stage compiled and checked against its eager stage (``--compile``;
    remat.runtime.compiled), or ``chain`` itself."""
    if not compile_stages:
        return chain
    from remat.runtime.compiled import compile_chain

    print("--compile: compiling every stage with torch.compile and checking it against the eager stage")
    return compile_chain(chain, x, options=options)


def _check_compile_flag(profile, compile_stages: bool) -> None:
    """A profile measured on compiled stages is replayed on compiled stages, an eager one eagerly:
    the prediction rests on the kernels that were timed (docs/executor.md, "Compiled stages")."""
    compiled = profile.metadata.get("compiled")
    if compiled and not compile_stages:
        raise RematError(f"--profile: '{profile.name}' was measured with {compiled}: pass --compile to replay it")
    if compile_stages and not compiled:
        raise RematError(f"--compile: '{profile.name}' was measured with eager stages; profile with --compile")


def _note_threads(profile) -> None:
    import torch

    threads = profile.metadata.get("threads")
    if threads is not None and profile.metadata.get("device_type") == "cpu" and threads != torch.get_num_threads():
        print(
            f"note: the profile was timed with {threads} threads, this run uses {torch.get_num_threads()} "
            "(--threads): step times are not comparable",
            file=sys.stderr,
        )


def _print_report(report, args: argparse.Namespace) -> int:
    from remat.replay.report import plot_comparison
    from remat.schedules import write_json

    print(report.table())
    if args.json:
        write_json(report.to_dict(), args.json)
        print(f"wrote {args.json}")
    if args.plot:
        plot_comparison(report, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _execute_graph(args: argparse.Namespace, schedule) -> int:
    """``remat execute`` for a graph schedule: the graph replay (remat.replay.graph)."""
    from remat.graph.profile import profile_graph
    from remat.models.loading import build, model_options, parse_dtype, parse_shape, resolve_device
    from remat.replay.graph import GraphReplay, compare_graph
    from remat.schedules import GraphProfile

    if args.compile:
        raise RematError("--compile: compiles a chain's stages; a graph schedule replays eager ops")
    device = resolve_device(args.device)
    model, x = build(args.model, parse_shape(args.input_shape), device, parse_dtype(args.dtype), **model_options(args))
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


def _add_model_args(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--model", required=True, help="package.module:factory, or transformers:NAME, torchvision:NAME, timm:NAME"
    )
    command.add_argument("--input-shape", required=True, help="input shape, e.g. 32,3,224,224 (first is the batch)")
    command.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    command.add_argument("--dtype", default="float32", help="float32 (default), float16, bfloat16, float64")
    command.add_argument(
        "--threads",
        type=integer_at_least(1),
        help="CPU threads for torch (torch.set_num_threads; default: torch's own choice)",
    )
    command.add_argument("--config", help="library model config, e.g. n_layer=2,n_embd=64 (--model transformers:gpt2)")
    command.add_argument("--input-dtype", help="input dtype if not --dtype: int64 for token ids")
    command.add_argument("--input-range", help="integer inputs drawn from LOW,HIGH (default 0,vocab_size)")


def _with_threads(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run ``command`` with ``--threads`` torch threads, restoring the previous count afterwards."""

    def run(args: argparse.Namespace) -> int:
        if args.threads is None:
            return command(args)
        if args.threads < 1:
            raise RematError("--threads: must be at least 1")
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(args.threads)
        try:
            return command(args)
        finally:
            torch.set_num_threads(before)

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="remat",
        description="Optimal activation checkpointing under a memory budget.",
        epilog="example: remat solve examples/resnet_like.json --budget 40% --strategy chen-sqrt -o schedule.json",
    )
    from remat import __version__

    parser.add_argument("--version", action="version", version=f"remat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    solve = sub.add_parser(
        "solve",
        help="solve a schedule for a profile under a memory budget",
        description="Solve a checkpointing schedule for PROFILE under a memory budget.",
        epilog="example: remat solve examples/resnet_like.json --budget 6GiB --strategy chen-greedy -o schedule.json",
    )
    solve.add_argument("profile", help="chain or graph profile (JSON)")
    solve.add_argument(
        "--budget",
        default="100%",
        help="memory budget: bytes, 6GiB, 500MB, or a percentage of the store-all peak like 40%% (default 100%%)",
    )
    solve.add_argument(
        "--strategy", default="store-all", help="strategy name (see 'remat strategies'; default store-all)"
    )
    solve.add_argument("--segments", type=integer_at_least(1), help="sequential: force this many segments")
    solve.add_argument(
        "--checkpoints",
        type=integer_at_least(1),
        help="revolve: force this many checkpoint slots (the input's included)",
    )
    solve.add_argument(
        "--slots",
        type=integer_at_least(1),
        help="optimal (default 500), hierarchical (1000): memory discretization levels",
    )
    solve.add_argument("--time-limit", type=seconds, help=f"ilp, lp-rounding: {TIME_LIMIT_HELP} (ilp default 60)")
    solve.add_argument(
        "--formulation",
        choices=("checkmate", "moccasin"),
        help="ilp: Checkmate's stage MILP (default) or Moccasin's retention intervals (docs/strategies.md)",
    )
    solve.add_argument("-o", "--output", type=output_file, help="write the schedule JSON here")
    solve.set_defaults(func=_cmd_solve)

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
    simulate_cmd.set_defaults(func=_cmd_simulate)

    pareto = sub.add_parser(
        "pareto",
        help="plot the memory/compute Pareto front",
        description="Sweep the memory/compute trade-off of PROFILE: the optimal front (chain DP, or the "
        "graph solvers) and each baseline at a sweep of budgets; plot it and write CSV/JSON rows.",
        epilog="example: remat pareto examples/resnet_like.json -o front.png --csv front.csv",
    )
    pareto.add_argument("profile", help="chain or graph profile (JSON)")
    pareto.add_argument("-o", "--output", type=plot_file, help="write the plot (PNG, or .pdf, .svg) here")
    pareto.add_argument("--csv", type=output_file, help="write one row per front point (CSV) here")
    pareto.add_argument("--json", type=output_file, help="write the front points (JSON) here")
    pareto.add_argument(
        "--strategies", help="comma-separated strategy names (default: every strategy for the profile kind)"
    )
    pareto.add_argument("--slots", type=integer_at_least(1), help="optimal: memory discretization levels (default 500)")
    pareto.add_argument(
        "--points", type=integer_at_least(1), default=24, help="budgets per baseline sweep (chains; default 24)"
    )
    pareto.add_argument(
        "--time-limit",
        type=seconds,
        default=10.0,
        help=f"graphs: per ILP / LP-rounding solve, {TIME_LIMIT_HELP} (default 10)",
    )
    pareto.add_argument("--workers", type=integer_at_least(1), default=1, help="graphs: solver processes (default 1)")
    pareto.set_defaults(func=_cmd_pareto)

    strategies = sub.add_parser(
        "strategies",
        help="list the strategies",
        description="List every strategy with the profile kind it solves and one line about it.",
        epilog="example: remat strategies",
    )
    strategies.set_defaults(func=_cmd_strategies)

    profile_cmd = sub.add_parser(
        "profile",
        help="measure a PyTorch model into a chain (or --graph) profile",
        description="Run MODEL on a random input and write its per-stage times and memory as a profile.",
        epilog="example: remat profile --model remat.zoo.small:cnn --input-shape 8,3,32,32 -o cnn.json",
    )
    _add_model_args(profile_cmd)
    profile_cmd.add_argument("--graph", action="store_true", help="write a graph profile (op-level DAG) instead")
    profile_cmd.add_argument(
        "--repeats", type=integer_at_least(1), default=5, help="timed runs per stage (fastest; default 5)"
    )
    profile_cmd.add_argument(
        "--time-source",
        choices=("measured", "flops"),
        default="measured",
        help="--graph: node times measured on the device (default) or estimated from FLOPs",
    )
    profile_cmd.add_argument(
        "--options",
        action="store_true",
        help="chain: also measure each stage's selective-recording options (docs/model.md; off by default)",
    )
    profile_cmd.add_argument(
        "--compile",
        action="store_true",
        help="chain: run every stage through torch.compile (inductor), checked against the eager stage "
        "(docs/executor.md; off by default)",
    )
    profile_cmd.add_argument("--name", help="profile name (default: factory-bBATCH-device)")
    profile_cmd.add_argument("-o", "--output", type=output_file, required=True, help="write the profile JSON here")
    profile_cmd.set_defaults(func=_with_threads(_cmd_profile))

    execute_cmd = sub.add_parser(
        "execute",
        help="train a model with a schedule; print predicted vs measured memory and time",
        description="Replay SCHEDULE as training steps of MODEL and compare with the simulator's prediction.",
        epilog="example: remat execute --model remat.zoo.small:cnn --input-shape 8,3,32,32 "
        "--schedule s.json --profile cnn.json",
    )
    _add_model_args(execute_cmd)
    execute_cmd.add_argument("--schedule", required=True, help="chain or graph schedule (JSON)")
    execute_cmd.add_argument("--profile", help="the profile the schedule was solved for (default: profile now)")
    execute_cmd.add_argument(
        "--compile",
        action="store_true",
        help="chain: replay on compiled stages (torch.compile, checked against the eager stage); "
        "for a profile written by 'remat profile --compile'",
    )
    execute_cmd.add_argument("--steps", type=integer_at_least(1), default=3, help="measured steps (default 3)")
    execute_cmd.add_argument("--json", type=output_file, help="write the report JSON here")
    execute_cmd.add_argument(
        "--plot", type=plot_file, help="draw predicted and measured memory per op (MiB) into this PNG"
    )
    execute_cmd.set_defaults(func=_with_threads(_cmd_execute))
    add_plan_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``remat`` command; returns the exit status (0 ok, 2 bad input, 1 internal error)."""
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(join_negative_values(parser, sys.argv[1:] if argv is None else list(argv)))
        if not getattr(args, "func", None):
            parser.print_help()
            print("remat: error: no command given (see 'remat --help')", file=sys.stderr)
            return EXIT_USER_ERROR
        return args.func(args)
    except RematError as error:
        print(f"remat: error: {_one_line(str(error))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except SystemExit as done:  # argparse: --help, --version and usage errors (already printed)
        return done.code if isinstance(done.code, int) else EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("remat: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("remat: error: out of memory (try a smaller --slots, model or input)", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as error:  # noqa: BLE001 - the user's model failed, or a bug in remat: one line
        if os.environ.get("REMAT_DEBUG"):
            raise
        if getattr(args, "model", None):
            from remat.model_errors import model_error

            converted = model_error(error, args.model, args.input_shape)
            if converted is not None:
                print(f"remat: error: {converted}", file=sys.stderr)
                return EXIT_USER_ERROR
        print(
            f"remat: internal error: {type(error).__name__}: {_one_line(str(error))} "
            "(a bug in remat; rerun with REMAT_DEBUG=1 for the traceback and please report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR


def _one_line(text: str) -> str:
    """The first line of a message, so that every error stays one line on stderr."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] + (" ..." if len(lines) > 1 else "") if lines else "(no message)"


if __name__ == "__main__":
    sys.exit(main())
