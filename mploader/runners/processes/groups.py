"""Partitions in groups for the workers: by cost, the costliest first."""

from __future__ import annotations

import os
from collections.abc import Sequence

from mploader.costs import COST_PER_SEGMENT, GROUPS_PER_WORKER
from mploader.format import names
from mploader.recovery.job import PartitionJob


def partition_cost(job: PartitionJob) -> int:
    """What loading ``job``'s partition may cost, in bytes: after an unclean shutdown its ``.log`` bytes and
    :data:`~mploader.costs.COST_PER_SEGMENT` a segment (0 for a directory that cannot be listed: its load says why);
    after a clean one a segment's worth, the same for every partition, without a look at its files (a clean load
    reads no ``.log`` but where an index is missing: listing each partition would cost the parent more than the
    grouping gains)."""
    if job.clean_shutdown:
        return COST_PER_SEGMENT
    if job.logs is not None:  # as the preflight sized them: no second listing in the parent
        log_bytes, count = job.logs
        return log_bytes + COST_PER_SEGMENT * count
    try:
        with os.scandir(job.dir) as entries:
            logs = [e.stat().st_size for e in entries if e.name.endswith(names.LOG_SUFFIX)]
    except OSError:
        return 0
    return sum(logs) + COST_PER_SEGMENT * len(logs)


def groups_of(costs: Sequence[int], workers: int) -> list[list[int]]:
    """The jobs' indexes in groups, costliest first, each group up to an equal share of the total cost
    (``workers`` x :data:`~mploader.costs.GROUPS_PER_WORKER` shares): taken in that order by the workers, the big
    partitions start first and the small ones fill in at the end."""
    order = sorted(range(len(costs)), key=lambda i: -costs[i])
    share = sum(costs) / (workers * GROUPS_PER_WORKER)
    groups: list[list[int]] = []
    filled = 0
    for i in order:
        if not groups or (filled + costs[i] > share and groups[-1]):
            groups.append([])
            filled = 0
        groups[-1].append(i)
        filled += costs[i]
    return groups


__all__ = ["groups_of", "partition_cost"]
