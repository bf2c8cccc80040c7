"""Fault injection for tests and harnesses: make reads of chosen paths fail with EIO.

Kafka's tests make files unreadable with permissions, which does not work when
running as root; this injects the same IOException at the point where the
loader reads the file.  Only the in-process (inline) engine honours it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import Iterator

_failing: set[str] = set()


def check_readable(path: str | os.PathLike[str]) -> None:
    """Raise the injected OSError if ``path`` was marked with :func:`io_error_on`."""
    if _failing and os.path.abspath(path) in _failing:
        raise OSError(errno.EIO, "injected I/O error", os.fspath(path))


@contextlib.contextmanager
def io_error_on(*paths: str | os.PathLike[str]) -> Iterator[None]:
    """Within the block, reading any of ``paths`` raises ``OSError(EIO)``."""
    added = {os.path.abspath(p) for p in paths} - _failing
    _failing.update(added)
    try:
        yield
    finally:
        _failing.difference_update(added)
