"""Where Phase 1 runs.

An :class:`Engine` hands each data dir a *scan source*: an object whose
``scan(task)`` returns the :class:`~mploader.scan.SegmentScan` of a task.
The inline engine scans on the calling thread (the reference path).  Engines
may ``prefetch``: scan, ahead of Phase 2 and in parallel, the segments Phase 2
is going to ask for; Phase 2's answers never depend on whether a scan was
prefetched.
"""

from __future__ import annotations

from typing import Sequence

from .config import LoaderConfig
from .result import LoadStats
from .scan import SegmentScan, SegmentTask, scan_segment
from .format.names import TopicPartition


class InlineSource:
    def __init__(self, stats: LoadStats):
        self.stats = stats

    def scan(self, task: SegmentTask) -> SegmentScan:
        result = scan_segment(task)
        self.stats.segments_scanned += 1
        return result


class Engine:
    """The inline engine: Phase 1 in the calling thread, nothing to start or stop."""

    def __init__(self, stats: LoadStats):
        self.stats = stats
        self._source = InlineSource(stats)

    def source(self, data_dir: str) -> InlineSource:
        return self._source

    def prefetch(self, dirs: Sequence[tuple[str, list[str], bool, dict[TopicPartition, int]]]) -> None:
        """Inline: nothing to do ahead of time."""

    def close(self) -> None:
        pass


def make_engine(cfg: LoaderConfig, data_dirs: list[str], stats: LoadStats) -> Engine:
    return Engine(stats)
