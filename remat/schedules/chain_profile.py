"""Chain profiles: a chain of stages, each with its recording options (the DP's world).

Frozen and validated on construction; every error names the offending field, e.g.
``stages[3].saved_size: must be >= output_size (saved includes the output)``. The model is
docs/model.md's ("Chains", "Several recording options per stage").

Units: sizes in bytes (int), times in milliseconds (float).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from remat.schedules.errors import ProfileError
from remat.schedules.fields import (
    check_metadata,
    check_name,
    check_size,
    check_time,
    digest,
    optional_size,
    records,
    reject_unknown_keys,
    require,
)

CHAIN_FORMAT = "remat-chain-v1"


def lowest_backward_overhead(saved_size: int, output_size: int) -> int:
    """The least a ``backward_overhead`` may be (bytes, <= 0): ``B i`` may free all of abar[i+1]
    (``saved_size``) and g[i+1] (``output_size``) before its peak, never more. At that bound the
    op's peak, ``before + g_i + overhead``, equals its memory after (``before + g_i - saved -
    output``), so an op never peaks below what it leaves (docs/model.md, "Chains")."""
    return -(saved_size + output_size)


@dataclass(frozen=True)
class StageOption:
    """One alternative recording forward of a stage (``F_all i k`` with ``k >= 1``): a different
    choice of what autograd keeps (e.g. only the outputs of the matmuls), the rest recomputed
    inside the backward. The forward and its output are the stage's; see docs/model.md.

    Attributes:
        name: what it keeps, for humans and for the executor (which maps it to a policy).
        saved_size: bytes newly held after this recording forward (its saved tensors plus the
            output a_{i+1}), ``>= output_size``.
        backward_ms: milliseconds of the backward, including the recompute inside it; at least
            the stage's own ``backward_ms``.
        forward_overhead: transient bytes of this recording forward.
        backward_overhead: transient bytes of its backward (including what the recompute holds).

    In JSON a field that is not given inherits the stage's value; the loaded option holds the
    resolved values and writes them all back.
    """

    name: str
    saved_size: int
    backward_ms: float
    forward_overhead: int = 0
    backward_overhead: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "saved_size": self.saved_size,
            "backward_ms": self.backward_ms,
            "forward_overhead": self.forward_overhead,
            "backward_overhead": self.backward_overhead,
        }


@dataclass(frozen=True)
class Stage:
    """One stage of a chain: maps activation a_i to a_{i+1}.

    Attributes:
        name: label for humans.
        forward_ms: time of the forward (recording or not), milliseconds.
        backward_ms: time of the backward, milliseconds.
        output_size: bytes of a_{i+1} (and of its gradient g_{i+1}).
        saved_size: bytes newly held after a recording forward: the tensors autograd saves
            plus the output a_{i+1}; the input a_i is not counted.
        forward_overhead: transient bytes live only during a recording forward (``F_all``).
        backward_overhead: transient bytes live only during the backward.
        param_size: bytes of parameters (informational, outside the budget).
        forward_nograd_overhead: transient bytes live only during a non-recording forward
            (``F_ck``, ``F_n``); optional: ``None`` (not given) means the same as
            ``forward_overhead``, and it is then left out of the JSON, so older files keep their
            digest. :attr:`nograd_overhead` is the value that applies.
        options: alternative recording forwards (:class:`StageOption`), options 1, 2, ...; the
            stage's own fields are option 0 ("save all"). Optional; empty is left out of the JSON.
        handed_on: bytes of a_{i+1} that are tensors of a_i handed on unchanged (a tuple
            boundary's position bias): part of ``output_size``, not of ``saved_size``, because
            abar[i+1] shares them with a_i, which is in memory whenever abar[i+1] is (docs/
            model.md, "A boundary may carry several tensors"). Optional; 0 is left out of the JSON.
    """

    name: str
    forward_ms: float
    backward_ms: float
    output_size: int
    saved_size: int
    forward_overhead: int = 0
    backward_overhead: int = 0
    param_size: int = 0
    forward_nograd_overhead: int | None = None
    options: tuple[StageOption, ...] = ()
    handed_on: int = 0

    @property
    def own_output_size(self) -> int:
        """Bytes of a_{i+1} that are not a_i's (``output_size - handed_on``): the least a
        recording forward of this stage holds, so the least ``saved_size`` of any recording."""
        return self.output_size - self.handed_on

    @property
    def option_count(self) -> int:
        """Number of recording forwards: 1 (the stage's own, option 0) plus its options."""
        return 1 + len(self.options)

    def recording(self, k: int) -> StageOption:
        """Recording forward ``k`` (0: the stage's own fields, named "save all")."""
        if k == 0:
            return StageOption(
                "save all", self.saved_size, self.backward_ms, self.forward_overhead, self.backward_overhead
            )
        return self.options[k - 1]

    @property
    def nograd_overhead(self) -> int:
        """Transient bytes of a non-recording forward (``F_ck``/``F_n``) of this stage."""
        return self.forward_overhead if self.forward_nograd_overhead is None else self.forward_nograd_overhead

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "forward_ms": self.forward_ms,
            "backward_ms": self.backward_ms,
            "output_size": self.output_size,
            "saved_size": self.saved_size,
            "forward_overhead": self.forward_overhead,
            "backward_overhead": self.backward_overhead,
            "param_size": self.param_size,
        }
        if self.forward_nograd_overhead is not None:
            data["forward_nograd_overhead"] = self.forward_nograd_overhead
        if self.options:
            data["options"] = [option.to_dict() for option in self.options]
        if self.handed_on:
            data["handed_on"] = self.handed_on
        return data


def _validated_option(option: Any, stage: Stage, path: str) -> StageOption:
    if not isinstance(option, StageOption):
        raise ProfileError(f"{path}: must be a StageOption")
    checked = StageOption(
        name=check_name(option.name, f"{path}.name"),
        saved_size=check_size(option.saved_size, f"{path}.saved_size"),
        backward_ms=check_time(option.backward_ms, f"{path}.backward_ms"),
        forward_overhead=check_size(option.forward_overhead, f"{path}.forward_overhead"),
        backward_overhead=check_size(
            option.backward_overhead,
            f"{path}.backward_overhead",
            minimum=lowest_backward_overhead(check_size(option.saved_size, f"{path}.saved_size"), stage.output_size),
        ),
    )
    if checked.saved_size < stage.own_output_size:
        raise ProfileError(
            f"{path}.saved_size: must be >= the stage's output_size less handed_on (saved includes the output)"
        )
    # recompute_ms counts an option's extra backward time; a faster backward than the stage's own
    # would make it negative (a measurement below the plain backward is noise: clamp it)
    if checked.backward_ms < stage.backward_ms:
        raise ProfileError(
            f"{path}.backward_ms: must be >= the stage's backward_ms ({stage.backward_ms}): "
            "an option's backward includes its recompute"
        )
    return checked


def _validated_stage(stage: Stage, path: str) -> Stage:
    checked = Stage(
        name=check_name(stage.name, f"{path}.name"),
        forward_ms=check_time(stage.forward_ms, f"{path}.forward_ms"),
        backward_ms=check_time(stage.backward_ms, f"{path}.backward_ms"),
        output_size=check_size(stage.output_size, f"{path}.output_size"),
        saved_size=check_size(stage.saved_size, f"{path}.saved_size"),
        forward_overhead=check_size(stage.forward_overhead, f"{path}.forward_overhead"),
        # may be negative: what the backward frees of abar[i+1] and g[i+1] before its peak (early
        # release), never more than both (docs/model.md, "Chains")
        backward_overhead=check_size(
            stage.backward_overhead,
            f"{path}.backward_overhead",
            minimum=lowest_backward_overhead(
                check_size(stage.saved_size, f"{path}.saved_size"), check_size(stage.output_size, f"{path}.output_size")
            ),
        ),
        param_size=check_size(stage.param_size, f"{path}.param_size"),
        forward_nograd_overhead=None
        if stage.forward_nograd_overhead is None
        else check_size(stage.forward_nograd_overhead, f"{path}.forward_nograd_overhead"),
    )
    handed_on = check_size(stage.handed_on, f"{path}.handed_on")
    if handed_on > checked.output_size:
        raise ProfileError(f"{path}.handed_on: must be <= output_size (it is part of the output)")
    checked = dataclasses.replace(checked, handed_on=handed_on)
    if checked.saved_size < checked.own_output_size:
        message = "output_size" if not handed_on else "output_size - handed_on"
        raise ProfileError(f"{path}.saved_size: must be >= {message} (saved includes the output)")
    options = stage.options
    if not isinstance(options, Sequence) or isinstance(options, (str, bytes)):
        raise ProfileError(f"{path}.options: must be a list of options")
    checked_options = tuple(
        _validated_option(option, checked, f"{path}.options[{k}]") for k, option in enumerate(options)
    )
    return dataclasses.replace(checked, options=checked_options)


def _option_from_dict(raw: Any, stage: Mapping[str, Any], path: str, number: int) -> StageOption:
    """An option from JSON; a field it does not give inherits the stage's (``stage`` is raw JSON)."""
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{path}: must be a JSON object")
    reject_unknown_keys(raw, StageOption, path)
    values = {}
    for key in ("saved_size", "backward_ms", "forward_overhead", "backward_overhead"):
        if key in raw and raw[key] is None:
            raise ProfileError(f"{path}.{key}: must be a number, got null")
        values[key] = raw[key] if key in raw else stage.get(key, 0)
    return StageOption(name=raw.get("name", f"option {number}"), **values)


def _options_from_dict(raw: Mapping[str, Any], path: str) -> tuple[StageOption, ...]:
    if "options" not in raw:
        return ()
    options = raw["options"]
    if not isinstance(options, list):
        raise ProfileError(f"{path}.options: must be a list of options")
    return tuple(_option_from_dict(option, raw, f"{path}.options[{k}]", k + 1) for k, option in enumerate(options))


@dataclass(frozen=True)
class ChainProfile:
    """A chain of ``n`` stages; stage i maps a_i to a_{i+1}; a_0 is the input (``input_size`` bytes)."""

    name: str
    input_size: int
    stages: tuple[Stage, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        check_name(self.name, "name")
        object.__setattr__(self, "input_size", check_size(self.input_size, "input_size"))
        if not isinstance(self.stages, Sequence) or isinstance(self.stages, (str, bytes)):
            raise ProfileError("stages: must be a list of stages")
        if len(self.stages) == 0:
            raise ProfileError("stages: a chain needs at least one stage")
        stages = []
        for index, stage in enumerate(self.stages):
            if not isinstance(stage, Stage):
                raise ProfileError(f"stages[{index}]: must be a Stage")
            stages.append(_validated_stage(stage, f"stages[{index}]"))
        object.__setattr__(self, "stages", tuple(stages))
        object.__setattr__(self, "metadata", check_metadata(self.metadata, "metadata"))

    @property
    def length(self) -> int:
        """Number of stages n."""
        return len(self.stages)

    def activation_size(self, index: int) -> int:
        """Bytes of a_index (a_0 is the input); also the size of g_index."""
        return self.input_size if index == 0 else self.stages[index - 1].output_size

    @property
    def has_options(self) -> bool:
        """True if some stage has alternative recording forwards (:attr:`Stage.options`)."""
        return any(stage.options for stage in self.stages)

    def without_options(self) -> ChainProfile:
        """The same chain with every stage's options dropped (option 0 only)."""
        stages = tuple(dataclasses.replace(stage, options=()) for stage in self.stages)
        return ChainProfile(self.name, self.input_size, stages, self.metadata)

    @property
    def store_all_compute_ms(self) -> float:
        """Milliseconds of one forward and one backward of every stage (no recomputation)."""
        return sum(s.forward_ms + s.backward_ms for s in self.stages)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": CHAIN_FORMAT,
            "name": self.name,
            "input_size": self.input_size,
            "stages": [s.to_dict() for s in self.stages],
            "metadata": dict(self.metadata),
        }

    @cached_property
    def sha256(self) -> str:
        """Digest of the canonical JSON of this profile (names, sizes, times, metadata)."""
        return digest(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChainProfile:
        stages = []
        for index, path, raw in records(data, CHAIN_FORMAT, "stages", Stage):
            stages.append(
                Stage(
                    name=raw.get("name", f"stage{index}"),
                    forward_ms=require(raw, "forward_ms", path),
                    backward_ms=require(raw, "backward_ms", path),
                    output_size=require(raw, "output_size", path),
                    saved_size=require(raw, "saved_size", path),
                    forward_overhead=raw.get("forward_overhead", 0),
                    backward_overhead=raw.get("backward_overhead", 0),
                    param_size=raw.get("param_size", 0),
                    forward_nograd_overhead=optional_size(raw, "forward_nograd_overhead", path),
                    options=_options_from_dict(raw, path),
                    handed_on=raw.get("handed_on", 0),
                )
            )
        return cls(
            name=data.get("name", "chain"),
            input_size=require(data, "input_size", ""),
            stages=tuple(stages),
            metadata=data.get("metadata") or {},
        )
