"""Cutting a forward+backward graph into a chain of blocks (for ``hierarchical``).

The graph model is docs/model.md's: nodes in a topological order, ``backward`` flags, edge
``[u, v]`` = v reads u. A *block* ``i`` is a set of forward nodes ``F_i`` and a set of backward
nodes ``B_i`` such that the graph is, block by block, the chain of docs/model.md:

* **Cuts.** A forward node ``c`` is a cut when no forward edge ``(u, v)`` jumps over it
  (``u < c < v`` in index order): everything before ``c`` reaches everything after ``c`` only
  through ``c``'s output. These are the articulation points of the forward graph that separate
  its topological order (Checkmate's chen baselines use the same points). The last forward
  node is always a cut. ``F_i`` is the run of forward nodes ending at the i-th cut ``c_i``.
* **Chain roles.** ``c_i`` is the chain's ``a_{i+1}`` (block i's output, block i+1's input);
  the model input ``a_0`` is not a node (the graph does not count it). The gradient
  ``g_{i+1}`` that block i+1 hands down is not one node: it is ``G_{i+1}``, the nodes of
  ``B_{i+1}`` that nodes of ``B_i`` read (in the profiler's graphs, ``bwd:X`` outputs the
  gradients of X's inputs, so a cut read by two branches hands down two nodes). Its size
  ``Γ_{i+1}`` is in general not ``c_i``'s size, which is why the hierarchical solver runs its
  own chain DP with separate activation and gradient sizes.
* **Backward membership.** A backward node belongs to the latest block of the forward nodes it
  reads (``bwd:X`` reads X, so it lands in X's block); one that reads no forward node belongs
  to the earliest block among the backward nodes it reads (a pure gradient sum sits with its
  inputs); one that reads nothing, to the last block.

For the chain semantics to hold, each block must read only its own nodes, its input ``c_{i-1}``
and the gradient ``G_{i+1}`` of the block after it:

1. a forward node of block i reads forward nodes of block i, or ``c_{i-1}`` (true by the cut
   definition);
2. a backward node of block i reads forward nodes of block i or ``c_{i-1}``, and backward nodes
   of blocks i or i+1;
3. the graph's last node is a backward node of block 0 (it must be computed last, and block 0's
   backward is the last thing a chain schedule runs).

Where a rule fails, the blocks between the two offending nodes are merged into one and the
assignment is redone until every rule holds (each merge removes a cut, so this ends; at worst
the whole graph is one block). A forward node that reads a backward node, or a forward node
that cannot be recomputed, makes the graph unsuitable (a one-line :class:`RematError`).
"""

from __future__ import annotations

from dataclasses import dataclass

from remat.schedules import GraphProfile, RematError


@dataclass(frozen=True)
class Block:
    """One block: its forward nodes (ascending; the last is its output cut), its backward nodes
    (ascending), and ``grads_in``: the nodes of the next block's backward that this block's
    backward reads (the gradient ``G_{i+1}`` it receives; empty for the last block)."""

    forward: tuple[int, ...]
    backward: tuple[int, ...]
    grads_in: tuple[int, ...]

    @property
    def output(self) -> int:
        """The cut node ``c_i``: the block's output, read by the next block."""
        return self.forward[-1]


@dataclass(frozen=True)
class Blocks:
    """The chain of blocks of a graph, in forward order."""

    blocks: tuple[Block, ...]

    def input_node(self, i: int) -> int | None:
        """``c_{i-1}``, block i's input node (None for block 0: the model input is not a node)."""
        return self.blocks[i - 1].output if i > 0 else None

    def grads_out(self, i: int) -> tuple[int, ...]:
        """``G_i``: the nodes of block i's backward that block i-1 reads (empty for block 0)."""
        return self.blocks[i - 1].grads_in if i > 0 else ()


def forward_cuts(profile: GraphProfile) -> list[int]:
    """Forward nodes no forward edge jumps over, ascending (the last forward node is one)."""
    forward = [v for v in range(profile.size) if not profile.nodes[v].backward]
    position = {v: p for p, v in enumerate(forward)}
    jumped = [0] * (len(forward) + 1)  # difference array over forward positions
    for u, v in profile.edges:
        if u in position and v in position and position[v] - position[u] > 1:
            jumped[position[u] + 1] += 1
            jumped[position[v]] -= 1
    cuts, running = [], 0
    for p, v in enumerate(forward):
        running += jumped[p]
        if running == 0:
            cuts.append(v)
    return cuts


def _check_graph(profile: GraphProfile) -> None:
    nodes = profile.nodes
    if not nodes[-1].backward:
        raise RematError("strategy 'hierarchical' needs a forward+backward graph: its last node is a forward node")
    for v, node in enumerate(nodes):
        if node.backward:
            continue
        if not node.recompute:
            raise RematError(f"strategy 'hierarchical': forward node {v} ('{node.name}') cannot be recomputed")
        for u in profile.predecessors[v]:
            if nodes[u].backward:
                raise RematError(
                    f"strategy 'hierarchical': forward node {v} ('{node.name}') reads backward node {u}; "
                    "it needs a graph whose forward part reads no gradient"
                )


def _assign(profile: GraphProfile, cuts: list[int]) -> tuple[dict[int, int], list[tuple[int, int]]]:
    """Block of every node for these cuts, and the (first, last) block ranges that must merge."""
    nodes = profile.nodes
    block: dict[int, int] = {}
    current = 0
    for v in range(profile.size):
        if not nodes[v].backward:
            block[v] = current
            if current < len(cuts) and v == cuts[current]:
                current += 1
    last = len(cuts) - 1
    merges: list[tuple[int, int]] = []
    for v in range(profile.size):
        if not nodes[v].backward:
            continue
        preds = profile.predecessors[v]
        fwd = [block[u] for u in preds if not nodes[u].backward]
        bwd = [block[u] for u in preds if nodes[u].backward]
        i = max(fwd) if fwd else (min(bwd) if bwd else last)
        block[v] = i
        for u in preds:
            j = block[u]
            if not nodes[u].backward:
                if j < i and not (j == i - 1 and u == cuts[j]):
                    merges.append((j, i))
            elif j > i + 1:
                merges.append((i + 1, j))
            elif j < i:
                merges.append((j, i))
    if block[profile.size - 1] != 0:
        merges.append((0, block[profile.size - 1]))
    return block, merges


def cut_blocks(profile: GraphProfile) -> Blocks:
    """The finest chain of blocks satisfying the module docstring's rules."""
    _check_graph(profile)
    cuts = forward_cuts(profile)
    while True:
        block, merges = _assign(profile, cuts)
        if not merges:
            break
        # merging blocks j..i removes the cuts c_j .. c_{i-1} between them
        dropped = {cuts[k] for j, i in merges for k in range(j, i)}
        cuts = [c for c in cuts if c not in dropped]
    count = len(cuts)
    forward: list[list[int]] = [[] for _ in range(count)]
    backward: list[list[int]] = [[] for _ in range(count)]
    for v in range(profile.size):
        (backward if profile.nodes[v].backward else forward)[block[v]].append(v)
    grads_in: list[set[int]] = [set() for _ in range(count)]
    for i in range(count):
        for v in backward[i]:
            grads_in[i].update(u for u in profile.predecessors[v] if profile.nodes[u].backward and block[u] == i + 1)
    return Blocks(tuple(Block(tuple(forward[i]), tuple(backward[i]), tuple(sorted(grads_in[i]))) for i in range(count)))
