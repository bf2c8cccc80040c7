"""CRC-32C (Castagnoli), the checksum of record batches and producer snapshots.

By default the ``crc32c`` package's function, imported at its first use: importing the package costs a
command ~30 ms of start-up (its ``__init__`` imports ``importlib.metadata`` for a version string).  The
compiled walk (``mploader/scan/_walk.c``) has a CRC-32C of its own (the CPU's instruction where there is
one, a table otherwise; tests/test_walk_compiled.py checks it against the package at every length and
alignment), and :mod:`mploader.scan.compiled` installs it with :func:`use` when it loads the compiled walk (this
layer cannot import that one), so that a load never imports the package.
"""

from __future__ import annotations

from collections.abc import Callable

Crc32c = Callable[..., int]  # (data, value=0) -> the CRC-32C of data, continuing value

_crc: Crc32c | None = None


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    return (_crc or implementation())(data, value)


def implementation() -> Crc32c:
    """The function itself (the package's, imported now, unless :func:`use` gave another): for a loop that
    calls it per batch, without this module's indirection (~70 ns a call)."""
    global _crc
    if _crc is None:
        from crc32c import crc32c as package

        _crc = package
    return _crc


def use(fn: Crc32c) -> None:
    """Compute every later CRC with ``fn`` (the compiled walk's)."""
    global _crc
    _crc = fn


__all__ = ["crc32c", "implementation", "use"]
