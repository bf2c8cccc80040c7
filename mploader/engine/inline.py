"""The inline engine: Phase 1 in the calling thread, nothing to start or stop.  The reference engine:
every other one must give exactly its results."""

from __future__ import annotations

from collections.abc import Sequence

from mploader.engine.base import Engine
from mploader.engine.plan import DirPlan, Partition, file_size
from mploader.scan import SegmentScan, SegmentTask


class InlineEngine(Engine):
    def prefetch(self, dirs: Sequence[DirPlan]) -> dict[str, list[Partition]]:
        """Plans each dir; only the disk's read-ahead of an unclean dir starts now, in Phase 2's order,
        which for this engine is the listing's."""
        for plan in dirs:
            planned = self.plan(plan)
            if not plan.clean:  # a clean dir scans only segments without an index: not worth advising
                rank = {part: i for i, part in enumerate(plan.partitions)}
                in_order = sorted(planned, key=lambda p: rank[p[0]])
                self.start_read_ahead(plan.data_dir,
                                      [(t.path, 0, file_size(t.path)) for _, ts in in_order for t in ts])
        return {plan.data_dir: list(plan.partitions) for plan in dirs}

    def scan(self, data_dir: str, task: SegmentTask) -> SegmentScan:
        return self.inline_source(data_dir).scan(task)


__all__ = ["InlineEngine"]
