"""One segment on disk and the index operations the loader needs (Kafka's LogSegment, docs/loading.md §10).

Index files are read the way Kafka opens them: every slot up to the file
length is an entry (docs/formats.md §10), and lookups use Kafka's exact search
(a "warm" section of the last 8 KiB first), so a preallocated zero tail or a
garbage index gives the same answers it gives Kafka.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from mploader.disk.base import Disk
from mploader.errors import CorruptRecordError, StartupFailedError
from mploader.format import names, records
from mploader.format.index import OFFSET_ENTRY, TIME_ENTRY, TXN_ENTRY, round_down
from mploader.format.log import ENTRY_PREFIX, iter_entries, last_entry
from mploader.format.records import HEADER_SIZE_UP_TO_MAGIC
from mploader.scan import SegmentScan, SegmentTask, Stop, scan_buffer

_OFFSET = struct.Struct(">q")
_LAST_OFFSET_DELTA = struct.Struct(">i")


@dataclass(slots=True)
class Segment:
    dir: str
    base_offset: int
    suffix: str = ""  # ".swap" for a swap segment being completed
    # Kafka's FileRecords end: a segment created preallocated in this load (FileRecords.open with
    # fileAlreadyExists=false and preallocate=true: end = 0) holds no records whatever its file length
    records_end: int | None = None
    _stem: str = field(init=False, repr=False, compare=False)  # the files' path up to their suffix

    def __post_init__(self) -> None:
        self._stem = os.path.join(self.dir, names.filename_prefix(self.base_offset))

    def file(self, suffix: str) -> str:
        return self._stem + suffix + self.suffix

    @property
    def log_path(self) -> str:
        return self.file(names.LOG_SUFFIX)

    @property
    def index_path(self) -> str:
        return self.file(names.INDEX_SUFFIX)

    @property
    def time_index_path(self) -> str:
        return self.file(names.TIME_INDEX_SUFFIX)

    @property
    def txn_index_path(self) -> str:
        return self.file(names.TXN_INDEX_SUFFIX)


class LogSegments(MutableMapping[int, Segment]):
    """A log's segments by base offset (Kafka's ``LogSegments``, a skip-list map): a mapping that also keeps
    them in ascending order.  Recovery asks for that order once per recovered segment, while the map
    seldom changes; sorting it every time made a partition's load quadratic in its segments."""

    __slots__ = ("_by_base", "_ascending")

    def __init__(self) -> None:
        self._by_base: dict[int, Segment] = {}
        self._ascending: list[Segment] | None = None  # None: changed since last asked

    def __getitem__(self, base: int) -> Segment:
        return self._by_base[base]

    def __contains__(self, base: object) -> bool:
        return base in self._by_base

    def __setitem__(self, base: int, seg: Segment) -> None:
        self._by_base[base] = seg
        self._ascending = None

    def __delitem__(self, base: int) -> None:
        del self._by_base[base]
        self._ascending = None

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_base)

    def __len__(self) -> int:
        return len(self._by_base)

    def ascending(self) -> Sequence[Segment]:
        """The segments by ascending base offset (shared until the map changes: not to be modified)."""
        if self._ascending is None:
            self._ascending = [self._by_base[b] for b in sorted(self._by_base)]
        return self._ascending


def read_entries(disk: Disk, path: str, dtype: np.dtype) -> np.ndarray:
    """All slots of an index file as Kafka counts them (missing file = empty)."""
    if not disk.exists(path):
        return np.empty(0, dtype)
    data = disk.view(path)  # the array keeps a mapping alive until it is dropped
    return np.frombuffer(data, dtype, count=len(data) // dtype.itemsize)


def largest_lower_bound_slot(keys: np.ndarray, target: int, entry_size: int = 8, add: int = 0) -> int:
    """AbstractIndex.largestLowerBoundSlotFor: the slot of the largest key <= target, else -1.

    ``keys`` may be a view over a mapped file: only the probed slots are read.  Key ``i`` is
    ``add + keys[i]`` (relative offsets plus the base offset).  The last 8 KiB ("warm" section)
    are searched first, exactly as Kafka does, so unsorted slots (a preallocated zero tail, garbage)
    give Kafka's answer.
    """
    n = len(keys)
    if n == 0:
        return -1
    first_hot = max(0, n - 1 - 8192 // entry_size)
    if add + int(keys[first_hot]) < target:
        return _binary_search(keys, target, first_hot, n - 1, add)
    if add + int(keys[0]) > target:
        return -1
    return _binary_search(keys, target, 0, first_hot, add)


def _binary_search(keys: np.ndarray, target: int, lo: int, hi: int, add: int) -> int:
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        k = add + int(keys[mid])
        if k > target:
            hi = mid - 1
        elif k < target:
            lo = mid
        else:
            return mid
    return lo


def offset_index_lookup(disk: Disk, seg: Segment, target: int, entries: np.ndarray | None = None) -> tuple[int, int]:
    """OffsetIndex.lookup: (offset, position) of the largest entry <= target, else (base, 0); ``entries``: the
    index's, when the caller has read them."""
    if entries is None:
        entries = read_entries(disk, seg.index_path, OFFSET_ENTRY)
    slot = largest_lower_bound_slot(entries["relative_offset"], target, OFFSET_ENTRY.itemsize, seg.base_offset)
    if slot < 0:
        return seg.base_offset, 0
    return seg.base_offset + int(entries["relative_offset"][slot]), int(entries["position"][slot])


def log_size(disk: Disk, seg: Segment) -> int:
    """FileRecords.sizeInBytes: the file length, or 0 for a segment created preallocated in this load."""
    size = disk.size(seg.log_path)
    return size if seg.records_end is None else min(size, seg.records_end)


def walk_from(disk: Disk, seg: Segment, position: int, end: int | None = None) -> SegmentScan:
    """Entries from ``position`` to ``end`` without CRC checks (Kafka's plain batch iteration).  The walk
    runs over the file's own bytes, so every position it reports (rows, stop, errors) is the file's."""
    size = log_size(disk, seg)
    end = size if end is None else min(end, size)
    task = SegmentTask(seg.log_path, seg.base_offset, position, end, check_crc=False)
    if position >= end:
        return scan_buffer(b"", task, position)
    buf = disk.view(seg.log_path)
    try:
        if isinstance(buf, mmap.mmap):
            buf.madvise(mmap.MADV_NORMAL)  # view() expects index lookups; this is a sequential walk
        return scan_buffer(buf, task, end)
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


@contextlib.contextmanager
def log_view(disk: Disk, seg: Segment) -> Iterator[tuple[bytes | mmap.mmap, int]]:
    """The ``.log``'s bytes and :func:`log_size`, unmapped (its descriptor closed) when the block ends, also by an
    exception: a StartupFailedError raised from a walk would otherwise keep the mapping until its traceback is
    collected."""
    size = log_size(disk, seg)
    buf = disk.view(seg.log_path) if size > HEADER_SIZE_UP_TO_MAGIC else b""
    try:
        yield buf, size
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def _entries(buf: bytes | mmap.mmap, seg: Segment, position: int, size: int) -> Iterator[tuple[int, int, int]]:
    """FileLogInputStream from ``position`` to ``size`` over ``buf`` (:func:`log_view`): (position, size, magic)
    of each entry; a size field below 14 in an unrecovered segment is fatal (nothing catches the
    CorruptRecordException there)."""
    if size <= HEADER_SIZE_UP_TO_MAGIC:
        return
    try:
        yield from iter_entries(buf, position, size, seg.log_path)
    except CorruptRecordError as e:
        raise _unrecovered_corrupt(seg, e) from e


def _unrecovered_corrupt(seg: Segment, e: CorruptRecordError) -> StartupFailedError:
    return StartupFailedError(seg.log_path, "CorruptRecordException",
                              f"{e.reason} at byte {e.position} of an unrecovered segment")


def translate_offset(disk: Disk, seg: Segment, offset: int, start_position: int = 0) -> tuple[int, int] | None:
    """LogSegment.translateOffset: (position, size) of the first batch with lastOffset >= offset."""
    _, pos = offset_index_lookup(disk, seg, offset)
    with log_view(disk, seg) as (buf, size):
        return _search_for_offset(buf, seg, size, offset, max(pos, start_position))


def _search_for_offset(buf: bytes | mmap.mmap, seg: Segment, size: int, offset: int,
                       position: int) -> tuple[int, int] | None:
    """FileRecords.searchForOffsetWithSize: reads headers from ``position`` on and stops at the first batch with
    lastOffset >= offset, its (position, size); entries after it are never looked at."""
    for p, total, magic in _entries(buf, seg, position, size):
        if _last_offset(buf, seg, p, magic) >= offset:
            return p, total
    return None


def _last_offset(buf: bytes | mmap.mmap, seg: Segment, p: int, magic: int) -> int:
    """FileChannelRecordBatch.lastOffset(): a legacy entry's offset; for v2 it loads the header
    (:func:`~mploader.format.records.header_load_fails`)."""
    base: int = _OFFSET.unpack_from(buf, p)[0]
    if magic < 2:
        return base
    if records.header_load_fails(p, len(buf)):
        raise StartupFailedError(seg.log_path, "KafkaException", records.header_load_failure(p, len(buf)))
    delta: int = _LAST_OFFSET_DELTA.unpack_from(buf, p + 23)[0]
    return base + delta


def read_next_offset(disk: Disk, seg: Segment, scan: SegmentScan | None = None) -> int:
    """LogSegment.readNextOffset: last batch's lastOffset + 1 from the index's last entry on.

    Kafka translates the index's last offset (:func:`translate_offset`: the first batch from the entry's
    position whose lastOffset reaches it), then walks the entries from that batch with FileLogInputStream (size
    field only: a corrupt size is fatal, a torn last entry ends the walk, nothing else is checked) and reads the
    header of the last one.  The second walk starts where the first stopped, so here they are one walk over one
    mapping, reading the index once; the second is ``format.log.last_entry`` (the compiled loop where built).
    An unclean shutdown leaves the active segment's index preallocated: its last slot is zeros, the target is
    the base offset, and the walk covers the whole segment (~1 million entries for 16 partitions of 85 MB).

    ``scan``: a scan of this ``.log`` that may stand for the second walk (:func:`_proven_last_entry`)."""
    entries = read_entries(disk, seg.index_path, OFFSET_ENTRY)
    target = seg.base_offset + int(entries["relative_offset"][-1]) if len(entries) else seg.base_offset
    _, pos = offset_index_lookup(disk, seg, target, entries)
    with log_view(disk, seg) as (buf, size):
        hit = _search_for_offset(buf, seg, size, target, max(pos, 0))  # translateOffset's max(position, 0)
        if hit is None:
            return seg.base_offset
        last = _proven_last_entry(scan, hit[0], size)
        if last is None:
            try:  # the second walk, from the hit: a complete entry, so the walk finds one
                last = last_entry(buf, hit[0], size, seg.log_path)
            except CorruptRecordError as e:
                raise _unrecovered_corrupt(seg, e) from e
        p = hit[0] if last is None else last
        return _last_offset(buf, seg, p, ENTRY_PREFIX.unpack_from(buf, p)[3]) + 1


def _proven_last_entry(scan: SegmentScan | None, start: int, size: int) -> int | None:
    """Where the size-field walk from ``start`` to ``size`` ends (its last entry's position), read off a scan
    instead of walked, when the scan proves it: a scan from byte 0 that found every byte to ``size`` valid
    (``Stop.END``).  Its rows are then the file's entries, a row per (outer) entry, each starting where the one before
    ends, each size field read and checked, so a walk from any row's start visits the rows after it and ends on the
    last one.  None (walk it) when ``start`` is no row's start or the scan proves less: one that stopped early,
    a range, another length of file."""
    if scan is None or scan.start != 0 or scan.stop is not Stop.END or scan.end != size or scan.valid_bytes != size:
        return None
    pos = scan.batches["position"]
    i = int(np.searchsorted(pos, start))
    return int(pos[-1]) if i < len(pos) and pos[i] == start else None


def resize_index(disk: Disk, path: str, max_index_size: int, entry_size: int) -> None:
    """AbstractIndex.resize(maxIndexSize): creates a missing file; no-op when already that size.

    Kafka sets the new length, then restores the write position: for an index opened as it was
    (not rebuilt) that is ``roundDown(file length, entry size)``, and a position past the new
    length throws IllegalArgumentException after the file was cut: start-up fails.  A rebuilt
    index is trimmed to its entries, which always fit.
    """
    size = round_down(max_index_size, entry_size)
    exists = disk.exists(path)
    length = disk.size(path) if exists else 0
    if not exists or length != size:
        disk.set_size(path, size)
    if round_down(length, entry_size) > size:
        raise StartupFailedError(path, "IllegalArgumentException",
                                 f"index of {length} bytes holds more entries than segment.index.bytes "
                                 f"({max_index_size}) allows; Kafka cuts it to {size} bytes and fails to start")


def check_index_fits(disk: Disk, seg: Segment, max_index_size: int) -> None:
    """The part of :func:`resize_indexes` that can fail, done where Kafka resizes (cut, then fail)."""
    for path, entry in ((seg.index_path, OFFSET_ENTRY.itemsize), (seg.time_index_path, TIME_ENTRY.itemsize)):
        if disk.exists(path) and round_down(disk.size(path), entry) > round_down(max_index_size, entry):
            resize_index(disk, path, max_index_size, entry)


def resize_indexes(disk: Disk, seg: Segment, max_index_size: int) -> None:
    resize_index(disk, seg.index_path, max_index_size, OFFSET_ENTRY.itemsize)
    resize_index(disk, seg.time_index_path, max_index_size, TIME_ENTRY.itemsize)


def truncate_to(disk: Disk, seg: Segment, offset: int, max_index_size: int,
                before_cut: Callable[[], None] = lambda: None) -> int:
    """LogSegment.truncateTo(offset) (after InvalidOffsetException): returns bytes removed.  ``before_cut`` runs
    just before the ``.log`` is cut (see :func:`~mploader.recovery.segment_recovery.recover_segment`)."""
    hit = translate_offset(disk, seg, offset)
    for path, dtype in ((seg.index_path, OFFSET_ENTRY), (seg.time_index_path, TIME_ENTRY)):
        if disk.exists(path):
            # Kafka only moves the index position back; the bytes stay, then the file is resized to full size
            disk.set_size(path, round_down(max_index_size, dtype.itemsize))
    if disk.exists(seg.txn_index_path):
        tx = read_entries(disk, seg.txn_index_path, TXN_ENTRY)
        over = np.flatnonzero(tx["last_offset"] >= offset)
        if over.size:
            disk.set_size(seg.txn_index_path, int(over[0]) * TXN_ENTRY.itemsize)
    if hit is None:
        return 0
    size = disk.size(seg.log_path)
    if hit[0] < size:
        before_cut()
    disk.set_size(seg.log_path, hit[0])
    return size - hit[0]
