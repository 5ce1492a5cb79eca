"""Name the pieces of a cut by the module paths that own them (``layer2.1``, ``transformer.h.3``,
``features.0-1``) and merge neighbouring pieces of one name into one stage (docs/models.md,
"How a model is cut")."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch.fx as fx

from remat.trace.nodes import module_path


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


def piece_name(nodes: Sequence[fx.Node], last: bool, owned: Callable[[fx.Node], bool]) -> str:
    """The module path that owns a piece: a block (``layer2.1``, ``transformer.h.3``: the path up to
    its first index) when the piece lies in one, else the common path of its nodes (a range of
    children such as ``features.0-1`` when all of them lie below it)."""
    computed = [n for n in nodes if n.op in ("call_function", "call_method", "call_module")]
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


def merge_by_name(
    pieces: list[list[fx.Node]], owned: Callable[[fx.Node], bool]
) -> tuple[list[list[fx.Node]], list[str], list[int]]:
    """Neighbouring pieces with one name become one stage; also returns each stage's last piece.
    A name that stands again further on gets ``#2``, ``#3``, ... so that stage names are unique."""
    names = [piece_name(p, k == len(pieces) - 1, owned) for k, p in enumerate(pieces)]
    stages: list[list[fx.Node]] = []
    merged_names: list[str] = []
    last_piece: list[int] = []
    for k, (piece, name) in enumerate(zip(pieces, names, strict=True)):
        if merged_names and merged_names[-1] == name:
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


__all__ = ["merge_by_name", "piece_name"]
