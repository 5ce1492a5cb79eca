"""remat.checkpoint's RematModel and remat.compile's RematCompiled name the same bytes alike (issue
44): ``budget``, ``least_peak``, ``store_all_peak``, ``predicted_peak``; the 0.1 names of
RematModel (``least_budget``, ``store_all_budget``) still read, with a DeprecationWarning."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import remat

SHARED = ("budget", "least_peak", "store_all_peak", "predicted_peak")


@pytest.mark.slow  # imports remat.compile's torch._inductor (seconds)
def test_both_doors_have_the_shared_names():
    assert all(isinstance(getattr(remat.RematCompiled, name, None), property) for name in SHARED)
    properties = [name for name in SHARED if name != "budget"]  # RematModel's budget is set, not computed
    assert all(isinstance(getattr(remat.RematModel, name, None), property) for name in properties)


@pytest.mark.slow
def test_the_model_orders_its_peaks_and_reads_the_old_names_with_a_warning():
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(6)]).train()
    store_all = remat.checkpoint(model, torch.randn(16, 32), budget=1.0, repeats=1, warmup=0)
    assert store_all.least_peak < store_all.predicted_peak <= store_all.budget == store_all.store_all_peak
    wrapped = store_all.with_budget((store_all.least_peak + store_all.store_all_peak) // 2)  # measured here
    assert wrapped.least_peak <= wrapped.predicted_peak <= wrapped.budget < wrapped.store_all_peak
    for old, new in (("least_budget", "least_peak"), ("store_all_budget", "store_all_peak")):
        with pytest.warns(DeprecationWarning, match=f"RematModel.{old} is deprecated.*use .{new}"):
            assert getattr(wrapped, old) == getattr(wrapped, new)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn of nothing
        assert [getattr(wrapped, name) for name in SHARED]


@pytest.mark.slow
def test_the_compiled_model_orders_its_peaks_the_same_way():
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4)]).train()
    compiled = remat.compile(model, budget=1.0, times="estimate", measure=False)
    compiled(torch.randn(64, 32)).sum().backward()
    assert compiled.least_peak <= compiled.predicted_peak <= compiled.budget == compiled.store_all_peak
