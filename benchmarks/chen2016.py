"""Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost") on a CPU-only machine.

The paper: a 1,000-layer ResNet on ImageNet went from 48 GB to 7 GB of memory for about +30%
running time; O(sqrt n) memory for one extra forward pass, O(log n) memory for O(n log n) extra
forward work. Here, for a 1,001-layer pre-activation bottleneck ResNet (remat.zoo.preact_resnet)
at batch 32, 3x224x224, float32:

1. rates: FLOP/ms of every kind of block, measured on this CPU at a small batch (a 4-blocks-a-stage
   copy of the network, timed in sequence by the profiler's time_chain);
2. profile: the full-size network on the meta device (exact sizes, no compute), times = FLOPs /
   rate -> examples/preact_resnet1001_b32.json;
3. the optimal DP's whole front, chen-sqrt, the points of the paper's claims -> table + plot;
4. replay of three schedules on the meta-device model (autograd runs on meta tensors) with the
   StorageTracker: measured peak vs the simulator's prediction;
5. a depth sweep (50 .. 1,001 layers): optimal memory at +30% and at one extra forward pass vs n.

    python -m benchmarks.chen2016 [--reuse-profile] [--depths 50,101,...] [--slots 500]

Writes benchmarks/results/chen2016.json, docs/chen2016_front.png, docs/chen2016_depth.png.
Memory is the chain model's (DESIGN.md): activations, saved tensors, gradients of activations and
transients; parameters, their gradients and optimizer state are outside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from pathlib import Path

import torch

from benchmarks import common
from benchmarks.common import ROOT
from remat.profile.chain import profile_chain
from remat.profile.flops import FlopTimeEstimate, KindRate, measure_rates
from remat.replay.chain import RematChain
from remat.replay.report import measure_steps
from remat.schedules import ChainProfile, Schedule, load_profile, save_profile, write_json
from remat.solver import solve
from remat.solver.chain.checkpoints import chain_checkpoints
from remat.solver.chain.optimal import optimal_front, pareto_filter, plan, table_for
from remat.solver.chain.store_all import store_all_peak
from remat.solver.common import make_schedule
from remat.solver.front import FrontPoint
from remat.zoo.preact_resnet import PreActResNet, blocks_for_depth, preact_resnet

PROFILE_PATH = ROOT / "examples" / "preact_resnet1001_b32.json"
RESULTS_PATH = ROOT / "benchmarks" / "results" / "chen2016.json"
FRONT_PNG = ROOT / "docs" / "chen2016_front.png"
DEPTH_PNG = ROOT / "docs" / "chen2016_depth.png"
BATCH = 32
DEPTH = 1001
RATE_BATCH = 2
GB = 1e9  # the paper's "48G"/"7G"; decimal here, binary sizes are also in the JSON (bytes)
# 32 x 512 x 7 x 7 x 4 bytes: every activation of this network at batch 32 is a multiple of it (and most
# saved sizes), so the DP's rounding to slots is exact or nearly so (see FineFront)
FINE_SLOT = 32 * 512 * 7 * 7 * 4 * 2
FINE_SPAN = 1.5  # the fine front covers up to 1.5 x chen-sqrt's peak (the +30% and one-forward points lie below it)
PAPER = {"store_all_gb": 48.0, "sqrt_gb": 7.0, "sqrt_overhead_percent": 30.0}


def measure_block_rates(repeats: int) -> dict:
    """FLOP/ms per kind of stage, measured on this CPU (a (2,2,2,2)-block copy, batch RATE_BATCH)."""
    torch.manual_seed(0)
    small = PreActResNet((2, 2, 2, 2))
    x = torch.randn(RATE_BATCH, 3, 224, 224)
    return measure_rates(small, small.stage_kinds(), x, repeats=repeats)


def pool_block_rates(rates: dict[str, KindRate]) -> dict[str, KindRate]:
    """One forward and one backward rate for all bottleneck blocks (total FLOPs / total time over
    the block kinds); stem and head keep their own (other op mixes: the head is mostly BatchNorm and
    pooling). Per-kind rates at batch 2 on the shared machine scattered 2-4x between runs, more
    than the block kinds differ, so the pooled rate is the steadier estimate; the per-kind
    measurements are kept in the profile's metadata. The pooled record's measured ms and FLOPs
    fields are totals over the pooled stages (its rates are what the estimate uses)."""
    blocks = [r for k, r in rates.items() if k.startswith("layer")]
    ff = sum(r.forward_flops * r.stages for r in blocks)
    bf = sum(r.backward_flops * r.stages for r in blocks)
    fm = sum(r.forward_ms * r.stages for r in blocks)
    bm = sum(r.backward_ms * r.stages for r in blocks)
    pooled = KindRate(ff / fm, bf / bm, fm, bm, ff, bf, sum(r.stages for r in blocks))
    return {k: (pooled if k.startswith("layer") else r) for k, r in rates.items()}


def meta_profile(depth: int, rates: dict, name: str | None = None, measured: dict | None = None) -> ChainProfile:
    """The depth-``depth`` network at batch BATCH, profiled on meta; times = FLOPs / measured rate."""
    model = preact_resnet(depth, device="meta")
    x = torch.empty(BATCH, 3, 224, 224, device="meta")
    estimate = FlopTimeEstimate(rates, model.stage_kinds())
    profile = profile_chain(
        model,
        x,
        name=name or f"preact-resnet{depth}-b{BATCH}-meta",
        stage_times=estimate,
        timing_note=(
            f"estimated: FLOPs (torch FlopCounterMode, per stage on meta) / FLOP-per-ms measured on this CPU at "
            f"batch {RATE_BATCH} (metadata.rates_flop_per_ms: one pooled rate for all bottleneck blocks, own rates "
            f"for stem and head; per-kind measurements in metadata.measured_rates_per_kind)"
        ),
    )
    metadata = dict(profile.metadata)
    metadata.pop("forward_overheads_nograd", None)  # keeps the example file small; not used by any solver
    metadata.update(
        {
            "model": f"remat.zoo.preact_resnet:preact_resnet(depth={depth})",
            "depth": depth,
            "blocks_per_stage": list(blocks_for_depth(depth)),
            "image": [3, 224, 224],
            "rates_flop_per_ms": {k: r.to_dict() for k, r in rates.items()},
            "measured_rates_per_kind": {k: r.to_dict() for k, r in (measured or rates).items()},
            "stage_flops": [list(f) for f in estimate.flops],
        }
    )
    return ChainProfile(name=profile.name, input_size=profile.input_size, stages=profile.stages, metadata=metadata)


def pct(ms: float, base: float) -> float:
    return 100.0 * (ms / base - 1.0)


def point_row(label: str, peak: int, compute_ms: float, base_ms: float, forward_ms: float, checkpoints, paper=None):
    return {
        "row": label,
        "peak_bytes": int(peak),
        "peak_gb": peak / GB,
        "overhead_percent": pct(compute_ms, base_ms),
        "extra_forwards": (compute_ms - base_ms) / forward_ms,
        "checkpoints": checkpoints,
        "paper": paper,
    }


def least_memory_within(front: list[FrontPoint], base_ms: float, overhead_ms: float) -> FrontPoint:
    """The front point of least peak whose step time is at most ``overhead_ms`` over ``base_ms``."""
    within = [p for p in front if p.compute_ms - base_ms <= overhead_ms * (1 + 1e-12)]
    return min(within, key=lambda p: p.peak_memory)


def fastest_within(front: list[FrontPoint], peak: int) -> FrontPoint:
    """The fastest front point whose peak is at most ``peak`` bytes."""
    return min((p for p in front if p.peak_memory <= peak), key=lambda p: (p.compute_ms, p.peak_memory))


class FineFront:
    """The optimal DP's front up to ``top`` bytes from one table whose slot is FINE_SLOT bytes.

    The default front (:func:`optimal_front`) fills one table for the store-all budget: 500 slots of
    ~68 MB here, and the DP rounds every size up to whole slots, so a 26 MB activation counts as
    68 MB and the schedules it finds at a few GB are far from the optimum. FINE_SLOT divides the
    sizes of this network (every activation, most saved sizes), where the DP is exact."""

    def __init__(self, profile: ChainProfile, top: int) -> None:
        self.profile = profile
        levels = max(1, math.ceil((top - profile.input_size) / FINE_SLOT))
        self.table = table_for(profile, FINE_SLOT * levels, levels)
        assert self.table.sizes.slot == FINE_SLOT
        base = profile.store_all_compute_ms
        self.points: list[FrontPoint] = []
        self.levels: dict[tuple[int, float], int] = {}
        previous = math.inf
        for k in range(self.table.slots + 1):
            value = self.table.top[k]
            if math.isfinite(value) and (not math.isfinite(previous) or value < previous - 1e-9 * max(1.0, previous)):
                chosen = plan(profile, self.table, k)
                point = FrontPoint(
                    "optimal",
                    profile.input_size + k * FINE_SLOT,
                    chosen.peak_memory,
                    chosen.compute_ms,
                    max(0.0, chosen.compute_ms - base),
                    chosen.checkpoints,
                )
                self.points.append(point)
                self.levels[(point.peak_memory, point.compute_ms)] = k
                previous = value

    def schedule(self, point: FrontPoint) -> Schedule:
        """The schedule of one of this front's points, checked by the simulator (make_schedule)."""
        chosen = plan(self.profile, self.table, self.levels[(point.peak_memory, point.compute_ms)])
        return make_schedule(
            self.profile,
            point.budget,
            "optimal",
            chosen.ops,
            claimed_compute_ms=chosen.compute_ms,
            claimed_peak_memory=chosen.peak_memory,
            extra={"claim": "optimal among persistent schedules", "slot_bytes": FINE_SLOT},
        )


def analyse(profile: ChainProfile, slots: int) -> dict:
    """The front and the table rows of the paper's claims."""
    n = profile.length
    base = profile.store_all_compute_ms
    forward = sum(s.forward_ms for s in profile.stages)
    peak_all = store_all_peak(profile)
    sqrt = solve(profile, peak_all, "chen-sqrt")
    begin = time.perf_counter()
    coarse = optimal_front(profile, slots=slots)
    coarse_s = time.perf_counter() - begin
    begin = time.perf_counter()
    fine = FineFront(profile, int(FINE_SPAN * sqrt.predicted.peak_memory))
    fine_s = time.perf_counter() - begin
    front = pareto_filter(coarse + fine.points)

    def row(label, point_or_schedule, paper=None):
        if isinstance(point_or_schedule, FrontPoint):
            p = point_or_schedule
            return point_row(label, p.peak_memory, p.compute_ms, base, forward, p.checkpoints, paper)
        sch = point_or_schedule
        return point_row(
            label, sch.predicted.peak_memory, sch.predicted.compute_ms, base, forward, chain_checkpoints(sch.ops), paper
        )

    rows = [point_row("store-all", peak_all, base, base, forward, 0, "48 GB (MXNet, whole training memory)")]
    rows.append(row("chen-sqrt (remat)", sqrt, "7 GB, +30%"))
    same_memory = fastest_within(front, sqrt.predicted.peak_memory)
    rows.append(row("optimal at chen-sqrt's memory", same_memory))
    rows.append(
        row("optimal at chen-sqrt's overhead", least_memory_within(front, base, sqrt.predicted.compute_ms - base))
    )
    rows.append(
        row("optimal at +30%", least_memory_within(front, base, 0.30 * base), "7 GB at +30% (Chen's sqrt plan)")
    )
    rows.append(
        row("optimal at 1 extra forward", least_memory_within(front, base, forward), "O(sqrt n) for 1 extra fwd")
    )
    c = math.ceil(math.log2(n))
    revolve = solve(profile, peak_all, "revolve", checkpoints=c)
    rows.append(row(f"revolve, c = ceil(log2 n) = {c}", revolve, "O(log n) memory, O(n log n) fwd"))
    rows.append(row("optimal at revolve's memory", fastest_within(front, revolve.predicted.peak_memory)))
    minimum = front[0]
    rows.append(row("optimal, minimum memory", minimum, "far end"))

    def schedule_of(point: FrontPoint) -> Schedule:
        if (point.peak_memory, point.compute_ms) in fine.levels:
            return fine.schedule(point)
        return solve(profile, point.budget, "optimal", slots=slots)

    schedules = {
        "chen-sqrt": sqrt,
        "optimal at chen-sqrt's memory": schedule_of(same_memory),
        "optimal, minimum memory": schedule_of(minimum),
    }
    return {
        "n": n,
        "store_all_ms": base,
        "forward_ms": forward,
        "front": front,
        "coarse_front_seconds": coarse_s,
        "fine_front_seconds": fine_s,
        "fine_front_levels": fine.table.slots,
        "rows": rows,
        "schedules": schedules,
    }


def replay_on_meta(profile: ChainProfile, schedules: dict) -> list[dict]:
    """Run each schedule as a training step of the full-size meta model; StorageTracker on meta."""
    torch.manual_seed(0)
    model = preact_resnet(DEPTH, device="meta")
    x = torch.empty(BATCH, 3, 224, 224, device="meta")
    out = []
    for label, schedule in schedules.items():
        wrapped = RematChain(model, schedule, profile)
        begin = time.perf_counter()
        measured = measure_steps(wrapped, x, steps=1, warmup=0, timeline=False, timed=False)
        out.append(
            {
                "schedule": label,
                "strategy": schedule.strategy,
                "ops": len(schedule.ops),
                "predicted_peak_bytes": schedule.predicted.peak_memory,
                "measured_peak_bytes": measured.peak_memory,
                "difference_bytes": measured.peak_memory - schedule.predicted.peak_memory,
                "seconds": time.perf_counter() - begin,
            }
        )
        print(
            f"  replay on meta, {label:32s}: predicted {schedule.predicted.peak_memory / GB:8.3f} GB, "
            f"measured {measured.peak_memory / GB:8.3f} GB ({out[-1]['seconds']:.1f} s)",
            flush=True,
        )
    return out


def depth_sweep(depths: list[int], rates: dict, known: dict[int, tuple[ChainProfile, dict]]) -> list[dict]:
    """Per depth: the optimal memory at +30% and at one extra forward (fine front up to FINE_SPAN x
    chen-sqrt's peak), the least memory, chen-sqrt's and revolve's (c = ceil(log2 n)) peaks."""
    rows = []
    for depth in depths:
        begin = time.perf_counter()
        if depth in known:
            profile, analysis = known[depth]
            front = analysis["front"]
        else:
            profile = meta_profile(depth, rates)
            sqrt_peak = solve(profile, store_all_peak(profile), "chen-sqrt").predicted.peak_memory
            front = FineFront(profile, int(FINE_SPAN * sqrt_peak)).points
        base = profile.store_all_compute_ms
        forward = sum(s.forward_ms for s in profile.stages)
        p30 = least_memory_within(front, base, 0.30 * base)
        p1f = least_memory_within(front, base, forward)
        sqrt = solve(profile, store_all_peak(profile), "chen-sqrt")
        c = math.ceil(math.log2(profile.length))
        revolve = solve(profile, store_all_peak(profile), "revolve", checkpoints=c)
        rows.append(
            {
                "depth": depth,
                "n": profile.length,
                "store_all_bytes": store_all_peak(profile),
                "optimal_30pct_bytes": p30.peak_memory,
                "optimal_30pct_checkpoints": p30.checkpoints,
                "optimal_1fwd_bytes": p1f.peak_memory,
                "optimal_1fwd_checkpoints": p1f.checkpoints,
                "optimal_min_bytes": front[0].peak_memory,
                "optimal_min_extra_forwards": (front[0].compute_ms - base) / forward,
                "chen_sqrt_bytes": sqrt.predicted.peak_memory,
                "chen_sqrt_overhead_percent": pct(sqrt.predicted.compute_ms, base),
                "revolve_log2n_checkpoints": c,
                "revolve_log2n_bytes": revolve.predicted.peak_memory,
                "revolve_log2n_extra_forwards": (revolve.predicted.compute_ms - base) / forward,
                "seconds": time.perf_counter() - begin,
            }
        )
        r = rows[-1]
        print(
            f"  depth {depth:5d} n={r['n']:4d}: store-all {r['store_all_bytes'] / GB:7.2f} GB, "
            f"+30% {r['optimal_30pct_bytes'] / GB:6.2f} GB, 1 fwd {r['optimal_1fwd_bytes'] / GB:6.2f} GB, "
            f"min {r['optimal_min_bytes'] / GB:6.2f} GB, revolve(c={c}) {r['revolve_log2n_bytes'] / GB:6.2f} GB "
            f"({r['seconds']:.0f} s)",
            flush=True,
        )
    return rows


def gb_ticks(axis, ticks: list[float]) -> None:
    """Plain numbers at these ticks of a log axis (not 10^k)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(ScalarFormatter())
    axis.set_minor_formatter(NullFormatter())


def plot_front(analysis: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = analysis["store_all_ms"]
    front = analysis["front"]
    fig, ax = plt.subplots(figsize=(9.5, 5.6), dpi=120)
    xs = [p.peak_memory / GB for p in front]
    ys = [pct(p.compute_ms, base) for p in front]
    ax.step(xs, ys, where="post", color="tab:blue", lw=2, label=f"optimal DP front ({len(front)} points)", zorder=3)
    styles = {
        "store-all": ("s", "black"),
        "chen-sqrt (remat)": ("o", "tab:red"),
        "optimal at chen-sqrt's memory": ("^", "tab:green"),
        "optimal at +30%": ("D", "tab:purple"),
        "optimal at 1 extra forward": ("v", "tab:orange"),
        "optimal, minimum memory": ("P", "tab:brown"),
        "optimal at revolve's memory": ("h", "tab:olive"),
        "optimal at chen-sqrt's overhead": ("<", "tab:pink"),
    }
    for row in analysis["rows"]:
        marker, color = styles.get(row["row"], ("X", "tab:cyan"))
        ax.plot(
            [row["peak_gb"]],
            [row["overhead_percent"]],
            marker=marker,
            color=color,
            markersize=9,
            ls="none",
            markeredgecolor="black",
            label=f"{row['row']}: {row['peak_gb']:.2f} GB, +{row['overhead_percent']:.0f}%",
            zorder=4,
        )
    ax.plot(
        [PAPER["store_all_gb"]],
        [0],
        marker="s",
        mfc="none",
        mec="black",
        ms=11,
        ls="none",
        label="paper: store-all 48 GB (MXNet, total)",
    )
    ax.plot(
        [PAPER["sqrt_gb"]],
        [PAPER["sqrt_overhead_percent"]],
        marker="o",
        mfc="none",
        mec="tab:red",
        ms=11,
        mew=2,
        ls="none",
        label="paper: sqrt(n) plan 7 GB, +30%",
    )
    ax.set_xscale("log")
    gb_ticks(ax.xaxis, [0.5, 1, 2, 5, 10, 20, 50])
    ax.set_xlabel("peak memory (GB, log scale; activations + saved tensors + gradients of activations)")
    ax.set_ylabel("step time overhead over store-all (%)")
    ax.set_title(
        f"Pre-activation ResNet-{DEPTH}, batch {BATCH}, 224x224, fp32: n = {analysis['n']} stages (meta-device profile)"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_depth(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(8.5, 5.6), dpi=120)
    series = [
        ("store_all_bytes", "store-all", "s", "black"),
        ("optimal_30pct_bytes", "optimal at +30% step time", "D", "tab:purple"),
        ("optimal_1fwd_bytes", "optimal at 1 extra forward", "v", "tab:orange"),
        ("chen_sqrt_bytes", "chen-sqrt (about 1 extra forward)", "o", "tab:red"),
        ("revolve_log2n_bytes", "revolve, c = ceil(log2 n) checkpoints", "X", "tab:cyan"),
        ("optimal_min_bytes", "optimal, minimum memory", "P", "tab:brown"),
    ]
    for key, label, marker, color in series:
        ax.plot(ns, [r[key] / GB for r in rows], marker=marker, color=color, label=label, lw=1.5)
    grid = [ns[0] * (ns[-1] / ns[0]) ** (i / 50) for i in range(51)]
    first = rows[-1]  # reference lines through the deepest network's points: slopes compare at large n
    for key, label, fn, style in (
        ("store_all_bytes", "∝ n", lambda n: n, ":"),
        ("optimal_1fwd_bytes", "∝ √n", math.sqrt, "--"),
        ("revolve_log2n_bytes", "∝ log n", math.log, "-."),
    ):
        c = first[key] / GB / fn(first["n"])
        ax.plot(grid, [c * fn(n) for n in grid], color="gray", ls=style, lw=1, label=f"reference {label}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    gb_ticks(ax.xaxis, [20, 50, 100, 200, 335])
    gb_ticks(ax.yaxis, [0.5, 1, 2, 5, 10, 20, 50])
    ax.set_xlabel("chain length n (stages = blocks + 2; depth 50 .. 1001 layers)")
    ax.set_ylabel("peak memory (GB, log scale)")
    ax.set_title(f"Pre-activation ResNets, batch {BATCH}: memory vs depth (optimal DP)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def fmt_table(rows: list[dict]) -> str:
    lines = [
        f"{'schedule':36s} {'peak GB':>9s} {'overhead':>9s} {'extra fwd':>9s} {'ckpts':>6s}  paper",
        "-" * 100,
    ]
    for r in rows:
        lines.append(
            f"{r['row']:36s} {r['peak_gb']:9.2f} {r['overhead_percent']:8.1f}% {r['extra_forwards']:9.2f} "
            f"{str(r['checkpoints']):>6s}  {r['paper'] or ''}"
        )
    return "\n".join(lines)


def kind_rates(raw: dict) -> dict[str, KindRate]:
    """The rates a profile's metadata keeps (``KindRate.to_dict`` of each kind), as KindRates."""
    return {
        k: KindRate(
            v["forward_flop_per_ms"],
            v["backward_flop_per_ms"],
            v["measured_forward_ms"],
            v["measured_backward_ms"],
            v["forward_flops"],
            v["backward_flops"],
            v["stages_averaged"],
        )
        for k, v in raw.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--reuse-profile",
        action="store_true",
        help="load examples/preact_resnet1001_b32.json (and its rates) instead of re-measuring",
    )
    parser.add_argument("--depths", default="50,101,200,401,701,1001")
    parser.add_argument("--slots", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3, help="store-all steps timed per rate measurement")
    parser.add_argument("--plots-only", action="store_true", help="redraw the two PNGs from the results JSON")
    parser.add_argument(
        "--resize-profile",
        action="store_true",
        help="re-measure the backward_overhead of examples/preact_resnet1001_b32.json on meta (every "
        "other field kept) and stop",
    )
    common.add_quick(parser, "depth 50 on meta with the stored profile's rates: the table and its depth row")
    common.add_out(parser, "chen2016")
    args = parser.parse_args()
    if args.quick:
        quick_main(common.out_path(args, "chen2016"), args.slots)
        return
    if args.resize_profile:
        old = load_profile(PROFILE_PATH)
        rates, measured = (kind_rates(old.metadata[key]) for key in ("rates_flop_per_ms", "measured_rates_per_kind"))
        fresh = meta_profile(DEPTH, rates, name=old.name, measured=measured)
        # only the backward transients (their meaning changed with the early release, docs/model.md);
        # every other field as the file has it, so the profile's other numbers stay those of its run
        stages = tuple(
            dataclasses.replace(s, backward_overhead=f.backward_overhead)
            for s, f in zip(old.stages, fresh.stages, strict=True)
        )
        changed = sum(a != b for a, b in zip(old.stages, stages, strict=True))
        save_profile(dataclasses.replace(old, stages=stages), PROFILE_PATH)
        where = PROFILE_PATH.relative_to(ROOT)
        print(f"re-profiled {where}: backward_overhead of {changed} of {old.length} stages changed")
        return
    if args.plots_only:
        import json

        data = json.loads(RESULTS_PATH.read_text())
        front = [FrontPoint(**p) for p in data["front"]]
        analysis = {
            "store_all_ms": data["store_all_ms"],
            "front": front,
            "rows": data["table"],
            "n": data.get("n", 335),
        }
        plot_front(analysis, FRONT_PNG)
        plot_depth(data["depth_sweep"], DEPTH_PNG)
        return
    started = time.perf_counter()
    timings = {}

    if args.reuse_profile and PROFILE_PATH.exists():
        profile = load_profile(PROFILE_PATH)
        rates = kind_rates(profile.metadata["rates_flop_per_ms"])
        print(f"reused {PROFILE_PATH.relative_to(ROOT)}", flush=True)
    else:
        begin = time.perf_counter()
        measured = measure_block_rates(args.repeats)
        rates = pool_block_rates(measured)
        timings["measure_rates_s"] = time.perf_counter() - begin
        print(f"rates measured in {timings['measure_rates_s']:.0f} s (batch {RATE_BATCH}, CPU):", flush=True)
        for kind, rate in list(measured.items()) + [("blocks pooled", rates["layer3.rest"])]:
            print(
                f"  {kind:13s} fwd {rate.forward_flop_per_ms / 1e6:5.2f} GFLOP/s  "
                f"bwd {rate.backward_flop_per_ms / 1e6:5.2f} GFLOP/s",
                flush=True,
            )
        begin = time.perf_counter()
        profile = meta_profile(DEPTH, rates, name=f"preact-resnet{DEPTH}-b{BATCH}", measured=measured)
        timings["meta_profile_s"] = time.perf_counter() - begin
        save_profile(profile, PROFILE_PATH)
        print(
            f"profiled depth {DEPTH} on meta in {timings['meta_profile_s']:.0f} s -> {PROFILE_PATH.relative_to(ROOT)} "
            f"({PROFILE_PATH.stat().st_size / 1e3:.0f} kB)",
            flush=True,
        )

    begin = time.perf_counter()
    analysis = analyse(profile, args.slots)
    timings["analysis_s"] = time.perf_counter() - begin
    timings["optimal_front_store_all_table_s"] = analysis["coarse_front_seconds"]
    timings["optimal_front_fine_table_s"] = analysis["fine_front_seconds"]
    print(
        f"\nResNet-{DEPTH} (pre-activation, bottleneck), batch {BATCH}, 224x224, fp32; n = {analysis['n']} stages; "
        f"store-all step {analysis['store_all_ms'] / 1e3:.0f} s estimated for this CPU, "
        f"one forward {analysis['forward_ms'] / 1e3:.0f} s"
    )
    print(fmt_table(analysis["rows"]))
    print(
        f"(front: {len(analysis['front'])} points; store-all table ({args.slots} slots) "
        f"{analysis['coarse_front_seconds']:.0f} s, fine table ({analysis['fine_front_levels']} slots of "
        f"{FINE_SLOT} bytes) {analysis['fine_front_seconds']:.0f} s; "
        f"analysis {timings['analysis_s']:.0f} s)\n",
        flush=True,
    )
    plot_front(analysis, FRONT_PNG)

    begin = time.perf_counter()
    replay = replay_on_meta(profile, analysis["schedules"])
    timings["meta_replay_s"] = time.perf_counter() - begin

    depths = [int(d) for d in args.depths.split(",") if d]
    begin = time.perf_counter()
    sweep = depth_sweep(depths, rates, {DEPTH: (profile, analysis)})
    timings["depth_sweep_s"] = time.perf_counter() - begin
    plot_depth(sweep, DEPTH_PNG)
    timings["total_s"] = time.perf_counter() - started
    print(f"\ntotal {timings['total_s']:.0f} s (shared 2-core machine)")

    write_json(
        {
            "benchmark": "chen2016",
            "machine": common.machine("shared machine (2 cores, several sessions): measured rates are noisy"),
            "model": {
                "name": f"pre-activation bottleneck ResNet-{DEPTH}",
                "blocks_per_stage": list(blocks_for_depth(DEPTH)),
                "widths": [256, 512, 1024, 2048],
                "batch": BATCH,
                "image": [3, 224, 224],
                "dtype": "float32",
                "profile": str(PROFILE_PATH.relative_to(ROOT)),
                "profile_sha256": profile.sha256,
            },
            "paper": PAPER,
            "slots": args.slots,
            "fine_slot_bytes": FINE_SLOT,
            "fine_front_slots": analysis["fine_front_levels"],
            "n": analysis["n"],
            "store_all_ms": analysis["store_all_ms"],
            "forward_ms": analysis["forward_ms"],
            "table": analysis["rows"],
            "front": [p.to_dict() for p in analysis["front"]],
            "meta_replay": replay,
            "depth_sweep": sweep,
            "timings_s": timings,
        },
        common.out_path(args, "chen2016"),
    )
    print(f"wrote {common.out_path(args, 'chen2016')}, {FRONT_PNG.relative_to(ROOT)}, {DEPTH_PNG.relative_to(ROOT)}")


def quick_main(out: Path, slots: int) -> None:
    """The quick form: depth 50 on meta with the rates measured for the stored depth-1001 profile,
    its table and depth row; no measurement, no meta replay, no plot."""
    rates = kind_rates(load_profile(PROFILE_PATH).metadata["rates_flop_per_ms"])
    profile = meta_profile(50, rates)
    analysis = analyse(profile, slots)
    print(fmt_table(analysis["rows"]))
    sweep = depth_sweep([50], rates, {50: (profile, analysis)})
    write_json({"benchmark": "chen2016", "quick": True, "machine": common.machine(), "n": analysis["n"],
                "table": analysis["rows"], "depth_sweep": sweep}, out)  # fmt: skip
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
