"""remat's single- and multi-option DP fronts on a real GPT-2, side by side with no checkpointing,
Hugging Face's per-block checkpointing and ``torch.compile``'s ``activation_memory_budget``.

    python -m benchmarks.gpt2_compare [--layers 8 --dim 256 --seq 256 --batch 4]
       [--rounds 7] [--no-compile]

The model is transformers' ``GPT2LMHeadModel`` from a config (issue 12: 8 layers, n_embd 256, 4
heads, batch 4 x 256 tokens, dropout 0, random weights, CPU, one thread) with a 2,048-token
vocabulary: at GPT-2's 50,257 the logits and their gradient (206 MB each) set every peak and no
choice inside the blocks moves it (docs/benchmarks.md, "Stage options on a GPT-2"). remat cuts
its training step (loss included) from the traced forward, proves the cut equal to the model
(:func:`remat.trace.proof.cut_model`) and profiles it once with ``options=True``; the
single-option profile is the same profile with the options dropped. The "remat compiled
stages" rows do the same on the cut with every stage and option compiled
(:func:`remat.runtime.compiled.compile_chain`, checked against the eager stages first;
``--no-compiled-stages`` skips them).

Every method is measured alike (:func:`remat.replay.report.step_allocator_peak`, as
benchmarks/real_models.py does): the CPU allocator's peak over forward + loss + backward, plus
the chain input a_0 (the token ids); parameters and their pre-allocated gradients are outside.
Peaks are read first, in metered steps of their own; step times then come from ``--rounds``
interleaved rounds (after a warm-up round) of one unmetered step of every method, round-robin, the
order reversed every other round, so that load changes hit all methods alike: each row keeps the
median, the samples, min, max and the interquartile range / median (``ms_spread``), and
``identical_schedules`` shows how far apart rows replaying the same ops came out. With
``--clock thread`` (the default) every timer of the run, the profiler's included, reads the CPU
time of the one thread that does all the work (``time.thread_time``: with one intra-op thread,
eager, autograd and inductor's kernels all run on the calling thread on CPU), so that waiting for
a core on a shared machine is not counted; ``--clock wall`` keeps wall-clock time (a quiet
machine). ``torch.compile``'s compile time (its first
step) is reported apart from its step time.

Rockmate (PyPI ``rockmate`` 2.0.0) is tried when importable; the reason it did not run is
recorded otherwise. Writes benchmarks/results/gpt2_compare.json (with the machine it ran on).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch._dynamo.utils

from benchmarks import common
from benchmarks.real_models import hf_checkpointing
from remat.models.hub import build_library_model
from remat.profile.chain import profile_chain
from remat.replay.chain import RematChain
from remat.replay.report import prepare_grads, step_allocator_peak
from remat.runtime.compiled import compile_chain
from remat.schedules import ChainProfile, InfeasibleBudgetError, format_size, simulate
from remat.solver import solve
from remat.solver.chain.optimal import optimal_front
from remat.solver.chain.store_all import store_all_peak
from remat.trace.proof import cut_model

CPU = torch.device("cpu")
PEAK_TOLERANCE = 0.02  # issue 12: measured vs predicted peak of schedules with middle options
Step = Callable[[], torch.Tensor]


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2048, help="default 2,048: see the module doc")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="profiler: timed runs per stage")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timed rounds (the median is kept)")
    parser.add_argument("--budgets", default="1.0,0.7,0.5,0.35,0.25", help="remat: fractions of the store-all peak")
    parser.add_argument("--option-points", type=int, default=3, help="remat: extra multi-option front points")
    parser.add_argument("--compile-budgets", default="1.0,0.5,0.3,0.1,0.05,0.0")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (minutes per budget)")
    parser.add_argument("--no-compiled-stages", action="store_true", help="skip remat's compiled-stage rows")
    parser.add_argument("--clock", choices=("thread", "wall"), default="thread", help="see the module doc")
    common.add_out(parser, "gpt2_compare", dest="output")
    common.add_quick(parser, "2 layers of 64, 32 tokens, 1 round, no torch.compile")
    args = parser.parse_args(argv)
    if args.quick:
        args.layers, args.dim, args.seq, args.batch, args.vocab = 2, 64, 32, 1, 256
        args.repeats, args.rounds, args.budgets, args.option_points = 1, 1, "1.0,0.5", 0
        args.no_compile = args.no_compiled_stages = True
    args.output = common.out_path(args, "gpt2_compare", dest="output")
    return args


@contextlib.contextmanager
def clock(kind: str) -> Iterator[None]:
    """Every ``time.perf_counter()`` of the run (the profiler's, the replays', this script's)
    reads ``time.thread_time()`` for ``kind == "thread"``: the CPU time of the calling thread."""
    wall = time.perf_counter
    if kind == "thread":
        time.perf_counter = time.thread_time
    try:
        yield
    finally:
        time.perf_counter = wall


def build(args: argparse.Namespace) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The GPT-2 (train mode, dropout 0, seed 0) and its example: token ids as inputs and labels."""
    config = {"n_layer": args.layers, "n_embd": args.dim, "n_head": args.heads, "n_positions": args.seq,
              "vocab_size": args.vocab, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
              "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip
    torch.manual_seed(0)
    model = build_library_model("transformers:gpt2", config).train()
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids, "labels": ids}


@dataclasses.dataclass
class Method:
    """One method's row (what goes to the JSON) and its training step (``step().backward()``)."""

    row: dict[str, Any]
    model: torch.nn.Module
    step: Step


def measure_peaks(methods: list[Method], a0: int) -> None:
    """Each method's peak (bytes: the allocator's, plus a_0), in its own metered steps: the timed
    rounds run unmetered (the allocator meter's profiler events cost time)."""
    for method in methods:
        method.row["measured_peak"] = step_allocator_peak(method.model, method.step, CPU, steps=2) + a0


def time_rounds(methods: list[Method], rounds: int) -> None:
    """Step times (ms), round-robin: every round times one step of every method, so that load
    changes during the run hit all methods alike; the first round is a warm-up and the order is
    reversed every other round (no method always follows the same neighbour). Each row gets the
    median (``measured_ms``), the samples and their spread (interquartile range / median)."""
    samples: dict[int, list[float]] = {id(m): [] for m in methods}
    for k in range(1 + max(1, rounds)):
        for method in methods if k % 2 else methods[::-1]:
            prepare_grads(method.model)
            begin = time.perf_counter()
            method.step().backward()
            if k:
                samples[id(method)].append((time.perf_counter() - begin) * 1000.0)
    for method in methods:
        values = np.array(samples[id(method)])
        median = float(np.median(values))
        q1, q3 = (float(q) for q in np.percentile(values, [25, 75]))
        method.row |= {"measured_ms": median, "ms_samples": values.tolist(), "ms_min": float(values.min()),
                       "ms_max": float(values.max()), "ms_spread": (q3 - q1) / median}  # fmt: skip


def measured(methods: list[Method], a0: int, rounds: int) -> list[dict]:
    """Peaks, then interleaved step times, of every method; their rows."""
    measure_peaks(methods, a0)
    time_rounds(methods, rounds)
    return [m.row for m in methods]


def baselines(model: torch.nn.Module, kw: dict, stack: contextlib.ExitStack) -> list[Method]:
    """No checkpointing, and HF per-block checkpointing on a copy of the model (same weights),
    enabled until ``stack`` closes: enabling it registers a forward hook on the input embedding
    each time, which a per-step toggle would pile up, and on which torch.compile guards."""
    copy_ = copy.deepcopy(model)
    stack.enter_context(hf_checkpointing(copy_))
    return [Method({"method": "no checkpointing"}, model, lambda: model(**kw).loss),
            Method({"method": "HF per-block checkpointing"}, copy_, lambda: copy_(**kw).loss)]  # fmt: skip


def compiled_method(model: torch.nn.Module, kw: dict, a0: int, budget: float, backend: str) -> Method | dict:
    """``torch.compile(model)`` with ``activation_memory_budget = budget``: compiled by its first
    step (``compile_s``, wall-clock seconds), its peak read once then (``peak_at_compile``, to
    check that the artifact the later, interleaved steps run is the same one: every budget's
    compiled model stays alive beside the others). A row with ``failed`` if it cannot run here."""
    import torch._functorch.config as functorch_config

    row: dict[str, Any] = {"method": f"torch.compile ({backend})", "activation_memory_budget": budget}

    def backend_at_budget(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        # a backend of its own per budget: dynamo keys its cache on the backend, so every budget's
        # artifact stays apart (with one "inductor" string a later budget reused the first's)
        with functorch_config.patch(activation_memory_budget=budget):
            return torch._dynamo.lookup_backend(backend)(gm, example_inputs)

    try:
        with functorch_config.patch(activation_memory_budget=budget):
            compiled = torch.compile(model, backend=backend_at_budget)
            begin = time.monotonic()  # wall-clock: inductor compiles in worker processes too
            prepare_grads(model)
            compiled(**kw).loss.backward()
            row["compile_s"] = time.monotonic() - begin
            step = lambda: compiled(**kw).loss  # noqa: E731
            row["peak_at_compile"] = step_allocator_peak(model, step, CPU, steps=1) + a0
    except Exception as error:  # noqa: BLE001 - a backend that cannot run here is a row with its reason
        return row | {
            "failed": f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        }
    return Method(row, model, step)


def options_used(schedule: Any) -> int:
    """How many recording forwards of ``schedule`` use a middle option (``F_all i k``, k >= 1)."""
    return sum(1 for op in schedule.ops if len(op) == 3 and op[2])


def remat_method(
    model: torch.nn.Module, chain: Any, profile: ChainProfile, kw: dict, budget: int, label: str
) -> Method | dict:
    """remat's ``optimal`` schedule for ``budget`` bytes, replayed on ``chain`` (eager or
    compiled stages, as ``profile`` was measured): its prediction, to be measured; a row with
    ``infeasible`` if no schedule fits."""
    row: dict[str, Any] = {"method": label, "budget": budget, "fraction": budget / store_all_peak(profile)}
    try:
        schedule = solve(profile, budget, "optimal")
    except InfeasibleBudgetError as error:
        return row | {"infeasible": str(error)}
    replay = RematChain(chain, schedule, profile)
    predicted = simulate(profile, schedule.ops, timeline=False)
    row |= {"options_used": options_used(schedule), "predicted_peak": predicted.peak_memory,
            "predicted_ms": predicted.compute_ms, "schedule": str(schedule.ops)}  # fmt: skip
    return Method(row, model, lambda: replay(chain.bind(**kw)))


def with_errors(rows: list[dict]) -> list[dict]:
    """Measured vs predicted (peak, step time) for the rows that have a prediction."""
    for row in rows:
        if "predicted_peak" in row and "measured_peak" in row:
            row["peak_error"] = row["measured_peak"] / row["predicted_peak"] - 1.0
            row["time_error"] = row["measured_ms"] / row["predicted_ms"] - 1.0
    return rows


def option_budgets(profile: ChainProfile, count: int) -> list[int]:
    """Up to ``count`` peaks of the multi-option front whose schedules use middle options, spread
    along it (the rows that test the options' predictions)."""
    points = [p.peak_memory for p in optimal_front(profile)]
    using = [b for b in points if options_used(solve(profile, b, "optimal"))]
    if len(using) <= count:
        return using
    return [using[round(k * (len(using) - 1) / max(1, count - 1))] for k in range(count)]


def remat_methods(
    model: torch.nn.Module,
    chain: Any,
    multi: ChainProfile,
    kw: dict,
    args: argparse.Namespace,
    extra: list[int],
    prefix: str = "remat",
) -> list[Method | dict]:
    """Both DPs at each ``--budgets`` fraction, at their least memory, at the extra budgets
    ``extra`` (torch.compile's least peak, ...), and the multi-option DP at its option points."""
    single, reference = multi.without_options(), store_all_peak(multi)
    budgets = [int(float(f) * reference) for f in args.budgets.split(",")] + extra
    least = {"single": optimal_front(single)[0].peak_memory, "multi": optimal_front(multi)[0].peak_memory}
    methods = []
    for label, profile in ((f"{prefix} single-option DP", single), (f"{prefix} multi-option DP", multi)):
        kind = "multi" if profile is multi else "single"
        chosen = [*budgets, least[kind], *(option_budgets(multi, args.option_points) if profile is multi else [])]
        for budget in sorted(set(chosen), reverse=True):
            method = remat_method(model, chain, profile, kw, budget, label)
            (method.row if isinstance(method, Method) else method)["least"] = budget == least[kind]
            methods.append(method)
    return methods


ROCKMATE_TRIED = (
    "PyPI rockmate 2.0.0 + rkgb 2.0.0 in a private venv (--system-site-packages, --no-deps, torch kept "
    "2.13.0+cpu): rkgb 2.0.0's wheel and sdist ship only rkgb/__init__.py and rkgb/rkgb.py, so "
    "`import rockmate` fails (No module named 'rkgb.core'); with rkgb's core/, lowlevel/ and utils/ "
    "copied from github.com/topal-team/rockmate (main) plus astunparse, psutil, configmypy and "
    "ruamel.yaml it needs pulp's get_solver, which no pulp on this registry has (<= 3.3.2; aliased to "
    "getSolver to go on); then rockmate.Rockmate(model, inputs, budget) stops at once: it sets "
    "self.device = torch.device('cuda') and builds a CUDA timer and CUDA streams whatever the model's "
    "device (rockmate/rockmate.py, rkgb/lowlevel/measure.py, rockmate/compiler.py): "
    "AssertionError: Torch not compiled with CUDA enabled"
)


def rockmate_cell(model: torch.nn.Module, kw: dict, budget: int) -> dict:
    """Rockmate's solve on the same model at ``budget`` bytes where it runs (its solve time), else
    the reason it did not (``ROCKMATE_TRIED``: what was tried on this CPU-only machine)."""
    cell: dict[str, Any] = {"tried": ROCKMATE_TRIED}
    try:
        import rockmate
    except Exception as error:  # noqa: BLE001 - any import failure is the recorded reason
        return cell | {"ran": False, "reason": f"import rockmate: {type(error).__name__}: {error}"}
    begin = time.monotonic()
    try:
        rockmate.Rockmate(model, {"input_ids": kw["input_ids"]}, budget=budget)
    except Exception as error:  # noqa: BLE001 - its own failure is the recorded reason
        return cell | {"ran": False, "reason": f"rockmate.Rockmate: {type(error).__name__}: {error}"}
    return cell | {"ran": True, "solve_s": time.monotonic() - begin, "budget": budget}


def _at_least(remat: list[dict], least: dict) -> dict[str, Any]:
    """The fastest (median) of ``remat`` rows that peak at most at ``least``'s, against it: within
    noise when its median is at most ``least``'s times (1 + the larger of the two spreads)."""
    fits = [r for r in remat if r["measured_peak"] <= least["measured_peak"]]
    if not fits:
        return {"met": False, "remat": None}
    best = min(fits, key=lambda r: r["measured_ms"])
    noise = max(best["ms_spread"], least["ms_spread"])
    ratio = best["measured_ms"] / least["measured_ms"]
    return {"remat": best["method"], "remat_peak": best["measured_peak"], "remat_ms": best["measured_ms"],
            "remat_spread": best["ms_spread"], "ratio": ratio, "noise": noise, "met": ratio <= 1.0 + noise}  # fmt: skip


def identical_schedules(rows: list[dict]) -> dict[str, Any]:
    """The timing noise seen directly: rows that replay the same ops on the same kind of stages
    (eager or compiled; the two DPs agree at some budgets, store-all always) and how far apart
    their medians are (max / min - 1)."""
    groups: dict[tuple[bool, str], list[float]] = {}
    for row in rows:
        if "schedule" in row and "measured_ms" in row:
            groups.setdefault(("compiled" in row["method"], row["schedule"]), []).append(row["measured_ms"])
    gaps = [max(ms) / min(ms) - 1.0 for ms in groups.values() if len(ms) > 1]
    return {"pairs": len(gaps), "largest_gap": max(gaps, default=None), "gaps": gaps}


def targets(rows: list[dict]) -> dict[str, Any]:
    """Issue 12's three targets, each with its numbers and met / not met."""
    plain = next(r for r in rows if r["method"] == "no checkpointing")
    ok = [r for r in rows if "measured_peak" in r]
    compiled = [r for r in ok if r["method"].startswith("torch.compile")]
    remat = [r for r in ok if r["method"].startswith("remat")]
    result: dict[str, Any] = {}
    if compiled:
        least = min(compiled, key=lambda r: r["measured_peak"])
        eager = [r for r in remat if "compiled" not in r["method"]]
        staged = [r for r in remat if "compiled" in r["method"]]
        result["at_compile_least_memory"] = {
            "compile_budget": least["activation_memory_budget"], "compile_peak": least["measured_peak"],
            "compile_ms": least["measured_ms"], "compile_spread": least["ms_spread"],
            "eager_stages": _at_least(eager, least), "compiled_stages": _at_least(staged, least),
            "met": _at_least(remat, least)["met"],
            "noise": "medians of interleaved rounds; within noise = ratio <= 1 + the larger interquartile "
                     "range / median of the two rows"}  # fmt: skip
    least = min(remat, key=lambda r: r["measured_peak"])
    share = least["measured_peak"] / plain["measured_peak"]
    result["least_memory"] = {"remat_peak": least["measured_peak"], "plain_peak": plain["measured_peak"],
                              "share": share, "met": share <= 0.16}  # fmt: skip
    middle = [r for r in remat if r.get("options_used")]
    worst = max((abs(r["peak_error"]) for r in middle), default=None)
    result["middle_option_peaks"] = {"rows": len(middle), "worst_abs_error": worst, "tolerance": PEAK_TOLERANCE,
                                     "met": bool(middle) and worst <= PEAK_TOLERANCE}  # fmt: skip
    return result


def _mib(value: int | None) -> str:
    return "—" if value is None else f"{value / 2**20:.2f}"


def table(rows: list[dict]) -> str:
    """Markdown: one row per method and budget (MiB = 2^20 bytes; steps relative to no checkpointing)."""
    plain_ms = next(r for r in rows if r["method"] == "no checkpointing")["measured_ms"]
    lines = ["| method | setting | predicted peak MiB | measured peak MiB | error | step ms median (x plain) "
             "| min-max ms, spread | predicted ms | options used | compile s |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        setting = (f"budget {r['activation_memory_budget']}" if "activation_memory_budget" in r
                   else f"{_mib(r['budget'])} MiB ({100 * r['fraction']:.0f}%){', least' if r.get('least') else ''}"
                   if "budget" in r else "")  # fmt: skip
        if "measured_peak" not in r:
            lines.append(f"| {r['method']} | {setting} | {r.get('infeasible') or r.get('failed')} |" + " |" * 7)
            continue
        error = f"{100 * r['peak_error']:+.2f}%" if "peak_error" in r else ""
        predicted_ms = f"{r['predicted_ms']:.0f} ({100 * r['time_error']:+.0f}%)" if "predicted_ms" in r else ""
        compile_s = f"{r['compile_s']:.0f}" if "compile_s" in r else ""
        lines.append(f"| {r['method']} | {setting} | {_mib(r.get('predicted_peak'))} | {_mib(r['measured_peak'])} "
                     f"| {error} | {r['measured_ms']:.0f} (x{r['measured_ms'] / plain_ms:.2f}) "
                     f"| {r['ms_min']:.0f}-{r['ms_max']:.0f}, {100 * r['ms_spread']:.0f}% | {predicted_ms} "
                     f"| {r.get('options_used', '')} | {compile_s} |")  # fmt: skip
    return "\n".join(lines)


def compiled_entries(model: torch.nn.Module, kw: dict, a0: int, args: argparse.Namespace) -> list[Method | dict]:
    """torch.compile at every ``--compile-budgets`` value (all kept alive: interleaved timing)."""
    entries = []
    for budget in (float(b) for b in args.compile_budgets.split(",")):
        entries.append(compiled_method(model, kw, a0, budget, args.compile_backend))
        row = entries[-1].row if isinstance(entries[-1], Method) else entries[-1]
        print(f"torch.compile {budget}: {row}", flush=True)
    return entries


def compiled_stages(chain: Any, x: torch.Tensor, args: argparse.Namespace) -> tuple[ChainProfile, Any, float]:
    """remat's chain with compiled stages (checked), its profile, and the seconds both took."""
    began = time.monotonic()
    staged = compile_chain(chain, x, options=True, backend=args.compile_backend, compile_threads=1)
    profile = profile_chain(staged, x, repeats=args.repeats, options=True)
    return profile, staged, time.monotonic() - began


def run(args: argparse.Namespace, stack: contextlib.ExitStack) -> dict:
    """Every measurement of one run, as written to the JSON (``stack``: what the run holds open)."""
    torch.set_num_threads(args.threads)
    model, kw = build(args)
    began = time.monotonic()
    chain = cut_model(model, (), kw)
    x = chain.bind(**kw)
    multi = profile_chain(chain, x, repeats=args.repeats, options=True)
    profile_s = time.monotonic() - began
    a0 = multi.input_size
    entries: list[Method | dict] = [*baselines(model, kw, stack)]
    if not args.no_compile:
        entries += compiled_entries(model, kw, a0, args)
    peaks = [e.row["peak_at_compile"] for e in entries if isinstance(e, Method) and "peak_at_compile" in e.row]
    extra = [min(peaks)] if peaks else []  # remat at torch.compile's least memory
    entries += remat_methods(model, chain, multi, kw, args, extra)
    staged_profile = None
    if not (args.no_compile or args.no_compiled_stages):
        staged_profile, staged, staged_s = compiled_stages(chain, x, args)
        entries += remat_methods(model, staged, staged_profile, kw, args, extra, prefix="remat compiled stages,")
    methods = [e for e in entries if isinstance(e, Method)]
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    measured(methods, a0, args.rounds)
    rows = with_errors([e.row if isinstance(e, Method) else e for e in entries])
    return {
        "clock": "thread CPU time (time.thread_time)" if args.clock == "thread" else "wall-clock",
        "timing": f"peaks first (metered steps), then {args.rounds} interleaved rounds (+1 warm-up) of one "
        "unmetered step per method; median, min, max and interquartile range / median",  # fmt: skip
        "graphs_compiled_while_timing": torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs,
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "model": "transformers GPT2LMHeadModel (sdpa attention), random weights",
        "profile_seconds": profile_s,
        "store_all_peak": store_all_peak(multi),
        "stages": [s.to_dict() for s in multi.stages],
        **(
            {
                "compiled_stages": {
                    "seconds": staged_s,
                    "store_all_peak": store_all_peak(staged_profile),
                    "stages": [s.to_dict() for s in staged_profile.stages],
                }
            }
            if staged_profile
            else {}
        ),  # fmt: skip
        "rows": rows,
        "rockmate": rockmate_cell(model, kw, store_all_peak(multi) // 2),
        "targets": targets(rows),
        "identical_schedules": identical_schedules(rows),
    }


def main() -> None:
    args = arguments()
    with clock(args.clock), contextlib.ExitStack() as stack:
        result = run(args, stack)
    for stage in result["stages"]:
        options = ", ".join(f"'{o['name']}' {format_size(o.get('saved_size', 0))}" for o in stage.get("options", []))
        print(f"  {stage['name']}: saved {format_size(stage['saved_size'])}; {options or 'no options'}")
    print(table(result["rows"]))
    print(json.dumps(result["targets"], indent=1))
    print(f"same schedule, different rows: {result['identical_schedules']}")
    print(f"rockmate: {result['rockmate']['reason']}")
    result["machine"] = common.machine("shared 2-core machine: times are noisy; ratios within the run")
    common.write_result(result, args.output, indent=1)


if __name__ == "__main__":
    main()
