"""``njit_cached``: numba's ``njit(cache=True)`` that still works where no cache can be written.

numba caches compiled code next to the source (``__pycache__``) or in the user's cache
directory. In a read-only install with no writable home, ``njit(cache=True)`` raises at
decoration time ("cannot cache function ...: no locator available"), which would make every
import of a compiled module fail. Then a private cache directory under the system's temporary
directory is tried (created for this user only, mode 0700, and used only if this user owns it),
and if that is not possible either the function is compiled without a cache (a few seconds per
process instead of once per machine).

A process under a file-size limit (``ulimit -f``, ``RLIMIT_FSIZE``) compiles without a cache:
numba writes its cache at the first call, and a write past the limit raises ``OSError: File too
large`` out of that call (numba guards only Windows' EACCES there), which would end a solve over a
cache file nobody asked for.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any


def _private_cache_dir() -> str | None:
    """A per-user directory under the temporary directory, or None if it cannot be made safe."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = os.path.join(tempfile.gettempdir(), f"remat-numba-cache-{uid}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
        # another user's directory could hold planted cache files: use only our own, private one
        if hasattr(os, "getuid") and (info.st_uid != uid or info.st_mode & 0o077):
            return None
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return None
    return path


def _file_size_limited() -> bool:
    """Whether this process may write files of limited size only (RLIMIT_FSIZE is finite)."""
    try:
        import resource
    except ImportError:  # not on this platform: no such limit
        return False
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return soft != resource.RLIM_INFINITY


def njit_cached(function: Callable[..., Any] | None = None, *, nogil: bool = False) -> Any:
    """``numba.njit(cache=True)(function)``, falling back to a private temporary cache directory,
    then to an uncached compile, when numba finds no place to write its cache. ``nogil=True``
    releases the GIL while the compiled code runs (for callers that run it in threads); used
    bare (``@njit_cached``) or with that option (``@njit_cached(nogil=True)``)."""
    if function is None:
        return lambda inner: njit_cached(inner, nogil=nogil)
    from numba import config, njit  # heavy: paid by the modules that compile something, not by remat.schedules

    if _file_size_limited():
        return njit(nogil=nogil)(function)
    try:
        return njit(cache=True, nogil=nogil)(function)
    except RuntimeError as error:
        if "cannot cache" not in str(error):
            raise
    fallback = _private_cache_dir()
    if fallback is not None:
        previous = config.CACHE_DIR
        config.CACHE_DIR = fallback
        try:
            return njit(cache=True, nogil=nogil)(function)
        except RuntimeError as error:
            if "cannot cache" not in str(error):
                raise
        finally:
            config.CACHE_DIR = previous
    return njit(nogil=nogil)(function)
