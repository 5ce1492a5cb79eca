"""Writing output files so that no failure can lose data: the one owner of every file remat writes.

Every output (schedules, profiles, fronts, reports, plots) goes through :func:`atomic_file`: the
bytes go to a temporary file in the target's own folder, which is flushed, ``fsync``-ed and then
renamed over the target with :func:`os.replace`. A rename within one folder is atomic on POSIX
file systems, so whatever happens -- an exception, a full disk (``ENOSPC``), a file-size limit
(``EFBIG``), Ctrl-C, ``SIGTERM`` or ``SIGKILL`` at any instant -- the target is either the old file,
untouched, or the complete new one. On an exception the temporary file is removed; only a kill
that no process can catch (``SIGKILL``, a power cut) can leave one behind, named
``.NAME.XXXXXXXX.tmp`` beside the target.

Notes that follow from the rename:

- a target that is a symbolic link is written through the link (the link stays, the file it
  points at is replaced), so ``-o link.json`` behaves like writing in place would;
- a target with other hard links is replaced by a new file: the other names keep the old content;
- a replaced file keeps its permission bits; a new one gets ``0o666`` less the umask, as ``open``.

:func:`check_distinct` refuses, before any work, an output that is an input or another output
(the same file after resolving links, hard links included).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from remat.schedules.errors import RematError

# How much of the target's name the temporary file's name repeats (the rest is ".", 8 hex digits
# and ".tmp"): a target name near the file system's 255-byte limit must still get a temporary.
_TEMP_NAME_CHARS = 120


def _real_target(path: Path) -> Path:
    """The file a write to ``path`` should replace: through symbolic links, so that the link stays."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _describe(error: OSError) -> str:
    if error.errno == errno.ENOSPC:
        return "no space left on the device"
    if error.errno == errno.EFBIG:
        return "file too large (a file-size limit: ulimit -f)"
    if error.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return error.strerror or str(error)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO]:
    """A file object (text ``"w"`` or binary ``"wb"``) whose content replaces ``path`` only once it
    is complete: flushed and ``fsync``-ed to disk, then renamed over ``path``. The folder must exist
    (remat never creates folders it was not asked for). An ``OSError`` on the way (full disk,
    file-size limit, no permission) becomes one :class:`RematError` line naming ``path``; the old
    file is untouched and the temporary removed, for any exception, ``KeyboardInterrupt`` included."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file: mode must be 'w' or 'wb', got {mode!r}")
    shown = os.fspath(path)
    target = _real_target(Path(path))
    temp = target.parent / f".{target.name[:_TEMP_NAME_CHARS]}.{secrets.token_hex(4)}.tmp"
    try:
        # O_EXCL: never follow or reuse someone else's file; 0o666 is filtered by the umask
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as error:
        raise RematError(f"{shown}: cannot write ({_describe(error)})") from None
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8", "newline": ""} if mode == "w" else {})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        _keep_mode(target, temp)
        os.replace(temp, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(error, OSError):
            raise RematError(f"{shown}: cannot write ({_describe(error)})") from None
        raise
    _sync_folder(target.parent)


def _keep_mode(target: Path, temp: Path) -> None:
    """A replaced file keeps its permission bits (the temporary was made with the umask's)."""
    try:
        before = os.stat(target)
    except FileNotFoundError:
        return
    os.chmod(temp, stat.S_IMODE(before.st_mode))


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (best effort: some file systems refuse fsync on a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_file`."""
    with atomic_file(path, "w") as handle:
        handle.write(text)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_file`."""
    with atomic_file(path, "wb") as handle:
        handle.write(data)


def _identity(path: str | os.PathLike[str]) -> tuple:
    """What makes two paths the same file: (device, inode) when it exists (hard and symbolic links
    included), else the resolved path."""
    try:
        found = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return ("inode", found.st_dev, found.st_ino)


def check_distinct(inputs: Mapping[str, str | None], outputs: Mapping[str, str | None]) -> None:
    """Refuse (one line) an output that is one of the inputs or another output, before any work.

    ``inputs`` and ``outputs`` map a label (``PROFILE``, ``-o``, ``--csv``) to a path or ``None``
    (not given). Identity is by file (``os.stat``'s device and inode), so hard links, symbolic
    links and ``./x`` vs ``x`` are all caught; a missing output is compared by its resolved path."""
    seen: dict[tuple, str] = {}
    for label, path in inputs.items():
        if path is not None:
            seen.setdefault(_identity(path), label)
    for label, path in outputs.items():
        if path is None:
            continue
        key = _identity(path)
        if key in seen:
            other = seen[key]
            kind = "an input" if other in inputs else "another output"
            raise RematError(
                f"{label} {path}: is the same file as {other} ({kind}); writing it would destroy "
                f"{'the input' if other in inputs else 'the other output'}: give another file name"
            )
        seen[key] = label


__all__ = ["atomic_file", "check_distinct", "write_bytes_atomic", "write_text_atomic"]
