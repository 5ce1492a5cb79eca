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
- a replaced file keeps its permission bits; a new one gets ``0o666`` less the umask, as ``open``;
- a target that exists and is not a regular file (``/dev/full``, ``/dev/null``, a FIFO, a terminal,
  ``/dev/stdout`` on a pipe) is written in place, never replaced: NOTE [Special files are written
  in place].

Every write is checked to the end (NOTE [A write is done only once it is checked]): the data
flushed, ``fsync``-ed (where the file can be), the file closed; any ``OSError`` on the way is
one :class:`RematError` line, so that no command says "wrote" for bytes that were lost.

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


def describe_error(error: OSError) -> str:
    """The reason for a failed write, in words (``no space left on the device``)."""
    if error.errno == errno.ENOSPC:
        return "no space left on the device"
    if error.errno == errno.EFBIG:
        return "file too large (a file-size limit: ulimit -f)"
    if error.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return error.strerror or str(error)


def is_special(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an existing file that is not a regular file (a device such as
    ``/dev/full`` or ``/dev/null``, a FIFO, a terminal), through symbolic links."""
    try:
        kind = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not stat.S_ISREG(kind) and not stat.S_ISDIR(kind)


# NOTE [Special files are written in place]: replacing a device or a FIFO by a renamed temporary
# would not write to it at all: ``-o /dev/full`` used to create /dev/.full.XXXX.tmp, write it,
# then rename it over /dev/full (as root: the device itself gone, a regular file in its place) and
# say "wrote". Such a file has no old content to keep, so it is opened and written as it is (no
# O_CREAT, no O_TRUNC), and its errors (ENOSPC from /dev/full at the flush) are reported like
# any other write's.
@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO]:
    """A file object (text ``"w"`` or binary ``"wb"``) whose content replaces ``path`` only once it
    is complete: flushed and ``fsync``-ed to disk, then renamed over ``path``. The folder must exist
    (remat never creates folders it was not asked for). An ``OSError`` on the way (full disk,
    file-size limit, no permission) becomes one :class:`RematError` line naming ``path``; the old
    file is untouched and the temporary removed, for any exception, ``KeyboardInterrupt`` included.
    A special file (:func:`is_special`: a device, a FIFO) is written in place, with the same
    checks (NOTE [Special files are written in place])."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file: mode must be 'w' or 'wb', got {mode!r}")
    shown = os.fspath(path)
    if is_special(path):
        with _in_place(path, mode) as handle:
            yield handle
        return
    target = _real_target(Path(path))
    temp = target.parent / f".{target.name[:_TEMP_NAME_CHARS]}.{secrets.token_hex(4)}.tmp"
    try:
        # O_EXCL: never follow or reuse someone else's file; 0o666 is filtered by the umask
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as error:
        raise RematError(f"{shown}: cannot write ({describe_error(error)})") from None
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
            raise RematError(f"{shown}: cannot write ({describe_error(error)})") from None
        raise
    _sync_folder(target.parent)


# NOTE [A write is done only once it is checked]: a write()'s bytes may sit in Python's buffer, then
# in the kernel's; a full device, a file-size limit or a disk error shows only at the flush, the
# fsync or the close. So the file is flushed and fsync-ed inside the try that turns OSError into
# one line, and closed there too (the ``with`` of ``os.fdopen``): the caller prints "wrote" only
# after all of them succeeded.
@contextlib.contextmanager
def _in_place(path: str | os.PathLike[str], mode: str) -> Iterator[IO]:
    """A special file opened for writing as it is, flushed, synced where it can be, and closed,
    each checked: an ``OSError`` becomes one :class:`RematError` line naming ``path``."""
    shown = os.fspath(path)
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, mode, **({"encoding": "utf-8", "newline": ""} if mode == "w" else {})) as handle:
            yield handle
            handle.flush()
            _sync_if_it_can(handle.fileno())
    except OSError as error:
        raise RematError(f"{shown}: cannot write ({describe_error(error)})") from None


def _sync_if_it_can(fd: int) -> None:
    """``fsync``, except where the file has nothing to sync (a device, a FIFO, a terminal: EINVAL)."""
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EROFS):
            raise


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
        if path is None or is_special(path):  # written in place: no content of its own to destroy
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


__all__ = ["atomic_file", "check_distinct", "describe_error", "is_special", "write_bytes_atomic", "write_text_atomic"]
