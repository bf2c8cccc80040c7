"""A Spark job of mploader's, run to its end or failed with a message that says why: no silent fallback.

:func:`collect` runs a DataFrame's job in a job group and returns its rows as Arrow; a job that fails raises
:class:`SparkJobFailed` naming the executors' own exception (the ``ModuleNotFoundError`` of a Python worker
without mploader, not just ``PythonException``: :func:`executor_error`).  A :class:`Watchdog` ends a job whose
tasks make no progress for ``executor_timeout`` seconds: none runs and none completes, which is what a job whose
application has no executor (none registered, every worker lost) looks like, where Spark itself waits forever.
Whether the driver then does the work is the caller's choice (``--driver-fallback``), never a default.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from typing import TYPE_CHECKING

from mploader.errors import MploaderError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

#: seconds a job may wait with no task running or completing before the watchdog ends it (None: no bound)
EXECUTOR_TIMEOUT = 120.0
_POLL = 0.5
_GROUPS = itertools.count()
# a Python exception's line in a worker's traceback ("ModuleNotFoundError: No module named 'mploader'")
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))(?::\s.*)?$")


class SparkJobFailed(MploaderError, RuntimeError):
    """A Spark job of mploader's did not complete (its error is the ``__cause__``; the message names the executors'
    exception where Spark passed it on)."""


def executor_error(error: BaseException) -> str:
    """``error`` in a line: its type and first line, and the last Python exception of the traceback a worker
    sent with it (where Spark wraps it in ``PythonException`` or a Java error)."""
    text = str(error)
    first = text.strip().splitlines()[0] if text.strip() else ""
    lines = [line.strip() for line in text.splitlines()]
    worker = [line for line in lines if _ERROR_LINE.match(line) and not line.startswith(("org.", "java.", "py4j."))]
    what = f"{type(error).__name__}: {first}" if first else type(error).__name__
    if worker and worker[-1] not in what:
        return f"{worker[-1]} (on the executors; {what})"
    return what


class Watchdog:
    """While open (``with``), ends ``job_group``'s jobs once none of their tasks has run or completed for
    ``timeout`` seconds; :attr:`fired` then says why (a message for :class:`SparkJobFailed`)."""

    def __init__(self, spark: SparkSession, job_group: str, timeout: float | None) -> None:
        self.spark, self.job_group, self.timeout = spark, job_group, timeout
        self.fired: str | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Watchdog:
        if self.timeout is not None and self.timeout > 0:
            self._thread = threading.Thread(target=self._watch, name="mploader-spark-watchdog", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _progress(self) -> tuple[int, int] | None:
        """(tasks running, tasks completed) of the group's jobs still running; None: none runs."""
        tracker = self.spark.sparkContext.statusTracker()
        jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(self.job_group)]
        stages = [tracker.getStageInfo(s) for j in jobs if j is not None and j.status == "RUNNING"
                  for s in j.stageIds]
        live = [s for s in stages if s is not None]
        if not live:
            return None
        return sum(s.numActiveTasks for s in live), sum(s.numCompletedTasks for s in live)

    def _watch(self) -> None:
        assert self.timeout is not None
        last, since = None, time.monotonic()
        while not self._done.wait(_POLL):
            now = self._progress()
            if now is None or now[0] > 0 or now != last:
                last, since = now, time.monotonic()
                continue
            if time.monotonic() - since >= self.timeout:
                self.fired = (f"no executor ran a task of it for {self.timeout:g} s (does the application have "
                              f"executors? see --executor-timeout)")
                self.spark.sparkContext.cancelJobGroup(self.job_group)
                return


def job_group(kind: str) -> str:
    """A new Spark job group's name, unique in this process (``id()`` of a collected object may come again)."""
    return f"mploader-{kind}-{os.getpid()}-{next(_GROUPS)}"


def collect(frame: DataFrame, job_group: str, description: str, executor_timeout: float | None) -> pa.Table:
    """``frame``'s rows as Arrow, its job run in ``job_group`` under a :class:`Watchdog`; SparkJobFailed if it
    fails (``description``: what the job does, for the message)."""
    spark = frame.sparkSession
    spark.sparkContext.setJobGroup(job_group, description, interruptOnCancel=True)
    with Watchdog(spark, job_group, executor_timeout) as watchdog:
        try:
            return frame.toArrow()
        except Exception as e:  # noqa: BLE001 - a failed or cancelled job, said in words
            why = watchdog.fired or executor_error(e)
            raise SparkJobFailed(f"the Spark job ({description}) failed: {why}") from e


__all__ = ["EXECUTOR_TIMEOUT", "SparkJobFailed", "Watchdog", "collect", "executor_error", "job_group"]
