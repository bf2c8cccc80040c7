"""Whole partitions loaded in worker processes: each partition's scans and its Phase 2 in one worker.

The scanning engine (:mod:`mploader.engine.pool`) runs Phase 1 in workers and keeps Phase 2 in the parent; on a
broker of many small recovered segments Phase 2 is most of the load, and no number of scanning workers shortens
it.  Kafka's answer is ``num.recovery.threads.per.data.dir``: partitions are independent, so several load at
once.  This runner does that with processes (the GIL), running the same
:func:`mploader.recovery.job.load_partition`.

::

    groups.py     partitions in groups, by cost
    messages.py   LoadGroup, SegmentsLeft, GroupLoaded: what crosses a worker's pipe
    worker.py     a worker's loop: a group in, its answer out
    pool.py       ProcessPartitions (the runner) and one run's pool state
"""

from mploader.runners.processes.groups import groups_of, partition_cost
from mploader.runners.processes.pool import ProcessPartitions
from mploader.runners.processes.worker import load_group

__all__ = ["ProcessPartitions", "groups_of", "load_group", "partition_cost"]
