"""Library models built from a config, with random weights and no downloads.

``library:name`` specs (used by ``remat profile --model`` and the tests):

* ``transformers:<model_type>`` (``gpt2``, ``llama``, ``bert``, ...): ``AutoConfig.for_model`` with
  the given config fields, then the masked-LM head for encoders that have one (BERT), the
  sequence-to-sequence LM head for encoder-decoders (T5), else the causal-LM head if the
  architecture has one, else the bare model. ``use_cache`` is off
  (training does not use a KV cache).
* ``torchvision:<name>``: ``torchvision.models.get_model(name, weights=None, **config)``.
* ``timm:<name>``: ``timm.create_model(name, pretrained=False, **config)``.

torchvision is imported through :mod:`remat.models.compat` (CPU torch next to CUDA-linked wheels).
"""

from __future__ import annotations

import importlib
from typing import Any

from torch import nn

from remat.models.arguments import parse_config  # torch-free; re-exported
from remat.models.compat import import_torchvision
from remat.schedules import RematError

LIBRARIES = ("transformers", "torchvision", "timm")


def is_library_spec(spec: str) -> bool:
    """True for ``transformers:...``, ``torchvision:...`` and ``timm:...``."""
    return isinstance(spec, str) and spec.split(":", 1)[0] in LIBRARIES and spec.count(":") == 1


def _import(library: str) -> Any:
    if library == "torchvision":
        import_torchvision()
        return importlib.import_module("torchvision.models")
    import_torchvision_first = library in ("timm", "transformers")
    if import_torchvision_first:
        try:
            import_torchvision()  # both import torchvision when it is installed
        except ModuleNotFoundError:
            pass
    try:
        return importlib.import_module(library)
    except ModuleNotFoundError:
        raise RematError(f"--model: '{library}' is not installed (pip install {library})") from None


def _transformers_model(module: Any, name: str, config: dict[str, Any]) -> nn.Module:
    stated = config.pop("model_type", name)  # a config.json names its model type
    if stated != name:
        raise RematError(f"--config: the config is for model type '{stated}', not '{name}' (use transformers:{stated})")
    try:
        cfg = module.AutoConfig.for_model(name, **{"use_cache": False, **config})
    except (ValueError, KeyError) as error:
        raise RematError(f"--model: transformers has no model type '{name}' ({error})") from None
    # encoders (BERT) train as masked LMs, encoder-decoders (T5) as sequence-to-sequence LMs, the
    # rest with their causal-LM head when they have one; the bare model otherwise
    mappings = module.models.auto.modeling_auto
    if name in mappings.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        order = ("AutoModelForMaskedLM", "AutoModel")
    elif name in mappings.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        order = ("AutoModelForSeq2SeqLM", "AutoModel")
    else:
        order = ("AutoModelForCausalLM", "AutoModel")
    for auto in order:
        try:
            return getattr(module, auto).from_config(cfg)
        except ValueError:
            continue
    raise RematError(f"--model: transformers cannot build a model for config type '{name}'")


def build_library_model(spec: str, config: dict[str, Any] | None = None) -> nn.Module:
    """The model named by ``spec`` (``library:name``), random weights, built from ``config``."""
    if not is_library_spec(spec):
        raise RematError(f"--model: expected one of {', '.join(f'{lib}:NAME' for lib in LIBRARIES)}, got {spec!r}")
    library, name = spec.split(":")
    config = dict(config or {})
    module = _import(library)
    try:
        if library == "transformers":
            return _transformers_model(module, name, config)
        if library == "torchvision":
            return module.get_model(name, weights=None, **config)
        return module.create_model(name, pretrained=False, **config)
    except RematError:
        raise
    except Exception as error:  # noqa: BLE001 - the library rejected the name or the config
        raise RematError(f"--model: {spec} with config {config}: {type(error).__name__}: {error}") from None


def vocab_size(model: nn.Module) -> int | None:
    """The token vocabulary of a Hugging Face model (``config.vocab_size``), else None."""
    value = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(value) if isinstance(value, int) else None


__all__ = ["LIBRARIES", "build_library_model", "is_library_spec", "parse_config", "vocab_size"]
