"""Step time of remat's optimal schedule vs torch.utils.checkpoint.checkpoint_sequential, at equal memory.

For every segment count s of ``checkpoint_sequential`` we measure its peak activation memory as the
allocator sees it (remat.measure.allocator.AllocatorMeter: the c10 CPU allocator, or CUDA's
max_memory_allocated; simulator accounting: input included, parameters and their pre-allocated
gradients excluded) and its step time. Then remat solves the ``optimal`` schedule with that measured
peak as its budget, replays it with RematChain, and measures the same two numbers. Times are the
fastest of interleaved steps (remat and checkpoint_sequential alternate, so machine noise hits both
alike; load only ever adds time). Ratios are checkpoint_sequential time / remat time in the same run.
The allocator meter counts checkpoint_sequential's RNG snapshots (5,056 bytes per segment) in its
peak but sets remat's own apart (they are made inside ``untracked()``): a few KiB in remat's favour.

    python -m benchmarks.executor_overhead [--model cnn|mlp|transformer] [--steps 7] [--device cpu]

Writes benchmarks/results/executor_overhead.json (with the machine it ran on).
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.checkpoint import checkpoint_sequential

from benchmarks import common
from remat.measure.memory import allocation_size, untracked
from remat.profile.chain import profile_chain
from remat.replay.chain import RematChain
from remat.replay.report import prepare_grads
from remat.schedules import InfeasibleBudgetError, format_size
from remat.solver import solve
from remat.trace.chain import as_chain
from remat.zoo import small

MODELS = {
    # name: (factory kwargs, input shape) - sized for a few seconds per step configuration on 2 CPU cores
    "cnn": (dict(widths=(16, 32, 64), blocks=3), (16, 3, 32, 32)),
    "mlp": (dict(depth=16, width=512, in_features=512), (128, 512)),
    "transformer": (dict(in_features=64, dim=64, depth=8, heads=4, dropout=0.0), (8, 64, 64)),
}


def one_step(forward, params_owner, x, weight) -> None:
    prepare_grads(params_owner)
    out = forward(x)
    loss = (out * weight).sum()
    del out
    loss.backward()


def peak_of(forward, params_owner, x, weight, device) -> int:
    """Peak activation bytes of one step (simulator accounting: + the input)."""
    one_step(forward, params_owner, x, weight)  # warm-up
    prepare_grads(params_owner)

    def step() -> None:
        out = forward(x)
        loss = (out * weight).sum()
        del out
        loss.backward()

    return common.step_peak(step, device) + allocation_size(x.untyped_storage().nbytes(), device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn")
    parser.add_argument("--steps", type=int, default=7, help="timed steps per configuration (fastest)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (default 1: steadier on a shared CPU)"
    )
    common.add_out(parser, "executor_overhead")
    common.add_quick(parser, "the MLP, one timed step per configuration")
    args = parser.parse_args()
    if args.quick:
        args.model, args.steps = "mlp", 1
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)

    kwargs, shape = MODELS[args.model]
    torch.manual_seed(0)
    model = getattr(small, args.model)(**kwargs).to(device).train()
    chain = as_chain(model)
    seq = torch.nn.Sequential(*chain.stages)
    n = len(chain)
    x = torch.randn(*shape, device=device)
    with untracked():
        weight = torch.randn_like(chain(x))
    profile = profile_chain(chain, x, repeats=5, warmup=2)
    print(
        f"{args.model}: {n} stages, input {tuple(shape)}, {device}; "
        f"profiled store-all step {profile.store_all_compute_ms:.1f} ms"
    )

    rows = []
    columns = ("ckpt peak", "ckpt ms", "remat peak", "pred peak", "remat ms", "ckpt/remat")
    header = f"{'segments':>8}  " + "  ".join(f"{c:>{8 if c.endswith('ms') else 10}}" for c in columns)
    print(header)
    for segments in sorted({1, 2, 3, 4, 6, 8, n} & set(range(1, n + 1))):

        def ckpt_forward(inp, segments=segments):
            return checkpoint_sequential(seq, segments, inp, use_reentrant=False)

        ckpt_peak = peak_of(ckpt_forward, seq, x, weight, device)
        try:
            schedule = solve(profile, ckpt_peak, "optimal")
        except InfeasibleBudgetError as error:
            rows.append({"segments": segments, "ckpt_peak": ckpt_peak, "remat": None, "note": str(error)})
            print(f"{segments:>8}  {format_size(ckpt_peak):>10}  optimal infeasible at this budget")
            continue
        wrapped = RematChain(chain, schedule, profile)
        remat_peak = peak_of(wrapped, wrapped, x, weight, device)
        steps = {
            "ckpt": lambda f=ckpt_forward: one_step(f, seq, x, weight),
            "remat": lambda w=wrapped: one_step(w, w, x, weight),
        }
        times = common.interleaved(steps, args.steps, device)
        ckpt_ms, remat_ms = min(times["ckpt"]), min(times["remat"])
        row = {
            "segments": segments,
            "ckpt_peak": ckpt_peak,
            "ckpt_ms": ckpt_ms,
            "remat_budget": ckpt_peak,
            "remat_predicted_peak": schedule.predicted.peak_memory,
            "remat_peak": remat_peak,
            "remat_predicted_ms": schedule.predicted.compute_ms,
            "remat_ms": remat_ms,
            "ratio_ckpt_over_remat": ckpt_ms / remat_ms,
        }
        rows.append(row)
        print(
            f"{segments:>8}  {format_size(ckpt_peak):>10}  {ckpt_ms:>8.2f}  {format_size(remat_peak):>10}  "
            f"{format_size(schedule.predicted.peak_memory):>10}  {remat_ms:>8.2f}  {ckpt_ms / remat_ms:>10.2f}"
        )
    measured = [r for r in rows if r.get("remat_ms")]
    checkpointed = [r for r in measured if r["segments"] > 1]
    if checkpointed:
        best = min(checkpointed, key=lambda r: r["ckpt_ms"] * r["ckpt_peak"])
        print(
            f"best checkpoint_sequential (time x memory): {best['segments']} segments, {best['ckpt_ms']:.2f} ms at "
            f"{format_size(best['ckpt_peak'])}; remat optimal at that budget: {best['remat_ms']:.2f} ms at "
            f"{format_size(best['remat_peak'])} (ratio {best['ratio_ckpt_over_remat']:.2f})"
        )
    result = {
        "benchmark": "executor_overhead",
        "model": args.model,
        "input_shape": list(shape),
        "stages": n,
        "device": str(device),
        "steps": args.steps,
        "machine": common.machine(),
        "rows": rows,
        "note": "times are the fastest of interleaved steps on a shared machine; treat small differences as noise",
    }
    common.write_result(result, common.out_path(args, "executor_overhead"))


if __name__ == "__main__":
    main()
