"""The executor runs stage options (selective-checkpoint policies): gradients equal to the plain
model's, the allocator's peak within 2% of the prediction, `remat profile --options`."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import nn

from remat.cli import main
from remat.profile.chain import profile_chain
from remat.profile.options import applicable_policies, with_measured_options
from remat.replay.chain import RematChain
from remat.replay.report import compare
from remat.runtime.policies import POLICIES
from remat.schedules import ChainProfile, RematError, ScheduleError, StageOption, load_profile
from remat.solver import solve
from remat.solver.chain.store_all import store_all_peak
from remat.solver.common import make_schedule
from remat.trace.chain import as_chain
from remat.zoo.gpt2 import GPT2


def _gpt(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return GPT2(layers=3, dim=32, heads=4, context=32, vocab=40, dropout=dropout).train()


def _input() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(2, 32, 32)


def _named_options(profile: ChainProfile) -> ChainProfile:
    """Every block gets both transformer options (sizes made up: only the names matter for replay)."""
    stages = []
    for stage in profile.stages:
        if stage.name.startswith("blocks."):
            options = tuple(StageOption(name, stage.output_size, stage.backward_ms) for name in list(POLICIES)[:2])
            stage = dataclasses.replace(stage, options=options)
        stages.append(stage)
    return ChainProfile(profile.name, profile.input_size, tuple(stages), profile.metadata)


def _grads(module: nn.Module, x: torch.Tensor, seed: int = 3) -> list[torch.Tensor]:
    leaf = x.clone().requires_grad_()
    torch.manual_seed(seed)
    out = module(leaf)
    out.pow(2).mean().backward()
    return [leaf.grad, *(p.grad for p in module.parameters())]


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_gradients_equal_the_plain_models_with_middle_options(dropout):
    model, x = _gpt(dropout), _input()
    profile = _named_options(profile_chain(model, x, repeats=1, warmup=0))
    n = profile.length
    assert n == 5 and [s.name for s in profile.stages[1:4]] == ["blocks.0", "blocks.1", "blocks.2"]
    # the blocks are stages 1..3: record them with options 1 and 2; stage 0 is recomputed
    ops = [("F_ck", 0), ("F_all", 1, 1), ("F_all", 2, 2), ("F_all", 3, 1), ("F_all", 4)]
    ops += [("B", 4), ("B", 3), ("B", 2), ("B", 1), ("F_all", 0), ("B", 0)]
    expected = _grads(copy.deepcopy(model), x)
    wrapped = RematChain(copy.deepcopy(model), ops, profile)
    got = _grads(wrapped, x)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)


def test_batchnorm_statistics_are_updated_once_with_a_conv_option():
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()) for _ in range(3)]
    model = nn.Sequential(*blocks).train()
    x = torch.randn(2, 4, 8, 8)
    assert applicable_policies(blocks[0], x) == ["save convolution outputs"]
    profile = profile_chain(model, x, repeats=1, warmup=0)
    stage = dataclasses.replace(
        profile.stages[1], options=(StageOption("save convolution outputs", profile.stages[1].output_size, 1.0e9),)
    )
    profile = ChainProfile(profile.name, profile.input_size, (profile.stages[0], stage, profile.stages[2]))
    ops = [("F_all", 0), ("F_all", 1, 1), ("F_all", 2), ("B", 2), ("B", 1), ("B", 0)]
    plain = copy.deepcopy(model)
    wrapped = RematChain(copy.deepcopy(model), ops, profile)
    for a, b in zip(_grads(wrapped, x), _grads(plain, x), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(wrapped.chain.stages.buffers(), plain.buffers(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_the_peak_with_measured_options_is_within_2_percent_of_the_prediction():
    model, x = _gpt(), _input()
    profile = profile_chain(model, x, repeats=1, warmup=1, options=True)
    blocks = [s for s in profile.stages if s.name.startswith("blocks.")]
    assert all(s.options for s in blocks)  # which ones survive the dominance filter depends on timing
    assert all(o.saved_size < s.saved_size and o.backward_ms >= s.backward_ms for s in blocks for o in s.options)
    n = profile.length
    last = [("B", i) for i in reversed(range(n))]
    schedules = [
        [("F_all", i, 1 if profile.stages[i].options else 0) for i in range(n)] + last,
        [
            ("F_ck", 0),
            ("F_all", 1, len(profile.stages[1].options)),
            ("F_all", 2, 1),
            ("F_all", 3, len(profile.stages[3].options)),
            ("F_all", 4),
            *last[:-1],
            ("F_all", 0),
            last[-1],
        ],
    ]
    reference = store_all_peak(profile)
    for fraction in (0.8, 0.5):
        schedules.append(solve(profile, int(fraction * reference), "optimal"))
    for ops in schedules:
        schedule = ops if not isinstance(ops, list) else make_schedule(profile, 2**62, "hand", ops)
        report = compare(profile, schedule, RematChain(copy.deepcopy(model), schedule, profile), x, steps=1)
        assert abs(report.peak_error) <= 0.02, report.table()


def test_with_measured_options_leaves_the_model_as_it_was():
    model, x = _gpt(0.1), _input()
    before = copy.deepcopy(model.state_dict())
    rng = torch.get_rng_state()
    profile = profile_chain(model, x, repeats=1, warmup=0)
    with_measured_options(as_chain(model), x, profile, repeats=1)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state())


def test_an_option_without_a_policy_or_without_the_profile_is_refused():
    model, x = _gpt(), _input()
    profile = profile_chain(model, x, repeats=1, warmup=0)
    ops = [("F_all", i) for i in range(5)] + [("B", i) for i in reversed(range(5))]
    ops[2] = ("F_all", 2, 1)
    with pytest.raises(ScheduleError, match="pass the profile that names them"):
        RematChain(model, ops)
    stage = dataclasses.replace(
        profile.stages[2], options=(StageOption("keep the good bits", profile.stages[2].output_size, 1.0e9),)
    )
    odd = ChainProfile(profile.name, profile.input_size, (*profile.stages[:2], stage, *profile.stages[3:]))
    with pytest.raises(RematError, match="stage 2 option 1: the executor has no recording policy named 'keep the good"):
        RematChain(model, ops, odd)


@pytest.mark.slow
def test_remat_profile_options_writes_options(tmp_path, capsys):
    out = tmp_path / "p.json"
    argv = ["profile", "--model", "remat.zoo.small:transformer", "--input-shape", "2,16,32"]
    code = main([*argv, "--device", "cpu", "--repeats", "1", "--options", "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    profile = load_profile(out)
    assert any(stage.options for stage in profile.stages)
    # one line per option written, in its order (which options survive, and their order, follow
    # the measured backward times: a loaded machine can order them otherwise)
    for stage in profile.stages:
        for k, option in enumerate(stage.options, start=1):
            assert f"  {stage.name} option {k} '{option.name}': saved " in captured.out
    code = main([*argv, "--graph", "--options", "-o", str(tmp_path / "g.json")])
    assert code == 2 and "--options" in capsys.readouterr().err
