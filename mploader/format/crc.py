"""CRC-32C (Castagnoli), the checksum of record batches and producer snapshots.

The compiled walk's own (``mploader/scan/_walk.c``: the CPU's instruction where there is one, a table
otherwise; tests/test_walk_compiled.py checks it against the package at every length and alignment) where it is
loaded (:data:`mploader.scan.compiled.WALK`), else the ``crc32c`` package's function; either chosen at the first
use.  A load with the compiled walk so never imports the package, which costs a command ~30 ms of start-up (its
``__init__`` imports ``importlib.metadata`` for a version string).
"""

from __future__ import annotations

from collections.abc import Callable

Crc32c = Callable[..., int]  # (data, value=0) -> the CRC-32C of data, continuing value

_crc: Crc32c | None = None


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    return (_crc or implementation())(data, value)


def implementation() -> Crc32c:
    """The function itself (the compiled walk's, or the package's, imported now): for a loop that calls it per
    batch, without this module's indirection (~70 ns a call)."""
    global _crc
    if _crc is None:
        # imported here: the scan package imports this one
        from mploader.scan.compiled import WALK

        if WALK is not None:
            _crc = WALK.crc32c
        else:
            from crc32c import crc32c as package

            _crc = package
    return _crc


__all__ = ["crc32c", "implementation"]
