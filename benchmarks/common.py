"""What every benchmark shares: the machine a result ran on, one step's allocator peak, interleaved
timing, where results go (``--out``, ``--quick``) and how they are written, and what a benchmark
needs (transformers, a GPU)."""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parent.parent


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine(note: str | None = None) -> dict:
    """Platform, cores, load, package versions and (when the benchmark uses torch) its thread count
    and GPU; ``note`` says what the reader should know about the run (e.g. a shared machine)."""
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "torch": _version("torch"),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    torch = sys.modules.get("torch")  # only report torch's state if the benchmark loaded it
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    if note:
        info["note"] = note
    return info


def add_out(parser: argparse.ArgumentParser, name: str, dest: str = "out") -> None:
    """``--out PATH``, every benchmark's one output flag: by default results/<name>.json, or for a
    ``--quick`` run a temporary folder (:func:`out_path` resolves it)."""
    parser.add_argument(
        "--out", dest=dest, type=Path, help=f"result JSON (default results/{name}.json; --quick: a temporary folder)"
    )


def add_quick(parser: argparse.ArgumentParser, what: str) -> None:
    """``--quick``: the small form ``python -m benchmarks --quick`` runs (``what`` says its sizes)."""
    parser.add_argument("--quick", action="store_true", help="the quick form: " + what.replace("%", "%%"))


def out_path(args: argparse.Namespace, name: str, dest: str = "out") -> Path:
    """The path a run writes: ``--out`` when given, else results/<name>.json, or for a quick run a
    temporary folder (a quick run's numbers are not the benchmark's result)."""
    given = getattr(args, dest)
    if given is not None:
        return Path(given)
    if getattr(args, "quick", False):
        return Path(tempfile.gettempdir()) / "remat-benchmarks" / f"{name}.json"
    return RESULTS / f"{name}.json"


def write_result(data: Any, path: Path, indent: int | None = 2, keep: tuple[str, ...] = (), **kwargs: Any) -> None:
    """``data`` as JSON at ``path`` (folders made, a final newline) and a line saying so; the keys
    ``keep`` of a file already there stay (what a benchmark's other modes wrote: one file per
    benchmark); ``kwargs`` go to ``json.dumps`` (e.g. ``default=str``)."""
    path = Path(path)
    if keep and path.exists():
        old = json.loads(path.read_text())
        data = {**data, **{k: old[k] for k in keep if k in old and k not in data}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, **kwargs) + "\n")
    print(f"wrote {path}")


def update_result(path: Path, key: str, value: Any, indent: int | None = 2) -> None:
    """Set ``key`` of the JSON result at ``path`` to ``value`` (the rest of the file kept): a
    benchmark's second mode writes into the benchmark's one file."""
    path = Path(path)
    data = json.loads(path.read_text()) if path.exists() else {}
    write_result({**data, key: value}, path, indent=indent)


def missing(needs: tuple[str, ...]) -> str | None:
    """Why a benchmark needing ``needs`` ("transformers", "torchvision", "gpu") cannot run here, or None."""
    for need in needs:
        if need == "gpu":
            import torch

            if not torch.cuda.is_available():
                return "needs a GPU (torch.cuda.is_available() is False)"
        elif importlib.util.find_spec(need) is None:
            return f"needs {need} (not installed)"
    return None


def _sync(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def step_peak(step: Callable[[], object], device: Any = "cpu") -> int:
    """The allocator's peak (bytes above what was live before) of one call of ``step`` on ``device``."""
    from remat.measure.allocator import AllocatorMeter

    with AllocatorMeter(device) as meter:
        step()
    return meter.peak_bytes


def interleaved(
    steps: Mapping[str, Callable[[], object]],
    rounds: int,
    device: Any = "cpu",
    clock: Callable[[], float] | None = None,
) -> dict[str, list[float]]:
    """Milliseconds of each step in each of ``rounds`` rounds; a round runs every step once, in
    order, so a spell of load on a shared machine hits every step alike (compare their minima or
    medians, never one step's rounds against another run's)."""
    clock = clock or time.perf_counter
    times: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(rounds):
        for label, step in steps.items():
            _sync(device)
            begin = clock()
            step()
            _sync(device)
            times[label].append((clock() - begin) * 1000.0)
    return times
