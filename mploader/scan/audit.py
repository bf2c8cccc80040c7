"""Phase 1 of ``mploader verify``: audit one segment, every byte of it, wherever the recovery point is.

``audit_segment(task) -> SegmentAudit`` walks the whole ``.log`` as a recovery scan does (the same
:func:`mploader.scan.walk.scan_segment`: CRC of every batch, v2 and legacy), then checks what Kafka's start-up
never reads below the recovery point, each check vectorised over the batch table:

* offsets: every batch's base offset above the previous batch's last offset, none below the segment's base;
* ``.index``: length a multiple of 8, offsets and positions strictly increasing, each position the start of a
  valid batch, each offset between that batch's last offset and the last offset before the next entry's batch
  (an append of several batches indexes its largest offset at its first batch: ``LogSegment.append``);
* ``.timeindex``: length a multiple of 12, timestamps and offsets non-decreasing, each offset inside a valid
  batch whose max timestamp is the entry's;
* ``.txnindex``: whole 34-byte entries of version 0, ``first_offset <= last_offset``, each ``last_offset`` the
  abort marker of that producer in this segment.

A preallocated index (the active segment's after an unclean shutdown, or one Kafka never trimmed) is judged
by its written entries: the all-zero slots at its end are unused space, not entries (a real offset-index
entry never has position 0, and a real time-index entry never timestamp 0 at relative offset 0 after a
non-zero one).  The result is small and picklable: what the process pool returns and a Spark task emits.
Pure and read-only, like the rest of :mod:`mploader.scan`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from mploader.format import index as idx, names
from mploader.format.files import read_file
from mploader.scan.table import Marker
from mploader.scan.walk import SegmentTask, Stop, scan_segment

OK = "ok"
MISSING = "missing"


@dataclass(frozen=True, slots=True)
class AuditTask:
    """One segment to audit: its ``.log`` and base offset (the index files sit beside it)."""

    path: str
    base_offset: int

    def sibling(self, suffix: str) -> str:
        return os.path.join(os.path.dirname(self.path), names.segment_file_name(self.base_offset, suffix))


@dataclass(slots=True)
class SegmentAudit:
    """What one segment's files say (see the module docstring); the index fields are ``"ok"``,
    ``"missing"`` or a short description of the first thing wrong."""

    path: str
    base_offset: int
    size_bytes: int
    valid_bytes: int  # bytes from the start that passed every check of the log
    first_invalid_position: int | None
    reason: str | None
    batches: int
    records: int
    first_offset: int | None  # base offset of the first valid batch
    last_offset: int | None  # last offset of the last valid batch
    max_timestamp: int  # -1 when no batch carries one
    # (leader epoch, first offset) where the epoch of v2 batches changes, in log order
    epoch_starts: list[tuple[int, int]] = field(default_factory=list)
    index: str = OK
    timeindex: str = OK
    txnindex: str = OK

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["path"]
        out["epoch_starts"] = [list(e) for e in self.epoch_starts]
        return out


def audit_segment(task: AuditTask) -> SegmentAudit:
    try:
        scan = scan_segment(SegmentTask(task.path, task.base_offset))
    except OSError as e:  # a row that says so, not a failed audit of everything else (a Kafka broker: offline)
        return SegmentAudit(task.path, task.base_offset, 0, 0, 0, f"unreadable: {e.strerror or e}", 0, 0, None,
                            None, -1, index="not checked", timeindex="not checked", txnindex="not checked")
    rows = scan.batches
    invalid: int | None = None
    reason: str | None = None
    if scan.stop is not Stop.END or scan.fatal:
        invalid, reason = scan.valid_bytes, f"{scan.stop.value}: {scan.stop_detail}" if scan.stop_detail \
            else scan.stop.value
        if scan.fatal:  # a batch Kafka's recovery would throw on: the first invalid byte is that batch's
            bad = np.flatnonzero(rows["marker"] == Marker.FATAL)
            invalid, reason = int(rows["position"][bad[0]]), f"{scan.fatal_exception}: {scan.fatal}"
        elif scan.stop is Stop.INVALID_RECORD:  # the batch is kept by recovery, but it is not valid
            invalid = int(rows["position"][-1])
    cut = _offset_problem(rows, task.base_offset)
    if cut is not None and (invalid is None or cut[0] < invalid):
        invalid, reason = cut
    valid = rows[rows["position"] < invalid] if invalid is not None else rows
    valid_bytes = scan.valid_bytes if invalid is None else invalid
    v2 = valid[valid["magic"] == 2]
    epochs = v2["partition_leader_epoch"]
    change: np.ndarray = np.flatnonzero(np.concatenate(([True], epochs[1:] != epochs[:-1]))) if len(v2) \
        else np.empty(0, np.int64)
    audit = SegmentAudit(
        path=task.path, base_offset=task.base_offset, size_bytes=scan.end, valid_bytes=valid_bytes,
        first_invalid_position=invalid, reason=reason, batches=len(valid),
        records=int(valid["records_count"].sum()),
        first_offset=int(valid["base_offset"][0]) if len(valid) else None,
        last_offset=int(valid["last_offset"][-1]) if len(valid) else None,
        max_timestamp=int(valid["max_timestamp"].max()) if len(valid) else -1,
        epoch_starts=[(int(epochs[i]), int(v2["base_offset"][i])) for i in change if epochs[i] >= 0],
    )
    audit.index = _file_verdict(task.sibling(names.INDEX_SUFFIX), lambda p: offset_index_verdict(p, task, valid))
    audit.timeindex = _file_verdict(task.sibling(names.TIME_INDEX_SUFFIX),
                                    lambda p: time_index_verdict(p, task, valid))
    audit.txnindex = _file_verdict(task.sibling(names.TXN_INDEX_SUFFIX), lambda p: txn_index_verdict(p, task, valid))
    return audit


def _file_verdict(path: str, check: Callable[[str], str]) -> str:
    if not os.path.exists(path):
        return MISSING
    try:
        verdict: str = check(path)
    except OSError as e:
        return f"unreadable: {e.strerror or e}"
    return verdict


def _offset_problem(rows: np.ndarray, base_offset: int) -> tuple[int, str] | None:
    """The first batch whose offsets are not above the previous batch's, or below the segment's base."""
    if not len(rows):
        return None
    base, last = rows["base_offset"], rows["last_offset"]
    bad = (base > last) | (last < base_offset)
    bad[1:] |= base[1:] <= last[:-1]
    hit = np.flatnonzero(bad)
    if not hit.size:
        return None
    i = int(hit[0])
    pos = int(rows["position"][i])
    if int(last[i]) < base_offset:
        return pos, (f"offsets: batch at byte {pos} ends at offset {int(last[i])}, below the segment's base "
                     f"{base_offset}")
    if int(base[i]) > int(last[i]):
        return pos, (f"offsets: batch at byte {pos} has base offset {int(base[i])} above its last offset "
                     f"{int(last[i])}")
    return pos, (f"offsets: batch at byte {pos} starts at offset {int(base[i])}, not above the previous batch's "
                 f"last offset {int(last[i - 1])}")


def _first(mask: np.ndarray) -> int | None:
    i = int(mask.argmax()) if len(mask) else 0  # argmax: the first True, without a full nonzero pass
    return i if len(mask) and mask[i] else None


def _written(path: str, dtype: np.dtype) -> np.ndarray | str:
    """The index's written entries; else its verdict: why its length is wrong (a torn or cut file), or OK when
    it holds none (nothing to check)."""
    length = os.path.getsize(path)
    if length % dtype.itemsize:
        return f"length {length} is not a multiple of {dtype.itemsize} (a torn or cut file)"
    entries = idx.written_entries(idx.map_entries(path, dtype))
    return entries if len(entries) else OK


def _goes_back(what: str, values: np.ndarray, strictly: bool) -> str | None:
    """The first entry whose ``what`` is not above (``strictly``) or is below the previous entry's."""
    i = _first(values[1:] <= values[:-1] if strictly else values[1:] < values[:-1])
    if i is None:
        return None
    return f"entry {i + 1}: {what} {int(values[i + 1])} {'not above' if strictly else 'below'} entry {i}'s " \
           f"{int(values[i])}"


def offset_index_verdict(path: str, task: AuditTask, rows: np.ndarray) -> str:
    entries = _written(path, idx.OFFSET_ENTRY)
    if isinstance(entries, str):
        return entries
    offsets = entries["relative_offset"].astype(np.int64) + task.base_offset
    pos = entries["position"].astype(np.int64)
    problem = _goes_back("offset", offsets, True) or _goes_back("position", pos, True)
    if problem is not None:
        return problem
    starts = rows["position"]
    valid_end = int(starts[-1] + rows["size"][-1]) if len(rows) else 0
    k = np.searchsorted(starts, pos)
    at_start = k < len(starts)
    at_start[at_start] = starts[k[at_start]] == pos[at_start]
    i = _first(~at_start)
    if i is not None:
        where = f"past the valid data (which ends at byte {valid_end})" if pos[i] >= valid_end else "inside a batch"
        return f"entry {i}: position {int(pos[i])} is {where} (offset {int(offsets[i])})"
    last = rows["last_offset"]
    upto = np.append(k[1:], len(rows)) - 1  # the last batch before the next entry's batch
    low, high = last[k], last[upto]
    i = _first((offsets < low) | (offsets > high))
    if i is not None:
        return (f"entry {i}: offset {int(offsets[i])} does not match the batches from byte {int(pos[i])} "
                f"(offsets up to {int(low[i])}..{int(high[i])})")
    return OK


def time_index_verdict(path: str, task: AuditTask, rows: np.ndarray) -> str:
    entries = _written(path, idx.TIME_ENTRY)
    if isinstance(entries, str):
        return entries
    ts = entries["timestamp"].astype(np.int64)
    offsets = entries["relative_offset"].astype(np.int64) + task.base_offset
    problem = _goes_back("timestamp", ts, False) or _goes_back("offset", offsets, False)
    if problem is not None:
        return problem
    last = rows["last_offset"]
    # the batch holding each offset: the first whose last offset reaches it, if it starts at or below it
    k = np.searchsorted(last, offsets)
    held = k < len(last)
    held[held] = rows["base_offset"][k[held]] <= offsets[held]
    i = _first(~held)
    if i is not None:
        return f"entry {i}: offset {int(offsets[i])} is in no valid batch (timestamp {int(ts[i])})"
    i = _first(rows["max_timestamp"][k] != ts)
    if i is not None:
        return (f"entry {i}: timestamp {int(ts[i])} is not the max timestamp {int(rows['max_timestamp'][k[i]])} "
                f"of the batch holding offset {int(offsets[i])}")
    return OK


def txn_index_verdict(path: str, task: AuditTask, rows: np.ndarray) -> str:
    data = read_file(path)
    size = idx.TXN_ENTRY.itemsize
    entries = idx.entries_from_bytes(data, idx.TXN_ENTRY)
    i = _first(entries["version"] != 0)
    if i is not None:
        return f"entry {i} (byte {i * size}): version {int(entries['version'][i])}, only 0 is known"
    first, last = entries["first_offset"], entries["last_offset"]
    i = _first(last < task.base_offset)
    if i is not None:
        return f"entry {i}: last offset {int(last[i])} below the segment's base offset {task.base_offset}"
    i = _first(first > last)
    if i is not None:
        return f"entry {i}: first offset {int(first[i])} above its last offset {int(last[i])}"
    aborts = rows[rows["marker"] == Marker.ABORT]
    k = np.searchsorted(aborts["base_offset"], last)
    found = k < len(aborts)
    found[found] &= (aborts["base_offset"][k[found]] == last[found]) & \
        (aborts["producer_id"][k[found]] == entries["producer_id"][found])
    i = _first(~found)
    if i is not None:
        return (f"entry {i}: no abort marker of producer {int(entries['producer_id'][i])} at offset {int(last[i])} "
                f"in this segment's valid batches")
    if len(data) % size:
        return f"length {len(data)} is not a multiple of {size}: a partial entry at byte {len(data) - len(data) % size}"
    return OK


__all__ = ["MISSING", "OK", "AuditTask", "SegmentAudit", "audit_segment", "offset_index_verdict",
           "time_index_verdict", "txn_index_verdict"]
