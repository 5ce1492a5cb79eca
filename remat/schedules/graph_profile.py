"""Graph profiles: the DAG of the joint forward+backward computation (the ILP's world).

Frozen and validated on construction; every error names the offending field. The model is
docs/model.md's ("Graphs").

Units: sizes in bytes (int), times in milliseconds (float).
"""

from __future__ import annotations

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
    records,
    require,
)

GRAPH_FORMAT = "remat-graph-v1"


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
        check_name(self.name, "name")
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
                    name=check_name(node.name, f"{path}.name"),
                    time_ms=check_time(node.time_ms, f"{path}.time_ms"),
                    size=check_size(node.size, f"{path}.size"),
                    backward=node.backward,
                    overhead=check_size(node.overhead, f"{path}.overhead"),
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
        object.__setattr__(self, "metadata", check_metadata(self.metadata, "metadata"))

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
        return digest(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GraphProfile:
        nodes = []
        for index, path, raw in records(data, GRAPH_FORMAT, "nodes", GraphNode):
            nodes.append(
                GraphNode(
                    name=raw.get("name", f"node{index}"),
                    time_ms=require(raw, "time_ms", path),
                    size=require(raw, "size", path),
                    backward=raw.get("backward", False),
                    overhead=raw.get("overhead", 0),
                    recompute=raw.get("recompute", True),
                )
            )
        raw_edges = require(data, "edges", "")
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
