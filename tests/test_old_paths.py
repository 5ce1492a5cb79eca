"""The rooms of docs/architecture.md replaced the flat remat/executor/ folder; every old module path
is an alias of the module that moved (the same module object, so isinstance checks, monkeypatches
and zoo specs behave alike), and the names the docs and the README reach are still there."""

from __future__ import annotations

import importlib

import pytest

MOVED = {
    "allocator": "remat.measure.allocator",
    "memory": "remat.measure.memory",
    "chain": "remat.trace.chain",
    "cut": "remat.trace.cut",
    "branches": "remat.trace.branches",
    "fuse": "remat.trace.fuse",
    "proof": "remat.trace.proof",
    "loading": "remat.models.loading",
    "hub": "remat.models.hub",
    "compat": "remat.models.compat",
    "replay_core": "remat.runtime.core",
    "options_policy": "remat.runtime.policies",
    "compiled": "remat.runtime.compiled",
    "profiler": "remat.profile.chain",
    "options_profile": "remat.profile.options",
    "batch_profiles": "remat.profile.batch",
    "flops": "remat.profile.flops",
    "graph_profile": "remat.graph.profile",
    "replay": "remat.replay.chain",
    "graph_replay": "remat.replay.graph",
    "measure": "remat.replay.report",
    **{f"zoo.{name}": f"remat.zoo.{name}" for name in ("gpt2", "lstm", "preact_resnet", "resnet18", "small", "vision")},
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_executor_path_is_the_moved_module(old):
    assert importlib.import_module(f"remat.executor.{old}") is importlib.import_module(MOVED[old])


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("remat.executor.profiler", "profile_chain"),
        ("remat.executor.profiler", "check_profile_matches"),
        ("remat.executor.replay", "RematChain"),
        ("remat.executor.measure", "compare"),
        ("remat.executor.measure", "prepare_grads"),
        ("remat.executor.compiled", "compile_chain"),
        ("remat.executor.proof", "cut_model"),
        ("remat.executor.loading", "chain_for"),
        ("remat.executor.graph_profile", "profile_graph"),
        ("remat.executor.allocator", "AllocatorMeter"),
        ("remat.executor.compat", "import_torchvision"),
        ("remat.executor.zoo.small", "cnn"),
        ("remat.solver.chain.pareto", "chain_front"),
        ("remat.solver.graph.pareto", "graph_front"),
        ("remat.cli", "main"),
    ],
)
def test_the_names_the_docs_reach_are_still_there(module, name):
    assert callable(getattr(importlib.import_module(module), name))
