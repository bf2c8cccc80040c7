"""Framing of a ``.log`` segment file: how Kafka cuts it into entries (docs/formats.md §4).

Every entry, v2 batch or legacy message, starts with the same 17 bytes::

    0  int64  offset (v2: baseOffset; legacy: offset of the (last) message)
    8  int32  size   (bytes after this field; entry = 12 + size)
    12 int32  v2: partitionLeaderEpoch; legacy: CRC
    16 int8   magic

Iteration stops silently when 17 or fewer bytes remain or when an entry is
incomplete, and raises on a size field below 14.  It never checks CRCs.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mploader.errors import CorruptRecordError
from mploader.format import legacy, records

ENTRY_PREFIX = struct.Struct(">qiib")
RECORD_OVERHEAD_V0 = 14
MAX_SEGMENT_BYTES = 2**31 - 1


def iter_entries(buf: bytes | memoryview | mmap.mmap, start: int = 0, end: int | None = None,
                 path: str | None = None) -> Iterator[tuple[int, int, int]]:
    """Yield ``(position, entry size, magic)`` exactly as Kafka's FileLogInputStream does."""
    end = len(buf) if end is None else end
    p = start
    while p < end - records.HEADER_SIZE_UP_TO_MAGIC:
        _, size, _, magic = ENTRY_PREFIX.unpack_from(buf, p)
        if size < RECORD_OVERHEAD_V0:
            raise _size_below_overhead(path, p, size)
        if p > end - records.LOG_OVERHEAD - size:
            return
        yield p, records.LOG_OVERHEAD + size, magic
        p += records.LOG_OVERHEAD + size


def _size_below_overhead(path: str | None, position: int, size: int) -> CorruptRecordError:
    return CorruptRecordError(path, position, f"record size {size} is less than the minimum record overhead "
                                              f"({RECORD_OVERHEAD_V0})")


def last_entry(buf: bytes | memoryview | mmap.mmap, start: int, end: int, path: str | None = None) -> int | None:
    """The position of the last entry :func:`iter_entries` yields from ``start`` to ``end`` (None: none); raises
    where it raises.  LogSegment.readNextOffset's walk to the last batch, which reads nothing but size fields (an
    unclean shutdown's active segment, whose preallocated index ends in zeros, is walked whole): the compiled
    walk's where it is loaded (:func:`use`), else the Python loop, the reference."""
    if _compiled_last_entry is None:
        return last_entry_in_python(buf, start, end, path)
    return last_entry_compiled(_compiled_last_entry, buf, start, end, path)


def last_entry_in_python(buf: bytes | memoryview | mmap.mmap, start: int, end: int,
                         path: str | None = None) -> int | None:
    """:func:`last_entry` by :func:`iter_entries` itself."""
    found = None
    for found, _, _ in iter_entries(buf, start, end, path):  # noqa: B007 - the loop only keeps the last entry
        pass
    return found


def last_entry_compiled(compiled: LastEntryWalk, buf: bytes | memoryview | mmap.mmap, start: int, end: int,
                        path: str | None = None) -> int | None:
    """:func:`last_entry` by ``compiled`` (the compiled walk's ``last_entry``)."""
    last, stop, bad_size = compiled(buf, start, end)
    if bad_size is not None:
        raise _size_below_overhead(path, stop, bad_size)
    return None if last < 0 else int(last)


# (buf, start, end) -> (the last entry's position or -1, where the walk stopped, the size field below 14 or None)
LastEntryWalk = Callable[[bytes | memoryview | mmap.mmap, int, int], tuple[int, int, int | None]]
_compiled_last_entry: LastEntryWalk | None = None


def use(compiled: LastEntryWalk | None) -> None:
    """Make :func:`last_entry` use ``compiled`` (the compiled walk's ``last_entry``: installed by
    :mod:`mploader.scan.compiled` when it loads the walk, as it installs its CRC-32C in :mod:`mploader.format.crc`;
    this layer cannot import that one); None: the Python loop."""
    global _compiled_last_entry
    _compiled_last_entry = compiled


@dataclass(frozen=True, slots=True)
class EntrySummary:
    """What recovery needs of one entry, for both formats (docs/formats.md §5, §7)."""

    position: int
    size: int
    magic: int
    base_offset: int  # v2 baseOffset; legacy: the entry offset (a wrapper's base needs decompression)
    last_offset: int
    max_timestamp: int
    partition_leader_epoch: int  # -1 for legacy entries
    valid: bool


def summarize(buf: bytes | memoryview, pos: int, size: int, magic: int) -> EntrySummary:
    if magic >= records.MAGIC_V2:
        valid = size >= records.RECORD_BATCH_OVERHEAD
        if valid:
            h = records.read_batch_header(buf, pos)
            valid = records.batch_crc(buf, pos, size) == h.crc
            return EntrySummary(pos, size, magic, h.base_offset, h.last_offset, h.max_timestamp,
                                h.partition_leader_epoch, valid)
        offset, _, ple, _ = ENTRY_PREFIX.unpack_from(buf, pos)
        return EntrySummary(pos, size, magic, offset, offset, -1, ple, False)
    e = legacy.read_entry(buf, pos)
    valid = legacy.message_crc(buf, pos, size) == e.crc
    # maxTimestamp of a legacy entry: the outer timestamp; -1 for magic 0 (read_entry does both)
    return EntrySummary(pos, size, magic, e.offset, e.offset, e.timestamp, -1, valid)
