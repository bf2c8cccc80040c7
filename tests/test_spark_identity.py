"""The right data or nothing (``mploader.spark.identity``): a Spark task that does not see the data the driver planned
fails before it reads or writes a byte, with a ``WrongDataError`` that names its host, the path and what differed,
never reported as a disk failure, an unreadable segment or an offline dir.

* The executor functions themselves (``load_rows``, ``scan_pieces``, ``audit_pieces``), run here on the Arrow
  batches the driver's side makes, after the data changed in the window between the driver's planning and the task:
  another broker's data dir at the path, a file replaced (another inode), no data dir; and the driver's answer to
  a segment that a running broker appended to after verify planned it: audited in the driver, no error.
* Through Spark (``local[2]``): a file replaced in that window (a runner that changes it before it starts its job).
* Executors that really see other data than the driver: their Python runs in a mount namespace of its own
  (``unshare``) where another broker's data dir, nothing, or another file is mounted at the planned path, and a host
  name of its own: ``spark load --apply``, its dry run and ``spark verify`` exit 1 with the message, and no file of
  either broker changed; then the same commands with the executors seeing the driver's data succeed.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from mploader import LoaderConfig, load_logs  # noqa: E402
from mploader.broker_config.meta import read_meta_properties  # noqa: E402
from mploader.engine.chunks import file_stat  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from mploader.recovery.job import PartitionJob  # noqa: E402
from mploader.runners import NO_EVENTS, Outcome, PartitionRunner, RunEvents  # noqa: E402
from mploader.scan import SegmentScan, SegmentTask, scan_segment  # noqa: E402
from mploader.scan.audit import AuditTask, audit_segment  # noqa: E402
from tests.crashy_worker import result_digest, tree_digest  # noqa: E402
from tests.spark_session import executor_python, spark  # noqa: E402, F401

pa = pytest.importorskip("pyarrow", reason="the spark extra is not installed (pip install -e '.[spark]')")

NOW = 1_730_000_000_000 + 600_000
_BROKER = GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=3, total_bytes=150_000, segment_bytes=32 * 1024,
                          batch_bytes=4096, records_per_batch=8, faults=3, seed=5)
HOST = "spark-worker-7"  # the host name of the executors that see other data (their UTS namespace's)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two unclean brokers (node.id 1 and 2, one data dir each) whose load recovers segments; their ``.lock`` is
    there already, so that a load that fails leaves each tree exactly as it was."""
    root = tmp_path_factory.mktemp("brokers")
    generate(root / "b1", _BROKER.replace(node_id=1))
    generate(root / "b2", _BROKER.replace(node_id=2, seed=6))
    for b in ("b1", "b2"):
        (root / b / "data-0" / ".lock").touch()
    return root


def fresh(template: Path, tmp_path: Path, label: str = "run") -> Path:
    dest = tmp_path / label
    subprocess.run(["cp", "-a", str(template), str(dest)], check=True)
    return dest


def digests(root: Path) -> dict[str, Any]:
    return {b: tree_digest(root / b) for b in ("b1", "b2")}


def replace_file(path: Path) -> None:
    """``path`` replaced by a copy of itself: the same bytes and mtime, another inode."""
    st = path.stat()
    copy = path.with_name(path.name + ".copy")
    shutil.copyfile(path, copy)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(copy, path)


def partitions(data_dir: Path) -> list[Path]:
    return sorted(p for p in data_dir.iterdir() if p.is_dir())


class _OneTask(PartitionRunner):
    """The jobs the manager planned for a runner on other hosts, given to one ``load_rows`` task in this process (the
    driver's Arrow batch in, outcome rows out) once ``between`` ran: the window between the planning and the task."""

    needs_planned_data = True
    description = "one Spark task's rows, in this process"

    def __init__(self, between: Callable[[Sequence[PartitionJob]], None] = lambda jobs: None) -> None:
        self.between = between

    def run(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, events: RunEvents = NO_EVENTS) -> list[Outcome]:
        from mploader.spark.phase2 import load_rows, recovered

        self.between(jobs)
        batch = pa.record_batch([pa.array([0] * len(jobs), pa.int64()), pa.array(range(len(jobs)), pa.int64()),
                                 pa.array([pickle.dumps(j) for j in jobs])], names=["seat", "job", "spec"])
        rows = pa.Table.from_batches(list(load_rows(pickle.dumps(cfg))([batch])))
        return recovered({0: (cfg, jobs)}, rows)[0][0]


def test_a_task_that_sees_another_brokers_data_dir_fails_before_it_reads_or_writes(template: Path,
                                                                                   tmp_path: Path) -> None:
    from mploader.spark.identity import WrongDataError

    root = fresh(template, tmp_path)
    b1 = root / "b1" / "data-0"
    before = digests(root)

    def swap(jobs: Sequence[PartitionJob]) -> None:  # b2's data dir where the driver planned b1's
        assert jobs and all(j.planned is not None and j.planned.files for j in jobs)
        b1.rename(root / "b1" / "planned")
        (root / "b2" / "data-0").rename(b1)

    with pytest.raises(WrongDataError) as failed:
        load_logs([str(b1)], LoaderConfig(), NOW, partitions=_OneTask(swap))
    message = str(failed.value)
    assert not isinstance(failed.value, OSError)
    assert f"on host {socket.gethostname()}, {b1} is not what the driver planned" in message
    assert "node.id 2 (the driver's: 1)" in message and "\n" not in message
    (root / "b1" / "data-0").rename(root / "b2" / "data-0")
    (root / "b1" / "planned").rename(b1)
    assert digests(root) == before  # neither broker's files: not b2's at b1's path, not b1's


def test_a_task_checks_every_partition_before_its_first_load(template: Path, tmp_path: Path) -> None:
    """The last partition's segment replaced by another file (another inode, the same bytes and mtime): the task
    fails before it recovers the partitions before it, which a load with the right data does recover."""
    from mploader.spark.identity import WrongDataError

    root = fresh(template, tmp_path)
    b1 = root / "b1" / "data-0"
    before = digests(root)
    victim = sorted(partitions(b1)[-1].glob("*.log"))[0]

    def replace(jobs: Sequence[PartitionJob]) -> None:
        assert jobs[-1].dir == str(victim.parent)
        replace_file(victim)

    with pytest.raises(WrongDataError, match=rf"{victim.parent} is not what the driver planned: file {victim.name}: "
                                             r"inode \d+ \(the driver's: \d+\)"):
        load_logs([str(b1)], LoaderConfig(), NOW, partitions=_OneTask(replace))
    assert digests(root) == before
    loaded = load_logs([str(b1)], LoaderConfig(), NOW, partitions=_OneTask())  # the data the driver planned
    assert not loaded.offline_dirs and loaded.stats.segments_recovered > 0
    assert digests(root)["b1"] != before["b1"]


def test_a_task_that_finds_no_data_dir_says_so_and_nothing_goes_offline(template: Path, tmp_path: Path) -> None:
    from mploader.spark.identity import WrongDataError

    root = fresh(template, tmp_path)
    b1 = root / "b1" / "data-0"
    with pytest.raises(WrongDataError, match=rf"{b1} is not what the driver planned: not there \(FileNotFoundError"):
        load_logs([str(b1)], LoaderConfig(dry_run=True), NOW,
                  partitions=_OneTask(lambda jobs: b1.rename(root / "b1" / "elsewhere")))


def _piece_batch(pieces: list[Any]) -> Any:
    from mploader.spark.tasks import PIECE_COLUMNS, piece_row

    names = [column.split()[0] for column in PIECE_COLUMNS.split(",")]
    return pa.RecordBatch.from_pylist([dict(zip(names, piece_row(p), strict=True)) for p in pieces])


def test_the_executor_side_of_scans_and_audits(template: Path, tmp_path: Path) -> None:
    """A piece whose data dir is not the driver's fails the task; one whose file is not the planned one is answered
    unread (the driver decides: tests below); the planned file is scanned and audited as ever, and a file the driver
    could not stat either is still the disk's error it was."""
    from mploader.spark.arrow import audits_from_arrow, scans_from_arrow
    from mploader.spark.identity import WrongDataError
    from mploader.spark.phase1 import audit_pieces, scan_pieces
    from mploader.spark.tasks import Piece

    root = fresh(template, tmp_path)
    b1 = root / "b1" / "data-0"
    log = sorted(partitions(b1)[0].glob("*.log"))[-1]
    base = int(log.name[:20])
    identity = read_meta_properties(str(b1))
    size = log.stat().st_size

    def piece(stat: Any, identity: Any = identity) -> Any:
        return Piece(0, str(log), base, 0, None, size, data_dir=str(b1), identity=identity, stat=stat)

    def scanned(p: Any) -> Any:
        return scans_from_arrow(pa.Table.from_batches(list(scan_pieces([_piece_batch([p])]))),
                                {0: SegmentTask(str(log), base)})[0][0]

    def audited(p: Any) -> Any:
        return audits_from_arrow(pa.Table.from_batches(list(audit_pieces([_piece_batch([p])]))))[0]

    planned = piece(file_stat(str(log)))
    scan = scanned(planned)
    assert isinstance(scan, SegmentScan) and scan.valid_bytes == scan_segment(SegmentTask(str(log), base)).valid_bytes
    assert audited(planned) == audit_segment(AuditTask(str(log), base))
    other = piece(file_stat(str(log)), read_meta_properties(str(root / "b2" / "data-0")))
    for executor_side in (scan_pieces, audit_pieces):
        with pytest.raises(WrongDataError, match="node.id 1 \\(the driver's: 2\\)"):
            list(executor_side([_piece_batch([other])]))
    replace_file(log)
    for answer in (scanned(planned), audited(planned)):
        assert isinstance(answer, WrongDataError)
        assert f"on host {socket.gethostname()}, {log} is not what the driver planned: inode" in str(answer)
    log.unlink()
    assert "not there (FileNotFoundError" in str(scanned(planned))
    unplanned = piece(None)  # the driver could not stat it either: the disk's error, as on one host
    assert isinstance(scanned(unplanned), FileNotFoundError)
    assert audited(unplanned).reason.startswith("unreadable")


def test_a_file_replaced_after_the_drivers_planning_fails_the_spark_job(spark: Any, template: Path,  # noqa: F811
                                                                        tmp_path: Path) -> None:
    from mploader.spark.jobs import SparkJobFailed
    from mploader.spark.phase2 import SparkPartitions

    class ReplaceFirst(SparkPartitions):
        """Replaces a file after the driver planned, before Spark's job."""

        def run(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, events: RunEvents = NO_EVENTS
                ) -> list[Outcome]:
            replace_file(victim)
            return super().run(jobs, cfg, events)

    root = fresh(template, tmp_path)
    b1 = root / "b1" / "data-0"
    victim = sorted(partitions(b1)[1].glob("*.log"))[-1]
    before = tree_digest(victim.parent)
    with pytest.raises(SparkJobFailed, match=rf"WrongDataError: on host {socket.gethostname()}, {victim.parent} is "
                                             rf"not what the driver planned: file {victim.name}: inode"):
        load_logs([str(b1)], LoaderConfig(), NOW, partitions=ReplaceFirst(spark))
    assert tree_digest(victim.parent) == before  # the other partitions' tasks may have recovered theirs


def test_a_segment_changed_since_the_driver_planned_it_is_audited_in_the_driver(template: Path,
                                                                              tmp_path: Path) -> None:
    """A running broker's active segment grows between the driver's planning and the executor's audit: the executor
    answers that it is not the planned file, and the driver, which sees it changed too, audits it itself (no
    WrongDataError); where the driver still sees the file as planned, the executor's WrongDataError is raised."""
    from mploader.spark.arrow import audits_from_arrow
    from mploader.spark.engine import audit_answer
    from mploader.spark.identity import WrongDataError
    from mploader.spark.phase1 import audit_pieces
    from mploader.spark.tasks import Piece

    root = fresh(template, tmp_path)
    b1 = root / "b1" / "data-0"
    log = sorted(partitions(b1)[0].glob("*.log"))[-1]

    def planned() -> Any:
        return Piece(0, str(log), int(log.name[:20]), 0, None, log.stat().st_size, data_dir=str(b1),
                     identity=read_meta_properties(str(b1)), stat=file_stat(str(log)))

    piece = planned()
    with open(log, "ab") as f:  # the broker appends
        f.write(b"\0" * 100)
    answer = audits_from_arrow(pa.Table.from_batches(list(audit_pieces([_piece_batch([piece])]))))[0]
    assert isinstance(answer, WrongDataError) and "size" in str(answer)
    assert audit_answer(answer, piece) is None  # changed here too: audited here
    with pytest.raises(WrongDataError):
        audit_answer(answer, planned())  # as planned here: the executor sees other data


# --------------------------------------------------------------------------------------------
# Executors that see other data than the driver (a mount namespace of their own)


def _can_unshare(directory: Path) -> bool:
    """Whether a process can get a mount and UTS namespace of its own (as root of a user namespace) and bind-mount
    ``directory`` there."""
    probe = f"mount --bind {shlex.quote(str(directory))} {shlex.quote(str(directory))} && hostname {HOST}"
    try:
        return subprocess.run(["unshare", "-rmu", "sh", "-c", probe], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@contextlib.contextmanager
def executors_seeing(session: Any, tmp_path: Path, binds: list[tuple[Path, Path]]) -> Iterator[None]:
    """While open, the executors' Python runs on host :data:`HOST` in a mount namespace where each ``(what, where)``
    of ``binds`` is mounted at ``where``: what a task placed on a host with other data at the paths sees."""
    if not _can_unshare(tmp_path):
        pytest.skip("no user and mount namespaces here (unshare -rmu): executors that see other data need them")
    mounts = " && ".join(f"mount --bind {shlex.quote(str(a))} {shlex.quote(str(b))}" for a, b in binds)
    script = f"hostname {HOST} && {mounts} && exec \"$0\" \"$@\""
    # a new name each time: Spark keeps a Python daemon per interpreter path, whose forks would see the old mounts
    wrapper = tmp_path / f"python-on-another-host-{len(list(tmp_path.glob('python-on-another-host-*')))}"
    wrapper.write_text(f"#!/bin/sh\nexec unshare -rmu sh -c {shlex.quote(script)} {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    with executor_python(session, wrapper):
        yield


def _spark_cli(command: str, dirs: list[Path], tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    """``mploader spark COMMAND DIR...``: its exit code and its --json-out document."""
    from mploader.cli.main import main

    doc = tmp_path / f"{command}-{len(list(tmp_path.iterdir()))}.json"
    out = tmp_path / "out"
    shutil.rmtree(out, ignore_errors=True)
    code = main(["spark", command, *map(str, dirs), "--out", str(out), "--now-ms", str(NOW), "--json-out", str(doc),
                 *extra])
    return code, json.loads(doc.read_text())


def test_executors_that_see_another_broker_load_and_verify_nothing(spark: Any, template: Path,  # noqa: F811
                                                                   tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = fresh(template, tmp_path)
    b1, b2 = root / "b1" / "data-0", root / "b2" / "data-0"
    before = digests(root)
    expected = [f"WrongDataError: on host {HOST}, {b1} is not what the driver planned: meta.properties:",
                "node.id 2 (the driver's: 1)"]
    with executors_seeing(spark, tmp_path, [(b2, b1)]):
        for command, extra in (("load", ("--apply",)), ("load", ()), ("verify", ())):
            code, doc = _spark_cli(command, [b1], tmp_path, *extra)
            said = capsys.readouterr()
            assert code == 1 and doc["error"]["exit_code"] == 1, (command, extra, doc)
            assert all(e in doc["error"]["message"] for e in expected), doc["error"]["message"]
            for wrong in ("offline", "OFFLINE", "unreadable"):
                assert wrong not in said.out + said.err + doc["error"]["message"], (command, extra)
            assert digests(root) == before, (command, extra)
    code, doc = _spark_cli("load", [b1], tmp_path, "--apply")  # the executors see the driver's data again
    assert code == 0, doc  # (a dir offline: 1)
    assert digests(root)["b1"] != before["b1"] and digests(root)["b2"] == before["b2"]


def test_executors_that_see_nothing_there_say_so(spark: Any, template: Path, tmp_path: Path) -> None:  # noqa: F811
    from mploader.spark import fleet
    from mploader.spark.jobs import SparkJobFailed

    root = fresh(template, tmp_path)
    b1 = root / "b1" / "data-0"
    empty = tmp_path / "empty"
    empty.mkdir()
    before = digests(root)
    with executors_seeing(spark, tmp_path, [(empty, b1)]):  # an empty dir at the path
        with pytest.raises(SparkJobFailed, match=rf"on host {HOST}, {b1} is not what the driver planned: "
                                                 r"meta.properties not there \(FileNotFoundError"):
            fleet.verify(spark, [str(b1)], LoaderConfig(), now_ms=NOW)
    with executors_seeing(spark, tmp_path, [(empty, b1.parent)]):  # no data dir at all
        with pytest.raises(SparkJobFailed, match=rf"{b1} is not what the driver planned: not there "
                                                 r"\(FileNotFoundError"):
            fleet.load(spark, [str(b1)], LoaderConfig(), now_ms=NOW)
        # --driver-fallback: the driver loads them, from its own view
        fallback = fleet.load(spark, [str(b1)], LoaderConfig(), now_ms=NOW,
                              policy=fleet.JobPolicy(driver_fallback=True))
    (_, result), = fallback.results
    assert result_digest(result, root) == result_digest(  # type: ignore[arg-type]
        load_logs([str(b1)], LoaderConfig(dry_run=True), now_ms=NOW), root)
    assert fleet.where_it_ran(fallback.engines) == {"on_executors": 0, "in_driver": _BROKER.partitions_per_topic}
    assert digests(root) == before


def test_executors_that_see_another_file_fail_the_scans_and_audits(spark: Any, template: Path,  # noqa: F811
                                                                   tmp_path: Path) -> None:
    """A segment the executors see as another file (another inode) while the driver sees it as planned: the driver
    raises the executors' WrongDataError, from verify's audits and from a load's Phase 1 scans on Spark."""
    from mploader.spark import fleet
    from mploader.spark.engine import SparkEngine
    from mploader.spark.identity import WrongDataError

    root = fresh(template, tmp_path)
    b1 = root / "b1" / "data-0"
    active = sorted(partitions(b1)[0].glob("*.log"))[-1]  # an unclean load scans it
    other = tmp_path / "other.log"
    shutil.copyfile(active, other)
    before = digests(root)
    pattern = rf"on host {HOST}, {active} is not what the driver planned: .*inode"  # raised by the driver
    with executors_seeing(spark, tmp_path, [(other, active)]):
        with pytest.raises(WrongDataError, match=pattern):
            fleet.verify(spark, [str(b1)], LoaderConfig(), now_ms=NOW, predict=False)
        with pytest.raises(WrongDataError, match=pattern):
            load_logs([str(b1)], LoaderConfig(dry_run=True), NOW,
                      engine=lambda stats, progress: SparkEngine(spark, stats, progress))
    assert digests(root) == before
