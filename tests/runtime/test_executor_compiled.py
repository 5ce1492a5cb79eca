"""Compiled stages (remat.runtime.compiled): checked against the eager stages before use, profiled
and replayed compiled (gradients within the stated tolerance of the plain model's, the allocator's
peak within 2% of the prediction, middle options included), no recompilation after the check, and
refusals (a wrong compiled stage, a profile measured with other kernels, an unchecked option).

The inductor tests need a C compiler; they are skipped cleanly where inductor cannot compile. The
others use dynamo's ``eager`` backend or a deliberately wrong backend (no compiler needed)."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil

import pytest
import torch
from torch import nn

from remat.profile.chain import profile_chain
from remat.replay.chain import RematChain
from remat.replay.report import step_allocator_peak
from remat.runtime.compiled import TOLERANCE, CompiledStage, compile_chain
from remat.schedules import RematError, load_profile, load_schedule, save_profile, simulate
from remat.solver import solve
from remat.solver.chain.optimal import optimal_front
from remat.solver.chain.store_all import store_all_peak
from remat.zoo.gpt2 import GPT2

CPU = torch.device("cpu")


@functools.cache
def _inductor_reason() -> str | None:
    """Why inductor cannot compile here (None: it can)."""
    if shutil.which("gcc") is None and shutil.which("cc") is None and shutil.which("clang") is None:
        return "no C compiler (inductor's CPU backend needs one)"
    try:
        torch._dynamo.reset()
        torch.compile(lambda t: (t * 2).sin())(torch.ones(4))
    except Exception as error:  # noqa: BLE001 - any failure means: skip
        return f"inductor cannot compile here: {type(error).__name__}"
    return None


needs_inductor = pytest.mark.skipif("_inductor_reason() is not None", reason="inductor cannot compile here")


def _gpt(layers: int = 2) -> nn.Module:
    torch.manual_seed(0)
    return GPT2(layers=layers, dim=32, heads=4, context=32, vocab=40, dropout=0.0).train()


def _input() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(2, 32, 32)


def _grads(module: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    for p in module.parameters():
        p.grad = None
    leaf = x.clone().requires_grad_()
    out = module(leaf)
    out.pow(2).mean().backward()
    return [leaf.grad, *(p.grad.clone() for p in module.parameters())]


def _close(got: list[torch.Tensor], want: list[torch.Tensor], tolerance: float) -> bool:
    return all((a - b).abs().max() <= tolerance * b.abs().max() for a, b in zip(got, want, strict=True))


def _wrong_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A dynamo backend that computes the graph, then adds 1e-2 to every float output."""

    def run(*args):
        outputs = gm(*args)
        shift = [o + 1e-2 if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in outputs]
        return type(outputs)(shift) if isinstance(outputs, tuple) else shift

    return run


def _unique_graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def test_a_wrong_compiled_stage_is_refused_with_its_name():
    torch._dynamo.reset()
    model, x = _gpt(), _input()
    expected = r"stage 'embed': compiled \(_wrong_backend\) no-grad forward differs from the eager stage.*refused"
    with pytest.raises(RematError, match=expected):
        compile_chain(model, x, backend=_wrong_backend)


@pytest.mark.slow
def test_the_tolerance_is_relative_to_the_tensors_scale():
    """A wrong backend's 1e-2 shift passes a tolerance above it, relative to the outputs' scale."""
    torch._dynamo.reset()
    model, x = _gpt(), _input()
    compile_chain(model, x, backend=_wrong_backend, tolerance=10.0)  # accepted: 1e-2 << 10 x scale
    with pytest.raises(RematError, match="tolerance 1e-06"):
        compile_chain(model, x, backend=_wrong_backend, tolerance=1e-6)


@pytest.mark.slow
def test_profiles_and_chains_must_agree_on_compilation():
    torch._dynamo.reset()
    model, x = _gpt(), _input()
    compiled = compile_chain(model, x, backend="eager")
    eager_profile = profile_chain(model, x, repeats=1, warmup=0)
    compiled_profile = profile_chain(compiled, x, repeats=1, warmup=0)
    assert compiled_profile.metadata["compiled"] == "torch.compile (eager)"
    assert "compiled" not in eager_profile.metadata
    schedule = solve(compiled_profile, store_all_peak(compiled_profile), "optimal")
    with pytest.raises(RematError, match="measured with torch.compile .eager., but the chain runs eager"):
        RematChain(model, schedule.ops, compiled_profile)
    with pytest.raises(RematError, match="measured with eager stages, but the chain runs torch.compile"):
        RematChain(compiled, solve(eager_profile, store_all_peak(eager_profile), "optimal").ops, eager_profile)


@pytest.mark.slow
def test_an_unchecked_option_is_refused():
    torch._dynamo.reset()
    model, x = _gpt(), _input()
    compiled = compile_chain(model, x, backend="eager")  # options=False: none checked
    stage = compiled.stages[1]
    assert isinstance(stage, CompiledStage)
    with pytest.raises(RematError, match="option 'save linear outputs' was not compiled and checked"):
        stage.remat_option_forward(x.requires_grad_(), "save linear outputs")


def _schedules(profile) -> list[tuple]:
    """Ops of the front's two ends and middle, and a store-all that records every stage that has
    options with its option 1 (so middle options are replayed whatever the front chooses)."""
    front = optimal_front(profile)
    chosen = [solve(profile, p.peak_memory, "optimal").ops for p in (front[0], front[len(front) // 2], front[-1])]
    n = profile.length
    forced = [("F_all", i, 1) if profile.stages[i].options else ("F_all", i) for i in range(n)]
    return [*chosen, tuple(forced + [("B", i) for i in reversed(range(n))])]


def _replay_checks(model: nn.Module, compiled, x: torch.Tensor, profile) -> None:
    """Replay the schedules: gradients within TOLERANCE of the plain model's, allocator peak within
    2% of the prediction."""
    want = _grads(model, x)
    for ops in _schedules(profile):
        wrapped = RematChain(compiled, ops, profile)
        assert _close(_grads(wrapped, x), want, TOLERANCE)
        leaf = x.clone().requires_grad_()
        measured = step_allocator_peak(model, lambda w=wrapped, v=leaf: w(v).pow(2).mean(), CPU)
        predicted = simulate(profile, ops, timeline=False).peak_memory
        # the step's own loss (pow, mean) sits beside the simulated peak: at most two outputs' bytes
        extra = 2 * x.untyped_storage().nbytes()
        assert predicted * 0.98 <= measured + profile.input_size <= predicted * 1.02 + extra, ops


@pytest.mark.slow
def test_eager_backend_replays_exactly_and_never_recompiles():
    """dynamo's eager backend runs the same kernels: the plumbing (grad modes, options, replay)
    without a C compiler. After compile_chain's check, profiling and replay add no graph."""
    torch._dynamo.reset()
    model, x = _gpt(), _input()
    compiled = compile_chain(model, x, options=True, backend="eager")
    graphs = _unique_graphs()
    profile = profile_chain(compiled, x, repeats=1, warmup=1, options=True)
    assert any(stage.options for stage in profile.stages)
    _replay_checks(model, compiled, x, profile)
    assert _unique_graphs() == graphs


@pytest.mark.slow
@needs_inductor
def test_inductor_stages_replay_within_tolerance_and_the_allocator_meets_the_prediction():
    torch._dynamo.reset()
    model, x = _gpt(), _input()
    compiled = compile_chain(model, x, options=True)
    graphs = _unique_graphs()
    profile = profile_chain(compiled, x, repeats=1, warmup=1, options=True)
    assert profile.metadata["compiled"] == "torch.compile (inductor)"
    assert any(stage.options for stage in profile.stages)
    _replay_checks(model, compiled, x, profile)
    assert _unique_graphs() == graphs


@pytest.mark.slow
@needs_inductor
def test_checkpoint_compile_trains_a_cut_model_within_tolerance():
    """``remat.checkpoint(..., compile=True)``: a model cut from its traced step, compiled stages,
    the loss and every gradient within TOLERANCE of the plain model's."""
    import remat

    torch._dynamo.reset()
    model, x = _gpt(), _input()
    wrapped = remat.checkpoint(model, x, budget=0.8, loss=lambda out: out.pow(2).mean(), compile=True)
    assert wrapped.profile.metadata["compiled"] == "torch.compile (inductor)"
    want = _grads(model, x)
    for p in model.parameters():
        p.grad = None
    leaf = x.clone().requires_grad_()
    wrapped(leaf).backward()
    assert _close([leaf.grad, *(p.grad for p in model.parameters())], want, TOLERANCE)


@pytest.mark.slow
@needs_inductor
def test_inductor_dropout_draws_other_numbers_and_is_refused():
    """Inductor's random ops use its own generator: a stage with active dropout is refused."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5)), nn.Linear(16, 4))
    with pytest.raises(RematError, match="stage .1.: compiled .inductor. no-grad forward differs.*active dropout"):
        compile_chain(model.train(), torch.randn(8, 16))
    compile_chain(model.eval(), torch.randn(8, 16))  # no dropout in eval mode: accepted


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    from remat.cli import main

    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


_MLP = ["--model", "remat.zoo.small:mlp", "--input-shape", "16,64", "--device", "cpu"]


@pytest.mark.slow
@needs_inductor
def test_cli_profiles_and_executes_compiled_stages_and_refuses_a_mixed_pair(tmp_path, capsys):
    """``remat profile --compile`` writes a compiled profile; ``remat execute --compile`` replays a
    recomputing schedule on compiled stages with the allocator's peak within 2% of the prediction;
    the flag and the profile must agree (exit 2, one line, naming the flag)."""
    torch._dynamo.reset()
    compiled, eager, schedule = tmp_path / "c.json", tmp_path / "e.json", tmp_path / "s.json"
    code, out, err = _cli(["profile", *_MLP, "--repeats", "1", "--compile", "-o", str(compiled)], capsys)
    assert code == 0, err
    assert "--compile: compiling every stage" in out
    profile = load_profile(compiled)
    assert profile.metadata["compiled"] == "torch.compile (inductor)"
    code, _, err = _cli(
        ["solve", str(compiled), "--budget", "75%", "--strategy", "optimal", "-o", str(schedule)], capsys
    )
    assert code == 0, err
    assert any(op[0] == "F_n" for op in load_schedule(schedule).ops)  # something is recomputed
    report = tmp_path / "r.json"
    run = ["execute", *_MLP, "--schedule", str(schedule), "--steps", "1"]
    code, out, err = _cli([*run, "--profile", str(compiled), "--compile", "--json", str(report)], capsys)
    assert code == 0, err
    peak = json.loads(report.read_text())["peak_memory"]
    assert abs(peak["measured"] - peak["predicted"]) <= 0.02 * peak["predicted"]

    code, _, err = _cli([*run, "--profile", str(compiled)], capsys)
    assert code == 2 and "pass --compile to replay it" in err and len(err.strip().splitlines()) == 1
    code, _, err = _cli(["profile", *_MLP, "--repeats", "1", "-o", str(eager)], capsys)
    assert code == 0, err
    code, _, err = _cli([*run, "--profile", str(eager), "--compile"], capsys)
    assert code == 2 and "measured with eager stages; profile with --compile" in err


def test_cli_compile_refuses_graphs(tmp_path, capsys):
    code, _, err = _cli(["profile", *_MLP, "--graph", "--compile", "-o", str(tmp_path / "g.json")], capsys)
    assert code == 2 and "--compile: compiles a chain's stages" in err


def test_cli_compile_checks_the_schedule_before_compiling(tmp_path, capsys):
    """A compiled profile and its schedule for another chain are refused before any stage is
    compiled (seconds per stage), in one line."""
    other = load_profile("examples/resnet_like.json")
    profile, schedule = tmp_path / "p.json", tmp_path / "s.json"
    save_profile(
        dataclasses.replace(other, metadata={**other.metadata, "compiled": "torch.compile (inductor)"}), profile
    )
    code, _, err = _cli(
        ["solve", str(profile), "--budget", "60%", "--strategy", "optimal", "-o", str(schedule)], capsys
    )
    assert code == 0, err
    run = ["execute", *_MLP, "--schedule", str(schedule), "--profile", str(profile), "--compile", "--steps", "1"]
    code, out, err = _cli(run, capsys)
    assert code == 2 and "stages, but the model has" in err and len(err.strip().splitlines()) == 1
    assert "compiling every stage" not in out
