"""How much the time of a fixed piece of work drifts on this machine, quiet, over a minute or two.

    python -m benchmarks.machine_drift [--seconds 90] [--window 6] [--threads 1]

Three fixed kernels, one after the other, again and again, on one torch thread: a compute-bound
one (five 1024 x 1024 fp32 matmuls), a memory-bound one (five in-place passes over 64 MiB) and
one that touches fresh pages (allocate and fill 32 MiB: page faults, kernel time). Each sample
is read on two clocks: the calling thread's CPU time (``time.thread_time``, what
benchmarks/gpt2_compare.py uses by default: waiting for a core is not counted) and wall-clock
time. Nothing in the work changes between samples, so every difference between them is the
machine's: other tenants of the host, frequency, caches.

The table gives, per kernel and clock, the minimum, the median and the maximum of all samples,
the range of the per-window medians (windows of ``--window`` seconds: slow and fast spells), and
``median / min - 1``: how far a median lies above a minimum on this machine. The profiler keeps
per-stage minima (docs/executor.md), so a step's median time exceeds its prediction by about this
much even when the model is right. Milliseconds. Writes benchmarks/results/machine_drift.json
with the machine it ran on.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from benchmarks import common

CLOCKS = {"thread": time.thread_time, "wall": time.perf_counter}


def kernels() -> dict[str, Callable[[], None]]:
    """The fixed pieces of work (each a few tens of ms on a 2-core cloud machine)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    big = torch.randn(64 * 2**20 // 4)

    def matmul() -> None:
        for _ in range(5):
            a @ b

    def bandwidth() -> None:
        for _ in range(5):
            big.mul_(1.0000001)

    def fresh_pages() -> None:
        torch.empty(32 * 2**20 // 4).fill_(1.0)

    return {"matmul 5x1024^2": matmul, "in-place 5x64MiB": bandwidth, "fresh 32MiB": fresh_pages}


def sample(work: Callable[[], None]) -> dict[str, float]:
    """One run of ``work`` on both clocks (ms)."""
    begin = {name: clock() for name, clock in CLOCKS.items()}
    work()
    return {name: (clock() - begin[name]) * 1000.0 for name, clock in CLOCKS.items()}


def collect(seconds: float) -> list[tuple[float, dict[str, dict[str, float]]]]:
    """(seconds since the start, {kernel: {clock: ms}}) for each round until ``seconds`` pass (at
    least one round)."""
    work = kernels()
    for run in work.values():  # warm-up: thread pool, allocator, pages of the inputs
        run()
    start = time.monotonic()
    rounds = []
    while not rounds or time.monotonic() - start < seconds:
        at = time.monotonic() - start
        rounds.append((at, {name: sample(run) for name, run in work.items()}))
    return rounds


def summary(rounds: list[tuple[float, dict]], window: float) -> list[dict]:
    """Per kernel and clock: min, median, max, the per-window medians' range, median / min - 1."""
    rows = []
    for kernel in rounds[0][1]:
        for clock in CLOCKS:
            values = [r[kernel][clock] for _, r in rounds]
            windows: dict[int, list[float]] = {}
            for at, r in rounds:
                windows.setdefault(int(at // window), []).append(r[kernel][clock])
            medians = [statistics.median(v) for v in windows.values()]
            median, least = statistics.median(values), min(values)
            rows.append({
                "kernel": kernel, "clock": clock, "samples": len(values), "min_ms": least,
                "median_ms": median, "max_ms": max(values), "window_median_low_ms": min(medians),
                "window_median_high_ms": max(medians), "median_over_min": median / least - 1.0,
                "window_medians_ms": medians,
            })  # fmt: skip
    return rows


def table(rows: list[dict], window: float) -> str:
    head = (
        f"| kernel | clock | min ms | median ms | max ms | {window:g}-s window medians, ms | median / min |\n"
        "|---|---|---|---|---|---|---|"
    )
    lines = [
        f"| {r['kernel']} | {r['clock']} | {r['min_ms']:.1f} | {r['median_ms']:.1f} | {r['max_ms']:.1f} | "
        f"{r['window_median_low_ms']:.1f}-{r['window_median_high_ms']:.1f} | +{r['median_over_min'] * 100:.0f}% |"
        for r in rows
    ]
    return "\n".join([head, *lines])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--window", type=float, default=6.0, help="seconds per window (slow and fast spells)")
    parser.add_argument("--threads", type=int, default=1)
    common.add_out(parser, "machine_drift")
    common.add_quick(parser, "4 seconds in windows of 1")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.window = 4.0, 1.0
    if args.seconds <= 0 or args.window <= 0 or args.threads < 1:
        parser.error("--seconds and --window must be positive, --threads at least 1")
    torch.set_num_threads(args.threads)
    info = common.machine("run with nothing else on the machine, to see the machine's own drift")
    rows = summary(collect(args.seconds), args.window)
    print(table(rows, args.window))
    result = {"config": {"seconds": args.seconds, "window": args.window, "threads": args.threads},
              "rows": rows, "machine": info}  # fmt: skip
    common.write_result(result, common.out_path(args, "machine_drift"), indent=1)


if __name__ == "__main__":
    main()
