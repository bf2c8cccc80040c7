"""Reading a file's bytes with the fewest system calls: ``os.open`` and ``pread``, not a buffered ``open()`` (which
costs three more calls a file, on the many small files a load reads: checkpoints, indexes, snapshots)."""

from __future__ import annotations

import os


def read_to(fd: int, end: int, start: int = 0) -> bytes:
    """Bytes [start, end) of the file, or up to its end if it is shorter now: a short read is not the file's end (the
    scan would take it for a torn tail, and recovery would cut valid bytes), so read on until the end or nothing."""
    data = os.pread(fd, max(0, end - start), start)
    while start + len(data) < end:
        more = os.pread(fd, end - start - len(data), start + len(data))
        if not more:
            break
        data += more
    return data


def read_file(path: str | os.PathLike[str], start: int = 0, end: int | None = None) -> bytes:
    """Bytes [start, end) of the file at ``path`` (``end`` None: its size when opened).  An error names the file, as
    open() would (``fstat`` and ``pread`` name none; a directory opens and fails at its read)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return read_to(fd, os.fstat(fd).st_size if end is None else end, start)
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror, os.fspath(path)) from None
    finally:
        os.close(fd)


__all__ = ["read_file", "read_to"]
