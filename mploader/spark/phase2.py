"""Phase 2 on the executors: each partition directory recovered by a Spark task, in segment order.

The driver does what is LogManager's (:func:`mploader.manager.load_logs`: the preflight, the locks, the
clean-shutdown marker, the checkpoints, the result); :class:`SparkPartitions` is its ``partitions=`` runner.
The partitions travel as rows (:data:`JOB_COLUMNS`: each :class:`PartitionJob` pickled, a few hundred bytes
and about 60 a file of its directory, what a resumed load recorded of it included), packed into Spark partitions
by their cost (:func:`mploader.runners.processes.partition_cost`: ``.log`` bytes and a weight a segment) as Phase 1's
pieces are (:func:`mploader.spark.tasks.binned_frame`); each task runs
:func:`mploader.recovery.job.load_partition` for its rows on the executor's own view of the paths (a shared or
identically mounted file system), once it has checked that it sees the data the driver planned for every one of
them (:mod:`mploader.spark.identity`: the manager gives this runner's jobs what the driver found), scanning in the task
(Phase 1 of a partition goes with its Phase 2: no batch table leaves the executor), and answers one row per
partition: the loaded log, or the exception Kafka's load would end with, pickled in a binary column (a
``LoadedLog`` holds the producer map and the epoch cache, which no flat Arrow row would say better), then a last row
(``job`` :data:`TASK_WORK`) with what the task scanned and wrote, for the load's stats, and the mploader log records
its loads made (truncations, deleted segments, rebuilt indexes: at the driver's level and above).  The driver logs
them through its own handlers once Spark's job is done, as the process pool's parent logs its workers' records
(:mod:`mploader.runners.processes`): the load's WARN lines read as ``mploader load``'s, once each (a retried task's
attempts that failed answer nothing), and the executors print none of them.

A dry run (``apply=False``) keeps each partition's changes in the task's memory
(:class:`mploader.disk.dry_run.DryRunDisk`); an applied load writes through :class:`mploader.disk.real.RealDisk`
and syncs each task's file systems before the task completes, so
that what the driver reports as loaded is durable.  Speculative execution must be off (:func:`check_session`):
two copies of one task would recover the same partition.  A task that dies is retried by Spark: recovery
is idempotent, a rerun completes what a killed one left (docs/architecture.md, "Durability").
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from mploader.config import LoaderConfig
from mploader.recovery.job import PartitionJob
from mploader.result import LoadStats
from mploader.runners import NO_EVENTS, Outcome, PartitionRunner, PartitionsHere, RunEvents
from mploader.runners.here import collected, replay
from mploader.runners.processes import partition_cost
from mploader.spark.identity import DataDirs, WrongDataError, check_partition
from mploader.spark.jobs import EXECUTOR_TIMEOUT, SparkJobFailed, collect
from mploader.spark.session import check_session
from mploader.spark.tasks import TASKS_PER_CORE, binned_frame, cores

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

JOB_COLUMNS = "job long, spec binary"  # a job's index in the runner's list, and its pickled PartitionJob
OUTCOME_SCHEMA = pa.schema([("job", pa.int64()), ("outcome", pa.binary())])
#: the ``job`` of a task's last row, whose ``outcome`` is what the task scanned and wrote and the log records its loads
#: made (a pickled :data:`TaskWork`)
TASK_WORK = -1
TaskWork = tuple[LoadStats, list[logging.LogRecord]]


def load_rows(config: bytes, level: int = logging.WARNING
              ) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executor side (``mapInArrow``): ``config`` is the pickled :class:`LoaderConfig`.  One disk per task,
    synced once after its last partition: a task's answers count only when the whole job succeeds, and a sync
    that fails fails the task, hence the job.

    The mploader log records at ``level`` and above (the driver's level) are collected during the task, not
    written: an executor configures no logging, so Python would print them on its stderr as bare lines (no level,
    no dry-run mark), where the driver's user does not look.  The task's last row (``job`` :data:`TASK_WORK`)
    carries them to the driver with what the task scanned and wrote, for the load's stats.

    Before its first load, the task checks every one of its rows: each partition's data dir and files are those the
    driver found (:func:`mploader.spark.identity.check_partition`), else :class:`WrongDataError` fails the task, and
    nothing was read or written (a retried attempt checks the data dirs only: its first attempt may have written)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        jobs: list[tuple[int, PartitionJob]] = [(row["job"], pickle.loads(row["spec"])) for batch in batches
                                                for row in batch.to_pylist()]
        dirs, files = DataDirs(), _first_attempt()
        for _, job in jobs:
            check_partition(job, dirs, files)
        here = PartitionsHere(pickle.loads(config))
        with collected(level) as collect:
            for i, job in jobs:
                yield _row(i, here.load(job))
            work: TaskWork = (here.finish(), collect.records)  # the partitions durable before the task completes
            yield _row(TASK_WORK, work)

    return run


def _first_attempt() -> bool:
    """Whether this task is its first attempt (True outside a Spark task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context is None or context.attemptNumber() == 0


def task_work(outcome: bytes) -> LoadStats:
    """The driver side of a task's last row (:data:`TASK_WORK`): its log records logged here, through this process's
    handlers at its loggers' levels (as the process pool's parent logs its workers'), and what it scanned and
    wrote."""
    work: TaskWork = pickle.loads(outcome)
    replay(work[1])
    return work[0]


def _row(job: int, outcome: object) -> pa.RecordBatch:
    return pa.record_batch([pa.array([job], pa.int64()), pa.array([pickle.dumps(outcome)])], schema=OUTCOME_SCHEMA)


class SparkPartitions(PartitionRunner):
    """A ``partitions=`` runner for :func:`mploader.manager.load_logs`: the partitions loaded by Spark tasks,
    ``TASKS_PER_CORE`` per core of the cluster, each a bin of about equal cost
    (:func:`mploader.spark.tasks.binned_frame`)."""

    needs_planned_data = True  # a task may run on another host: it checks what the driver found (spark.identity)

    def __init__(self, spark: SparkSession, *, driver_fallback: bool = False,
                 executor_timeout: float | None = EXECUTOR_TIMEOUT) -> None:
        check_session(spark)
        self.spark = spark
        self.job_group = f"mploader-phase2-{os.getpid()}-{id(self)}"  # its Spark jobs' group (statusTracker)
        self.work = LoadStats()  # what the last call's tasks scanned and wrote (PartitionRunner: added to the load's)
        self.driver_fallback = driver_fallback  # a failed job's partitions loaded in the driver (else it fails)
        self.executor_timeout = executor_timeout  # jobs.Watchdog's bound
        self.executor_partitions = 0  # partitions loaded by Spark tasks, and in the driver (driver_fallback)
        self.driver_partitions = 0

    @property
    def description(self) -> str:
        return f"Spark {self.spark.sparkContext.master} ({cores(self.spark)} cores)"

    def account(self, stats: LoadStats) -> None:
        super().account(stats)
        stats.add_work(self.work)
        stats.worker_start = None

    def run(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, events: RunEvents = NO_EVENTS) -> list[Outcome]:
        """Every job's outcome, in order, once Spark's job is done."""
        self.work = LoadStats()
        if not jobs:
            return []
        from pyspark.sql.pandas.types import from_arrow_schema

        frame = binned_frame(self.spark, [(i, pickle.dumps(j)) for i, j in enumerate(jobs)],
                             [partition_cost(j) for j in jobs], JOB_COLUMNS, cores(self.spark) * TASKS_PER_CORE)
        level = logging.getLogger("mploader").getEffectiveLevel()
        recovering = frame.mapInArrow(load_rows(pickle.dumps(cfg), level), from_arrow_schema(OUTCOME_SCHEMA))
        try:
            rows = collect(recovering, self.job_group, f"recovering {len(jobs)} partition(s) on the executors",
                           self.executor_timeout)
        except SparkJobFailed as e:  # the job failed or was cancelled (e.g. the session is going away)
            if self.driver_fallback:
                return self._in_driver(jobs, cfg, e)
            what = "nothing was written (a dry run)" if cfg.dry_run else (
                "what its tasks wrote is what an interrupted load leaves: load again to complete the recovery")
            raise SparkJobFailed(f"{e}; {what}") from e.__cause__
        out: list[Outcome | None] = [None] * len(jobs)
        for job, blob in zip(rows.column("job").to_pylist(), rows.column("outcome").to_pylist(), strict=True):
            if job == TASK_WORK:
                self.work.add_work(task_work(blob))
            else:
                out[job] = pickle.loads(blob)
        missing = [jobs[i].dir for i, o in enumerate(out) if o is None]
        if missing:
            raise RuntimeError(f"Spark returned no outcome for {len(missing)} partition(s), e.g. {missing[0]}")
        self.executor_partitions += len(jobs)
        return [o for o in out if o is not None]

    def _in_driver(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, failed: SparkJobFailed) -> list[Outcome]:
        """``--driver-fallback``: every job loaded here, one after another (a load is idempotent: what a failed
        task wrote, this one completes)."""
        log.warning("%s; loading its %d partition(s) in the driver (--driver-fallback)", failed, len(jobs))
        here = PartitionsHere(cfg)
        out = [here.load(job) for job in jobs]
        self.work.add_work(here.finish())
        self.driver_partitions += len(jobs)
        return out


__all__ = ["JOB_COLUMNS", "OUTCOME_SCHEMA", "TASK_WORK", "SparkJobFailed", "SparkPartitions", "TaskWork",
           "WrongDataError", "load_rows", "task_work"]
