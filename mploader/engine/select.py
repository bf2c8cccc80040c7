"""Which engine a load gets: ``num_segment_loading_threads_per_data_dir`` and the CPUs at hand."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from mploader.config import LoaderConfig
from mploader.disk import Disk
from mploader.engine import worker_start
from mploader.engine.base import Engine
from mploader.engine.inline import InlineEngine
from mploader.engine.plan import DirPlan, PlannedScans, file_size, plan_segment_scans
from mploader.metrics import MetricsRegistry
from mploader.progress import Progress
from mploader.result import LoadStats

# The figures "auto" weighs (perf/README.md, "When a pool pays", "Many cores" and "Workers forked"): what starting a
# pool costs a load, by how its workers start (mploader.engine.worker_start): spawned, each a fresh interpreter
# importing numpy and mploader (0.15 s) on the same CPUs, measured on 2 vCPUs at 2 GB inline 0.47 s against 0.55 s
# with 2 workers, at 4 GB 0.94 against 0.86 s; forked, 2 workers broke even with inline between 512 MB and 1 GB
# (0.19 against 0.18 s, 0.30 against 0.32 s) and 1.10-1.41x as fast at 2 GB.  How fast one process scans
# page-cached ~1 KB batches with the compiled walk; what each segment handed to a worker costs the parent (a
# shared-memory block made and unlinked, the submission, the result, the rows read back): on 16 CPUs
# (perf/manycore.py) 2,117 segments of 1 MB, 2 GB, inline 4.0 s against 4.5-5.8 s with 2-16 spawned workers (~0.3 ms
# a segment beyond what the workers saved).
POOL_START_SECONDS = {"fork": 0.06, "spawn": 0.25}
SCAN_BYTES_PER_SECOND = 6e9
POOL_TASK_SECONDS = 0.0003


def auto_pool_min_bytes(workers: int, dirs: int = 1, tasks: int = 0, start: str | None = None) -> float:
    """The Phase 1 work of the busiest data dir (bytes to scan, in ``tasks`` segments) from which "auto" starts a
    pool of ``workers`` per dir: where the share of the scans the workers take off that dir's loading thread,
    (1 - 1/workers) of them, is worth more than the pool's start and the parent's cost per segment.  With ``dirs``
    data dirs the inline engine already scans them at once (a loading thread each; the compiled walk runs without
    the GIL) while the other dirs' Phase 2 holds the GIL, so a pool takes off only 1/``dirs`` of what it would for
    one dir (on 16 CPUs, 4 dirs of 2 GB loaded in 2.05 s inline and in 2.4-4.4 s with 2-16 workers a dir); ``dirs``
    counts the dirs that scan anything (a clean dir's loading thread has little Phase 2 to hide scans behind);
    ``start``: how the workers start (``LoaderConfig.worker_start``; None: :func:`mploader.engine.worker_start`'s).
    One dir, few segments, forked workers: 720 MB for 2 workers, 480 MB for 4, 384 MB for 16 (spawned: 3 GB, 2 GB,
    1.6 GB); never for 1."""
    if workers <= 1:
        return math.inf
    start_seconds = POOL_START_SECONDS[worker_start(start)]
    return (start_seconds + tasks * POOL_TASK_SECONDS) * SCAN_BYTES_PER_SECOND * max(1, dirs) / (1 - 1 / workers)


def usable_cpus() -> int:
    """CPUs this process may use: affinity mask, then a cgroup v2 CPU quota if one is set."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


def workers_per_dir(cfg: LoaderConfig, n_dirs: int, scan_bytes: int | None = None, scan_tasks: int = 0,
                    scanning_dirs: int | None = None) -> int:
    """``num_segment_loading_threads_per_data_dir``.

    "auto" = the usable CPUs shared among the data dirs, but 1 (the inline path) when no data dir has enough to
    scan for that many workers to pay for their start and their segments (:func:`auto_pool_min_bytes`; ``scan_bytes``:
    the largest per-dir amount, in ``scan_tasks`` segments; ``scanning_dirs``: how many dirs scan anything, default
    all ``n_dirs``).  An explicit number always wins.  "adaptive" = the most
    workers the adaptive pool may let scan at once: twice the usable CPUs shared among the data dirs, at least 2
    (:mod:`mploader.engine.adaptive`: it starts workers only as its count grows; beyond the CPUs, more readers
    paid on a device that caps IOPS, their requests being larger: perf/README.md); like "auto", 1 below
    :func:`auto_pool_min_bytes` of the CPUs' share, at least 2 (no count of workers pays for the pool's start
    there).
    """
    n = cfg.num_segment_loading_threads_per_data_dir
    if n not in ("auto", "adaptive"):
        return int(n)
    share = usable_cpus() // max(1, n_dirs)
    dirs = n_dirs if scanning_dirs is None else scanning_dirs
    if scan_bytes is not None and scan_bytes < auto_pool_min_bytes(max(2, share), dirs, scan_tasks, cfg.worker_start):
        return 1
    if n == "adaptive":
        return max(2, 2 * share)
    return max(1, share)


class _Work(NamedTuple):
    most: int  # the most bytes any data dir's plan scans
    segments: int  # ... in how many segments
    scanning: int  # how many dirs scan anything
    total: int  # the bytes all the plans scan
    total_segments: int  # ... in how many segments


def _work(planned: dict[str, PlannedScans], disks: Mapping[str, Disk | None]) -> _Work:
    """What the plans scan, each file sized once (by its dir's disk, from ``disks``, where it has one)."""
    per_dir = [(sum(file_size(t.path, disks.get(d)) for t in ts), len(ts))
               for d, ts in ((d, [t for _, tasks in parts for t in tasks]) for d, parts in planned.items())]
    most, segments = max(per_dir, default=(0, 0))
    return _Work(most, segments, sum(1 for _, n in per_dir if n), sum(b for b, _ in per_dir),
                 sum(n for _, n in per_dir))


@dataclass(slots=True)
class AutoPlans:
    """What "auto" weighs, planned once (:func:`auto_plans`): the dirs' exact plans (a clean dir's only where its
    bound asks for a pool), the most bytes any dir scans and in how many segments, how many dirs scan anything, and
    the bytes and segments all the plans scan (``partition_pool.inline_seconds``)."""

    planned: dict[str, PlannedScans] = field(default_factory=dict)
    scan_bytes: int | None = None
    scan_tasks: int = 0
    scanning: int | None = None
    planned_bytes: int = 0
    planned_tasks: int = 0


def auto_plans(cfg: LoaderConfig, plans: Sequence[DirPlan], done: Mapping[str, PlannedScans] | None = None
               ) -> AutoPlans:
    """The plans "auto" (or "adaptive") needs to choose an engine; empty for an explicit count.  ``done``: dirs
    already planned (``partition_pool.surely_workers``), by path."""
    if not plans or cfg.num_segment_loading_threads_per_data_dir not in ("auto", "adaptive"):
        return AutoPlans()
    # a clean dir is sized by a bound first: it has little or nothing to scan, and the inline engine never plans
    # it, so its exact plan is made only where the bound asks for a pool. The bound: the bytes of its .log files
    # without an .index or with a .txnindex as the preflight sized them, else plan_segment_scans' bound_only (no
    # .txnindex read)
    disks = {p.data_dir: p.disk for p in plans}
    clean = [p for p in plans if p.clean and not p.scan_all]
    bounds = {p.data_dir: p.clean_scans.bound if p.clean_scans is not None else _work({p.data_dir: plan_segment_scans(
        p, bound_only=True)}, disks).most for p in clean}
    done = done or {}
    planned = {p.data_dir: done[p.data_dir] if p.data_dir in done else plan_segment_scans(p)
               for p in plans if p.data_dir not in bounds}
    work = _work(planned, disks)
    scan_bytes = max([work.most, *bounds.values()])
    # the bound's question is the generous one (no segments counted, no clean dir counted as scanning): it may
    # not refuse a pool the exact plans would ask for
    if bounds and workers_per_dir(cfg, len(plans), scan_bytes, 0, max(1, work.scanning)) > 1:
        planned.update({p.data_dir: plan_segment_scans(p) for p in plans if p.data_dir in bounds})
        work = _work(planned, disks)
        scan_bytes = work.most
    return AutoPlans(planned, scan_bytes, work.segments, work.scanning, work.total, work.total_segments)


def make_engine(cfg: LoaderConfig, data_dirs: list[str] | list[DirPlan], stats: LoadStats,
                metrics: MetricsRegistry | None = None, progress: Progress | None = None,
                scan_bytes: int | None = None, auto: AutoPlans | None = None) -> Engine:
    """The engine for these data dirs; given their plans (or ``scan_bytes``, the most Phase 1 work of any of
    them; or ``auto``, the plans :func:`auto_plans` made of them), "auto" also weighs the Phase 1 work."""
    plans = [d for d in data_dirs if isinstance(d, DirPlan)]
    paths = [d.data_dir if isinstance(d, DirPlan) else d for d in data_dirs]
    if auto is None:
        auto = auto_plans(cfg, plans) if plans else AutoPlans(scan_bytes=scan_bytes)
    n = workers_per_dir(cfg, len(paths), auto.scan_bytes, auto.scan_tasks, auto.scanning)
    # prefetch reuses the plans "auto" already made
    if n <= 1 or not paths:
        return InlineEngine(stats, progress, cfg.read_ahead_bytes,
                            max_read_bytes_per_sec=cfg.max_read_bytes_per_sec, planned=auto.planned)
    from mploader.engine.pool import PoolEngine  # loky only when a pool is started

    return PoolEngine(stats, n, paths, metrics, progress, read_ahead_bytes=cfg.read_ahead_bytes,
                      adaptive=cfg.num_segment_loading_threads_per_data_dir == "adaptive", start=cfg.worker_start,
                      max_read_bytes_per_sec=cfg.max_read_bytes_per_sec, planned=auto.planned)


__all__ = ["AutoPlans", "auto_plans", "auto_pool_min_bytes", "make_engine", "usable_cpus", "workers_per_dir"]
