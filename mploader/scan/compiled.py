"""The compiled walk, ``mploader.scan._walk`` (``_walk.c``): loaded once, its layout checked.

:data:`WALK` is the extension module, or None where the Python code, the reference, does its work: when it
was not built (no C compiler at install time), when the environment variable ``MPLOADER_PURE_PYTHON`` is
``1``, or when the build is of another ``_walk.c`` than this Python expects (an editable install not rebuilt):
its :data:`VERSION`, or the rows it writes, which must be :data:`~mploader.scan.table.BATCH_TABLE`'s and
:data:`~mploader.scan.table.INDEX_DRAFT`'s byte for byte (:func:`layout_mismatch`).

The scan layer's users pick explicitly, taking the walk as an argument that defaults to :data:`WALK`
(:func:`mploader.scan.walk.scan_buffer`, :func:`mploader.scan.draft.draft_recovery`; None: the Python code).  The
format layer cannot import this one (tests/test_layering.py): its CRC-32C (:mod:`mploader.format.crc`) and its walk
to the last entry (:func:`mploader.format.log.last_entry`) are installed in it here, once, when :data:`WALK` loads.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Mapping
from typing import Protocol, cast

import numpy as np

from mploader.format import crc, log
from mploader.scan.table import BATCH_TABLE, INDEX_DRAFT

VERSION = 1  # the _walk.c this Python is written for (its WALK_VERSION)

# (name, byte offset) of each field of a BATCH_TABLE row, in order: what the compiled walk must write
ROW_FIELDS = tuple((name, offset) for name, (_, offset, *_) in (BATCH_TABLE.fields or {}).items())

Buffer = bytes | bytearray | memoryview | mmap.mmap


class CompiledWalk(Protocol):
    """What the Python code calls of the extension (mploader/scan/_walk.pyi has all of it)."""

    def walk_v2(self, buf: Buffer, start: int, end: int, check_crc: bool, parse_markers: bool, /,
                ) -> tuple[int, bytearray]: ...

    def last_entry(self, buf: Buffer, start: int, end: int, /) -> tuple[int, int, int | None]: ...

    def index_draft(self, table: np.ndarray, base_offset: int, interval: int, /) -> bytearray: ...

    def crc32c(self, data: Buffer, value: int = 0, /) -> int: ...


def expected_layout() -> dict[str, object]:
    """The constants a build must expose, with the values this Python needs."""
    return {"VERSION": VERSION, "ROW_FIELDS": ROW_FIELDS, "ROW_BYTES": BATCH_TABLE.itemsize,
            "DRAFT_FIELDS": INDEX_DRAFT.names, "DRAFT_BYTES": INDEX_DRAFT.itemsize}


def layout_mismatch(module: object) -> str | None:
    """What of ``module``'s constants differs from :func:`expected_layout` (None: nothing)."""
    for name, want in expected_layout().items():
        got = getattr(module, name, None)
        if got != want:
            return f"its {name} is {got!r}, not {want!r}"
    return None


def checked(module: object) -> CompiledWalk | None:
    """``module`` if its layout is this Python's; None, with a warning that says how to rebuild it, otherwise."""
    mismatch = layout_mismatch(module)
    if mismatch is not None:
        logging.getLogger(__name__).warning(
            "%s was built from another version of _walk.c (%s); using the Python walk. "
            "Rebuild it: pip install -e . (or scripts/test)", getattr(module, "__file__", module), mismatch)
        return None
    return cast(CompiledWalk, module)  # its version and layouts are this Python's: so are its functions


def load(environ: Mapping[str, str] = os.environ) -> CompiledWalk | None:
    """The extension, checked, or None (see the module's docstring)."""
    if environ.get("MPLOADER_PURE_PYTHON") == "1":
        return None
    try:
        from mploader.scan import _walk
    except ImportError:  # not built (no C compiler at install time)
        return None
    return checked(_walk)


WALK: CompiledWalk | None = load()
if WALK is not None:
    crc.use(WALK.crc32c)  # the crc32c package is then never imported
    log.use(WALK.last_entry)

__all__ = ["VERSION", "WALK", "CompiledWalk", "checked", "expected_layout", "layout_mismatch", "load"]
