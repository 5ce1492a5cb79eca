"""Malformed and extreme ``remat`` invocations, tried systematically (every subcommand, option and
input file kind), with the fixtures they need.

``tests/cli/test_fuzz_cli.py`` runs the fast ones (``slow=False``) and asserts exit 2 with one line on
stderr for each (or exit 0 where the input is valid, e.g. extra top-level keys). Run this file as a
script to print the whole table (input, exit status, first stderr line), e.g. against another
checkout: ``PYTHONPATH=/path/to/checkout python tests/cli/cli_cases.py``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

BAD_MODELS = """
import torch
from torch import nn


class Pair(nn.Module):
    def forward(self, x):
        return x * 2, x + 1


def tuple_stage():
    return nn.Sequential(nn.Linear(4, 4), Pair(), nn.Linear(4, 4))


def raises():
    raise ValueError("no weights here")


def not_a_module():
    return 42


class Explodes(nn.Module):
    def forward(self, x):
        raise RuntimeError("stage blew up")


def exploding():
    return nn.Sequential(nn.Linear(4, 4), Explodes())


NOT_CALLABLE = 3
"""

CNN = "remat.zoo.small:cnn"
MLP = "remat.zoo.small:mlp"


@dataclass(frozen=True)
class Case:
    """One invocation: ``argv`` with ``{name}`` placeholders for the fixture paths; ``expect`` the
    exit status it should give (2 = refused with one line); ``slow`` if it runs a model or a solver
    for seconds."""

    argv: tuple[str, ...]
    expect: int = 2
    slow: bool = False

    def render(self, paths: dict[str, str]) -> list[str]:
        return [a.format(**paths) for a in self.argv]


def _chain() -> dict:
    return json.loads((EXAMPLES / "resnet_like.json").read_text())


def _graph() -> dict:
    return json.loads((EXAMPLES / "small_graph.json").read_text())


def _edit(data: dict, path: tuple, value) -> dict:
    data = copy.deepcopy(data)
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()

BAD_PROFILES = {
    "typo_stage_key": (_chain, ("stages", 2, "forward_overhaed"), 10**9),
    "typo_node_key": (_graph, ("nodes", 1, "sizee"), 8),
    "negative_size": (_chain, ("stages", 0, "output_size"), -1),
    "fractional_size": (_chain, ("stages", 0, "saved_size"), 10.5),
    "string_size": (_chain, ("stages", 0, "saved_size"), "10MB"),
    "bool_size": (_chain, ("input_size",), True),
    "nan_time": (_chain, ("stages", 1, "forward_ms"), float("nan")),
    "inf_time": (_chain, ("stages", 1, "backward_ms"), float("inf")),
    "negative_time": (_chain, ("stages", 1, "backward_ms"), -3),
    "saved_lt_output": (_chain, ("stages", 1, "saved_size"), 1),
    "missing_stages": (_chain, ("stages",), _DELETE),
    "missing_forward_ms": (_chain, ("stages", 0, "forward_ms"), _DELETE),
    "empty_stages": (_chain, ("stages",), []),
    "stage_not_object": (_chain, ("stages", 0), [1, 2]),
    "stages_not_list": (_chain, ("stages",), {"a": 1}),
    "wrong_format": (_chain, ("format",), "remat-chain-v9"),
    "no_format": (_chain, ("format",), _DELETE),
    "name_not_string": (_chain, ("name",), 7),
    "metadata_not_object": (_chain, ("metadata",), [1]),
    "node_backward_not_bool": (_graph, ("nodes", 0, "backward"), "yes"),
    "edge_out_of_range": (_graph, ("edges", 0), [0, 99]),
    "edge_self_loop": (_graph, ("edges", 0), [1, 1]),
    "edge_backwards": (_graph, ("edges", 0), [1, 0]),
    "edge_triple": (_graph, ("edges", 0), [0, 1, 2]),
    "edges_missing": (_graph, ("edges",), _DELETE),
    "nodes_empty": (_graph, ("nodes",), []),
    "node_overhead_negative": (_graph, ("nodes", 0, "overhead"), -5),
    "node_recompute_string": (_graph, ("nodes", 0, "recompute"), "no"),
}
# Valid: the top level and metadata may carry extra keys (docs/formats.md).
GOOD_PROFILES = {
    "extra_top_key": (_chain, ("comment",), "made by hand"),
    "extra_metadata_key": (_chain, ("metadata", "note"), "anything"),
    "huge_sizes": (_chain, ("stages", 0, "saved_size"), 2**70),
}


def _schedule(paths: dict) -> dict:
    return json.loads(Path(paths["schedule"]).read_text())


BAD_SCHEDULES = {
    "unknown_op": (("ops", 0), ["F_x", 0]),
    "op_index_out_of_range": (("ops", 0), ["F_ck", 999]),
    "op_not_pair": (("ops", 0), ["F_ck"]),
    "op_index_string": (("ops", 0), ["F_ck", "0"]),
    "ops_not_list": (("ops",), "F_ck 0"),
    "ops_missing": (("ops",), _DELETE),
    "ops_truncated": (("ops",), [["F_ck", 0]]),
    "budget_negative": (("budget",), -1),
    "budget_float": (("budget",), 1.5),
    "wrong_hash": (("profile_sha256",), "0" * 64),
    "predicted_missing": (("predicted",), _DELETE),
    "format_wrong": (("format",), "remat-schedule-v0"),
}


def _cases() -> list[Case]:
    c = Case
    cases: list[Case] = []
    # no command, unknown command, unknown option
    cases += [c(()), c(("nonsense",)), c(("solve",)), c(("solve", "{chain}", "--bogus", "1"))]
    cases += [c(("--help",), 0), c(("--version",), 0), c(("strategies", "extra"))]
    # solve: budgets
    for budget in [
        "-5GB", "-1", "-5%", "1e400%", "inf%", "nan%", "inf", "nan", "1e400", "lots", "", "%", "5 parsecs", "GiB",
        "1e999999999", "0x10", "1,000", "5..5GB", "1" * 120, "0", "10", "0%",
    ]:  # fmt: skip
        cases.append(c(("solve", "{chain}", "--budget", budget)))
    cases += [
        c(("solve", "{chain}", "--budget", "9007199254740995"), 0),
        c(("solve", "{chain}", "--budget", "100%"), 0),
    ]
    cases += [c(("solve", "{chain}", "--budget=-5GB")), c(("solve", "{chain}", "--budget"))]
    # solve: strategies and their options
    cases += [c(("solve", "{chain}", "--strategy", "magic")), c(("solve", "{graph}", "--strategy", "revolve"))]
    cases += [c(("solve", "{chain}", "--strategy", "ilp")), c(("solve", "{chain}", "--strategy", ""))]
    for option, values in {
        "--segments": ["0", "-3", "x", "1.5"],
        "--checkpoints": ["0", "-1", "many"],
        "--slots": ["0", "-3", "1e3", ""],
    }.items():
        cases += [c(("solve", "{chain}", "--budget", "60%", "--strategy", "optimal", option, v)) for v in values]
    cases += [c(("solve", "{chain}", "--strategy", "store-all", "--segments", "2"))]
    cases += [c(("solve", "{chain}", "--strategy", "sequential", "--segments", "999", "--budget", "60%"))]
    cases += [c(("solve", "{chain}", "--strategy", "revolve", "--checkpoints", "1", "--budget", "60%"), 0)]
    for limit in ["inf", "nan", "1e300", "-1", "0", "abc", "-inf", ""]:
        for strategy in ("ilp", "lp-rounding"):
            cases.append(c(("solve", "{graph}", "--budget", "80%", "--strategy", strategy, "--time-limit", limit)))
    cases += [c(("solve", "{chain}", "--strategy", "chen-sqrt", "--time-limit", "5"))]
    # graph strategies' own options: the hierarchical DP's slots, the ILP's formulation
    for v in ["0", "-1", "x", ""]:
        cases.append(c(("solve", "{graph}", "--budget", "80%", "--strategy", "hierarchical", "--slots", v)))
    for v in ["magic", "", "CHECKMATE"]:
        cases.append(c(("solve", "{graph}", "--budget", "80%", "--strategy", "ilp", "--formulation", v)))
    cases += [c(("solve", "{graph}", "--budget", "80%", "--strategy", "hierarchical", "--formulation", "moccasin"))]
    cases += [c(("solve", "{graph}", "--budget", "1", "--strategy", "hierarchical"))]
    cases += [c(("solve", "{graph}", "--budget", "80%", "--strategy", "hierarchical"), 0)]
    # solve: output paths
    for out in ["{d}/missing/s.json", "{d}", "/proc/remat-s.json", "", "{d}/file.json/s.json"]:
        cases.append(c(("solve", "{chain}", "-o", out)))
    # every bad profile through every command that reads one
    for name in BAD_PROFILES:
        cases.append(c(("solve", "{" + name + "}")))
    for name in ("typo_stage_key", "nan_time", "edge_backwards"):
        cases += [c(("pareto", "{" + name + "}")), c(("simulate", "{" + name + "}", "{schedule}"))]
    for name in GOOD_PROFILES:
        cases.append(c(("solve", "{" + name + "}"), 0))
    for name in ("missing", "notjson", "empty", "d", "binary", "json_list", "json_number"):
        cases += [c(("solve", "{" + name + "}")), c(("simulate", "{chain}", "{" + name + "}"))]
    # simulate
    for name in BAD_SCHEDULES:
        cases.append(c(("simulate", "{chain}", "{sched_" + name + "}")))
    cases += [c(("simulate", "{graph}", "{schedule}")), c(("simulate", "{chain}", "{schedule}"), 0)]
    cases += [c(("simulate", "{chain}", "{schedule}", "--plot", p)) for p in ("{d}/t.xyz", "{d}/missing/t.png", "{d}")]
    cases += [c(("simulate", "{chain}"))]
    # pareto
    for option, values in {
        "--points": ["-3", "0", "x"],
        "--slots": ["0", "-1"],
        "--workers": ["0", "-2", "many"],
        "--time-limit": ["inf", "nan", "1e300", "-1", "0"],
    }.items():
        cases += [c(("pareto", "{chain}", option, v)) for v in values]
    cases += [
        c(("pareto", "{chain}", "--strategies", "magic")),
        c(("pareto", "{chain}", "--strategies", ",,")),
    ]
    cases += [c(("pareto", "{graph}", "--strategies", "revolve"))]
    for flag, path in [("-o", "{d}/t.xyz"), ("-o", "{d}/missing/f.png"), ("--csv", "{d}/missing/f.csv")]:
        cases.append(c(("pareto", "{chain}", flag, path)))
    cases += [c(("pareto", "{chain}", "--json", "{d}/missing/f.json")), c(("pareto", "{chain}", "--csv", "{d}"))]
    # profile
    for model, shape in [
        ("nomodule:f", "4,64"), ("remat.zoo.small", "4,64"), ("remat.zoo.small:nope", "4,64"),
        ("badmodels:raises", "4,4"), ("badmodels:not_a_module", "4,4"), ("badmodels:NOT_CALLABLE", "4,4"),
        ("", "4,64"), (MLP, "0,64"), (MLP, "x"), (MLP, "-4,64"), (MLP, ""),
    ]:  # fmt: skip
        cases.append(c(("profile", "--model", model, "--input-shape", shape, "-o", "{d}/p.json")))
    cases += [c(("profile", "--model", MLP, "--input-shape", "16,64", "-o", "{d}/missing/p.json"))]
    cases += [
        c(("profile", "--model", MLP, "--input-shape", "16,64", "--repeats", v, "-o", "{d}/p.json"))
        for v in "0 -3 x".split()
    ]
    cases += [c(("profile", "--model", MLP, "--input-shape", "16,64", "--dtype", "int7", "-o", "{d}/p.json"))]
    cases += [c(("profile", "--model", MLP, "--input-shape", "16,64", "--device", "tpu", "-o", "{d}/p.json"))]
    cases += [c(("profile", "--model", MLP, "--input-shape", "16,64", "--device", "cuda", "-o", "{d}/p.json"))]
    cases += [c(("profile", "--model", MLP, "--input-shape", "16,64", "--time-source", "guess", "-o", "{d}/p.json"))]
    slow = [
        ("profile", "--model", MLP, "--input-shape", "16,32", "-o", "{d}/p.json"),  # wrong width
        ("profile", "--model", CNN, "--input-shape", "8,32,32", "-o", "{d}/p.json"),  # wrong rank
        ("profile", "--model", "badmodels:tuple_stage", "--input-shape", "2,4", "-o", "{d}/p.json"),
        ("profile", "--model", "badmodels:exploding", "--input-shape", "2,4", "-o", "{d}/p.json"),
        ("profile", "--graph", "--model", CNN, "--input-shape", "8,32,32", "-o", "{d}/p.json"),
        ("profile", "--graph", "--model", "badmodels:tuple_stage", "--input-shape", "2,4", "-o", "{d}/p.json"),
        ("execute", "--model", CNN, "--input-shape", "8,32,32", "--schedule", "{cnn_schedule}"),
        ("execute", "--model", CNN, "--input-shape", "4,3,16,16", "--schedule", "{schedule}"),
        ("execute", "--model", MLP, "--input-shape", "16,64", "--schedule", "{cnn_schedule}"),
        ("execute", "--model", "badmodels:tuple_stage", "--input-shape", "2,4", "--schedule", "{three_schedule}"),
        ("execute", "--model", "badmodels:exploding", "--input-shape", "2,4", "--schedule", "{three_schedule}"),
        ("execute", "--model", CNN, "--input-shape", "4,3,16,16", "--schedule", "{graph_schedule}"),
    ]
    cases += [c(argv, 2, True) for argv in slow]
    # execute: option checks before any model runs
    base = ("execute", "--model", CNN, "--input-shape", "4,3,16,16", "--schedule", "{cnn_schedule}")
    cases += [c((*base, "--steps", v)) for v in ("0", "-3", "x")]
    cases += [c((*base, "--plot", "{d}/t.xyz")), c((*base, "--json", "{d}/missing/r.json"))]
    cases += [c((*base[:-1], "{missing}")), c((*base[:-1], "{notjson}")), c((*base, "--profile", "{missing}"))]
    cases += [c(("execute", "--model", CNN, "--schedule", "{cnn_schedule}"))]
    cases += _issue24_cases()
    return cases


def _issue24_cases() -> list[Case]:
    """Issue 24's classes: an output over an input or another output, ``-o`` names written exactly
    or refused, JSON that json.loads would take silently, options that do not apply, and sizes that
    crashed (threads, input shapes, names too long)."""
    c = Case
    cases: list[Case] = []
    # an output that is an input, or another output (same path, ./path, hard link, symbolic link)
    for out in ("{chain_copy}", "{d}/./chain_copy.json", "{chain_hard}", "{chain_sym}"):
        cases.append(c(("solve", "{chain_copy}", "-o", out)))
    cases += [c(("solve", "{chain_sym}", "-o", "{chain_copy}"))]
    cases += [c(("simulate", "{chain}", "{schedule}", "--plot", "{schedule}"))]  # also not an image type
    cases += [c(("simulate", "{chain}", "{schedule_png}", "--plot", "{schedule_png}"))]
    cases += [c(("pareto", "{chain}", "--csv", "{d}/f", "--json", "{d}/f"))]
    cases += [c(("pareto", "{chain}", "--csv", "{d}/f.csv", "--plot", "{d}/f.csv"))]
    cases += [c(("pareto", "{chain_copy}", "--json", "{chain_copy}"))]
    base = ("execute", "--model", CNN, "--input-shape", "4,3,16,16", "--schedule", "{cnn_schedule}")
    cases += [c((*base, "--json", "{cnn_schedule}")), c((*base, "--json", "{d}/r.json", "--plot", "{d}/r.json"))]
    plan = ("plan", "--model", MLP, "--input-shape", "16,64", "--memory", "1GB")
    cases += [c((*plan, "-o", "{d}/p.json", "--save-profile", "{d}/p.json"))]
    # -o names: a folder path, a missing folder, names too long, NUL
    long_name = "x" * 300
    for out in ("{d}/missing/", "{d}/", "{d}/.", "{d}/..", "{d}/" + long_name, "{d}/" + long_name + "/s.json"):
        cases += [c(("solve", "{chain}", "-o", out)), c(("pareto", "{chain}", "--csv", out))]
    cases += [c(("simulate", "{chain}", "{schedule}", "--plot", "{d}/" + long_name + ".png"))]
    cases += [c(("solve", "{chain}", "-o", "{d}/a\0b"))]
    cases += [c(("profile", "--model", MLP, "--input-shape", "16,64", "-o", "{d}/" + long_name))]
    # written exactly as given (checked in test_files_cli.py): no extension -> PNG under that name
    cases += [c(("simulate", "{chain}", "{schedule}", "--plot", "{d}/timeline"), 0)]
    # JSON that json.loads takes silently: duplicate keys, NaN / Infinity / 1e400, nesting too deep
    for name in JSON_TRAPS:
        expect = 0 if name == "deep_metadata" else 2  # free-form metadata may nest as deep as the parser reads
        cases += [c(("solve", "{" + name + "}"), expect), c(("pareto", "{" + name + "}"), expect)]
    for name in SCHEDULE_TRAPS:
        cases.append(c(("simulate", "{chain}", "{" + name + "}")))
    cases += [c((*base[:-1], "{sched_dup_ops}"))]
    # options that do not apply to this input
    for option, value in (("--workers", "2"), ("--time-limit", "3")):
        cases.append(c(("pareto", "{chain}", option, value)))
    for option, value in (("--points", "3"), ("--slots", "3")):
        cases.append(c(("pareto", "{graph}", option, value)))
    cases += [c(("pareto", "{chain}", "--strategies", "optimal", "--points", "3"))]
    cases += [c(("pareto", "{graph}", "--strategies", "store-all", "--time-limit", "3"))]
    for strategy, option, value in (
        ("store-all", "--workers", "2"), ("optimal", "--workers", "2"), ("lp-rounding", "--workers", "2"),
        ("hierarchical", "--time-limit", "3"), ("ilp", "--slots", "4"),
    ):  # fmt: skip
        cases.append(c(("solve", "{graph}", "--budget", "80%", "--strategy", strategy, option, value)))
    cases += [c(("solve", "{chain}", "--strategy", "optimal", "--workers", "2"))]
    for v in ("0", "-1", "x", "1000000"):
        cases.append(c(("solve", "{graph}", "--strategy", "ilp", "--workers", v)))
        cases.append(c(("pareto", "{graph}", "--workers", v)))
    prof = ("profile", "--model", MLP, "--input-shape", "16,64", "-o", "{d}/p.json")
    cases += [c((*prof, "--time-source", "flops")), c((*prof, "--time-source", "measured"))]
    cases += [c((*plan, "--meta", "--device", "cpu")), c((*plan, "--device", "cpu"))]
    # sizes that crashed: torch threads, inputs no device can hold
    cases += [c((*prof, "--threads", v)) for v in ("100000", "4096", str(2**64))]
    for shape in ("1099511627776,64", f"{2**40},{2**40}", f"{2**70},64"):
        cases.append(c(("profile", "--model", MLP, "--input-shape", shape, "-o", "{d}/p.json")))
        cases.append(c((*base[:3], "--input-shape", shape, *base[5:])))
    # a profile far larger than 2**100 bytes: its default budget (100%) is its own store-all peak
    cases += [c(("solve", "{huge_profile}"), 0), c(("solve", "{huge_profile}", "--budget", "100%"), 0)]
    cases += [c(("solve", "{huge_profile}", "--budget", "150%"))]
    return cases


def _with_trailer(text: str, trailer: str) -> str:
    """``text`` (a JSON object) with ``trailer`` inserted before its closing brace."""
    return text.rstrip().removesuffix("}") + trailer + "}"


def _stage(name: str) -> str:
    return f'{{"name": "{name}", "forward_ms": 1, "backward_ms": 1, "output_size": 1, "saved_size": 1}}'


def _chain_text() -> str:
    return (EXAMPLES / "resnet_like.json").read_text()


# Profiles that json.loads would take without a word; each must be refused with its path.
JSON_TRAPS = {
    "dup_stages": lambda: _with_trailer(_chain_text(), f', "stages": [{_stage("only")}]'),
    "dup_format": lambda: _with_trailer(_chain_text(), ', "format": "remat-chain-v1"'),
    "dup_in_stage": lambda: _chain_text().replace('"forward_ms":', '"forward_ms": 0.5, "forward_ms":', 1),
    "nan_literal": lambda: _chain_text().replace('"forward_ms": ', '"forward_ms": NaN, "x_ms": ', 1),
    "infinity_literal": lambda: _with_trailer(_chain_text(), ', "comment": -Infinity'),
    "huge_float": lambda: _with_trailer(_chain_text(), ', "comment": 1e400'),
    "nan_in_metadata": lambda: _chain_text().replace('"metadata": {', '"metadata": {"x": NaN, ', 1),
    "deep_nesting": lambda: "[" * 100_000 + "]" * 100_000,
    "deep_object": lambda: '{"a":' * 50_000 + "1" + "}" * 50_000,
    "deep_metadata": lambda: _chain_text().replace(
        '"metadata": {', '"metadata": {"x": ' + "[" * 900 + "]" * 900 + ", ", 1
    ),
}


def _schedule_text(paths: dict) -> str:
    return Path(paths["schedule"]).read_text()


SCHEDULE_TRAPS = {
    "sched_dup_ops": lambda paths: _with_trailer(_schedule_text(paths), ', "ops": [["F_ck", 0]]'),
    "sched_nan_ms": lambda paths: re.sub(r'"compute_ms": [^,}]+', '"compute_ms": NaN', _schedule_text(paths), count=1),
    "sched_inf_ms": lambda paths: re.sub(r'"recompute_ms": [^,}]+', '"recompute_ms": Infinity', _schedule_text(paths)),
    "sched_dup_budget": lambda paths: _with_trailer(_schedule_text(paths), ', "budget": 1'),
}


CASES = _cases()


def make_fixtures(folder: Path) -> dict[str, str]:
    """Write every file the cases name into ``folder``; returns the placeholder -> path map."""
    from remat.schedules import load_profile, save_schedule
    from remat.solver import solve

    folder.mkdir(parents=True, exist_ok=True)
    paths = {"d": str(folder), "chain": str(EXAMPLES / "resnet_like.json"), "graph": str(EXAMPLES / "small_graph.json")}
    for name, (base, path, value) in {**BAD_PROFILES, **GOOD_PROFILES}.items():
        target = folder / f"{name}.json"
        target.write_text(json.dumps(_edit(base(), path, value)))
        paths[name] = str(target)
    chain = load_profile(paths["chain"])
    schedule = solve(chain, chain.activation_size(0) * 10**6, "store-all")
    paths["schedule"] = str(folder / "schedule.json")
    save_schedule(schedule, paths["schedule"])
    graph = load_profile(paths["graph"])
    paths["graph_schedule"] = str(folder / "graph_schedule.json")
    save_schedule(solve(graph, 10**12, "store-all"), paths["graph_schedule"])
    from remat.schedules import ChainProfile, Stage

    for name, stages in (("cnn_schedule", 6), ("three_schedule", 3)):  # zoo cnn: 6 stages; badmodels: 3
        like = ChainProfile(name, 1, tuple(Stage(f"s{i}", 1.0, 1.0, 1, 1) for i in range(stages)))
        paths[name] = str(folder / f"{name}.json")
        save_schedule(solve(like, 10**6, "store-all"), paths[name])
    for name, (path, value) in BAD_SCHEDULES.items():
        target = folder / f"sched_{name}.json"
        target.write_text(json.dumps(_edit(_schedule(paths), path, value)))
        paths["sched_" + name] = str(target)
    paths["missing"] = str(folder / "missing.json")
    for name, text in {"notjson": "{nope", "empty": "", "json_list": "[1, 2]", "json_number": "3"}.items():
        (folder / f"{name}.json").write_text(text)
        paths[name] = str(folder / f"{name}.json")
    for name, text in JSON_TRAPS.items():
        (folder / f"{name}.json").write_text(text())
        paths[name] = str(folder / f"{name}.json")
    for name, text in SCHEDULE_TRAPS.items():
        (folder / f"{name}.json").write_text(text(paths))
        paths[name] = str(folder / f"{name}.json")
    _link_fixtures(folder, paths)
    (folder / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    paths["binary"] = str(folder / "binary.json")
    (folder / "file.json").write_text("{}")
    (folder / "badmodels.py").write_text(BAD_MODELS)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return paths


def _link_fixtures(folder: Path, paths: dict[str, str]) -> None:
    """A copy of the chain profile with a hard and a symbolic link to it, a schedule named like an
    image, and a profile whose sizes are 2**100 times the example's."""
    copy_path = folder / "chain_copy.json"
    copy_path.write_text(_chain_text())
    for name, make in (("chain_hard", os.link), ("chain_sym", os.symlink)):
        link = folder / f"{name}.json"
        if not link.exists():
            make(copy_path, link)
        paths[name] = str(link)
    paths["chain_copy"] = str(copy_path)
    png = folder / "schedule.png"
    png.write_text(Path(paths["schedule"]).read_text())
    paths["schedule_png"] = str(png)
    huge = _chain()
    huge["input_size"] *= 2**100
    for stage in huge["stages"]:
        for key, value in list(stage.items()):
            if isinstance(value, int) and not isinstance(value, bool):
                stage[key] = value * 2**100
    (folder / "huge_profile.json").write_text(json.dumps(huge))
    paths["huge_profile"] = str(folder / "huge_profile.json")


def run_case(argv: list[str]) -> tuple[int | str, str, str]:
    """Run ``remat.cli.main(argv)`` in-process: (exit status or 'traceback', stdout, stderr)."""
    from remat.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 2
        except Exception:  # noqa: BLE001 - what the table is looking for
            traceback.print_exc(file=err)
            code = "traceback"
    return code, out.getvalue(), err.getvalue()


def classify(code, stderr: str) -> str:
    """'ok', 'clean' (exit 2, one 'remat: error:' line), 'traceback', or 'other: ...'."""
    if code == "traceback" or "Traceback" in stderr:
        return "traceback"
    if code == 0:
        return "ok"
    lines = stderr.strip().splitlines()
    if code == 2 and len(lines) == 1 and lines[0].startswith("remat: error: "):
        return "clean"
    return f"other (exit {code}, {len(lines)} lines)"


def main() -> None:
    import tempfile

    os.environ.setdefault("TQDM_DISABLE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_fixtures(Path(tmp))
        print("| # | input | result | stderr (first line) |\n|---|---|---|---|")
        for number, case in enumerate(CASES, 1):
            argv = case.render(paths)
            code, _, err = run_case(argv)
            shown = " ".join(argv).replace(tmp, "T").replace(str(ROOT) + "/", "")
            first = (err.strip().splitlines() or [""])[-1 if code == "traceback" else 0][:150]
            print(f"| {number} | `remat {shown}` | {classify(code, err)} | {first.replace('|', '/')} |", flush=True)


if __name__ == "__main__":
    main()
