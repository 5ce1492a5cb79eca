"""Profiles: what the solvers and the simulator know about a network.

A :class:`ChainProfile` describes a chain of stages (the DP's world); a :class:`GraphProfile`
describes the DAG of the joint forward+backward computation (the ILP's world). Both are frozen
and validated on construction; every error names the offending field, e.g.
``stages[3].saved_size: must be >= output_size (saved includes the output)``.

Units everywhere: sizes in bytes (int), times in milliseconds (float).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from remat.schedules.errors import ProfileError

CHAIN_FORMAT = "remat-chain-v1"
GRAPH_FORMAT = "remat-graph-v1"


def _check_size(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        # an integral float is a size only where floats are exact (JSON writers may emit 1e6)
        if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
            value = int(value)
        else:
            raise ProfileError(f"{path}: must be a non-negative integer number of bytes, got {value!r}")
    if value < 0:
        raise ProfileError(f"{path}: must be a non-negative integer number of bytes, got {value}")
    return value


def _check_time(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{path}: must be a non-negative number of milliseconds, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range (JSON integers are unbounded)
        size = f"an integer of {value.bit_length()} bits"
        raise ProfileError(f"{path}: must be a finite number of milliseconds, got {size}") from None
    if not math.isfinite(number) or number < 0:
        raise ProfileError(f"{path}: must be a non-negative number of milliseconds, got {value}")
    return number


def _check_name(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ProfileError(f"{path}: must be a string, got {value!r}")
    return value


def _require(data: Mapping[str, Any], key: str, path: str) -> Any:
    if not isinstance(data, Mapping):
        raise ProfileError(f"{path or 'profile'}: must be a JSON object, got {type(data).__name__}")
    if key not in data:
        where = f"{path}.{key}" if path else key
        raise ProfileError(f"{where}: missing required field")
    return data[key]


def _reject_unknown_keys(raw: Mapping[str, Any], cls: type, path: str) -> None:
    """Refuse a key that is not a field of ``cls`` (a typo like ``forward_overhaed`` would otherwise
    be dropped silently, and with it a transient). The known keys are the dataclass's fields, so a
    new optional field is accepted as soon as it exists. Only stages and nodes are this strict; the
    top level of a file may carry extra keys (docs/formats.md)."""
    known = [f.name for f in fields(cls)]
    for key in raw:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
        raise ProfileError(f"{path}.{key}: unknown key ({hint})")


def _check_metadata(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ProfileError(f"{path}: must be a JSON object")
    try:  # the profile's digest serializes it: refuse what JSON cannot hold (NaN, Infinity, objects)
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ProfileError(f"{path}: must hold plain JSON values ({error})") from None
    return dict(value)


def _optional_size(raw: Mapping[str, Any], key: str, path: str) -> Any:
    """The value of an optional size field, or None when absent (null is refused, not "absent")."""
    if key not in raw:
        return None
    if raw[key] is None:
        raise ProfileError(f"{path}.{key}: must be a non-negative integer number of bytes, got null")
    return raw[key]


def _digest(data: Mapping[str, Any]) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


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
        return data


def _validated_option(option: Any, stage: Stage, path: str) -> StageOption:
    if not isinstance(option, StageOption):
        raise ProfileError(f"{path}: must be a StageOption")
    checked = StageOption(
        name=_check_name(option.name, f"{path}.name"),
        saved_size=_check_size(option.saved_size, f"{path}.saved_size"),
        backward_ms=_check_time(option.backward_ms, f"{path}.backward_ms"),
        forward_overhead=_check_size(option.forward_overhead, f"{path}.forward_overhead"),
        backward_overhead=_check_size(option.backward_overhead, f"{path}.backward_overhead"),
    )
    if checked.saved_size < stage.output_size:
        raise ProfileError(f"{path}.saved_size: must be >= the stage's output_size (saved includes the output)")
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
        name=_check_name(stage.name, f"{path}.name"),
        forward_ms=_check_time(stage.forward_ms, f"{path}.forward_ms"),
        backward_ms=_check_time(stage.backward_ms, f"{path}.backward_ms"),
        output_size=_check_size(stage.output_size, f"{path}.output_size"),
        saved_size=_check_size(stage.saved_size, f"{path}.saved_size"),
        forward_overhead=_check_size(stage.forward_overhead, f"{path}.forward_overhead"),
        backward_overhead=_check_size(stage.backward_overhead, f"{path}.backward_overhead"),
        param_size=_check_size(stage.param_size, f"{path}.param_size"),
        forward_nograd_overhead=None
        if stage.forward_nograd_overhead is None
        else _check_size(stage.forward_nograd_overhead, f"{path}.forward_nograd_overhead"),
    )
    if checked.saved_size < checked.output_size:
        raise ProfileError(f"{path}.saved_size: must be >= output_size (saved includes the output)")
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
    _reject_unknown_keys(raw, StageOption, path)
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
        _check_name(self.name, "name")
        object.__setattr__(self, "input_size", _check_size(self.input_size, "input_size"))
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
        object.__setattr__(self, "metadata", _check_metadata(self.metadata, "metadata"))

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
        return _digest(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChainProfile:
        fmt = _require(data, "format", "")
        if fmt != CHAIN_FORMAT:
            raise ProfileError(f"format: expected '{CHAIN_FORMAT}', got {fmt!r}")
        raw_stages = _require(data, "stages", "")
        if not isinstance(raw_stages, list):
            raise ProfileError("stages: must be a list of stages")
        stages = []
        for index, raw in enumerate(raw_stages):
            path = f"stages[{index}]"
            if not isinstance(raw, Mapping):
                raise ProfileError(f"{path}: must be a JSON object")
            _reject_unknown_keys(raw, Stage, path)
            stages.append(
                Stage(
                    name=raw.get("name", f"stage{index}"),
                    forward_ms=_require(raw, "forward_ms", path),
                    backward_ms=_require(raw, "backward_ms", path),
                    output_size=_require(raw, "output_size", path),
                    saved_size=_require(raw, "saved_size", path),
                    forward_overhead=raw.get("forward_overhead", 0),
                    backward_overhead=raw.get("backward_overhead", 0),
                    param_size=raw.get("param_size", 0),
                    forward_nograd_overhead=_optional_size(raw, "forward_nograd_overhead", path),
                    options=_options_from_dict(raw, path),
                )
            )
        return cls(
            name=data.get("name", "chain"),
            input_size=_require(data, "input_size", ""),
            stages=tuple(stages),
            metadata=data.get("metadata") or {},
        )


@dataclass(frozen=True)
class GraphNode:
    """One node of the forward+backward DAG: ``size`` bytes of output, ``time_ms`` to compute.

    Attributes:
        overhead: transient bytes live only while the node is computed (an intermediate a fused
            piece does not keep, gradient temporaries); optional, default 0.
        recompute: False for a node that cannot be computed a second time in a step (the output
            gradient handed in by the loss); optional, default True.

    The optional fields are written to JSON only when they differ from their defaults, so a
    profile without them keeps its digest.
    """

    name: str
    time_ms: float
    size: int
    backward: bool = False
    overhead: int = 0
    recompute: bool = True

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "time_ms": self.time_ms, "size": self.size}
        data["backward"] = self.backward
        if self.overhead:
            data["overhead"] = self.overhead
        if not self.recompute:
            data["recompute"] = False
        return data


@dataclass(frozen=True)
class GraphProfile:
    """A DAG whose nodes are listed in a topological order; edge (u, v): v reads u's output."""

    name: str
    nodes: tuple[GraphNode, ...]
    edges: tuple[tuple[int, int], ...]
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        _check_name(self.name, "name")
        if len(self.nodes) == 0:
            raise ProfileError("nodes: a graph needs at least one node")
        nodes = []
        for index, node in enumerate(self.nodes):
            path = f"nodes[{index}]"
            if not isinstance(node, GraphNode):
                raise ProfileError(f"{path}: must be a GraphNode")
            if not isinstance(node.backward, bool):
                raise ProfileError(f"{path}.backward: must be true or false, got {node.backward!r}")
            if not isinstance(node.recompute, bool):
                raise ProfileError(f"{path}.recompute: must be true or false, got {node.recompute!r}")
            nodes.append(
                GraphNode(
                    name=_check_name(node.name, f"{path}.name"),
                    time_ms=_check_time(node.time_ms, f"{path}.time_ms"),
                    size=_check_size(node.size, f"{path}.size"),
                    backward=node.backward,
                    overhead=_check_size(node.overhead, f"{path}.overhead"),
                    recompute=node.recompute,
                )
            )
        count = len(nodes)
        edges = []
        seen = set()
        for index, edge in enumerate(self.edges):
            path = f"edges[{index}]"
            if (
                not isinstance(edge, Sequence)
                or len(edge) != 2
                or any(isinstance(e, bool) or not isinstance(e, int) for e in edge)
            ):
                raise ProfileError(f"{path}: must be a pair [u, v] of node indices, got {edge!r}")
            u, v = int(edge[0]), int(edge[1])
            for end in (u, v):
                if not 0 <= end < count:
                    raise ProfileError(f"{path}: node index {end} out of range (graph has {count} nodes)")
            if u == v:
                raise ProfileError(f"{path}: self-loop on node {u} ('{nodes[u].name}')")
            if (u, v) in seen:
                raise ProfileError(f"{path}: duplicate edge [{u}, {v}]")
            seen.add((u, v))
            edges.append((u, v))
        cycle = _find_cycle(count, edges)
        if cycle:
            names = " -> ".join(f"{i} ('{nodes[i].name}')" for i in cycle)
            raise ProfileError(f"edges: the graph has a cycle: {names}")
        for index, (u, v) in enumerate(edges):
            if u > v:
                raise ProfileError(
                    f"edges[{index}]: [{u}, {v}] points backwards; nodes must be listed in a topological order"
                )
        object.__setattr__(self, "nodes", tuple(nodes))
        object.__setattr__(self, "edges", tuple(edges))
        object.__setattr__(self, "metadata", _check_metadata(self.metadata, "metadata"))

    @property
    def size(self) -> int:
        """Number of nodes."""
        return len(self.nodes)

    @cached_property
    def predecessors(self) -> tuple[tuple[int, ...], ...]:
        """For each node, the nodes whose outputs it reads (ascending)."""
        preds: list[list[int]] = [[] for _ in self.nodes]
        for u, v in self.edges:
            preds[v].append(u)
        return tuple(tuple(sorted(p)) for p in preds)

    @cached_property
    def successors(self) -> tuple[tuple[int, ...], ...]:
        """For each node, the nodes that read its output (ascending)."""
        succs: list[list[int]] = [[] for _ in self.nodes]
        for u, v in self.edges:
            succs[u].append(v)
        return tuple(tuple(sorted(s)) for s in succs)

    @property
    def store_all_compute_ms(self) -> float:
        """Milliseconds of computing every node once."""
        return sum(n.time_ms for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": GRAPH_FORMAT,
            "name": self.name,
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [list(e) for e in self.edges],
            "metadata": dict(self.metadata),
        }

    @cached_property
    def sha256(self) -> str:
        """Digest of the canonical JSON of this profile."""
        return _digest(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GraphProfile:
        fmt = _require(data, "format", "")
        if fmt != GRAPH_FORMAT:
            raise ProfileError(f"format: expected '{GRAPH_FORMAT}', got {fmt!r}")
        raw_nodes = _require(data, "nodes", "")
        if not isinstance(raw_nodes, list):
            raise ProfileError("nodes: must be a list of nodes")
        nodes = []
        for index, raw in enumerate(raw_nodes):
            path = f"nodes[{index}]"
            if not isinstance(raw, Mapping):
                raise ProfileError(f"{path}: must be a JSON object")
            _reject_unknown_keys(raw, GraphNode, path)
            nodes.append(
                GraphNode(
                    name=raw.get("name", f"node{index}"),
                    time_ms=_require(raw, "time_ms", path),
                    size=_require(raw, "size", path),
                    backward=raw.get("backward", False),
                    overhead=raw.get("overhead", 0),
                    recompute=raw.get("recompute", True),
                )
            )
        raw_edges = _require(data, "edges", "")
        if not isinstance(raw_edges, list):
            raise ProfileError("edges: must be a list of [u, v] pairs")
        return cls(
            name=data.get("name", "graph"),
            nodes=tuple(nodes),
            edges=tuple(tuple(e) if isinstance(e, list) else e for e in raw_edges),
            metadata=data.get("metadata") or {},
        )


def _find_cycle(count: int, edges: Sequence[tuple[int, int]]) -> list[int] | None:
    """Return one cycle as a node list (first node repeated at the end), or None."""
    succs: list[list[int]] = [[] for _ in range(count)]
    for u, v in edges:
        succs[u].append(v)
    color = [0] * count  # 0 unvisited, 1 on stack, 2 done
    parent = [-1] * count
    for root in range(count):
        if color[root]:
            continue
        stack = [(root, iter(succs[root]))]
        color[root] = 1
        while stack:
            node, children = stack[-1]
            advanced = False
            for child in children:
                if color[child] == 0:
                    color[child] = 1
                    parent[child] = node
                    stack.append((child, iter(succs[child])))
                    advanced = True
                    break
                if color[child] == 1:
                    cycle = [child]
                    walk = node
                    while walk != child:
                        cycle.append(walk)
                        walk = parent[walk]
                    cycle.append(child)
                    return cycle[::-1]
            if not advanced:
                color[node] = 2
                stack.pop()
    return None


Profile = ChainProfile | GraphProfile
