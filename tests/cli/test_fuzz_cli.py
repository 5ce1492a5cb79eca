"""Bad input through the real entry point (``remat.cli.main``, in-process): every malformed
profile, schedule or option gives exit status 2 and exactly one ``remat: error:`` line on
stderr, never a traceback; valid input gives 0.

The systematic list is ``tests/cli/cli_cases.py`` (its fast cases run here); hypothesis then mutates
profiles, schedules and option strings at random.
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli.cli_cases import CASES, EXAMPLES, classify, make_fixtures, run_case

FAST = [case for case in CASES if not case.slow]
SLOW = [case for case in CASES if case.slow]
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def paths():
    with tempfile.TemporaryDirectory() as folder:
        yield make_fixtures(Path(folder))


def _assert_clean(code, out: str, err: str, argv) -> None:
    verdict = classify(code, err)
    assert verdict in ("ok", "clean"), f"{argv}: {verdict}\n{err}"
    if verdict == "clean":
        assert err.count("\n") == 1, err


@pytest.mark.slow
@pytest.mark.parametrize("case", FAST, ids=[" ".join(c.argv)[:80] for c in FAST])
def test_each_listed_invocation(paths, case):
    argv = case.render(paths)
    code, out, err = run_case(argv)
    _assert_clean(code, out, err, argv)
    assert code == case.expect, f"{argv}: exit {code}, expected {case.expect}: {err}"


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=[" ".join(c.argv)[:80] for c in SLOW])
def test_each_listed_model_invocation(paths, case):
    """The cases that run a model: its failure is one line naming the stage or module."""
    argv = case.render(paths)
    code, out, err = run_case(argv)
    _assert_clean(code, out, err, argv)
    assert code == case.expect, f"{argv}: exit {code}, expected {case.expect}: {err}"
    if "failed (" in err:
        assert "in " in err.split("failed (")[1]  # names the module it failed in


def test_the_list_is_systematic():
    assert len(CASES) >= 130
    for command in ("solve", "simulate", "pareto", "profile", "execute", "strategies"):
        assert any(c.argv and c.argv[0] == command for c in CASES), command


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from([2**2000, -(2**2000), 2**63, 2**64 + 1, 1e308, 2.0**53 + 2, 1e-320]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6,
)


def _mutate(data, choice, value):
    """Replace, delete or add at a path chosen by ``choice`` (a list of ints) in a JSON tree."""
    data = copy.deepcopy(data)
    target = data
    for step in choice[:-1]:
        children = list(target.keys()) if isinstance(target, dict) else list(range(len(target)))
        if not children:
            break
        key = children[step % len(children)]
        if not isinstance(target[key], (dict, list)) or not target[key]:
            break
        target = target[key]
    keys = list(target.keys()) if isinstance(target, dict) else list(range(len(target)))
    action = choice[-1] % 3
    if action == 0 and keys:
        target[keys[choice[0] % len(keys)]] = value
    elif action == 1 and keys:
        del target[keys[choice[0] % len(keys)]]
    elif isinstance(target, dict):
        target[f"k{choice[0]}"] = value
    else:
        target.append(value)
    return data


def _write(folder: Path, data) -> str:
    path = folder / "fuzz.json"
    path.write_text(json.dumps(data, allow_nan=True))
    return str(path)


@pytest.mark.slow
@settings(FUZZ, max_examples=80)
@given(
    base=st.sampled_from(["resnet_like.json", "small_graph.json"]),
    choice=st.lists(st.integers(min_value=0, max_value=50), min_size=2, max_size=5),
    value=JSON_VALUES,
)
def test_malformed_profiles(tmp_path, base, choice, value):
    data = _mutate(json.loads((EXAMPLES / base).read_text()), choice, value)
    argv = ["solve", _write(tmp_path, data), "--budget", "60%", "--strategy", "chen-greedy"]
    _assert_clean(*run_case(argv), argv)


@pytest.mark.slow
@FUZZ
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["F_ck", "F_n", "F_all", "B", "compute", "free", "F_x", ""]), st.integers(-2, 20)),
        max_size=40,
    ),
    extra=st.dictionaries(st.sampled_from(["budget", "predicted", "profile", "strategy"]), JSON_VALUES, max_size=2),
)
def test_malformed_schedules(tmp_path, paths, ops, extra):
    schedule = json.loads(Path(paths["schedule"]).read_text())
    schedule["ops"] = [list(op) for op in ops]
    schedule.update(extra)
    argv = ["simulate", paths["chain"], _write(tmp_path, schedule)]
    code, out, err = run_case(argv)
    _assert_clean(code, out, err, argv)
    assert code in (0, 1, 2)  # 1: the schedule is valid but exceeds its own budget (said on one line)


OPTION_TEXT = (
    st.text(max_size=12)
    | st.integers(min_value=-(10**30), max_value=10**30).map(str)
    | st.floats(allow_nan=True, allow_infinity=True).map(repr)
    | st.sampled_from(["-5GB", "1e400%", "inf", "-inf", "nan", "0", "1e-300", "--", "-", "%", "40 %", "1_000"])
)


@FUZZ
@given(
    option=st.sampled_from(["--budget", "--segments", "--checkpoints", "--slots"]),
    text=OPTION_TEXT,
)
def test_random_chain_option_strings(paths, option, text):
    strategy = {"--segments": "sequential", "--checkpoints": "revolve", "--slots": "optimal"}.get(option, "chen-sqrt")
    if option == "--slots" and text.strip().isdigit() and int(text) > 2000:
        text = "2000"  # a valid but huge table is slow, not malformed
    argv = ["solve", paths["chain"], "--strategy", strategy, option, text]
    _assert_clean(*run_case(argv), argv)


@pytest.mark.slow
@FUZZ
@given(text=OPTION_TEXT, strategy=st.sampled_from(["ilp", "lp-rounding"]))
def test_random_time_limits(paths, text, strategy):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and value > 2:
        text = "2"  # a valid long limit only waits; the checks are what is fuzzed
    argv = ["solve", paths["graph"], "--budget", "90%", "--strategy", strategy, "--time-limit", text]
    _assert_clean(*run_case(argv), argv)


@FUZZ
@given(option=st.sampled_from(["--points", "--workers", "--time-limit"]), text=OPTION_TEXT)
def test_random_pareto_options(paths, option, text):
    # each option's check runs while the arguments are parsed: no front is computed for a bad one
    if option == "--points" and text.strip().isdigit() and int(text) > 30:
        text = "30"  # a valid but long sweep is slow, not malformed
    argv = ["pareto", paths["chain"], option, text, "--strategies", "store-all"]
    code, out, err = run_case(argv)
    _assert_clean(code, out, err, argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["solve", "{typo_stage_key}"], "stages[2].forward_overhaed: unknown key (did you mean 'forward_overhead'?)"),
        (["solve", "{typo_node_key}"], "nodes[1].sizee: unknown key (did you mean 'size'?)"),
        (["solve", "{chain}", "--budget", "-5GB"], "--budget: size '-5GB': is negative"),
        (["solve", "{chain}", "--budget", "1e400%"], "too large"),
        (["solve", "{graph}", "--strategy", "ilp", "--time-limit", "inf"], "must be a finite number of seconds"),
        (["solve", "{graph}", "--strategy", "lp-rounding", "--time-limit", "-1"], "must be a positive number"),
        (["pareto", "{chain}", "--points", "-3"], "--points: must be at least 1, got -3"),
        (["pareto", "{chain}", "--workers", "0"], "--workers: must be at least 1, got 0"),
        (["pareto", "{chain}", "--plot", "{d}/t.xyz"], "unsupported image type '.xyz'"),
        (["pareto", "{chain}", "--csv", "{d}/missing/f.csv"], "directory '{d}/missing' does not exist"),
        (["profile", "--model", "m:f", "--input-shape", "4", "--repeats", "-3", "-o", "{d}/p.json"], "at least 1"),
    ],
)
def test_messages_say_what_is_wrong(paths, argv, message):
    code, out, err = run_case([a.format(**paths) for a in argv])
    assert code == 2 and err.count("\n") == 1
    assert message.format(**paths) in err, err


def test_extra_top_level_keys_stay_allowed(paths):
    code, out, err = run_case(["solve", paths["extra_top_key"]])
    assert code == 0, err


def test_help_states_the_time_limit_margin(capsys):
    from remat.cli import main

    assert main(["solve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "seconds for the whole solve, every phase included (ends within the limit + 1 s + 5%)" in text
