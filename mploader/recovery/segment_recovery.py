"""Phase 2 for one segment: apply its scan the way Kafka's LogSegment.recover would (docs/loading.md §7).

Given the batch table of the segment's valid prefix, this rebuilds the offset
and time indexes (vectorised: only the indexed batches are visited in Python),
assigns leader epochs, updates producer state and the transaction index, and
truncates the ``.log`` at the first invalid byte.  It is the only place where a
segment's files are rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mploader.config import EffectiveConfig
from mploader.disk.base import Disk
from mploader.errors import StartupFailedError
from mploader.format.index import offset_index_bytes, round_down, time_index_bytes, txn_index_bytes
from mploader.recovery.epoch_cache import LeaderEpochCache
from mploader.recovery.producer_apply import TxnIndexEntry, apply_producer_batches
from mploader.recovery.producer_state import ProducerStateManager
from mploader.recovery.segment import Segment
from mploader.scan import BatchColumns, Marker, RecoveryDraft, SegmentScan, draft_recovery

INT32_MAX = 2**31 - 1
_REJECTED = int(Marker.INVALID)  # markers from it up (INVALID, FATAL) stop producer state; an int: no enum per call


class InvalidOffsetError(Exception):
    """Kafka's InvalidOffsetException from an index append (caught only by recoverLog)."""


class OffsetOverflowError(Exception):
    """Kafka's LogSegmentOffsetOverflowException: a batch's offset does not fit the segment."""

    def __init__(self, segment: Segment, offset: int):
        super().__init__(f"{segment.log_path}: offset {offset} overflows base {segment.base_offset}")
        self.segment = segment
        self.offset = offset


@dataclass(slots=True)
class IndexPlan:
    """The rebuilt index entries and, if an append failed, where."""

    offset_rel: np.ndarray
    offset_pos: np.ndarray
    time_ts: np.ndarray
    time_rel: np.ndarray
    failed_at_row: int | None  # row whose index append raised InvalidOffsetException (or, with full, the other)
    final_time_failed: bool = False
    full: str | None = None  # the IllegalArgumentException of an append to a full index, at failed_at_row


# below this many indexed batches, Kafka's checks one entry at a time (_plan_sequential) are the faster: ~0.6 us an
# entry, against ~25 us for the vectorised plan's numpy calls whatever the size (they cross at ~40 entries; a 100 KB
# segment indexes ~5: perf/README.md, "Small segments read, not mapped")
SEQUENTIAL_BELOW = 32


def plan_indexes(base: int, rows: BatchColumns, offset_slots: int, time_slots: int, path: str,
                 draft: np.ndarray, final_entry: bool = True) -> IndexPlan:
    """The §7.1 index rule over a batch table, with Kafka's append checks.  ``draft``: the
    :func:`~mploader.scan.draft.index_draft` of the table (or of a longer one: its rows past ``rows`` are ignored).
    ``final_entry``: False when recover() throws inside its loop, before the time entry it appends after it."""
    n = len(rows)
    d = draft[: np.searchsorted(draft["row"], n)]
    plan = _plan_vectorised(base, d, offset_slots, time_slots) if len(d) >= SEQUENTIAL_BELOW else None
    if plan is None:  # few entries, or an append would fail: Kafka's checks one entry at a time, the exact outcome
        plan = _plan_sequential(base, d, offset_slots, time_slots)
    if final_entry and plan.failed_at_row is None and n:
        _final_time_entry(plan, base, rows, time_slots, path)
    return plan


def _plan_vectorised(base: int, d: np.ndarray, offset_slots: int, time_slots: int) -> IndexPlan | None:
    """All indexed batches at once; None when any of Kafka's append checks would trip."""
    if not len(d):
        o_rel, o_pos, t_ts, t_rel = (np.zeros(0, np.int64) for _ in range(4))
        return IndexPlan(o_rel, o_pos, t_ts, t_rel, None)
    offs = d["offset"]
    if len(d) > offset_slots or np.any(np.diff(offs) <= 0):
        return None
    mts = d["max_timestamp"]
    mts_off = d["max_timestamp_offset"]
    appended = mts > np.concatenate(([-1], mts[:-1]))
    if int(np.count_nonzero(appended[:-1])) >= time_slots - 1:
        return None
    last_app = np.maximum.accumulate(np.concatenate(([-1], np.where(appended, np.arange(len(d)), -1)[:-1])))
    has = last_app >= 0
    if np.any(mts_off[has] < mts_off[last_app[has]]):
        return None
    return IndexPlan(offs - base, d["position"].copy(), mts[appended], mts_off[appended] - base, None)


def _plan_sequential(base: int, d: np.ndarray, offset_slots: int, time_slots: int) -> IndexPlan:
    o_rel: list[int] = []
    o_pos: list[int] = []
    t_ts: list[int] = []
    t_rel: list[int] = []
    failed = full = None
    for i, off, pos, mts, mts_off in d.tolist():
        # OffsetIndex.append checks "full" before the offset order: a full index is fatal either way (start-up
        # fails with the entries appended so far in the reset indexes, the batches before this one applied)
        if len(o_rel) >= offset_slots:
            failed, full = i, f"offset index is full ({offset_slots} entries): segment.index.bytes too small"
            break
        if o_rel and off - base <= o_rel[-1]:
            failed = i
            break
        o_rel.append(off - base)
        o_pos.append(pos)
        if len(t_ts) >= time_slots - 1:  # this batch's offset entry is in
            failed, full = i, f"time index is full ({time_slots} slots): segment.index.bytes too small"
            break
        if t_ts and mts_off - base < t_rel[-1]:
            failed = i
            break
        if mts > (t_ts[-1] if t_ts else -1):
            t_ts.append(mts)
            t_rel.append(mts_off - base)
    return IndexPlan(np.array(o_rel, np.int64), np.array(o_pos, np.int64), np.array(t_ts, np.int64),
                     np.array(t_rel, np.int64), failed, full=full)


def _final_time_entry(plan: IndexPlan, base: int, rows: BatchColumns, time_slots: int, path: str) -> None:
    """The time entry recover() appends after the loop, with the full check skipped: the largest
    timestamp of the segment (at least -1) and the first batch holding it."""
    t_ts, t_rel = plan.time_ts, plan.time_rel
    ts = rows["max_timestamp"]
    top = int(ts.argmax())
    mts = max(int(ts[top]), -1)
    mts_off = int(rows["last_offset"][top]) if mts > -1 else base
    if len(t_ts) and mts_off - base < t_rel[-1]:
        plan.final_time_failed = True
    elif mts > (t_ts[-1] if len(t_ts) else -1):
        if len(t_ts) >= time_slots:
            raise StartupFailedError(path, "BufferOverflowException", "time index has no slot for its final entry")
        plan.time_ts = np.append(t_ts, mts)
        plan.time_rel = np.append(t_rel, mts_off - base)


@dataclass(slots=True)
class SegmentRecovery:
    truncated_bytes: int
    valid_bytes: int
    aborted_txns: int


@dataclass(slots=True)
class SegmentIndexes:
    """What ``LogSegment.recover`` appends to a segment's indexes, from a complete scan of it."""

    rows: BatchColumns  # the scan's batches
    rows_ok: BatchColumns  # those before the first whose offset does not fit the index (recover() throws there)
    draft: RecoveryDraft
    plan: IndexPlan
    throws_in_loop: bool  # an offset overflow or a control batch Kafka cannot read throws inside recover()'s loop


def plan_segment_indexes(seg: Segment, scan: SegmentScan, cfg: EffectiveConfig) -> SegmentIndexes:
    rows = BatchColumns(scan.batches)
    # Kafka processes batches in order, so the first problem in the table decides
    rel_last = rows["last_offset"] - seg.base_offset
    over = np.flatnonzero((rel_last < 0) | (rel_last > INT32_MAX))
    rows_ok = rows.head(len(rows) if not over.size else int(over[0]))
    draft = scan.draft
    if draft is None or draft.interval != cfg.index_interval_bytes:  # not made by Phase 1: make it here
        draft = draft_recovery(rows, seg.base_offset, cfg.index_interval_bytes)
    throws_in_loop = len(rows_ok) < len(rows) or scan.fatal is not None
    plan = plan_indexes(seg.base_offset, rows_ok, round_down(cfg.max_index_size, 8) // 8,
                        round_down(cfg.max_index_size, 12) // 12, seg.log_path, draft.index,
                        final_entry=not throws_in_loop)
    return SegmentIndexes(rows, rows_ok, draft, plan, throws_in_loop)


def recover_segment(disk: Disk, seg: Segment, scan: SegmentScan, psm: ProducerStateManager,
                    epochs: LeaderEpochCache | None, cfg: EffectiveConfig, *,
                    before_cut: Callable[[], None] = lambda: None, index_path: str | None = None,
                    fsync: bool = False) -> SegmentRecovery:
    """LogSegment.recover(producerStateManager, leaderEpochCache) on a complete scan of ``seg``.

    Raises InvalidOffsetError (after leaving the files as Kafka would at that
    point), OffsetOverflowError, or StartupFailedError.  ``before_cut`` runs just before the ``.log`` is cut
    (the loader deletes the segments the cut condemns first: docs/crash-safety.md); ``index_path``: where it writes
    the offset index (default: the segment's ``.index``); ``fsync``: each index written durable before this
    returns (a load-time recovery: its ``.index`` is renamed into place next, and the load after a power loss
    trusts an index it finds, docs/crash-safety.md).
    """
    path = seg.log_path
    index_path = index_path or seg.index_path
    planned = plan_segment_indexes(seg, scan, cfg)
    rows, rows_ok, draft, plan = planned.rows, planned.rows_ok, planned.draft, planned.plan
    limit, throws_in_loop = len(rows_ok), planned.throws_in_loop
    applied = rows_ok if plan.failed_at_row is None else rows_ok.head(plan.failed_at_row)

    # txn index: an existing file is truncated to 0 bytes; a missing one stays missing until an abort
    txn_entries: list[TxnIndexEntry] = []
    had_txn_index = disk.exists(seg.txn_index_path)

    _apply_batches(applied, draft if len(applied) == len(rows) else draft.prefix(len(applied)), psm, epochs,
                   txn_entries, path)

    if had_txn_index or txn_entries:
        disk.write(seg.txn_index_path, txn_index_bytes(txn_entries), fsync=fsync)

    if plan.failed_at_row is not None or throws_in_loop:
        # the exception leaves the .log as it was and the reset indexes at full size with the entries appended
        # so far; the first problem in batch order decides which exception it is
        _write_reset_index(disk, index_path, offset_index_bytes(0, plan.offset_rel, plan.offset_pos),
                           cfg.max_index_size, 8, fsync)
        _write_reset_index(disk, seg.time_index_path, time_index_bytes(0, plan.time_ts, plan.time_rel),
                           cfg.max_index_size, 12, fsync)
        if plan.full is not None:
            raise StartupFailedError(path, "IllegalArgumentException", plan.full)
        if plan.failed_at_row is not None:
            at = int(rows_ok["position"][plan.failed_at_row])
            raise InvalidOffsetError(f"{path}: non-increasing offset at byte {at}")
        if limit < len(rows):
            raise OffsetOverflowError(seg, int(rows["last_offset"][limit]))
        assert scan.fatal is not None  # what is left of throws_in_loop: a control batch Kafka cannot read
        raise StartupFailedError(path, scan.fatal_exception or "KafkaException", scan.fatal)
    if plan.final_time_failed:  # recover() truncated the log and trimmed the offset index first
        if scan.valid_bytes < disk.size(path):
            before_cut()
            disk.set_size(path, scan.valid_bytes)
        disk.write(index_path, offset_index_bytes(0, plan.offset_rel, plan.offset_pos), fsync=fsync)
        _write_reset_index(disk, seg.time_index_path, time_index_bytes(0, plan.time_ts, plan.time_rel),
                           cfg.max_index_size, 12, fsync)
        raise InvalidOffsetError(f"{path}: time index offset goes backwards at the final entry")

    valid = scan.valid_bytes
    size = disk.size(path)
    if valid < size:
        before_cut()
        disk.set_size(path, valid)
    disk.write(index_path, offset_index_bytes(0, plan.offset_rel, plan.offset_pos), fsync=fsync)
    disk.write(seg.time_index_path, time_index_bytes(0, plan.time_ts, plan.time_rel), fsync=fsync)
    return SegmentRecovery(size - valid, valid, len(txn_entries))


def _write_reset_index(disk: Disk, path: str, entries: bytes, max_index_size: int, entry: int,
                       fsync: bool) -> None:
    """An index left by an exception after ``reset()``: reset only moves the write position and
    zero-extends the file, so the new entries overwrite the start of the old bytes and the rest stays."""
    disk.write(path, entries, truncate=False, fsync=fsync)
    disk.set_size(path, round_down(max_index_size, entry))


def _apply_batches(rows: BatchColumns, draft: RecoveryDraft, psm: ProducerStateManager,
                   epochs: LeaderEpochCache | None, txn_entries: list[TxnIndexEntry], path: str) -> None:
    """Epoch assignments and producer-state updates, in batch order (docs/loading.md §7.1-§7.2)."""
    if not len(rows):
        return
    raising = draft.epoch_rows  # the rows raising the epoch above all before them: a few, so in Python
    if epochs is not None and len(raising):
        latest = epochs.latest_epoch
        floor = -1 if latest is None else latest
        for e, offset in zip(rows.at("partition_leader_epoch", raising).tolist(),
                             rows.at("base_offset", raising).tolist()):
            if e > floor:  # above the cache's latest when the segment began
                epochs.assign(e, offset)
    # producer state stops at the first invalid or fatal control batch of a producer (InvalidRecordException,
    # caught by recover after the epoch assignment, or an exception that fails start-up)
    rejected = np.flatnonzero(rows["marker"] >= _REJECTED)
    by_producer = draft.producer_rows
    if rejected.size:
        stop = np.intersect1d(rejected, by_producer)
        if stop.size:
            by_producer = by_producer[by_producer < stop[0]]
    apply_producer_batches(psm, rows, by_producer, txn_entries, path)
    # mapEndOffset follows every v2 batch that applies: the last row, unless it is a legacy or rejected batch
    magic = rows["magic"]
    if not rejected.size and magic[-1] >= 2:
        psm.map_end_offset = int(rows["last_offset"][-1]) + 1
        return
    applies = np.flatnonzero(magic >= 2)
    if rejected.size:
        applies = np.setdiff1d(applies, rejected, assume_unique=True)
    if applies.size:
        psm.map_end_offset = int(rows["last_offset"][applies[-1]]) + 1
