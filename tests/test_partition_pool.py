"""Whole partitions loaded in worker processes (:class:`mploader.runners.ProcessPartitions`): the same
files and result as the inline load, on generated brokers with faults and on the real corpus; a worker that dies
is not a failed load; errors, log records, progress and the recovery points reach the parent as an inline
load's do."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

import mploader.load_plan as pp
import mploader.runners.here as here_mod
import mploader.runners.processes.groups as groups_mod
import mploader.runners.processes.pool as pool_mod
import mploader.runners.processes.worker as worker_mod
from mploader import LoaderConfig, StartupFailedError, load_logs
from mploader.disk.mutations import MutationHook
from mploader.engine import worker_start
from mploader.engine.plan import DirPlan
from mploader.format.names import DirKind, TopicPartition
from mploader.generate import GeneratorConfig, generate
from mploader.load_plan import LoadPlan, plan_scans
from mploader.metrics import REMAINING_LOGS_TO_RECOVER, REMAINING_SEGMENTS_TO_RECOVER, MetricsRegistry
from mploader.progress import DirProgress, Progress
from mploader.recovery.job import PartitionJob
from mploader.runners import NO_EVENTS, Outcome, PartitionRunner, ProcessPartitions, RunEvents
from mploader.runners.processes import groups_of
from tests.crashy_worker import result_digest, tree_digest
from tests.kafkadir import NOW
from tests.test_cli_operator import EXPECTED_IMPACT, _lossy_broker

BROKER = GeneratorConfig(data_dirs=2, topics=3, partitions_per_topic=4, total_bytes=3_000_000, segment_bytes=40_000,
                         seed=29, faults=8)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("partition-pool")
    generate(root, BROKER)
    return root


def fresh(template: Path, dest: Path) -> list[str]:
    subprocess.run(["cp", "-a", "--sparse=always", str(template), str(dest)], check=True)
    return [str(d) for d in sorted(dest.glob("data-*"))]


def load_both(template: Path, tmp_path: Path, runner: ProcessPartitions,
              cfg: LoaderConfig | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The inline load's and the runner's (result, files), each on its own copy."""
    cfg = cfg or LoaderConfig(segment_scan_workers_per_data_dir=1)
    ref_dirs, got_dirs = fresh(template, tmp_path / "ref"), fresh(template, tmp_path / "got")
    ref = load_logs(ref_dirs, cfg, NOW)
    got = load_logs(got_dirs, cfg, NOW, partitions=runner)
    assert got.stats.loaded_by == runner.description
    return ({"result": result_digest(ref, tmp_path / "ref"), "files": tree_digest(tmp_path / "ref")},
            {"result": result_digest(got, tmp_path / "got"), "files": tree_digest(tmp_path / "got")})


@pytest.mark.parametrize("workers", [1, 3])
def test_the_files_and_the_result_are_the_inline_loads(template: Path, tmp_path: Path, workers: int) -> None:
    ref, got = load_both(template, tmp_path, ProcessPartitions(workers))
    assert got == ref
    assert ref["result"]["stats"]["segments_recovered"] > 0 and ref["result"]["stats"]["bytes_truncated"] > 0


def test_the_stats_count_the_workers_scans_and_writes(template: Path, tmp_path: Path) -> None:
    """What the workers scanned and wrote is in the load's stats, as an inline load's is (not zeros)."""
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=1)
    ref = load_logs(fresh(template, tmp_path / "ref"), cfg, NOW).stats
    runner = ProcessPartitions(2)
    got = load_logs(fresh(template, tmp_path / "got"), cfg, NOW, partitions=runner).stats
    assert got.segments_scanned == ref.segments_scanned >= got.segments_recovered > 0
    assert got.scan_seconds > 0 and got.draft_seconds > 0 and got.write_seconds > 0
    assert got.write_seconds >= runner.work.write_seconds > 0  # the workers' and the parent's own
    assert got.worker_start == runner.start


def test_the_cpu_seconds_are_the_parents_own(template: Path, tmp_path: Path) -> None:
    """``seconds["cpu"]`` is the loading process's own CPU, not its workers'."""
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=1)
    inline = load_logs(fresh(template, tmp_path / "ref"), cfg, NOW).stats
    runner = ProcessPartitions(2)
    dirs = fresh(template, tmp_path / "got")
    cpu0 = time.process_time()
    pooled = load_logs(dirs, cfg, NOW, partitions=runner).stats
    own = time.process_time() - cpu0  # this process's CPU over the call, its children's not counted
    assert inline.seconds["cpu"] > 0 and 0 < pooled.seconds["cpu"] <= own
    # the parent waits while the workers load: its own CPU is below the wall time, which a sum with theirs need not be
    assert pooled.seconds["cpu"] < pooled.seconds["total"]
    assert runner.work.scan_seconds > 0


def test_a_dry_run_changes_nothing_and_reports_what_the_load_does(template: Path, tmp_path: Path) -> None:
    dirs = fresh(template, tmp_path / "dry")
    before = tree_digest(tmp_path / "dry")
    dry = load_logs(dirs, LoaderConfig(dry_run=True), NOW, partitions=ProcessPartitions(2))
    assert tree_digest(tmp_path / "dry") == before
    applied = load_logs(dirs, LoaderConfig(), NOW)
    assert [lg.impact for lg in sorted(dry.all_logs(), key=lambda lg: lg.dir)] == \
        [lg.impact for lg in sorted(applied.all_logs(), key=lambda lg: lg.dir)]


def test_the_real_corpus_is_the_inline_loads(real_corpus_source: Path, tmp_path: Path) -> None:
    from tests.conftest import corpus_data_dirs, materialize_corpus

    ref_root = materialize_corpus(real_corpus_source, tmp_path / "ref")
    got_root = materialize_corpus(real_corpus_source, tmp_path / "got")
    runner = ProcessPartitions(2)
    for ref_dir, got_dir in zip(corpus_data_dirs(ref_root), corpus_data_dirs(got_root), strict=True):
        try:
            ref = load_logs([str(ref_dir)], LoaderConfig(), NOW)
        except StartupFailedError as e:
            with pytest.raises(StartupFailedError) as got_error:
                load_logs([str(got_dir)], LoaderConfig(), NOW, partitions=runner)
            assert (got_error.value.kafka_exception, str(got_error.value).replace(str(got_root), "")) == \
                (e.kafka_exception, str(e).replace(str(ref_root), ""))
            continue
        got = load_logs([str(got_dir)], LoaderConfig(), NOW, partitions=runner)
        assert result_digest(got, got_root) == result_digest(ref, ref_root), got_dir
    assert tree_digest(got_root) == tree_digest(ref_root)


def _dies_in_workers(parent: int, victims: set[TopicPartition], marker: Path | None) -> Any:
    """A load_partition that kills its worker process (not the parent) at the start of a victim's load: always,
    or (``marker``) only the first time."""
    real = here_mod.load_partition

    def load(job: PartitionJob, *args: Any, **kwargs: Any) -> Any:
        if os.getpid() != parent and job.tp in victims:
            if marker is None:
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)
        return real(job, *args, **kwargs)

    return load


@pytest.mark.parametrize("always", [False, True])
def test_a_worker_that_dies_is_not_a_failed_load(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 always: bool, caplog: pytest.LogCaptureFixture) -> None:
    """Killed at a partition's start once: a new worker takes its place and the partition goes to another.
    Killed every time in a worker: the parent loads it.  Either way the load's outcome is the inline load's, and
    the warning says which worker died, how, and while loading what."""
    victims = {TopicPartition("payments.v1", 2)}  # generate's names
    assert any((template / d / "payments.v1-2").is_dir() for d in ("data-0", "data-1"))
    marker = None if always else tmp_path / "died-once"
    monkeypatch.setattr(here_mod, "load_partition", _dies_in_workers(os.getpid(), victims, marker))
    monkeypatch.setattr(groups_mod, "GROUPS_PER_WORKER", 64)  # a group a partition: the victim's is its own
    runner = ProcessPartitions(2, start="fork")  # forked: the workers have the patched load_partition
    with caplog.at_level(logging.WARNING, logger="mploader.runners.processes"):
        ref, got = load_both(template, tmp_path, runner)
    assert got == ref
    assert runner.worker_deaths == (2 if always else 1)
    assert runner.loaded_in_parent == (1 if always else 0)  # the victim's group: one partition there
    died = [r.getMessage() for r in caplog.records if "partition-loading worker" in r.getMessage()]
    assert len(died) == runner.worker_deaths and all("killed by SIGKILL while loading payments.v1-2" in m
                                                     for m in died), died
    assert died[-1].endswith("loads them itself" if always else "gives them to another")
    assert marker is None or marker.exists()


@pytest.mark.parametrize("starts", [0, 1])
def test_a_worker_that_cannot_start_is_not_a_failed_load(template: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, starts: int,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """fork() fails (EAGAIN: a process limit) for every worker after the first ``starts``: the workers that
    started load every partition, or, where none did, the parent does; the outcome is the inline load's, and one
    warning says so."""
    real = pool_mod._Worker.__init__
    tried: list[int] = []

    def init(self: Any, start: str, number: int, mutations: MutationHook) -> None:
        tried.append(1)
        if len(tried) > starts:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        real(self, start, number, mutations)

    monkeypatch.setattr(pool_mod._Worker, "__init__", init)
    runner = ProcessPartitions(3)
    with caplog.at_level(logging.WARNING, logger="mploader.runners.processes"):
        ref, got = load_both(template, tmp_path, runner)
    assert got == ref
    assert runner.loaded_in_parent == (0 if starts else ref["result"]["stats"]["partitions"])
    warned = [r.getMessage() for r in caplog.records if "cannot start" in r.getMessage()]
    assert len(warned) == 1 and warned[0].endswith("going on with 1" if starts else "the parent loads the partitions")


def test_a_partition_that_fails_start_up_fails_the_load_as_inline(tmp_path: Path) -> None:
    """The same partition in two data dirs (Kafka refuses to start), and a partition whose .log cannot be read
    (an IOException: its dir goes offline): the same error, the same offline dir."""
    for label in ("ref", "got"):
        root = tmp_path / label
        generate(root, BROKER.replace(faults=0, seed=31))
        dup = next(p for p in sorted((root / "data-0").iterdir()) if p.is_dir())
        shutil.copytree(dup, root / "data-1" / dup.name, dirs_exist_ok=True)
    errors = []
    for label, runner in (("ref", None), ("got", ProcessPartitions(2))):
        with pytest.raises(StartupFailedError) as e:
            load_logs([str(d) for d in sorted((tmp_path / label).glob("data-*"))], LoaderConfig(), NOW,
                      partitions=runner)
        errors.append((e.value.kafka_exception, str(e.value).replace(str(tmp_path / label), "<root>")))
    assert errors[0] == errors[1] and errors[0][0] == "IllegalStateException"
    refusals = []  # a .log that is a directory: refused by the preflight (docs/loading.md §18), the same
    for label, runner in (("ref", None), ("got", ProcessPartitions(2))):
        root = tmp_path / f"{label}-dir"
        generate(root, BROKER.replace(faults=0, seed=32, data_dirs=1))
        part = next(p for p in sorted((root / "data-0").iterdir()) if p.is_dir())
        victim = sorted(part.glob("*.log"))[-1]
        victim.unlink()
        victim.mkdir()
        with pytest.raises(StartupFailedError, match="a directory stands where a file belongs") as e:
            load_logs([str(root / "data-0")], LoaderConfig(), NOW, partitions=runner)
        refusals.append(str(e.value).replace(str(root), "<root>"))
    assert refusals[0] == refusals[1]


def test_an_oserror_takes_the_partitions_dir_offline_as_inline(template: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import mploader.runners.threads as threads_mod

    real = here_mod.load_partition

    def load(job: PartitionJob, *args: Any, **kwargs: Any) -> Any:
        if job.tp == TopicPartition("orders", 1):
            raise OSError(5, "Input/output error", job.dir)
        return real(job, *args, **kwargs)

    monkeypatch.setattr(here_mod, "load_partition", load)
    monkeypatch.setattr(threads_mod, "load_partition", load)
    offline = []
    for label, runner in (("ref", None), ("got", ProcessPartitions(2, start="fork"))):  # forked: patched
        result = load_logs(fresh(template, tmp_path / label), LoaderConfig(), NOW, partitions=runner)
        offline.append((sorted(d.replace(str(tmp_path / label), "") for d in result.offline_dirs),
                        sorted(str(tp) for tp in result.logs)))
    assert offline[0] == offline[1] and len(offline[0][0]) == 1 and "orders-1" not in offline[0][1]


def test_log_records_progress_and_metrics_reach_the_parent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d, _ = _lossy_broker(tmp_path)
    seen: list[DirProgress] = []
    loaded: list[str] = []

    class Watch(Progress):
        def update(self, figures: DirProgress) -> None:
            seen.append(figures)

        def partition_done(self, data_dir: str, partition: str) -> None:
            loaded.append(partition)

    metrics = MetricsRegistry()
    with caplog.at_level(logging.INFO, logger="mploader"):
        result = load_logs([str(d)], LoaderConfig(), NOW, partitions=ProcessPartitions(2), progress=Watch(),
                           metrics=metrics)
    orders = next(lg for lg in result.all_logs() if lg.topic == "orders")
    assert orders.impact.to_json() == EXPECTED_IMPACT
    records = [r for r in caplog.records if r.name.startswith("mploader.recovery")]
    assert records and all(r.process != os.getpid() for r in records)  # made in the workers, logged here
    assert any("orders-3" in r.getMessage() and r.levelno == logging.WARNING for r in records), caplog.text
    manager = [r.getMessage() for r in caplog.records if r.name == "mploader.manager"]  # LogManager's lines, as inline
    assert any(m.startswith("Attempting recovery of 2 logs from") for m in manager), manager
    assert sum(m.startswith(f"Completed load of Log(dir={d}/") for m in manager) == 2, manager
    assert sorted(loaded) == ["orders-3", "quiet-0"] and seen[-1].partitions_done == 2
    assert seen[-1].bytes_done == result.stats.bytes_read > 0 and seen[-1].segments_done > 0  # what they scanned
    assert metrics.values_of(REMAINING_LOGS_TO_RECOVER, dir=str(d)) == [2, 1, 0]
    assert not [k for k in metrics.current() if k[0] == REMAINING_LOGS_TO_RECOVER]  # removed at the end


@pytest.mark.parametrize("every", [0.0, worker_mod.SEGMENTS_EVERY_SECONDS])
def test_the_workers_report_kafkas_remaining_segments_as_recovery_threads_do(template: Path, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch,
                                                                              every: float) -> None:
    """remainingSegmentsToRecover{dir, threadNum}: a gauge per data dir and worker, set as the worker's partitions
    recover and removed at the end.  Sent at every segment, its values are the inline load's recovery thread's;
    at most one each ``SEGMENTS_EVERY_SECONDS``, still each partition's first count and its 0."""
    monkeypatch.setattr(worker_mod, "SEGMENTS_EVERY_SECONDS", every)  # forked workers inherit it
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=1)
    values: dict[str, list[int]] = {}
    for label, runner in (("ref", None), ("got", ProcessPartitions(2, "fork"))):
        metrics = MetricsRegistry()
        load_logs(fresh(template, tmp_path / label), cfg, NOW, partitions=runner, metrics=metrics)
        events = [e for e in metrics.history if e.name == REMAINING_SEGMENTS_TO_RECOVER]
        values[label] = sorted(e.value for e in events if e.kind == "set" and e.value is not None)
        assert not [k for k in metrics.current() if k[0] == REMAINING_SEGMENTS_TO_RECOVER]  # removed at the end
        if runner is not None:
            assert {dict(e.tags)["threadNum"] for e in events} <= {"0", "1"}
            assert {dict(e.tags)["dir"] for e in events} == {str(tmp_path / label / f"data-{i}") for i in (0, 1)}
    assert values["ref"] and max(values["ref"]) > 1
    if every == 0.0:
        assert values["got"] == values["ref"]
    else:
        assert values["got"].count(0) == values["ref"].count(0) and set(values["got"]) <= set(values["ref"])
        assert max(values["got"]) == max(values["ref"])


def test_an_interrupt_in_the_parent_kills_the_workers_before_it_returns(template: Path, tmp_path: Path) -> None:
    dirs = fresh(template, tmp_path / "int")

    class Interrupt(RunEvents):
        def loaded(self, index: int, outcome: Outcome, seconds: float | None = None) -> None:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        load_logs(dirs, LoaderConfig(), NOW, partitions=_Told(ProcessPartitions(2), lambda events: Interrupt()))
    left = [p for p in psutil.Process().children(recursive=True)  # (multiprocessing's own tracker, once spawned)
            if "resource_tracker" not in " ".join(p.cmdline())]
    assert left == []


def test_groups_start_with_the_costliest_partitions_and_share_the_cost() -> None:
    costs = [5, 100, 1, 40, 40, 3, 60, 1]
    groups = groups_of(costs, 2)
    assert sorted(i for g in groups for i in g) == list(range(len(costs)))
    assert groups[0][0] == 1 and [costs[i] for g in groups for i in g] == sorted(costs, reverse=True)
    share = sum(costs) / (2 * groups_mod.GROUPS_PER_WORKER)
    assert all(sum(costs[i] for i in g) <= share or len(g) == 1 for g in groups)
    assert groups_of([], 4) == [] and groups_of([0, 0], 2) == [[0, 1]]


def test_each_worker_takes_its_first_group_as_it_starts(template: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first worker loads while the next is forked (16 forks took 90 ms on 2 CPUs): started and given a group,
    one after the other; the load is the inline load's."""
    events: list[str] = []
    real = pool_mod._Worker

    class Recorded(real):  # type: ignore[misc, valid-type]
        def __init__(self, start: str, number: int, mutations: MutationHook) -> None:
            super().__init__(start, number, mutations)
            events.append(f"start {number}")
            send = self.conn.send

            def sent(obj: Any) -> None:
                if obj is not None:
                    events.append(f"group to {number}")
                send(obj)

            self.conn.send = sent  # type: ignore[method-assign]

    monkeypatch.setattr(pool_mod, "_Worker", Recorded)
    ref, got = load_both(template, tmp_path, ProcessPartitions(3, "fork"))
    assert got == ref
    assert events[:6] == ["start 0", "group to 0", "start 1", "group to 1", "start 2", "group to 2"], events


def test_workers_whose_pipe_breaks_before_their_first_group_leave_the_load_to_the_parent(
        template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A group that cannot be sent (the worker's pipe broken as it starts: it died idle) is not lost: another worker
    is started for it, and once more than twice the count have died so, the parent loads what is left.  The load
    is the inline load's."""
    real = pool_mod._Worker

    class Broken(real):  # type: ignore[misc, valid-type]
        def __init__(self, start: str, number: int, mutations: MutationHook) -> None:
            super().__init__(start, number, mutations)
            send = self.conn.send

            def broken(obj: Any) -> None:
                if obj is not None:
                    raise BrokenPipeError(32, "Broken pipe")
                send(obj)

            self.conn.send = broken  # type: ignore[method-assign]

    monkeypatch.setattr(pool_mod, "_Worker", Broken)
    runner = ProcessPartitions(2, "fork")
    with caplog.at_level(logging.WARNING, logger="mploader.runners.processes"):
        ref, got = load_both(template, tmp_path, runner)
    assert got == ref
    assert runner.loaded_in_parent == ref["result"]["stats"]["partitions"]
    assert runner.worker_deaths == 2 * 2 + 1


def test_the_parent_weighs_the_partitions_by_the_preflight_sizes(template: Path, tmp_path: Path) -> None:
    """Each unclean job carries its .log files' bytes and number as the preflight sized them, and its cost is what a
    listing of its directory would say (the parent lists no partition a second time); a clean one carries none."""
    seen: list[PartitionJob] = []

    class Seen(ProcessPartitions):
        def run(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, events: RunEvents = NO_EVENTS
                ) -> list[Outcome]:
            seen.extend(jobs)
            return super().run(jobs, cfg, events)

    dirs = fresh(template, tmp_path / "got")
    load_logs(dirs, LoaderConfig(), NOW, partitions=Seen(2, "fork"))
    unclean = [j for j in seen if not j.clean_shutdown]
    assert unclean and all(j.logs is not None for j in unclean)
    for job in unclean:  # the listing of the directory as it was (the template: the load changed the copy)
        before = str(template / Path(job.dir).relative_to(tmp_path / "got"))
        unsized = dataclasses.replace(job, logs=None, dir=before)
        assert groups_mod.partition_cost(job) == groups_mod.partition_cost(unsized) > 0
    for d in dirs:  # recovered now: shut down cleanly
        Path(d, ".kafka_cleanshutdown").touch()
    seen.clear()
    load_logs(dirs, LoaderConfig(), NOW, partitions=Seen(2, "fork"))
    assert seen and all(j.clean_shutdown and j.logs is None for j in seen)


def test_the_command_loads_whole_partitions_in_workers(tmp_path: Path) -> None:
    ref, _ = _lossy_broker(tmp_path / "ref")
    got, _ = _lossy_broker(tmp_path / "got")
    docs = []
    for d, flags in ((ref, ["--workers", "1"]), (got, ["--partition-workers", "2"])):
        out = subprocess.run([sys.executable, "-m", "mploader", "load", "--json", "--now-ms", str(NOW), *flags,
                              str(d)], capture_output=True, text=True)
        assert out.returncode == 4, out.stderr  # the lossy broker: acknowledged records lost (exit 4)
        doc = json.loads(out.stdout)
        docs.append(json.loads(json.dumps(doc["logs"]).replace(str(d), "<dir>")))
        if flags[0] == "--partition-workers":
            assert doc["stats"]["loaded_by"] == f"2 worker processes ({worker_start()}ed), whole partitions"
    assert docs[0] == docs[1]
    bad = subprocess.run([sys.executable, "-m", "mploader", "load", "--partition-workers", "2", "--max-read-rate",
                          "10MB", str(got)], capture_output=True, text=True)
    assert bad.returncode == 2 and "--max-read-rate" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "mploader", "load", "--partition-workers", "0", str(got)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--partition-workers must be >= 1" in bad.stderr


def test_a_resumable_load_interrupted_between_groups_is_completed_by_a_rerun(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """--resumable with partitions in workers: a partition's recovery point advances once its worker reported it
    (after its sync); interrupted after three partitions, exactly those three are advanced, and a rerun leaves
    the files an uninterrupted load leaves."""
    from mploader.format.checkpoint import RECOVERY_POINT_CHECKPOINT, read_offset_checkpoint
    from mploader.recovery import resume
    from tests.crash_points import GEN_NOW, copy_tree, small_broker

    monkeypatch.setattr(resume, "BACKGROUND", False)
    cfg = LoaderConfig(persist_recovery_points=True)
    data = small_broker(tmp_path / "pristine", seed=1, clean=False, everything_unflushed=True)
    copy_tree(tmp_path / "pristine", tmp_path / "ref")
    full = load_logs([str(tmp_path / "ref" / "data-0")], cfg, now_ms=GEN_NOW)
    assert len(full.logs) > 3
    reported: list[int] = []

    class ThreeThenInterrupt(RunEvents):
        def __init__(self, events: RunEvents) -> None:
            self.events = events

        def loaded(self, index: int, outcome: Outcome, seconds: float | None = None) -> None:
            if len(reported) == 3:
                raise KeyboardInterrupt
            reported.append(index)
            self.events.loaded(index, outcome, seconds)

    monkeypatch.setattr(groups_mod, "GROUPS_PER_WORKER", 64)  # a group a partition: reported one by one
    with pytest.raises(KeyboardInterrupt):
        load_logs([str(data)], cfg, now_ms=GEN_NOW, partitions=_Told(ProcessPartitions(1), ThreeThenInterrupt))
    advanced = {tp for tp, rp in read_offset_checkpoint(data / RECOVERY_POINT_CHECKPOINT).items() if rp > 0}
    assert len(advanced) == 3
    load_logs([str(data)], cfg, now_ms=GEN_NOW, partitions=ProcessPartitions(2))
    assert tree_digest(data) == tree_digest(tmp_path / "ref" / "data-0")


class _Told(PartitionRunner):
    """``inner``, its events told through ``through`` (made from the manager's events)."""

    def __init__(self, inner: PartitionRunner, through: Callable[[RunEvents], RunEvents]) -> None:
        self.inner, self.through = inner, through

    @property
    def description(self) -> str:
        return self.inner.description

    def run(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, events: RunEvents = NO_EVENTS) -> list[Outcome]:
        return self.inner.run(jobs, cfg, self.through(events))


def _plans(tasks: int) -> LoadPlan:
    """LoadPlan of ``tasks`` planned scans of 1 KB each."""
    return LoadPlan(planned_bytes=1000 * tasks, planned_segments=tasks)


def test_auto_loads_whole_partitions_where_the_inline_load_would_be_long_and_they_can_share_the_cpus() -> None:
    long = _plans(int(pp.AUTO_MIN_SECONDS / pp.SEGMENT_SECONDS) + 1)
    short = _plans(1)
    assert pp.inline_seconds(long, 2) >= pp.AUTO_MIN_SECONDS > pp.inline_seconds(short, 2)
    def workers(plans: LoadPlan, partitions: int, engine: int, cpus: int, start: str = "fork") -> int:
        return pp.auto_partition_workers(plans, partitions=partitions, engine_workers=engine, cpus=cpus, start=start)

    assert workers(long, 8, 1, 2) == 2
    assert workers(long, 3, 1, 16) == 3  # no more workers than partitions
    assert workers(long, 16, 16, 16) == 16  # a partition a CPU: beats the scanning pool
    assert workers(long, 4, 16, 16) == 0  # the scanning pool may use more CPUs
    assert workers(long, 1, 1, 16) == 0  # one partition: nothing to share
    assert workers(long, 8, 1, 1) == 0
    assert workers(short, 8, 1, 2) == 0  # not worth two forks
    assert workers(long, 8, 1, 2, "spawn") == 0  # nor two spawns
    clean = LoadPlan()  # a clean dir: no scans planned, its partitions' own steps
    assert workers(clean, int(pp.AUTO_MIN_SECONDS / pp.PARTITION_SECONDS) + 1, 1, 2) == 2


def _unclean_plans(template: Path) -> list[DirPlan]:
    """The template's data dirs as an unclean load plans them: every segment scanned (no recovery point)."""
    from tests.test_engine import _partitions_of

    return [DirPlan(str(d), False, _partitions_of(str(d)), {}) for d in sorted(template.glob("data-*"))]


@pytest.mark.parametrize("cpus", [2, 5, 12, 13])
def test_auto_knows_it_takes_workers_before_the_whole_plan_and_answers_as_with_it(
        template: Path, cpus: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """early_partition_workers: wherever it answers, auto_partition_workers on the whole plan answers the same; on
    unclean dirs with as many partitions as CPUs it always answers (the same estimate, counted as it goes), and it
    plans only as many partitions as the bar needs.
    The dirs it planned to their end are the plans plan_scans would make.
    The broker: 2 dirs, 12 partitions; bars from none to beyond its estimate."""
    plans = _unclean_plans(template)
    partitions = sum(len(p.partitions) for p in plans)
    cfg = LoaderConfig(segment_scan_workers_per_data_dir="auto")
    whole = plan_scans(cfg, plans)
    estimate = pp.inline_seconds(whole, partitions)
    planned: list[str] = []
    real = pp.partition_scans

    def counted(plan: DirPlan) -> Any:
        for sized in real(plan):
            planned.append(sized[1][0])
            yield sized

    monkeypatch.setattr(pp, "partition_scans", counted)
    bars = {0.0: 0, partitions * pp.PARTITION_SECONDS + 1e-9: 1, estimate / 2: None, estimate * 0.99: None,
            estimate: partitions, estimate * 1.01: partitions}  # -> the partitions planned, where known
    for bar, expected_planned in bars.items():
        monkeypatch.setattr(pp, "AUTO_MIN_SECONDS", bar)
        planned.clear()
        n, done = pp.early_partition_workers(plans, partitions, cpus=cpus, start="fork")
        expected = [pp.auto_partition_workers(whole, partitions, engine_workers=w, cpus=cpus, start="fork")
                    for w in (1, cpus)]
        if partitions < cpus:  # the whole plan decides
            assert (n, planned, done) == (0, [], {})
            continue
        assert expected == [n, n]
        assert (n > 0) == (bar <= estimate)  # the bar met exactly (the same sum as inline_seconds') counts
        if expected_planned is not None:
            assert len(planned) == expected_planned
        else:
            assert 0 < len(planned) < partitions or bar > estimate / 2
        for d, scans in done.items():
            assert scans == whole.planned[d]
    # auto_plans takes the dirs planned to their end as they are, and plans the others
    first = plans[0].data_dir
    assert plan_scans(cfg, plans, {first: whole.planned[first]}) == whole


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_auto_knows_it_before_the_whole_plan_beside_a_clean_dir(template: Path, start: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean dir beside an unclean one: early_partition_workers leaves it out of its count (plan_scans counts its
    scans only where its bound asks for a pool), so it may not answer where the whole plan takes workers, but
    wherever it answers, the whole plan answers the same; spawned workers' higher bar as well."""
    unclean, other = _unclean_plans(template)
    clean = dataclasses.replace(other, clean=True)
    plans = [clean, unclean]
    partitions = sum(len(p.partitions) for p in plans)
    whole = plan_scans(LoaderConfig(segment_scan_workers_per_data_dir="auto"), plans)
    spawn_start = pp.POOL_START_SECONDS["spawn"] if start == "spawn" else 0.0
    for bar in (0.0, 0.01, 0.02, 0.05, 0.1, 0.5):
        monkeypatch.setattr(pp, "AUTO_MIN_SECONDS", bar)
        n, done = pp.early_partition_workers(plans, partitions, cpus=4, start=start)
        assert clean.data_dir not in done
        if n:
            assert pp.auto_partition_workers(whole, partitions, engine_workers=4, cpus=4, start=start) == n == 4
        if bar + spawn_start <= partitions * pp.PARTITION_SECONDS:  # the partitions' own term is enough
            assert n == 4
        elif bar + spawn_start > pp.inline_seconds(whole, partitions):
            assert n == 0


def test_an_unwatched_default_load_takes_partition_workers_without_planning_every_partition(
        template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no one reading the progress, ``--workers auto`` above the bar plans in the parent only as many
    partitions as it needs to know that it takes partition workers (here: none, the partitions' own term being
    enough); the files and result are the inline load's."""
    monkeypatch.setattr(pp, "AUTO_MIN_SECONDS", 0.0)
    monkeypatch.setattr(pp, "usable_cpus", lambda: 2)
    planned: list[object] = []
    monkeypatch.setattr(pp, "partition_scans", lambda plan: planned.append(plan) or iter(()))
    monkeypatch.setattr(pp, "plan_segment_scans", lambda *a, **k: planned.append(a) or [])
    ref_dirs, got_dirs = fresh(template, tmp_path / "ref"), fresh(template, tmp_path / "got")
    ref = load_logs(ref_dirs, LoaderConfig(segment_scan_workers_per_data_dir=1), NOW)
    got = load_logs(got_dirs, LoaderConfig(worker_start="fork"), NOW)
    assert got.stats.loaded_by == ProcessPartitions(2, "fork").description
    assert planned == []
    assert result_digest(got, tmp_path / "got") == result_digest(ref, tmp_path / "ref")
    assert tree_digest(tmp_path / "got") == tree_digest(tmp_path / "ref")


def test_the_default_load_takes_whole_partitions_in_workers_where_auto_says(template: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``--workers auto`` on a broker above the bar: loaded by partition workers, the inline load's files and
    result, the planned bytes in the progress figures; under a read budget, or with a count, the engines."""
    monkeypatch.setattr(pp, "AUTO_MIN_SECONDS", 0.0)  # this small broker is above the bar
    monkeypatch.setattr(pp, "usable_cpus", lambda: 2)
    seen: list[DirProgress] = []

    class Watch(Progress):
        def update(self, figures: DirProgress) -> None:
            seen.append(figures)

    ref_dirs, got_dirs = fresh(template, tmp_path / "ref"), fresh(template, tmp_path / "got")
    ref = load_logs(ref_dirs, LoaderConfig(segment_scan_workers_per_data_dir=1), NOW)
    got = load_logs(got_dirs, LoaderConfig(worker_start="fork"), NOW, progress=Watch())  # (spawned: a higher bar)
    assert got.stats.loaded_by == ProcessPartitions(2, "fork").description
    assert result_digest(got, tmp_path / "got") == result_digest(ref, tmp_path / "ref")
    assert tree_digest(tmp_path / "got") == tree_digest(tmp_path / "ref")
    last = {f.data_dir: f for f in seen}
    assert all(f.bytes_total is not None and f.bytes_done == f.bytes_total > 0 for f in last.values()), last
    for cfg in (LoaderConfig(max_read_bytes_per_sec=10**12), LoaderConfig(segment_scan_workers_per_data_dir=2),
                LoaderConfig(segment_scan_workers_per_data_dir="adaptive")):
        other = load_logs(fresh(template, tmp_path / f"other-{len(seen)}-{id(cfg)}"), cfg.replace(dry_run=True), NOW)
        assert other.stats.loaded_by is None


def test_a_failure_found_in_a_worker_says_where_the_workers_had_written(tmp_path: Path) -> None:
    """An active .index longer than segment.index.bytes fails the load after recovery (docs/loading.md §6.9):
    the error names the directories the workers had changed, as an inline load's names its own."""
    from mploader.manager import written_dirs
    from tests.kafkadir import B, PartitionBuilder, name
    from tests.test_preflight import _three_dirs

    written = []
    for label, runner in (("ref", None), ("got", ProcessPartitions(2))):
        dirs = _three_dirs(tmp_path / label)
        pb = PartitionBuilder(dirs[1], "bad", 0).segment(0, *(B(o) for o in range(3)), indexes=False)
        pb.write(name(0, ".index"), bytes(128)).write(name(0, ".timeindex"), b"")
        with pytest.raises(StartupFailedError) as e:
            load_logs([str(d) for d in dirs], LoaderConfig(max_index_size=64), now_ms=NOW, partitions=runner)
        assert e.value.kafka_exception == "IllegalArgumentException"
        found = written_dirs(e.value)
        assert found is not None and str(pb.path) in found, found
        assert any("after the load had changed files" in n for n in e.value.__notes__)
        written.append(sorted(d.replace(str(tmp_path / label), "") for d in found))
    assert written[0] == written[1]


def test_a_worker_that_dies_after_its_answer_loses_nothing(template: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """A worker killed right after it sent its group's outcomes (the OOM killer's timing): they count, a new worker
    takes its place, the load is the inline load (before, the next group's send to it raised BrokenPipeError and
    failed the load)."""
    marker = tmp_path / "died-once"
    real = pool_mod.serve

    def serve(conn: Any, parent_pid: int, forked: bool, mutations: MutationHook) -> None:
        send = conn.send

        def send_then_die(obj: Any) -> None:
            send(obj)
            with contextlib.suppress(FileExistsError):
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                os.kill(os.getpid(), signal.SIGKILL)

        conn.send = send_then_die
        real(conn, parent_pid, forked, mutations)

    monkeypatch.setattr(pool_mod, "serve", serve)
    runner = ProcessPartitions(2, start="fork")
    with caplog.at_level(logging.WARNING, logger="mploader.runners.processes"):
        ref, got = load_both(template, tmp_path, runner)
    assert got == ref and marker.exists()
    assert runner.worker_deaths == 1 and runner.loaded_in_parent == 0
    # seen dead at once, or only once it had been sent its next group (given to another then, loaded once)
    assert "killed by SIGKILL after its last answer" in caplog.text or "the parent gives them to another" in caplog.text


class _TwoArguments(Exception):
    def __init__(self, what: str, where: int) -> None:
        super().__init__(f"{what} at {where}")


def test_an_exception_that_does_not_unpickle_comes_back_as_a_runtime_error_with_its_traceback(
        template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = here_mod.load_partition

    def load(job: PartitionJob, *args: Any, **kwargs: Any) -> Any:
        if job.tp == TopicPartition("orders", 1):
            raise _TwoArguments("a bug", 7)
        return real(job, *args, **kwargs)

    monkeypatch.setattr(here_mod, "load_partition", load)
    with pytest.raises(RuntimeError, match="_TwoArguments: a bug at 7") as e:
        load_logs(fresh(template, tmp_path / "bug"), LoaderConfig(), NOW, partitions=ProcessPartitions(2, "fork"))
    assert any("loading partitions:" in n and "raise _TwoArguments" in n for n in e.value.__notes__)


def test_a_partitions_cost_is_its_log_bytes_and_segments_after_an_unclean_shutdown_only(tmp_path: Path) -> None:
    """A clean load reads no ``.log`` (but where an index is missing): every partition weighs the same, and its
    directory is not even listed (a missing one costs the same)."""
    d = tmp_path / "orders-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(b"x" * 1000)
    (d / "00000000000000000100.log").write_bytes(b"x" * 500)
    (d / "00000000000000000000.index").write_bytes(b"x" * 4000)
    job = PartitionJob(str(tmp_path), str(d), TopicPartition("orders", 0), DirKind.LIVE, False, 0, 0, None, NOW)
    assert groups_mod.partition_cost(job) == 1500 + 2 * groups_mod.COST_PER_SEGMENT
    gone = dataclasses.replace(job, dir=str(tmp_path / "gone"))
    assert groups_mod.partition_cost(gone) == 0
    assert groups_mod.partition_cost(dataclasses.replace(job, clean_shutdown=True)) == groups_mod.COST_PER_SEGMENT
    assert groups_mod.partition_cost(dataclasses.replace(gone, clean_shutdown=True)) == groups_mod.COST_PER_SEGMENT


@pytest.mark.parametrize("by", ["runner", "auto"])
def test_the_journal_a_worker_wrote_for_kafkas_clean_shortcut_is_removed_as_inline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str) -> None:
    """A clean partition without a producer snapshot takes Kafka's shortcut, journaled where it is loaded
    (``recovery.journal``: in the worker); the parent removes the journal once the load has committed, which it
    can only see if its disk keeps no listing of its own preflight (kept by none with a runner; dropped by auto when
    it chooses workers)."""
    trees = []
    for label in ("ref", "got"):
        root = tmp_path / label
        generate(root, BROKER.replace(faults=0, seed=33, data_dirs=1, clean_shutdown=True))
        part = sorted(p for p in (root / "data-0").iterdir() if p.is_dir())[0]
        for snapshot in part.glob("*.snapshot"):
            snapshot.unlink()
        cfg, runner = LoaderConfig(segment_scan_workers_per_data_dir=1), None
        if label == "got" and by == "runner":
            runner = ProcessPartitions(2)
        elif label == "got":
            monkeypatch.setattr(pp, "AUTO_MIN_SECONDS", 0.0)
            monkeypatch.setattr(pp, "usable_cpus", lambda: 2)
            cfg = LoaderConfig(worker_start="fork")
        result = load_logs([str(root / "data-0")], cfg, NOW, partitions=runner)
        assert (result.stats.loaded_by is not None) is (label == "got")
        assert any(lg.journal for lg in result.all_logs())
        assert not list(root.rglob("mploader-journal"))
        trees.append(tree_digest(root))
    assert trees[0] == trees[1]
