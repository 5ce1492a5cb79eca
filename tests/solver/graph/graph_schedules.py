"""Hand-made graph schedules for replay tests: keep a set of forward checkpoints, recompute the rest.

``checkpoint_schedule(profile, keep)`` computes every forward node once, frees each forward node
that is not in ``keep`` as soon as its forward consumers have run, then runs the backward nodes in
order, recomputing any missing forward predecessor from whatever is present (recursively, down to
the model input), and frees every node as soon as no remaining backward node reads it. ``keep``
= all forward nodes is store-all with early frees; ``keep`` = none recomputes from the input.
"""

from __future__ import annotations

from collections.abc import Iterable

from remat.schedules import GraphProfile, Op


def checkpoint_schedule(profile: GraphProfile, keep: Iterable[int]) -> list[Op]:
    preds, succs = profile.predecessors, profile.successors
    forward = [v for v, node in enumerate(profile.nodes) if not node.backward]
    backward = [v for v, node in enumerate(profile.nodes) if node.backward]
    keep = set(keep)
    ops: list[Op] = []
    present: set[int] = set()

    def compute(v: int) -> None:
        ops.append(("compute", v))
        present.add(v)

    def free(v: int) -> None:
        ops.append(("free", v))
        present.discard(v)

    # Forward phase: everything once; non-kept nodes go once their forward consumers have run.
    seed = backward[0]
    output_piece = preds[seed][0]
    done: set[int] = set()
    for v in forward:
        compute(v)
        done.add(v)
        for u in preds[v]:
            if u in present and u not in keep and u != output_piece:
                if all(s in done for s in succs[u] if s in forward):
                    free(u)

    def recompute_for(b: int) -> None:
        """Recompute b's missing forward predecessors from what is present, freeing each
        temporary as soon as the rest of the recomputation and b no longer read it."""
        missing: set[int] = set()
        stack = [u for u in preds[b] if u not in present]
        while stack:
            u = stack.pop()
            if u in missing:
                continue
            missing.add(u)
            stack.extend(w for w in preds[u] if w not in present)
        order = sorted(missing)
        readers = {u: {s for s in succs[u] if s in missing} for u in order}
        for position, u in enumerate(order):
            compute(u)
            for w in preds[u]:
                if w in missing and w not in preds[b] and w not in keep:
                    if all(r in order[: position + 1] for r in readers[w]):
                        free(w)

    for k, b in enumerate(backward):
        recompute_for(b)
        compute(b)
        later = backward[k + 1 :]
        needed = {u for w in later for u in preds[w]}
        for v in sorted(present):
            if v in needed:
                continue
            # a kept forward node stays while a later backward could need it to recompute others
            if v in keep and not profile.nodes[v].backward and any(w > v for w in needed if w in forward):
                continue
            if v != backward[-1]:
                free(v)
    return ops
