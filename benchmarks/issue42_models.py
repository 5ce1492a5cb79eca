"""remat on issue 42's architectures: the columns of benchmarks/real_models.py, and bf16 autocast.

    python -m benchmarks.issue42_models [--only clip,mamba] [--runs 3] [--merge PARTIAL] [--out PATH]

One row per architecture of issue 42's classes, small configs of library models (random weights)
and hand-built nets: a two-tower contrastive model (CLIP, SigLIP), an encoder-decoder speech model
(Whisper), a masked autoencoder (ViTMAE), a segmentation model (SegFormer; torchvision's LR-ASPP
with a pixel-wise loss on the labels), a state-space model (Mamba, its default config), a CTC model
(Wav2Vec2ForCTC with ``labels``, which puts ``F.ctc_loss`` inside its forward, and called without
them, the loss passed as ``loss=``), a net of custom ``torch.autograd.Function`` blocks, and GPT-2
with the user's own ``gradient_checkpointing_enable()`` on. The fp32 columns are
benchmarks/real_models.py's, measured by its functions: store-all vs the plain step, predicted vs
measured below store-all, fp32 gradients ``torch.equal``, at the baseline's peak, least memory
against the baseline's, and the worst peak error over ``--runs`` fresh profiles run quiet (no load
added; the machine is shared with other sessions) and as many beside two busy processes. The
baseline is Hugging Face's per-layer checkpointing where the model has it, the model as the user
has it for the row with its own checkpointing on, else ``torch.utils.checkpoint`` around each
block of the cut.

The bf16 column: the model cut inside ``torch.autocast("cpu", dtype=torch.bfloat16)`` (as
benchmarks/autocast_models.py), predicted vs measured at half the store-all peak (or halfway from
the least) and at the least budget, remat's loss and gradients ``torch.equal`` to plain autocast
training at both, and whether the per-block baseline's are. Writes
benchmarks/results/issue42_models.json (``--out``; with the machine) and, on a full run, the table
into docs/models.md between its marker comments; an ``--only`` run writes a partial file (a
temporary folder unless ``--out``), which ``--merge PARTIAL`` puts into the full run's rows.
``--quick``: the custom-Function row, no error column.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import remat
from benchmarks import autocast_models, common, real_models  # Case, the cells, the baselines
from remat.models.compat import import_torchvision
from remat.schedules import RematError

BEGIN, END = "<!-- issue42_models:begin -->", "<!-- issue42_models:end -->"


@dataclass(frozen=True)
class Arch:
    """One row: how to build the model, its example call, and its loss when it is not the model's own."""

    build: Callable[[], nn.Module]
    inputs: dict
    config: str  # what the table's header says about it
    loss: Callable[..., torch.Tensor] | None = None  # loss(output, target); None: the model's ``.loss``
    target: Any = None
    baseline: str = "auto"  # "auto" (real_models.baseline), "as-is" (the model's own checkpointing)
    bf16: bool = True
    extra: dict = field(default_factory=dict)


class ArchCase(real_models.Case):
    """real_models.Case for an :class:`Arch`: keyword inputs, a loss passed as ``loss=`` or the model's own."""

    def __init__(self, arch: Arch) -> None:  # noqa: D107 - Case's fields, built from arch
        torch.manual_seed(0)
        self.model = arch.build().train()
        self.inputs, self.args, self.kwargs = arch.inputs, (), dict(arch.inputs)
        self.loss, self.target, self.image_model = arch.loss, arch.target, arch.loss is not None
        self.buffers = [b.detach().clone() for b in self.model.buffers()]

    def plain(self) -> torch.Tensor:
        out = self.model(**self.kwargs)
        return self.loss(out, self.target) if self.loss is not None else out.loss

    def remat_step(self, wrapped: remat.RematModel) -> Callable[[], torch.Tensor]:
        if self.loss is not None:
            return lambda: wrapped(**self.kwargs, target=self.target)
        return lambda: wrapped(**self.kwargs).loss

    def checkpoint(self) -> remat.RematModel:
        return remat.checkpoint(
            self.model, self.inputs, budget=1.0, loss=self.loss, target=self.target, over_budget="least"
        )


def _transformers() -> Any:
    import_torchvision()  # before transformers (remat.models.compat)
    import transformers

    return transformers


def _ids(vocab: int, batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def _randn(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


TOWER = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4}


def clip() -> Arch:
    t = _transformers()
    text, vision = {**TOWER, "vocab_size": 1000, "max_position_embeddings": 32}, {**TOWER, "image_size": 64,
                                                                                    "patch_size": 8}  # fmt: skip
    config = t.CLIPConfig(text_config=text, vision_config=vision, projection_dim=32)
    inputs = {"input_ids": _ids(1000, 8, 16), "pixel_values": _randn(8, 3, 64, 64), "return_loss": True}
    return Arch(lambda: t.CLIPModel(config), inputs, f"text {text}, vision {vision}, batch 8")


def siglip() -> Arch:
    t = _transformers()
    text, vision = {**TOWER, "vocab_size": 1000, "max_position_embeddings": 16}, {**TOWER, "image_size": 64,
                                                                                    "patch_size": 8}  # fmt: skip
    config = t.SiglipConfig(text_config=text, vision_config=vision)
    inputs = {"input_ids": _ids(1000, 8, 16), "pixel_values": _randn(8, 3, 64, 64), "return_loss": True}
    return Arch(lambda: t.SiglipModel(config), inputs, f"text {text}, vision {vision}, batch 8")


def whisper() -> Arch:
    t = _transformers()
    fields = {"d_model": 64, "encoder_layers": 4, "decoder_layers": 4, "encoder_attention_heads": 4,
              "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "num_mel_bins": 16,
              "max_source_positions": 64, "max_target_positions": 32, "vocab_size": 500}  # fmt: skip
    # token ids inside the small vocabulary (the defaults are the 51865-token vocabulary's)
    ids = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1}
    config = t.WhisperConfig(**fields, **ids, use_cache=False)
    inputs = {"input_features": _randn(2, 16, 128), "labels": _ids(500, 2, 16)}
    return Arch(lambda: t.WhisperForConditionalGeneration(config), inputs, f"{fields}, batch 2, 128 frames")


def vit_mae() -> Arch:
    t = _transformers()
    fields = {**TOWER, "image_size": 64, "patch_size": 8, "decoder_hidden_size": 64,
              "decoder_num_hidden_layers": 2, "decoder_num_attention_heads": 4,
              "decoder_intermediate_size": 128}  # fmt: skip
    config = t.ViTMAEConfig(**fields)
    inputs = {"pixel_values": _randn(8, 3, 64, 64)}
    return Arch(lambda: t.ViTMAEForPreTraining(config), inputs, f"{fields}, mask ratio 0.75, batch 8")


def segformer() -> Arch:
    t = _transformers()
    fields = {"num_labels": 5, "hidden_sizes": [16, 32, 64, 128], "depths": [2, 2, 2, 2],
              "decoder_hidden_size": 64, "num_attention_heads": [1, 2, 4, 8]}  # fmt: skip
    config = t.SegformerConfig(**fields)
    labels = torch.randint(0, 5, (2, 64, 64), generator=torch.Generator().manual_seed(2))
    inputs = {"pixel_values": _randn(2, 3, 64, 64), "labels": labels}
    return Arch(lambda: t.SegformerForSemanticSegmentation(config), inputs, f"{fields}, batch 2, 64x64")


def _pixel_loss(out: dict, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out["out"], labels)


def lraspp() -> Arch:
    import_torchvision()
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    labels = torch.randint(0, 5, (2, 64, 64), generator=torch.Generator().manual_seed(2))
    return Arch(lambda: lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=5),
                {"input": _randn(2, 3, 64, 64)}, "num_classes 5, batch 2, 64x64, pixel-wise cross-entropy",
                loss=_pixel_loss, target=labels)  # fmt: skip


def mamba() -> Arch:
    t = _transformers()
    fields = {"vocab_size": 1000, "hidden_size": 64, "state_size": 8, "num_hidden_layers": 4, "expand": 2}
    config = t.MambaConfig(**fields, use_cache=False)  # default config: use_associative_scan on
    ids = _ids(1000, 2, 64)
    return Arch(lambda: t.MambaForCausalLM(config), {"input_ids": ids, "labels": ids}, f"{fields}, batch 2, 64")


WAV2VEC2 = {
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "conv_dim": (32, 32, 32),
    "conv_stride": (5, 2, 2),
    "conv_kernel": (10, 3, 3),
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 4,
    "vocab_size": 32,
    "mask_time_prob": 0.0,
    "layerdrop": 0.0,
}  # SpecAugment's masks come from numpy's RNG, LayerDrop branches on torch.rand([]): both off


def _wav2vec2() -> nn.Module:
    t = _transformers()
    return t.Wav2Vec2ForCTC(t.Wav2Vec2Config(**WAV2VEC2))


CTC_LABELS = torch.randint(1, 32, (2, 12), generator=torch.Generator().manual_seed(2))


def _ctc(out: Any, labels: torch.Tensor) -> torch.Tensor:
    """Wav2Vec2ForCTC's own loss, on its logits (blank 0, every frame and label counted, mean reduction)."""
    log_probs = F.log_softmax(out.logits, dim=-1, dtype=torch.float32).transpose(0, 1)
    frames = torch.full((log_probs.shape[1],), log_probs.shape[0], dtype=torch.long)
    lengths = torch.full((labels.shape[0],), labels.shape[1], dtype=torch.long)
    return F.ctc_loss(log_probs, labels, frames, lengths, blank=0, zero_infinity=False)


def wav2vec2_labels() -> Arch:
    return Arch(_wav2vec2, {"input_values": _randn(2, 3200), "labels": CTC_LABELS},
                f"{WAV2VEC2}, batch 2, 3200 samples, labels= (the CTC loss in forward)", bf16=False)  # fmt: skip


def wav2vec2_ctc() -> Arch:
    return Arch(_wav2vec2, {"input_values": _randn(2, 3200)},
                f"{WAV2VEC2}, batch 2, 3200 samples, loss=F.ctc_loss on the logits", loss=_ctc,
                target=CTC_LABELS, bf16=False)  # fmt: skip


def _wav2vec2_frozen() -> nn.Module:
    model = _wav2vec2()
    # HF's CTC fine-tuning recipe: the conv feature encoder frozen, so its forward no longer sets
    # requires_grad on the waveform (a graph break: setattr() on Tensor.requires_grad)
    model.freeze_feature_encoder()
    return model


def wav2vec2_ctc_frozen() -> Arch:
    return Arch(_wav2vec2_frozen, {"input_values": _randn(2, 3200)},
                f"{WAV2VEC2}, freeze_feature_encoder(), batch 2, 3200 samples, loss=F.ctc_loss on the logits",
                loss=_ctc, target=CTC_LABELS)  # fmt: skip


class Swish(torch.autograd.Function):
    """The memory-efficient Swish: saves its input only, recomputes the sigmoid in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * s * (1 + x * (1 - s))


class SwishBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Swish.apply(self.linear(x))


def swish_net() -> Arch:
    width, depth = 256, 8
    build = lambda: nn.Sequential(*(SwishBlock(width) for _ in range(depth)), nn.Linear(width, 10))  # noqa: E731
    target = torch.randint(0, 10, (512,), generator=torch.Generator().manual_seed(2))
    return Arch(build, {"input": _randn(512, width)}, f"{depth} x (Linear {width} -> Swish Function), batch 512",
                loss=F.cross_entropy, target=target)  # fmt: skip


def gpt2_user_checkpointing() -> Arch:
    def build() -> nn.Module:
        model = real_models.build_library_model("transformers:gpt2", dict(GPT2))
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model

    ids = _ids(1000, 2, 64)
    return Arch(build, {"input_ids": ids, "labels": ids}, f"{GPT2}, gradient_checkpointing_enable(), batch 2, 64",
                baseline="as-is")  # fmt: skip


GPT2 = {"n_layer": 6, "n_embd": 64, "n_head": 4, "vocab_size": 1000}
ARCHS: dict[str, Callable[[], Arch]] = {
    "clip": clip,
    "siglip": siglip,
    "whisper": whisper,
    "vit_mae": vit_mae,
    "segformer": segformer,
    "lraspp": lraspp,
    "mamba": mamba,
    "wav2vec2-ctc-labels": wav2vec2_labels,
    "wav2vec2-ctc": wav2vec2_ctc,
    "wav2vec2-ctc-frozen": wav2vec2_ctc_frozen,
    "swish-function": swish_net,
    "gpt2-user-checkpointing": gpt2_user_checkpointing,
}


def step_result(case: ArchCase, step: Callable[[], torch.Tensor], autocast: bool) -> list[torch.Tensor | None]:
    """The loss and every parameter gradient (None for a parameter without one: ViTMAE's fixed
    sin-cos tables, a frozen encoder) of one step, from the same buffers and RNG state, under bf16
    autocast (backward outside the region, as autocast_models.step_result) if asked."""
    case.reset()
    for p in case.model.parameters():
        p.grad = None
    torch.manual_seed(3)
    with autocast_models.bf16() if autocast else contextlib.nullcontext():
        loss = step()
    loss.backward()
    return [loss.detach().clone(), *(None if p.grad is None else p.grad.clone() for p in case.model.parameters())]


def equal(a: list[torch.Tensor | None], b: list[torch.Tensor | None]) -> bool:
    """Every loss and gradient ``torch.equal``, and the same parameters without one."""
    return all((x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
               for x, y in zip(a, b, strict=True))  # fmt: skip


def baseline(case: ArchCase, arch: Arch, names: list[str]) -> tuple[str, Callable]:
    if arch.baseline == "as-is":
        return "the model's own gradient_checkpointing_enable()", contextlib.nullcontext
    return real_models.baseline(case, names)


def bf16_cell(case: ArchCase, checkpointed: Callable) -> dict:
    """Cut inside bf16 autocast: predicted vs the allocator below store-all and at the least; the
    step (loss and gradients) ``torch.equal`` to plain autocast's, for remat and the baseline."""
    with autocast_models.bf16():
        store = case.checkpoint()
    half, least = real_models.below_store_all(store), store.with_budget(store.least_peak)
    cell: dict[str, Any] = {"stages": len(store.profile.stages), "fraction": half.budget / store.store_all_peak}
    for label, wrapped in (("half", half), ("least", least)):
        case.reset()
        cell[label] = real_models.attempt(lambda w=wrapped: autocast_models.peaks(w))
    plain = step_result(case, case.plain, autocast=True)
    for label, wrapped in (("half", half), ("least", least)):
        cell[f"equal_{label}"] = equal(step_result(case, case.remat_step(wrapped), autocast=True), plain)
    with checkpointed():
        cell["baseline_equal"] = equal(step_result(case, case.plain, autocast=True), plain)
    return cell


def measure(name: str, arch: Arch, runs: int) -> dict:
    """One row: real_models' cells on ``arch`` (a failing cell holds ``{"failed": reason}``) and bf16."""
    row: dict[str, Any] = {"model": name, "config": arch.config}
    try:
        case = ArchCase(arch)
        store = case.checkpoint()
    except Exception as error:  # noqa: BLE001 - a refused model is a row with its reason
        return {**row, "failed": real_models.one_line(error)}
    names, a0 = [s.name for s in store.profile.stages], store.profile.input_size
    row.update(stages=len(names), stage_names=names)
    row["store_all"] = real_models.attempt(lambda: real_models.store_all_cell(case, store, a0))
    label, checkpointed = baseline(case, arch, names)
    try:
        half = real_models.below_store_all(store)
    except RematError as error:
        return {**row, "half": {"failed": real_models.one_line(error)}}
    row["half"] = real_models.attempt(lambda: real_models.half_cell(half, store))
    row["fp32_grads_equal"] = real_models.attempt(
        lambda: {
            "equal": equal(
                step_result(case, case.plain, autocast=False), step_result(case, case.remat_step(half), autocast=False)
            )
        }
    )
    row["equal_memory"] = real_models.attempt(
        lambda: real_models.equal_memory_cell(case, store, a0, label, checkpointed)
    )
    baseline_peak = row["equal_memory"].get("baseline_peak")
    row["bf16_inside"] = real_models.attempt(lambda: bf16_cell(case, checkpointed)) if arch.bf16 else None
    row["errors"] = real_models.attempt(lambda: real_models.errors_cell(case, baseline_peak, runs)) if runs else None
    return row


def _bf16(c: dict) -> str:
    def peak(p: dict) -> str:
        return f"failed: {p['failed']}" if "failed" in p else f"{p['error']:+.2%}"

    same = "yes" if c["equal_half"] and c["equal_least"] else f"**no** ({c['equal_half']} / {c['equal_least']})"
    return (f"{c['stages']} stages; error {peak(c['half'])} at {c['fraction']:.0%}, {peak(c['least'])} at least; "
            f"equal: remat {same}, baseline {'yes' if c['baseline_equal'] else 'no'}")  # fmt: skip


def markdown(rows: list[dict]) -> str:
    """real_models' table for ``rows``, its bf16 column (an fp32 cut's max-abs difference) replaced
    by this benchmark's (cut inside autocast, exact or not) at the end."""
    table = []
    for line in real_models.markdown(rows).splitlines():
        cells = line.split("|")
        table.append("|".join(cells[:6] + cells[7:]))  # cells[6]: real_models' bf16 column
    table[0] += " bf16 autocast (cut inside): peak error below store-all / least; equal to plain autocast |"
    table[1] += "---|"
    for i, row in enumerate(rows, start=2):
        table[i] += f" {real_models._cell(row.get('bf16_inside'), _bf16).replace('|', '/')} |"
    return "\n".join(table)


def header(archs: dict[str, Arch]) -> str:
    configs = "; ".join(f"{name}: {arch.config}" for name, arch in archs.items())
    return (
        f"Configs (random weights): {configs}. Peaks: the CPU allocator's, as in the table above. "
        "Quiet runs: no load added by this run (the machine is shared with other sessions); loaded: "
        "beside two busy Python processes (`busy_processes`, as `shared/tools/loaded`). "
        "Step times: median of 5 steps after a warmup, 1 thread, noisy."
    )


def write_doc(table: str, note: str, doc: Path = real_models.DOC) -> None:
    """Put ``note`` and ``table`` between this benchmark's marker comments in ``doc``."""
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise RematError(f"{doc}: no {BEGIN} ... {END} markers to write the table between")
    before, rest = text.split(BEGIN, 1)
    doc.write_text(f"{before}{BEGIN}\n{note}\n\n{table}\n{END}{rest.split(END, 1)[1]}")


def merge(partial: Path, path: Path) -> None:
    """Put the rows of a partial run (``--only``) into the full run's results at ``path`` and its
    table, by name; a partial row's cell that is None (``--runs 0``: no error column) keeps the
    full run's."""
    full, part = json.loads(path.read_text()), json.loads(partial.read_text())
    newer = {row["model"]: row for row in part["rows"]}
    for i, row in enumerate(full["rows"]):
        if row["model"] in newer:
            update = {key: value for key, value in newer.pop(row["model"]).items() if value is not None}
            full["rows"][i] = {**row, **update, "rerun": part["machine"]}
    full["rows"] += [{**row, "rerun": part["machine"]} for row in newer.values()]
    order = {name: i for i, name in enumerate(ARCHS)}  # the table's order, whatever ran first
    full["rows"].sort(key=lambda row: order.get(row["model"], len(order)))
    common.write_result(full, path, indent=1, default=str)
    write_doc(markdown(full["rows"]), full["header"])
    print(f"merged {partial} into {path} and the table in {real_models.DOC}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated rows of: {', '.join(ARCHS)}")
    parser.add_argument("--runs", type=int, default=3, help="fresh profiles quiet and loaded (default 3; 0: no column)")
    parser.add_argument("--merge", type=Path, help="a partial run's JSON whose rows replace the full run's, by name")
    common.add_quick(parser, "the custom-Function row, no error column")
    common.add_out(parser, "issue42_models")
    args = parser.parse_args()
    if args.merge:
        return merge(args.merge, common.out_path(args, "issue42_models"))
    if args.quick:
        args.only, args.runs = "swish-function", 0
    if args.runs < 0:
        parser.error("--runs: must be 0 or more")
    wanted = args.only.split(",") if args.only else list(ARCHS)
    unknown = [name for name in wanted if name not in ARCHS]
    if unknown:
        parser.error(f"--only: unknown row {unknown[0]!r}; known: {', '.join(ARCHS)}")
    torch.set_num_threads(1)
    machine = common.machine(note="shared 2-core machine (other sessions' jobs beside it)")
    archs, rows = {name: ARCHS[name]() for name in wanted}, []
    for name, arch in archs.items():
        begin = time.perf_counter()
        rows.append({**measure(name, arch, args.runs), "seconds": round(time.perf_counter() - begin, 1)})
        print(json.dumps(rows[-1], default=str), flush=True)
    note, table = header(archs), markdown(rows)
    print(note + "\n\n" + table)
    out = common.out_path(args, "issue42_models")
    if args.only and args.out is None and not args.quick:  # a partial run is not the benchmark's result
        out = Path(tempfile.gettempdir()) / "remat-benchmarks" / "issue42_models_partial.json"
    common.write_result({"machine": machine, "header": note, "rows": rows}, out, indent=1, default=str)
    if not args.only:
        write_doc(table, note)
        print(f"wrote the table into {real_models.DOC}")


if __name__ == "__main__":
    main()
