"""One plan a load: from the config, the CPUs at hand and the data dirs' plans, which engine scans, how many
workers, whether whole partitions load in worker processes, and the bytes planned (:class:`LoadPlan`, immutable,
made once by :func:`plan_load`).  The engine and the runner are built from it, fully configured.  Every figure it
weighs is in :mod:`mploader.costs`.

``segment_scan_workers_per_data_dir`` ("--workers"):

* a number: that many scanning workers per data dir (1: scans in the loading threads), always;
* "auto": the usable CPUs shared among the data dirs where the busiest dir has enough to scan for a pool to pay
  (:func:`auto_pool_min_bytes`), else 1; and whole partitions in worker processes instead where the inline load
  would take :data:`~mploader.costs.AUTO_MIN_SECONDS` or more on 2 CPUs or more (:func:`auto_partition_workers`),
  except where a dir is read by one reader in disk order (a disk with a head, cold: :mod:`mploader.engine.diskorder`);
* "adaptive": up to twice the CPUs' share scanning, as many at once as pay (:mod:`mploader.engine.adaptive`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from mploader.config import LoaderConfig
from mploader.costs import (
    AUTO_MIN_SECONDS,
    BYTES_PER_SECOND,
    PARTITION_SECONDS,
    POOL_START_SECONDS,
    POOL_TASK_SECONDS,
    SCAN_BYTES_PER_SECOND,
    SEGMENT_SECONDS,
)
from mploader.disk import NO_HOOK, Disk, MutationHook
from mploader.engine import worker_start
from mploader.engine.base import Engine
from mploader.engine.diskorder import reads_in_disk_order
from mploader.engine.inline import InlineEngine
from mploader.engine.plan import DirPlan, PlannedScans, file_size, ordered, partition_scans, plan_segment_scans
from mploader.host.cpus import usable_cpus
from mploader.metrics import MetricsRegistry
from mploader.progress import Progress
from mploader.result import LoadStats
from mploader.runners import LoadingThreads, PartitionRunner, ProcessPartitions


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """What a load runs (see the module docstring)."""

    workers_per_dir: int = 1  # scanning workers per data dir (1: the inline engine)
    adaptive: bool = False  # "adaptive": ``workers_per_dir`` is a cap, the count follows what pays
    partition_workers: int = 0  # processes loading whole partitions (0: loading threads in this process)
    planned: Mapping[str, PlannedScans] = field(default_factory=dict)  # scans planned while choosing, by data dir
    planned_bytes: int = 0  # the bytes all those plans scan
    planned_segments: int = 0  # ... in how many segments

    def engine(self, cfg: LoaderConfig, data_dirs: Sequence[str], stats: LoadStats,
               metrics: MetricsRegistry | None = None, progress: Progress | None = None) -> Engine:
        """The Phase 1 engine of this plan, counting into ``stats``."""
        # prefetch reuses the plans made while choosing
        if self.workers_per_dir <= 1 or not data_dirs:
            return InlineEngine(stats, progress, cfg.read_ahead_bytes,
                                max_read_bytes_per_sec=cfg.max_read_bytes_per_sec, planned=self.planned)
        from mploader.engine.pool import PoolEngine  # loky only when a pool is started

        return PoolEngine(stats, self.workers_per_dir, data_dirs, metrics, progress,
                          read_ahead_bytes=cfg.read_ahead_bytes, adaptive=self.adaptive, start=cfg.worker_start,
                          max_read_bytes_per_sec=cfg.max_read_bytes_per_sec, planned=self.planned)

    def runner(self, cfg: LoaderConfig, disk: Disk, data_dirs: Sequence[str], stats: LoadStats,
               metrics: MetricsRegistry | None = None, progress: Progress | None = None,
               mutations: MutationHook = NO_HOOK) -> PartitionRunner:
        """Where this plan's partitions load: worker processes (their disks told ``mutations``), or loading threads
        on ``disk`` with this plan's engine."""
        if self.partition_workers:
            return ProcessPartitions(self.partition_workers, cfg.worker_start, mutations)
        return LoadingThreads(self.engine(cfg, data_dirs, stats, metrics, progress), disk,
                              cfg.num_recovery_threads_per_data_dir)


def plan_load(cfg: LoaderConfig, plans: Sequence[DirPlan], watched: bool = True) -> LoadPlan:
    """The plan of a load of these dirs.  ``watched``: someone reads the load's progress, which shows the planned
    bytes; unwatched, the choice of partition workers may be made before the whole plan
    (:func:`early_partition_workers`), the plans then left to the workers."""
    partitions = sum(len(p.partitions) for p in plans)
    # whether "auto" may load whole partitions in workers: never under a read budget (the scanning engine keeps it),
    # nor where a dir that scans its segments is read by one reader in disk order (engine.diskorder): each worker
    # would read it too
    auto = (cfg.segment_scan_workers_per_data_dir == "auto" and cfg.max_read_bytes_per_sec is None
            and not any(reads_in_disk_order(p, cfg.read_ahead_bytes) for p in plans if not p.clean or p.scan_all))
    done: dict[str, PlannedScans] = {}
    if auto and not watched:
        n, done = early_partition_workers(plans, partitions, start=cfg.worker_start)
        if n:
            return LoadPlan(partition_workers=n)
    scans = plan_scans(cfg, plans, done)
    if auto:
        n = auto_partition_workers(scans, partitions, scans.workers_per_dir, start=cfg.worker_start)
        if n:
            return LoadPlan(partition_workers=n, planned=scans.planned, planned_bytes=scans.planned_bytes,
                            planned_segments=scans.planned_segments)
    return scans


def whole_partitions(workers: int | Literal["auto"], cfg: LoaderConfig) -> PartitionRunner:
    """``--partition-workers``: whole partitions loaded in ``workers`` processes ("auto": one per usable CPU)."""
    return ProcessPartitions(usable_cpus() if workers == "auto" else workers, cfg.worker_start)


def plan_scans(cfg: LoaderConfig, plans: Sequence[DirPlan], done: Mapping[str, PlannedScans] | None = None,
               ) -> LoadPlan:
    """The scanning engine's part of the plan: its workers per dir, and the plans "auto" or "adaptive" needs to
    choose them (none for an explicit count).  ``done``: dirs already planned, by path."""
    n = cfg.segment_scan_workers_per_data_dir
    adaptive = n == "adaptive"
    if not isinstance(n, int) and plans:
        work = _auto_work(cfg, plans, done or {})
        return LoadPlan(workers_per_dir(cfg, len(plans), work.most, work.segments, work.scanning), adaptive,
                        planned=work.planned, planned_bytes=work.total, planned_segments=work.total_segments)
    return LoadPlan(workers_per_dir(cfg, len(plans)), adaptive)


def make_engine(cfg: LoaderConfig, data_dirs: Sequence[str] | Sequence[DirPlan], stats: LoadStats,
                metrics: MetricsRegistry | None = None, progress: Progress | None = None,
                scan_bytes: int | None = None) -> Engine:
    """The scanning engine for these data dirs: given their plans (or ``scan_bytes``, the most Phase 1 work of any
    of them), "auto" also weighs the Phase 1 work."""
    plans = [d for d in data_dirs if isinstance(d, DirPlan)]
    paths = [d.data_dir if isinstance(d, DirPlan) else d for d in data_dirs]
    if plans:
        plan = plan_scans(cfg, plans)
    else:
        n = cfg.segment_scan_workers_per_data_dir
        plan = LoadPlan(workers_per_dir(cfg, len(paths), scan_bytes), n == "adaptive")
    return plan.engine(cfg, paths, stats, metrics, progress)


def auto_pool_min_bytes(workers: int, dirs: int = 1, tasks: int = 0, start: str | None = None) -> float:
    """The Phase 1 work of the busiest data dir (bytes to scan, in ``tasks`` segments) from which "auto" starts a
    pool of ``workers`` per dir: where the share of the scans the workers take off that dir's loading thread,
    (1 - 1/workers) of them, is worth more than the pool's start and the parent's cost per segment.  With ``dirs``
    data dirs scanning, the inline engine already scans them at once (the compiled walk runs without the GIL)
    while the other dirs' Phase 2 holds the GIL, so a pool takes off only 1/``dirs`` of what it would for one dir.
    ``start``: how the workers start (None: :func:`mploader.engine.worker_start`'s).  Never for 1 worker."""
    if workers <= 1:
        return math.inf
    start_seconds = POOL_START_SECONDS[worker_start(start)]
    return (start_seconds + tasks * POOL_TASK_SECONDS) * SCAN_BYTES_PER_SECOND * max(1, dirs) / (1 - 1 / workers)


def workers_per_dir(cfg: LoaderConfig, n_dirs: int, scan_bytes: int | None = None, scan_tasks: int = 0,
                    scanning_dirs: int | None = None) -> int:
    """Scanning workers per data dir (see the module docstring): an explicit number always; "auto" the usable CPUs'
    share, but 1 where the busiest dir (``scan_bytes`` in ``scan_tasks`` segments; ``scanning_dirs`` dirs scanning
    anything, default all) has too little for :func:`auto_pool_min_bytes`; "adaptive" twice that share, at least 2
    (its pool starts workers only as its count grows), 1 where "auto" would be."""
    n = cfg.segment_scan_workers_per_data_dir
    if isinstance(n, int):
        return n
    share = usable_cpus() // max(1, n_dirs)
    dirs = n_dirs if scanning_dirs is None else scanning_dirs
    if scan_bytes is not None and scan_bytes < auto_pool_min_bytes(max(2, share), dirs, scan_tasks, cfg.worker_start):
        return 1
    if n == "adaptive":
        return max(2, 2 * share)
    return max(1, share)


class _Work(NamedTuple):
    planned: dict[str, PlannedScans]
    most: int  # the most bytes any data dir's plan scans
    segments: int  # ... in how many segments
    scanning: int  # how many dirs scan anything
    total: int  # the bytes all the plans scan
    total_segments: int  # ... in how many segments


def _weigh(planned: dict[str, PlannedScans], disks: Mapping[str, Disk | None]) -> _Work:
    """What the plans scan, each file sized once (by its dir's disk, from ``disks``, where it has one)."""
    per_dir = [(sum(file_size(t.path, disks.get(d)) for t in ts), len(ts))
               for d, ts in ((d, [t for _, tasks in parts for t in tasks]) for d, parts in planned.items())]
    most, segments = max(per_dir, default=(0, 0))
    return _Work(planned, most, segments, sum(1 for _, n in per_dir if n), sum(b for b, _ in per_dir),
                 sum(n for _, n in per_dir))


def _auto_work(cfg: LoaderConfig, plans: Sequence[DirPlan], done: Mapping[str, PlannedScans]) -> _Work:
    """The plans "auto" weighs.  A clean dir is sized by a bound first: it has little or nothing to scan, and the
    inline engine never plans it, so its exact plan is made only where the bound asks for a pool (the bound: its
    ``.log`` bytes without an ``.index`` or with a ``.txnindex``, as the preflight sized them, else
    plan_segment_scans' bound_only)."""
    disks = {p.data_dir: p.disk for p in plans}
    clean = [p for p in plans if p.clean and not p.scan_all]
    bounds = {p.data_dir: p.clean_scans.bound if p.clean_scans is not None
              else _weigh({p.data_dir: plan_segment_scans(p, bound_only=True)}, disks).most for p in clean}
    planned = {p.data_dir: done[p.data_dir] if p.data_dir in done else plan_segment_scans(p)
               for p in plans if p.data_dir not in bounds}
    work = _weigh(planned, disks)
    most = max([work.most, *bounds.values()])
    # the bound's question is the generous one (no segments counted, no clean dir counted as scanning): it may
    # not refuse a pool the exact plans would ask for
    if bounds and workers_per_dir(cfg, len(plans), most, 0, max(1, work.scanning)) > 1:
        planned.update({p.data_dir: plan_segment_scans(p) for p in plans if p.data_dir in bounds})
        return _weigh(planned, disks)
    return work._replace(most=most)


def inline_seconds(scans: LoadPlan, partitions: int) -> float:
    """The inline load's seconds, as estimated from the scans planned and the number of partitions."""
    return _estimate(scans.planned_bytes, scans.planned_segments, partitions)


def _estimate(planned_bytes: int, planned_segments: int, partitions: int) -> float:
    return planned_bytes / BYTES_PER_SECOND + planned_segments * SEGMENT_SECONDS + partitions * PARTITION_SECONDS


def auto_partition_workers(scans: LoadPlan, partitions: int, engine_workers: int, cpus: int | None = None,
                           start: str | None = None) -> int:
    """How many processes "auto" loads whole partitions in (0: none, the scanning engine loads them): where the
    inline load would take :data:`~mploader.costs.AUTO_MIN_SECONDS` or more (spawned workers: their start on top),
    on at least 2 of the usable ``cpus``, when there are as many partitions as CPUs or the engine would scan inline
    anyway (``engine_workers`` 1).  With fewer partitions than CPUs a scanning pool may use more of them: it splits
    big segments, which whole partitions cannot."""
    cpus = usable_cpus() if cpus is None else cpus
    n = min(cpus, partitions)
    estimate = inline_seconds(scans, partitions)
    if n < 2 or (partitions < cpus and engine_workers > 1) or estimate < _bar(start):
        return 0
    return n


def early_partition_workers(plans: Sequence[DirPlan], partitions: int, cpus: int | None = None,
                            start: str | None = None) -> tuple[int, dict[str, PlannedScans]]:
    """:func:`auto_partition_workers`' answer before the whole plan is made, where it is already certain: with as
    many partitions as CPUs (2 or more) it takes workers exactly when :func:`inline_seconds` reaches the bar, and
    every partition planned only adds to that estimate.  So: the partitions' own term, then the unclean dirs' scans
    partition by partition (a clean dir's are counted only where its bound asks for a pool: not here), up to the
    bar.  Returns the workers (0: not certain, the whole plan decides) and the dirs planned to their end."""
    cpus = usable_cpus() if cpus is None else cpus
    done: dict[str, PlannedScans] = {}
    if cpus < 2 or partitions < cpus:
        return 0, done
    bar = _bar(start)
    planned_bytes = planned_segments = 0  # counted as inline_seconds counts them: the same float at the same plans
    for plan in plans:
        if _estimate(planned_bytes, planned_segments, partitions) >= bar:
            break
        if plan.clean and not plan.scan_all:
            continue
        scans = []
        for sized in partition_scans(plan):
            scans.append(sized)
            planned_bytes += sized[0]
            planned_segments += len(sized[2])
            if _estimate(planned_bytes, planned_segments, partitions) >= bar:
                return cpus, done
        done[plan.data_dir] = ordered(scans)
    return (cpus if _estimate(planned_bytes, planned_segments, partitions) >= bar else 0), done


def _bar(start: str | None) -> float:
    """The inline load's estimated seconds from which "auto" takes partition workers."""
    return AUTO_MIN_SECONDS + (POOL_START_SECONDS["spawn"] if worker_start(start) == "spawn" else 0.0)


__all__ = ["LoadPlan", "auto_partition_workers", "auto_pool_min_bytes", "early_partition_workers", "inline_seconds",
           "make_engine", "plan_load", "plan_scans", "usable_cpus", "whole_partitions", "workers_per_dir"]
