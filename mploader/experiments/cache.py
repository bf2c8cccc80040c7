"""A cold or a warm page cache for a run, and which way it was made (every output says so).

Cold: the kernel's whole page cache dropped (``sync; echo 3 > /proc/sys/vm/drop_caches``) where this
process may write that file (root), else each file of the data dirs written back and dropped with
``posix_fadvise(POSIX_FADV_DONTNEED)``: the data's own pages are gone either way, but only the first also
empties the cache of the Python installation and of everything else on the machine (a real cold start).
Warm: every file read once right before the run (this VM also evicts idle pages within minutes, so a file
written a while ago may not be cached any more).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

DROP_CACHES = "/proc/sys/vm/drop_caches"
METHODS = ("auto", "drop_caches", "fadvise")
READ_BYTES = 1 << 24


def files_under(dirs: Iterable[str | os.PathLike[str]]) -> Iterator[str]:
    for d in dirs:
        for root, _, names in os.walk(d):
            for name in sorted(names):
                yield os.path.join(root, name)


def can_drop_caches() -> bool:
    return os.access(DROP_CACHES, os.W_OK)


def make_cold(dirs: Iterable[str | os.PathLike[str]], method: str = "auto") -> str:
    """Empty the page cache of ``dirs``' files; returns the method used: "drop_caches" or "fadvise"
    (``method`` "auto": drop_caches where permitted, else fadvise)."""
    if method not in METHODS:
        raise ValueError(f"unknown cache method {method!r}; known: {', '.join(METHODS)}")
    if method == "auto":
        method = "drop_caches" if can_drop_caches() else "fadvise"
    if method == "drop_caches":
        os.sync()  # dirty pages are not dropped: write them first
        with open(DROP_CACHES, "w") as f:
            f.write("3\n")
        return method
    for path in files_under(dirs):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fdatasync(fd)  # a dirty page stays in the cache: write it back first
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "fadvise"


def make_warm(dirs: Iterable[str | os.PathLike[str]]) -> str:
    """Read every file of ``dirs`` once; returns "read once"."""
    for path in files_under(dirs):
        try:
            with open(path, "rb", buffering=0) as f:
                while f.read(READ_BYTES):
                    pass
        except OSError:
            continue
    return "read once"


__all__ = ["METHODS", "can_drop_caches", "files_under", "make_cold", "make_warm"]
