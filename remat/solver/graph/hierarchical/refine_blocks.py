"""A local search over the kept sets of large blocks, for one budget (``hierarchical``).

A block with more than ``EXHAUSTIVE_NODES + 1`` forward nodes (U-Net's skips make one block of
most of the network) gets only a sample of kept sets (:mod:`remat.solver.graph.hierarchical.block_options`):
prefixes and strides, which miss the mixed sets a budget needs. Here, once the chain DP has
chosen its options for the budget, each chosen option of such a block (alone or in a merged run)
is the centre of a neighbourhood of (kept set, recompute rules) pairs: its kept set with one
forward node added or dropped (under the option's per-node mix of the keep and lean rules, and
under each rule alone), then one recomputed node moved from one rule to the other, then one kept
node swapped for another and two added or dropped. The neighbours are walked in batches of
about :data:`BATCH_WORK`, added to that block's options (Pareto), and the DP is run again; the
first batch that makes the schedule faster moves the search to the new choice.

It stops when no neighbourhood has an untried pair, after :data:`MAX_REFINE_WORK` (pairs x
nodes**2 of the walks: about microseconds, so the search is deterministic and bounded whatever
the machine), or when the deadline passes (it then returns the best so far). Each
accepted step makes the DP's answer strictly faster, and the options only grow, so the result is
never slower than the DP over the sampled options alone. It is a local search: no optimality.

Units: bytes and milliseconds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import replace

from remat.schedules import GraphProfile
from remat.solver.deadline import Deadline
from remat.solver.graph.hierarchical.block_options import (
    EXHAUSTIVE_NODES,
    MAX_BLOCK_WORK,
    BlockModel,
    BlockOption,
    _pareto,
    block_model,
    merged,
)
from remat.solver.graph.hierarchical.blocks import Blocks

MAX_REFINE_WORK = 1_500_000  # (kept set, rules) pairs x nodes**2 walked in all (~1.5 s of walks at most)
BATCH_WORK = 200_000  # walked between two DP runs (a DP run costs about as much as a batch on U-Net)

Models = dict[tuple[int, int], BlockModel]
# (models) -> (block-level ops, time in ms) of the DP's schedule within the budget, or None
Solve = Callable[[Models], "tuple[list[tuple], float] | None"]


def sampled(blocks: Blocks, key: tuple[int, int]) -> bool:
    """Whether the run of blocks ``key`` has a block whose kept sets are sampled, not exhaustive."""
    return any(len(blocks.blocks[i].forward) - 1 > EXHAUSTIVE_NODES for i in range(*key))


def chosen(models: Models, ops: list[tuple]) -> list[tuple[tuple[int, int], BlockOption]]:
    """The (run, option) of each recording forward in the ops (``("Fall", s, k)``: the k-th option
    of the runs starting at s, in the order :func:`~remat.solver.graph.hierarchical.dp.chain_of` uses)."""
    found = []
    for op in ops:
        if op[0] != "Fall":
            continue
        k = op[2]
        for key, model in sorted(models.items()):
            if key[0] != op[1]:
                continue
            if k < len(model.options):
                found.append((key, model.options[k]))
                break
            k -= len(model.options)
    return found


def neighbours(kept: frozenset[int], forward: tuple[int, ...]) -> Iterator[frozenset[int]]:
    """Kept sets near ``kept``: one node toggled, one swapped, two toggled (the output always kept)."""
    inner = forward[:-1]
    yield from (kept ^ {v} for v in inner)
    for u in inner:
        if u in kept:
            yield from ((kept - {u}) | {v} for v in inner if v not in kept)
    for u, v in itertools.combinations(inner, 2):
        if (u in kept) == (v in kept):
            yield kept ^ {u, v}


Policy = tuple[frozenset[int], frozenset[int]]  # (kept set, nodes under the lean rule)


def policy_neighbours(option: BlockOption, forward: tuple[int, ...]) -> Iterator[Policy]:
    """(kept, lean) pairs near the option's: each kept set one toggle away under the option's rule
    mix, the keep rule and the lean rule; then one recomputed node moved to the other rule; then
    the farther kept sets (swaps, two toggles) the same way."""
    kept, lean = option.kept, option.lean
    every = frozenset(forward)
    near = neighbours(kept, forward)
    for other in itertools.islice(near, len(forward) - 1):
        yield from dict.fromkeys([(other, lean), (other, frozenset()), (other, every)])
    yield from ((kept, lean ^ {v}) for v in forward if v not in kept)
    for other in near:
        yield from dict.fromkeys([(other, lean), (other, frozenset()), (other, every)])


def refine(
    profile: GraphProfile,
    blocks: Blocks,
    models: Models,
    solve: Solve,
    found: tuple[list[tuple], float],
    deadline: Deadline | None = None,
) -> tuple[Models, list[tuple], float]:
    """The models with the options found, and the DP's ops and ms with them (see the module
    docstring); ``found`` is the DP's answer over ``models``, ``solve`` runs the DP."""
    ops, ms = found
    tried: set[tuple[tuple[int, int], Policy]] = set()
    work = 0
    moved = True
    while moved and work < MAX_REFINE_WORK:
        moved = False
        for key, option in chosen(models, ops):
            if not sampled(blocks, key):
                continue
            block = merged(blocks, *key)[0]
            size = (len(block.forward) + len(block.backward)) ** 2
            fresh = (k for k in policy_neighbours(option, block.forward) if (key, k) not in tried)
            while not moved and work < MAX_REFINE_WORK:
                if deadline is not None and deadline.left() <= 0:
                    return models, ops, ms
                # block_model walks at most 2 * MAX_BLOCK_WORK // size of a batch: no more are taken
                room = min(BATCH_WORK, MAX_REFINE_WORK - work) // size
                room = min(room, 2 * (MAX_BLOCK_WORK // size))
                batch = list(itertools.islice(fresh, max(1, room)))
                if not batch:
                    break
                tried.update((key, k) for k in batch)
                work += len(batch) * size
                extra = block_model(profile, blocks, key[0], key[1], policies=batch).options
                trial = dict(models)
                trial[key] = _with_options(models[key], extra)
                answer = solve(trial)
                if answer is not None and answer[1] < ms:
                    models, (ops, ms), moved = trial, answer, True
            if moved:
                break
    return models, ops, ms


def _with_options(model: BlockModel, extra: tuple[BlockOption, ...]) -> BlockModel:
    return replace(model, options=_pareto([*model.options, *extra]))
