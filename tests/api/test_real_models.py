"""Library models (Hugging Face, torchvision, timm) on small configs through the one-call API:
the cut is found from the traced forward, proven equal, and a replayed step below the store-all
budget gives gradients and BatchNorm statistics ``torch.equal`` to the plain model's step; under
bf16 autocast its gradients are as close to plain autocast training as per-block
``torch.utils.checkpoint``'s are (both exact here)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import pytest
import torch
import torch.utils.checkpoint
from torch import nn

import remat
from remat.models.compat import import_torchvision
from remat.models.hub import build_library_model, parse_config
from remat.schedules import RematError
from remat.trace.proof import cut_model

try:  # first: timm and transformers import torchvision (remat/models/compat.py)
    torchvision = import_torchvision()
except ModuleNotFoundError:
    pytest.skip("torchvision is not installed (.ci/run installs it)", allow_module_level=True)
transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")

VOCAB = 64


def _tokens(with_mask: bool = False, padded: bool = True) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (2, 8), generator=generator)
    inputs = {"input_ids": ids, "labels": torch.randint(0, VOCAB, (2, 8), generator=generator)}
    if with_mask:
        mask = torch.ones(2, 8, dtype=torch.long)
        if padded:
            mask[1, -2:] = 0
        inputs["attention_mask"] = mask
    return inputs


def gpt2() -> nn.Module:
    return build_library_model("transformers:gpt2", parse_config(f"n_layer=2,n_embd=32,n_head=2,vocab_size={VOCAB}"))


def llama() -> nn.Module:
    config = "num_hidden_layers=2,hidden_size=32,intermediate_size=64,num_attention_heads=4,num_key_value_heads=2"
    return build_library_model("transformers:llama", {**parse_config(config), "vocab_size": VOCAB})


def bert() -> nn.Module:
    config = "num_hidden_layers=2,hidden_size=32,intermediate_size=64,num_attention_heads=2,max_position_embeddings=16"
    return build_library_model("transformers:bert", {**parse_config(config), "vocab_size": VOCAB})


def tv_resnet50() -> nn.Module:  # resnet50's bottleneck layout, one block per layer
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10)


def vgg16_features() -> nn.Module:  # vgg16().features' layout (in-place ReLUs), narrower
    from torchvision.models.vgg import make_layers

    return nn.Sequential(make_layers([8, 8, 8, 8, "M", 16, 16, "M"]), nn.Flatten(), nn.Linear(16 * 8 * 8, 10))


def mobilenet_v3_large() -> nn.Module:  # its first four blocks (ReLU, squeeze-excite) and a hard-swish one
    from torchvision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3, _mobilenet_v3_conf

    blocks, _ = _mobilenet_v3_conf("mobilenet_v3_large", width_mult=0.25)
    last = InvertedResidualConfig(blocks[3].out_channels, 3, 32, 16, True, "HS", 1, 1, 1.0)
    return MobileNetV3([*blocks[:4], last], last_channel=64, num_classes=10)


def densenet121() -> nn.Module:  # densenet121's code (in-place stem ReLU), two small blocks
    from torchvision.models.densenet import DenseNet

    return DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, num_classes=10)


def vit_b_16() -> nn.Module:
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=32, patch_size=4, num_layers=4, num_heads=2, hidden_dim=32, mlp_dim=64)


def timm_resnet50() -> nn.Module:  # timm's ResNet (stem activation named act1), bottleneck blocks
    from timm.models.resnet import Bottleneck, ResNet

    return ResNet(block=Bottleneck, layers=(1, 1, 1, 1), num_classes=10)


IMAGE = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
TARGET = torch.tensor([1, 7])

# name: (factory, example inputs, loss or None, stages the cut must contain)
CASES: dict[str, tuple[Callable[[], nn.Module], dict | torch.Tensor, bool, tuple[str, ...]]] = {
    "gpt2": (gpt2, _tokens(), False, ("transformer.h.0", "transformer.h.1")),
    # no padded token: eager skips the causal mask and runs SDPA with enable_gqa (remat/trace/branches.py)
    "llama": (llama, _tokens(with_mask=True, padded=False), False, ("model.layers.0", "model.layers.1")),
    "bert": (bert, _tokens(with_mask=True), False, ("bert.encoder.layer.0", "bert.encoder.layer.1")),
    "torchvision-resnet50": (tv_resnet50, IMAGE, True, ("layer1.0", "layer4.0")),
    "torchvision-vgg16": (vgg16_features, IMAGE, True, ("0.0-1", "0.2-3", "0.4-5")),
    "torchvision-mobilenet_v3_large": (mobilenet_v3_large, IMAGE, True, ("features.1", "features.5")),
    "torchvision-densenet121": (
        densenet121,
        IMAGE,
        True,
        ("features.pool0+features.denseblock1", "features.transition1.conv"),  # the pool's output: fuse.py
    ),
    "torchvision-vit_b_16": (vit_b_16, IMAGE, True, ("encoder.layers.encoder_layer_0",)),
    "timm-resnet50": (timm_resnet50, IMAGE, True, ("layer1.0", "layer4.0")),
}


def _step(model: nn.Module, inputs, with_loss: bool) -> torch.Tensor:
    if isinstance(inputs, dict):
        return model(**inputs).loss
    return nn.functional.cross_entropy(model(inputs), TARGET) if with_loss else model(inputs)


def _remat_step(wrapped: nn.Module, inputs, with_loss: bool) -> torch.Tensor:
    if isinstance(inputs, dict):
        return wrapped(**inputs).loss
    return wrapped(inputs, target=TARGET) if with_loss else wrapped(inputs)


def _train_once(model: nn.Module, run: Callable[[], torch.Tensor], buffers: list[torch.Tensor], bf16: bool = False):
    """One step from ``buffers`` and a fixed RNG, under bf16 autocast if asked (backward outside it)."""
    with torch.no_grad():
        for b, saved in zip(model.buffers(), buffers, strict=True):
            b.copy_(saved)
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(3)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = run()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()], [b.clone() for b in model.buffers()]


def _max_difference(a, b) -> float:
    pairs = [(a[0], b[0]), *zip(a[1], b[1], strict=True)]
    return max((x.double() - y.double()).abs().max().item() for x, y in pairs)


@contextlib.contextmanager
def _per_block_checkpoint(model: nn.Module, names: list[str]):
    """``torch.utils.checkpoint`` (non-reentrant) around each of ``model``'s modules named by the cut's
    stages: the reference for how far recomputation under autocast may move gradients."""
    patched = []
    for name in names:
        try:
            module = model.get_submodule(name)
        except AttributeError:
            continue  # 'loss', ranges such as 'features.0-1'
        if module is not model:
            forward = module.forward
            module.forward = functools.partial(torch.utils.checkpoint.checkpoint, forward, use_reentrant=False)
            patched.append(module)
    try:
        yield len(patched)
    finally:
        for module in patched:
            del module.forward


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_library_model_through_the_one_call_api(case):
    factory, inputs, with_loss, expected_stages = CASES[case]
    torch.manual_seed(0)
    model = factory().train()
    loss = nn.functional.cross_entropy if with_loss else None
    target = TARGET if with_loss else None
    example = inputs if isinstance(inputs, dict) else (inputs,)
    # over_budget="least": the bf16 call below is a signature of its own (traced, proven and
    # profiled under autocast), solved under this fp32 budget, which it may need more than
    wrapped = remat.checkpoint(
        model, example, budget=1.0, loss=loss, target=target, repeats=1, warmup=0, over_budget="least"
    )
    names = [s.name for s in wrapped.profile.stages]
    assert all(name in names for name in expected_stages), names
    # halfway between the smallest budget the DP can meet and store-all: it must recompute
    low, high = wrapped.least_peak, wrapped.store_all_peak
    wrapped = wrapped.with_budget((low + high) // 2)
    assert wrapped.schedule.budget < high and any(op in ("F_ck", "F_n") for op, _ in wrapped.schedule.ops)
    initial = [b.clone() for b in model.buffers()]
    plain = _train_once(model, lambda: _step(model, inputs, with_loss), initial)
    replay = _train_once(model, lambda: _remat_step(wrapped, inputs, with_loss), initial)
    assert torch.equal(plain[0], replay[0])
    assert all(torch.equal(a, b) for a, b in zip(plain[1], replay[1], strict=True)), "parameter gradients differ"
    assert all(torch.equal(a, b) for a, b in zip(plain[2], replay[2], strict=True)), "buffers differ"
    # bf16 autocast: as close to plain autocast training as per-block torch.utils.checkpoint is
    plain_bf16 = _train_once(model, lambda: _step(model, inputs, with_loss), initial, bf16=True)
    replay_bf16 = _train_once(model, lambda: _remat_step(wrapped, inputs, with_loss), initial, bf16=True)
    with _per_block_checkpoint(model, names) as blocks:
        checkpointed_bf16 = _train_once(model, lambda: _step(model, inputs, with_loss), initial, bf16=True)
    assert blocks > 0
    assert not all(torch.equal(a, b) for a, b in zip(plain[1], plain_bf16[1], strict=True)), "autocast ran in fp32"
    assert _max_difference(plain_bf16, replay_bf16) <= _max_difference(plain_bf16, checkpointed_bf16)
    assert all(torch.equal(a, b) for a, b in zip(plain_bf16[2], replay_bf16[2], strict=True)), "bf16 buffers"


@pytest.mark.slow
@pytest.mark.parametrize("padded", [False, True])
def test_llama_gqa_is_cut_on_eager_branch_and_a_call_on_the_other_is_refused(padded):
    torch.manual_seed(0)
    model = llama().train()
    inputs = _tokens(with_mask=True, padded=padded)
    chain = cut_model(model, (), inputs)  # proven: output and every gradient torch.equal to eager
    sdpa = [n for n in chain.plan.gm.graph.nodes if n.target is nn.functional.scaled_dot_product_attention]
    assert len(sdpa) == 2
    # eager's SDPA calls: the mask only with padding, else is_causal with the k/v heads not repeated
    assert all((n.kwargs["attn_mask"] is not None) == padded for n in sdpa)
    assert all(n.kwargs.get("enable_gqa", False) == (not padded) for n in sdpa)
    chain.bind(**_tokens(with_mask=True, padded=padded))  # the same branch: accepted
    other = _tokens(with_mask=True, padded=not padded)
    with pytest.raises(RematError, match="another branch") as info:
        chain.bind(**other)
    assert "\n" not in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["torchvision-densenet121", "torchvision-vgg16"])
@pytest.mark.parametrize("bf16", [False, True])
def test_graph_replay_of_a_vision_model_equals_its_plain_step(case, bf16):
    # DenseNet's block input feeds every layer's concatenation: the replay must add their
    # gradients in autograd's order; VGG's ReLUs are in place
    from remat.graph.profiler import profile_graph
    from remat.replay.graph import GraphReplay
    from tests.solver.graph.graph_schedules import checkpoint_schedule

    factory, x, _, _ = CASES[case]
    torch.manual_seed(0)
    model = factory().train()
    profile = profile_graph(model, example_inputs=x, name=case)
    forward = [v for v, node in enumerate(profile.nodes) if not node.backward]
    initial = [b.clone() for b in model.buffers()]
    plain = _train_once(model, lambda: nn.functional.cross_entropy(model(x), TARGET), initial, bf16=bf16)
    wrapped = GraphReplay(model, checkpoint_schedule(profile, forward[::2]), profile)
    replay = _train_once(model, lambda: nn.functional.cross_entropy(wrapped(x), TARGET), initial, bf16=bf16)
    assert torch.equal(plain[0], replay[0])
    assert all(torch.equal(a, b) for a, b in zip(plain[1], replay[1], strict=True)), "parameter gradients differ"
    assert all(torch.equal(a, b) for a, b in zip(plain[2], replay[2], strict=True)), "buffers differ"


@pytest.mark.slow
def test_cli_profiles_a_token_model_built_from_a_config(tmp_path, capsys):
    from remat.cli import main
    from remat.schedules import load_profile

    out = tmp_path / "gpt2.json"
    config = f"n_layer=2,n_embd=32,n_head=2,vocab_size={VOCAB}"
    argv = ["profile", "--model", "transformers:gpt2", "--config", config, "--input-shape", "2,8"]
    assert main([*argv, "--input-dtype", "int64", "--repeats", "1", "-o", str(out)]) == 0
    profile = load_profile(str(out))
    assert {"transformer.h.0", "transformer.h.1"} <= {s.name for s in profile.stages}
    assert profile.input_size == 2 * 8 * 8  # int64 token ids
    capsys.readouterr()
    assert main([*argv, "--input-dtype", "int64", "--input-range", "9,3", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--input-range" in err


@pytest.mark.slow
def test_graph_profile_of_a_hugging_face_model_says_in_one_line_what_to_use(tmp_path, capsys):
    from remat.cli import main

    config = f"n_layer=2,n_embd=32,n_head=2,vocab_size={VOCAB}"
    argv = ["profile", "--graph", "--model", "transformers:gpt2", "--config", config, "--input-shape", "2,8"]
    assert main([*argv, "--input-dtype", "int64", "-o", str(tmp_path / "g.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "without --graph" in err
