"""``remat plan``: the largest batch (or length of one input dimension) that fits a device's memory
at a bounded overhead, for the optimal schedule, Chen's sqrt(n) and store-all. See docs/plan.md.

Registered by :func:`add_parser`; errors are :class:`RematError` (one line, exit 2, printed
by ``remat.cli.parser.main``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from remat.cli.args import check_paths, output_file, plot_file
from remat.cli.options import DEVICE_HELP, add_model_options, check_input_fits, model_command
from remat.models.arguments import parse_shape, parse_vary
from remat.plots import save_figure
from remat.schedules import RematError, format_size, parse_size, save_profile, save_schedule
from remat.solver.plan import (
    ADAM_COPIES,
    PLAN_STRATEGIES,
    Fit,
    confirmed_largest,
    fit_growth,
    fixed_bytes_auto,
    overhead_curve,
)

CURVE_OVERHEADS = tuple(p / 100 for p in range(0, 101, 5))
DEFAULT_MAX_OVERHEAD_PERCENT = 10
DEFAULT_MAX_SIZE = 2**40
# the sizes profiled without --points: these multiples of the input shape's size
POINT_MULTIPLES = (1, 2, 3)


def parse_percent(text: str, option: str) -> float:
    """``10%`` or ``10`` -> 0.1."""
    raw = str(text).strip().removesuffix("%")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise RematError(f"{option}: expected a non-negative percentage like 10%, got {text!r}")
    return value / 100


def parse_points(text: str | None, default: int) -> list[int]:
    """``8,16,24`` -> [8, 16, 24]; default: :data:`POINT_MULTIPLES` of the input shape's size."""
    if text is None:
        return [multiple * default for multiple in POINT_MULTIPLES]
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise RematError(f"--points: expected comma-separated integers like 8,16,24, got {text!r}") from None


def _fixed(text: str, profile) -> tuple[int, str]:
    if text.strip().lower() == "auto":
        params = sum(s.param_size for s in profile.stages)
        fixed = fixed_bytes_auto(profile)
        return fixed, (
            f"{format_size(fixed)} ({fixed} bytes) = {ADAM_COPIES} x {format_size(params)} of parameters "
            "(parameters + gradients + Adam's two moments; auto)"
        )
    fixed = parse_size(text)
    return fixed, f"{format_size(fixed)} ({fixed} bytes; given)"


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 1000 else f"{value:.4g}"


def _row(fit: Fit, label: str) -> str:
    if fit.size is None:
        blank = f"{'':>12} {'':>10} {'':>9}"
        return f"{fit.strategy:<10} {'-':>8} {blank}  not even {label} {fit.next_size}: {fit.next_reason}"
    peak = fit.schedule.predicted.peak_memory
    verdict = "" if fit.next_reason.startswith("not searched") else "does not fit: "
    return (
        f"{fit.strategy:<10} {fit.size:>8} {format_size(peak):>12} {_ms(fit.schedule.predicted.compute_ms):>8}ms "
        f"{100 * fit.overhead:>+8.1f}%  {fit.next_size} {verdict}{fit.next_reason}"
    )


def run(args: argparse.Namespace) -> int:
    """Profile, fit the growth, find each strategy's largest size and print (and write) the plan."""
    check_paths(args, {}, {"-o": "output", "--save-profile": "save_profile", "--plot": "plot"})
    if args.device is not None and not args.measured:
        raise RematError("--device: applies with --measured only (a --meta plan runs on meta tensors, on no device)")
    shape = parse_shape(args.input_shape)
    dim = parse_vary(args.vary, len(shape))
    what = "batch" if dim == 0 else f"dim {dim}"
    memory = parse_size(args.memory)
    allowed = parse_percent(args.max_overhead, "--max-overhead")
    points = parse_points(args.points, shape[dim])
    if args.max_size < 1:
        raise RematError(f"--max-size: must be a positive integer, got {args.max_size}")
    if str(args.fixed_bytes).strip().lower() != "auto":
        try:  # its bytes are read after profiling (_fixed); a typo is refused now
            parse_size(args.fixed_bytes)
        except RematError as error:
            raise RematError(f"--fixed-bytes: {error}") from None
    # these import torch: after every argument is checked, and so that ``import remat.cli`` stays free of it
    from remat.models.loading import model_options, parse_dtype, resolve_device
    from remat.profile.batch import NOMINAL_FLOP_PER_MS, chain_profiler

    mode = "measured" if args.measured else "meta"
    device = resolve_device(args.device) if mode == "measured" else None
    dtype, options = parse_dtype(args.dtype), model_options(args)
    if device is not None and points:  # the largest input the profiles allocate, refused before it is
        largest = tuple(max(points) if axis == dim else n for axis, n in enumerate(shape))
        check_input_fits(largest, options["input_dtype"] or dtype, device)
    profiler = chain_profiler(args.model, shape, dim, mode, dtype, device, **options)
    result = _planned(profiler, points, mode, memory, allowed, args.fixed_bytes, args.max_size)
    growth, fits, fixed_note, budget = result.growth, result.fits, result.fixed_note, result.budget
    first = growth.profiles[0]
    times = (
        f"times from FLOPs at a nominal {NOMINAL_FLOP_PER_MS * 1000:.0e} FLOP/s (only their ratios matter)"
        if mode == "meta"
        else f"measured on {first.metadata['device']}"
    )
    print(f"model        {args.model}, input {args.input_shape}, varying {what}; {first.length} stages")
    print(f"cut          {first.metadata.get('cut', 'stages of the model')}")
    print(f"profiles     {mode}: sizes exact, {times}; at {what} {', '.join(map(str, growth.points))}")
    print(f"growth       {growth.kind} in {what}, every field checked against the other profiles (sizes exact)")
    for line in growth.describe():
        print(f"  {line}")
    print(f"memory       {format_size(memory)} ({memory} bytes)")
    print(f"fixed        {fixed_note}")
    print(f"activations  {format_size(budget)} ({budget} bytes), at most +{100 * allowed:g}% over store-all")
    print(f"{'strategy':<10} {what:>8} {'peak':>12} {'step':>10} {'overhead':>9}")
    for fit in fits.values():
        print(_row(fit, what))
    print(f"confirmed    each answer and the next {what} against real profiles (sizes to the byte)")
    best = fits["optimal"]
    if best.size is not None:
        if args.output:
            save_schedule(best.schedule, args.output)
            print(f"wrote {args.output} (optimal schedule at {what} {best.size})")
        if args.save_profile:
            save_profile(growth.profile_at(best.size), args.save_profile)
            print(f"wrote {args.save_profile} (profile at {what} {best.size})")
    if args.plot:
        _plot(growth, budget, what, args)
    return 0


@dataclass(frozen=True)
class PlanResult:
    """What a plan found: per strategy (``optimal``, ``chen-sqrt``, ``store-all``) the largest size
    that fits (:class:`~remat.solver.plan.Fit`: size, schedule, overhead, why the next does not),
    the growth model it was read from, and the memory split (bytes)."""

    fits: dict[str, Fit]
    growth: Any
    memory: int
    fixed: int
    fixed_note: str
    budget: int

    @property
    def size(self) -> int | None:
        """The optimal schedule's largest size (None: not even the smallest fits)."""
        return self.fits["optimal"].size

    def profile(self) -> Any:
        """The chain profile at :attr:`size` (predicted by the growth model, or a real one)."""
        return self.growth.profile_at(self.size)


def _planned(profiler, points, mode: str, memory: int, allowed: float, fixed_text: str, max_size: int) -> PlanResult:
    """Fit the growth through ``profiler``'s profiles and find each strategy's confirmed largest size."""
    growth = fit_growth(profiler, points, time_rtol=None if mode == "measured" else 1e-6, upper=max_size)
    fixed, fixed_note = _fixed(str(fixed_text), growth.profiles[0])
    budget = memory - fixed
    if budget <= 0:
        raise RematError(f"--fixed-bytes: {format_size(fixed)} leaves nothing of --memory {format_size(memory)}")
    fits = {}
    for name in PLAN_STRATEGIES:
        fits[name], growth = confirmed_largest(growth, profiler, budget, allowed, name, upper=max_size)
    return PlanResult(fits, growth, memory, fixed, fixed_note, budget)


def plan(
    model: Any,
    example: Any,
    memory: int | str,
    *,
    vary: int = 0,
    max_overhead: float | str = 0.1,
    fixed_bytes: int | str = "auto",
    points: Sequence[int] | None = None,
    max_size: int = DEFAULT_MAX_SIZE,
) -> PlanResult:
    """``remat plan`` in Python, on meta tensors: the largest size of dimension ``vary`` of the
    example's tensors whose schedule fits ``memory`` with at most ``max_overhead`` over store-all.

    Args:
        model: an ``nn.Module`` on the meta device, or a function of no arguments that builds one
            (called under ``torch.device("meta")``: no weights are allocated).
        example: what ``remat.checkpoint`` would be given, on meta: a tensor, a tuple of inputs,
            or a dict of keyword inputs (``{"input_ids": ids, "labels": ids}``); every tensor with
            dimension ``vary`` grows along it (tensors that are one stay one).
        memory: the device's bytes, or a size (``"80GiB"``).
        max_overhead: a fraction (0.2) or a percentage (``"20%"``).
        fixed_bytes: bytes outside the activations, or ``"auto"`` (4 x the parameters).
        points: the sizes to profile (default 1x, 2x, 3x the example's).

    The cut is remat.checkpoint's traced one, not proven (nothing computes on meta); sizes are
    exact, times FLOPs at a nominal rate (docs/plan.md). ``result.fits["optimal"].schedule`` and
    ``result.profile()`` are for the real run."""
    from remat.profile.batch import example_profiler  # imports torch

    allowed = parse_percent(max_overhead, "max_overhead") if isinstance(max_overhead, str) else float(max_overhead)
    profiler, size = example_profiler(model, example, vary)
    chosen = list(points) if points is not None else [m * size for m in POINT_MULTIPLES]
    total = parse_size(memory) if isinstance(memory, str) else int(memory)
    return _planned(profiler, chosen, "meta", total, allowed, str(fixed_bytes), max_size)


def _plot(growth, budget: int, what: str, args: argparse.Namespace) -> None:
    import matplotlib  # ~0.5 s: only when --plot is given

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = overhead_curve(growth, budget, CURVE_OVERHEADS, upper=args.max_size)
    figure, axis = plt.subplots(figsize=(7, 4.5))
    percent = [100 * o for o in CURVE_OVERHEADS]
    for name, sizes in curves.items():
        axis.step(percent, [s or 0 for s in sizes], where="post", label=name, marker=".")
    axis.set_xlabel("overhead allowed over store-all (%)")
    axis.set_ylabel(f"largest {what} that fits")
    axis.set_title(f"{args.model.split(':')[-1]}: {format_size(budget)} for activations")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    try:
        save_figure(figure, args.plot, dpi=120)
    finally:
        plt.close(figure)
    print(f"wrote {args.plot}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``plan`` to ``remat``'s subcommands."""
    plan = sub.add_parser(
        "plan",
        help="the largest batch (or length) whose schedule fits a memory at a bounded overhead",
        description="Profile MODEL at a few sizes of one input dimension, fit how its chain grows, and find the "
        "largest size whose optimal schedule (and Chen's sqrt(n), and store-all) fits --memory minus the fixed "
        "bytes with at most --max-overhead over store-all.",
        epilog="examples: remat plan --model remat.zoo.gpt2:gpt2_small --input-shape 1,1024,768 "
        "--memory 80GB --max-overhead 10%;  remat plan --model transformers:llama --config "
        "hidden_size=4096,num_hidden_layers=32,num_attention_heads=32,intermediate_size=11008 --input-dtype int64 "
        "--input-shape 1,2048 --vary dim=1 --memory 80GiB --fixed-bytes 54GB --max-overhead 20%",
    )
    plan.add_argument("--vary", default="batch", help="batch (default) or dim=N: the input dimension to grow")
    plan.add_argument("--memory", required=True, help="device memory: bytes, 80GB, 24GiB")
    plan.add_argument(
        "--max-overhead",
        default=f"{DEFAULT_MAX_OVERHEAD_PERCENT}%",
        help=f"step time allowed over store-all (default {DEFAULT_MAX_OVERHEAD_PERCENT}%%)",
    )
    plan.add_argument(
        "--fixed-bytes",
        default="auto",
        help=f"memory outside the activations: bytes, or auto = {ADAM_COPIES} x parameters (weights, grads, Adam) "
        "(default)",
    )
    plan.add_argument(
        "--max-size",
        type=int,
        default=DEFAULT_MAX_SIZE,
        help="largest size to consider (e.g. the model's context length)",
    )
    multiples = ", ".join(f"{multiple}x" for multiple in POINT_MULTIPLES)
    plan.add_argument("--points", help=f"sizes to profile, e.g. 8,16,24 (default: {multiples} the input's)")
    mode = plan.add_mutually_exclusive_group()
    mode.add_argument("--meta", action="store_true", help="profile on meta tensors, times from FLOPs (default)")
    mode.add_argument("--measured", action="store_true", help="profile on the device: measured times and sizes")
    add_model_options(plan, device_help=f"--measured: {DEVICE_HELP}")
    plan.add_argument("-o", "--output", type=output_file, help="write the optimal schedule at the planned size here")
    plan.add_argument(
        "--save-profile", type=output_file, help="write the chain profile at the planned size here (for remat execute)"
    )
    plan.add_argument(
        "--plot", type=plot_file, help="draw the largest size against the overhead allowed (0-100%%) into this PNG"
    )
    plan.set_defaults(func=model_command(run))


__all__ = ["PlanResult", "add_parser", "parse_percent", "parse_points", "plan", "run"]
