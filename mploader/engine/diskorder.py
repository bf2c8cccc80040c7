"""Disk order: which data dirs are read by one reader in the order of their device, and that order.

A disk with a head reads at its media rate while each request starts where the last one ended, and loses a seek
and half a turn (~10-15 ms, a megabyte or two of reading) to every jump.  Two readers of different files make it
jump between them at every request: Kafka's own field report of an unclean shutdown on HDDs took 1h16m with one
recovery thread and 1h36m with two.  So a dir on such a device is read by one reader, the read-ahead
(:class:`mploader.engine.readahead.ReadAhead`, gated), in large requests and in the order its files lie on the
device, and every scan waits for its range to be read: the scans, however many, read from the page cache.

* :func:`reads_in_disk_order`: whether a dir is read so: its device says ``rotational=1`` and most of its planned
  bytes are not in the page cache (a warm load reads nothing from the disk: it keeps the usual order and workers);
* :func:`disk_ordered`: the dir's planned partitions by where the first byte each scans lies on the device
  (``FS_IOC_FIEMAP``, exact; ext4, xfs and btrfs map it), else by inode number (ext4 and xfs put a new file's
  first blocks near its inode: close, not exact), and a small partition's segments in that order too.  Phase 2
  takes the partitions in this order: the reader reads them as they are asked for.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import struct
from collections.abc import Sequence

from mploader.disk import Disk
from mploader.engine.plan import DirPlan, PlannedScans
from mploader.format.files import open_regular
from mploader.format.names import LOG_SUFFIX
from mploader.host.devices import queue_of

FS_IOC_FIEMAP = 0xC020660B  # _IOWR('f', 11, struct fiemap)
_FIEMAP = struct.Struct("=QQIIII")  # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count, fm_reserved
_EXTENT = struct.Struct("=QQQ16xI12x")  # fe_logical, fe_physical, fe_length, (reserved), fe_flags, (reserved)
# where fe_physical says nothing of where the bytes lie: not known yet, delayed allocation, packed with others
_NO_PLACE = 0x2 | 0x4 | 0x100 | 0x200  # FIEMAP_EXTENT_UNKNOWN, _DELALLOC, _NOT_ALIGNED, _DATA_INLINE

_SYS_CACHESTAT = {"x86_64": 451, "aarch64": 451}.get(os.uname().machine)  # cachestat(2), Linux 6.5
COLD_SHARE = 0.5  # a dir with less than this share of its planned bytes in the page cache is read from the disk
SAMPLED_FILES = 32  # files whose cached share is asked (evenly over the plan): a few microseconds each


def physical_offset(fd: int, offset: int) -> int | None:
    """Where byte ``offset`` of the file lies on its device (``FS_IOC_FIEMAP`` of that one byte); None in a hole or
    an extent without a place yet.  An ``OSError`` where the file system has no such map (tmpfs, ``ENOTTY``)."""
    buf = bytearray(_FIEMAP.size + _EXTENT.size)
    _FIEMAP.pack_into(buf, 0, offset, 1, 0, 0, 1, 0)
    fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
    if _FIEMAP.unpack_from(buf)[3] == 0:
        return None
    logical, physical, _, flags = _EXTENT.unpack_from(buf, _FIEMAP.size)
    return None if flags & _NO_PLACE else physical + max(0, offset - logical)


def _place(path: str, offset: int) -> tuple[tuple[int, int], int]:
    """Where a scan of ``path`` from ``offset`` starts reading, as a sort key: (0, its byte on the device), else (1,
    the file's inode number), else (2, 0) (a file that cannot be opened: last); and the bytes it reads."""
    try:
        fd, st = open_regular(path)
    except OSError:
        return (2, 0), 0
    try:
        physical = physical_offset(fd, offset)
    except OSError:
        physical = None
    finally:
        os.close(fd)
    return ((1, st.st_ino) if physical is None else (0, physical)), max(0, st.st_size - offset)


def disk_ordered(planned: PlannedScans, within_bytes: int) -> PlannedScans:
    """``planned``'s partitions in the order their first planned bytes lie on the device, partitions with nothing
    to scan last; the segments of a partition that scans at most ``within_bytes`` in the order they lie too (the
    read-ahead's window holds it whole: Phase 2, which takes them in offset order, waits for them only while the
    partition is read); a bigger partition's in offset order (Phase 2's: its segments are big, a seek between them
    costs little).  One ``FS_IOC_FIEMAP`` a segment."""
    parts = []
    for part, tasks in planned:
        placed = [(*_place(t.path, t.start), t) for t in tasks]
        if sum(size for _, size, _ in placed) <= within_bytes:
            placed.sort(key=lambda p: p[0])
        parts.append((placed[0][0] if placed else (3, 0), part, [t for _, _, t in placed]))
    return [(part, tasks) for _, part, tasks in sorted(parts, key=lambda p: p[0])]


def reads_in_disk_order(plan: DirPlan, read_ahead_bytes: int | str) -> bool:
    """Whether the dir of ``plan`` is read by one reader in disk order: the load reads ahead (``read_ahead_bytes``
    not 0), the dir's device says ``rotational=1`` (what the driver says: this project's VM's virtual disk says 1
    too) and less than :data:`COLD_SHARE` of its segments' bytes are in the page cache (sampled: the last ``.log``
    of up to :data:`SAMPLED_FILES` partitions; where the cache cannot be asked, they count as not in it)."""
    if read_ahead_bytes == 0 or not hasattr(os, "posix_fadvise") or not plan.partitions:
        return False
    try:
        queue = queue_of(plan.data_dir)
    except OSError:
        return False
    if queue is None or not queue.rotational:
        return False
    n = len(plan.partitions)
    sampled = [plan.partitions[i * n // SAMPLED_FILES] for i in range(SAMPLED_FILES)] if n > SAMPLED_FILES \
        else plan.partitions
    return cached_share([p for part in sampled if (p := _last_log(part[0], plan.disk)) is not None]) < COLD_SHARE


def _last_log(partition_dir: str, disk: Disk | None) -> str | None:
    """The partition's newest segment file (the one most likely cached, if any is), None if it has none."""
    listing = None if disk is None else disk.cached_listing(partition_dir)
    try:
        names = os.listdir(partition_dir) if listing is None else listing
    except OSError:
        return None
    logs = [n for n in names if n.endswith(LOG_SUFFIX)]
    return os.path.join(partition_dir, max(logs)) if logs else None


def cached_share(paths: Sequence[str]) -> float:
    """The share of the files' pages in the page cache (``cachestat``, nothing read); 0.0 where it cannot be asked."""
    page = os.sysconf("SC_PAGE_SIZE")
    cached = total = 0
    for path in paths:
        try:
            fd, st = open_regular(path)
        except OSError:
            continue
        try:
            pages = _cached_pages(fd)
        finally:
            os.close(fd)
        if pages is None:
            return 0.0
        cached += pages
        total += -(-st.st_size // page)
    return cached / total if total else 0.0


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _CacheStat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64)
                for name in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


def _cached_pages(fd: int) -> int | None:
    """The file's pages in the page cache (``cachestat(fd, 0..end)``); None where the kernel has no cachestat."""
    if _SYS_CACHESTAT is None:
        return None
    whole, stat = _Range(0, 0), _CacheStat()
    if _libc().syscall(_SYS_CACHESTAT, fd, ctypes.byref(whole), ctypes.byref(stat), 0) != 0:
        return None
    return int(stat.nr_cache)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


__all__ = ["COLD_SHARE", "cached_share", "disk_ordered", "physical_offset", "reads_in_disk_order"]
