"""The proof runs every stage as each forward kind of the replay (remat.trace.proof.check_forward_kinds),
stages are made repeatable or refused (remat.trace.repeatable), grad-mode setters are bounded by the
mode at entry (NOTE [Grad mode inside a stage]) and a model error inside a stage is one line
(remat.trace.stage_errors)."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.fx as fx
from torch import nn

from remat.rewrite.grad_mode import within_entry_grad_mode
from remat.runtime.policies import applicable_policies, selective_forward
from remat.schedules import RematError
from remat.trace.proof import check_forward_kinds, cut_model
from remat.trace.repeatable import copy_mutated_sides
from remat.trace.stage_errors import running_stage


def policy_options(stage: nn.Module, x: torch.Tensor) -> dict:
    """The recording options the runtime offers for ``stage`` (what ``remat profile --options`` profiles)."""
    return {name: functools.partial(selective_forward, stage, name=name) for name in applicable_policies(stage, x)}


class Toggles(nn.Module):
    """``no_grad`` as a region and as the ``set_grad_enabled`` call, and an ``enable_grad`` region, on the
    block's own activations."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.lin(h))
        with torch.set_grad_enabled(False):
            scale = h.abs().mean() + 1.0
        torch.set_grad_enabled(False)
        shift = h.mean(0)
        torch.set_grad_enabled(True)
        with torch.enable_grad():  # traced in a training step: must not record under F_ck / F_n
            h = h * 1.5
        return h / scale + h - shift


def _toggles() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[Toggles(16) for _ in range(3)])


def test_every_setter_spelling_is_bounded_and_the_recording_forward_is_the_models():
    model, x = _toggles(), torch.randn(4, 16)
    chain = cut_model(model, (x,), {}, options=policy_options)  # every option proven too
    a = chain.bind(x)
    setters = [n for s in chain.stages for n in s.body.graph.nodes if "set_grad_enabled" in str(n.target)]
    assert setters and all("within" in str(n.target) for n in setters)
    with torch.no_grad():
        for stage in chain.stages:
            a = stage(a)
            assert a.grad_fn is None and not torch.is_grad_enabled()
    assert torch.is_grad_enabled()  # each stage left the mode as it found it
    leaf = x.detach().requires_grad_()
    assert chain.stages[0](leaf).grad_fn is not None


def test_a_stage_leaves_the_grad_mode_as_it_found_it_even_when_its_regions_do_not_close():
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(torch._C._set_grad_enabled, (False,))  # a region the stage never closes
    graph.output(graph.call_function(torch.tanh, (x,)))
    body = within_entry_grad_mode(fx.GraphModule(nn.Module(), graph))
    with torch.enable_grad():
        body(torch.ones(2))
        assert torch.is_grad_enabled()


class SharedShift(nn.Module):
    """Hands a value from block to block through an in-place change of a side value by a block (it
    reads the block's activations): the later block reads the changed value, so no copy at the
    first block's entry keeps the model's function."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shift = torch.zeros(8)
        h = torch.tanh(self.blocks[0](x))
        shift.add_(h.detach().mean())
        h = torch.tanh(self.blocks[1](h + shift))
        return self.blocks[2](h) + shift


def test_a_side_value_changed_by_one_stage_and_read_by_another_is_refused_in_one_line():
    torch.manual_seed(0)
    with pytest.raises(RematError) as info:
        cut_model(SharedShift(), (torch.randn(2, 8),), {})
    message = str(info.value)
    assert "\n" not in message
    assert "changes side value 'shift' in place (add_" in message and "reads the changed value" in message


def test_an_in_place_op_on_a_view_of_a_stage_input_is_given_a_copy_made_inside_the_stage():
    graph = fx.Graph()
    x = graph.placeholder("x")
    flat = graph.call_method("flatten", (x, 1))
    graph.call_method("mul_", (flat, 2.0))
    graph.output(graph.call_method("sum", (flat,)))
    body = copy_mutated_sides(fx.GraphModule(nn.Module(), graph))
    x = torch.ones(2, 3, 4)
    before = x.clone()
    assert torch.equal(body(x), body(x)) and torch.equal(x, before)
    assert [n.target for n in body.graph.nodes][1] == "clone"  # at entry, before the view


class ChangesInput(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2.0)
        return x


def test_the_proof_names_the_op_that_changes_a_stage_input_the_graph_cannot_copy():
    chain = _fake_chain(ChangesInput())
    with pytest.raises(RematError, match=r"stage 'block' changes its input in place .* cannot run twice"):
        check_forward_kinds(chain, (), {})


class Bad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.tanh(self.first(x)))


def test_a_model_error_inside_a_stage_is_one_line_naming_stage_module_and_source_line(capfd):
    torch.manual_seed(0)
    model, x = nn.Sequential(Bad(), Bad()), torch.randn(2, 8)
    chain = cut_model(model, (x,), {})
    chain.bind(x)
    name, stage = chain.names[-1], chain.stages[-1]
    with pytest.raises(RematError) as info, running_stage(name, stage, torch.randn(2, 5)):
        stage(torch.randn(2, 5))  # the wrong width: fails inside the stage's first Linear
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"model: stage '{name}' fails to run (in Linear '1.")
    assert "at test_forward_kinds.py:" in message and "RuntimeError: mat1 and mat2" in message
    assert "Traceback" not in capfd.readouterr().err  # torch.fx's printed traceback stays off stderr
    assert torch.is_grad_enabled()


def _fake_chain(stage: nn.Module):
    from types import SimpleNamespace

    a = torch.ones(3)
    return SimpleNamespace(bind=lambda *a_, **k: a, context=SimpleNamespace(values={}), names=["block"], stages=[stage])


def _library(spec: str, config: dict) -> nn.Module:
    pytest.importorskip("transformers")
    from remat.models.compat import import_torchvision

    import_torchvision()
    from remat.models.hub import build_library_model

    torch.manual_seed(0)
    return build_library_model(spec, config).train()


@pytest.mark.slow
def test_every_option_of_every_stage_of_t5_and_llama_is_proven():
    t5 = _library("transformers:t5", {"d_model": 32, "d_ff": 64, "d_kv": 8, "num_layers": 2, "num_heads": 2,
                                      "relative_attention_num_buckets": 32, "vocab_size": 100,
                                      "decoder_start_token_id": 0, "pad_token_id": 0})  # fmt: skip
    ids = torch.randint(1, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    cut_model(t5, (), {"input_ids": ids, "labels": ids}, options=policy_options)
    config = {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 64}  # fmt: skip
    llama = _library("transformers:llama", config)
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    chain = cut_model(llama, (), {"input_ids": ids, "labels": ids}, options=policy_options)
    a = chain.bind(input_ids=ids, labels=ids)
    with torch.no_grad():  # F_ck / F_n: the rotary embedding's no_grad no longer turns grad back on
        for stage in chain.stages:
            a = stage(a)
            assert a.grad_fn is None


def test_a_stage_that_fails_inside_its_no_grad_region_leaves_grad_on_and_says_so_in_one_line():
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(torch._C._set_grad_enabled, (False,))
    product = graph.call_function(torch.mm, (x, x))  # (2, 3) @ (2, 3): fails
    graph.call_function(torch._C._set_grad_enabled, (True,))
    graph.output(product)
    body = within_entry_grad_mode(fx.GraphModule(nn.Module(), graph))
    with pytest.raises(RematError, match=r"^model: stage 'toy' fails to run .*RuntimeError: mat1 and mat2"):
        with running_stage("toy", body, torch.ones(2, 3)):
            body(torch.ones(2, 3))
    assert torch.is_grad_enabled()


class LeavesNaNAlone(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_a_side_value_holding_nan_that_no_stage_changes_passes():
    chain = _fake_chain(LeavesNaNAlone())
    chain.context.values = {"noise": torch.full((3,), float("nan"))}  # torch.empty may hold NaN patterns
    check_forward_kinds(chain, (), {})


@pytest.mark.parametrize("view", [("flatten", 1), ("ravel",), ("view", -1)])
def test_each_view_of_an_input_changed_in_place_is_copied(view):
    graph = fx.Graph()
    x = graph.placeholder("x")
    flat = graph.call_method(view[0], (x, *view[1:]))
    graph.call_method("add_", (flat, 1.0))
    graph.output(graph.call_method("sum", (flat,)))
    body = copy_mutated_sides(fx.GraphModule(nn.Module(), graph))
    x = torch.zeros(2, 3)
    assert body(x).item() == body(x).item() == 6.0 and torch.equal(x, torch.zeros(2, 3))


class InferenceScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        with torch.inference_mode():
            scale = h.abs().mean() + 1.0
        return self.b(h / scale.clone())


def test_an_inference_mode_region_stays_inside_one_stage_and_the_cut_is_proven():
    torch.manual_seed(0)
    model, x = nn.Sequential(InferenceScale(), InferenceScale()), torch.randn(4, 8)
    chain = cut_model(model, (x,), {})  # before: the region opened in the prelude; other gradients, refused
    bodies = [[n.name for n in s.body.graph.nodes if "inference_mode" in n.name] for s in chain.stages]
    assert all(len(names) in (0, 2) for names in bodies) and any(bodies)


def test_an_error_that_torch_fx_strips_of_its_frames_is_still_located_at_its_node():
    from remat.trace.stages import CutStage, _Context

    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_method("add_", (x, 1.0)))  # in place on the leaf a recording starts from
    stage = CutStage(fx.GraphModule(nn.Module(), graph), [], _Context())
    leaf = torch.zeros(3, requires_grad=True)
    with pytest.raises(RematError, match=r"stage 'toy' fails to run in F_all \(node add_\): RuntimeError: a leaf"):
        with running_stage("toy", stage, leaf, "F_all"):
            stage(leaf)
