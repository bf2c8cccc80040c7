"""The runner interface: where a partition's load runs is a choice, and the manager cannot tell the difference.

The manager (:mod:`mploader.manager.load`) makes a :class:`~mploader.recovery.job.PartitionJob` per partition and
hands them all to one runner; every runner runs :func:`mploader.recovery.job.load_partition` on each and tells
the manager, through :class:`RunEvents`, of each job's outcome and of its segments left to recover.  Runners:

* :class:`mploader.runners.threads.LoadingThreads`: ``num.recovery.threads.per.data.dir`` threads a data dir
  in this process, their scans from a Phase 1 engine (Kafka's own shape);
* :class:`mploader.runners.processes.ProcessPartitions`: worker processes, each loading whole partitions;
* :class:`mploader.spark.phase2.SparkPartitions`: Spark tasks.

Every runner is held to one conformance class (tests/test_runners.py).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from types import TracebackType

from mploader.config import LoaderConfig
from mploader.engine.plan import DirPlan, Partition, PlannedScans
from mploader.recovery.job import PartitionJob
from mploader.result import LoadedLog, LoadStats

# per job: the log and the bytes its load scanned, or what its load raised
Outcome = tuple[LoadedLog, int] | BaseException


class RunEvents:
    """What a runner tells as its loads go; this base hears nothing.  Calls may come from any of the runner's
    threads, one job's ``loaded`` exactly once."""

    def loaded(self, index: int, outcome: Outcome, seconds: float | None = None) -> None:
        """Job ``index`` (its position in the runner's list) is done: ``outcome``, durable where it wrote;
        ``seconds``: its load's time, where the runner timed it."""

    def segments_left(self, index: int, worker: int, count: int) -> None:
        """Job ``index``'s segments left to recover, on the runner's worker (or thread) number ``worker``
        (Kafka's ``remainingSegmentsToRecover`` of that recovery thread)."""


NO_EVENTS = RunEvents()


class PartitionRunner(abc.ABC):
    """Loads partition jobs and returns each job's outcome, in the jobs' order (see the module docstring)."""

    #: it reports each scan to the load's progress as it completes; else the manager counts a partition's scans
    #: when it is loaded
    reports_scans = False
    #: how many ``threadNum`` gauges of remainingSegmentsToRecover a data dir has from the start (Kafka registers
    #: one per recovery thread); a runner of 0 registers each when it first tells of it
    gauges_per_dir = 0
    #: the partitions load in other processes (said in the load's first log lines)
    elsewhere = True
    #: its loads may run on other hosts: each job carries what this one found of its data
    #: (:class:`~mploader.recovery.job.PlannedData`), checked there before a byte is read or written
    needs_planned_data = False

    def order(self, plans: Sequence[DirPlan]) -> Mapping[str, list[Partition]]:
        """Per data dir, the order in which the partitions should be loaded, its Phase 1 started where it runs
        ahead; no entry: the listing's order."""
        return {}

    @property
    def planned(self) -> Mapping[str, PlannedScans]:
        """Per data dir, the scans planned before the loads (for the load's progress); none known: empty."""
        return {}

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """Where the partitions are loaded, in words (``LoadStats.loaded_by``)."""

    @abc.abstractmethod
    def run(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, events: RunEvents = NO_EVENTS) -> list[Outcome]:
        """Every job loaded; their outcomes in the jobs' order, each told to ``events`` as it completes."""

    @property
    def changed_dirs(self) -> frozenset[str]:
        """The directories the last run's loads changed in other processes (a failure's note names them)."""
        return frozenset()

    def account(self, stats: LoadStats) -> None:
        """Add the last run's work (its scans and file changes) and how it ran to the load's ``stats``."""
        stats.loaded_by = self.description

    def close(self, kill: bool = False) -> None:  # noqa: B027 - most runners start nothing that outlives a run
        """End what the runner started (``kill``: at once, on Ctrl-C)."""

    def __enter__(self) -> PartitionRunner:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close(kill=error is not None and not isinstance(error, Exception))


__all__ = ["NO_EVENTS", "Outcome", "PartitionRunner", "RunEvents"]
