"""Whole partitions loaded in worker processes: each partition's scans and its Phase 2 in one worker.

The process-pool engine (:mod:`mploader.engine.pool`) runs Phase 1 in workers and keeps Phase 2 in the parent,
one partition after another.  On a broker of many small recovered segments Phase 2 is most of the load (85% of
the 1,023-segment set, perf/README.md), and no number of scanning workers shortens it.  Kafka's own answer is
``num.recovery.threads.per.data.dir``: partitions are independent, so several load at once.  This runner does
that with processes, not threads (the GIL): it is a ``partitions=`` runner of :func:`mploader.manager.load_logs`,
as :class:`mploader.spark.SparkPartitions` is for Spark executors, and runs the same
:func:`mploader.recovery.job.load_partition`.  Data flow::

    parent (LogManager: preflight, locks, marker,          worker processes (loky; forked on Linux)
    checkpoints, the result)
    ------------------------------------------------       ----------------------------------------------
    jobs in groups, the costliest partitions first   ──►   per group: load_partition of each job with its
      (COST_PER_SEGMENT: a segment's Phase 2 weighs          own disk (RealDisk, or DryRunDisk for a dry run),
      what scanning ~1 MiB does), ~GROUPS_PER_WORKER         scanning in the worker; then one sync of the
      per worker so that they end together                   file systems it wrote (Disk.flush)
    as each group completes: its partitions count    ◄──   per job: (LoadedLog, bytes scanned) or the
      as loaded (progress, --resumable's recovery            exception its load raised; the mploader log
      points); its log records are logged here               records it made
    a worker that died: its groups and every one not
      finished go to a fresh pool, then, if a worker
      dies again, are loaded in the parent

What a group returns is durable: the parent hears of a partition only after its worker synced it, so the
recovery points a ``--resumable`` load advances cover durable files (docs/architecture.md, "Durability").  A
worker that dies mid-partition leaves what a killed load leaves; loading that partition again from the same job
reaches the load's outcome (the parent alone writes the checkpoints and the journal, so the job the worker had
is still what a rerun would read).  Ctrl-C (or any exception while waiting) kills the workers before the caller
goes on to release the data dirs' locks.  Log records are made in the worker and logged by the parent, through
its own handlers, so that a load's log reads as an inline load's (the worker's copy of the handlers never
writes).
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import BrokenExecutor, Future, as_completed
from typing import TYPE_CHECKING

from mploader.config import LoaderConfig
from mploader.disk import open_disk
from mploader.engine import ONE_BLAS_THREAD, worker_start
from mploader.engine.worker import init_worker
from mploader.recovery.job import PartitionJob, load_partition
from mploader.result import LoadedLog
from mploader.scan import SegmentScan, SegmentTask, scan_segment

if TYPE_CHECKING:
    from loky import ProcessPoolExecutor

log = logging.getLogger(__name__)

Outcome = tuple[LoadedLog, int] | BaseException  # per job: the log and the bytes scanned, or what its load raised
Loaded = Callable[[int, Outcome], None]  # told of each job as it completes: its index in the list, its outcome

#: a segment weighs this many bytes of ``.log`` in a partition's cost: a small recovered segment's Phase 2
#: (~0.5 ms) is about what scanning 1 MiB takes
COST_PER_SEGMENT = 1 << 20
#: groups per worker: enough that the workers finish together, few enough that a group's round trip and its
#: sync stay small against its partitions' work
GROUPS_PER_WORKER = 4
WORKER_NAME = "mploader-load"  # a worker's process name (the scanning pool's are mploader-scan)


class _Here:
    """The worker's own scans: a partition's Phase 1 runs where its Phase 2 does."""

    def scan(self, task: SegmentTask) -> SegmentScan:
        return scan_segment(task)


class _Collect(logging.Handler):
    """Keeps the records of a group's loads for the parent, made plain (the message formatted, the traceback as
    text) so that any of them pickles."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args, record.exc_info = record.getMessage(), None, None
        self.records.append(record)


def _portable(error: BaseException) -> BaseException:
    """``error`` if it pickles, else a RuntimeError that says what it was."""
    try:
        pickle.dumps(error)
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def load_group(jobs: Sequence[PartitionJob], cfg: LoaderConfig,
               level: int) -> tuple[list[Outcome], list[logging.LogRecord]]:
    """A worker's task: each job's load, in order, on one disk synced at the end; the mploader log records at
    ``level`` and above go back with the outcomes instead of to this process's handlers."""
    logger = logging.getLogger("mploader")
    collect = _Collect()
    saved = logger.level, logger.propagate, logger.handlers
    logger.setLevel(level)
    logger.propagate, logger.handlers = False, [collect]
    try:
        disk = open_disk(cfg.dry_run)
        outcomes: list[Outcome] = []
        for job in jobs:
            try:
                loaded, ctx = load_partition(job, cfg, disk, _Here())
                outcomes.append((loaded, ctx.bytes_scanned))
            except Exception as e:  # the parent takes it as the manager takes a loading thread's exception
                outcomes.append(_portable(e))
        disk.flush()  # durable before the parent hears of them (its --resumable recovery points)
        return outcomes, collect.records
    finally:
        logger.setLevel(saved[0])
        logger.propagate, logger.handlers = saved[1], saved[2]


def partition_cost(path: str) -> int:
    """What loading the partition directory ``path`` may cost, in bytes: its ``.log`` bytes and
    :data:`COST_PER_SEGMENT` a segment (0 for a directory that cannot be listed: its load says why)."""
    try:
        with os.scandir(path) as entries:
            logs = [e.stat().st_size for e in entries if e.name.endswith(".log")]
    except OSError:
        return 0
    return sum(logs) + COST_PER_SEGMENT * len(logs)


def groups_of(costs: Sequence[int], workers: int) -> list[list[int]]:
    """The jobs' indexes in groups, costliest first, each group up to an equal share of the total cost
    (``workers`` x :data:`GROUPS_PER_WORKER` shares): taken in that order by the workers, the big partitions start
    first and the small ones fill in at the end."""
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


class ProcessPartitions:
    """A ``partitions=`` runner for :func:`mploader.manager.load_logs`: ``workers`` processes, each loading whole
    partitions (Phase 1 and Phase 2); ``start``: "fork" or "spawn" (:func:`mploader.engine.worker_start`)."""

    def __init__(self, workers: int, start: str | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers
        self.start = worker_start(start)
        self.worker_deaths = 0  # pools broken by a worker that died, in this runner's loads
        self.loaded_in_parent = 0  # jobs the parent loaded after a worker died twice

    @property
    def description(self) -> str:
        return f"{self.workers} worker process{'es' if self.workers > 1 else ''} ({self.start}ed), whole partitions"

    def _pool(self, n: int) -> ProcessPoolExecutor:
        import multiprocessing

        from loky import ProcessPoolExecutor

        forked = self.start == "fork"
        return ProcessPoolExecutor(max_workers=n, env=ONE_BLAS_THREAD, initializer=init_worker,
                                   initargs=(os.getpid(), None, forked, WORKER_NAME),
                                   context=multiprocessing.get_context("fork") if forked else None)

    def __call__(self, jobs: list[PartitionJob], cfg: LoaderConfig, loaded: Loaded | None = None) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(jobs)

        def take(indexes: list[int], outcomes: list[Outcome], records: list[logging.LogRecord]) -> None:
            for record in records:
                logger = logging.getLogger(record.name)
                if logger.isEnabledFor(record.levelno):
                    logger.handle(record)
            for i, outcome in zip(indexes, outcomes, strict=True):
                out[i] = outcome
                if loaded is not None:
                    loaded(i, outcome)

        level = logging.getLogger("mploader").getEffectiveLevel()
        todo = groups_of([partition_cost(j.dir) for j in jobs], self.workers)
        for _pool in range(2):  # the first pool, and a fresh one after a worker died
            todo = self._run(jobs, todo, cfg, level, take)
            if not todo:
                break
        for group in todo:  # a worker died in both pools: the parent loads what is left, as an inline load would
            self.loaded_in_parent += len(group)
            take(group, *load_group([jobs[i] for i in group], cfg, level))
        return [o for o in out if o is not None]

    def _run(self, jobs: list[PartitionJob], groups: list[list[int]], cfg: LoaderConfig, level: int,
             take: Callable[[list[int], list[Outcome], list[logging.LogRecord]], None]) -> list[list[int]]:
        """``groups`` on a pool of their own; the groups a dead worker left unfinished (none: all done)."""
        if not groups:
            return []
        ex = self._pool(min(self.workers, len(groups)))
        lost: list[list[int]] = []
        kill = True
        try:
            futures: dict[Future[tuple[list[Outcome], list[logging.LogRecord]]], list[int]] = {
                ex.submit(load_group, [jobs[i] for i in g], cfg, level): g for g in groups}
            for fut in as_completed(futures):
                try:
                    outcomes, records = fut.result()
                except BrokenExecutor as e:  # a worker died (killed, out of memory): its group may be half done
                    lost.append(futures[fut])
                    if len(lost) == 1:
                        self.worker_deaths += 1
                        log.warning("a partition-loading worker died (%s); the partitions it and the others had "
                                    "not finished are loaded again", e)
                    continue
                take(futures[fut], outcomes, records)
            kill = False
        finally:  # also on Ctrl-C: no worker may still write when the caller releases the locks
            ex.shutdown(wait=True, kill_workers=kill or bool(lost))
        return lost


__all__ = ["COST_PER_SEGMENT", "GROUPS_PER_WORKER", "ProcessPartitions", "groups_of", "load_group", "partition_cost"]
