"""``remat profile``: run a PyTorch model on a random input and write its chain (or ``--graph``) profile.

The modules that run the model (remat.models, remat.profile, remat.graph) import torch: they are
imported inside the functions that need them, so ``import remat.cli`` and the commands that only
read JSON (``solve``, ``simulate``, ``pareto``) stay free of torch's ~1 s import.
"""

from __future__ import annotations

import argparse

from remat.cli.args import integer_at_least, output_file
from remat.cli.options import DEVICE_HELP, add_model_options, build_model, compiled_if, model_command
from remat.schedules import RematError, format_size, save_profile
from remat.solver.budget import reference_peak

DEFAULT_REPEATS = 5
TIME_SOURCES = ("measured", "flops")


def run(args: argparse.Namespace) -> int:
    """Build the model, profile it (chain, or ``--graph``), write the profile and print what it holds."""
    if args.device is not None and args.device.strip().lower() == "meta":  # what --meta does, as remat plan
        args.meta, args.device = True, None
    if args.graph and args.options:
        raise RematError("--options: measures a chain's stage options; it does not apply with --graph")
    if args.graph and args.compile:
        raise RematError("--compile: compiles a chain's stages; it does not apply with --graph")
    if not args.graph and args.time_source is not None:
        raise RematError("--time-source: chooses a graph profile's node times; it does not apply without --graph")
    args.time_source = args.time_source or TIME_SOURCES[0]
    if args.meta:
        return _profile_meta(args)
    from remat.models.loading import resolve_device

    device = resolve_device(args.device)
    model, x = build_model(args, device)
    name = args.name or f"{args.model.split(':')[-1]}-b{x.shape[0]}-{device.type}"
    if args.graph:
        return _profile_graph(args, model, x, device, name)
    return _profile_chain(args, model, x, name)


def _profile_graph(args: argparse.Namespace, model, x, device, name: str) -> int:
    try:
        from remat.graph.profiler import profile_graph
    except ImportError as error:
        raise RematError("--graph: the graph profiler (remat.graph.profiler) is not available in this build") from error
    profile = profile_graph(
        model,
        example_inputs=x,
        device=device,
        dtype=args.dtype,  # the model's dtype; integer inputs (token ids) keep theirs
        time_source=args.time_source,
        name=name,
        repeats=args.repeats,
    )
    save_profile(profile, args.output)
    peak = reference_peak(profile)  # the one store-all peak: what --budget 40% is 40% of
    print(
        f"graph profile: {profile.size} nodes, {len(profile.edges)} edges; times: {args.time_source}; "
        f"store-all peak {format_size(peak)} ({peak} bytes); device {profile.metadata['device']}"
    )
    print(f"wrote {args.output}")
    return 0


def _profile_meta(args: argparse.Namespace) -> int:
    """``--meta``: the model built and profiled on meta tensors, as ``remat plan`` profiles it
    (remat.profile.batch: the traced cut of remat.checkpoint, sizes exact, times from FLOPs)."""
    import dataclasses

    from remat.models.loading import model_options, parse_dtype, parse_shape
    from remat.profile.batch import chain_profiler

    for flag, given in (("--graph", args.graph), ("--compile", args.compile), ("--options", args.options)):
        if given:
            raise RematError(f"{flag}: does not apply with --meta or --device meta (a chain profile on meta tensors)")
    if args.device is not None:
        raise RematError("--device: does not apply with --meta (meta tensors are on no device)")
    shape = parse_shape(args.input_shape)
    profile = chain_profiler(args.model, shape, 0, "meta", parse_dtype(args.dtype), None, **model_options(args))(
        shape[0]
    )
    name = args.name or f"{args.model.split(':')[-1]}-b{shape[0]}-meta"
    profile = dataclasses.replace(profile, name=name)
    print(f"cut: {profile.metadata.get('cut')}")
    print(f"times: {profile.metadata['timing']}")
    return _report_chain(args, profile)


def _profile_chain(args: argparse.Namespace, model, x, name: str) -> int:
    from remat.models.loading import chain_for
    from remat.profile.chain import profile_chain

    chain = compiled_if(args.compile, chain_for(model, x), x, args.options)
    profile = profile_chain(chain, x, name=name, repeats=args.repeats, progress=True, options=args.options)
    return _report_chain(args, profile)


def _report_chain(args: argparse.Namespace, profile) -> int:
    """Write ``profile`` to ``-o`` and print its stages."""
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
    if any(s.backward_overhead < 0 for s in profile.stages):
        print("bwd tmp below 0: the backward frees part of the stage's output and gradient first (docs/model.md)")
    print(f"wrote {args.output}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``profile`` to ``remat``'s subcommands."""
    profile_cmd = sub.add_parser(
        "profile",
        help="measure a PyTorch model into a chain (or --graph) profile",
        description="Run MODEL on a random input and write its per-stage times and memory as a profile.",
        epilog="example: remat profile --model remat.zoo.small:cnn --input-shape 8,3,32,32 -o cnn.json",
    )
    add_model_options(profile_cmd, device_help=f"{DEVICE_HELP}; meta: as --meta")
    profile_cmd.add_argument("--graph", action="store_true", help="write a graph profile (op-level DAG) instead")
    profile_cmd.add_argument(
        "--repeats",
        type=integer_at_least(1),
        default=DEFAULT_REPEATS,
        help=f"timed runs per stage (fastest; default {DEFAULT_REPEATS})",
    )
    profile_cmd.add_argument(
        "--time-source",
        choices=TIME_SOURCES,
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
    profile_cmd.add_argument(
        "--meta",
        action="store_true",
        help="chain: build and profile the model on meta tensors (no weights, no data: any size, in seconds): "
        "sizes exact, times from FLOPs at a nominal rate, the cut not proven (docs/plan.md)",
    )
    profile_cmd.add_argument("--name", help="profile name (default: factory-bBATCH-device)")
    profile_cmd.add_argument("-o", "--output", type=output_file, required=True, help="write the profile JSON here")
    profile_cmd.set_defaults(func=model_command(run))


__all__ = ["DEFAULT_REPEATS", "TIME_SOURCES", "add_parser", "run"]
