"""Opening and reading a file of a data dir safely, with the fewest system calls.

Every open here is ``O_NOFOLLOW`` (a link never leads a read out of a data dir) and ``O_NONBLOCK`` (a FIFO never
blocks the load), and is followed by the ``fstat`` the read needs anyway, which refuses anything but a regular
file (a device, a FIFO) before a byte is read: an :class:`~mploader.errors.EnvironmentFailure` naming the file.
``os.open`` and ``pread``, not a buffered ``open()``: that costs three more calls a file, on the many small files a
load reads (checkpoints, indexes, snapshots)."""

from __future__ import annotations

import errno
import functools
import os
import stat

from mploader.errors import EnvironmentFailure, environment_failure

READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symbolic link"}


def special_file(path: str | os.PathLike[str], mode: int) -> EnvironmentFailure:
    """The refusal of ``path``, which is not a regular file (``mode`` as ``lstat`` or ``fstat`` gave it)."""
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    if stat.S_ISDIR(mode):
        return environment_failure(OSError(errno.EISDIR, f"{kind} stands where a file belongs"), path)
    if stat.S_ISLNK(mode):
        return environment_failure(OSError(errno.ELOOP, f"{kind} stands where a file belongs"), path)
    return EnvironmentFailure(path, errno.ENXIO, f"{kind} stands where a file belongs; mploader never opens one",
                              "move it out of the data dir and load again")


def open_regular(path: str | os.PathLike[str], flags: int = READ_FLAGS,
                 mode: int = 0o644) -> tuple[int, os.stat_result]:
    """``os.open`` of a regular file, never through a link, never blocking: its descriptor and ``fstat``.  A link
    or a special file is refused (:func:`special_file`); another error names the file."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise special_file(path, stat.S_IFLNK) from None
        if e.errno == errno.ENXIO:  # a socket, or a FIFO opened for writing with no reader
            raise special_file(path, stat.S_IFSOCK) from None
        raise
    try:
        st = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        raise OSError(e.errno, e.strerror, os.fspath(path)) from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise special_file(path, st.st_mode)
    return fd, st


def sparse(st: os.stat_result) -> bool:
    """Whether the file must be read rather than mapped: it has holes (a preallocated index or segment) on a tmpfs.
    A mapping's read of a hole there needs a page, and on a full tmpfs that is a SIGBUS that kills the process
    without a word; ``pread`` of a hole allocates nothing.  Elsewhere a hole reads as zeros."""
    return st.st_blocks * 512 < st.st_size and st.st_dev in _tmpfs_devices()


@functools.cache
def _tmpfs_devices() -> frozenset[int]:
    """The devices of the tmpfs mounts (from /proc/self/mountinfo; none where it cannot be read)."""
    found = set()
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                fs_type = fields[fields.index("-") + 1] if "-" in fields else ""
                if fs_type in ("tmpfs", "shmem", "ramfs"):
                    major, minor = fields[2].split(":")
                    found.add(os.makedev(int(major), int(minor)))
    except (OSError, ValueError, IndexError):
        pass
    return frozenset(found)


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
    """Bytes [start, end) of the regular file at ``path`` (``end`` None: its size when opened).  An error names the
    file, as open() would (``pread`` names none)."""
    fd, st = open_regular(path)
    try:
        return read_to(fd, st.st_size if end is None else end, start)
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror, os.fspath(path)) from None
    finally:
        os.close(fd)


__all__ = ["READ_FLAGS", "open_regular", "read_file", "read_to", "sparse", "special_file"]
