"""The attempt record: what a Spark task's attempt reported of a partition, for a retry of that task.

Kafka has no equivalent: a broker loads its partitions once, in one process.  A Spark task that dies (a lost
executor) is retried, and recovery is idempotent: the retry completes the files, but of the partitions its earlier
attempt recovered it can tell only what it does itself, which there is little or nothing.  So an applied Spark
load's task writes ``mploader-attempt`` in a partition directory right after the partition's load, where that load
changed the partition's files (a partition it did not change a retry finds as the driver planned it, and the
retry's own report is the whole load's): the Spark job's run id (one per :class:`mploader.spark.phase2.RecoveryJob`
call) and the partition's report as its load made it, the :data:`REPORT` fields of its ``LoadedLog`` and its log
lines.  A retry that finds a valid record of its own run answers those (:mod:`mploader.spark.phase2`).

The record is written as a new file (a load deletes any record it does not keep, first) and made durable with the
load's own writes, by the task's sync: a record torn or lost by a crash of the host fails to parse or is missing,
and the retry tells its own report, as for a partition whose attempt died in its middle (docs/spark.md).  A record
of another run (a failed earlier job) is stale: a load that meets one deletes it and ignores it, a single-host load
too (:func:`drop_stale`, at the loader's start).  The driver deletes its run's records once its loads are done
(``LoadedLog.attempt_record``: :func:`mploader.manager.dirs.remove_attempt_records`).  Kafka ignores the file (it
is no segment, index, snapshot or checkpoint name); a dry run writes none.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mploader.disk.base import Disk
from mploader.result import LoadedLog

ATTEMPT = "mploader-attempt"
#: the LoadedLog fields that say what its load did (the rest say what the log is, which a retry finds as well)
REPORT = ("recovered_segments", "truncated_bytes", "deleted_files", "log_end_offset_before", "deleted_segments",
          "index_checks")


@dataclass(frozen=True, slots=True)
class Attempt:
    """A record of this run: the partition's :data:`REPORT` fields and its load's log lines."""

    report: dict[str, Any]
    lines: list[logging.LogRecord]

    def answered(self, loaded: LoadedLog) -> LoadedLog:
        """``loaded`` (a retry's load of the partition) with the recorded report: what the load as a whole did."""
        return dataclasses.replace(loaded, **self.report, attempt_record=True)


def record(disk: Disk, loaded: LoadedLog, run: str, lines: Sequence[logging.LogRecord]) -> None:
    """Write ``loaded``'s report and its load's log ``lines`` for ``run``, durable with the load's writes."""
    facts = {"run": run, "report": {name: getattr(loaded, name) for name in REPORT},
             "lines": [[r.name, r.levelno, r.getMessage(), r.exc_text] for r in lines]}
    disk.write(os.path.join(loaded.dir, ATTEMPT), json.dumps(facts).encode(), durable=True)


def recorded(disk: Disk, partition_dir: str, run: str) -> Attempt | None:
    """The valid record of ``run`` in ``partition_dir``; None: none, unreadable, torn, or another run's."""
    try:
        facts = json.loads(disk.read(os.path.join(partition_dir, ATTEMPT)))
        if not isinstance(facts, dict) or facts.get("run") != run:
            return None
        return Attempt(_report(facts["report"]), [_line(*line) for line in facts["lines"]])
    except (OSError, ValueError, TypeError, KeyError):  # none, or torn by a crash: written before the retry's load
        return None


def _report(report: dict[str, Any]) -> dict[str, Any]:
    """The recorded fields as the LoadedLog holds them (ValueError, TypeError, KeyError: not such a record)."""
    if set(report) != set(REPORT):
        raise ValueError(f"not the report's fields: {sorted(report)}")
    before = report["log_end_offset_before"]
    return {"recovered_segments": [int(b) for b in report["recovered_segments"]],
            "truncated_bytes": int(report["truncated_bytes"]),
            "deleted_files": [str(name) for name in report["deleted_files"]],
            "log_end_offset_before": None if before is None else int(before),
            "deleted_segments": [(int(base), int(size)) for base, size in report["deleted_segments"]],
            "index_checks": [{str(k): str(v) for k, v in check.items()} for check in report["index_checks"]]}


def _line(name: str, level: int, message: str, exc_text: str | None) -> logging.LogRecord:
    return logging.makeLogRecord({"name": name, "levelno": level, "levelname": logging.getLevelName(level),
                                  "msg": message, "exc_text": exc_text})


def drop_stale(disk: Disk, partition_dir: str, listing: list[str], run: str | None) -> None:
    """At a load's start: delete a record that is not a valid one of ``run`` (None: a load of no Spark job, for which
    every record is stale).  ``listing``: the partition directory's files, sorted (a record is looked for only
    there)."""
    at = bisect.bisect_left(listing, ATTEMPT)
    if at == len(listing) or listing[at] != ATTEMPT:
        return
    if run is None or recorded(disk, partition_dir, run) is None:
        disk.delete(os.path.join(partition_dir, ATTEMPT))


def remove(disk: Disk, partition_dir: str) -> None:
    """The run's loads are done: its record is of no more use (called only where a task wrote or kept one)."""
    disk.delete(os.path.join(partition_dir, ATTEMPT))


__all__ = ["ATTEMPT", "REPORT", "Attempt", "drop_stale", "record", "recorded", "remove"]
