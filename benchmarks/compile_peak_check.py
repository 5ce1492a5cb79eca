"""The allocator's peak of one remat.compile training step against ``predicted_peak`` (CPU).

Small models only: a conv+BatchNorm net, torchvision's ResNet-18 (10 classes, 2x3x32x32) and a
2-layer Hugging Face Llama (hidden 64). For each, budgets at the least step peak and at the
mid-point between it and the store-all peak; the step is metered after a first step that compiled
and allocated the gradients (``prepare_grads``), as the tests do. Prints one line per point:
model, budget, predicted, measured (bytes) and measured / predicted - 1; writes the points with the
machine to benchmarks/results/compile_peak_check.json.

    python -m benchmarks.compile_peak_check [conv llama resnet18] [--times estimate]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import remat
from benchmarks import common
from remat.measure.allocator import AllocatorMeter
from remat.replay.report import prepare_grads
from remat.schedules import RematError


def conv_bn() -> tuple[nn.Module, tuple, dict]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )  # fmt: skip
    return model, (torch.randn(8, 3, 32, 32),), {}


def resnet18() -> tuple[nn.Module, tuple, dict]:
    from remat.models.compat import import_torchvision

    torch.manual_seed(0)
    model = import_torchvision().models.resnet18(num_classes=10)
    return model, (torch.randn(2, 3, 32, 32),), {}


def llama() -> tuple[nn.Module, tuple, dict]:
    from remat.models.compat import import_torchvision

    import_torchvision()  # transformers imports torchvision (remat/models/compat.py)
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 128, (2, 32))
    return model, (), {"input_ids": ids, "labels": ids}


MODELS = {"conv": conv_bn, "resnet18": resnet18, "llama": llama}


def step(compiled: nn.Module, args: tuple, kwargs: dict) -> None:
    out = compiled(*args, **kwargs)
    loss = out.loss if hasattr(out, "loss") and out.loss is not None else out.sum()
    loss.backward()


def measure(name: str, budget: int | float | str, times: str) -> tuple:
    model, args, kwargs = MODELS[name]()
    model.train()
    compiled = remat.compile(model, budget=budget, times=times)
    step(compiled, args, kwargs)
    bounds = (compiled.least_peak, compiled.store_all_peak)  # read after the compiling call
    prepare_grads(model)
    with AllocatorMeter("cpu") as meter:
        step(compiled, args, kwargs)
    return compiled, meter.peak_bytes, bounds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--times", default="estimate")
    common.add_quick(parser, "the conv model at its least only")
    common.add_out(parser, "compile_peak_check")
    options = parser.parse_args()
    if options.quick:
        options.models = ["conv"]
    points = []
    for name in options.models:
        _, _, (least, top) = measure(name, 1.0, options.times)
        print(f"{name}: least {least} store-all {top}", flush=True)
        every = (("store-all", 1.0), ("mid", (least + top) // 2), ("least", least))
        for label, budget in every[2:] if options.quick else every:
            try:
                compiled, peak, _ = measure(name, budget, options.times)
            except RematError as error:  # a budget the compiled step cannot meet: refused
                print(f"{name:9s} {label:9s} budget {budget!s:>10} refused: {error}", flush=True)
                points.append({"model": name, "point": label, "budget": budget, "refused": str(error)})
                continue
            predicted = compiled.predicted_peak
            simulated = compiled.simulated_peak
            print(
                f"{name:9s} {label:9s} budget {budget!s:>10} predicted {predicted:>10} measured {peak:>10} "
                f"{peak / predicted - 1:+.1%} simulated {simulated:>10} regions {len(compiled.regions)}",
                flush=True,
            )
            points.append({"model": name, "point": label, "budget": budget, "predicted": predicted,
                           "simulated": simulated, "measured": peak})  # fmt: skip
    data = {"machine": common.machine(), "times": options.times, "points": points}
    common.write_result(data, common.out_path(options, "compile_peak_check"))


if __name__ == "__main__":
    main()
