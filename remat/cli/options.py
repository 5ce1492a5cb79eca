"""The model options that ``remat profile``, ``remat execute`` and ``remat plan`` share, declared once.

:func:`add_model_options` declares the whole set, the same for the three commands, and
:func:`model_command` checks them (torch-free) before a command imports torch or builds a model.

torch is imported inside :func:`with_threads` and :func:`compiled_if` only, when a command runs a
model: ``import remat.cli`` (and ``remat solve``) stay free of its ~1 s import.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

from remat.cli.args import cpu_count, integer_between
from remat.models.arguments import dtype_name, input_dtype_name, parse_config, parse_input_range, parse_shape
from remat.schedules import RematError, format_size

DTYPES = ("float32", "float16", "bfloat16", "float64")
DEFAULT_DTYPE = "float32"
DEVICE_HELP = "cuda or cpu (default: cuda when available)"


def add_model_and_input(command: argparse.ArgumentParser) -> None:
    """``--model`` and ``--input-shape`` (both required)."""
    command.add_argument(
        "--model", required=True, help="package.module:factory, or transformers:NAME, torchvision:NAME, timm:NAME"
    )
    command.add_argument("--input-shape", required=True, help="input shape, e.g. 32,3,224,224 (first is the batch)")


def add_device_and_dtype(command: argparse.ArgumentParser, device_help: str = DEVICE_HELP) -> None:
    """``--device`` (``device_help`` says when it applies) and ``--dtype``."""
    command.add_argument("--device", help=device_help)
    dtypes = ", ".join(f"{name} (default)" if name == DEFAULT_DTYPE else name for name in DTYPES)
    command.add_argument("--dtype", default=DEFAULT_DTYPE, help=dtypes)


def add_model_options(command: argparse.ArgumentParser, device_help: str = DEVICE_HELP) -> None:
    """Every model option: model, input, device, dtype, torch threads and a library model's config and inputs."""
    add_model_and_input(command)
    add_device_and_dtype(command, device_help)
    command.add_argument(
        "--threads",
        type=integer_between(1, cpu_count, "this machine's CPUs"),
        help="CPU threads for torch (torch.set_num_threads; at most the CPUs; default: torch's own choice)",
    )
    add_library_options(command)


def add_library_options(command: argparse.ArgumentParser) -> None:
    """``--config`` (a library model's config), ``--input-dtype`` and ``--input-range`` (token ids)."""
    command.add_argument("--config", help="library model config, e.g. n_layer=2,n_embd=64 (--model transformers:gpt2)")
    command.add_argument("--input-dtype", help="input dtype if not --dtype: int64 for token ids")
    command.add_argument("--input-range", help="integer inputs drawn from LOW,HIGH (default 0,vocab_size)")


def check_model_arguments(args: argparse.Namespace) -> None:
    """Refuse a malformed model option (``--input-shape 8,3,32x32``, ``--dtype fp33``, ``--config``,
    ``--input-dtype``, ``--input-range``) in one line before torch is imported or a model is built."""
    parse_shape(args.input_shape)
    dtype_name(args.dtype)
    input_dtype_name(getattr(args, "input_dtype", None))
    parse_input_range(getattr(args, "input_range", None))
    parse_config(getattr(args, "config", None))


def model_command(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command that runs a model: its arguments checked first (:func:`check_model_arguments`,
    torch-free), then ``command`` with ``--threads`` torch threads (:func:`with_threads`)."""
    threaded = with_threads(command)

    def run(args: argparse.Namespace) -> int:
        check_model_arguments(args)
        return threaded(args)

    return run


def build_model(args: argparse.Namespace, device):
    """The model and its example input from ``--model``, ``--input-shape``, ``--dtype`` and the
    library options, the input's size checked against the device's memory first (:func:`check_input_fits`)."""
    from remat.models.loading import build, model_options, parse_dtype, parse_shape  # imports torch

    shape, dtype, options = parse_shape(args.input_shape), parse_dtype(args.dtype), model_options(args)
    check_input_fits(shape, options["input_dtype"] or dtype, device)
    return build(args.model, shape, device, dtype, **options)


def check_input_fits(shape: tuple[int, ...], dtype, device) -> None:
    """Refuse (one line, before allocating) an input larger than the device's whole memory:
    ``--input-shape 1099511627776,64`` is 256 TiB of float32, and torch's own error for it is a
    multi-line RuntimeError. The device's memory: CUDA's total, or the machine's physical RAM."""
    elements = math.prod(shape)
    size = elements * dtype.itemsize
    total = device_memory(device)
    if total is not None and size > total:
        raise RematError(
            f"--input-shape {','.join(map(str, shape))}: the input alone is {format_size(size)} "
            f"({elements} x {dtype.itemsize} bytes), more than the {device.type} device's "
            f"{format_size(total)}: give a smaller shape"
        )


def device_memory(device) -> int | None:
    """Bytes of memory ``device`` has: CUDA's total, the physical RAM for a CPU, else None (meta)."""
    if device.type == "cuda":
        import torch  # see the module docstring

        return torch.cuda.get_device_properties(device).total_memory
    if device.type == "cpu":
        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    return None


def with_threads(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run ``command`` with ``--threads`` torch threads, restoring the previous count afterwards."""

    def run(args: argparse.Namespace) -> int:
        if args.threads is None:
            return command(args)
        if args.threads < 1:
            raise RematError("--threads: must be at least 1")
        import torch  # heavy: only when --threads is given (see the module docstring)

        before = torch.get_num_threads()
        torch.set_num_threads(args.threads)
        try:
            return command(args)
        finally:
            torch.set_num_threads(before)

    return run


def compiled_if(compile_stages: bool, chain, x, options: bool):
    """``chain`` with every stage compiled and checked against its eager stage (``--compile`` of
    ``profile`` and ``execute``; remat.runtime.compiled), or ``chain`` itself."""
    if not compile_stages:
        return chain
    from remat.runtime.compiled import compile_chain  # imports torch (see the module docstring)

    print("--compile: compiling every stage with torch.compile and checking it against the eager stage")
    return compile_chain(chain, x, options=options)


__all__ = [
    "DEFAULT_DTYPE",
    "DEVICE_HELP",
    "DTYPES",
    "add_device_and_dtype",
    "add_library_options",
    "add_model_and_input",
    "add_model_options",
    "build_model",
    "check_input_fits",
    "check_model_arguments",
    "compiled_if",
    "model_command",
    "with_threads",
]
