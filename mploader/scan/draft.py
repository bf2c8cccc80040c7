"""What Phase 1 prepares for Phase 2's ``LogSegment.recover`` besides the batch table (docs/loading.md §7.1-§7.2).

Three compact arrays (and the indexes' bytes), each a pure function of a batch table scanned from byte 0, so the
workers make them in parallel and the serial parent only finishes the job:

* the index draft: for each batch the index rule picks, what recovery offers the offset index and the
  time index; from it, where the scan knows ``segment.index.bytes``, the indexes themselves with their own append
  checks, as bytes (:mod:`.indexes`);
* the producer order: the rows of v2 batches with a producer id, sorted by producer id and log order
  (the grouping :mod:`mploader.recovery.producer_apply` works on);
* the epoch rows: the v2 batches whose partition leader epoch is above every earlier batch's; whatever
  the cache's latest epoch, recovery assigns exactly those of them above it.

Recovery may apply only a prefix of a scan (an offset that overflows the segment, a failed index
append): every array is in row order per group, and :meth:`RecoveryDraft.prefix` keeps its rows below
the cut, which are what a draft of the prefix would hold.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from mploader.errors import StartupFailedError
from mploader.scan.compiled import WALK, CompiledWalk
from mploader.scan.indexes import PreparedIndexes, prepare_indexes
from mploader.scan.table import BATCH_TABLE, INDEX_DRAFT, BatchColumns


@dataclass(slots=True)
class RecoveryDraft:
    interval: int  # log.index.interval.bytes the index draft was made for
    index: np.ndarray  # INDEX_DRAFT
    producer_rows: np.ndarray  # ROW
    epoch_rows: np.ndarray  # ROW
    seconds: float = 0.0  # what drafting took (reported apart from the walk: LoadStats.draft_seconds)
    indexes: PreparedIndexes | None = None  # the indexes recover() rebuilds, where the scan was told their size

    def prefix(self, n: int) -> RecoveryDraft:
        """The draft of the table's first ``n`` rows."""
        return RecoveryDraft(self.interval, self.index[: np.searchsorted(self.index["row"], n)],
                             self.producer_rows[self.producer_rows < n],
                             self.epoch_rows[: np.searchsorted(self.epoch_rows, n)])


def draft_recovery(rows: BatchColumns, base_offset: int, interval: int, max_index_size: int | None = None,
                   path: str = "", fatal: bool = False, compiled: CompiledWalk | None = WALK) -> RecoveryDraft:
    """The draft of a whole segment's table; with ``max_index_size`` (segment.index.bytes), also its indexes as
    recover() rebuilds them (:func:`~mploader.scan.indexes.prepare_indexes`; ``path``, ``fatal``: its arguments),
    unless preparing them fails: that failure is Phase 2's to raise, where the load meets it.  The index draft is
    the ``compiled`` walk's ``index_draft`` (one pass) where given, else :func:`index_draft`, the reference."""
    t0 = time.perf_counter()
    table = rows.table
    if compiled is not None and table.dtype == BATCH_TABLE and table.flags.c_contiguous:
        index = np.frombuffer(compiled.index_draft(table, base_offset, interval), INDEX_DRAFT)
    else:
        index = index_draft(rows, base_offset, interval)
    draft = RecoveryDraft(interval, index, producer_order(rows), epoch_rows(rows))
    if max_index_size is not None:
        try:
            draft.indexes = prepare_indexes(rows, base_offset, index, max_index_size, path, fatal)
        except StartupFailedError:
            pass
    draft.seconds = time.perf_counter() - t0
    return draft


def index_entry_rows(pos: np.ndarray, interval: int) -> np.ndarray:
    """The rows LogSegment.recover indexes: the first batch starting more than ``interval`` bytes after
    the last indexed one (after byte 0 for the first).

    Each batch's successor on such a chain comes from one vectorised search; the chain from the first
    indexed batch is then followed by pointer doubling (log2 of its length numpy steps, no Python loop)."""
    n = len(pos)
    first = int(np.searchsorted(pos, interval, side="right"))
    if first >= n:
        return np.zeros(0, np.int64)
    jump = np.append(np.searchsorted(pos, pos + interval, side="right"), n)  # row n: past the end, maps to itself
    links = np.array([first], np.int64)
    while links[-1] < n:  # links: the chain's first 2**k rows; jump: each row's 2**k-th successor
        links = np.concatenate((links, jump[links]))
        if links[-1] < n:
            jump = jump[jump]
    return links[links < n]


def index_draft(rows: np.ndarray | BatchColumns, base_offset: int, interval: int) -> np.ndarray:
    """What LogSegment.recover offers its offset and time index at each batch it indexes, before the
    indexes' own append checks."""
    pos = rows["position"]
    n = len(pos)
    chosen = index_entry_rows(pos, interval)
    draft = np.empty(len(chosen), INDEX_DRAFT)
    if not len(chosen):
        return draft
    ts = rows["max_timestamp"]
    last_offset = rows["last_offset"]
    running = np.maximum.accumulate(np.maximum(ts, -1))
    # the row holding the running maximum: the last row whose timestamp raised it (-1 while none did)
    holder = np.maximum.accumulate(np.where(ts > np.concatenate(([-1], running[:-1])), np.arange(n), -1))
    held = holder[chosen]
    draft["row"] = chosen
    draft["offset"] = last_offset[chosen]
    draft["position"] = pos[chosen]
    draft["max_timestamp"] = running[chosen]
    draft["max_timestamp_offset"] = np.where(held >= 0, last_offset[np.maximum(held, 0)], base_offset)
    return draft


def producer_order(rows: np.ndarray | BatchColumns) -> np.ndarray:
    """Rows of v2 batches with a producer id, by producer id, in log order within each producer."""
    with_producer = np.flatnonzero((rows["magic"] >= 2) & (rows["producer_id"] >= 0))
    return with_producer[np.argsort(rows["producer_id"][with_producer], kind="stable")]


def epoch_rows(rows: np.ndarray | BatchColumns) -> np.ndarray:
    """Rows of v2 batches whose partition leader epoch (>= 0) is above that of every earlier v2 batch."""
    epoch = np.where(rows["magic"] >= 2, rows["partition_leader_epoch"].astype(np.int64), -1)
    if not len(epoch):
        return np.zeros(0, np.int64)
    before = np.maximum.accumulate(np.concatenate(([-1], epoch[:-1])))
    return np.flatnonzero(epoch > before)
