"""``remat plan`` and ``remat profile --meta`` on meta tensors: any model remat.checkpoint takes
(a Hugging Face config, your own), cut by remat.checkpoint's traced cut, every layer planned."""

from __future__ import annotations

import json

import pytest

from remat.schedules import RematError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from remat.cli import main  # noqa: E402
from remat.measure.allocator import AllocatorMeter  # noqa: E402
from remat.profile.batch import chain_profiler  # noqa: E402

CPU = torch.device("cpu")
# a 2-layer Llama, as a Hugging Face config.json names it
TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 344,
    "vocab_size": 1000,
}
LLAMA = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}


def _plan(tmp_path, memory: int, *extra: str) -> list[str]:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    return ["plan", "--model", "transformers:llama", "--config", str(config), "--input-dtype", "int64",
            "--input-shape", "1,64", "--vary", "dim=1", "--points", "64,128,192", "--memory", str(memory),
            "--fixed-bytes", "0", *extra]  # fmt: skip


def _meta_llama(seq: int):
    return chain_profiler("transformers:llama", (1, seq), 1, "meta", torch.float32, None, config=dict(LLAMA),
                          input_dtype=torch.int64)  # fmt: skip


@pytest.mark.slow
def test_plan_on_a_hugging_face_config_on_meta_writes_a_schedule(tmp_path, capsys) -> None:
    """Before: 'cannot cut a LlamaForCausalLM into a chain of stages'. The step is the LM's own loss
    on labels (its last stage ends in the loss), cut from the traced step, not proven on meta."""
    schedule, profile = tmp_path / "s.json", tmp_path / "p.json"
    store_all = sum(s.saved_size for s in _meta_llama(64)(64).stages)  # what every token costs, about
    args = _plan(tmp_path, 4 * store_all, "--max-overhead", "30%", "-o", str(schedule), "--save-profile", str(profile))
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "traced (TorchDynamo)" in out and "not proven" in out and "times from FLOPs" in out
    planned = next(line for line in out.splitlines() if line.startswith("optimal")).split()[1]
    assert int(planned) > 64
    saved = json.loads(profile.read_text())
    names = [s["name"] for s in saved["stages"]]
    assert names[0] == "model.embed_tokens" and "model.layers.1" in names and names[-1].endswith("loss")
    assert saved["metadata"]["device_type"] == "meta" and "not proven" in saved["metadata"]["cut"]
    assert json.loads(schedule.read_text())["ops"]


@pytest.mark.slow
def test_a_meta_plan_allocates_no_activation_memory() -> None:
    """The profiles are of meta tensors: the CPU allocator sees a small part of what they count."""
    profile_at = _meta_llama(512)
    with AllocatorMeter(CPU) as meter:
        profile = profile_at(512)
    counted = profile.input_size + sum(s.saved_size for s in profile.stages)
    assert profile.metadata["device_type"] == "meta"
    assert meter.peak_bytes < counted / 20, (meter.peak_bytes, counted)


@pytest.mark.slow
def test_meta_profiles_of_a_llama_are_the_cpu_ones_to_the_byte_and_its_plan_replays_within_2_percent() -> None:
    """The same traced cut on meta and on the CPU (proven there): equal stages, equal sizes (the
    attention kernel is the CPU's, NOTE [Attention kernels on meta]); a schedule solved on the meta
    profile replays on the CPU at its predicted peak, within 2%."""
    from remat.models.hub import build_library_model
    from remat.replay.chain import RematChain
    from remat.replay.report import measure_steps
    from remat.schedules import simulate
    from remat.solver import solve
    from remat.solver.chain.store_all import store_all_peak
    from remat.trace.proof import cut_model

    seq = 64
    meta = _meta_llama(seq)(seq)
    real = chain_profiler("transformers:llama", (1, seq), 1, "measured", torch.float32, CPU, config=dict(LLAMA),
                          input_dtype=torch.int64)(seq)  # fmt: skip
    assert [s.name for s in meta.stages] == [s.name for s in real.stages]
    assert [m for m in mismatches_at(meta, real) if "_ms" not in m] == []
    torch.manual_seed(0)
    model = build_library_model("transformers:llama", dict(LLAMA)).train()
    ids = torch.randint(0, LLAMA["vocab_size"], (1, seq))
    chain = cut_model(model, (), {"input_ids": ids, "labels": ids})
    assert chain.names == [s.name for s in meta.stages]
    budget = (store_all_peak(meta) + solve(meta, store_all_peak(meta), "recompute-all").predicted.peak_memory) // 2
    schedule = solve(meta, budget, "optimal")
    predicted = simulate(meta, schedule.ops).peak_memory
    assert predicted < store_all_peak(meta)  # it recomputes
    a0 = chain.bind(input_ids=ids, labels=ids)
    measured = measure_steps(RematChain(chain, schedule.ops), a0, steps=1, timed=False, kind="auto").peak_memory
    assert abs(measured - predicted) <= 0.02 * predicted, (measured, predicted)


def mismatches_at(meta, real) -> list[str]:
    """Every size field that differs between two profiles of the same chain (``stage.field``)."""
    fields = ("output_size", "saved_size", "forward_overhead", "forward_nograd_overhead", "backward_overhead")
    out = [] if meta.input_size == real.input_size else ["input_size"]
    for m, r in zip(meta.stages, real.stages, strict=True):
        out += [f"{m.name}.{f}" for f in fields if getattr(m, f) != getattr(r, f)]
    return out


@pytest.mark.slow
def test_plan_plans_the_stem_of_a_residual_mlp(tmp_path, capsys) -> None:
    """Before: the name hint cut ``blocks`` and ``head`` and left ``stem`` out, silently."""
    from remat.trace.chain import as_chain
    from tests.cli.plan_models import stem_mlp

    model = stem_mlp()
    with pytest.raises(RematError, match="cannot cut a StemMLP"):
        as_chain(model)  # the hint no longer applies: the traced cut does
    profile = tmp_path / "p.json"
    args = ["plan", "--model", "tests.cli.plan_models:stem_mlp", "--input-shape", "4,32", "--memory", "1MB"]
    assert main([*args, "--save-profile", str(profile)]) == 0
    stages = json.loads(profile.read_text())["stages"]
    assert [s["name"] for s in stages][0] == "stem"
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    assert sum(s["param_size"] for s in stages) == params  # every layer is in the plan


@pytest.mark.slow
def test_profile_meta_writes_a_meta_profile_of_a_library_model(tmp_path, capsys) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    out = tmp_path / "p.json"
    args = ["profile", "--meta", "--model", "transformers:llama", "--config", str(config), "--input-dtype", "int64"]
    assert main([*args, "--input-shape", "2,32", "-o", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["metadata"]["device_type"] == "meta" and saved["metadata"]["input_shape"] == [2, 32]
    assert saved["stages"][-1]["name"].endswith("loss")
    assert main([*args, "--input-shape", "2,32", "-o", str(out), "--device", "cpu"]) == 2
    assert "--device" in capsys.readouterr().err


def test_a_config_file_for_another_model_type_is_one_line(tmp_path, capsys) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY_LLAMA, "model_type": "gpt2"}))
    assert main(["plan", "--model", "transformers:llama", "--config", str(config), "--input-dtype", "int64",
                 "--input-shape", "1,8", "--memory", "1MB"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "model type 'gpt2'" in err and "\n" not in err


@pytest.mark.slow
def test_plan_in_python_answers_what_the_command_answers(tmp_path, capsys) -> None:
    """``remat.cli.plan.plan(factory, example on meta, memory=...)``: the same cut and answer as the CLI."""
    from remat.cli.plan import plan
    from remat.models.hub import build_library_model

    memory = 4 * sum(s.saved_size for s in _meta_llama(64)(64).stages)
    assert main(_plan(tmp_path, memory, "--max-overhead", "30%")) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("optimal"))
    ids = torch.empty((1, 64), dtype=torch.int64, device="meta")
    result = plan(
        lambda: build_library_model("transformers:llama", dict(LLAMA)),
        {"input_ids": ids, "labels": ids},
        memory,
        vary=1,
        max_overhead="30%",
        fixed_bytes=0,
        points=[64, 128, 192],
    )
    assert result.size == int(line.split()[1]) and result.size > 64
    assert result.profile().metadata["device_type"] == "meta"
    with pytest.raises(RematError, match="runs on meta"):
        plan(torch.nn.Linear(4, 4), torch.empty(2, 4, device="meta"), memory)


@pytest.mark.slow
def test_a_meta_plan_of_a_small_vit_replays_with_remat_execute_within_2_percent(tmp_path, capsys) -> None:
    """ViT-H/14's family at test size: planned on meta, the schedule replayed by ``remat execute``
    on the CPU (which cuts a model no name hint applies to the same way) at its predicted peak."""
    schedule, report = tmp_path / "s.json", tmp_path / "r.json"
    model = ["--model", "timm:vit_tiny_patch16_224", "--config",
             "img_size=32,patch_size=4,depth=2,embed_dim=64,num_heads=2,num_classes=10"]  # fmt: skip
    store_all = sum(s.saved_size for s in chain_profiler(model[1], (4, 3, 32, 32), 0, "meta", torch.float32, None,
                    config={"img_size": 32, "patch_size": 4, "depth": 2, "embed_dim": 64, "num_heads": 2,
                            "num_classes": 10})(4).stages)  # fmt: skip
    args = ["plan", *model, "--input-shape", "4,3,32,32", "--memory", str(2 * store_all), "--fixed-bytes", "0"]
    assert main([*args, "--max-overhead", "30%", "-o", str(schedule)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("optimal"))
    batch = int(line.split()[1])
    run = ["execute", *model, "--input-shape", f"{batch},3,32,32", "--device", "cpu", "--schedule", str(schedule)]
    assert main([*run, "--steps", "1", "--json", str(report)]) == 0
    predicted = json.loads(schedule.read_text())["predicted"]["peak_memory"]  # solved on the meta profile
    measured = json.loads(report.read_text())["peak_memory"]["measured"]
    assert abs(measured - predicted) <= 0.02 * predicted, (measured, predicted)
