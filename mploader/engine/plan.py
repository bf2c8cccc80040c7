"""The scans Phase 2 will ask a data dir's engine for, planned before Phase 2 starts.

The choice of segments is :func:`mploader.scan.plan.segments_to_scan`, the rule the loader itself
follows; this module only lists the partition directories, sizes the work and orders it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from mploader.disk import Disk
from mploader.errors import MploaderError
from mploader.format import names
from mploader.format.files import read_file
from mploader.format.index import txn_index_corrupt
from mploader.format.names import DirKind, TopicPartition
from mploader.scan import SegmentTask
from mploader.scan.plan import CleanScans, segments_to_scan, unflushed

Partition = tuple[str, TopicPartition, DirKind]  # partition directory, its topic-partition, its kind
PlannedScans = list[tuple[Partition, list[SegmentTask]]]  # in the order Phase 2 should take them
SizedScans = tuple[int, Partition, list[SegmentTask]]  # a partition's scans and the bytes they read


@dataclass(frozen=True, slots=True)
class DirPlan:
    """What the manager knows of a data dir before Phase 2: enough to plan its scans."""

    data_dir: str
    clean: bool
    partitions: list[Partition]
    recovery_points: dict[TopicPartition, int]
    index_interval: Callable[[str], int] | None = None  # log.index.interval.bytes of a topic
    max_index_size: Callable[[str], int] | None = None  # segment.index.bytes of a topic
    scan_all: bool = False  # index_check="full": Phase 2 reads every segment (a -delete dir's too)
    clean_scans: CleanScans | None = None  # what a clean load may scan, where the preflight sized it
    # the load's disk: the partition listings and .log sizes the preflight cached there (preflight.LISTING_CACHE_NAMES)
    # are asked of it, not of the file system again (a listing a partition and a stat a planned segment, twice); a
    # partition it did not cache is listed here and not cached; None: the file system
    disk: Disk | None = None


def plan_segment_scans(plan: DirPlan, bound_only: bool = False) -> PlannedScans:
    """Per partition, the whole-segment scans Phase 2 will ask for (:func:`segments_to_scan`), partitions
    with the most bytes to scan first (so that a huge partition does not make the tail of the load),
    segments in offset order.  ``bound_only``: no ``.txnindex`` is read, each counts as corrupt: a superset
    of the plan, for sizing the work cheaply (a clean dir's 390 ``.txnindex`` files took ~12 ms to read)."""
    return ordered(partition_scans(plan, bound_only))


def partition_scans(plan: DirPlan, bound_only: bool = False) -> Iterator[SizedScans]:
    """:func:`plan_segment_scans`' partitions one at a time, in the data dir's order, each with the bytes of its
    scans: for a caller that may stop before the last (``load_plan.early_partition_workers``)."""
    for part in plan.partitions:
        path, tp, kind = part
        cached = None if plan.disk is None else plan.disk.cached_listing(path)
        try:
            files = set(os.listdir(path) if cached is None else cached)
        except OSError:
            yield 0, part, []
            continue
        bases = sorted(names.offset_from_file_name(f) for f in files
                       if f.endswith(names.LOG_SUFFIX) and len(f) == 24 and f[:20].isdigit())
        recover_log = not plan.clean and kind is not DirKind.DELETE
        chosen = segments_to_scan(bases, files, plan.recovery_points.get(tp, 0), recover_log,
                                  _corrupt if bound_only else functools.partial(_txn_index_corrupt, path),
                                  scan_all=plan.scan_all and kind is not DirKind.DELETE)
        interval = None if plan.index_interval is None else plan.index_interval(tp.topic)
        index_size = None if plan.max_index_size is None else plan.max_index_size(tp.topic)
        # the rebuilt indexes are prepared where recovery will write them: with scan_all, of the segments recoverLog
        # recovers only (the others are scanned to be checked; a load-time recovery among them prepares its own)
        recovering = set(unflushed(bases, plan.recovery_points.get(tp, 0)) if recover_log else ()) \
            if plan.scan_all else None
        tasks = [SegmentTask(os.path.join(path, names.segment_file_name(b, names.LOG_SUFFIX)), b,
                             index_interval=interval,
                             max_index_size=index_size if recovering is None or b in recovering else None)
                 for b in chosen]
        yield sum(file_size(t.path, plan.disk) for t in tasks), part, tasks


def ordered(scans: Iterable[SizedScans]) -> PlannedScans:
    """Partitions' scans in the order Phase 2 should take them: the most bytes first, else the dir's order."""
    return [(part, tasks) for _, part, tasks in sorted(scans, key=lambda s: -s[0])]


def _corrupt(base: int) -> bool:
    return True


def _txn_index_corrupt(partition_dir: str, base: int) -> bool:
    """The ``.txnindex`` check of :func:`segments_to_scan`; a file that cannot be read or parsed is left
    to the loader, which reports it."""
    path = os.path.join(partition_dir, names.segment_file_name(base, names.TXN_INDEX_SUFFIX))
    try:
        return txn_index_corrupt(read_file(path), path, base)
    except (OSError, MploaderError):
        return False


def file_size(path: str, disk: Disk | None = None) -> int:
    """The size of ``path`` (as ``disk`` knows it, where given), 0 when it cannot be stat-ed (the scan will report
    why)."""
    try:
        return os.path.getsize(path) if disk is None else disk.size(path)
    except OSError:
        return 0


__all__ = ["DirPlan", "Partition", "PlannedScans", "SizedScans", "file_size", "ordered", "partition_scans",
           "plan_segment_scans"]
