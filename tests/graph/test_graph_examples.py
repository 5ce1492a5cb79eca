"""The GPT-2-like example graph (examples/make_graph_profiles.py) is the zoo's GPT-2, computed the
same way: the fixed-length attention and positions give bit-identical outputs, and torch.fx
traces the result into a graph profile."""

from __future__ import annotations

import copy
import importlib.util

import torch

from remat.graph.profiler import profile_graph
from remat.zoo import gpt2
from tests.conftest import ROOT


def _make_graph_profiles():
    spec = importlib.util.spec_from_file_location("make_graph_profiles", ROOT / "examples" / "make_graph_profiles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fixed_length_gpt2_equals_the_zoo_model_and_traces():
    make = _make_graph_profiles()
    torch.manual_seed(0)
    original = gpt2.gpt2_tiny(dropout=0.0).eval()
    fixed = make.fixed_length(copy.deepcopy(original), 32, 64).eval()
    x = torch.randn(2, 64, 32)
    with torch.no_grad():
        assert torch.equal(original(x), fixed(x))
    profile = profile_graph(fixed, (2, 64, 32), name="gpt2-tiny-fx", time_source="flops")
    assert profile.size > 2 * len(original.blocks) and any(node.backward for node in profile.nodes)
