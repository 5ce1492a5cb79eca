"""The model options that ``remat profile``, ``remat execute`` and ``remat plan`` share, declared once.

:func:`add_model_options` declares the whole set (``profile``, ``execute``); ``plan`` builds no
library model and runs no torch threads, so it takes the two parts it needs:
:func:`add_model_and_input` and :func:`add_device_and_dtype`.

torch is imported inside :func:`with_threads` and :func:`compiled_if` only, when a command runs a
model: ``import remat.cli`` (and ``remat solve``) stay free of its ~1 s import.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from remat.cli.args import integer_at_least
from remat.schedules import RematError

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


def add_model_options(command: argparse.ArgumentParser) -> None:
    """Every model option: model, input, device, dtype, torch threads and a library model's config and inputs."""
    add_model_and_input(command)
    add_device_and_dtype(command)
    command.add_argument(
        "--threads",
        type=integer_at_least(1),
        help="CPU threads for torch (torch.set_num_threads; default: torch's own choice)",
    )
    command.add_argument("--config", help="library model config, e.g. n_layer=2,n_embd=64 (--model transformers:gpt2)")
    command.add_argument("--input-dtype", help="input dtype if not --dtype: int64 for token ids")
    command.add_argument("--input-range", help="integer inputs drawn from LOW,HIGH (default 0,vocab_size)")


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
    "add_model_and_input",
    "add_model_options",
    "compiled_if",
    "with_threads",
]
