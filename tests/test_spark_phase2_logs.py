"""Phase 2's executor side (:func:`mploader.spark.phase2.load_rows`) logs no warning: an executor configures no
logging, so Python would print the recovery's warnings on its stderr as bare lines (no level, no dry-run mark);
the driver's result says what they said.  The task runs here as a Spark task runs it, Arrow batches in and
outcome rows out (Spark's own runs: tests/test_spark_fleet.py), so that the log records can be seen."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path

import pytest

from mploader import LoaderConfig, load_logs
from mploader.recovery.job import PartitionJob
from mploader.result import LoadedLog
from tests.kafkadir import NOW
from tests.test_cli_operator import EXPECTED_IMPACT, _lossy_broker

pa = pytest.importorskip("pyarrow", reason="the spark extra is not installed (pip install -e '.[spark]')")


def _one_task(jobs: list[PartitionJob], cfg: LoaderConfig) -> list[tuple[LoadedLog, int] | BaseException]:
    """Every job in one task of ``load_rows``, in this process (the runner ``load_logs`` hands the jobs to); the
    task's last row is what it scanned and wrote."""
    from mploader.result import LoadStats
    from mploader.spark.phase2 import TASK_WORK, load_rows

    batch = pa.record_batch([pa.array(range(len(jobs)), pa.int64()), pa.array([pickle.dumps(j) for j in jobs])],
                            names=["job", "spec"])
    rows = [(row.column("job")[0].as_py(), pickle.loads(row.column("outcome")[0].as_py()))
            for row in load_rows(pickle.dumps(cfg))([batch])]
    assert [job for job, _ in rows] == [*range(len(jobs)), TASK_WORK]
    assert isinstance(rows[-1][1], LoadStats) and rows[-1][1].segments_scanned > 0
    return [outcome for _, outcome in rows[:-1]]


def test_the_task_logs_no_warning_and_the_driver_reports_its_changes(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    d, _ = _lossy_broker(tmp_path)
    mploader_logger = logging.getLogger("mploader")
    mploader_logger.setLevel(logging.INFO)  # a level of its own: the task gives it back
    try:
        with caplog.at_level(logging.WARNING):
            result = load_logs([str(d)], LoaderConfig(dry_run=True), NOW, partitions=_one_task)
        assert mploader_logger.level == logging.INFO
    finally:
        mploader_logger.setLevel(logging.NOTSET)
    orders = next(lg for lg in result.all_logs() if lg.topic == "orders")
    assert orders.impact.to_json() == EXPECTED_IMPACT and result.stats.bytes_truncated == 432
    assert not [r for r in caplog.records if r.name.startswith("mploader.recovery")], caplog.text
    driver = [r.getMessage() for r in caplog.records if r.name == "mploader.manager"]  # the driver still warns
    assert any("deleted 1 segment(s)" in m for m in driver) and any("acknowledged" in m for m in driver), driver
