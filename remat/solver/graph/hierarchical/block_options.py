"""One block's schedules for ``hierarchical``: its forwards and a Pareto set of recording options.

A block (:mod:`remat.solver.graph.hierarchical.blocks`) is solved on its own, with everything else of the
graph as a constant that its ops never touch. Its input ``c_{i-1}`` is held throughout and never
freed here; its incoming gradient ``G_{i+1}`` is held when its backward starts. Every quantity is
an *excess*: bytes above the memory held just before the op, measured as the simulator does
(right after each compute, plus that node's transient ``overhead``), so it is the same wherever
in a schedule the op runs.

* **Non-recording forward** (the chain's ``F_ck``/``F_n``): compute ``F_i`` in index order, free
  each node after its last forward use; only the output ``c_i`` stays.
* **Recording forward with kept set K** (``F_all``, option K): the same, but the nodes of K (always
  containing ``c_i``) stay: ``saved`` = their bytes (the chain's ``abar[i+1]``).
* **Backward with K**: the backward nodes in index order; before each, the forward inputs it
  lacks are recomputed (recursively, in index order, from ``c_{i-1}``, K and what is held). After
  every compute, a node of the block (or of ``G_{i+1}``) is freed as soon as nothing left in the
  block's backward reads it; ``G_i`` (read by the previous block) stays. Two policies for
  recomputed forward nodes: *keep* (held while a later backward node, or a later recomputation,
  still reads it) and *lean* (held only while the current or the next backward node reads it,
  recomputed again otherwise: slower, less memory), and a per-node mix of the two (the lean rule
  for a given set of nodes, the keep rule for the others: what the local search of
  :mod:`remat.solver.graph.hierarchical.refine_blocks` tries). The backward's time includes its
  recomputations.

Which K: every subset of the block's forward nodes besides ``c_i`` when there are at most
:data:`EXHAUSTIVE_NODES` of them (so the block's options are exhaustive over what to keep),
otherwise :data:`PREFIX_POINTS` + 1 evenly spaced prefixes of two orders (most milliseconds per
byte first, smallest first) and every k-th node for k up to :data:`MAX_STRIDE` (a few offsets),
as many of these, in this order, as :data:`MAX_BLOCK_WORK` allows. A run of consecutive blocks
solved as one (:func:`merged_kept_sets`) combines its parts' kept sets. Options dominated in
(saved, forward excess, backward excess, backward ms) are dropped.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Container, Iterable
from dataclasses import dataclass

from remat.schedules import GraphProfile, Op
from remat.solver.graph.hierarchical.blocks import Block, Blocks

EXHAUSTIVE_NODES = 9  # 2**9 kept sets x 2 policies per block at most
MAX_MERGED_SETS = 128  # kept sets tried for a run of merged blocks
MAX_MERGED_WORK = 200_000  # kept sets x nodes**2: a merged run's walks take about as many microseconds
PREFIX_POINTS = 16  # prefix lengths per order tried for a block past EXHAUSTIVE_NODES
MAX_STRIDE = 16  # and every k-th node for k up to this
MAX_BLOCK_WORK = 800_000  # kept sets x nodes**2 of one block's walks (about microseconds)
NO_PEAK = -(1 << 62)  # the excess of an op list that computes nothing


@dataclass(frozen=True)
class Run:
    """An op list of one block with its excess peak (bytes), its net change of held bytes, and
    its time (ms)."""

    ops: tuple[Op, ...]
    peak: int
    delta: int
    ms: float


@dataclass(frozen=True)
class BlockOption:
    """A recording option: the kept set, the recording forward and the backward that uses it."""

    kept: frozenset[int]
    lean: frozenset[int]  # forward nodes under the lean policy when recomputed (the others: keep)
    forward: Run
    backward: Run

    @property
    def saved(self) -> int:
        """Bytes held between the recording forward and the backward (``abar[i+1]``)."""
        return self.forward.delta


@dataclass(frozen=True)
class BlockModel:
    """A block as a chain stage with options (bytes, ms).

    ``input_size``: bytes of ``c_{i-1}`` (0 for block 0); ``output_size``: of ``c_i``;
    ``grad_size``: of ``G_i``, what its backward hands down; ``nograd``: the non-recording forward.
    """

    input_size: int
    output_size: int
    grad_size: int
    nograd: Run
    options: tuple[BlockOption, ...]


def _forward(profile: GraphProfile, fwd: tuple[int, ...], keep: frozenset[int]) -> Run:
    nodes, succs = profile.nodes, profile.successors
    position = {v: p for p, v in enumerate(fwd)}
    last_use = {v: max((position[w] for w in succs[v] if w in position), default=-1) for v in fwd}
    ops: list[Op] = []
    held, peak, ms = 0, NO_PEAK, 0.0
    for p, v in enumerate(fwd):
        ops.append(("compute", v))
        held += nodes[v].size
        peak = max(peak, held + nodes[v].overhead)
        ms += nodes[v].time_ms
        for u in (*profile.predecessors[v], v):
            if u in position and u not in keep and last_use[u] <= p and (u == v or last_use[u] == p):
                ops.append(("free", u))
                held -= nodes[u].size
    return Run(tuple(ops), peak, held, ms)


class _Backward:
    """State of one backward walk (see the module docstring)."""

    def __init__(
        self,
        profile: GraphProfile,
        block: Block,
        grads_out: tuple[int, ...],
        kept: frozenset[int],
        lean: frozenset[int],
    ):
        self.profile = profile
        self.preds = profile.predecessors
        self.fwd = frozenset(block.forward)
        self.bwd = block.backward
        self.out = frozenset(grads_out)
        self.lean = lean
        self.all_lean = self.fwd <= lean  # the lean policy: later recomputations hold nothing now
        self.kept = kept
        self.held = set(kept) | set(block.grads_in)
        self.ops: list[Op] = []
        self.bytes = 0
        self.peak = NO_PEAK
        self.ms = 0.0
        # what the backward nodes after position p read (static: one pass from the end)
        self.later_reads: list[frozenset[int]] = [frozenset()] * len(self.bwd)
        running: set[int] = set()
        for p in range(len(self.bwd) - 1, -1, -1):
            self.later_reads[p] = frozenset(running)
            running.update(self.preds[self.bwd[p]])

    def missing(self, targets: Iterable[int]) -> list[int]:
        """Forward nodes to recompute before ``targets``, ascending (closure over what is not held)."""
        need: set[int] = set()
        stack = list(targets)
        while stack:
            for u in self.preds[stack.pop()]:
                if u in self.fwd and u not in self.held and u not in need:
                    need.add(u)
                    stack.append(u)
        return sorted(need)

    def future(self, p: int) -> set[int]:
        """Nodes the backward nodes after position p read, and (keep policy) the recomputations
        they will need read, given what is held now."""
        reads = set(self.later_reads[p])
        if not self.all_lean:
            for w in self.missing(self.bwd[p + 1 :]):
                reads.update(self.preds[w])
        return reads

    def free_unneeded(self, rest: Container[int], far: set[int], near: set[int]) -> None:
        """Free every held node nothing left reads (``far``: the later backward nodes and their
        recomputations; ``rest``: what the rest of this group reads). Under the lean policy a
        recomputed forward node stays only while this group or the next backward node reads it
        (``near``)."""
        for u in sorted(self.held):
            if u in self.out or u in rest:
                continue
            lean = u in self.lean and u in self.fwd and u not in self.kept
            if u not in (near if lean else far):
                self.release(u)

    def release(self, u: int) -> None:
        self.held.discard(u)
        self.ops.append(("free", u))
        self.bytes -= self.profile.nodes[u].size

    def run(self) -> Run:
        nodes = self.profile.nodes
        for p, b in enumerate(self.bwd):
            group = [*self.missing([b]), b]
            far = self.future(p)  # kept as is while the group runs: it only grows what is held
            near = set(self.preds[self.bwd[p + 1]]) if p + 1 < len(self.bwd) else set()
            # what the rest of the group reads, counted down as it runs (a set rebuilt per node
            # was quadratic in a long recomputation: 1.1 s of a ResNet-50 solve)
            rest = Counter([u for r in group for u in self.preds[r]])
            while group:
                v = group.pop(0)
                for u in self.preds[v]:
                    rest[u] -= 1
                    if not rest[u]:
                        del rest[u]
                self.ops.append(("compute", v))
                self.held.add(v)
                self.bytes += nodes[v].size
                self.peak = max(self.peak, self.bytes + nodes[v].overhead)
                self.ms += nodes[v].time_ms
                if not group:
                    far = self.future(p)
                self.free_unneeded(rest, far, near)
        for u in sorted(self.held - self.out):  # a block without backward nodes still drops its record
            self.release(u)
        return Run(tuple(self.ops), self.peak, self.bytes, self.ms)


def _kept_sets(profile: GraphProfile, fwd: tuple[int, ...]) -> Iterable[frozenset[int]]:
    out = fwd[-1]
    others = [v for v in fwd if v != out]
    if len(others) <= EXHAUSTIVE_NODES:
        for r in range(len(others) + 1):
            for subset in itertools.combinations(others, r):
                yield frozenset((*subset, out))
        return
    nodes = profile.nodes
    dense = sorted(others, key=lambda v: (-nodes[v].time_ms / max(1, nodes[v].size), v))
    small = sorted(others, key=lambda v: (nodes[v].size, v))
    m = len(others)
    lengths = sorted({round(m * k / PREFIX_POINTS) for k in range(PREFIX_POINTS + 1)})
    for order in (dense, small):
        for r in lengths:
            yield frozenset((*order[:r], out))
    # every k-th node (a few offsets): short recomputation runs, as Chen's segments inside the block
    for k in range(2, min(m, MAX_STRIDE) + 1):
        for offset in range(0, k, max(1, k // 3)):
            yield frozenset((*others[offset::k], out))


def _pareto(options: list[BlockOption]) -> tuple[BlockOption, ...]:
    def key(o: BlockOption) -> tuple:
        return (o.saved, o.forward.peak, o.backward.peak, o.backward.ms)

    unique: dict[tuple, BlockOption] = {}
    for option in options:
        unique.setdefault(key(option), option)
    items = sorted(unique.items())
    kept: list[tuple[tuple, BlockOption]] = []
    for k, option in items:
        if not any(all(a <= b for a, b in zip(other, k, strict=True)) for other, _ in kept):
            kept.append((k, option))
    return tuple(option for _, option in kept)


def merged(blocks: Blocks, s: int, u: int) -> tuple[Block, int | None, tuple[int, ...]]:
    """Blocks ``s..u-1`` as one block (it satisfies the rules of :mod:`~remat.solver.graph.hierarchical.blocks`
    when each of them does), with its input node and the gradient it hands down."""
    parts = blocks.blocks[s:u]
    block = Block(
        tuple(v for b in parts for v in b.forward),
        tuple(sorted(v for b in parts for v in b.backward)),
        parts[-1].grads_in,
    )
    return block, blocks.input_node(s), blocks.grads_out(s)


def block_model(
    profile: GraphProfile,
    blocks: Blocks,
    s: int,
    u: int | None = None,
    kept_sets: Iterable[frozenset[int]] | None = None,
    policies: Iterable[tuple[frozenset[int], frozenset[int]]] | None = None,
) -> BlockModel:
    """Blocks ``s..u-1`` (default: block s alone) as one chain stage: its sizes, its non-recording
    forward and its Pareto options over ``kept_sets`` (default: :func:`_kept_sets`), each with
    the keep and the lean policy, or over ``policies``: (kept set, nodes under the lean rule) pairs."""
    block, source, grads_out = merged(blocks, s, s + 1 if u is None else u)
    size = [node.size for node in profile.nodes]
    options = []
    nodes = len(block.forward) + len(block.backward)
    if policies is None:
        candidates = _kept_sets(profile, block.forward) if kept_sets is None else kept_sets
        every = frozenset(block.forward)
        policies = ((kept, lean) for kept in candidates for lean in (frozenset(), every))
    # the walks cost about nodes**2 each: a big block tries its first sets only (prefixes first)
    for kept, lean in itertools.islice(policies, 2 * max(1, MAX_BLOCK_WORK // nodes**2)):
        forward = _forward(profile, block.forward, kept)
        backward = _Backward(profile, block, grads_out, kept, lean).run()
        options.append(BlockOption(kept, lean, forward, backward))
    return BlockModel(
        input_size=size[source] if source is not None else 0,
        output_size=size[block.output],
        grad_size=sum(size[v] for v in grads_out),
        nograd=_forward(profile, block.forward, frozenset({block.output})),
        options=_pareto(options),
    )


def merged_kept_sets(
    profile: GraphProfile, blocks: Blocks, parts: list[BlockModel], s: int
) -> list[frozenset[int]] | None:
    """Kept sets of blocks ``s..s+len(parts)-1`` merged: one Pareto kept set of each part, with
    each inner cut kept or dropped (dropping one is what merging adds: the next part's backward
    recomputes its input). Where that is more than :data:`MAX_MERGED_SETS` (or the walks would
    pass :data:`MAX_MERGED_WORK`), the parts with the most kept sets are thinned to evenly spaced
    ones by bytes (the largest always stays); None if even one set per part is too many."""
    size = [node.size for node in profile.nodes]
    choices = [
        sorted({o.kept for o in part.options}, key=lambda k: (sum(size[v] for v in k), sorted(k))) for part in parts
    ]
    inner = [blocks.blocks[s + k].output for k in range(len(parts) - 1)]
    nodes = sum(len(b.forward) + len(b.backward) for b in blocks.blocks[s : s + len(parts)])
    limit = min(MAX_MERGED_SETS, MAX_MERGED_WORK // nodes**2) // 2 ** len(inner)
    if limit < 1:
        return None
    while math.prod(len(c) for c in choices) > limit:
        widest = max(range(len(choices)), key=lambda k: len(choices[k]))
        c = choices[widest]
        keep = max(1, len(c) // 2)
        choices[widest] = [c[-1]] if keep == 1 else [c[round(i * (len(c) - 1) / (keep - 1))] for i in range(keep)]
    found: dict[frozenset[int], None] = {}
    for combo in itertools.product(*choices):
        union = frozenset().union(*combo)
        for r in range(len(inner) + 1):
            for dropped in itertools.combinations(inner, r):
                found.setdefault(union - frozenset(dropped), None)
    return list(found)
