"""Name the pieces of a cut by the module paths that own them (``layer2.1``, ``transformer.h.3``,
``features.0-1``) and merge neighbouring pieces of one name into one stage (docs/models.md,
"How a model is cut")."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch.fx as fx

from remat.rewrite.nodes import block_calls, module_path, repeated_blocks


def _common_prefix(paths: list[str]) -> str:
    split = [p.split(".") for p in paths if p]
    if not split:
        return ""
    prefix = split[0]
    for parts in split[1:]:
        n = 0
        while n < min(len(prefix), len(parts)) and prefix[n] == parts[n]:
            n += 1
        prefix = prefix[:n]
    return ".".join(prefix)


def _computed(nodes: Sequence[fx.Node]) -> list[fx.Node]:
    return [n for n in nodes if n.op in ("call_function", "call_method", "call_module")]


def innermost_block(nodes: Sequence[fx.Node], blocks: frozenset[str]) -> tuple[str, str] | None:
    """The deepest call of one of ``blocks`` (``(call key, path)``, :func:`remat.rewrite.nodes.block_calls`)
    that made every computed node of a piece that lies in a module, or None."""
    common: tuple[tuple[str, str], ...] | None = None
    for node in _computed(nodes):
        if not node.meta.get("nn_module_stack"):
            continue  # the training step's own code (the loss): in no module
        calls = block_calls(node, blocks)
        if common is None:
            common = calls
            continue
        k = 0
        while k < min(len(common), len(calls)) and common[k] == calls[k]:
            k += 1
        common = common[:k]
    return common[-1] if common else None


def piece_name(
    nodes: Sequence[fx.Node], last: bool, owned: Callable[[fx.Node], bool], blocks: frozenset[str] = frozenset()
) -> str:
    """The module path that owns a piece: the innermost of the model's repeated ``blocks`` it lies in
    (``layer2.1``, ``transformer.h.3``, ``stages.0.blocks.3``: :func:`innermost_block`), else the
    common path of its nodes (a range of children such as ``features.0-1`` when all of them lie
    below it)."""
    block = innermost_block(nodes, blocks)
    if block is not None:
        return block[1]
    computed = _computed(nodes)
    paths = [module_path(n) for n in computed]
    prefix = _common_prefix(paths)
    if not prefix:  # spans top-level modules: name it by those whose weights it uses, if any
        paths = [module_path(n) for n in computed if owned(n)] or paths
        prefix = _common_prefix(paths)
    parts = prefix.split(".") if prefix else []
    # a block is an index below a named container (layer2.1, h.3); a leading index is only the
    # position in a top-level Sequential
    index = next((k for k in range(1, len(parts)) if parts[k].isdigit() and not parts[k - 1].isdigit()), None)
    if index is not None:
        return ".".join(parts[: index + 1])
    if prefix and all(p != prefix for p in paths if p):
        depth = len(parts)
        children = list(dict.fromkeys(p.split(".")[depth] for p in paths if p))
        return f"{prefix}.{children[0]}" + (f"-{children[-1]}" if len(children) > 1 else "")
    if prefix:
        return prefix
    tops = list(dict.fromkeys(p.split(".")[0] for p in paths if p))
    if tops:
        return "+".join(tops)
    return "loss" if last else "root"


def _loop_call(call: tuple[str, str] | None) -> bool:
    """Whether ``call`` is one of a module that is a block only because the step calls it again
    (not an indexed child: NOTE [A module called in a loop], :func:`remat.rewrite.nodes.repeated_blocks`)."""
    return call is not None and not call[1].rsplit(".", 1)[-1].isdigit()


def merge_by_name(
    pieces: list[list[fx.Node]], owned: Callable[[fx.Node], bool]
) -> tuple[list[list[fx.Node]], list[str], list[int]]:
    """Neighbouring pieces with one name, in one call of their block, become one stage; also returns
    each stage's last piece. A name that stands again further on (another call of a shared block:
    ALBERT's layer group) gets ``#2``, ``#3``, ... so that stage names are unique."""
    blocks = repeated_blocks(n for p in pieces for n in p)
    names = [piece_name(p, k == len(pieces) - 1, owned, blocks) for k, p in enumerate(pieces)]
    calls = [innermost_block(p, blocks) for p in pieces]
    for k in range(len(pieces) - 2, -1, -1):
        # the loop's own code before a call of a module it calls again (``x[t]`` before
        # ``self.cell(x[t], (h, c))``: NOTE [A module called in a loop]) is part of that call
        if _loop_call(calls[k + 1]) and all(not module_path(n) for n in _computed(pieces[k])):
            names[k], calls[k] = names[k + 1], calls[k + 1]
    stages: list[list[fx.Node]] = []
    merged_names: list[str] = []
    last_piece: list[int] = []
    for k, (piece, name) in enumerate(zip(pieces, names, strict=True)):
        if merged_names and merged_names[-1] == name and calls[last_piece[-1]] == calls[k]:
            stages[-1].extend(piece)
            last_piece[-1] = k
        else:
            stages.append(list(piece))
            merged_names.append(name)
            last_piece.append(k)
    seen: dict[str, int] = {}
    unique = []
    for name in merged_names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return stages, unique, last_piece


__all__ = ["innermost_block", "merge_by_name", "piece_name"]
