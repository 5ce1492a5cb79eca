"""One wrapped model through a training loop whose shapes change every batch (issue 23).

Hugging Face GPT-2, Llama and BERT (from configs, random weights, CPU, one thread) train on
batches padded to their own longest sequence, lengths drawn from ``--lengths`` (padded and
unpadded batches: both mask branches), labels -100 on padding; torchvision ResNet-50 trains on
batches of two image sizes and a ragged last batch. One ``remat.checkpoint`` per model, its budget
a fraction of the example's store-all peak (the example is the longest batch, so the budget in
bytes is the same for every step).

Every step is metered (:class:`remat.measure.allocator.AllocatorMeter`, parameter gradients
pre-allocated outside it, the chain input a_0 added as the chain model counts it) and its peak
put next to its plan's prediction and the budget. The meter covers the user's whole call, as
the prediction and the budget do: the side values the call computes first (``bind``: masks,
rotary tables) and the replay of the schedule (``side_bytes`` recorded too, and the worst as a
share of the budget). Every step is then run by plain PyTorch from the same RNG state and its
parameter gradients compared with ``torch.equal``. Per model: distinct shapes seen, re-traces,
cuts general in a size, profiles predicted by growth models, time to the first step of a new
shape (median and worst: trace and proof where one ran, profile or prediction, solve, and the
step; and the same for the new shapes served by a general cut, untraced), the steady-state step
time of remat and of plain PyTorch on the same batch (interleaved, every ``--plain-every``-th
step), and the worst allocator peak against its prediction and the budget. Writes
benchmarks/results/dynamic_shapes.json with the machine.

    python -m benchmarks.dynamic_shapes [--models gpt2 llama bert resnet50]
        [--steps 200] [--image-steps 40] [--layers 8] [--hidden 64] [--lengths 16,512] [--budget 0.5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import torch

import remat
from benchmarks import common
from benchmarks.real_models import hf_checkpointing
from remat.measure.allocator import AllocatorMeter
from remat.models.hub import build_library_model
from remat.replay.report import prepare_grads

VOCAB = 1024
CONFIGS = {
    "gpt2": ("transformers:gpt2", lambda n, h: {"n_layer": n, "n_embd": h, "n_head": 4, "n_positions": 1024}),
    "llama": ("transformers:llama", lambda n, h: {
        "num_hidden_layers": n, "hidden_size": h, "intermediate_size": 2 * h, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 1024}),
    "bert": ("transformers:bert", lambda n, h: {
        "num_hidden_layers": n, "hidden_size": h, "intermediate_size": 2 * h, "num_attention_heads": 4,
        "max_position_embeddings": 1024}),
}  # fmt: skip


def padded_batch(lengths: list[int], rng: random.Random) -> dict[str, torch.Tensor]:
    """Right-padded to the longest (DataCollatorWithPadding), labels -100 on padding."""
    longest = max(lengths)
    ids = torch.zeros(len(lengths), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, :length] = torch.tensor([rng.randrange(1, VOCAB) for _ in range(length)])
        mask[row, :length] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def text_batches(steps: int, batch: int, low: int, high: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """``steps`` batches: every third unpadded (all rows one length), the others ragged."""
    rng = random.Random(seed)
    out = []
    for k in range(steps):
        if k % 3 == 2:
            out.append(padded_batch([rng.randint(low, high)] * batch, rng))
        else:
            out.append(padded_batch([rng.randint(low, high) for _ in range(batch)], rng))
    return out


def image_batches(steps: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of 8 at 64 and 96 pixels, and a ragged last batch of 3 of each."""
    generator = torch.Generator().manual_seed(seed)
    sizes = [64 if k % 2 == 0 else 96 for k in range(steps - 2)]
    shapes = [(8, s) for s in sizes] + [(3, 64), (3, 96)]
    return [(torch.randn(b, 3, s, s, generator=generator), torch.randint(0, 10, (b,), generator=generator))
            for b, s in shapes]  # fmt: skip


def _loss(out: Any) -> torch.Tensor:
    """The step's tensor from a wrapped model's answer (a ModelOutput carrying the loss, or the loss)."""
    return out if isinstance(out, torch.Tensor) else out["loss"]


def metered(run: Any, model: torch.nn.Module) -> tuple[int, float]:
    """(allocator peak in bytes, wall ms) of ``run().backward()``, gradients pre-allocated outside."""
    prepare_grads(model)
    start = time.perf_counter()
    with AllocatorMeter(torch.device("cpu")) as meter:
        run().backward()
    return meter.peak_bytes, (time.perf_counter() - start) * 1000.0


def a0_bytes(call: tuple) -> int:
    """Bytes of a call's token ids (the chain input a_0 the remat rows add)."""
    return call[1]["input_ids"].nbytes


def timed(run: Any) -> float:
    start = time.perf_counter()
    run().backward()
    return (time.perf_counter() - start) * 1000.0


def one_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(0)
    if name == "resnet50":
        model = build_library_model("torchvision:resnet50", {"num_classes": 10}).train()
        batches = image_batches(args.image_steps, args.seed)
        loss = torch.nn.functional.cross_entropy
        example = max(batches, key=lambda b: b[0].numel())
        start = time.perf_counter()
        wrapped = remat.checkpoint(model, example[0], budget=args.budget, loss=loss, target=example[1])
        calls = [((x,), {}, y) for x, y in batches]

        def plain(call: tuple) -> torch.Tensor:
            return loss(model(*call[0]), call[2])
    else:
        spec, config = CONFIGS[name]
        model = build_library_model(spec, {**config(args.layers, args.hidden), "vocab_size": VOCAB}).train()
        batches = text_batches(args.steps, args.batch, args.lengths[0], args.lengths[1], args.seed)
        example = max(batches, key=lambda b: b["input_ids"].shape[1])

        def plain(call: tuple) -> torch.Tensor:
            return model(**call[1]).loss

        budget: float | int = args.budget
        if args.budget_from_hf:  # remat's budget in bytes: HF checkpointing's measured peak on the example
            with hf_checkpointing(model):
                budget = metered(lambda: plain(((), example, None)), model)[0] + example["input_ids"].nbytes
        start = time.perf_counter()
        wrapped = remat.checkpoint(model, example, budget=budget)
        calls = [((), b, None) for b in batches]

    first_seconds = time.perf_counter() - start
    rows, plain_ms, hf_ms = [], [], []
    for k, (call_args, call_kwargs, target) in enumerate(calls):
        known = {id(p.cut) for p in wrapped.plans}
        before = wrapped.retraces
        start = time.perf_counter()
        plan = wrapped.plan_for(*call_args, target=target, **call_kwargs)
        new, traced = id(plan.cut) not in known, wrapped.retraces > before
        # the whole call, its side values (masks, rotary tables) made inside the meter
        torch.manual_seed(args.seed * 100_003 + k)
        peak, ms = metered(lambda a=call_args, kw=call_kwargs, t=target: _loss(wrapped(*a, target=t, **kw)), model)
        total = time.perf_counter() - start
        grads = [p.grad.clone() for p in model.parameters()]
        torch.manual_seed(args.seed * 100_003 + k)  # plain PyTorch from the same RNG state: dropout alike
        plain_peak, _ = metered(lambda c=(call_args, call_kwargs, target): plain(c), model)
        equal = all(torch.equal(a, p.grad) for a, p in zip(grads, model.parameters(), strict=True))
        measured = peak + plan.cut.profile.input_size
        rows.append({
            "step": k, "shapes": plan.cut.signature.text(), "new": new, "traced": traced,
            "source": plan.cut.source, "first_step_s": total if new else None, "ms": ms, "measured": measured,
            "predicted": plan.predicted_peak, "least": plan.least, "side_bytes": plan.side_bytes,
            "grads_equal": equal, "plain_peak": plain_peak + plan.cut.profile.input_size,
        })  # fmt: skip
        if k % args.plain_every == 0:
            call = (call_args, call_kwargs, target)
            remat_ms = timed(lambda a=call_args, kw=call_kwargs, t=target: _loss(wrapped(*a, target=t, **kw)))
            plain_ms.append((timed(lambda c=call: plain(c)), remat_ms))
            if name != "resnet50":  # HF's per-layer checkpointing on the same batch: its time and peak
                with hf_checkpointing(model):
                    hf_peak, _ = metered(lambda c=call: plain(c), model)
                    hf_ms.append((timed(lambda c=call: plain(c)), remat_ms, measured, hf_peak + a0_bytes(call)))
    new_rows = [r for r in rows if r["new"]]
    untraced = [r["first_step_s"] for r in new_rows if not r["traced"]]
    steady = [r["ms"] for r in rows if not r["new"]]
    worst = max(rows, key=lambda r: r["measured"] / r["predicted"])
    return {
        "model": name,
        "budget": wrapped.budget,
        "first_cut_s": first_seconds,
        "steps": len(rows),
        "shapes": len({(r["shapes"]) for r in rows}),
        "retraces": wrapped.retraces,
        "general_cuts": len({id(p.cut.chain) for p in wrapped.plans if p.cut.chain.dynamic is not None}),
        "predicted_profiles": sum(1 for p in wrapped.plans if not p.cut.measured),
        "new_shape_s_median": statistics.median([r["first_step_s"] for r in new_rows]) if new_rows else None,
        "new_shape_s_worst": max([r["first_step_s"] for r in new_rows], default=None),
        "untraced_new_shapes": len(untraced),
        "untraced_s_median": statistics.median(untraced) if untraced else None,
        "untraced_s_worst": max(untraced, default=None),
        # what a new shape adds to its step: its first step's time less the step itself (the trace,
        # proof, profile or prediction, and the solve)
        "untraced_predicted_overhead_s": _overheads(new_rows, lambda r: not r["traced"] and r["source"] != "measured"),
        "untraced_measured_overhead_s": _overheads(new_rows, lambda r: not r["traced"] and r["source"] == "measured"),
        "traced_overhead_s": _overheads(new_rows, lambda r: r["traced"]),
        "grads_equal_steps": sum(1 for r in rows if r["grads_equal"]),
        "steady_ms_median": statistics.median(steady) if steady else None,
        "plain_vs_remat_ms": plain_ms,
        "remat_over_plain": statistics.median([r / p for p, r in plain_ms]) if plain_ms else None,
        "hf_checkpointing": hf_ms,  # (HF ms, remat ms, remat peak, HF peak) on the same batches
        "remat_over_hf": statistics.median([r / h for h, r, _, _ in hf_ms]) if hf_ms else None,
        "peak_over_hf_worst": max((rp / hp for _, _, rp, hp in hf_ms), default=None),
        "worst_measured_over_predicted": worst["measured"] / worst["predicted"] - 1.0,
        "lowest_measured_over_predicted": min(r["measured"] / r["predicted"] for r in rows) - 1.0,
        "worst_step": worst,
        "over_budget_steps": sum(1 for r in rows if r["measured"] > wrapped.budget),
        "side_over_budget_worst": max(r["side_bytes"] / wrapped.budget for r in rows),
        "least_steps": sum(1 for r in rows if r["least"]),
        "rows": rows,
    }


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"x{value:.2f}"


def _overheads(rows: list[dict[str, Any]], which: Any) -> dict[str, Any]:
    """Seconds a new shape adds to its first step (its first step less the metered step), over the
    new shapes ``which`` picks: how many, the median and the worst."""
    extra = [r["first_step_s"] - r["ms"] / 1000.0 for r in rows if which(r)]
    return {
        "count": len(extra),
        "median": statistics.median(extra) if extra else None,
        "worst": max(extra, default=None),
    }


def _lowest(result: dict[str, Any]) -> float:
    """The step whose allocator peak lay furthest below its prediction: measured / predicted - 1."""
    return min(r["measured"] / r["predicted"] for r in result["rows"]) - 1.0


def _seconds(median: float | None, worst: float | None) -> str:
    return "-" if median is None else f"{median:.2f} / {worst:.2f}"


def table(results: list[dict[str, Any]]) -> str:
    head = ("model", "steps", "shapes", "retraces", "general cuts", "predicted", "new shape s (median/worst)",
            "untraced new shapes", "untraced s (median/worst)", "grads equal", "steady ms", "remat/plain",
            "remat/HF ckpt", "peak/HF ckpt (worst)", "meas/pred (lowest, worst)", "steps > budget",
            "side / budget")  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        lines.append(
            f"| {r['model']} | {r['steps']} | {r['shapes']} | {r['retraces']} | {r['general_cuts']} | "
            f"{r['predicted_profiles']} | {_seconds(r['new_shape_s_median'], r['new_shape_s_worst'])} | "
            f"{r['untraced_new_shapes']} | {_seconds(r['untraced_s_median'], r['untraced_s_worst'])} | "
            f"{r['grads_equal_steps']}/{r['steps']} | {r['steady_ms_median']:.1f} | "
            f"x{r['remat_over_plain']:.2f} | {_ratio(r['remat_over_hf'])} | {_ratio(r['peak_over_hf_worst'])} | "
            f"{100 * _lowest(r):+.2f}%, {100 * r['worst_measured_over_predicted']:+.2f}% | "
            f"{r['over_budget_steps']} | {100 * r['side_over_budget_worst']:.2f}% |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["gpt2", "llama", "bert", "resnet50"])
    parser.add_argument("--steps", type=int, default=200, help="steps of each text model")
    parser.add_argument("--image-steps", type=int, default=40, help="steps of ResNet-50")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lengths", type=lambda s: tuple(int(v) for v in s.split(",")), default=(16, 512))
    parser.add_argument("--budget", type=float, default=0.5)
    parser.add_argument(
        "--budget-from-hf",
        action="store_true",
        help="text models: remat's budget is HF checkpointing's measured peak on the example (bytes), "
        "so both train at equal memory",
    )
    parser.add_argument("--plain-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    common.add_out(parser, "dynamic_shapes")
    common.add_quick(parser, "GPT-2 of 2 layers, 6 steps of 16 to 64 tokens")
    args = parser.parse_args()
    if args.quick:
        args.models, args.steps, args.layers, args.lengths = ["gpt2"], 6, 2, (16, 64)
    torch.set_num_threads(1)
    results = []
    for name in args.models:
        result = one_model(name, args)
        results.append(result)
        print(table([result]).splitlines()[-1], flush=True)
    print(table(results))
    out = common.out_path(args, "dynamic_shapes")
    data = {"machine": common.machine(), "args": vars(args), "results": results}
    common.write_result(data, out, indent=1, default=str)


if __name__ == "__main__":
    main()
