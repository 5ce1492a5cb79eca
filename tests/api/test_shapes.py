"""One wrapped model for batches of every shape (issue 23; remat/api/shapes.py, docs/models.md
"Batches of other shapes"): each shape trains exactly like plain PyTorch, within one budget in
bytes, cut once per shape and branch; a shape above the budget is refused before its step runs."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

import remat
from remat.api.shapes import Signature, along, predicted_profile
from remat.profile.chain import profile_chain
from remat.replay.report import step_allocator_peak
from remat.schedules import RematError
from remat.solver.chain.optimal import minimum_budget
from remat.trace.proof import cut_model
from tests.api.test_api import TokenModel


def _signature(**kwargs) -> Signature:
    leaves, spec = pytree.tree_flatten(((), kwargs, None))
    return Signature.of(leaves, spec)


def _tokens(batch: int, length: int, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed + 97 * length + batch)
    ids = torch.randint(0, 40, (batch, length), generator=generator)
    return {"input_ids": ids, "labels": ids.roll(1, dims=1)}


def test_signatures_on_one_line_differ_in_one_size():
    a = _signature(input_ids=torch.zeros(2, 8, dtype=torch.long), labels=torch.zeros(2, 8, dtype=torch.long))
    b = _signature(input_ids=torch.zeros(2, 12, dtype=torch.long), labels=torch.zeros(2, 12, dtype=torch.long))
    c = _signature(input_ids=torch.zeros(3, 12, dtype=torch.long), labels=torch.zeros(3, 12, dtype=torch.long))
    d = _signature(input_ids=torch.zeros(2, 12, dtype=torch.long), labels=torch.zeros(2, 8, dtype=torch.long))
    e = _signature(input_ids=torch.zeros(2, 12, dtype=torch.int32), labels=torch.zeros(2, 12, dtype=torch.long))
    assert along(a, b) == (frozenset({(0, 1), (1, 1)}), 8, 12)
    assert along(b, c) == (frozenset({(0, 0), (1, 0)}), 2, 3)
    assert along(a, c) is None  # batch and length both changed, to different sizes
    assert along(b, d) == (frozenset({(1, 1)}), 12, 8)
    assert along(b, e) is None  # another dtype is another trace, never a size on a line
    assert along(a, a) is None
    assert a.text() == "(2, 8), (2, 8)"


def _plain_step(model: nn.Module, inputs: dict, seed: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = model(**inputs)["loss"]
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def _remat_step(wrapped: nn.Module, model: nn.Module, inputs: dict, seed: int) -> tuple[torch.Tensor, list]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = wrapped(**inputs)["loss"]
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.slow
def test_every_batch_shape_trains_exactly_under_one_budget():
    torch.manual_seed(0)
    model = TokenModel(depth=3).train()  # dropout 0.1: the RNG is replayed per stage
    wrapped = remat.checkpoint(model, _tokens(2, 8), budget=1.0, repeats=1, warmup=0, over_budget="least")
    budget = wrapped.least_peak
    wrapped = wrapped.with_budget(budget)  # the example recomputes; larger shapes need the least schedule
    assert wrapped.budget == budget
    shapes = [(2, 8), (3, 8), (2, 12), (2, 5), (1, 8), (2, 8), (2, 12)]
    for k, (batch, length) in enumerate(shapes):
        inputs = _tokens(batch, length, seed=k)
        plain = _plain_step(model, inputs, seed=k)
        replayed = _remat_step(wrapped, model, inputs, seed=k)
        assert torch.equal(plain[0], replayed[0]), (batch, length)
        assert all(torch.equal(a, b) for a, b in zip(plain[1], replayed[1], strict=True)), (batch, length)
        plan = wrapped.plan_for(**inputs)
        assert plan.predicted_peak <= budget or plan.least
        assert plan.schedule.predicted.recompute_ms > 0, "every shape recomputes at this budget"
    # (3, 8): general in the batch; (2, 12): general in the length, and it serves (2, 5) untraced;
    # (1, 8): a batch of 1 is outside a general cut's guard (dynamo specialises a size of 1), so
    # it is traced again (general in the length only)
    assert wrapped.retraces == 3
    assert len(wrapped.plans) == 5
    general = wrapped.plan_for(**_tokens(2, 12)).cut.chain
    assert general.dynamic is not None and wrapped.plan_for(**_tokens(2, 5)).cut.chain is general
    assert wrapped.plan_for(**_tokens(1, 8)).cut.chain is not general


@pytest.mark.slow
def test_a_shape_above_the_budget_is_refused_before_its_step_runs(caplog):
    torch.manual_seed(0)
    model = TokenModel(depth=2).train()
    wrapped = remat.checkpoint(model, _tokens(2, 8), budget=1.0, repeats=1, warmup=0)
    wrapped = wrapped.with_budget(wrapped.least_peak)
    model.zero_grad(set_to_none=True)
    state = torch.get_rng_state()
    with pytest.raises(RematError) as info:
        wrapped(**_tokens(4, 8))
    message = str(info.value)
    assert "\n" not in message and "(4, 8), (4, 8)" in message and "needs at least" in message
    assert str(wrapped.budget) in message
    assert all(p.grad is None for p in model.parameters()), "a step ran"
    assert torch.equal(torch.get_rng_state(), state)
    # over_budget="least": it runs, under the least-memory schedule, and says so each time
    least = remat.checkpoint(model, _tokens(2, 8), budget=wrapped.budget, repeats=1, warmup=0, over_budget="least")
    with caplog.at_level(logging.WARNING, logger="remat"):
        for _ in range(2):
            least(**_tokens(4, 8))["loss"].backward()
    said = [r.getMessage() for r in caplog.records if "least-memory schedule" in r.getMessage()]
    assert len(said) == 2 and "(4, 8), (4, 8)" in said[0]
    plan = least.plan_for(**_tokens(4, 8))
    assert plan.least and plan.predicted_peak == minimum_budget(plan.cut.profile) + plan.side_bytes


def test_over_budget_is_checked():
    model = TokenModel(depth=1).train()
    with pytest.raises(RematError, match="over_budget: expected one of 'refuse', 'least'"):
        remat.checkpoint(model, _tokens(2, 8), over_budget="run")


def _measured(model: nn.Module, length: int):
    inputs = _tokens(2, length)
    chain = cut_model(model, (), inputs)
    return chain, profile_chain(chain, chain.bind(**inputs), repeats=1, warmup=0)


@pytest.mark.slow
def test_a_predicted_profile_has_the_measured_sizes():
    """A growth model through lengths 32, 40, 48 predicts length 36's sizes to the byte. (Below 32
    the embedding's transient is max(0, c - k * length), not linear: shorter lengths need 5 sizes
    measured before a piecewise-linear fit is trusted.)"""
    torch.manual_seed(0)
    model = TokenModel(depth=2).train()
    wrapped = remat.checkpoint(model, _tokens(2, 32), budget=10**9, repeats=1, warmup=0)
    for length in (40, 48):
        wrapped(**_tokens(2, length))["loss"].backward()
    assert all(plan.cut.measured for plan in wrapped.plans)
    plan = wrapped.plan_for(**_tokens(2, 36))
    assert plan.cut.source.startswith("predicted (linear"), plan.cut.source
    _, real = _measured(model, 36)
    fields = ("output_size", "saved_size", "forward_overhead", "backward_overhead", "param_size")
    for got, want in zip(plan.cut.profile.stages, real.stages, strict=True):
        assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields], got.name
        assert got.nograd_overhead >= want.nograd_overhead, got.name
    assert plan.cut.profile.input_size == real.input_size
    # outside the measured lengths it is measured, not extrapolated
    assert wrapped.plan_for(**_tokens(2, 56)).cut.measured
    measured = [c for c in wrapped._cuts.all() if c.measured]
    names = [s.name for s in real.stages]
    assert predicted_profile(_signature(**_tokens(2, 44)), (), names, measured) is not None
    assert predicted_profile(_signature(**_tokens(2, 64)), (), names, measured) is None
    assert predicted_profile(_signature(**_tokens(2, 44)), (), names[1:], measured) is None


@pytest.mark.slow
def test_a_predicted_shape_stays_within_its_prediction():
    """The allocator's peak of a step whose profile was predicted is at most the prediction."""
    torch.manual_seed(0)
    model = TokenModel(depth=3, width=48).train()
    wrapped = remat.checkpoint(model, _tokens(2, 40), budget=10**9, repeats=1, warmup=0)
    for length in (32, 48):
        wrapped(**_tokens(2, length))["loss"].backward()
    inputs = _tokens(2, 44)
    plan = wrapped.plan_for(**inputs)
    assert not plan.cut.measured
    tight = wrapped.with_budget(minimum_budget(plan.cut.profile) + plan.side_bytes)
    plan = tight.plan_for(**inputs)
    assert plan.schedule.predicted.recompute_ms > 0
    peak = step_allocator_peak(model, lambda: tight(**inputs)["loss"], torch.device("cpu"), steps=2)
    a0 = plan.cut.profile.input_size
    assert peak + a0 <= plan.predicted_peak * 1.02, (peak + a0, plan.predicted_peak)


def _padded_batch(lengths: list[int], vocab: int, seed: int) -> dict[str, torch.Tensor]:
    """Sequences of ``lengths`` padded to the longest, as DataCollatorWithPadding does (right
    padding, pad id 0, mask 0, labels -100 on padded positions)."""
    generator = torch.Generator().manual_seed(seed)
    longest = max(lengths)
    ids = torch.zeros(len(lengths), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, :length] = torch.randint(1, vocab, (length,), generator=generator)
        mask[row, :length] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_hugging_face_loop_with_dynamic_padding_and_accumulation(name):
    """Batches padded to their own longest sequence (lengths and the mask branch change), labels
    -100 on padding, two micro-batches per optimizer step: every accumulated gradient and every
    AdamW step equal to plain PyTorch's (fp32, dropout on, same RNG)."""
    from tests.api.test_real_models import VOCAB, gpt2, llama

    torch.manual_seed(0)
    model = {"gpt2": gpt2, "llama": llama}[name]().train()
    reference = {"gpt2": gpt2, "llama": llama}[name]().train()
    reference.load_state_dict(model.state_dict())
    # padded, unpadded, shorter, padded again; then new lengths of both branches, each on its general cut
    batches = [[8, 5, 8], [8, 8, 8], [6, 6, 6], [8, 3, 8], [10, 7, 10], [12, 12, 12], [5, 9, 2], [7, 7, 7]]
    batches = [_padded_batch(lengths, VOCAB, seed=k) for k, lengths in enumerate(batches)]
    wrapped = remat.checkpoint(model, batches[0], budget="80%", repeats=1, warmup=0, over_budget="least")
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, reference)]
    for step in range(len(batches) // 2):
        for k in (2 * step, 2 * step + 1):
            torch.manual_seed(k)
            (wrapped(**batches[k]).loss / 2).backward()
            torch.manual_seed(k)
            (reference(**batches[k]).loss / 2).backward()
        for a, b in zip(model.parameters(), reference.parameters(), strict=True):
            assert torch.equal(a.grad, b.grad), (step, name)
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters(), strict=True))
    branches = {plan.cut.branch for plan in wrapped.plans}
    assert len(branches) == 2, branches  # padded and unpadded batches: both branches cut and proven
    # (3, 8) unpadded (its own sizes: no other unpadded call yet), (3, 6) unpadded (general in the
    # length), (3, 10) padded (general in the length); lengths 12, 9 and 7 are served untraced
    assert wrapped.retraces == 3
    for k in (5, 6, 7):
        assert wrapped.plan_for(**batches[k]).cut.chain.dynamic is not None, k


class Positional(nn.Module):
    """Learned positions for at most 12 tokens: a longer batch fails inside the model."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(40, 16)
        self.positions = nn.Embedding(12, 16)
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(2)])

    def forward(self, input_ids, labels=None):
        h = self.tokens(input_ids) + self.positions(torch.arange(input_ids.shape[1]))
        for layer in self.layers:
            h = h + torch.tanh(layer(h))
        return {"loss": h.square().mean()}


def test_a_batch_the_model_cannot_take_is_one_line_and_the_loop_goes_on():
    torch.manual_seed(0)
    model = Positional().train()
    wrapped = remat.checkpoint(model, _tokens(2, 8), budget=10**9, repeats=1, warmup=0)
    with pytest.raises(RematError) as info:
        wrapped(**_tokens(2, 20))
    message = str(info.value)
    assert "\n" not in message and "a batch's inputs ((2, 20) torch.int64" in message and "IndexError" in message
    assert wrapped.retraces == 0  # nothing was cut for it
    wrapped(**_tokens(2, 10))["loss"].backward()  # the next batch trains, on a cut general in the length
    assert wrapped.retraces == 1
    # that cut's guard knows no table size, so it takes 20 tokens: while it is proven on a second
    # size, and once it has been, the model's own error is one line naming the module and the
    # line, raised before any gradient; the general cut stays
    for second_size_proven in (False, True):
        model.zero_grad(set_to_none=True)
        with pytest.raises(RematError) as info:
            wrapped(**_tokens(2, 20))
        message = str(info.value)
        assert "\n" not in message and "(2, 20) torch.int64" in message and "Embedding" in message
        assert "test_shapes.py" in message and all(p.grad is None for p in model.parameters())
        if not second_size_proven:
            wrapped(**_tokens(2, 11))["loss"].backward()
    wrapped(**_tokens(2, 9))["loss"].backward()
    assert wrapped.retraces == 1  # the error came from the model before a trace: nothing was cut
    assert wrapped.plan_for(**_tokens(2, 9)).cut.chain is wrapped.plan_for(**_tokens(2, 10)).cut.chain


def test_a_general_cut_that_fails_its_second_proof_goes(monkeypatch):
    """Should a general cut not be equal to the model at a second size (the proof refuses it), that
    call is traced for its own sizes, the general cut is dropped, and later sizes are traced per size."""
    import remat.api.entry as front

    real_prove, proven = front.prove_cut, set()

    def refuse(step, chain, *args, **kwargs):  # every cut's own proof passes; a general one's second refuses
        if chain.dynamic is None or id(chain) not in proven:
            proven.add(id(chain))
            return real_prove(step, chain, *args, **kwargs)
        raise RematError("model: the cut computes a different loss; refused")

    monkeypatch.setattr(front, "prove_cut", refuse)
    torch.manual_seed(0)
    model = TokenModel(depth=2).train()
    wrapped = remat.checkpoint(model, _tokens(2, 8), budget=10**9, repeats=1, warmup=0)
    wrapped(**_tokens(2, 10))["loss"].backward()
    assert wrapped.plan_for(**_tokens(2, 10)).cut.chain.dynamic is not None
    for length, retraces in ((12, 2), (5, 3)):
        wrapped(**_tokens(2, length))["loss"].backward()
        assert wrapped.retraces == retraces
        assert wrapped.plan_for(**_tokens(2, length)).cut.chain.dynamic is None, length


def test_a_cut_general_in_the_length_serves_new_lengths_untraced_and_exactly(monkeypatch):
    """After a second length, the cut is traced once more, general in the length (NOTE [Cuts
    general in a size]); it is proven on exactly one more length (proofs counted), every later
    length trains on it with no trace and gradients equal to plain PyTorch's; a length of 1 is
    outside its guard and gets a cut of its own."""
    import remat.api.entry as front

    proofs, proven = [], set()  # the shapes of proofs of a cut already proven once (on another size)
    real_prove = front.prove_cut

    def counted(step, chain, *args, **kwargs):
        if id(chain) in proven:
            proofs.append(args[1]["input_ids"].shape)
        proven.add(id(chain))
        return real_prove(step, chain, *args, **kwargs)

    monkeypatch.setattr(front, "prove_cut", counted)
    torch.manual_seed(0)
    model = TokenModel(depth=2).train()
    wrapped = remat.checkpoint(model, _tokens(2, 8), budget=10**9, repeats=1, warmup=0)
    for k, length in enumerate((10, 12, 5, 9, 12, 7)):
        inputs = _tokens(2, length, seed=k)
        plain = _plain_step(model, inputs, seed=k)
        replayed = _remat_step(wrapped, model, inputs, seed=k)
        assert torch.equal(plain[0], replayed[0]), length
        assert all(torch.equal(a, b) for a, b in zip(plain[1], replayed[1], strict=True)), length
    assert wrapped.retraces == 1
    general = wrapped.plan_for(**_tokens(2, 10)).cut.chain
    assert general.dynamic is not None and {(0, 1), (1, 1)} <= general.dynamic.dims
    assert all(wrapped.plan_for(**_tokens(2, n)).cut.chain is general for n in (12, 5, 9, 7))
    # one proof on one more length, no more: the traced call cut down to 5 tokens (NOTE [Sizes a
    # general cut is sampled at]); it is measured, as the 10 tokens cut down to 2, 7 and 3 are
    # (x/4, 3x/4, 3x/8: x/8 and x/16 are under 2 tokens), and then no more (4 sizes): every other
    # length inside 2..12 is predicted
    assert proofs == [torch.Size([2, 5])], proofs
    measured = {n for n in (2, 3, 4, 5, 6, 7, 9, 11) if wrapped.plan_for(**_tokens(2, n)).cut.measured}
    assert measured == {2, 3, 5, 7}
    assert all(wrapped.plan_for(**_tokens(2, n)).cut.chain is general for n in (2, 3, 4, 6, 11))
    wrapped(**_tokens(2, 1))["loss"].backward()  # one token: dynamo assumed a length of at least 2
    assert wrapped.retraces == 2 and wrapped.plan_for(**_tokens(2, 1)).cut.chain is not general


def test_an_input_that_requires_grad_is_cut_on_its_own_and_gets_the_plain_gradient():
    """Which inputs require grad is part of a call's signature: an image batch that needs none is
    profiled without g_0 (plain autograd computes none), a call whose input requires grad gets its
    own cut that computes it, and the trace, proof and profile of that cut leave the user's
    tensor alone (its gradient is the one step's, not three times it)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 16))
    x = torch.randn(32, 16)
    wrapped = remat.checkpoint(model, (x,), budget=1.0, loss=lambda out: out.pow(2).mean(), repeats=1, warmup=0)
    assert wrapped.plan_for(x).cut.profile.metadata["input_grad"] is False
    leaf = x.clone().requires_grad_()
    model(leaf).pow(2).mean().backward()
    want = [leaf.grad.clone(), *(p.grad.clone() for p in model.parameters())]
    for p in model.parameters():
        p.grad = None
    mine = x.clone().requires_grad_()
    wrapped(mine).backward()
    assert wrapped.retraces == 1
    assert wrapped.plan_for(mine).cut.profile.metadata["input_grad"] is True
    assert all(torch.equal(a, b) for a, b in zip([mine.grad, *(p.grad for p in model.parameters())], want, strict=True))


@pytest.mark.slow
def test_a_torchvision_loop_with_two_image_sizes_and_a_ragged_last_batch():
    """ResNet-50's bottleneck layout (one block per layer) on batches of 4 at 32 and 48 pixels and a
    ragged last batch of 3 at each: every step's gradients equal to plain PyTorch's (BatchNorm in
    train mode). Traced after the example: at 32 pixels, general in the image size; at (3, 32),
    general in the batch too; at (3, 48), because the trace at 32 pixels assumed a size of at most
    32 (its guard: the last feature map 1 x 1 there), general in both; that cut serves (4, 40)."""
    from tests.api.test_real_models import tv_resnet50

    torch.manual_seed(0)
    model = tv_resnet50().train()
    loss = nn.functional.cross_entropy
    generator = torch.Generator().manual_seed(0)
    shapes = [(4, 48), (4, 32), (4, 48), (3, 32), (3, 48), (4, 40)]
    batches = [(torch.randn(b, 3, s, s, generator=generator), torch.randint(0, 10, (b,), generator=generator))
               for b, s in shapes]  # fmt: skip
    wrapped = remat.checkpoint(model, batches[0][0], budget="90%", loss=loss, target=batches[0][1], repeats=1, warmup=0)
    for k, (x, y) in enumerate(batches):
        model.zero_grad(set_to_none=True)
        loss(model(x), y).backward()
        want = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        wrapped(x, target=y).backward()
        assert all(torch.equal(a, p.grad) for a, p in zip(want, model.parameters(), strict=True)), shapes[k]
    assert wrapped.retraces == 3
    both = wrapped.plan_for(batches[4][0], target=batches[4][1]).cut.chain
    assert {(0, 0), (0, 2), (0, 3), (1, 0)} <= both.dynamic.dims  # the images' batch, height, width; the labels'
    assert not both.dynamic.accepts([torch.empty(4, 3, 32, 32), torch.empty(3)])  # batch sizes differ
    assert wrapped.plan_for(batches[5][0], target=batches[5][1]).cut.chain is both


def test_a_call_cut_down_along_its_general_dimensions():
    """The calls a general cut is sampled at (NOTE [Sizes a general cut is sampled at]): each tensor
    narrowed along its general dimensions, contiguous, of its own, requiring grad as it did, and
    two inputs that were one tensor still one."""
    from remat.api.shapes import _cut_down

    ids = torch.arange(24).reshape(2, 12)
    image = torch.randn(3, 8, 8, requires_grad=True)
    args, kwargs, target = _cut_down(
        ((image,), {"input_ids": ids, "labels": ids}, None), {(0, 1), (0, 2), (1, 1), (2, 1)}, 5
    )
    assert args[0].shape == (3, 5, 5) and args[0].is_contiguous() and args[0].requires_grad
    assert torch.equal(args[0], image.detach()[:, :5, :5]) and args[0].data_ptr() != image.data_ptr()
    assert kwargs["input_ids"] is kwargs["labels"] and torch.equal(kwargs["input_ids"], ids[:, :5])
    assert target is None
