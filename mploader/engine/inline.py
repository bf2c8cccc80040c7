"""The inline engine: Phase 1 in the calling thread, nothing to start or stop.  The reference engine:
every other one must give exactly its results."""

from __future__ import annotations

from collections.abc import Sequence

from mploader.engine.base import Engine
from mploader.engine.plan import DirPlan, Partition, file_size
from mploader.scan import SegmentScan, SegmentTask


class InlineEngine(Engine):
    def prefetch(self, dirs: Sequence[DirPlan]) -> dict[str, list[Partition]]:
        """Plans each unclean dir and starts the disk's read-ahead of its scans, in Phase 2's order, which for
        this engine is the listing's, or the disk's where one reader reads the dir (:meth:`Engine.one_reader`).
        A clean dir is not planned (a listing per partition, for the few segments without an index): nothing runs
        ahead of the scans, and none of them counts as unplanned."""
        order = {plan.data_dir: list(plan.partitions) for plan in dirs}
        for plan in dirs:
            if plan.clean:
                continue
            gated = self.one_reader(plan)
            if gated:
                in_order = self.in_disk_order(plan.data_dir, self.plan(plan))
                order[plan.data_dir] = [part for part, _ in in_order]
            else:
                rank = {part: i for i, part in enumerate(plan.partitions)}
                in_order = sorted(self.plan(plan), key=lambda p: rank[p[0]])
            self.start_read_ahead(plan.data_dir,
                                  [(t.path, 0, file_size(t.path, plan.disk)) for _, ts in in_order for t in ts], gated)
        return order

    def scan(self, data_dir: str, task: SegmentTask) -> SegmentScan:
        return self.inline_source(data_dir).scan(task)


__all__ = ["InlineEngine"]
