"""Splitting a segment whose offsets overflow its base (LOADING.md §11).

When recovery meets a batch whose ``lastOffset - base`` does not fit an int32
(legacy data written before KAFKA-5413), Kafka's loader raises
LogSegmentOffsetOverflowException, rewrites the segment as several new ones
(``LocalLog.splitOverflowedSegment``), swaps them in (``replaceSegments``) and
runs the interrupted phase again.  This module does the rewriting and the swap
with the same decisions Kafka takes:

* the precondition ``hasOverflow`` is evaluated on the state the aborted
  recovery left behind (its in-memory offset index, not the index file);
* batches are framed the way ``FileLogInputStream`` frames them (no CRC check,
  no minimum batch size beyond the 14-byte size field) and each new segment is
  filled by ``LogSegment.appendFromFile``: chunks bounded by the copy buffer
  (1 MiB, grown to one larger batch and kept), one ``append`` per chunk, hence
  the append-time offset/time index entries;
* the new segments are written as ``*.cleaned``, renamed ``*.swap`` (highest
  base first), the old segment's files go (only when the old segment is in the
  segment map, see :func:`split_overflowed_segment`), then ``*.swap`` become the
  final names (lowest base first).

Files are written in their final state directly: Kafka's preallocated
``.cleaned`` files are trimmed before anything else looks at them, so only the
end state is observable.  Every change goes through the :class:`Disk`.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from dataclasses import dataclass, field

import numpy as np

from .config import EffectiveConfig
from .disk import Disk
from .errors import CorruptRecordError, InvalidRecordError, StartupFailedError
from .format import legacy, names
from .format.index import OFFSET_ENTRY, TIME_ENTRY, round_down
from .segment import Segment

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
LONG_MIN = -(2**63)
COPY_BUFFER_BYTES = 1024 * 1024  # LogSegment.appendChunkFromFile's initial read buffer
LOG_OVERHEAD = 12
HEADER_SIZE_UP_TO_MAGIC = 17
MIN_SIZE_FIELD = 14  # LegacyRecord.RECORD_OVERHEAD_V0
V2_HEADER_BYTES = 61  # what DefaultFileChannelRecordBatch loads to read lastOffset / maxTimestamp
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# the files of one segment, in the order LogSegment.changeFileSuffixes renames them
_SEGMENT_SUFFIXES = (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX)
# the order LogSegment.deleteIfExists(dir, base, suffix) deletes them
_DELETE_ORDER = (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX, names.LOG_SUFFIX)


# ------------------------------------------------------------------------------------------------
# Framing: Kafka's plain batch iteration over the old .log


class _Log:
    """The old segment's bytes, cut into entries exactly as FileLogInputStream cuts them."""

    def __init__(self, path: str, data: bytes):
        self.path = path
        self.data = data
        self.size = len(data)
        pos: list[int] = []
        sizes: list[int] = []
        magics: list[int] = []
        offsets: list[int] = []
        p, end = 0, self.size
        self.corrupt_at: int | None = None  # position of a size field below 14 (iteration raises there)
        while p < end - HEADER_SIZE_UP_TO_MAGIC:
            off, size = struct.unpack_from(">qi", data, p)
            if size < MIN_SIZE_FIELD:
                self.corrupt_at = p
                break
            if p > end - LOG_OVERHEAD - size:
                break  # torn last entry: iteration ends silently
            pos.append(p)
            sizes.append(LOG_OVERHEAD + size)
            magics.append(struct.unpack_from(">b", data, p + 16)[0])
            offsets.append(off)
            p += LOG_OVERHEAD + size
        self.pos, self.sizes, self.magics, self.offsets = pos, sizes, magics, offsets
        self.framed_end = p  # end of the last complete entry

    def __len__(self) -> int:
        return len(self.pos)

    def _v2_header(self, i: int) -> None:
        """DefaultFileChannelRecordBatch.loadBatchHeader reads 61 bytes whatever the batch size."""
        if self.pos[i] + V2_HEADER_BYTES > self.size:
            raise StartupFailedError(self.path, "KafkaException",
                                     f"failed to load the record batch header at position {self.pos[i]}: "
                                     f"end of file after {self.size - self.pos[i]} of {V2_HEADER_BYTES} bytes")

    def last_offset(self, i: int) -> int:
        if self.magics[i] >= 2:
            self._v2_header(i)
            return self.offsets[i] + _I32.unpack_from(self.data, self.pos[i] + 23)[0]
        return self.offsets[i]  # legacy: the offset field, no load

    def max_timestamp(self, i: int) -> int:
        p, magic = self.pos[i], self.magics[i]
        if magic >= 2:
            self._v2_header(i)
            return _I64.unpack_from(self.data, p + 35)[0]
        if magic == 0:
            return -1  # RecordBatch.NO_TIMESTAMP
        if magic == 1:
            return _I64.unpack_from(self.data, p + 18)[0]
        # LegacyFileChannelRecordBatch.headerSize() -> LegacyRecord.headerSize(magic)
        raise StartupFailedError(self.path, "IllegalArgumentException",
                                 f"invalid magic {magic} of the legacy entry at position {p}")

    def base_offset(self, i: int) -> int:
        """FileChannelRecordBatch.baseOffset(): v2 the offset field; legacy the first inner offset."""
        if self.magics[i] >= 2:
            return self.offsets[i]
        codec = self.data[self.pos[i] + 17] & legacy.ATTR_CODEC_MASK
        if codec > 4:  # CompressionType.forId
            raise StartupFailedError(self.path, "IllegalArgumentException",
                                     f"unknown compression type id {codec} of the legacy entry at {self.pos[i]}")
        try:
            return legacy.inner_offsets(self.data, self.pos[i], self.path)[0]
        except InvalidRecordError as e:
            raise StartupFailedError(self.path, "InvalidRecordException", str(e)) from e
        except CorruptRecordError as e:
            raise StartupFailedError(self.path, "CorruptRecordException", str(e)) from e

    def raise_if_corrupt(self) -> None:
        if self.corrupt_at is not None:
            size = struct.unpack_from(">i", self.data, self.corrupt_at + 8)[0]
            raise StartupFailedError(self.path, "CorruptRecordException",
                                     f"record size {size} below the minimum {MIN_SIZE_FIELD} at byte "
                                     f"{self.corrupt_at} of an overflowed segment")


def _fits(offset: int, base: int) -> bool:
    return 0 <= offset - base <= INT32_MAX


# ------------------------------------------------------------------------------------------------
# hasOverflow


def _index_after_aborted_recovery(old: _Log, base: int, interval: int) -> tuple[int, int] | None:
    """The last entry LogSegment.recover appended to the offset index before the overflow, if any.

    Recovery resets the index and appends ``(lastOffset, position)`` whenever more than
    ``interval`` bytes passed since the last entry; it stops (raising the overflow) at the first
    batch whose lastOffset does not fit.  ``hasOverflow`` then looks at that in-memory index.
    """
    last: tuple[int, int] | None = None
    last_entry_pos = 0
    for i in range(len(old)):
        lo = old.last_offset(i)
        if not _fits(lo, base):
            break
        p = old.pos[i]
        if p - last_entry_pos > interval:
            last = (lo, p)
            last_entry_pos = p
    return last


def has_overflow(disk: Disk, segment: Segment, cfg: EffectiveConfig) -> bool:
    """LogSegment.hasOverflow of ``segment`` right after its recovery raised the overflow."""
    return _has_overflow(_Log(segment.log_path, disk.read(segment.log_path)), segment.base_offset,
                         cfg.index_interval_bytes)


def _has_overflow(old: _Log, base: int, interval: int) -> bool:
    """readNextOffset() > base and readNextOffset() - 1 does not fit, readNextOffset starting from
    the offset index that the aborted recovery holds in memory."""
    entry = _index_after_aborted_recovery(old, base, interval)
    target, start = entry if entry is not None else (base, 0)
    # translateOffset(target): the first batch from the index position whose lastOffset >= target
    first = next((i for i in range(len(old)) if old.pos[i] >= start), None)
    hit = None
    if first is not None:
        for i in range(first, len(old)):
            if old.last_offset(i) >= target:
                hit = i
                break
    old.raise_if_corrupt()  # the iteration (to the hit, then lastBatch() to the end) meets it
    if hit is None:
        next_offset = base
    else:
        next_offset = old.last_offset(len(old) - 1) + 1
    return next_offset > base and not _fits(next_offset - 1, base)


# ------------------------------------------------------------------------------------------------
# appendFromFile into one new segment


@dataclass(slots=True)
class _NewSegment:
    base: int
    start: int  # position in the old .log of its first byte
    size: int = 0
    offset_entries: list[tuple[int, int]] = field(default_factory=list)  # (offset, position)
    time_entries: list[tuple[int, int]] = field(default_factory=list)  # (timestamp, offset)


class _Indexes:
    """The append-time index bookkeeping of one new LogSegment (OffsetIndex/TimeIndex rules, F§8-§9)."""

    def __init__(self, seg: _NewSegment, path: str, cfg: EffectiveConfig):
        self.seg = seg
        self.path = path
        self.max_index_size = max_index_size = cfg.max_index_size
        self.interval = cfg.index_interval_bytes
        self.offset_slots = round_down(max_index_size, OFFSET_ENTRY.itemsize) // OFFSET_ENTRY.itemsize
        self.time_slots = round_down(max_index_size, TIME_ENTRY.itemsize) // TIME_ENTRY.itemsize
        self.offset_ready = False
        self.time_ready = False
        self.max_ts = -1  # TimeIndex.lastEntry() of a fresh index: (-1, base)
        self.max_ts_offset = seg.base
        self.bytes_since_last_entry = 0

    def _materialise(self, entry_size: int, what: str) -> None:
        if self.max_index_size < entry_size:
            raise StartupFailedError(self.path, "IllegalArgumentException",
                                     f"invalid max index size {self.max_index_size} for the {what} index")

    def offset_index(self) -> None:
        if not self.offset_ready:
            self._materialise(OFFSET_ENTRY.itemsize, "offset")
            self.offset_ready = True

    def time_index(self) -> None:
        if not self.time_ready:
            self._materialise(TIME_ENTRY.itemsize, "time")
            self.time_ready = True

    def _last_time(self) -> tuple[int, int]:
        t = self.seg.time_entries
        return t[-1] if t else (-1, self.seg.base)

    def time_maybe_append(self, ts: int, offset: int, skip_full_check: bool) -> None:
        entries = self.seg.time_entries
        if not skip_full_check and len(entries) >= self.time_slots - 1:
            raise StartupFailedError(self.path, "IllegalArgumentException",
                                     f"attempt to append to a full time index (size = {len(entries)})")
        last_ts, last_off = self._last_time()
        if entries and offset < last_off:
            raise StartupFailedError(self.path, "InvalidOffsetException",
                                     f"time index offset {offset} below the last one appended ({last_off})")
        if entries and ts < last_ts:
            raise StartupFailedError(self.path, "IllegalStateException",
                                     f"time index timestamp {ts} below the last one appended ({last_ts})")
        if ts > last_ts:
            if len(entries) >= self.time_slots:
                raise StartupFailedError(self.path, "BufferOverflowException",
                                         "time index has no slot for its final entry")
            entries.append((ts, offset))

    def append_chunk(self, largest_offset: int, largest_ts: int, ts_offset: int, size: int) -> None:
        """LogSegment.append of one chunk (the offset is known to fit)."""
        position = self.seg.size
        self.time_index()  # maxTimestampSoFar() materialises the time index
        if largest_ts > self.max_ts:
            self.max_ts, self.max_ts_offset = largest_ts, ts_offset
        if self.bytes_since_last_entry > self.interval:
            entries = self.seg.offset_entries
            if len(entries) >= self.offset_slots:
                raise StartupFailedError(self.path, "IllegalArgumentException",
                                         f"attempt to append to a full offset index (size = {len(entries)})")
            if entries and largest_offset <= entries[-1][0]:
                raise StartupFailedError(self.path, "InvalidOffsetException",
                                         f"offset index entry {largest_offset} is no larger than the last one "
                                         f"appended ({entries[-1][0]})")
            entries.append((largest_offset, position))
            self.time_maybe_append(self.max_ts, self.max_ts_offset, False)
            self.bytes_since_last_entry = 0
        self.bytes_since_last_entry += size
        self.seg.size += size

    def become_inactive(self) -> None:
        """onBecomeInactiveSegment: the final time index entry with the full check skipped."""
        self.time_index()
        self.time_maybe_append(self.max_ts, self.max_ts_offset, True)


def _append_from_file(old: _Log, first: int, idx: _Indexes) -> int:
    """LogSegment.appendFromFile(old, position of entry ``first``): returns the index after the copied entries."""
    seg = idx.seg
    capacity = COPY_BUFFER_BYTES  # a fresh GrowableBufferSupplier per new segment
    j = first
    n = len(old)
    while True:
        # appendChunkFromFile: select the batches of one chunk
        chunk = 0
        k = j
        max_ts, ts_offset, largest = LONG_MIN, LONG_MIN, LONG_MIN
        while k < n:
            lo = old.last_offset(k)
            idx.offset_index()  # canConvertToRelativeOffset materialises the offset index
            if not _fits(lo, seg.base):
                break
            if chunk != 0 and chunk + old.sizes[k] >= capacity:
                break
            ts = old.max_timestamp(k)
            if ts > max_ts:
                max_ts, ts_offset = ts, lo
            largest = lo
            chunk += old.sizes[k]
            k += 1
        if chunk == 0:
            break
        if capacity < chunk:
            capacity = chunk  # one batch larger than the buffer: a buffer of its size, kept for later chunks
        idx.append_chunk(largest, max_ts, ts_offset, chunk)
        j = k
    return j


# ------------------------------------------------------------------------------------------------
# The split


def _file(dir: str, base: int, suffix: str, extra: str = "") -> str:
    return os.path.join(dir, names.segment_file_name(base, suffix) + extra)


def _delete_cleaned(disk: Disk, dir: str, base: int, deleted: list[str] | None) -> None:
    """LogSegment.deleteIfExists(dir, base, ".cleaned")."""
    for sfx in _DELETE_ORDER:
        path = _file(dir, base, sfx, names.CLEANED_SUFFIX)
        if disk.delete(path) and deleted is not None:
            deleted.append(os.path.basename(path))


def _plan(old: _Log, segment: Segment, cfg: EffectiveConfig, created: list[int]) -> list[_NewSegment]:
    """The new segments: their byte ranges of the old .log and their append-time index entries."""
    out: list[_Indexes] = []
    position, i = 0, 0
    while position < old.size:
        if i >= len(old):
            # batchesFrom(position).iterator().next() on a torn tail
            raise StartupFailedError(segment.log_path, "NoSuchElementException",
                                     f"no complete batch at byte {position} of {old.size} while splitting")
        base = old.base_offset(i)
        created.append(base)  # createNewCleanedSegment
        idx = _Indexes(_NewSegment(base, position), _file(segment.dir, base, names.LOG_SUFFIX,
                                                          names.CLEANED_SUFFIX), cfg)
        out.append(idx)
        i = _append_from_file(old, i, idx)
        if idx.seg.size == 0:
            raise StartupFailedError(segment.log_path, "IllegalStateException",
                                     f"failed to append records from position {position} in segment "
                                     f"{segment.base_offset} (batch base {base})")
        position += idx.seg.size
    for idx in out:  # only once every new segment is filled
        idx.become_inactive()
    total = sum(idx.seg.size for idx in out)
    if total != old.size:
        raise StartupFailedError(segment.log_path, "IllegalStateException",
                                 f"inconsistent segment sizes after split: before {old.size}, after {total}")
    return [idx.seg for idx in out]


def _mtime_ms(disk: Disk, path: str) -> int:
    """File.lastModified() of the old .log, in milliseconds."""
    if disk.overlay_size(path) is None and os.path.exists(path):
        return os.stat(path).st_mtime_ns // 1_000_000
    return time.time_ns() // 1_000_000


def split_overflowed_segment(disk: Disk, segment: Segment, cfg: EffectiveConfig, in_segment_map: bool,
                             *, deleted: list[str] | None = None) -> list[Segment]:
    """LocalLog.splitOverflowedSegment + replaceSegments for ``segment`` (LOADING.md §11).

    ``segment`` is the segment whose recovery raised the overflow (its offset index as the
    aborted recovery left it).  ``in_segment_map`` says whether the loader's segment map holds a
    segment with its base offset: true in recoverLog, false when the overflow was raised inside
    loadSegmentFiles (the segment is added to the map only after its recovery).  Only a segment
    in the map has its files renamed to ``*.deleted`` (and, here, deleted at once instead of
    after ``file.delete.delay.ms``); otherwise the rename of a new segment with the same base
    overwrites its ``.log``/``.index``/``.timeindex`` and everything else of it stays (its
    ``.txnindex``, or all its files when no new segment has its base).

    Returns the new segments in the order they were created (ascending file positions).  Names
    of deleted files are appended to ``deleted``.  Raises :class:`StartupFailedError` where Kafka's
    split throws (every new ``.cleaned`` file is then removed, as Kafka's cleanup does).
    Producer snapshots are not touched here: see :func:`replace_in_segment_map`.
    """
    if not segment.log_path.endswith(names.LOG_SUFFIX):
        raise StartupFailedError(segment.log_path, "IllegalArgumentException", "cannot split a non-.log file")
    old = _Log(segment.log_path, disk.read(segment.log_path))
    if not _has_overflow(old, segment.base_offset, cfg.index_interval_bytes):
        raise StartupFailedError(segment.log_path, "IllegalArgumentException",
                                 "split operation is only permitted for segments with overflow")
    log.info("%s: splitting overflowed segment %d (%d bytes)", segment.dir, segment.base_offset, old.size)

    created: list[int] = []
    try:
        plan = _plan(old, segment, cfg, created)
    except BaseException:
        for base in dict.fromkeys(created):
            _delete_cleaned(disk, segment.dir, base, deleted)
        raise

    mtime_ns = _mtime_ms(disk, segment.log_path) * 1_000_000
    new_segments: list[Segment] = []
    for s in plan:
        _delete_cleaned(disk, segment.dir, s.base, deleted)
        cleaned = Segment(segment.dir, s.base, names.CLEANED_SUFFIX)
        disk.write(cleaned.log_path, old.data[s.start : s.start + s.size], fsync=True)
        oi = np.empty(len(s.offset_entries), OFFSET_ENTRY)
        if s.offset_entries:
            arr = np.array(s.offset_entries, dtype=np.int64)
            oi["relative_offset"], oi["position"] = arr[:, 0] - s.base, arr[:, 1]
        ti = np.empty(len(s.time_entries), TIME_ENTRY)
        if s.time_entries:
            arr = np.array(s.time_entries, dtype=np.int64)
            ti["timestamp"], ti["relative_offset"] = arr[:, 0], arr[:, 1] - s.base
        disk.write(cleaned.index_path, oi.tobytes(), fsync=True)
        disk.write(cleaned.time_index_path, ti.tobytes(), fsync=True)
        for path in (cleaned.log_path, cleaned.index_path, cleaned.time_index_path):
            disk.set_mtime(path, mtime_ns)
        new_segments.append(Segment(segment.dir, s.base))
    log.info("%s: replacing overflowed segment %d with %s", segment.dir, segment.base_offset,
             [s.base_offset for s in new_segments])
    _replace_segments(disk, segment, new_segments, in_segment_map, deleted)
    return new_segments


def _rename_suffix(disk: Disk, seg: Segment, old_extra: str, new_extra: str, *, log_required: bool) -> None:
    """LogSegment.changeFileSuffixes: each of the four files that exists is renamed."""
    for sfx in _SEGMENT_SUFFIXES:
        src = _file(seg.dir, seg.base_offset, sfx, old_extra)
        if disk.exists(src):
            disk.rename(src, _file(seg.dir, seg.base_offset, sfx, new_extra))
        elif sfx == names.LOG_SUFFIX and log_required:
            raise FileNotFoundError(src)


def _replace_segments(disk: Disk, old: Segment, new: list[Segment], in_segment_map: bool,
                      deleted: list[str] | None) -> None:
    """LocalLog.replaceSegments(new, [old]) with the old segment's delete done at once."""
    ordered = sorted(new, key=lambda s: s.base_offset)
    for seg in reversed(ordered):  # .cleaned -> .swap, highest base first
        _rename_suffix(disk, seg, names.CLEANED_SUFFIX, names.SWAP_SUFFIX, log_required=True)
    if in_segment_map:
        # deleteSegmentFiles(async): rename to *.deleted now; mploader deletes at once
        renamed = []
        for sfx in _SEGMENT_SUFFIXES:
            src = _file(old.dir, old.base_offset, sfx)
            if disk.exists(src):
                disk.rename(src, src + names.DELETED_SUFFIX)
                renamed.append(src)
        for src in renamed:
            if disk.delete(src + names.DELETED_SUFFIX) and deleted is not None:
                deleted.append(os.path.basename(src))
    for seg in ordered:  # .swap -> final names, lowest base first
        _rename_suffix(disk, seg, names.SWAP_SUFFIX, "", log_required=True)
    disk.sync_dir(old.dir)


def replace_in_segment_map(segments: dict[int, Segment], old: Segment, new: list[Segment],
                           in_segment_map: bool) -> list[int]:
    """The segment-map side of replaceSegments; returns the bases whose producer snapshot Kafka
    then marks for deletion (old segments that were in the map and whose base is no new base).

    New segments are added (replacing any segment with the same base); the old segment, if it
    was in the map, is removed unless its base equals the lowest new base -- by base, so when
    the new bases are not in file order a new segment can be the one removed, as in Kafka.
    """
    for seg in sorted(new, key=lambda s: s.base_offset, reverse=True):
        segments[seg.base_offset] = seg
    if not in_segment_map:
        return []
    lowest = min(s.base_offset for s in new)
    if old.base_offset != lowest:
        segments.pop(old.base_offset, None)
    return [] if old.base_offset in {s.base_offset for s in new} else [old.base_offset]


__all__ = ["has_overflow", "replace_in_segment_map", "split_overflowed_segment"]
