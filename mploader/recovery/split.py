"""Splitting a segment whose offsets overflow its base (docs/loading.md §11).

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
  (1 MiB, grown to one larger batch and reused), one ``append`` per chunk, hence
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

import errno
import logging
import os
import struct
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field

import numpy as np

from mploader.config import EffectiveConfig
from mploader.disk.base import Disk
from mploader.errors import CorruptRecordError, InvalidRecordError, StartupFailedError
from mploader.format import legacy, names, records
from mploader.format.index import OFFSET_ENTRY, TIME_ENTRY, round_down
from mploader.format.log import RECORD_OVERHEAD_V0, iter_entries
from mploader.recovery.segment import Segment
from mploader.scan.draft import index_entry_rows

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
COPY_BUFFER_BYTES = 1024 * 1024  # LogSegment.appendChunkFromFile's initial read buffer
_I32 = struct.Struct(">i")

# the files of one segment, in the order LogSegment.changeFileSuffixes renames them
_SEGMENT_SUFFIXES = (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX)
# the order LogSegment.deleteIfExists(dir, base, suffix) deletes them
_DELETE_ORDER = (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX, names.LOG_SUFFIX)


# ------------------------------------------------------------------------------------------------
# Framing: Kafka's plain batch iteration over the old .log


class _Log:
    """The old segment's bytes, cut into entries exactly as FileLogInputStream cuts them.

    Per entry: position, size, magic, the offset field, and the two values Kafka loads from
    the batch header when it needs them (lastOffset, maxTimestamp).  Where loading that header
    throws in Kafka, ``bad_last`` / ``bad_ts`` mark the entry; the error is raised only when the
    split actually reads the value, in Kafka's order.
    """

    def __init__(self, path: str, data: bytes):
        self.path = path
        self.data = data
        self.size = size = len(data)
        pos: list[int] = []
        self.corrupt_at: int | None = None  # position of a size field below 14 (iteration raises there)
        try:
            for p, _, _ in iter_entries(data, 0, size, path):  # a torn last entry ends it silently
                pos.append(p)
        except CorruptRecordError as e:
            self.corrupt_at = e.position
        self.pos = np.array(pos, dtype=np.int64)
        self.n = len(pos)
        buf = np.frombuffer(data, np.uint8)
        self.sizes = records.LOG_OVERHEAD + _gather(buf, self.pos + 8, ">i4")
        self.csum = np.concatenate(([0], np.cumsum(self.sizes)))  # csum[i] = bytes before entry i
        self.magics = buf[self.pos + 16].view(np.int8) if self.n else np.empty(0, np.int8)
        self.offsets = _gather(buf, self.pos, ">i8")
        v2 = self.magics >= 2
        self.bad_last = v2 & records.header_load_fails(self.pos, size)
        ok = v2 & ~self.bad_last
        with np.errstate(over="ignore"):
            self.last = self.offsets.copy()  # legacy: the offset field, no load
            self.last[ok] = self.offsets[ok] + _gather(buf, self.pos[ok] + 23, ">i4")  # Java long arithmetic
        self.ts = np.full(self.n, -1, np.int64)  # v0: RecordBatch.NO_TIMESTAMP
        self.ts[ok] = _gather(buf, self.pos[ok] + 35, ">i8")
        m1 = self.magics == 1
        self.ts[m1] = _gather(buf, self.pos[m1] + 18, ">i8")
        # legacy header: LegacyRecord.headerSize(magic) accepts only 0 and 1
        self.bad_ts = self.bad_last | (~v2 & (self.magics != 0) & ~m1)

    def __len__(self) -> int:
        return self.n

    def raise_bad_last(self, i: int) -> None:
        p = int(self.pos[i])
        raise StartupFailedError(self.path, "KafkaException", records.header_load_failure(p, self.size))

    def raise_bad_ts(self, i: int) -> None:
        if self.bad_last[i]:
            self.raise_bad_last(i)
        raise StartupFailedError(self.path, "IllegalArgumentException",
                                 f"invalid magic {int(self.magics[i])} of the legacy entry at position "
                                 f"{int(self.pos[i])}")

    def base_offset(self, i: int) -> int:
        """FileChannelRecordBatch.baseOffset(): v2 the offset field; legacy the first inner offset."""
        p = int(self.pos[i])
        if self.magics[i] >= 2:
            return int(self.offsets[i])
        codec = self.data[p + 17] & legacy.ATTR_CODEC_MASK
        if codec > 4:  # CompressionType.forId
            raise StartupFailedError(self.path, "IllegalArgumentException",
                                     f"unknown compression type id {codec} of the legacy entry at {p}")
        try:
            return legacy.inner_offsets(self.data, p, self.path)[0]
        except InvalidRecordError as e:
            raise StartupFailedError(self.path, "InvalidRecordException", str(e)) from e
        except CorruptRecordError as e:
            raise StartupFailedError(self.path, "CorruptRecordException", str(e)) from e

    def fits(self, base: int) -> np.ndarray:
        """AbstractIndex.canAppendOffset(lastOffset) for an index at ``base``, per entry."""
        with np.errstate(over="ignore"):
            rel = self.last - np.int64(base)
        return (rel >= 0) & (rel <= INT32_MAX)

    def raise_if_corrupt(self) -> None:
        if self.corrupt_at is not None:
            size = _I32.unpack_from(self.data, self.corrupt_at + 8)[0]
            raise StartupFailedError(self.path, "CorruptRecordException",
                                     f"record size {size} below the minimum {RECORD_OVERHEAD_V0} at byte "
                                     f"{self.corrupt_at} of an overflowed segment")


def _gather(buf: np.ndarray, starts: np.ndarray, dtype: str) -> np.ndarray:
    """The big-endian integers at byte positions ``starts`` of ``buf``, as int64."""
    width = np.dtype(dtype).itemsize
    if not len(starts):
        return np.empty(0, np.int64)
    raw = buf[starts[:, None] + np.arange(width)]
    return np.ascontiguousarray(raw).view(dtype).ravel().astype(np.int64)


def _first(mask: np.ndarray, start: int = 0) -> int | None:
    hits = np.flatnonzero(mask[start:])
    return start + int(hits[0]) if hits.size else None


# ------------------------------------------------------------------------------------------------
# hasOverflow


def _index_after_aborted_recovery(old: _Log, base: int, interval: int) -> tuple[int, int] | None:
    """The last entry LogSegment.recover appended to the offset index before the overflow, if any.

    Recovery resets the index and appends ``(lastOffset, position)`` whenever more than
    ``interval`` bytes passed since the last entry; it stops (raising the overflow) at the first
    batch whose lastOffset does not fit.  ``hasOverflow`` then looks at that in-memory index.
    """
    stop = _first(~old.fits(base) | old.bad_last)
    limit = len(old) if stop is None else stop
    rows = index_entry_rows(old.pos[:limit], interval)
    if not len(rows):
        return None
    i = int(rows[-1])
    return int(old.last[i]), int(old.pos[i])


def has_overflow(disk: Disk, segment: Segment, cfg: EffectiveConfig) -> bool:
    """LogSegment.hasOverflow of ``segment`` right after its recovery raised the overflow."""
    return _has_overflow(_Log(segment.log_path, disk.read(segment.log_path)), segment.base_offset,
                         cfg.index_interval_bytes)


def _has_overflow(old: _Log, base: int, interval: int) -> bool:
    """readNextOffset() > base and readNextOffset() - 1 does not fit, readNextOffset starting from
    the offset index that the aborted recovery holds in memory."""
    entry = _index_after_aborted_recovery(old, base, interval)
    target, start = entry if entry is not None else (base, 0)
    n = len(old)
    # translateOffset(target): from the index position, the first batch whose lastOffset >= target
    first = int(np.searchsorted(old.pos, start, side="left"))
    hit = _first(old.last >= target, first) if first < n else None
    bad = _first(old.bad_last[: n if hit is None else hit + 1], first) if first < n else None
    if bad is not None:
        old.raise_bad_last(bad)
    old.raise_if_corrupt()  # the iteration (to the end, or lastBatch() from the hit) meets it
    if hit is None:
        next_offset = base
    else:
        if old.bad_last[n - 1]:
            old.raise_bad_last(n - 1)
        next_offset = records.java_long(int(old.last[n - 1]) + 1)  # RecordBatch.nextOffset(), Java long arithmetic
    return next_offset > base and not 0 <= records.java_long(next_offset - 1 - base) <= INT32_MAX


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
    """The append-time index bookkeeping of one new LogSegment (OffsetIndex/TimeIndex rules, docs/formats.md §8-§9)."""

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
    """LogSegment.appendFromFile(old, position of entry ``first``): returns the index after the copied entries.

    Per chunk (appendChunkFromFile) Kafka looks at the batches one by one: lastOffset (header
    load), canConvertToRelativeOffset, the copy-buffer bound, then maxTimestamp of an accepted
    batch; the batch that ends a chunk has been looked at too.  The same decisions, per chunk.
    """
    n = len(old)
    capacity = COPY_BUFFER_BYTES  # a fresh GrowableBufferSupplier per new segment
    stop = _first(~old.fits(idx.seg.base) | old.bad_last, first)
    stop = n if stop is None else stop  # entries [first, stop) fit the new segment's indexes
    csum = old.csum
    j = first
    while j < n:
        if j >= stop:
            if old.bad_last[j]:
                old.raise_bad_last(j)
            idx.offset_index()
            break  # nothing appendable: the chunk is empty
        idx.offset_index()  # canConvertToRelativeOffset materialises the offset index
        # batch j is taken unconditionally, each next one while the chunk stays below the capacity
        t = int(np.searchsorted(csum, csum[j] + capacity, side="left"))
        e = min(max(j + 1, t - 1), stop)
        bad = _first(old.bad_ts[j:e])
        if bad is not None:
            old.raise_bad_ts(j + bad)
        if e < n and old.bad_last[e]:
            old.raise_bad_last(e)  # the batch that ends the chunk is looked at first
        chunk = int(csum[e] - csum[j])
        a = j + int(np.argmax(old.ts[j:e]))  # the first batch with the largest timestamp
        if capacity < chunk:
            capacity = chunk  # one batch larger than the buffer: a buffer of its size, reused for later chunks
        idx.append_chunk(int(old.last[e - 1]), int(old.ts[a]), int(old.last[a]), chunk)
        j = e
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
    mtime = disk.mtime_ms(path)
    return mtime if mtime is not None else time.time_ns() // 1_000_000


def split_overflowed_segment(disk: Disk, segment: Segment, cfg: EffectiveConfig, in_segment_map: bool,
                             *, deleted: list[str] | None = None) -> list[Segment]:
    """LocalLog.splitOverflowedSegment + replaceSegments for ``segment`` (docs/loading.md §11).

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

    bases = [s.base for s in plan]
    if len(set(bases)) < len(bases):
        # Offsets that go backwards can give two new segments the same base: creating the second
        # deleted the first one's .cleaned files, so replaceSegments' rename of the first to .swap
        # fails (NoSuchFileException, an IOException) and Kafka's cleanup deletes every new file.
        for base in dict.fromkeys(created):
            _delete_cleaned(disk, segment.dir, base, deleted)
        dup = next(b for b in bases if bases.count(b) > 1)
        path = _file(segment.dir, dup, names.LOG_SUFFIX, names.CLEANED_SUFFIX)
        raise FileNotFoundError(errno.ENOENT, f"two segments split from {segment.log_path} have base offset {dup} "
                                              "(Kafka: NoSuchFileException renaming it to .swap)", path)

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


def _rename_suffix(disk: Disk, seg: Segment, old_extra: str, new_extra: str) -> None:
    """LogSegment.changeFileSuffixes of a new segment: its .log, .index and .timeindex must exist
    (a missing one is a NoSuchFileException); its .txnindex only if it exists (never, here)."""
    for sfx in _SEGMENT_SUFFIXES:
        src = _file(seg.dir, seg.base_offset, sfx, old_extra)
        if disk.exists(src):
            disk.rename(src, _file(seg.dir, seg.base_offset, sfx, new_extra))
        elif sfx != names.TXN_INDEX_SUFFIX:
            raise FileNotFoundError(errno.ENOENT, "NoSuchFileException", src)


def _replace_segments(disk: Disk, old: Segment, new: list[Segment], in_segment_map: bool,
                      deleted: list[str] | None) -> None:
    """LocalLog.replaceSegments(new, [old]) with the old segment's delete done at once."""
    ordered = sorted(new, key=lambda s: s.base_offset)
    for seg in reversed(ordered):  # .cleaned -> .swap, highest base first
        _rename_suffix(disk, seg, names.CLEANED_SUFFIX, names.SWAP_SUFFIX)
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
        _rename_suffix(disk, seg, names.SWAP_SUFFIX, "")
    disk.sync_dir(old.dir)


def replace_in_segment_map(segments: MutableMapping[int, Segment], old: Segment, new: list[Segment],
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
