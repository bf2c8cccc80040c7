"""Phase 2's executor side (:func:`mploader.spark.phase2.load_rows`) writes no log line: an executor configures no
logging, so Python would print the recovery's warnings on its stderr as bare lines (no level, no dry-run mark).  Its
records go back to the driver in the task's last row and are logged there (:func:`mploader.spark.phase2.task_work`),
once each, as the process pool's parent logs its workers' records.  The task runs here as a Spark task runs it, Arrow
batches in and outcome rows out (Spark's own runs: tests/test_spark_fleet.py, tests/test_spark_quiet.py), so that the
log records can be seen."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from pathlib import Path

import pytest

from mploader import LoaderConfig, load_logs
from mploader.recovery.job import PartitionJob
from mploader.result import LoadedLog
from mploader.runners import NO_EVENTS, Outcome, PartitionRunner, RunEvents
from tests.kafkadir import NOW
from tests.test_cli_operator import EXPECTED_IMPACT, _lossy_broker

pa = pytest.importorskip("pyarrow", reason="the spark extra is not installed (pip install -e '.[spark]')")


class _Seen(logging.Handler):
    """The records that reach a handler of the ``mploader`` logger while the task runs (an executor's own output)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _one_task(jobs: list[PartitionJob], cfg: LoaderConfig,
              seen: _Seen | None = None) -> list[tuple[LoadedLog, int] | BaseException]:
    """Every job in one task of ``load_rows``, in this process (the runner ``load_logs`` hands the jobs to); the
    task's last row is what it scanned and wrote and its records, logged by ``task_work`` as the driver does."""
    from mploader.result import LoadStats
    from mploader.spark.phase2 import TASK_WORK, load_rows, task_work

    batch = pa.record_batch([pa.array(range(len(jobs)), pa.int64()), pa.array([pickle.dumps(j) for j in jobs])],
                            names=["job", "spec"])
    level = logging.getLogger("mploader").getEffectiveLevel()
    before = [] if seen is None else list(seen.records)  # the driver's own (load_logs)
    rows = [(row.column("job")[0].as_py(), row.column("outcome")[0].as_py())
            for row in load_rows(pickle.dumps(cfg), level)([batch])]
    assert [job for job, _ in rows] == [*range(len(jobs)), TASK_WORK]
    if seen is not None:  # the task itself logged nothing
        assert seen.records == before, [r.getMessage() for r in seen.records[len(before):]]
    work = task_work(rows[-1][1])
    assert isinstance(work, LoadStats) and work.segments_scanned > 0
    return [pickle.loads(outcome) for _, outcome in rows[:-1]]


class _OneTask(PartitionRunner):
    """A runner of one ``load_rows`` task in this process; the jobs it was given kept."""

    description = "one Spark task's rows, in this process"

    def __init__(self, seen: _Seen | None = None) -> None:
        self.seen = seen
        self.jobs: list[PartitionJob] = []

    def run(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, events: RunEvents = NO_EVENTS) -> list[Outcome]:
        self.jobs.extend(jobs)
        return _one_task(list(jobs), cfg, self.seen)


def test_the_task_logs_nothing_and_the_driver_logs_its_warnings_once(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    d, _ = _lossy_broker(tmp_path)
    mploader_logger = logging.getLogger("mploader")
    mploader_logger.setLevel(logging.INFO)  # a level of its own: the task gives it back
    seen = _Seen()
    mploader_logger.addHandler(seen)
    try:
        with caplog.at_level(logging.WARNING):
            result = load_logs([str(d)], LoaderConfig(dry_run=True), NOW,
                               partitions=_OneTask(seen))
        assert mploader_logger.level == logging.INFO and mploader_logger.handlers == [seen]
    finally:
        mploader_logger.removeHandler(seen)
        mploader_logger.setLevel(logging.NOTSET)
    orders = next(lg for lg in result.all_logs() if lg.topic == "orders")
    assert orders.impact.to_json() == EXPECTED_IMPACT and result.stats.bytes_truncated == 432
    recovery = [r.getMessage() for r in caplog.records if r.name.startswith("mploader.recovery")]
    assert recovery and len(recovery) == len(set(recovery)), recovery  # the executor's warnings, once each
    assert any("truncat" in m.lower() for m in recovery), recovery
    driver = [r.getMessage() for r in caplog.records if r.name == "mploader.manager"]  # the driver still warns
    assert any("deleted 1 segment(s)" in m for m in driver) and any("acknowledged" in m for m in driver), driver


def test_the_task_collects_only_records_at_the_drivers_level(tmp_path: Path) -> None:
    """A driver at ERROR (``mploader spark verify``'s quiet change loggers, say) gets no WARNING back."""
    from mploader.spark.phase2 import load_rows

    d, _ = _lossy_broker(tmp_path)
    runner = _OneTask()
    load_logs([str(d)], LoaderConfig(dry_run=True), NOW, partitions=runner)
    jobs = runner.jobs
    batch = pa.record_batch([pa.array(range(len(jobs)), pa.int64()), pa.array([pickle.dumps(j) for j in jobs])],
                            names=["job", "spec"])
    last = list(load_rows(pickle.dumps(LoaderConfig(dry_run=True)), logging.ERROR)([batch]))[-1]
    _, records = pickle.loads(last.column("outcome")[0].as_py())
    assert records == []
