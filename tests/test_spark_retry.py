"""A retried Spark task reports what the load as a whole did (``mploader.spark.attempt``, ``recovery.attempts``).

The executor function itself (``load_rows``), run here on the Arrow batch the driver's side makes, twice over the
same rows as Spark runs a task's attempts: a first attempt (``attempt=0``) that dies after some partitions (its
generator closed: nothing of it runs after, not even its sync) or in the middle of one (a mutation hook raising an
exception no load catches, at every change from there on), then a retry (``attempt=1``) of the same run.  The loads
are ``load_logs``'s (a runner given the manager's jobs), so the result and the files are compared with a single-host
load of a fresh copy of the same data: the broker has faults, its recovery truncates segments and deletes one.
Spark's own retry, on the other worker of a real cluster after the worker that recorded a partition was killed:
``tests/test_spark_cluster.py``.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from mploader import LoaderConfig, load_logs  # noqa: E402
from mploader.disk import NO_HOOK, MutationHook, RealDisk  # noqa: E402
from mploader.disk.environment import partition_problem  # noqa: E402
from mploader.recovery.attempts import ATTEMPT  # noqa: E402
from mploader.recovery.job import PartitionJob  # noqa: E402
from mploader.result import LoadResult  # noqa: E402
from mploader.runners import NO_EVENTS, Outcome, PartitionRunner, RunEvents  # noqa: E402
from tests.crash_points import GEN_NOW, copy_tree, small_broker  # noqa: E402
from tests.crashy_worker import result_digest, tree_digest  # noqa: E402

pa = pytest.importorskip("pyarrow", reason="the spark extra is not installed (pip install -e '.[spark]')")

RUN = "0123456789abcdef0123456789abcdef"  # the Spark job's run id, as RecoveryJob makes one
EARLIER = "the report of this partition counts this attempt's changes only"  # the WARN line of a partition cut short


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An unclean broker, every segment unflushed: each partition's recovery changes its files, the first
    (orders-0) truncates a segment and deletes the one after it, the others truncate."""
    data = small_broker(tmp_path_factory.mktemp("retry") / "broker", seed=5, clean=False, everything_unflushed=True)
    (data / ".lock").touch()  # a load that fails leaves the tree as it was
    return data


def fresh(template: Path, tmp_path: Path, label: str) -> Path:
    """A copy of the data dir, at ``label/data-0`` (``label``: the root the digests name ``<root>``)."""
    (tmp_path / label).mkdir()
    copy_tree(template, tmp_path / label / "data-0")
    return tmp_path / label / "data-0"


class _Killed(BaseException):
    """The attempt's process dies here: no load catches it, nothing of the attempt runs after."""


class _DieAfterRecord(MutationHook):
    """Kills the attempt at the ``nth`` change (its point, before the change) after it wrote its first record: that
    change and every later one (a cleanup on the way out) are not made, as none is in a killed process."""

    def __init__(self, nth: int) -> None:
        self.nth = nth
        self.since: int | None = None

    def point(self, op: str, path: str) -> None:
        if self.since is not None:
            self.since += 1
            if self.since >= self.nth:
                raise _Killed(f"{op} {path}")
        elif op == "write" and os.path.basename(path) == ATTEMPT:
            self.since = 0


def _batch(jobs: Sequence[PartitionJob]) -> pa.RecordBatch:
    return pa.record_batch([pa.array([0] * len(jobs), pa.int64()), pa.array(range(len(jobs)), pa.int64()),
                            pa.array([pickle.dumps(j) for j in jobs])], names=["seat", "job", "spec"])


class _Retried(PartitionRunner):
    """One task's two attempts at every job the manager planned (for a runner on other hosts), in this process: the
    first dies after ``complete`` partitions or where ``hook`` kills it; the second, of ``retry_run`` (the same job's
    run id, or another job's), loads them all and answers the runner's outcomes.  ``recorded``: the partitions with
    a record once the first attempt died."""

    needs_planned_data = True
    description = "a Spark task's two attempts, in this process"

    def __init__(self, complete: int | None = None, hook: MutationHook = NO_HOOK, retry_run: str = RUN) -> None:
        self.complete, self.hook, self.retry_run = complete, hook, retry_run
        self.recorded: list[str] = []
        self.made: Any = None  # the fleet history's rows the retry made of the partitions (spark.rows.PartitionRows)

    def run(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, events: RunEvents = NO_EVENTS) -> list[Outcome]:
        from mploader.runners.here import replay
        from mploader.spark.phase2 import load_rows, recovered, task_rows

        config, level = pickle.dumps(cfg), logging.getLogger("mploader").getEffectiveLevel()
        first = load_rows(config, level, run=RUN, attempt=0, mutations=self.hook)([_batch(jobs)])
        try:
            for _ in range(len(jobs) if self.complete is None else self.complete):
                next(first)
        except _Killed:
            pass
        first.close()
        self.recorded = sorted(j.dir for j in jobs if os.path.exists(os.path.join(j.dir, ATTEMPT)))
        retry = load_rows(config, level, run=self.retry_run, attempt=1, history=True)([_batch(jobs)])
        answered = pa.Table.from_batches(list(retry))
        outcomes, _, records = recovered({0: (cfg, jobs)}, answered)[0]
        self.made = task_rows(answered)
        replay(records)
        return outcomes


def _digest(result: LoadResult, root: Path) -> dict[str, Any]:
    """The result as the tests compare it, what the loads scanned apart (work, not report: a retry scans again)."""
    digest = result_digest(result, root.parent)
    del digest["stats"]["bytes_read"]
    return digest


def _by_dir(result: LoadResult, root: Path) -> dict[str, dict[str, Any]]:
    return {os.path.basename(d["dir"]): d for d in _digest(result, root)["details"]}


def _stale_records(data: Path) -> None:
    """A record of another run in one partition, a torn one of this run in another: each stale."""
    parts = sorted(p for p in data.iterdir() if p.is_dir())
    (parts[1] / ATTEMPT).write_text(json.dumps({"run": "an earlier job", "report": {}, "lines": []}))
    (parts[2] / ATTEMPT).write_text(json.dumps({"run": RUN, "report": {"recovered_segments": [1]}})[:30])


def test_a_retry_answers_what_the_load_as_a_whole_did(template: Path, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """The first attempt dies after two partitions; the retry finds them recovered and answers what the first attempt
    recorded of them: the result is the single-host load's, report fields and WARN lines included, and once the
    driver's load is done no record is left: the files are the single-host load's.  Stale records (another run's, a
    torn one) pass the first attempt's check of the driver's listing and are deleted by the loads."""
    ref_root, got_root = fresh(template, tmp_path, "ref"), fresh(template, tmp_path, "got")
    with caplog.at_level(logging.WARNING):
        ref = load_logs([str(ref_root)], LoaderConfig(), GEN_NOW)
    ref_lines = sorted(r.getMessage().replace(str(ref_root), "<data>") for r in caplog.records)
    assert ref.stats.bytes_truncated and any(lg.deleted_segments for lg in ref.all_logs()
                                             if lg.dir.endswith("orders-0"))
    _stale_records(got_root)
    caplog.clear()
    runner = _Retried(complete=2)
    with caplog.at_level(logging.WARNING):
        got = load_logs([str(got_root)], LoaderConfig(), GEN_NOW, partitions=runner)
    assert [os.path.basename(d) for d in runner.recorded] == ["orders-0", "orders-1", "payments.v1-0"]  # a stale one
    assert _digest(got, got_root) == _digest(ref, ref_root)
    assert sorted(r.getMessage().replace(str(got_root), "<data>") for r in caplog.records) == ref_lines
    assert tree_digest(got_root) == tree_digest(ref_root)  # no record left
    from mploader.spark.rows import PartitionRows

    where = ["data_dir", "directory_id", "dir"]  # the fleet history's rows the retry made: the single-host load's
    assert runner.made.summary.drop_columns(where) == PartitionRows.of(ref.all_logs(), {}).summary.drop_columns(where)


def test_a_retry_of_another_run_tells_only_its_own_changes(template: Path, tmp_path: Path) -> None:
    """The same first attempt, retried under another run id (a later job): its records are stale, and the retry's
    report of the partitions the first attempt recovered says less than the load did (what the records are for)."""
    ref_root, got_root = fresh(template, tmp_path, "ref"), fresh(template, tmp_path, "got")
    ref = _by_dir(load_logs([str(ref_root)], LoaderConfig(), GEN_NOW), ref_root)
    got = _by_dir(load_logs([str(got_root)], LoaderConfig(), GEN_NOW,
                            partitions=_Retried(complete=2, retry_run="a later job")), got_root)
    assert ref["orders-0"]["deleted_segments"] and not got["orders-0"]["deleted_segments"]
    assert got["payments.v1-1"] == ref["payments.v1-1"]  # not reached by the first attempt
    assert tree_digest(got_root) == tree_digest(ref_root)


def test_a_partition_cut_short_is_said_and_the_others_answered(template: Path, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """The first attempt dies in orders-1's load, after one change (``nth=2``): the retry answers orders-0 from its
    record, warns that orders-1's report counts its own changes only, and the partitions the first attempt never
    reached report as the single-host load does.  Killed before orders-1's first change (``nth=1``), the partition
    is as the driver planned it: no WARN, the whole result is the single-host load's."""
    ref_root = fresh(template, tmp_path, "ref")
    ref = load_logs([str(ref_root)], LoaderConfig(), GEN_NOW)
    for nth in (1, 2):
        got_root = fresh(template, tmp_path, f"got{nth}")
        caplog.clear()
        runner = _Retried(hook=_DieAfterRecord(nth))
        with caplog.at_level(logging.WARNING):
            got = load_logs([str(got_root)], LoaderConfig(), GEN_NOW, partitions=runner)
        assert [os.path.basename(d) for d in runner.recorded] == ["orders-0"]
        warned = [r.getMessage() for r in caplog.records if EARLIER in r.getMessage()]
        assert tree_digest(got_root) == tree_digest(ref_root)
        if nth == 1:
            assert warned == [] and _digest(got, got_root) == _digest(ref, ref_root)
            continue
        assert len(warned) == 1 and warned[0].startswith(str(got_root / "orders-1") + ":")
        got_by, ref_by = _by_dir(got, got_root), _by_dir(ref, ref_root)
        assert {p: d for p, d in got_by.items() if p != "orders-1"} == {p: d for p, d in ref_by.items()
                                                                       if p != "orders-1"}


def test_stale_records_are_deleted_by_a_single_host_load_and_kept_by_a_dry_run(template: Path,
                                                                               tmp_path: Path) -> None:
    ref_root, got_root = fresh(template, tmp_path, "ref"), fresh(template, tmp_path, "got")
    ref = load_logs([str(ref_root)], LoaderConfig(), GEN_NOW)
    _stale_records(got_root)
    before = tree_digest(got_root)
    dry = load_logs([str(got_root)], LoaderConfig(dry_run=True), GEN_NOW)
    assert tree_digest(got_root) == before
    got = load_logs([str(got_root)], LoaderConfig(), GEN_NOW)
    assert [lg.impact for lg in dry.all_logs()] == [lg.impact for lg in got.all_logs()]
    assert _digest(got, got_root) == _digest(ref, ref_root)
    assert tree_digest(got_root) == tree_digest(ref_root)


def test_a_dry_run_records_nothing(template: Path, tmp_path: Path) -> None:
    """A dry run's attempts write no record (they write nothing): the retry's report is the load's all the same."""
    ref_root, got_root = fresh(template, tmp_path, "ref"), fresh(template, tmp_path, "got")
    ref = load_logs([str(ref_root)], LoaderConfig(dry_run=True), GEN_NOW)
    before = tree_digest(got_root)
    runner = _Retried(complete=2)
    got = load_logs([str(got_root)], LoaderConfig(dry_run=True), GEN_NOW, partitions=runner)
    assert runner.recorded == [] and tree_digest(got_root) == before
    assert _digest(got, got_root) == _digest(ref, ref_root)


def test_a_directory_at_the_records_name_stops_the_partition_before_any_write(template: Path, tmp_path: Path) -> None:
    part = sorted(p for p in fresh(template, tmp_path, "got").iterdir() if p.is_dir())[0]
    (part / ATTEMPT).mkdir()
    problem = partition_problem(RealDisk(), str(part), 0)
    assert problem is not None and problem.filename == str(part / ATTEMPT)
