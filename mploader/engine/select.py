"""Which engine a load gets: ``num_segment_loading_threads_per_data_dir`` and the CPUs at hand."""

from __future__ import annotations

import math
import os

from mploader.config import LoaderConfig
from mploader.engine.base import Engine
from mploader.engine.inline import InlineEngine
from mploader.engine.plan import DirPlan, PlannedScans, file_size, plan_segment_scans
from mploader.metrics import MetricsRegistry
from mploader.progress import Progress
from mploader.result import LoadStats

# The two figures "auto" weighs (perf/README.md, "When a pool pays"): what starting a pool costs a load, its
# workers' start included (a fresh interpreter importing numpy and mploader, 0.15 s, on the same CPUs), and how
# fast one process scans page-cached ~1 KB batches with the compiled walk. Measured on 2 vCPUs: at 2 GB inline
# 0.47 s against 0.55 s with 2 workers, at 4 GB 0.94 against 0.86 s.
POOL_START_SECONDS = 0.25
SCAN_BYTES_PER_SECOND = 6e9


def auto_pool_min_bytes(workers: int) -> float:
    """The Phase 1 work of a data dir (bytes to scan) from which "auto" starts a pool of ``workers``: where the
    scan time the pool saves, (1 - 1/workers) of it, is above its start. 3 GB for 2 workers, 2 GB for 4, 1.6 GB
    for 16; never for 1."""
    if workers <= 1:
        return math.inf
    return POOL_START_SECONDS * SCAN_BYTES_PER_SECOND / (1 - 1 / workers)


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


def workers_per_dir(cfg: LoaderConfig, n_dirs: int, scan_bytes: int | None = None) -> int:
    """``num_segment_loading_threads_per_data_dir``.

    "auto" = the usable CPUs shared among the data dirs, but 1 (the inline path) when no data dir has enough
    segments to scan for that many workers to pay for their start (:func:`auto_pool_min_bytes`; ``scan_bytes``:
    the largest per-dir amount).  An explicit number always wins.  "adaptive" = the most workers the adaptive
    pool may let scan at once: twice the usable CPUs shared among the data dirs, at least 2
    (:mod:`mploader.engine.adaptive`: it starts workers only as its count grows; beyond the CPUs, more readers
    paid on a device that caps IOPS, their requests being larger: perf/README.md); like "auto", 1 below
    :func:`auto_pool_min_bytes` of the CPUs' share, at least 2 (no count of workers pays for the pool's start
    there).
    """
    n = cfg.num_segment_loading_threads_per_data_dir
    if n not in ("auto", "adaptive"):
        return int(n)
    share = usable_cpus() // max(1, n_dirs)
    if scan_bytes is not None and scan_bytes < auto_pool_min_bytes(max(2, share)):
        return 1
    if n == "adaptive":
        return max(2, 2 * share)
    return max(1, share)


def _most_bytes(planned: dict[str, PlannedScans]) -> int:
    """The most bytes any data dir's plan scans."""
    return max((sum(file_size(t.path) for _, tasks in parts for t in tasks) for parts in planned.values()), default=0)


def make_engine(cfg: LoaderConfig, data_dirs: list[str] | list[DirPlan], stats: LoadStats,
                metrics: MetricsRegistry | None = None, progress: Progress | None = None,
                scan_bytes: int | None = None) -> Engine:
    """The engine for these data dirs; given their plans (or ``scan_bytes``, the most Phase 1 work of any of
    them), "auto" also weighs the Phase 1 work."""
    plans = [d for d in data_dirs if isinstance(d, DirPlan)]
    paths = [d.data_dir if isinstance(d, DirPlan) else d for d in data_dirs]
    planned: dict[str, PlannedScans] = {}
    if plans and cfg.num_segment_loading_threads_per_data_dir in ("auto", "adaptive"):
        # a clean dir is sized by a bound first: it has little or nothing to scan, and the inline engine never plans
        # it, so its exact plan is made only where the bound asks for a pool. The bound: its .log bytes as the
        # preflight sized them, else plan_segment_scans' bound_only (no .txnindex read)
        clean = [p for p in plans if p.clean and not p.scan_all]
        bounds = {p.data_dir: p.log_bytes if p.log_bytes is not None else _most_bytes({"": plan_segment_scans(
            p, bound_only=True)}) for p in clean}
        planned = {p.data_dir: plan_segment_scans(p) for p in plans if p.data_dir not in bounds}
        scan_bytes = max(_most_bytes(planned), *bounds.values(), 0)
        if bounds and workers_per_dir(cfg, len(paths), scan_bytes) > 1:
            planned.update({p.data_dir: plan_segment_scans(p) for p in plans if p.data_dir in bounds})
            scan_bytes = _most_bytes(planned)
    n = workers_per_dir(cfg, len(paths), scan_bytes)
    engine: Engine
    if n <= 1 or not paths:
        engine = InlineEngine(stats, progress, cfg.read_ahead_bytes)
    else:
        from mploader.engine.pool import PoolEngine  # loky only when a pool is started

        engine = PoolEngine(stats, n, paths, metrics, progress, read_ahead_bytes=cfg.read_ahead_bytes,
                            adaptive=cfg.num_segment_loading_threads_per_data_dir == "adaptive")
    engine.max_read_bytes_per_sec = cfg.max_read_bytes_per_sec
    engine.planned.update(planned)  # prefetch reuses the plans "auto" already made
    return engine


__all__ = ["auto_pool_min_bytes", "make_engine", "usable_cpus", "workers_per_dir"]
