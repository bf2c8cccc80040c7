"""Fault injection for tests: make the operating system's calls on chosen paths fail with EIO.

Kafka's tests make files unreadable with permissions, which does not work when running as root.
:func:`io_error_on` injects the same failure one level lower, at the system-call boundary of this
process (``os.stat``, ``os.open``, ``open``): whichever of them the loader uses first on the path
raises ``OSError(EIO)``, as a failing disk would.  Only work in this process sees it (the inline
engine); worker processes read the real files.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from typing import Any


def _failing(real: Callable[..., Any], paths: set[str]) -> Callable[..., Any]:
    def call(path: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(path, (str, bytes, os.PathLike)) and os.path.abspath(os.fsdecode(path)) in paths:
            raise OSError(errno.EIO, "injected I/O error", os.fsdecode(path))
        return real(path, *args, **kwargs)
    return call


@contextlib.contextmanager
def io_error_on(*paths: str | os.PathLike[str]) -> Iterator[None]:
    """Within the block, stat-ing, opening or reading any of ``paths`` raises ``OSError(EIO)``."""
    failing = {os.path.abspath(p) for p in paths}
    saved = (os.stat, os.open, builtins.open)
    os.stat = _failing(saved[0], failing)  # type: ignore[assignment]
    os.open = _failing(saved[1], failing)  # type: ignore[assignment]
    builtins.open = _failing(saved[2], failing)  # type: ignore[assignment]
    try:
        yield
    finally:
        os.stat, os.open, builtins.open = saved
