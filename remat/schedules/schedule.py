"""Schedules: the op lists every strategy returns and every consumer replays.

Chain ops are ``("F_ck", i)``, ``("F_n", i)``, ``("F_all", i)`` and ``("B", i)``, plus
``("F_all", i, k)``: record stage i with its option k >= 1 (``["F_all", i, 0]`` is read as
``("F_all", i)``, so option 0 always has the short form); graph ops are ``("compute", v)`` and
``("free", v)``. Semantics are in docs/model.md ("Chains", "Graphs") and implemented once, in
:mod:`remat.schedules.simulator`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from remat.schedules.errors import ScheduleError

SCHEDULE_FORMAT = "remat-schedule-v1"
CHAIN_OPS = ("F_ck", "F_n", "F_all", "B")
GRAPH_OPS = ("compute", "free")

Op = tuple[str, int] | tuple[str, int, int]


def op_option(op: Op) -> int:
    """The recording option of an op: ``k`` for ``("F_all", i, k)``, else 0."""
    return op[2] if len(op) == 3 else 0


@dataclass(frozen=True)
class Prediction:
    """What the simulator says a schedule costs.

    Attributes:
        peak_memory: bytes, the largest op peak.
        compute_ms: milliseconds of the whole step (all forwards, recomputations, backwards).
        recompute_ms: milliseconds added over storing everything.
    """

    peak_memory: int
    compute_ms: float
    recompute_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"peak_memory": self.peak_memory, "compute_ms": self.compute_ms, "recompute_ms": self.recompute_ms}


@dataclass(frozen=True)
class Schedule:
    """An op list for one profile, with the strategy that made it and its predicted cost.

    ``budget`` is in bytes; ``extra`` holds optional, strategy-specific keys (e.g. the ILP's
    bound and gap) that are written to and read from the JSON file unchanged.
    """

    profile: str
    profile_sha256: str
    strategy: str
    budget: int
    ops: tuple[Op, ...]
    predicted: Prediction
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def kind(self) -> str:
        """``"chain"`` or ``"graph"``, from the op names."""
        return "graph" if self.ops and self.ops[0][0] in GRAPH_OPS else "chain"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": SCHEDULE_FORMAT,
            "profile": self.profile,
            "profile_sha256": self.profile_sha256,
            "strategy": self.strategy,
            "budget": self.budget,
            "ops": [list(op) for op in self.ops],
            "predicted": self.predicted.to_dict(),
        }
        for key, value in self.extra.items():
            if key not in data:
                data[key] = value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        if not isinstance(data, Mapping):
            raise ScheduleError("schedule: must be a JSON object")
        for key in ("format", "profile", "profile_sha256", "strategy", "budget", "ops", "predicted"):
            if key not in data:
                raise ScheduleError(f"{key}: missing required field")
        if data["format"] != SCHEDULE_FORMAT:
            raise ScheduleError(f"format: expected '{SCHEDULE_FORMAT}', got {data['format']!r}")
        budget = data["budget"]
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ScheduleError(f"budget: must be a non-negative integer number of bytes, got {budget!r}")
        ops = parse_ops(data["ops"])
        predicted = data["predicted"]
        if not isinstance(predicted, Mapping):
            raise ScheduleError("predicted: must be a JSON object")
        for key in ("peak_memory", "compute_ms", "recompute_ms"):
            if key not in predicted:
                raise ScheduleError(f"predicted.{key}: missing required field")
            if isinstance(predicted[key], bool) or not isinstance(predicted[key], (int, float)):
                raise ScheduleError(f"predicted.{key}: must be a number, got {predicted[key]!r}")
            if key != "peak_memory" and not (isinstance(predicted[key], float) or abs(predicted[key]) < 2**1000):
                raise ScheduleError(f"predicted.{key}: too large for a number of milliseconds")
            if isinstance(predicted[key], float) and not math.isfinite(predicted[key]):
                raise ScheduleError(f"predicted.{key}: must be a finite number, got {predicted[key]!r}")
        peak = predicted["peak_memory"]
        # an integral float is a size only where floats are exact (JSON writers may emit 1e6)
        exact = isinstance(peak, int) or (math.isfinite(peak) and peak.is_integer() and abs(peak) <= 2**53)
        if not exact or peak < 0:
            raise ScheduleError(
                "predicted.peak_memory: must be a non-negative integer number of bytes, "
                f"got {predicted['peak_memory']!r}"
            )
        known = {"format", "profile", "profile_sha256", "strategy", "budget", "ops", "predicted"}
        return cls(
            profile=str(data["profile"]),
            profile_sha256=str(data["profile_sha256"]),
            strategy=str(data["strategy"]),
            budget=budget,
            ops=ops,
            predicted=Prediction(
                peak_memory=int(predicted["peak_memory"]),
                compute_ms=float(predicted["compute_ms"]),
                recompute_ms=float(predicted["recompute_ms"]),
            ),
            extra={k: v for k, v in data.items() if k not in known},
        )


def parse_ops(raw_ops: Any) -> tuple[Op, ...]:
    """Check the shape of an op list (names and integer indices); semantics are the simulator's job.

    ``["F_all", i, k]`` records with option k; k = 0 is normalized to ``("F_all", i)``."""
    if not isinstance(raw_ops, (list, tuple)):
        raise ScheduleError("ops: must be a list of [op, index] pairs")
    plain = _plain_pairs(raw_ops)
    return plain if plain is not None else _parse_each(raw_ops)


def _parse_each(raw_ops: list | tuple) -> tuple[Op, ...]:
    """:func:`parse_ops` op by op, naming the first op that is wrong."""
    ops = []
    kinds = set()
    for position, op in enumerate(raw_ops):
        if not isinstance(op, (list, tuple)) or len(op) not in (2, 3):
            raise ScheduleError(f"ops[{position}]: must be a pair [op, index], got {op!r}")
        name, index = op[0], op[1]
        option = _parse_option(op, position) if len(op) == 3 else 0
        if name in CHAIN_OPS:
            kinds.add("chain")
        elif name in GRAPH_OPS:
            kinds.add("graph")
        else:
            raise ScheduleError(
                f"ops[{position}]: unknown op {name!r} (chain ops: {', '.join(CHAIN_OPS)}; graph ops: compute, free)"
            )
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ScheduleError(f"ops[{position}]: index must be a non-negative integer, got {index!r}")
        ops.append((name, index, option) if option else (name, index))
    if len(kinds) > 1:
        raise ScheduleError("ops: mixes chain ops (F_ck, F_n, F_all, B) with graph ops (compute, free)")
    return tuple(ops)


_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_CHAIN_NAMES, _GRAPH_NAMES = frozenset(CHAIN_OPS), frozenset(GRAPH_OPS)


def _plain_pairs(raw_ops: list | tuple) -> tuple[Op, ...] | None:
    """The common case checked in bulk (the loops run in C: a solver's op lists have 10**5 ops):
    every op a 2-tuple or 2-list of one family's name and a non-negative int. None otherwise; the
    op-by-op loop then finds (and words) what is wrong."""
    if not raw_ops:
        return ()
    if not set(map(type, raw_ops)) <= {tuple, list} or set(map(len, raw_ops)) != {2}:
        return None
    try:
        names = set(map(_FIRST, raw_ops))
    except TypeError:  # an unhashable name: the loop says which op
        return None
    if not (names <= _CHAIN_NAMES or names <= _GRAPH_NAMES):
        return None
    indices = list(map(_SECOND, raw_ops))
    if set(map(type, indices)) != {int} or min(indices) < 0:  # type() is int: bools are refused
        return None
    return tuple(map(tuple, raw_ops))


def _parse_option(op: list | tuple, position: int) -> int:
    name, option = op[0], op[2]
    if name != "F_all":
        raise ScheduleError(f"ops[{position}]: only F_all takes an option index, got {list(op)!r}")
    if isinstance(option, bool) or not isinstance(option, int) or option < 0:
        raise ScheduleError(f"ops[{position}]: option must be a non-negative integer, got {option!r}")
    return option
