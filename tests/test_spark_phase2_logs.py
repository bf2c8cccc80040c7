"""Phase 2's executor side (:func:`mploader.spark.phase2.load_rows`) writes no log line: an executor configures no
logging, so Python would print the recovery's warnings on its stderr as bare lines (no level, no dry-run mark). Its
records go back to the driver in the task's last rows, one per load (:func:`mploader.spark.phase2.recovered`), and
are logged there by the load's runner, once each, as the process pool's parent logs its workers' records. The task
runs here as a Spark task runs it, Arrow batches in and outcome rows out (Spark's own runs:
tests/test_spark_fleet.py, tests/test_spark_quiet.py), so that the log records can be seen."""

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


def _batch(jobs: Sequence[PartitionJob], seats: Sequence[int]) -> pa.RecordBatch:
    """A task's rows: each job with its load's seat and its index in that load's list."""
    index = [sum(s == seat for s in seats[:i]) for i, seat in enumerate(seats)]
    return pa.record_batch([pa.array(seats, pa.int64()), pa.array(index, pa.int64()),
                            pa.array([pickle.dumps(j) for j in jobs])], names=["seat", "job", "spec"])


def _one_task(jobs: list[PartitionJob], cfg: LoaderConfig,
              seen: _Seen | None = None) -> list[tuple[LoadedLog, int] | BaseException]:
    """Every job in one task of ``load_rows``, in this process (the runner ``load_logs`` hands the jobs to); the
    task's last row is what it scanned and wrote and its records, logged here as the driver's runner does."""
    from mploader.runners.here import replay
    from mploader.spark.phase2 import TASK_ROWS, TASK_WORK, load_rows, recovered, task_rows

    level = logging.getLogger("mploader").getEffectiveLevel()
    before = [] if seen is None else list(seen.records)  # the driver's own (load_logs)
    task = load_rows(pickle.dumps(cfg), level, history=True)
    rows = pa.Table.from_batches(list(task([_batch(jobs, [0] * len(jobs))])))
    assert rows.column("job").to_pylist() == [*range(len(jobs)), TASK_WORK, TASK_ROWS]
    if seen is not None:  # the task itself logged nothing
        assert seen.records == before, [r.getMessage() for r in seen.records[len(before):]]
    outcomes, work, records = recovered({0: (cfg, jobs)}, rows)[0]
    made = task_rows(rows)
    assert work.segments_scanned > 0
    loaded = [o[0] for o in outcomes if not isinstance(o, BaseException)]
    assert made.summary["dir"].to_pylist() == sorted(lg.dir for lg in loaded)  # a row each, made in the task
    assert made.inventory.num_rows == sum(len(lg.segments) for lg in loaded)
    replay(records)
    return outcomes


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
    from mploader.spark.phase2 import TASK_WORK, load_rows

    d, _ = _lossy_broker(tmp_path)
    runner = _OneTask()
    load_logs([str(d)], LoaderConfig(dry_run=True), NOW, partitions=runner)
    jobs = runner.jobs
    last = list(load_rows(pickle.dumps(LoaderConfig(dry_run=True)), logging.ERROR)([_batch(jobs, [0] * len(jobs))]))
    assert last[-1].column("job").to_pylist() == [TASK_WORK]  # no history asked for: no rows made
    _, records = pickle.loads(last[-1].column("outcome")[0].as_py())
    assert records == []


def test_each_loads_records_go_to_its_own_seat(tmp_path: Path) -> None:
    """One task recovering two brokers' partitions (a fleet's one job) answers each broker's log records with its
    own work row, so that each broker's runner logs only its own."""
    from mploader.spark.phase2 import TASK_WORK, load_rows, recovered, task_rows

    d, _ = _lossy_broker(tmp_path / "b0")
    runner = _OneTask()
    load_logs([str(d)], LoaderConfig(dry_run=True), NOW, partitions=runner)
    lossy = runner.jobs
    clean = [PartitionJob(j.data_dir, j.dir, j.tp, j.kind, True, 0, 0, None, NOW) for j in lossy[:1]]
    cfg = LoaderConfig(dry_run=True)
    jobs, seats = [lossy[0], clean[0], *lossy[1:]], [0, 1, *[0] * (len(lossy) - 1)]
    task = load_rows(pickle.dumps(cfg), logging.WARNING, history=True)
    rows = pa.Table.from_batches(list(task([_batch(jobs, seats)])))
    assert sorted((s, j) for s, j in zip(rows.column("seat").to_pylist(), rows.column("job").to_pylist()) if s == 1) \
        == [(1, TASK_WORK), (1, 0)]
    answers = recovered({0: (cfg, lossy), 1: (cfg, clean)}, rows)
    assert [len(answers[s][0]) for s in (0, 1)] == [len(lossy), 1]
    assert answers[0][2] and all(r.levelno >= logging.WARNING for r in answers[0][2])
    assert answers[1][2] == []  # a clean shutdown's partition: nothing to tell, and nobody else's lines
    assert task_rows(rows).dirs == {j.dir for j in [*lossy, *clean]}  # one table of the task's rows, every load's
