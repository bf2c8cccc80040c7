"""Phase 2 on the executors: each partition directory recovered by a Spark task, in segment order.

The driver does what is LogManager's (:func:`mploader.manager.load_logs`: the preflight, the locks, the
clean-shutdown marker, the checkpoints, the result); :class:`SparkPartitions` is its ``partitions=`` runner, which
runs a :class:`RecoveryJob` of its own or, seated at a fleet's gathering (:mod:`mploader.spark.gathering`), the one
job of every broker's partitions. The partitions travel as rows (:data:`JOB_COLUMNS`: the load's seat and each
:class:`PartitionJob` pickled, a few hundred bytes and about 60 a file of its directory, what a resumed load
recorded of it included), packed into Spark
partitions by their cost (:func:`mploader.runners.processes.partition_cost`: ``.log`` bytes and a weight a segment)
as Phase 1's pieces are (:func:`mploader.spark.tasks.binned_frame`); each task runs
:func:`mploader.recovery.job.load_partition` for its rows on the executor's own view of the paths (a shared or
identically mounted file system), once it has checked that it sees the data the driver planned for every one of
them (:mod:`mploader.spark.identity`: the manager gives this runner's jobs what the driver found), scanning in the
task (Phase 1 of a partition goes with its Phase 2: no batch table leaves the executor), and answers one row per
partition: the loaded log, or the exception Kafka's load would end
with, pickled in a binary column (a ``LoadedLog`` holds the producer map and the epoch cache, which no flat Arrow
row would say better), then its last rows (``job`` :data:`TASK_WORK`): per load what the task scanned and wrote, for
the load's stats, and the mploader log records its loads made (truncations, deleted segments, rebuilt indexes: at
the driver's level and above). The driver logs them through its own handlers once Spark's job is done, as the
process pool's parent logs its workers' records (:mod:`mploader.runners.processes`): the load's WARN lines read as
``mploader load``'s, once each (a retried task's attempts that failed answer nothing: the retry answers what they
recorded), and the executors print none of them.  The task's very last row (``job`` :data:`TASK_ROWS`) holds the
fleet history's rows of every partition it loaded, made there (:mod:`mploader.spark.rows`): one table a task, which
the job keeps for the fleet's tables (:attr:`RecoveryJob.made`).

A dry run (``apply=False``) keeps each partition's changes in the task's memory
(:class:`mploader.disk.dry_run.DryRunDisk`); an applied load writes through :class:`mploader.disk.real.RealDisk`
and syncs each task's file systems before the task completes, so
that what the driver reports as loaded is durable.  Speculative execution must be off (:func:`check_session`):
two copies of one task would recover the same partition.  A task that dies is retried by Spark: recovery
is idempotent, a rerun completes what a killed one left (docs/architecture.md, "Durability"), and the retry answers
of the partitions its earlier attempt recovered the report that attempt recorded (:mod:`mploader.spark.attempt`).
"""

from __future__ import annotations

import logging
import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from mploader.config import LoaderConfig
from mploader.disk import NO_HOOK, MutationHook
from mploader.recovery.job import PartitionJob
from mploader.result import LoadedLog, LoadStats
from mploader.runners import NO_EVENTS, Outcome, PartitionRunner, PartitionsHere, RunEvents
from mploader.runners.here import collected, replay
from mploader.runners.processes import partition_cost
from mploader.spark.attempt import TaskAttempt
from mploader.spark.gathering import Seat
from mploader.spark.identity import DataDirs, WrongDataError, check_partition
from mploader.spark.jobs import EXECUTOR_TIMEOUT, SparkJobFailed, collect, job_group
from mploader.spark.rows import PartitionRows
from mploader.spark.session import check_session
from mploader.spark.tasks import TASKS_PER_CORE, binned_frame, cores

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

JOB_COLUMNS = "seat long, job long, spec binary"  # the load's seat, the job's index in its list, the PartitionJob
OUTCOME_SCHEMA = pa.schema([("seat", pa.int64()), ("job", pa.int64()), ("outcome", pa.binary())])
#: the ``job`` of a task's last rows: per seat what the task scanned and wrote, and the log records its loads made
#: (a pickled :data:`TaskWork`)
TASK_WORK = -1
TaskWork = tuple[LoadStats, list[logging.LogRecord]]
#: the ``job`` (``seat`` -1) of a task's very last row: the fleet history's rows of every partition it loaded, the
#: loads' together (a pickled :class:`PartitionRows`: one table a task, not a load)
TASK_ROWS = -2
Recovery = tuple[LoaderConfig, Sequence[PartitionJob]]  # a load's partitions to recover, and its config
#: their outcomes in order, what the tasks scanned and wrote, and the log records the loads made
Recovered = tuple[list[Outcome], LoadStats, list[logging.LogRecord]]


def load_rows(config: bytes, level: int = logging.WARNING, *, run: str | None = None, attempt: int | None = None,
              mutations: MutationHook = NO_HOOK, history: bool = False
              ) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executor side (``mapInArrow``): ``config`` is the pickled :class:`LoaderConfig`.  One disk per load
    (seat) and task, synced once after its last partition: a task's answers count only when the whole job
    succeeds, and a sync that fails fails the task, hence the job.

    ``run`` is the Spark job's run id (None: a new one), under which an applied load's partitions are recorded for
    a retry of their task (:mod:`mploader.spark.attempt`); ``attempt``: the task's attempt number (None: Spark's,
    ``TaskContext.attemptNumber``; 0 outside a task); ``mutations``: the task's disks' hook
    (:mod:`mploader.disk.mutations`); ``history``: the task's last row holds the fleet history's rows of the
    partitions it loaded (:data:`TASK_ROWS`; a fleet's load: its verify's prediction and a single load keep none).

    The mploader log records at ``level`` and above (the driver's level) are collected during the task, not
    written: an executor configures no logging, so Python would print them on its stderr as bare lines (no level,
    no dry-run mark), where the driver's user does not look.  The task's last rows (``job`` :data:`TASK_WORK`, one
    per load) carry each load's records to the driver with what the task scanned and wrote, for its stats.

    Before its first load, the task checks every one of its rows: each partition's data dir and files are those the
    driver found (:func:`mploader.spark.identity.check_partition`), else :class:`WrongDataError` fails the task, and
    nothing was read or written (a retried attempt checks the data dirs only: its first attempt may have written)."""
    job_run = run or uuid.uuid4().hex

    def load(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows: list[tuple[int, int, PartitionJob]] = [(row["seat"], row["job"], pickle.loads(row["spec"]))
                                                     for batch in batches for row in batch.to_pylist()]
        retried = (_attempt_number() if attempt is None else attempt) > 0
        dirs = DataDirs()
        for _, _, job in rows:
            check_partition(job, dirs, files=not retried)
        directory_ids = {job.data_dir: _directory_id(job) for _, _, job in rows}
        cfg = pickle.loads(config)
        here: dict[int, TaskAttempt] = {}
        records: dict[int, list[logging.LogRecord]] = {}
        loaded: list[LoadedLog] = []
        with collected(level) as collect:
            for seat, i, job in rows:
                runner = here.get(seat) or here.setdefault(seat, TaskAttempt(cfg, job_run, retried, mutations))
                outcome, lines = runner.load(job, collect)
                yield _row(seat, i, outcome)
                records.setdefault(seat, []).extend(lines)
                if history and not isinstance(outcome, BaseException):  # a retry's: what the load as a whole did
                    loaded.append(outcome[0])
            for seat, runner in here.items():  # each load's partitions durable before the task completes
                work = runner.finish()
                yield _row(seat, TASK_WORK, (work, [*records.get(seat, []), *collect.take()]))
        if history:
            yield _row(-1, TASK_ROWS, PartitionRows.of(loaded, directory_ids))

    return load


def _directory_id(job: PartitionJob) -> str | None:
    """The ``directory.id`` of ``job``'s data dir, as the driver read it (and the task checked)."""
    identity = job.planned.identity if job.planned is not None else None
    return identity.directory_id if identity is not None else None


def _attempt_number() -> int:
    """This task's attempt number (0 outside a Spark task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return 0 if context is None else int(context.attemptNumber())


def _row(seat: int, job: int, outcome: object) -> pa.RecordBatch:
    return pa.record_batch([pa.array([seat], pa.int64()), pa.array([job], pa.int64()),
                            pa.array([pickle.dumps(outcome)])], schema=OUTCOME_SCHEMA)


def recovered(work: Mapping[int, Recovery], rows: pa.Table) -> dict[int, Recovered]:
    """The driver side of a job's ``rows``: each load's outcomes in its jobs' order, its tasks' work, its log
    records (for its own thread to log: :meth:`SparkPartitions.run`).  The tasks' history rows are not a load's:
    :func:`task_rows`."""
    outcomes: dict[int, list[Outcome | None]] = {seat: [None] * len(jobs) for seat, (_, jobs) in work.items()}
    stats = {seat: LoadStats() for seat in work}
    records: dict[int, list[logging.LogRecord]] = {seat: [] for seat in work}
    for seat, job, blob in zip(*(rows.column(c).to_pylist() for c in ("seat", "job", "outcome")), strict=True):
        if job == TASK_ROWS:
            continue
        if job == TASK_WORK:
            task: TaskWork = pickle.loads(blob)
            stats[seat].add_work(task[0])
            records[seat].extend(task[1])
        else:
            outcomes[seat][job] = pickle.loads(blob)
    answers: dict[int, Recovered] = {}
    for seat, got in outcomes.items():
        missing = [work[seat][1][i].dir for i, o in enumerate(got) if o is None]
        if missing:
            raise RuntimeError(f"Spark returned no outcome for {len(missing)} partition(s), e.g. {missing[0]}")
        answers[seat] = ([o for o in got if o is not None], stats[seat], records[seat])
    return answers


def task_rows(rows: pa.Table) -> PartitionRows:
    """The fleet history's rows the tasks of a job's ``rows`` made of the partitions they loaded."""
    jobs, blobs = rows.column("job").to_pylist(), rows.column("outcome").to_pylist()
    return PartitionRows.concat(pickle.loads(blob) for job, blob in zip(jobs, blobs, strict=True) if job == TASK_ROWS)


class RecoveryJob:
    """One Spark job recovering the partitions of any number of loads (a fleet's brokers, each its seat:
    :class:`mploader.spark.gathering.Gathering` calls it once per round), packed together into
    ``TASKS_PER_CORE`` tasks per core of the cluster, each a bin of about equal cost
    (:func:`mploader.spark.tasks.binned_frame`).  The loads share one config."""

    def __init__(self, spark: SparkSession, executor_timeout: float | None = EXECUTOR_TIMEOUT,
                 history: bool = False) -> None:
        self.spark = spark
        self.executor_timeout = executor_timeout  # jobs.Watchdog's bound
        self.job_group = job_group("phase2")  # its Spark jobs' group (statusTracker)
        self.history = history  # its tasks make the fleet history's rows (spark.rows), kept in made
        self.made: list[PartitionRows] = []  # per call, the history rows its tasks made

    def __call__(self, work: Mapping[int, Recovery]) -> dict[int, Recovered]:
        from pyspark.sql.pandas.types import from_arrow_schema

        configs = {pickle.dumps(cfg) for cfg, _ in work.values()}
        if len(configs) != 1:
            raise ValueError(f"the loads of one Spark job share one config, not {len(configs)}")
        jobs = [(seat, i, job) for seat, (_, js) in sorted(work.items()) for i, job in enumerate(js)]
        frame = binned_frame(self.spark, [(seat, i, pickle.dumps(job)) for seat, i, job in jobs],
                             [partition_cost(job) for _, _, job in jobs], JOB_COLUMNS,
                             cores(self.spark) * TASKS_PER_CORE)
        level = logging.getLogger("mploader").getEffectiveLevel()
        # a run id of its own: a retried task's attempts know each other's records by it, and a record of another
        # (a failed earlier job's) is stale (mploader.spark.attempt)
        tasks = load_rows(configs.pop(), level, run=uuid.uuid4().hex, history=self.history)
        recovering = frame.mapInArrow(tasks, from_arrow_schema(OUTCOME_SCHEMA))
        loads = f" of {len(work)} loads" if len(work) > 1 else ""
        rows = collect(recovering, self.job_group, f"recovering {len(jobs)} partition(s){loads} on the executors",
                       self.executor_timeout)
        self.made.append(task_rows(rows))
        return recovered(work, rows)


class SparkPartitions(PartitionRunner):
    """A ``partitions=`` runner for :func:`mploader.manager.load_logs`: the partitions loaded by Spark tasks, a
    :class:`RecoveryJob` of this load's own, or with ``seat`` one shared with the other loads seated at its
    gathering (a fleet's brokers: one Spark job for all)."""

    needs_planned_data = True  # a task may run on another host: it checks what the driver found (spark.identity)

    def __init__(self, spark: SparkSession, *, driver_fallback: bool = False,
                 executor_timeout: float | None = EXECUTOR_TIMEOUT, seat: Seat[Recovery, Recovered] | None = None
                 ) -> None:
        check_session(spark)
        self.spark = spark
        self.job = RecoveryJob(spark, executor_timeout)
        self.seat = seat
        self.work = LoadStats()  # what the last call's tasks scanned and wrote (PartitionRunner: added to the load's)
        self.driver_fallback = driver_fallback  # a failed job's partitions loaded in the driver (else it fails)
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
        try:
            out, self.work, records = (self.seat.submit((cfg, jobs)) if self.seat is not None
                                       else self.job({0: (cfg, jobs)})[0])
        except SparkJobFailed as e:  # the job failed or was cancelled (e.g. the session is going away)
            if self.driver_fallback:
                return self._in_driver(jobs, cfg, e)
            what = "nothing was written (a dry run)" if cfg.dry_run else (
                "what its tasks wrote is what an interrupted load leaves: load again to complete the recovery")
            if not cfg.dry_run and WrongDataError.__name__ in str(e):
                what = (f"the task that saw other data wrote nothing to it; {what} where every executor sees the "
                        f"data the driver does (docs/spark.md, \"Data on local disks\")")
            raise SparkJobFailed(f"{e}; {what}") from e.__cause__
        # the tasks' log records logged here, in the load's own thread, through this process's handlers at its
        # loggers' levels (as the process pool's parent logs its workers')
        replay(records)
        self.executor_partitions += len(jobs)
        return out

    def _in_driver(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, failed: SparkJobFailed) -> list[Outcome]:
        """``--driver-fallback``: every job loaded here, one after another (a load is idempotent: what a failed
        task wrote, this one completes)."""
        log.warning("%s; loading its %d partition(s) in the driver (--driver-fallback)", failed, len(jobs))
        here = PartitionsHere(cfg)
        out = [here.load(job) for job in jobs]
        self.work.add_work(here.finish())
        self.driver_partitions += len(jobs)
        return out


__all__ = ["JOB_COLUMNS", "OUTCOME_SCHEMA", "TASK_ROWS", "TASK_WORK", "Recovered", "Recovery", "RecoveryJob",
           "SparkJobFailed", "SparkPartitions", "TaskWork", "WrongDataError", "load_rows", "recovered", "task_rows"]
