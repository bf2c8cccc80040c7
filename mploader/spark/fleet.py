"""``load`` and ``verify`` over a fleet: many brokers' data dirs, Phase 1 of all of them as Spark tasks.

The dirs are grouped into brokers by their ``meta.properties`` (``cluster.id`` and ``node.id``, or ZooKeeper-era
``broker.id``; a dir without one is a broker of its own): a broker's dirs are what Kafka loads together (where
the same partition in two of them fails its start-up), while the same partition on different brokers is
replication.  Each broker is loaded (``load_logs``) or verified (``verify_logs``) with the single-host code, several
brokers at a time: a load's data dirs start up in the driver (LogManager's part: preflight, locks, marker,
checkpoints) and its partitions are recovered on the executors, each by a Spark task in segment order
(:mod:`mploader.spark.phase2`); a verify's audits run on the executors through the
:class:`~mploader.spark.engine.SparkEngine` and its partition checks in the driver.  Either way the outcome is
the single-host one by construction (the same functions), file for file.

What comes out: a segment inventory and a per-partition summary (:mod:`mploader.spark.output`), as Spark
DataFrames, and the documents of the single-host commands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from mploader.broker_config.meta import broker_key, read_meta_properties
from mploader.config import LoaderConfig
from mploader.engine.base import Engine, EngineFactory
from mploader.errors import LoadInterrupted, StartupFailedError
from mploader.manager import load_logs
from mploader.progress import Progress
from mploader.result import LoadResult, LoadStats
from mploader.scan.audit import AuditTask, SegmentAudit
from mploader.spark.engine import AuditJob, SparkEngine
from mploader.spark.gathering import Gathering, Seat
from mploader.spark.jobs import EXECUTOR_TIMEOUT
from mploader.spark.output import FleetTables, RunInfo, load_tables, verify_tables
from mploader.spark.phase2 import Recovered, Recovery, RecoveryJob, SparkPartitions
from mploader.spark.rows import PartitionRows
from mploader.spark.session import check_session
from mploader.verify import VerifyReport, verify_logs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_T = TypeVar("_T")


def brokers(data_dirs: Sequence[str | os.PathLike[str]]) -> list[list[str]]:
    """The dirs grouped by broker (see the module docstring), in the order first seen."""
    groups: dict[str, list[str]] = {}
    for d in data_dirs:
        path = os.path.abspath(os.fspath(d))
        groups.setdefault(broker_key(path, read_meta_properties(path)), []).append(path)
    return list(groups.values())


class BrokerWarnings(logging.Handler):
    """While open (``with``), the text of every WARNING (or worse) mploader logs, by the thread that logs it: a
    broker's thread logs its load's own lines and, replayed, its executors' (:class:`SparkPartitions`), so that
    each broker's document says what ``mploader load`` would have said of it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.by_thread: dict[int, list[str]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.by_thread.setdefault(threading.get_ident(), []).append(record.getMessage())

    def mine(self) -> list[str]:
        """What this thread logged, once each, sorted (as ``mploader load --json``'s ``warnings``)."""
        return sorted(set(self.by_thread.pop(threading.get_ident(), [])))

    def __enter__(self) -> BrokerWarnings:
        logging.getLogger("mploader").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("mploader").removeHandler(self)


@dataclass(slots=True)
class FleetLoad:
    """What :func:`load` returns: per broker the load's result, or the start-up failure Kafka would hit."""

    tables: FleetTables
    results: list[tuple[list[str], LoadResult | StartupFailedError]]
    engines: list[SparkPartitions]  # one per broker (what ran on Spark, what in the driver)
    warnings: list[list[str]] = dataclasses.field(default_factory=list)  # per broker, as results: its WARN lines
    spark_jobs: int = 0  # the Spark jobs the load ran (one for every broker's partitions)
    job_groups: tuple[str, ...] = ()  # their Spark job groups (statusTracker)


@dataclass(slots=True)
class FleetVerify:
    """What :func:`verify` returns: per broker the verify report; ``report`` merges them (one document)."""

    tables: FleetTables
    reports: list[tuple[list[str], VerifyReport]]
    engines: list[SparkEngine]  # per broker: the audits' engine
    predictions: list[SparkPartitions]  # per broker: its prediction's runner
    seconds: float = 0.0  # wall time of the whole job
    spark_jobs: int = 0  # the Spark jobs the verify ran (one for every dir's audits, one for the predictions)
    job_groups: tuple[str, ...] = ()  # their Spark job groups (statusTracker)

    @property
    def report(self) -> VerifyReport:
        reports = [r for _, r in self.reports]
        failures = [r.startup_failure for r in reports if r.startup_failure is not None]
        merged = VerifyReport([d for r in reports for d in r.data_dirs], [p for r in reports for p in r.partitions],
                              startup_failure=failures[0] if failures else None,
                              workers_per_dir=max((r.workers_per_dir for r in reports), default=1))
        # the brokers ran side by side: the fleet job's wall time, not the sum of theirs
        merged.seconds.update(audit=self.seconds, total=self.seconds)
        return merged


@dataclass(frozen=True, slots=True)
class JobPolicy:
    """What a failed Spark job does: fail the run (the default), or with ``driver_fallback`` leave its work to the
    driver; ``executor_timeout``: seconds a job may wait with no task running or completing
    (:class:`mploader.spark.jobs.Watchdog`; None: no bound)."""

    driver_fallback: bool = False
    executor_timeout: float | None = EXECUTOR_TIMEOUT


def where_it_ran(runners: Sequence[SparkEngine | SparkPartitions]) -> dict[str, int]:
    """How many pieces (verify: segments or chunks; load: partitions) ran on the executors and how many in the
    driver (``--driver-fallback``)."""
    executors = sum(r.executor_pieces if isinstance(r, SparkEngine) else r.executor_partitions for r in runners)
    driver = sum(r.driver_pieces if isinstance(r, SparkEngine) else r.driver_partitions for r in runners)
    return {"on_executors": executors, "in_driver": driver}


def _engine(spark: SparkSession, engines: list[SparkEngine], policy: JobPolicy,
            audit_seats: Mapping[str, Seat[Sequence[AuditTask], list[SegmentAudit | None]]]) -> EngineFactory:
    def make(stats: LoadStats, progress: Progress | None) -> Engine:
        engine = SparkEngine(spark, stats, progress, driver_fallback=policy.driver_fallback,
                             executor_timeout=policy.executor_timeout, audit_seats=audit_seats)
        engines.append(engine)
        return engine

    return make


def load(spark: SparkSession, log_dirs: Sequence[str | os.PathLike[str]], config: LoaderConfig | None = None,
         apply: bool = False, now_ms: int | None = None, policy: JobPolicy = JobPolicy()) -> FleetLoad:
    """Load every broker's dirs: a dry run (nothing changes) unless ``apply``, which recovers them as
    ``load_logs`` does, every broker's partitions in one Spark job (:mod:`mploader.spark.gathering`).  A broker
    Kafka would refuse to start is reported, not raised; a failed Spark job raises
    :class:`mploader.spark.jobs.SparkJobFailed` (``policy``)."""
    check_session(spark)
    run = RunInfo.begin("load --apply" if apply else "load")
    cfg = dataclasses.replace(config or LoaderConfig(), dry_run=not apply)
    groups = brokers(log_dirs)
    job = RecoveryJob(spark, policy.executor_timeout, history=True)
    recoveries: Gathering[Recovery, Recovered] = Gathering(len(groups), job)
    engines: list[SparkPartitions] = []

    def one(dirs: list[str]) -> tuple[list[str], LoadResult | StartupFailedError, list[str]]:
        with recoveries.seat() as seat:
            runner = SparkPartitions(spark, driver_fallback=policy.driver_fallback,
                                     executor_timeout=policy.executor_timeout, seat=seat)
            engines.append(runner)
            result: LoadResult | StartupFailedError
            try:
                result = load_logs(dirs, cfg, now_ms, partitions=runner)
            except StartupFailedError as e:
                log.warning("%s: a Kafka broker would fail to start: %s", ", ".join(dirs), e)
                result = e
            return dirs, result, collector.mine()

    with BrokerWarnings() as collector:
        loads = _each_broker(one, groups, spark, [(recoveries, job.job_group)])
    results = [(dirs, result) for dirs, result, _ in loads]
    tables = load_tables(spark, results, run, PartitionRows.concat(job.made))
    return FleetLoad(tables, results, engines, [w for _, _, w in loads], recoveries.rounds, (job.job_group,))


def verify(spark: SparkSession, log_dirs: Sequence[str | os.PathLike[str]], config: LoaderConfig | None = None,
           now_ms: int | None = None, predict: bool = True, policy: JobPolicy = JobPolicy()) -> FleetVerify:
    """Verify every broker's dirs (``verify_logs``: read-only, no lock): every dir's audits in one Spark job, then
    every broker's prediction (a dry-run load) in another (:mod:`mploader.spark.gathering`); a failed Spark job
    raises :class:`mploader.spark.jobs.SparkJobFailed` (``policy``)."""
    check_session(spark)
    run = RunInfo.begin("verify")
    cfg = config or LoaderConfig()
    groups = brokers(log_dirs)
    audit_job, prediction_job = AuditJob(spark, policy.executor_timeout), RecoveryJob(spark, policy.executor_timeout)
    audits: Gathering[Sequence[AuditTask], list[SegmentAudit | None]] = Gathering(sum(map(len, groups)), audit_job)
    predictions: Gathering[Recovery, Recovered] = Gathering(len(groups), prediction_job)
    engines: list[SparkEngine] = []
    runners: list[SparkPartitions] = []

    def one(dirs: list[str]) -> tuple[list[str], VerifyReport]:
        with contextlib.ExitStack() as seated:
            seats = {d: seated.enter_context(audits.seat()) for d in dirs}
            runner = SparkPartitions(spark, driver_fallback=policy.driver_fallback,
                                     executor_timeout=policy.executor_timeout,
                                     seat=seated.enter_context(predictions.seat()))
            runners.append(runner)
            return dirs, verify_logs(dirs, cfg, now_ms=now_ms, predict=predict,
                                     engine=_engine(spark, engines, policy, seats), partitions=runner)

    t0 = time.perf_counter()
    reports = _each_broker(one, groups, spark, [(audits, audit_job.job_group),
                                                (predictions, prediction_job.job_group)])
    return FleetVerify(verify_tables(spark, reports, run), reports, engines, runners, time.perf_counter() - t0,
                       audits.rounds + predictions.rounds, (audit_job.job_group, prediction_job.job_group))


def _each_broker(one: Callable[[list[str]], _T], groups: list[list[str]], spark: SparkSession,
                 gatherings: Sequence[tuple[Gathering[Any, Any], str]]) -> list[_T]:
    """``one`` of every broker, all at once: each waits at its gatherings for the others.  Ctrl-C cancels the
    gatherings and their jobs (``(gathering, its job group)``), so that the brokers' threads end and the interrupt
    reaches the caller."""
    with ThreadPoolExecutor(max(1, len(groups)), thread_name_prefix="mploader-broker") as threads:
        try:
            return list(threads.map(one, groups))
        except KeyboardInterrupt:
            for gathering, job_group in gatherings:
                gathering.cancel(LoadInterrupted("interrupted (Ctrl-C)"))
                spark.sparkContext.cancelJobGroup(job_group)
            raise


__all__ = ["BrokerWarnings", "FleetLoad", "FleetVerify", "JobPolicy", "brokers", "load", "verify", "where_it_ran"]
