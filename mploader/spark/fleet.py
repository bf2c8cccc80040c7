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

import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mploader.broker_config.meta import identity_or_none
from mploader.config import LoaderConfig
from mploader.engine.base import Engine, EngineFactory
from mploader.errors import StartupFailedError
from mploader.manager import load_logs
from mploader.progress import Progress
from mploader.result import LoadResult, LoadStats
from mploader.spark.engine import SparkEngine
from mploader.spark.jobs import EXECUTOR_TIMEOUT
from mploader.spark.output import FleetTables, load_tables, verify_tables
from mploader.spark.phase2 import SparkPartitions
from mploader.spark.session import check_session
from mploader.verify import VerifyReport, verify_logs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

BROKERS_AT_ONCE = 4  # brokers handled side by side by the driver (their Spark jobs share the cluster)


def brokers(data_dirs: Sequence[str | os.PathLike[str]]) -> list[list[str]]:
    """The dirs grouped by broker (see the module docstring), in the order first seen."""
    groups: dict[tuple[str, str], list[str]] = {}
    for d in data_dirs:
        path = os.path.abspath(os.fspath(d))
        groups.setdefault(_broker_of(path), []).append(path)
    return list(groups.values())


def _broker_of(path: str) -> tuple[str, str]:
    identity = identity_or_none(path)
    return ("dir", path) if identity.node_id is None else (identity.cluster_id or "", identity.node_id)


@dataclass(slots=True)
class FleetLoad:
    """What :func:`load` returns: per broker the load's result, or the start-up failure Kafka would hit."""

    tables: FleetTables
    results: list[tuple[list[str], LoadResult | StartupFailedError]]
    engines: list[SparkPartitions]  # one per broker (their job groups: what ran on Spark)


@dataclass(slots=True)
class FleetVerify:
    """What :func:`verify` returns: per broker the verify report; ``report`` merges them (one document)."""

    tables: FleetTables
    reports: list[tuple[list[str], VerifyReport]]
    engines: list[SparkEngine]  # per broker: the audits' engine and the prediction's
    seconds: float = 0.0  # wall time of the whole job

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


def _engine(spark: SparkSession, engines: list[SparkEngine], policy: JobPolicy) -> EngineFactory:
    def make(stats: LoadStats, progress: Progress | None) -> Engine:
        engine = SparkEngine(spark, stats, progress, driver_fallback=policy.driver_fallback,
                             executor_timeout=policy.executor_timeout)
        engines.append(engine)
        return engine

    return make


def load(spark: SparkSession, log_dirs: Sequence[str | os.PathLike[str]], config: LoaderConfig | None = None,
         apply: bool = False, now_ms: int | None = None, policy: JobPolicy = JobPolicy()) -> FleetLoad:
    """Load every broker's dirs: a dry run (nothing changes) unless ``apply``, which recovers them as
    ``load_logs`` does.  A broker Kafka would refuse to start is reported, not raised; a failed Spark job raises
    :class:`mploader.spark.jobs.SparkJobFailed` (``policy``)."""
    check_session(spark)
    cfg = dataclasses.replace(config or LoaderConfig(), dry_run=not apply)
    engines: list[SparkPartitions] = []

    def one(dirs: list[str]) -> tuple[list[str], LoadResult | StartupFailedError]:
        runner = SparkPartitions(spark, driver_fallback=policy.driver_fallback,
                                 executor_timeout=policy.executor_timeout)
        engines.append(runner)
        try:
            return dirs, load_logs(dirs, cfg, now_ms, partitions=runner)
        except StartupFailedError as e:
            log.warning("%s: a Kafka broker would fail to start: %s", ", ".join(dirs), e)
            return dirs, e

    with ThreadPoolExecutor(BROKERS_AT_ONCE, thread_name_prefix="mploader-broker") as threads:
        results = list(threads.map(one, brokers(log_dirs)))
    return FleetLoad(load_tables(spark, results), results, engines)


def verify(spark: SparkSession, log_dirs: Sequence[str | os.PathLike[str]], config: LoaderConfig | None = None,
           now_ms: int | None = None, predict: bool = True, policy: JobPolicy = JobPolicy()) -> FleetVerify:
    """Verify every broker's dirs (``verify_logs``: read-only, no lock), audits on the executors; a failed Spark
    job raises :class:`mploader.spark.jobs.SparkJobFailed` (``policy``)."""
    check_session(spark)
    cfg = config or LoaderConfig()
    engines: list[SparkEngine] = []

    def one(dirs: list[str]) -> tuple[list[str], VerifyReport]:
        return dirs, verify_logs(dirs, cfg, now_ms=now_ms, predict=predict, engine=_engine(spark, engines, policy))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(BROKERS_AT_ONCE, thread_name_prefix="mploader-broker") as threads:
        reports = list(threads.map(one, brokers(log_dirs)))
    return FleetVerify(verify_tables(spark, reports), reports, engines, time.perf_counter() - t0)


__all__ = ["BROKERS_AT_ONCE", "FleetLoad", "FleetVerify", "JobPolicy", "brokers", "load", "verify", "where_it_ran"]
