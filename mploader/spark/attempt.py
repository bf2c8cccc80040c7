"""One attempt of a Spark task at its partitions, the first or a retry: what it answers of each.

Spark retries a task whose executor died; recovery is idempotent, so the retry loads each of its partitions again
and the files come out right, but a partition its earlier attempt recovered it finds recovered: its own report
would say little or nothing of what the load did.  So in an applied load each attempt records, right after a
partition's load that changed the partition's files and before the next partition's load starts, the report that
load made (:mod:`mploader.recovery.attempts`, under the Spark job's run id), and a retried attempt answers, for a
partition with a valid record of its run, the recorded report and log lines: the load as a whole's.

A partition without such a record whose files are not those the driver planned (mploader's own files apart) was
changed by an earlier attempt that died before it recorded the report, in the middle of its load (or by another
process: a retry checks its data dirs only, spark.identity): the retry's report counts its own changes only, and a
WARN line says so, naming the partition (docs/spark.md, "What a retried task reports").  One whose files are as
planned was not touched before: the retry's report is the whole load's.  A dry run records nothing: it changed
nothing, and its retry's report is the load's.
"""

from __future__ import annotations

import logging

from mploader.config import LoaderConfig
from mploader.disk import NO_HOOK, MutationHook
from mploader.recovery import attempts
from mploader.recovery.attempts import ATTEMPT
from mploader.recovery.job import PartitionJob
from mploader.recovery.journal import JOURNAL
from mploader.result import LoadStats
from mploader.runners import Outcome, PartitionsHere
from mploader.runners.here import CollectRecords
from mploader.spark.identity import changed_since_planned

log = logging.getLogger(__name__)

#: mploader's own files in a partition directory, which no report counts: a retry that finds only them changed
#: finds the partition as its earlier attempt did
OWN_FILES = frozenset({ATTEMPT, JOURNAL})


class TaskAttempt:
    """One load's partitions (a seat's rows) in one attempt of a task, loaded one after another on one disk
    (:class:`PartitionsHere`) under the Spark job's ``run`` id; ``retried``: an earlier attempt may have loaded
    some; ``mutations``: the disk's hook."""

    def __init__(self, cfg: LoaderConfig, run: str, retried: bool, mutations: MutationHook = NO_HOOK) -> None:
        self.here = PartitionsHere(cfg, mutations, run)
        self.run = run
        self.records = not cfg.dry_run  # a dry run writes nothing
        self.retried = retried and self.records

    def load(self, job: PartitionJob, collect: CollectRecords) -> tuple[Outcome, list[logging.LogRecord]]:
        """``job``'s outcome and the log records of its load (``collect``: where they are collected), as the
        attempt answers them: a recorded partition's as the earlier attempt recorded them."""
        disk = self.here.disk
        earlier = self._earlier(job)
        outcome = self.here.load(job)
        lines = collect.take()
        if not self.records or isinstance(outcome, BaseException):
            return outcome, lines
        loaded, scanned = outcome
        if earlier is not None:
            return (earlier.answered(loaded), scanned), earlier.lines
        if disk.changed(job.dir):
            attempts.record(disk, loaded, self.run, lines)
            loaded.attempt_record = True
        return outcome, lines

    def _earlier(self, job: PartitionJob) -> attempts.Attempt | None:
        """A retry's: what an earlier attempt recorded of ``job``'s partition (None: nothing, or not a retry); where
        it recorded nothing but changed the files, the WARN line."""
        if not self.retried:
            return None
        earlier = attempts.recorded(self.here.disk, job.dir, self.run)
        if earlier is None and changed_since_planned(job, OWN_FILES):
            log.warning("%s: its files changed since the driver planned them and no earlier attempt of this Spark "
                        "task recorded what it did to them (one died in the middle of its load): the report of this "
                        "partition counts this attempt's changes only", job.dir)
        return earlier

    def finish(self) -> LoadStats:
        """What the loads scanned and wrote, once the disk is synced (the records with the loads' writes)."""
        return self.here.finish()


__all__ = ["OWN_FILES", "TaskAttempt"]
