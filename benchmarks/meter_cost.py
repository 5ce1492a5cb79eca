"""What metering a training step costs: plain step vs the allocator meter vs the live-tensor tracker.

remat measures memory with remat.measure.allocator.AllocatorMeter (CPU: torch.profiler memory
events from the c10 allocator; CUDA: max_memory_allocated) and explains it with the live-tensor
tracker (remat.measure.memory.StorageTracker, a TorchDispatchMode). Neither is on the timed path
(measured steps and timed steps are separate runs), but profiling and ``remat execute`` pay for
them. Per model: the fastest of ``--steps`` interleaved runs of a plain training step, of the same
step inside each meter, and of an empty metered block; plus both meters' peaks.

    python -m benchmarks.meter_cost [--steps 9] [--threads 1] [--device cpu]

Writes benchmarks/results/meter_cost.json (with the machine it ran on).
"""

from __future__ import annotations

import argparse

import torch

from benchmarks import common
from remat.measure.allocator import AllocatorMeter, tensor_meter
from remat.replay.report import prepare_grads
from remat.schedules import format_size
from remat.zoo import small
from remat.zoo.resnet18 import resnet18

MODELS = {
    # name: (factory, input shape)
    "resnet18": (resnet18, (8, 3, 96, 96)),
    "cnn": (lambda: small.cnn(widths=(16, 32, 64), blocks=3), (16, 3, 32, 32)),
    "mlp": (lambda: small.mlp(depth=16, width=512, in_features=512), (128, 512)),
}


def measure(name: str, device: torch.device, steps: int) -> dict:
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    model = factory().to(device).train()
    x = torch.randn(*shape, device=device)

    def step() -> None:
        prepare_grads(model)
        model(x).sum().backward()

    variants = {
        "plain": step,
        "allocator": lambda: _inside(AllocatorMeter(device), step),
        "tracker": lambda: _inside(tensor_meter(device), step),
        "empty allocator block": lambda: _inside(AllocatorMeter(device), lambda: None),
    }
    step()  # warm-up: kernel caches, thread pools
    times = common.interleaved(variants, steps, device)  # so load hits every variant alike
    allocator, tracker = AllocatorMeter(device), tensor_meter(device)
    _inside(allocator, step)
    _inside(tracker, step)
    return {
        "model": name,
        "input_shape": list(shape),
        "fastest_ms": {k: min(v) for k, v in times.items()},
        "allocator_peak": allocator.peak_bytes,
        "tracker_peak": tracker.peak_bytes,
    }


def _inside(meter, fn) -> None:
    with meter:
        fn()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=9, help="interleaved runs per variant (fastest is kept)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: steadier)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", default=",".join(MODELS))
    common.add_out(parser, "meter_cost")
    common.add_quick(parser, "the CNN and the MLP, 2 interleaved runs")
    args = parser.parse_args()
    if args.quick:
        args.models, args.steps = "cnn,mlp", 2
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows = []
    columns = (("plain ms", 9), ("allocator", 10), ("tracker", 9), ("empty", 9), ("alloc peak", 11), ("tensors", 10))
    print(f"{'model':<10} " + " ".join(f"{c:>{w}}" for c, w in columns))
    for name in args.models.split(","):
        row = measure(name, device, args.steps)
        rows.append(row)
        t = row["fastest_ms"]
        print(
            f"{name:<10} {t['plain']:>9.2f} {t['allocator']:>10.2f} {t['tracker']:>9.2f} "
            f"{t['empty allocator block']:>9.2f} {format_size(row['allocator_peak']):>11} "
            f"{format_size(row['tracker_peak']):>10}"
        )
    result = {
        "benchmark": "meter_cost",
        "device": str(device),
        "steps": args.steps,
        "machine": common.machine(),
        "rows": rows,
    }
    common.write_result(result, common.out_path(args, "meter_cost"))


if __name__ == "__main__":
    main()
