"""The figures a load's plan weighs (:mod:`mploader.load_plan`), in one place.

Each was measured on the machines perf/README.md names ("When a pool pays", "Whole partitions in workers",
"Many cores", "Workers forked"); a change to one is a change to that table's figures, re-measured.
"""

from __future__ import annotations

#: what starting a scanning or partition-loading pool costs a load, by how its workers start
#: (:func:`mploader.engine.worker_start`): forked copies of the parent, or fresh interpreters importing numpy
POOL_START_SECONDS = {"fork": 0.06, "spawn": 0.25}
#: how fast one process scans page-cached ~1 KB batches with the compiled walk
SCAN_BYTES_PER_SECOND = 6e9
#: what each segment handed to a scanning worker costs the parent (a shared-memory block, the submission, the rows)
POOL_TASK_SECONDS = 0.0003

#: the inline load's seconds, as estimated from its plans: a recovered segment's Phase 2 beyond its bytes, a byte
#: scanned and recovered, a partition's own steps
SEGMENT_SECONDS = 0.0007
BYTES_PER_SECOND = 1.5e9
PARTITION_SECONDS = 0.0013
#: from this estimate of the inline load on, "auto" loads whole partitions in worker processes: below it the
#: workers' start and their round trips are a good part of the load
AUTO_MIN_SECONDS = 0.25

#: a segment weighs this many bytes of ``.log`` in a partition's cost (grouping partitions for workers or tasks):
#: a small recovered segment's Phase 2 is about what scanning 1 MiB takes
COST_PER_SEGMENT = 1 << 20
#: groups of partitions per worker: enough that the workers finish together, few enough that a group's round trip
#: and its sync stay small against its partitions' work
GROUPS_PER_WORKER = 4

__all__ = ["AUTO_MIN_SECONDS", "BYTES_PER_SECOND", "COST_PER_SEGMENT", "GROUPS_PER_WORKER", "PARTITION_SECONDS",
           "POOL_START_SECONDS", "POOL_TASK_SECONDS", "SCAN_BYTES_PER_SECOND", "SEGMENT_SECONDS"]
