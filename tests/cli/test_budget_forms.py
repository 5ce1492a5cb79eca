"""Every budget form against every entry point (NOTE [One meaning per budget form],
remat/schedules/units.py; docs/formats.md, "Budgets"): each form gives the same bytes of the entry
point's own store-all peak, or the same one-line refusal, in the resolver, ``remat.solver.solve``,
``remat solve --budget``, ``remat.checkpoint``, ``RematModel.with_budget`` and ``remat.compile``."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import remat
from remat.cli import main
from remat.schedules import RematError, load_profile, load_schedule
from remat.schedules.units import resolve_budget
from remat.solver import solve
from remat.solver.budget import reference_peak
from tests.conftest import EXAMPLES

PROFILE = EXAMPLES / "resnet_like.json"
GIB = 2**30

# (form, its bytes as a function of the store-all peak): each form as the API takes it; the CLI gets str(form)
ACCEPTED = [
    (7 * GIB, lambda peak: 7 * GIB),
    (str(7 * GIB), lambda peak: 7 * GIB),
    ("7GiB", lambda peak: 7 * GIB),
    ("7 GiB", lambda peak: 7 * GIB),
    ("7516.192768 MB", lambda peak: 7 * GIB),
    ("90%", lambda peak: peak * 9 // 10),
    (0.9, lambda peak: peak * 9 // 10),
    ("0.9", lambda peak: peak * 9 // 10),
    (" .9 ", lambda peak: peak * 9 // 10),
    ("9e-1", lambda peak: peak * 9 // 10),
    ("100%", lambda peak: peak),
    (1.0, lambda peak: peak),
    ("1.0", lambda peak: peak),
    (0.95, lambda peak: peak * 95 // 100),
]
# (form, what its one-line refusal says)
REFUSED = [
    (1.5, r"budget 1\.5: a fraction of the store-all peak must be in \(0, 1\]; did you mean 150%, or 1\.5GiB\?"),
    ("1.5", r"budget 1\.5: a fraction .* did you mean 150%, or 1\.5GiB\?"),
    ("2.0", r"budget 2\.0: a fraction .* did you mean 200%, or 2\.0GiB, or 2 bytes \(an integer\)\?"),
    ("-5", r"budget -5: is negative; a budget is at least 1 byte"),
    (0.0, r"budget 0\.0: a fraction of the store-all peak must be in \(0, 1\]; a budget is at least 1 byte"),
    ("0%", r"size '0%': is zero; a budget is at least 1 byte"),
    (-5, r"budget -5: is negative"),
    ("-5GB", r"size '-5GB': is negative"),
    ("-0.5", r"budget -0\.5: a fraction .* must be in \(0, 1\]"),
    ("lots", r"size 'lots': expected bytes"),
    ("abc%", r"size 'abc%': 'abc' is not a number"),
    (float("nan"), r"budget nan: not a finite number"),
    (True, r"budget: expected bytes \(123\), a size .* got True"),
    (None, r"budget: expected bytes .* got None"),
]
ALL = [*ACCEPTED, *REFUSED]
IDS = [repr(form) for form, _ in ALL]


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    layers = [m for _ in range(6) for m in (nn.Linear(64, 64), nn.ReLU())]
    return nn.Sequential(*layers, nn.Linear(64, 1))


@pytest.fixture(scope="module")
def wrapped():
    """One remat.checkpoint of a small MLP at "0.9" (with_budget re-solves it for each form, no re-profiling)."""
    return remat.checkpoint(_mlp(), torch.randn(32, 64), budget="0.9", repeats=1, warmup=0)


def _refusal(form) -> str:
    """The one refusal of ``form``, from the resolver, without the name it is given under."""
    with pytest.raises(RematError) as caught:
        resolve_budget(form, 10**9)
    return re.sub(r"^budget:? ?", "", str(caught.value))


def _check(form, expected, call, peak, name: str = "budget") -> None:
    """``call(form)`` gives ``expected(peak)`` bytes, or the resolver's refusal under ``name``."""
    if callable(expected):
        assert call(form) == expected(peak)
        return
    with pytest.raises(RematError) as caught:
        call(form)
    message = str(caught.value)
    assert re.search(expected, message.replace(f"{name} ", "budget ").replace(f"{name}:", "budget:")), message
    assert message.removeprefix(name).lstrip(": ") == _refusal(form)


@pytest.mark.parametrize(("form", "expected"), ALL, ids=IDS)
def test_the_resolver(form, expected):
    _check(form, expected, lambda f: resolve_budget(f, 10**10), 10**10)


@pytest.mark.parametrize(("form", "expected"), ALL, ids=IDS)
def test_solver_solve(form, expected):
    profile = load_profile(PROFILE)
    _check(form, expected, lambda f: solve(profile, f, "optimal").budget, reference_peak(profile))


@pytest.mark.parametrize(("form", "expected"), [row for row in ALL if not isinstance(row[0], (bool, type(None)))])
def test_cli_solve(tmp_path, capsys, form, expected):
    """``remat solve --budget`` (text only: no bool or None on a command line)."""
    out = tmp_path / "s.json"

    def call(text):
        code = main(["solve", str(PROFILE), "--budget", str(text), "--strategy", "optimal", "-o", str(out)])
        err = capsys.readouterr().err
        if code:
            assert code == 2 and err.startswith("remat: error: ") and err.count("\n") == 1, err
            raise RematError(err.removeprefix("remat: error: ").strip())
        return load_schedule(out).budget

    _check(form, expected, call, reference_peak(load_profile(PROFILE)), "--budget")


@pytest.mark.slow
@pytest.mark.parametrize(("form", "expected"), ALL, ids=IDS)
def test_with_budget(wrapped, form, expected):
    _check(form, expected, lambda f: wrapped.with_budget(f).budget, wrapped.store_all_peak)


@pytest.mark.parametrize(("form", "expected"), [(f, e) for f, e in ALL if not callable(e)], ids=repr)
def test_checkpoint_and_compile_refuse_before_any_work(form, expected):
    """A refused form is refused by remat.checkpoint and remat.compile before a profile or a compile."""
    _check(form, expected, lambda f: remat.checkpoint(_mlp(), torch.randn(32, 64), budget=f), 1)
    _check(form, expected, lambda f: remat.compile(_mlp(), budget=f), 1)


@pytest.mark.slow
def test_checkpoint_takes_a_share_of_its_own_store_all_peak(wrapped):
    """remat.checkpoint(budget="0.9"): 90% of the call's store-all peak (was 0 bytes on the CLI's reading)."""
    assert wrapped.budget == wrapped.store_all_peak * 9 // 10


def test_zero_bytes_is_a_budget_no_strategy_meets(capsys):
    """0 (bytes) is kept as bytes, so that the strategy's refusal names the least it can meet."""
    assert resolve_budget(0, 10**9) == resolve_budget("0", 10**9) == 0
    assert main(["solve", str(PROFILE), "--budget", "0", "--strategy", "optimal"]) == 2
    assert "the smallest budget it can meet is" in capsys.readouterr().err
