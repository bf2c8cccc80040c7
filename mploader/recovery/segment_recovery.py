"""Phase 2 for one segment: apply its scan the way Kafka's LogSegment.recover would (docs/loading.md §7).

Given the batch table of the segment's valid prefix, this writes the offset and time
indexes (as Phase 1 prepared them with the scan, :mod:`mploader.scan.indexes`, else
prepared here), assigns leader epochs, updates producer state and the transaction
index, and truncates the ``.log`` at the first invalid byte.  It is the only place
where a segment's files are rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mploader.config import EffectiveConfig
from mploader.disk.base import Disk
from mploader.errors import StartupFailedError
from mploader.format.index import round_down, txn_index_bytes
from mploader.recovery.epoch_cache import LeaderEpochCache
from mploader.recovery.producer_apply import TxnIndexEntry, apply_producer_batches
from mploader.recovery.producer_state import ProducerStateManager
from mploader.recovery.segment import Segment
from mploader.scan import BatchColumns, Marker, RecoveryDraft, SegmentScan, draft_recovery
from mploader.scan.indexes import PreparedIndexes, prepare_indexes

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
class SegmentRecovery:
    truncated_bytes: int
    valid_bytes: int
    aborted_txns: int


def plan_segment_indexes(seg: Segment, scan: SegmentScan, rows: BatchColumns, cfg: EffectiveConfig
                         ) -> tuple[RecoveryDraft, PreparedIndexes]:
    """The scan's draft and the segment's indexes as Phase 1 prepared them with it (:mod:`mploader.scan.indexes`),
    each made here from ``rows`` (the scan's batches) where Phase 1 did not."""
    draft = scan.draft
    if draft is None or draft.interval != cfg.index_interval_bytes:  # not made by Phase 1: make it here
        draft = draft_recovery(rows, seg.base_offset, cfg.index_interval_bytes)
    prepared = draft.indexes
    if prepared is None or prepared.max_index_size != cfg.max_index_size:
        prepared = prepare_indexes(rows, seg.base_offset, draft.index, cfg.max_index_size, seg.log_path,
                                   scan.fatal is not None)
    return draft, prepared


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
    rows = BatchColumns(scan.batches)
    draft, plan = plan_segment_indexes(seg, scan, rows, cfg)
    rows_ok = rows.head(plan.rows_ok)  # recover() throws at the first batch whose offset does not fit the index
    limit, throws_in_loop = len(rows_ok), plan.throws_in_loop
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
        _write_reset_index(disk, index_path, plan.offset_bytes, cfg.max_index_size, 8, fsync)
        _write_reset_index(disk, seg.time_index_path, plan.time_bytes, cfg.max_index_size, 12, fsync)
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
        disk.write(index_path, plan.offset_bytes, fsync=fsync)
        _write_reset_index(disk, seg.time_index_path, plan.time_bytes, cfg.max_index_size, 12, fsync)
        raise InvalidOffsetError(f"{path}: time index offset goes backwards at the final entry")

    valid = scan.valid_bytes
    size = disk.size(path)
    if valid < size:
        before_cut()
        disk.set_size(path, valid)
    disk.write(index_path, plan.offset_bytes, fsync=fsync)
    disk.write(seg.time_index_path, plan.time_bytes, fsync=fsync)
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
