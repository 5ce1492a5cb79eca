"""Profiler: saved_size counts what autograd keeps (distinct storages, not the input or parameters),
the model is left unchanged, and chain extraction cuts the common model shapes."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from remat.measure.memory import StorageTracker
from remat.profile.chain import profile_chain, profile_stage
from remat.schedules import ChainProfile, RematError
from remat.trace.chain import Chain, as_chain
from remat.zoo import small


class ExpT(nn.Module):
    """exp saves its result; the output is a transposed view of that same storage."""

    def forward(self, x):
        return torch.exp(x).t()


class Alias(nn.Module):
    def forward(self, x):
        return x.view(-1)


def _stage(module, x):
    record, out, _ = profile_stage(module, x, "s", repeats=1, warmup=0)
    return record, out


def test_saved_size_excludes_input_and_parameters():
    x = torch.randn(16, 32)
    record, out = _stage(nn.Sequential(nn.Linear(32, 24), nn.ReLU()), x)
    # Linear saves its input (a_i, not counted) and its weight (a parameter); ReLU saves its output
    assert record.output_size == 16 * 24 * 4
    assert record.saved_size == record.output_size
    assert record.param_size == (32 * 24 + 24) * 4
    assert out.shape == (16, 24) and not out.requires_grad


def test_saved_size_counts_each_saved_storage_once():
    x = torch.randn(16, 32)
    record, _ = _stage(nn.Sequential(nn.Tanh(), nn.Tanh()), x)
    assert record.saved_size == 2 * 16 * 32 * 4  # both tanh outputs, the second is the stage output
    record, _ = _stage(ExpT(), x)
    assert record.saved_size == record.output_size == 16 * 32 * 4  # exp's result and its view: one storage


def test_saved_size_matches_live_bytes_after_a_recording_forward():
    """What the hooks count is what a recording forward really keeps alive (tracker cross-check)."""
    for name in ("cnn", "transformer"):
        torch.manual_seed(0)
        chain = as_chain(getattr(small, name)())
        x = torch.randn(*small.INPUT_SHAPES[name])
        for stage in chain.stages:
            record, _ = _stage(stage, x)
            leaf = x.detach().requires_grad_()
            with StorageTracker() as tracker:
                out = stage(leaf)
                live = tracker.current_bytes
            assert record.saved_size == live, (name, record.name)
            x = out.detach()


def test_output_aliasing_the_input_is_rejected():
    with pytest.raises(RematError, match="view of its input"):
        _stage(Alias(), torch.randn(4, 4))


def test_a_stage_whose_output_is_a_view_is_refused_saying_how_to_merge_it():
    """A module the chain cannot know reshapes (issue 43: the message said "merge it with a
    neighbour", not how): the refusal names the stage, its type and the two ways to merge it."""
    model = nn.Sequential(nn.Linear(4, 4), Alias(), nn.Linear(8, 2))
    with pytest.raises(RematError, match=r"stage '1' \(Alias\).*one nn.Sequential.*remat_stages\(\)") as error:
        profile_chain(model, torch.randn(2, 4), repeats=1, warmup=0)
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_a_sequential_ending_in_pool_flatten_linear_profiles():
    """issue 43: the README's hand-built loop failed on an ordinary nn.Sequential ending in
    AdaptiveAvgPool2d, Flatten, Linear (the Flatten, a stage of its own, returns a view of its
    input). A child that only reshapes joins the stage before it, as one that works in place
    does; at the start, the stage after it."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
    )
    x = torch.randn(2, 3, 8, 8)
    chain = as_chain(model)
    assert chain.names == ["0-1", "2-3", "4"]
    assert torch.equal(chain(x), model(x))
    profile = profile_chain(model, x, repeats=1, warmup=0)
    assert [s.name for s in profile.stages] == chain.names
    assert as_chain(nn.Sequential(nn.Flatten(), nn.Identity(), nn.Linear(12, 2))).names == ["0-2"]
    assert as_chain([nn.Linear(4, 4), nn.Identity(), nn.Unflatten(1, (2, 2)), nn.ReLU()]).names == ["0-2", "3"]


def test_profiling_leaves_the_model_unchanged():
    torch.manual_seed(0)
    model = small.cnn()
    first = next(model.parameters())
    first.grad = torch.full_like(first, 3.0)
    before = copy.deepcopy(model)
    x = torch.randn(4, 3, 16, 16)
    rng = torch.get_rng_state()
    profile = profile_chain(model, x, repeats=1, warmup=1)
    assert torch.equal(torch.get_rng_state(), rng)
    for a, b in zip(model.state_dict().values(), before.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(first.grad, torch.full_like(first, 3.0))
    assert all(p.grad is None for p in list(model.parameters())[1:])
    assert isinstance(profile, ChainProfile) and profile.length == 6
    meta = profile.metadata
    assert meta["batch_size"] == 4 and meta["dtype"] == "float32" and meta["torch"] == torch.__version__
    assert profile.input_size == 4 * 3 * 16 * 16 * 4
    assert all(s.forward_ms >= 0 and s.backward_ms >= 0 for s in profile.stages)
    assert ChainProfile.from_dict(profile.to_dict()) == profile


def test_chain_extraction_shapes():
    seq = small.mlp(depth=3)
    assert len(as_chain(seq)) == 4
    layers = [nn.Linear(4, 4), nn.ReLU()]
    assert [type(s) for s in as_chain(layers).stages] == [nn.Linear, nn.ReLU]
    assert len(as_chain(nn.ModuleList(layers))) == 2
    x = torch.randn(2, 3, 16, 16)
    cnn = small.cnn().eval()
    chain = as_chain(cnn)
    assert chain.names == ["stem", "layer1.0", "layer1.1", "layer2.0", "layer2.1", "head"]
    assert torch.equal(chain(x), cnn(x))
    tr = small.transformer().eval()
    chain = as_chain(tr)
    assert chain.names[0] == "embed" and chain.names[-1] == "head" and len(chain) == 6
    t = torch.randn(2, 5, 32)
    assert torch.equal(chain(t), tr(t))
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 3)
    assert len(as_chain(encoder)) == 3

    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

        def remat_stages(self):
            return [("a", self.a), ("b", self.b)]

    assert as_chain(Custom()).names == ["a", "b"]
    chain = Chain([("x", nn.Identity())])
    assert as_chain(chain) is chain
    with pytest.raises(RematError, match="cannot cut a Conv2d"):
        as_chain(nn.Conv2d(1, 1, 1))
    with pytest.raises(RematError, match="item 1"):
        as_chain([nn.ReLU(), "relu"])
