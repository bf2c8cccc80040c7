"""Which segments Phase 2 will read whole: the one rule the loader and the engines share.

Kafka's ``LogLoader`` reads a segment's bytes at start-up in two places (docs/loading.md §6.3-§6.6):

* ``loadSegmentFiles`` recovers a segment whose ``.index`` is missing, or whose ``.txnindex`` fails its
  sanity check (``LogSegment.sanityCheck``), whatever the shutdown was;
* ``recoverLog``, after an unclean shutdown, recovers every segment from the one holding the recovery
  point on (``LogSegments.values(recoveryPoint, Long.MAX_VALUE)``), except in a ``-delete`` directory.

The loader (:mod:`mploader.recovery.loader`) decides with these functions, and the engines
(:mod:`mploader.engine.plan`) plan Phase 1 with the same ones, so a rule changed here changes both.
A scan the loader asks for that the engine had not planned is counted in ``LoadStats.unplanned_scans``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Sequence
from typing import NamedTuple

from mploader.format import names
from mploader.format.names import INT64_MAX


def values_between(bases: Sequence[int], start: int, end: int) -> list[int]:
    """``LogSegments.values(from, to)``: the sorted ``bases`` of the segments that may hold offsets in
    ``[start, end)``: from the floor segment of ``start`` (the first one if none), below ``end``.
    Empty when ``start == end``; the caller checks ``end < start`` (Kafka throws)."""
    if start == end:
        return []
    lo = bisect.bisect_right(bases, start) - 1  # the floor segment of start
    return [b for b in bases[max(lo, 0):] if b < end]


def unflushed(bases: Sequence[int], recovery_point: int) -> list[int]:
    """The segments ``recoverLog`` recovers after an unclean shutdown."""
    return values_between(bases, recovery_point, INT64_MAX)


def index_missing(base: int, present: Collection[str]) -> bool:
    """``LogSegment.sanityCheck`` throws NoSuchFileException: no ``.index`` beside the ``.log``."""
    return names.segment_file_name(base, names.INDEX_SUFFIX) not in present


def needs_load_time_recovery(base: int, present: Collection[str], txn_index_corrupt: Callable[[int], bool]) -> bool:
    """``loadSegmentFiles`` recovers the segment: its ``.index`` is missing, or its ``.txnindex`` (when
    present) is corrupt; ``txn_index_corrupt(base)`` reads the latter and is asked only when it exists."""
    if index_missing(base, present):
        return True
    return names.segment_file_name(base, names.TXN_INDEX_SUFFIX) in present and txn_index_corrupt(base)


class CleanScans(NamedTuple):
    """What a clean load of some partitions reads whole, bounded without reading a ``.txnindex``: the bytes of the
    ``.log`` files with no ``.index`` (recovered, certainly) and of those with a ``.txnindex`` (recovered if it fails
    its sanity check, which is rare)."""

    unindexed: int = 0
    txn_indexed: int = 0

    @property
    def bound(self) -> int:
        return self.unindexed + self.txn_indexed

    def plus(self, base: int, present: Collection[str], log_bytes: int) -> CleanScans:
        """With segment ``base`` (its ``.log`` of ``log_bytes``) counted where :func:`needs_load_time_recovery` may
        choose it."""
        if index_missing(base, present):
            return CleanScans(self.unindexed + log_bytes, self.txn_indexed)
        if names.segment_file_name(base, names.TXN_INDEX_SUFFIX) in present:
            return CleanScans(self.unindexed, self.txn_indexed + log_bytes)
        return self

    @staticmethod
    def total(parts: Sequence[CleanScans]) -> CleanScans:
        return CleanScans(sum(p.unindexed for p in parts), sum(p.txn_indexed for p in parts))


def segments_to_scan(bases: Sequence[int], present: Collection[str], recovery_point: int, recover_log: bool,
                     txn_index_corrupt: Callable[[int], bool], scan_all: bool = False) -> list[int]:
    """The sorted ``bases`` whose whole ``.log`` Phase 2 will read: load-time recoveries, and, when
    ``recover_log`` (an unclean shutdown, not a ``-delete`` dir), the segments ``recoverLog`` recovers;
    ``scan_all``: every segment (``index_check="full"`` checks each one's indexes against its batches)."""
    if scan_all:
        return sorted(bases)
    chosen = {b for b in bases if needs_load_time_recovery(b, present, txn_index_corrupt)}
    if recover_log:
        chosen.update(unflushed(bases, recovery_point))
    return sorted(chosen)


__all__ = ["index_missing", "needs_load_time_recovery", "segments_to_scan", "unflushed",
           "values_between"]
