"""``mploader.spark``'s fleet jobs against the single-host commands, with a real ``local[2]`` session.

A generated fleet of three brokers (their own ``node.id``): one clean, one unclean, one unclean with injected
faults.  ``spark verify`` gives ``verify_logs``' report, ``spark load`` ``load_logs``' result and, with
``apply=True``, the same bytes on disk, broker by broker; the Parquet outputs read back with pandas.  Bad
input: an unreadable segment is a row, a partition in two dirs of one broker is Kafka's start-up failure, an
empty input an empty inventory, jobs cancelled mid-load change nothing of the outcome.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from mploader import LoaderConfig, StartupFailedError, load_logs  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from mploader.verify import verify_logs  # noqa: E402
from tests.crashy_worker import result_digest, tree_digest  # noqa: E402
from tests.spark_session import spark  # noqa: E402, F401

NOW = 1_730_000_000_000 + 600_000
_BASE = GeneratorConfig(data_dirs=2, topics=2, partitions_per_topic=2, total_bytes=400_000, segment_bytes=32 * 1024,
                        batch_bytes=4096, records_per_batch=8, faults=0, seed=21)
FLEET = {  # broker directory -> its generator config
    "b1": _BASE.replace(node_id=1, clean_shutdown=True),
    "b2": _BASE.replace(node_id=2, seed=22),
    "b3": _BASE.replace(node_id=3, seed=23, faults=8),
}


@pytest.fixture(scope="module")
def fleet_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet-template")
    for name, cfg in FLEET.items():
        generate(root / name, cfg)
    return root


def fresh(template: Path, tmp_path: Path, label: str) -> Path:
    dest = tmp_path / label
    subprocess.run(["cp", "-a", "--sparse=always", str(template), str(dest)], check=True)
    return dest


def data_dirs(root: Path) -> list[str]:
    return [str(d) for b in sorted(FLEET) for d in sorted((root / b).glob("data-*"))]


def without_seconds(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "stats"}


def spark_tasks_done(session: Any, job_group: str) -> int:
    """The tasks Spark completed for a job group, every one of its jobs succeeded (0: no job ran)."""
    tracker = session.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(job_group)]
    assert all(j is not None and j.status == "SUCCEEDED" for j in jobs), jobs
    stages = [tracker.getStageInfo(s) for j in jobs if j is not None for s in j.stageIds]
    return sum(s.numCompletedTasks for s in stages if s is not None)


def spark_jobs(session: Any, job_groups: tuple[str, ...]) -> list[int]:
    """The Spark jobs run in each of ``job_groups``."""
    return [len(session.sparkContext.statusTracker().getJobIdsForGroup(g)) for g in job_groups]


def test_spark_verify_is_verify_logs_broker_by_broker(spark, fleet_template: Path) -> None:  # noqa: F811
    from mploader.spark import fleet

    run = fleet.verify(spark, data_dirs(fleet_template), LoaderConfig(), now_ms=NOW)
    assert [sorted(os.path.basename(os.path.dirname(d)) for d in dirs) for dirs, _ in run.reports] == \
        [["b1", "b1"], ["b2", "b2"], ["b3", "b3"]]
    for dirs, report in run.reports:
        assert without_seconds(report.to_json()) == without_seconds(verify_logs(dirs, now_ms=NOW).to_json())
    # one Spark job for every dir's audits, one for every broker's prediction
    assert spark_jobs(spark, run.job_groups) == [1, 1] and run.spark_jobs == 2
    merged = run.report
    assert not merged.healthy and len(merged.data_dirs) == 6
    inventory = run.tables.inventory.toPandas()
    assert len(inventory) == sum(len(p.segments) for p in merged.partitions) == run.tables.inventory_rows
    invalid = inventory[inventory.crc == "invalid"]
    assert len(invalid) > 0 and set(invalid.data_dir.str.contains("/b3/")) == {True}
    summary = run.tables.summary.toPandas()
    assert len(summary) == len(merged.partitions)
    assert (summary.healthy == [p.healthy for p in merged.partitions]).all()


def test_spark_load_applies_exactly_load_logs(spark, fleet_template: Path, tmp_path: Path) -> None:  # noqa: F811
    from mploader.spark import fleet

    ref_root, got_root = fresh(fleet_template, tmp_path, "ref"), fresh(fleet_template, tmp_path, "spark")
    refs, ref_stats = {}, {}
    for b in sorted(FLEET):
        dirs = [str(d) for d in sorted((ref_root / b).glob("data-*"))]
        ref = load_logs(dirs, LoaderConfig(segment_scan_workers_per_data_dir=1), now_ms=NOW)
        refs[b] = result_digest(ref, ref_root)
        ref_stats[b] = (ref.stats.segments_scanned, ref.stats.bytes_read)
    dry = fleet.load(spark, data_dirs(got_root), LoaderConfig(), now_ms=NOW)
    assert tree_digest(got_root) == tree_digest(fleet_template), "a dry run changed files"
    loaded = fleet.load(spark, data_dirs(got_root), LoaderConfig(), apply=True, now_ms=NOW)
    assert tree_digest(got_root) == tree_digest(ref_root)
    for (dirs, result), (_, dry_result) in zip(loaded.results, dry.results):
        b = os.path.basename(os.path.dirname(dirs[0]))
        assert not isinstance(result, StartupFailedError) and not isinstance(dry_result, StartupFailedError)
        assert result_digest(result, got_root) == refs[b]
        # what the tasks scanned reaches the stats, as an inline load's does
        assert (result.stats.segments_scanned, result.stats.bytes_read) == ref_stats[b]
        assert (result.stats.scan_seconds > 0) == (ref_stats[b][0] > 0)
        assert [lg.impact for lg in dry_result.all_logs()] == [lg.impact for lg in result.all_logs()]
    assert any(n > 0 for n, _ in ref_stats.values())  # some broker of the fleet recovers segments
    for run in (dry, loaded):  # each broker's partitions were loaded by Spark tasks, not in the driver: one job
        assert [(r.executor_partitions > 0, r.driver_partitions) for r in run.engines] == [(True, 0)] * len(FLEET)
        assert spark_jobs(spark, run.job_groups) == [1] and run.spark_jobs == 1
        assert spark_tasks_done(spark, run.job_groups[0]) > 0
    _rows_are_the_drivers_own(spark, dry)
    _rows_are_the_drivers_own(spark, loaded)
    out = loaded.tables.write(tmp_path / "out")
    import pandas as pd

    summary, inventory = pd.read_parquet(out[1]), pd.read_parquet(out[0])
    logs = [lg for _, r in loaded.results if not isinstance(r, StartupFailedError) for lg in r.all_logs()]
    assert len(summary) == len(logs) and summary.records_removed.sum() == sum(lg.impact.records_removed for lg in logs)
    assert len(inventory) == sum(len(lg.segments) for lg in logs)
    assert set(inventory.crc) <= {"recovered", "not checked"} and (inventory.crc == "recovered").any()


def _rows_are_the_drivers_own(spark, run) -> None:  # noqa: ANN001, F811
    """The history rows the tasks made of the partitions they loaded are those the driver would make of the
    results; the rows of a broker whose result keeps no partition (Kafka refused to start it) are dropped."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from mploader.spark.output import load_tables
    from mploader.spark.rows import PartitionRows

    logs = sum(len(r.all_logs()) for _, r in run.results if not isinstance(r, StartupFailedError))
    assert run.tables.made_by == {"executors": logs, "driver": 0}
    nothing = PartitionRows.concat([])  # every row made here
    here = load_tables(spark, run.results, run.tables.run, nothing)
    assert here.made_by == {"executors": 0, "driver": logs}
    assert here.inventory_table.equals(run.tables.inventory_table) and here.inventory_table.num_rows > 0
    assert here.summary_table.equals(run.tables.summary_table)
    theirs = PartitionRows.of([lg for _, r in run.results for lg in r.all_logs()], {})  # as the tasks made them
    (first, result), *rest = run.results
    refused = StartupFailedError(first[0], "IllegalStateException", "refused by the test")
    mixed = load_tables(spark, [(first, refused), *rest], run.tables.run, theirs)
    assert mixed.made_by == {"executors": logs - len(result.all_logs()), "driver": 0}
    kept = mixed.inventory_table.filter(pc.invert(pc.is_in(mixed.inventory_table["data_dir"], pa.array(first))))
    assert mixed.inventory_table.num_rows == kept.num_rows == run.tables.inventory_rows - sum(
        len(lg.segments) for lg in result.all_logs())
    errors = mixed.summary_table.filter(pc.is_valid(mixed.summary_table["error"]))
    assert errors["data_dir"].to_pylist() == first and "refused by the test" in errors["error"][0].as_py()


def test_spark_load_removes_the_journal_its_tasks_wrote(spark, fleet_template: Path, tmp_path: Path) -> None:  # noqa: F811
    """A clean partition without a producer snapshot takes Kafka's shortcut, journaled by the task that loads it
    (``recovery.journal``); the driver removes the journal once the load has committed.  The driver's disk must not
    answer from listings of its own preflight: the files changed in another process (the journal was missed so)."""
    from mploader.spark import fleet

    ref_root, got_root = fresh(fleet_template, tmp_path, "ref"), fresh(fleet_template, tmp_path, "spark")
    for root in (ref_root, got_root):
        part = sorted(p for p in (root / "b1" / "data-0").iterdir() if p.is_dir())[0]
        for snapshot in part.glob("*.snapshot"):
            snapshot.unlink()
    dirs = [str(d) for d in sorted((ref_root / "b1").glob("data-*"))]
    load_logs(dirs, LoaderConfig(), now_ms=NOW)
    (_, result), = fleet.load(spark, [str(d) for d in sorted((got_root / "b1").glob("data-*"))], LoaderConfig(),
                              apply=True, now_ms=NOW).results
    assert not isinstance(result, StartupFailedError) and any(lg.journal for lg in result.all_logs())
    assert not list(got_root.rglob("mploader-journal"))
    assert tree_digest(got_root / "b1") == tree_digest(ref_root / "b1")


def test_bad_input(spark, fleet_template: Path, tmp_path: Path) -> None:  # noqa: F811
    from mploader.spark import fleet

    root = fresh(fleet_template, tmp_path, "bad")
    # a .log the executors cannot read (a directory in its place): a row that says so
    part = next(p for p in sorted((root / "b2" / "data-0").iterdir()) if p.is_dir())
    victim = sorted(part.glob("*.log"))[0]
    victim.unlink()
    victim.mkdir()
    # the same partition in both dirs of broker b1: Kafka refuses to start
    dup = next(p for p in sorted((root / "b1" / "data-0").iterdir()) if p.is_dir())
    shutil.copytree(dup, root / "b1" / "data-1" / dup.name, dirs_exist_ok=True)
    run = fleet.verify(spark, data_dirs(root), LoaderConfig(), now_ms=NOW)
    rows = run.tables.inventory.toPandas()
    bad = rows[rows.base_offset == int(victim.name[:20])]
    assert any(r.startswith("unreadable") for r in bad.reason.dropna())
    loaded = fleet.load(spark, data_dirs(root), LoaderConfig(), now_ms=NOW)
    by_broker = {os.path.basename(os.path.dirname(dirs[0])): r for dirs, r in loaded.results}
    assert isinstance(by_broker["b1"], StartupFailedError)
    with pytest.raises(StartupFailedError) as single:
        load_logs([str(d) for d in sorted((root / "b1").glob("data-*"))], LoaderConfig(dry_run=True), now_ms=NOW)
    assert by_broker["b1"].kafka_exception == single.value.kafka_exception == "IllegalStateException"
    summary = loaded.tables.summary.toPandas()
    assert summary.error.dropna().str.contains("IllegalStateException").any()
    b2 = [str(d) for d in sorted((root / "b2").glob("data-*"))]  # the unreadable segment: as on one host
    assert result_digest(by_broker["b2"], root) == result_digest(load_logs(b2, LoaderConfig(dry_run=True),
                                                                           now_ms=NOW), root)
    # empty input: empty tables, not an exception
    empty = fleet.verify(spark, [], LoaderConfig())
    assert empty.tables.inventory.count() == 0 and empty.tables.inventory_rows == 0
    (tmp_path / "empty-dir").mkdir()
    assert fleet.load(spark, [str(tmp_path / "empty-dir")], LoaderConfig()).tables.inventory.count() == 0


def test_a_load_whose_jobs_are_cancelled_is_completed_by_a_rerun(spark, fleet_template: Path,  # noqa: F811
                                                                    tmp_path: Path) -> None:
    """Every Spark job cancelled as it starts (what a dying session does to them): the load fails with an error
    that says so, and a rerun completes it: every file is the reference's, and so is every log's final state
    (not what the rerun itself did: a partition a cancelled task had recovered has nothing left to recover)."""
    from mploader.spark import fleet
    from mploader.spark.phase2 import SparkJobFailed

    ref_root, got_root = fresh(fleet_template, tmp_path, "ref"), fresh(fleet_template, tmp_path, "cancel")
    dirs = [str(d) for d in sorted((ref_root / "b3").glob("data-*"))]
    got_dirs = [str(d) for d in sorted((got_root / "b3").glob("data-*"))]
    ref = load_logs(dirs, LoaderConfig(), now_ms=NOW)
    done = threading.Event()

    def cancel() -> None:
        while not done.is_set():
            spark.sparkContext.cancelAllJobs()
            done.wait(0.01)

    canceller = threading.Thread(target=cancel)
    canceller.start()
    try:
        with pytest.raises(SparkJobFailed, match="load again to complete"):
            fleet.load(spark, got_dirs, LoaderConfig(), apply=True, now_ms=NOW)
    finally:
        done.set()
        canceller.join()
    (_, result), = fleet.load(spark, got_dirs, LoaderConfig(), apply=True, now_ms=NOW).results
    assert not isinstance(result, StartupFailedError)

    def final(r: Any, root: Path) -> list[dict[str, Any]]:
        keep = ("topic", "partition", "kind", "log_start_offset", "recovery_point", "log_end_offset", "segments",
                "leader_epochs", "producers")
        return [{k: v for k, v in lg.items() if k in keep} for lg in result_digest(r, root)["logs"]]

    assert final(result, got_root) == final(ref, ref_root)
    assert tree_digest(got_root / "b3") == tree_digest(ref_root / "b3")


def test_cli_spark_verify_json_is_mploader_verify_json(spark, fleet_template: Path, tmp_path: Path,  # noqa: F811
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from mploader.cli.main import main

    dirs = [str(d) for d in sorted((fleet_template / "b3").glob("data-*"))]
    assert main(["verify", *dirs, "--json", "--now-ms", str(NOW)]) == 1
    single = json.loads(capsys.readouterr().out)
    assert main(["spark", "verify", *dirs, "--json", "--now-ms", str(NOW), "--out", str(tmp_path / "out")]) == 1
    fleet_doc = json.loads(capsys.readouterr().out)
    assert fleet_doc.pop("spark")["inventory_rows"] == single["summary"]["segments"]
    assert {k: v for k, v in fleet_doc.items() if k != "stats"} == {k: v for k, v in single.items() if k != "stats"}
    import pandas as pd

    assert len(pd.read_parquet(tmp_path / "out" / "summary")) == single["summary"]["partitions"]


def test_the_real_corpus_on_spark_is_the_single_host_outcome(spark, real_corpus_source: Path,  # noqa: F811
                                                             tmp_path: Path) -> None:
    """Every real data dir: spark verify = verify_logs, spark load --apply = load_logs (files and result), a
    broker Kafka refuses is refused alike."""
    from mploader.spark import fleet
    from tests.conftest import corpus_data_dirs, materialize_corpus

    ref_root = materialize_corpus(real_corpus_source, tmp_path / "ref")
    got_root = materialize_corpus(real_corpus_source, tmp_path / "got")
    # five real brokers (each Spark job costs ~1 s here: the whole corpus is the engine conformance test's)
    ref_dirs = [str(d) for d in corpus_data_dirs(ref_root)][:5]
    got_dirs = [str(d) for d in corpus_data_dirs(got_root)][:5]
    verified = fleet.verify(spark, got_dirs, LoaderConfig(), now_ms=NOW)
    for dirs, report in verified.reports:
        single = verify_logs(dirs, now_ms=NOW).to_json()
        assert without_seconds(report.to_json()) == without_seconds(single), dirs
    loaded = fleet.load(spark, got_dirs, LoaderConfig(), apply=True, now_ms=NOW)
    # dirs with the same meta.properties node.id are one broker (several real dirs share one: Kafka refuses them)
    assert sum(len(dirs) for dirs, _ in loaded.results) == len(ref_dirs) and len(loaded.results) >= 3
    assert any(not isinstance(result, StartupFailedError) for _, result in loaded.results)
    for dirs, result in loaded.results:
        ref_dir_list = [d.replace(str(got_root), str(ref_root)) for d in dirs]
        try:
            ref = load_logs(ref_dir_list, LoaderConfig(), now_ms=NOW)
        except StartupFailedError as e:
            assert isinstance(result, StartupFailedError) and result.kafka_exception == e.kafka_exception
            continue
        assert not isinstance(result, StartupFailedError), dirs
        assert result_digest(result, got_root) == result_digest(ref, ref_root)
    assert tree_digest(got_root) == tree_digest(ref_root)


def test_phase2_jobs_are_spread_by_bytes_one_bin_per_task(spark) -> None:  # noqa: F811
    """The jobs' Spark partitions are exactly the byte-balanced bins (one big partition directory alone, the
    small ones together), not what a range or hash repartition of their count would make."""
    from mploader.spark.tasks import binned_frame, pack

    sizes = [1000] + [10] * 30
    frame = binned_frame(spark, [(i, b"") for i in range(len(sizes))], sizes, "job long, spec binary", 4)
    got = [sorted(r.job for r in part) for part in frame.rdd.glom().collect()]
    assert got == pack(sizes, 4) and [0] in got
