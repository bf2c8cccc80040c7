"""Phase 2 for one segment: apply its scan the way Kafka's LogSegment.recover would (LOADING.md §7).

Given the batch table of the segment's valid prefix, this rebuilds the offset
and time indexes (vectorised: only the indexed batches are visited in Python),
assigns leader epochs, updates producer state and the transaction index, and
truncates the ``.log`` at the first invalid byte.  It is the only place where a
segment's files are rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import EffectiveConfig
from .disk import Disk
from .epoch_cache import LeaderEpochCache
from .errors import StartupFailedError
from .format.index import OFFSET_ENTRY, TIME_ENTRY, TXN_ENTRY, round_down
from .producer_apply import TxnIndexEntry, apply_producer_batches
from .producer_state import ProducerStateManager
from .scan import BatchColumns, Marker, SegmentScan, Stop, index_draft
from .segment import Segment

INT32_MAX = 2**31 - 1


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
    time_ts: list[int]
    time_rel: list[int]
    failed_at_row: int | None  # row whose index append raised InvalidOffsetException
    final_time_failed: bool = False


def plan_indexes(base: int, rows: BatchColumns, interval: int, offset_slots: int, time_slots: int,
                 path: str, draft: np.ndarray | None = None) -> IndexPlan:
    """The §7.1 index rule over a batch table, with Kafka's append checks.  ``draft``: the scan's
    :func:`~mploader.scan.index_draft` of the whole table, when Phase 1 made it already."""
    n = len(rows)
    if draft is None:
        draft = index_draft(rows, base, interval)
    d = draft[: np.searchsorted(draft["row"], n)]  # of a prefix, the entries inside it (their values hold)
    plan = _plan_vectorised(base, d, offset_slots, time_slots)
    if plan is None:  # an append would fail: replay Kafka's checks one entry at a time for the exact outcome
        plan = _plan_sequential(base, d, offset_slots, time_slots, path)
    if plan.failed_at_row is None and n:
        _final_time_entry(plan, base, rows, time_slots, path)
    return plan


def _plan_vectorised(base: int, d: np.ndarray, offset_slots: int, time_slots: int) -> IndexPlan | None:
    """All indexed batches at once; None when any of Kafka's append checks would trip."""
    if not len(d):
        return IndexPlan(np.zeros(0, np.int64), np.zeros(0, np.int64), [], [], None)
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
    return IndexPlan(offs - base, d["position"].copy(), mts[appended].tolist(), (mts_off[appended] - base).tolist(),
                     None)


def _plan_sequential(base: int, d: np.ndarray, offset_slots: int, time_slots: int, path: str) -> IndexPlan:
    o_rel: list[int] = []
    o_pos: list[int] = []
    t_ts: list[int] = []
    t_rel: list[int] = []
    failed = None
    for i, off, pos, mts, mts_off in d.tolist():
        # OffsetIndex.append checks "full" before the offset order: a full index is fatal either way
        if len(o_rel) >= offset_slots:
            raise StartupFailedError(path, "IllegalArgumentException",
                                     f"offset index is full ({offset_slots} entries): segment.index.bytes too small")
        if o_rel and off - base <= o_rel[-1]:
            failed = i
            break
        o_rel.append(off - base)
        o_pos.append(pos)
        if len(t_ts) >= time_slots - 1:
            raise StartupFailedError(path, "IllegalArgumentException",
                                     f"time index is full ({time_slots} slots): segment.index.bytes too small")
        if t_ts and mts_off - base < t_rel[-1]:
            failed = i
            break
        if mts > (t_ts[-1] if t_ts else -1):
            t_ts.append(mts)
            t_rel.append(mts_off - base)
    return IndexPlan(np.array(o_rel, np.int64), np.array(o_pos, np.int64), t_ts, t_rel, failed)


def _final_time_entry(plan: IndexPlan, base: int, rows: BatchColumns, time_slots: int, path: str) -> None:
    """The time entry recover() appends after the loop, with the full check skipped: the largest
    timestamp of the segment (at least -1) and the first batch holding it."""
    t_ts, t_rel = plan.time_ts, plan.time_rel
    ts = rows["max_timestamp"]
    top = int(ts.argmax())
    mts = max(int(ts[top]), -1)
    mts_off = int(rows["last_offset"][top]) if mts > -1 else base
    if t_ts and mts_off - base < t_rel[-1]:
        plan.final_time_failed = True
    elif mts > (t_ts[-1] if t_ts else -1):
        if len(t_ts) >= time_slots:
            raise StartupFailedError(path, "BufferOverflowException", "time index has no slot for its final entry")
        t_ts.append(mts)
        t_rel.append(mts_off - base)


def _index_bytes(rel: np.ndarray | list[int], second: np.ndarray | list[int], dtype: np.dtype) -> bytes:
    arr = np.empty(len(rel), dtype)
    if dtype is OFFSET_ENTRY:
        arr["relative_offset"], arr["position"] = rel, second
    else:
        arr["timestamp"], arr["relative_offset"] = second, rel
    return arr.tobytes()


@dataclass(slots=True)
class SegmentRecovery:
    truncated_bytes: int
    valid_bytes: int
    aborted_txns: int


def recover_segment(disk: Disk, seg: Segment, scan: SegmentScan, psm: ProducerStateManager,
                    epochs: LeaderEpochCache | None, cfg: EffectiveConfig) -> SegmentRecovery:
    """LogSegment.recover(producerStateManager, leaderEpochCache) on a complete scan of ``seg``.

    Raises InvalidOffsetError (after leaving the files as Kafka would at that
    point), OffsetOverflowError, or StartupFailedError.
    """
    path = seg.log_path
    rows = BatchColumns(scan.batches)
    base = seg.base_offset
    # Kafka processes batches in order, so the first problem in the table decides
    rel_last = rows["last_offset"] - base
    over = np.flatnonzero((rel_last < 0) | (rel_last > INT32_MAX))
    limit = len(rows) if not over.size else int(over[0])
    rows_ok = rows.head(limit)
    offset_slots = round_down(cfg.max_index_size, 8) // 8
    time_slots = round_down(cfg.max_index_size, 12) // 12
    draft = scan.index_draft if scan.index_interval == cfg.index_interval_bytes else None
    plan = plan_indexes(base, rows_ok, cfg.index_interval_bytes, offset_slots, time_slots, path, draft)
    applied = rows_ok if plan.failed_at_row is None else rows_ok.head(plan.failed_at_row)

    # txn index: an existing file is truncated to 0 bytes; a missing one stays missing until an abort
    txn_entries: list[TxnIndexEntry] = []
    had_txn_index = disk.exists(seg.txn_index_path)

    _apply_batches(applied, psm, epochs, txn_entries, path)

    txn_bytes = b""
    if txn_entries:
        arr = np.zeros(len(txn_entries), TXN_ENTRY)  # version 0
        columns = np.array(txn_entries, np.int64).T
        for name, col in zip(("producer_id", "first_offset", "last_offset", "last_stable_offset"), columns):
            arr[name] = col
        txn_bytes = arr.tobytes()
    if had_txn_index or txn_bytes:
        disk.write(seg.txn_index_path, txn_bytes)

    if plan.failed_at_row is not None or limit < len(rows):
        # the exception leaves the reset indexes at full size with the entries appended so far
        _write_reset_index(disk, seg.index_path, _index_bytes(plan.offset_rel, plan.offset_pos, OFFSET_ENTRY),
                           cfg.max_index_size, 8)
        _write_reset_index(disk, seg.time_index_path, _index_bytes(plan.time_rel, plan.time_ts, TIME_ENTRY),
                           cfg.max_index_size, 12)
        if limit < len(rows) and (plan.failed_at_row is None):
            raise OffsetOverflowError(seg, int(rows["last_offset"][limit]))
        raise InvalidOffsetError(f"{path}: non-increasing offset at byte {int(rows_ok['position'][plan.failed_at_row])}")
    if plan.final_time_failed:  # recover() truncated the log and trimmed the offset index first
        if scan.valid_bytes < disk.size(path):
            disk.set_size(path, scan.valid_bytes)
        disk.write(seg.index_path, _index_bytes(plan.offset_rel, plan.offset_pos, OFFSET_ENTRY))
        _write_reset_index(disk, seg.time_index_path, _index_bytes(plan.time_rel, plan.time_ts, TIME_ENTRY),
                           cfg.max_index_size, 12)
        raise InvalidOffsetError(f"{path}: time index offset goes backwards at the final entry")

    valid = scan.valid_bytes
    size = disk.size(path)
    if valid < size:
        disk.set_size(path, valid)
    disk.write(seg.index_path, _index_bytes(plan.offset_rel, plan.offset_pos, OFFSET_ENTRY))
    disk.write(seg.time_index_path, _index_bytes(plan.time_rel, plan.time_ts, TIME_ENTRY))
    if scan.fatal is not None and scan.stop is not Stop.INVALID_RECORD:
        raise StartupFailedError(path, scan.fatal_exception or "KafkaException", scan.fatal)
    return SegmentRecovery(size - valid, valid, len(txn_entries))


def _write_reset_index(disk: Disk, path: str, entries: bytes, max_index_size: int, entry: int) -> None:
    """An index left by an exception after ``reset()``: reset only moves the write position and
    zero-extends the file, so the new entries overwrite the start of the old bytes and the rest stays."""
    size = round_down(max_index_size, entry)
    old = disk.read(path) if disk.exists(path) else b""
    data = (entries + old[len(entries):])[:size]
    disk.write(path, data + bytes(size - len(data)))


def _apply_batches(rows: BatchColumns, psm: ProducerStateManager, epochs: LeaderEpochCache | None,
                   txn_entries: list[TxnIndexEntry], path: str) -> None:
    """Epoch assignments and producer-state updates, in batch order (LOADING.md §7.1-§7.2)."""
    if not len(rows):
        return
    v2 = rows["magic"] >= 2
    if epochs is not None:
        ple = np.where(v2, rows["partition_leader_epoch"].astype(np.int64), -1)
        latest = epochs.latest_epoch
        start = -1 if latest is None else latest
        prev = np.maximum.accumulate(np.concatenate(([start], ple)))[:-1]
        changes = np.flatnonzero((ple >= 0) & (ple > prev))
        for epoch, offset in zip(ple[changes].tolist(), rows.at("base_offset", changes).tolist()):
            epochs.assign(epoch, offset)
    # producer state: only rows with a producer id do work; mapEndOffset follows every v2 batch
    marker = rows["marker"]
    applies = v2 & (marker != Marker.INVALID) & (marker != Marker.FATAL)
    idx = np.flatnonzero(v2 & (rows["producer_id"] >= 0))
    stop = np.flatnonzero(~applies[idx])
    if stop.size:  # InvalidRecordException (caught by recover, after the epoch assignment) or fatal
        idx = idx[: stop[0]]
    apply_producer_batches(psm, rows, idx, txn_entries, path)
    last_v2 = np.flatnonzero(applies)
    if last_v2.size:
        psm.map_end_offset = int(rows["last_offset"][last_v2[-1]]) + 1
