"""The entries ``LogSegment.recover`` appends to a segment's offset and time indexes, with the indexes' own append
checks (docs/loading.md §7.1), and the bytes of both files.

A pure function of a segment's batch table, its index draft (:mod:`.draft`) and ``segment.index.bytes``: nothing
in it depends on an earlier segment, so a scan from byte 0 prepares it in Phase 1 (:func:`prepare_indexes`, in
the workers where there are some) and Phase 2 only writes the bytes and raises what recovery raises.  Phase 2
prepares it itself where Phase 1 did not (a scan made without the setting, a Spark scan, a planning that fails:
the failure is Phase 2's to raise, at its place in the load).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mploader.errors import StartupFailedError
from mploader.format.index import offset_index_bytes, round_down, time_index_bytes
from mploader.format.records import INT32_MAX
from mploader.scan.table import BatchColumns


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
class PreparedIndexes:
    """What ``LogSegment.recover`` leaves in a segment's indexes, as the files' bytes, and where it stops."""

    max_index_size: int  # segment.index.bytes it was prepared for
    rows_ok: int  # the rows before the first whose offset does not fit the segment (recover() throws there)
    throws_in_loop: bool  # an offset overflow or a control batch Kafka cannot read throws inside recover()'s loop
    failed_at_row: int | None  # IndexPlan.failed_at_row
    final_time_failed: bool  # IndexPlan.final_time_failed
    full: str | None  # IndexPlan.full
    offset_bytes: bytes  # the offset index's entries (before any growth to the index's full size)
    time_bytes: bytes  # the time index's entries


def prepare_indexes(rows: BatchColumns, base: int, draft: np.ndarray, max_index_size: int, path: str,
                    fatal: bool) -> PreparedIndexes:
    """The indexes ``LogSegment.recover`` rebuilds from the whole scan of the segment at ``base`` (``rows``, its
    index ``draft``; ``fatal``: the scan stopped at a control batch Kafka cannot read).  Raises the
    StartupFailedError of a final time entry with no slot left."""
    # Kafka processes batches in order, so the first problem in the table decides
    rel_last = rows["last_offset"] - base
    over = np.flatnonzero((rel_last < 0) | (rel_last > INT32_MAX))
    rows_ok = len(rows) if not over.size else int(over[0])
    throws_in_loop = rows_ok < len(rows) or fatal
    plan = plan_indexes(base, rows.head(rows_ok), round_down(max_index_size, 8) // 8,
                        round_down(max_index_size, 12) // 12, path, draft, final_entry=not throws_in_loop)
    return PreparedIndexes(max_index_size, rows_ok, throws_in_loop, plan.failed_at_row, plan.final_time_failed,
                           plan.full, offset_index_bytes(0, plan.offset_rel, plan.offset_pos),
                           time_index_bytes(0, plan.time_ts, plan.time_rel))


__all__ = ["IndexPlan", "PreparedIndexes", "plan_indexes", "prepare_indexes"]
