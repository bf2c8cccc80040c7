"""File-writing helpers: whole small files (for the partition writer, the fault injector and the
generator) and early writeback of a segment's bytes (for the partition writer)."""

from __future__ import annotations

import os
from pathlib import Path


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Have the kernel start writing these bytes to disk now, without waiting for them.

    Left alone, dirty pages of an output smaller than the dirty-page limits reach the disk only
    at the next sync, after all the CPU work: generation then costs CPU time *plus* disk time.
    POSIX_FADV_DONTNEED starts asynchronous writeback of the range on Linux (and drops pages
    that are already clean), so the disk works while we build the next batches.
    """
    if length > 0 and hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def _write_file(path: Path, data: bytes, file_size: int | None = None) -> None:
    """Write ``data``; with ``file_size`` extend the file to that size with a zero (sparse) tail,
    as RandomAccessFile.setLength does for a preallocated index."""
    with open(path, "wb") as f:
        f.write(data)
        if file_size is not None and file_size > len(data):
            f.truncate(file_size)
