"""Load a user's model (``pkg.module:factory``, or a library model ``transformers:gpt2`` built from
a config, see :mod:`remat.models.hub`), build example inputs (float, or integer token ids), and
cut the model into a chain proven equal to it (for the CLI; docs/models.md)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from remat.models.arguments import (  # torch-free; parse_shape, parse_input_range re-exported
    FLOAT_DTYPE_NAMES,
    dtype_name,
    float_dtype_name,
    input_dtype_name,
    parse_config,
    parse_input_range,
    parse_shape,
)
from remat.schedules import RematError

# The one table of float dtype names (remat.models.arguments, torch-free), as torch dtypes.
FLOAT_DTYPES = {name: getattr(torch, attribute) for name, attribute in FLOAT_DTYPE_NAMES.items()}


def load_model(spec: str, config: dict[str, Any] | None = None) -> nn.Module:
    """Import ``pkg.module`` and call ``factory()`` from ``"pkg.module:factory"`` (with ``config`` as
    keyword arguments), or build a library model (``transformers:gpt2``); one-line errors."""
    from remat.models.hub import build_library_model, is_library_spec

    if is_library_spec(spec):
        return build_library_model(spec, config)
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise RematError(f"--model: expected 'package.module:factory', got {spec!r}")
    module_name, factory_name = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise RematError(f"--model: cannot import module '{module_name}' ({error})") from None
    except Exception as error:  # noqa: BLE001 - the user's module failed while importing
        raise RematError(f"--model: importing '{module_name}' failed: {type(error).__name__}: {error}") from None
    factory = getattr(module, factory_name, None)
    if factory is None:
        raise RematError(f"--model: module '{module_name}' has no attribute '{factory_name}'")
    if isinstance(factory, nn.Module):
        return factory
    if not callable(factory):
        raise RematError(f"--model: '{spec}' is a {type(factory).__name__}, not a factory or a module")
    try:
        model = factory(**(config or {}))
    except Exception as error:  # noqa: BLE001 - the user's factory raised
        raise RematError(f"--model: {spec}() raised {type(error).__name__}: {error}") from None
    if not isinstance(model, nn.Module):
        raise RematError(f"--model: {spec}() returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def float_dtype(text: str) -> torch.dtype | None:
    """The float dtype ``text`` names (``"float32"``, ``"bf16"``, ``"torch.half"``; any case), or None."""
    name = float_dtype_name(text)
    return None if name is None else getattr(torch, name)


def parse_dtype(text: str) -> torch.dtype:
    """``"float32"`` etc. -> a torch dtype."""
    return getattr(torch, dtype_name(text))


def resolve_device(text: str | None) -> torch.device:
    """``cuda``/``cpu``/``None`` (CUDA when available) -> a device; error if CUDA is asked for but absent."""
    if text is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except RuntimeError:
        raise RematError(f"--device: unknown device {text!r} (use cuda or cpu)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RematError("--device: CUDA was asked for but torch sees no CUDA device")
    if device.type not in ("cuda", "cpu"):
        raise RematError(f"--device: unsupported device {text!r} (use cuda or cpu)")
    return device


def parse_input_dtype(text: str | None) -> torch.dtype | None:
    """``--input-dtype``: ``int64``/``int32`` (token ids) or a float dtype; None: the model's dtype."""
    name = input_dtype_name(text)
    return None if name is None else getattr(torch, name)


def model_options(args: Any) -> dict[str, Any]:
    """The CLI's ``--config``/``--input-dtype``/``--input-range`` as keyword arguments of :func:`build`."""
    return {
        "config": parse_config(getattr(args, "config", None)),
        "input_dtype": parse_input_dtype(getattr(args, "input_dtype", None)),
        "input_range": parse_input_range(getattr(args, "input_range", None)),
    }


def _example_input(
    model: nn.Module,
    shape: Sequence[int],
    device: torch.device,
    dtype: torch.dtype,
    input_range: tuple[int, int] | None,
) -> torch.Tensor:
    if dtype.is_floating_point:
        if input_range is not None:
            raise RematError("--input-range: applies to integer inputs (--input-dtype int64)")
        return torch.randn(*shape, device=device, dtype=dtype)
    if input_range is None:
        from remat.models.hub import vocab_size

        vocab = vocab_size(model)
        if vocab is None:
            raise RematError("--input-range: integer inputs need a range, e.g. --input-range 0,1000")
        input_range = (0, vocab)
    return torch.randint(input_range[0], input_range[1], tuple(shape), device=device, dtype=dtype)


def build(
    spec: str,
    shape: Sequence[int],
    device: torch.device,
    dtype: torch.dtype,
    seed: int = 0,
    config: dict[str, Any] | None = None,
    input_dtype: torch.dtype | None = None,
    input_range: tuple[int, int] | None = None,
) -> tuple[nn.Module, torch.Tensor]:
    """The model (train mode, on ``device``/``dtype``) and an example input of ``shape``: random
    normal, or integers in ``input_range`` (default ``[0, vocab_size)`` for a Hugging Face model)
    when ``input_dtype`` is an integer type."""
    torch.manual_seed(seed)
    model = load_model(spec, config).to(device=device, dtype=dtype).train()
    x = _example_input(model, shape, device, input_dtype or dtype, input_range)
    return model, x


def takes_labels(model: nn.Module) -> bool:
    """A Hugging Face model whose forward takes ``labels`` of the token ids' shape (causal, masked
    and sequence-to-sequence LM heads): its training step is its own loss on them."""
    import inspect

    if getattr(model, "config", None) is None or not type(model).__module__.startswith("transformers."):
        return False
    try:
        return "labels" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def example_call(
    model: nn.Module,
    shape: Sequence[int],
    device: torch.device,
    dtype: torch.dtype,
    input_dtype: torch.dtype | None = None,
    input_range: tuple[int, int] | None = None,
) -> tuple[tuple, dict[str, Any]]:
    """The example call ``(args, kwargs)`` of ``model`` that remat.checkpoint's example would be:
    ``{"input_ids": ids, "labels": ids}`` for token ids of a Hugging Face LM (its loss is the
    step), else the one input ``(x,)`` (:func:`build`'s). On ``device`` meta the tensors have no data."""
    x = _example_input(model, shape, device, input_dtype or dtype, input_range)
    if not x.is_floating_point() and takes_labels(model):
        return (), {"input_ids": x, "labels": x}
    return (x,), {}


def chain_for(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """``model`` as a chain proven equal to it on ``x`` (docs/models.md).

    The stages a model states (``remat_stages()``, ``nn.Sequential``, a module list) or that a
    name-based hint of :func:`remat.trace.chain.as_chain` finds are used when the proof shows
    them equal to the model; a stated cut that differs is refused. Any other model, or one whose
    hinted cut differs (timm's ``act1`` stem, say), is cut from its traced forward
    (:mod:`remat.trace.cut`), which is proven too. Errors are one line.
    """
    from remat.trace.chain import Chain, as_chain
    from remat.trace.proof import cut_model, prove_chain

    stated = isinstance(model, (Chain, nn.Sequential, nn.ModuleList)) or hasattr(model, "remat_stages")
    try:
        hinted = as_chain(model)
    except RematError:
        if stated:
            raise
        hinted = None
    if hinted is not None:
        try:
            prove_chain(model, hinted, x)
            return hinted
        except RematError:
            if stated:
                raise
    chain = cut_model(model, (x,), {})
    chain.bind(x)
    return chain


__all__ = [
    "FLOAT_DTYPES",
    "build",
    "chain_for",
    "example_call",
    "float_dtype",
    "load_model",
    "model_options",
    "parse_dtype",
    "parse_input_dtype",
    "parse_input_range",
    "parse_shape",
    "resolve_device",
    "takes_labels",
]
