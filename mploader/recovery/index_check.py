"""``index_check``: the index checks Kafka no longer runs at start-up, and a rebuild of what fails them.

Kafka 4.x reads no index of a segment it does not recover (docs/loading.md; KIP-263 removed the sanity
checks from start-up).  ``LoaderConfig.index_check`` chooses more, for the segments the load did not
recover (a recovered segment's indexes are new):

* ``"kafka"`` (default): nothing, Kafka's outcome file for file;
* ``"sanity"``: the checks of older brokers and kafka-dump-log's ``--index-sanity-check``
  (``OffsetIndex.sanityCheck``, ``TimeIndex.sanityCheck``: length a multiple of the entry size, last offset
  not below the base offset, last timestamp not below the first), with the preallocated tail of an index
  judged by its last written entry rather than its last slot (the active ``.timeindex`` Kafka's own check
  calls corrupt, seed 002).  Reads the index files only;
* ``"full"``: ``mploader verify``'s checks (:mod:`mploader.scan.audit`) against the segment's batches; every
  segment is scanned (planned for Phase 1 like a recovery's scans: :func:`mploader.scan.plan.segments_to_scan`).

An ``.index`` or ``.timeindex`` that fails is rebuilt from its log as ``LogSegment.recover`` would write it,
and nothing else changes: the ``.log`` keeps every byte (even an invalid tail: Kafka does not recover the
segment, so neither do we), producer state, snapshots and the leader-epoch cache are Kafka's.  A
``.txnindex`` problem is reported and left (rebuilding one needs the producer state of earlier segments).
Each check that failed is in ``LoadedLog.index_checks`` with what was done about it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mploader.config import EffectiveConfig
from mploader.disk import Disk
from mploader.format import index as idx
from mploader.recovery.segment import Segment
from mploader.recovery.segment_recovery import plan_segment_indexes
from mploader.scan import BatchColumns, SegmentScan
from mploader.scan.audit import MISSING, OK, AuditTask, offset_index_verdict, time_index_verdict, txn_index_verdict


@dataclass(frozen=True, slots=True)
class IndexCheck:
    """One index file that failed ``index_check``, and what the load did about it."""

    file: str  # the file's name in the partition directory
    problem: str
    action: str  # "rebuilt from the log", or why it was left as it was

    def to_json(self) -> dict[str, str]:
        return {"file": self.file, "problem": self.problem, "action": self.action}


def sanity_problems(disk: Disk, seg: Segment) -> dict[str, str]:
    """Kafka's old sanity checks of the offset and time index (a missing one is not checked), by path."""
    out: dict[str, str] = {}
    for path, dtype, check in ((seg.index_path, idx.OFFSET_ENTRY, idx.offset_index_problem),
                               (seg.time_index_path, idx.TIME_ENTRY, idx.time_index_problem)):
        if not disk.exists(path):
            continue
        data = disk.view(path)  # a mapping: a preallocated index is read a few pages of it
        entries = idx.written_entries(idx.entries_from_bytes(data, dtype))
        problem = check(path, seg.base_offset, len(data), entries)
        if problem is not None:
            out[path] = problem.reason
    return out


def full_problems(seg: Segment, scan: SegmentScan) -> dict[str, str]:
    """``mploader verify``'s checks of the three indexes against the scan's batches, by path."""
    task = AuditTask(seg.log_path, seg.base_offset)
    out: dict[str, str] = {}
    for path, check in ((seg.index_path, offset_index_verdict), (seg.time_index_path, time_index_verdict),
                        (seg.txn_index_path, txn_index_verdict)):
        try:
            verdict = check(path, task, scan.batches)
        except FileNotFoundError:
            verdict = MISSING
        if verdict not in (OK, MISSING):
            out[path] = verdict
    return out


def rebuild_indexes(disk: Disk, seg: Segment, scan: SegmentScan, cfg: EffectiveConfig) -> str | None:
    """Write ``seg``'s offset and time index as ``LogSegment.recover`` would from ``scan`` (the ``.log`` is left
    as it is); None when written, else why not (where recover() would throw)."""
    _, plan = plan_segment_indexes(seg, scan, BatchColumns(scan.batches), cfg)
    if plan.throws_in_loop or plan.failed_at_row is not None or plan.final_time_failed:
        return "left: recovering this segment would fail (an offset that does not fit its index, a control " \
               "batch Kafka cannot read, or an index append Kafka refuses)"
    disk.write(seg.index_path, plan.offset_bytes)
    disk.write(seg.time_index_path, plan.time_bytes)
    return None


__all__ = ["IndexCheck", "full_problems", "rebuild_indexes", "sanity_problems"]
