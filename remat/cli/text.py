"""What ``remat solve`` prints, in plain words (the schedule JSON keeps the raw ``extra``).

Every size is shown with its share of the store-all peak, the one reference the CLI uses: the
peak the ``store-all`` strategy's schedule reaches in the simulator (also what ``--budget 40%``
is 40% of).
"""

from __future__ import annotations

from typing import Any

from remat.schedules import Schedule, format_size

# Solver internals kept in the JSON only: they mean nothing without reading the solver's code.
_HIDDEN = {
    "slots",
    "slot_bytes",
    "table_free_bytes",
    "backend",
    "variables",
    "phases_seconds",
    "build_seconds",
    "solve_seconds",
    "lp_seconds",
    "segment_starts",
    "lower_bound_ms",
    "gap",
    "time_limit_seconds",
    "elapsed_seconds",
    "warm_start",
    "source",
    "status",
    "lp_status",
    "claim",
    "rounding",
    "forward_steps",
}


def share(size: int, reference: int) -> str:
    """``size`` as a percentage of ``reference`` bytes, e.g. ``40%`` or ``39.2%``."""
    if reference <= 0:
        return "n/a"
    percent = 100 * size / reference
    return f"{percent:.0f}%" if abs(percent - round(percent)) < 0.05 else f"{percent:.1f}%"


def solve_lines(schedule: Schedule, budget_text: str, reference: int) -> list[tuple[str, str]]:
    """(label, text) rows for a solved schedule; ``budget_text`` is what the user typed and
    ``reference`` the store-all peak (bytes)."""
    p = schedule.predicted
    budget = schedule.budget
    given = budget_text.strip()
    percent = given[:-1].strip() + "%" if given.endswith("%") else share(budget, reference)
    base = p.compute_ms - p.recompute_ms
    overhead = 100.0 * p.recompute_ms / base if base > 0 else 0.0
    rows = [
        ("strategy", schedule.strategy),
        (
            "budget",
            f"{format_size(budget)} ({budget} bytes): {percent} of the store-all peak, {format_size(reference)}",
        ),
        (
            "peak memory",
            f"{format_size(p.peak_memory)} ({p.peak_memory} bytes): {share(p.peak_memory, reference)} "
            "of the store-all peak",
        ),
        (
            "step time",
            f"{p.compute_ms:.3f} ms: +{overhead:.1f}% over storing everything ({p.recompute_ms:.3f} ms recomputed)",
        ),
        ("ops", str(len(schedule.ops))),
    ]
    return rows + _extra_rows(schedule.extra)


_HIERARCHICAL_STEPS = {
    "dp": "the block DP",
    "refined": "its search over large blocks' kept sets",
    "flat search": "the flat search across blocks",
}


def _hierarchical_steps(source: str) -> str:
    """``hierarchical``'s source ("dp, refined, flat search") in words; other sources as "the X"."""
    steps = [step.strip() for step in str(source).split(",")]
    if steps[0] != "dp" or any(step not in _HIERARCHICAL_STEPS for step in steps):
        return f"the {source}"
    return ", then ".join(_HIERARCHICAL_STEPS[step] for step in steps)


def _extra_rows(extra: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if "claim" in extra:
        slots = extra.get("slots")
        step = f", memory counted in {slots} steps of {format_size(extra['slot_bytes'])} (--slots)" if slots else ""
        claim = str(extra["claim"]).replace(" (up to discretization)", "")  # the steps below say it
        rows.append(("guarantee", f"{claim}{step}"))
    if "status" in extra:
        proven = extra["status"] == "optimal"
        rows.append(("result", "optimal (proven)" if proven else f"{extra['status']}, not proven optimal"))
    if "source" in extra:
        source = extra["source"]
        found = {"solver": "CP-SAT", "highs": "HiGHS's branch and cut"}.get(source) or _hierarchical_steps(source)
        searched = source in ("solver", "highs")
        start = f", started from {extra['warm_start']}" if extra.get("warm_start") and searched else ""
        rows.append(("found by", found + start))
    if "rounding" in extra:
        rows.append(("found by", f"rounding the LP relaxation ({extra['rounding']})"))
    if isinstance(extra.get("lower_bound_ms"), (int, float)) and isinstance(extra.get("gap"), (int, float)):
        rows.append(
            (
                "bound",
                f"proven: no schedule of this kind is faster than {extra['lower_bound_ms']:.3f} ms; this one is within "
                f"{100 * extra['gap']:.2f}% of that",
            )
        )
    if "elapsed_seconds" in extra and "time_limit_seconds" in extra:
        rows.append(("time", f"{extra['elapsed_seconds']:.2f} s of the {extra['time_limit_seconds']:g} s limit"))
    if "checkpoints" in extra and "claim" in extra:
        count = extra["checkpoints"]
        rows.append(("stored", f"at most {count} activation{'' if count == 1 else 's'} at once"))
    elif "checkpoints" in extra:
        steps = f", {extra['forward_steps']} forward steps" if "forward_steps" in extra else ""
        rows.append(("checkpoints", f"{extra['checkpoints']} slots{steps}"))
    if "threshold" in extra and isinstance(extra["threshold"], int):
        rows.append(("threshold", f"{format_size(extra['threshold'])} of saved activations per segment"))
    for key, value in extra.items():
        if key in _HIDDEN or key in ("checkpoints", "threshold", "note"):
            continue
        if isinstance(value, float):
            value = f"{value:.6g}"
        if isinstance(value, (int, str)):
            rows.append((key.replace("_", " "), str(value)))
    if "note" in extra:
        rows.append(("note", str(extra["note"])))
    return rows
