"""Every :class:`~mploader.runners.PartitionRunner` held to one contract (:class:`RunnerConformance`): the outcomes of
its jobs in order, each the one :func:`~mploader.recovery.job.load_partition` gives in this process, each told to the
events once; a partition's failure comes back as its outcome, never as the run's; the work accounted; and the
manager's load through it equals the reference load, file for file."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from mploader import LoaderConfig, load_logs
from mploader.disk import open_disk
from mploader.engine.inline import InlineEngine
from mploader.format.names import DirKind, TopicPartition
from mploader.recovery.job import PartitionJob
from mploader.result import LoadedLog, LoadStats
from mploader.runners import (
    NO_EVENTS,
    LoadingThreads,
    Outcome,
    PartitionRunner,
    PartitionsHere,
    ProcessPartitions,
    RunEvents,
)
from tests.crashy_worker import result_digest, tree_digest
from tests.kafkadir import NOW, B, PartitionBuilder, data_dir
from tests.spark_session import spark  # noqa: F401

CFG = LoaderConfig()


class Heard(RunEvents):
    """What a runner told: each job's outcomes (a job told twice shows here twice), the last segment count a job
    was told with."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: dict[int, list[Outcome]] = {}
        self.last_segments: dict[int, int] = {}

    def loaded(self, index: int, outcome: Outcome, seconds: float | None = None) -> None:
        with self.lock:
            self.outcomes.setdefault(index, []).append(outcome)

    def segments_left(self, index: int, worker: int, count: int) -> None:
        assert worker >= 0
        with self.lock:
            self.last_segments[index] = count


def _broker(root: Path) -> tuple[Path, list[PartitionJob]]:
    """An unclean data dir of 4 partitions (one with a torn tail to recover), and a job for each plus one whose
    directory does not exist (its load fails with an OSError)."""
    d = data_dir(root, "d1", clean=False)
    for p in range(3):
        PartitionBuilder(d, "t", p).segment(0, *(B(o) for o in range(30))).segment(30, *(B(o) for o in range(30, 45)))
    torn = PartitionBuilder(d, "u", 0).segment(0, *(B(o) for o in range(20)))
    with open(torn.file(0, ".log"), "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x14\x00\x00\x00\x30torn")
    jobs = [PartitionJob(str(d), str(d / name), TopicPartition(name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1])),
                         DirKind.LIVE, False, 0, 0, None, NOW) for name in ("t-0", "t-1", "t-2", "u-0")]
    jobs.append(PartitionJob(str(d), str(d / "gone-0"), TopicPartition("gone", 0), DirKind.LIVE, False, 0, 0, None,
                             NOW))
    return d, jobs


def _facts(lg: LoadedLog) -> tuple[object, ...]:
    return (lg.dir, lg.log_start_offset, lg.log_end_offset, lg.recovery_point,
            [(s.base_offset, s.size_bytes) for s in lg.segments], len(lg.recovered_segments), lg.truncated_bytes)


def _reference(root: Path) -> list[Outcome]:
    _, jobs = _broker(root)
    here = PartitionsHere(CFG)
    out = [here.load(job) for job in jobs]
    here.finish()
    return out


class RunnerConformance:
    """Subclass with :meth:`runner` to hold a runner to the contract."""

    @pytest.fixture(autouse=True)
    def _request(self, request: pytest.FixtureRequest) -> None:
        self.request = request

    def runner(self, disk_root: Path) -> PartitionRunner:
        raise NotImplementedError

    def test_outcomes_in_the_jobs_order_as_in_this_process(self, tmp_path: Path) -> None:
        expected = _reference(tmp_path / "ref")
        _, jobs = _broker(tmp_path / "got")
        heard = Heard()
        with self.runner(tmp_path / "got") as runner:
            got = runner.run(jobs, CFG, heard)
        assert len(got) == len(jobs)
        for want, have in zip(expected, got, strict=True):
            if isinstance(want, BaseException):
                assert isinstance(have, type(want)), have
            else:
                assert not isinstance(have, BaseException), have
                assert _facts(have[0])[1:] == _facts(want[0])[1:]  # the same facts, in its own copy
                assert have[1] == want[1]  # the bytes scanned

    def test_each_outcome_is_told_once_and_is_the_one_returned(self, tmp_path: Path) -> None:
        _, jobs = _broker(tmp_path)
        heard = Heard()
        with self.runner(tmp_path) as runner:
            got = runner.run(jobs, CFG, heard)
        told_all = set(heard.outcomes) == set(range(len(jobs)))
        assert all(len(v) == 1 for v in heard.outcomes.values())
        for i, told in heard.outcomes.items():
            if isinstance(got[i], BaseException):
                assert type(told[0]) is type(got[i])
            else:
                assert not isinstance(told[0], BaseException) and _facts(told[0][0]) == _facts(got[i][0])
        assert told_all or not heard.outcomes  # a runner tells of every job or of none
        assert all(n == 0 for n in heard.last_segments.values())  # a recovery told of ends at 0 segments left

    def test_a_partitions_failure_is_its_outcome_and_the_others_load(self, tmp_path: Path) -> None:
        _, jobs = _broker(tmp_path)
        with self.runner(tmp_path) as runner:
            got = runner.run(jobs, CFG)
        assert isinstance(got[-1], OSError)
        assert not any(isinstance(o, BaseException) for o in got[:-1])
        stats = LoadStats()
        runner.account(stats)
        assert runner.description and isinstance(runner.description, str)

    def test_the_managers_load_through_it_is_the_reference_load(self, tmp_path: Path) -> None:
        ref_dir, _ = _broker(tmp_path / "ref")
        got_dir = tmp_path / "got" / "d1"
        shutil.copytree(ref_dir, got_dir)
        ref = load_logs([str(ref_dir)], LoaderConfig(segment_scan_workers_per_data_dir=1), NOW)
        got = load_logs([str(got_dir)], LoaderConfig(), NOW, partitions=self.runner(tmp_path / "got"))
        assert result_digest(got, tmp_path / "got") == result_digest(ref, tmp_path / "ref")
        assert tree_digest(tmp_path / "got") == tree_digest(tmp_path / "ref")


class TestLoadingThreads(RunnerConformance):
    def runner(self, disk_root: Path) -> PartitionRunner:
        return LoadingThreads(InlineEngine(LoadStats()), open_disk(False), 2)


class TestProcessPartitionsForked(RunnerConformance):
    def runner(self, disk_root: Path) -> PartitionRunner:
        return ProcessPartitions(2, "fork")


@pytest.mark.slow
class TestProcessPartitionsSpawned(RunnerConformance):
    def runner(self, disk_root: Path) -> PartitionRunner:
        return ProcessPartitions(2, "spawn")


@pytest.mark.slow
class TestSparkPartitions(RunnerConformance):
    def runner(self, disk_root: Path) -> PartitionRunner:
        from mploader.spark.phase2 import SparkPartitions

        runner: PartitionRunner = SparkPartitions(self.request.getfixturevalue("spark"))
        return runner


def test_a_runner_must_say_where_it_loads_and_how_it_runs() -> None:
    class Nothing(PartitionRunner):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Nothing()  # type: ignore[abstract]

    class Here(PartitionRunner):
        description = "here"

        def run(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, events: RunEvents = NO_EVENTS
                ) -> list[Outcome]:
            return []

    stats = LoadStats()
    Here().account(stats)
    assert stats.loaded_by == "here"
