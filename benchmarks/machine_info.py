"""The machine a benchmark ran on, written into every benchmarks/results/*.json."""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys
from importlib import metadata


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
