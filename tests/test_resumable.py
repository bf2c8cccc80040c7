"""Resumable recovery (``persist_recovery_points`` / ``mploader load --resumable``, mploader.recovery.resume).

A resumable load leaves the data exactly as Kafka's load does and, in addition, each live partition's
``recovery-point-offset-checkpoint`` entry at its log end offset (the other entries kept); a load killed after a
checkpoint write, or a following Kafka-mode load, recovers only what was left.  The figures on a large broker
(bytes scanned by a killed and resumed load against an uninterrupted one) are perf/resumable.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mploader import LoaderConfig, TopicPartition, load_logs
from mploader.format.checkpoint import RECOVERY_POINT_CHECKPOINT, read_offset_checkpoint
from mploader.recovery import resume
from tests.crash_points import GEN_NOW, copy_tree, enumerate_kill_points, load_killed_at, recorded_load, small_broker
from tests.fingerprint import changed, tree_state

_ROOT = Path(__file__).resolve().parents[1]
INLINE = LoaderConfig(segment_scan_workers_per_data_dir=1)
RESUMABLE = INLINE.replace(persist_recovery_points=True)


@pytest.fixture
def every_partition_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint written in the loading thread after every partition: one order of changes."""
    monkeypatch.setattr(resume, "BACKGROUND", False)


def _checkpoint(data: Path) -> dict[TopicPartition, int]:
    return read_offset_checkpoint(data / RECOVERY_POINT_CHECKPOINT)


def test_a_resumable_load_is_kafkas_load_plus_the_recovery_points(tmp_path: Path) -> None:
    """Same files as the default load but for the checkpoint; every live partition's entry at its log end
    offset, sorted, an entry of a partition not on disk kept; a following Kafka-mode load recovers only the
    segment holding each recovery point (Kafka always reads it again)."""
    data = small_broker(tmp_path / "a", seed=2, clean=False)
    (data / RECOVERY_POINT_CHECKPOINT).write_text("0\n1\ngone 7 1234\n")  # every segment unflushed, one stranger
    copy_tree(tmp_path / "a", tmp_path / "b")
    kafka = load_logs([str(tmp_path / "b" / "data-0")], INLINE, now_ms=GEN_NOW)
    resumed = load_logs([str(data)], RESUMABLE, now_ms=GEN_NOW)
    diff = changed(tree_state(tmp_path / "b"), tree_state(tmp_path / "a"))
    assert diff == [f"data-0/{RECOVERY_POINT_CHECKPOINT}"], diff
    entries = _checkpoint(data)
    assert entries.pop(TopicPartition("gone", 7)) == 1234
    assert entries == {tp: lg.log_end_offset for tp, lg in resumed.logs.items()}
    lines = (data / RECOVERY_POINT_CHECKPOINT).read_text().splitlines()[2:]
    assert lines == sorted(lines, key=lambda line: (line.split()[0], int(line.split()[1])))
    assert all(lg.recovery_point == lg.log_end_offset for lg in resumed.logs.values())
    assert sum(len(lg.recovered_segments) for lg in kafka.logs.values()) > len(kafka.logs)  # it had work to do
    assert not (data / resume.RECOVERED).exists()
    again = load_logs([str(data)], INLINE, now_ms=GEN_NOW)
    for tp, lg in again.logs.items():
        holding = max(s.base_offset for s in lg.segments if s.base_offset <= lg.log_end_offset)
        assert lg.recovered_segments == [holding], (tp, lg.recovered_segments)
        assert lg.truncated_bytes == 0 and not lg.deleted_files


def test_a_dry_run_writes_no_checkpoint_and_reports_the_points_it_would(tmp_path: Path) -> None:
    data = small_broker(tmp_path / "a", seed=2, clean=False)
    before = tree_state(data)
    dry = load_logs([str(data)], RESUMABLE.replace(dry_run=True), now_ms=GEN_NOW)
    assert changed(before, tree_state(data)) == []
    assert all(lg.recovery_point == lg.log_end_offset for lg in dry.logs.values())


def test_every_checkpoint_kill_point_of_a_resumable_load(tmp_path: Path, every_partition_written: None) -> None:
    """The checkpoint's writes (syncfs, temporary file, its torn states, fsync, rename, directory fsync) are
    kill points like every other change: a rerun from any of them leaves the uninterrupted resumable load's
    bytes.  The loader's own recovery point is not compared: the rerun starts from the points the killed run
    wrote.  Only those points here (each costs syncs; the others are test_crash_safety.py's); perf/crash_points.py
    --resumable kills at all of them."""
    small_broker(tmp_path / "pristine", seed=1, clean=False, everything_unflushed=True)

    def checkpoint_point(op: str, path: str) -> bool:
        name = os.path.basename(path)
        return op == "syncfs" or RECOVERY_POINT_CHECKPOINT in name or name == resume.RECOVERED

    report = enumerate_kill_points("resumable, unclean, every segment unflushed", tmp_path / "pristine",
                                   tmp_path / "work", lambda w: [str(w / "data-0")], RESUMABLE, GEN_NOW,
                                   ignore=("loader_recovery_point",), select=checkpoint_point)
    print(report.summary())
    assert report.by_op.get("syncfs", 0) >= 4 and report.by_op.get("rename", 0) >= 4, report.summary()
    assert report.tried >= 20 and report.killed == report.tried and not report.nondeterministic, report.summary()
    assert not report.mismatches, [(m.point, m.op, m.path, m.why) for m in report.mismatches[:5]]


def test_a_load_killed_after_a_checkpoint_write_recovers_only_what_was_left(tmp_path: Path,
                                                                            every_partition_written: None) -> None:
    """SIGKILL right after the second write of the checkpoint and its record: the --resumable rerun recovers
    none of the two partitions written (mploader-recovered says their last segment is as that load left it)
    and all of the others; a Kafka-mode load instead reads the segment holding each new recovery point again."""
    data = small_broker(tmp_path / "pristine", seed=1, clean=False, everything_unflushed=True)
    copy_tree(tmp_path / "pristine", tmp_path / "ref")
    full = load_logs([str(tmp_path / "ref" / "data-0")], RESUMABLE, now_ms=GEN_NOW)
    copy_tree(tmp_path / "pristine", tmp_path / "probe")
    _, points = recorded_load([str(tmp_path / "probe" / "data-0")], RESUMABLE, GEN_NOW)
    renames = [k for k, (op, path) in enumerate(points, start=1)
               if op == "rename" and path.endswith(RECOVERY_POINT_CHECKPOINT)]
    assert len(renames) == len(full.logs)  # one write per partition here
    records = [k for k, (op, path) in enumerate(points, start=1)
               if op == "write" and path.endswith(resume.RECOVERED)]
    after_second = next(k for k, (_, path) in enumerate(points, start=1)
                        if k > records[1] and not path.endswith(resume.RECOVERED))
    assert load_killed_at(after_second, [str(data)], RESUMABLE, GEN_NOW)
    advanced = {tp for tp, rp in _checkpoint(data).items() if rp > 0}
    assert len(advanced) == 2
    copy_tree(tmp_path / "pristine", tmp_path / "kafka-mode")
    kafka_mode = load_logs([str(tmp_path / "kafka-mode" / "data-0")], INLINE, now_ms=GEN_NOW)
    rerun = load_logs([str(data)], RESUMABLE, now_ms=GEN_NOW)
    for tp, lg in rerun.logs.items():
        holding = max(s.base_offset for s in lg.segments if s.base_offset <= lg.log_end_offset)
        if tp in advanced:
            assert lg.recovered_segments == [], tp
            assert kafka_mode.logs[tp].recovered_segments == [holding], tp
        else:
            assert lg.recovered_segments == full.logs[tp].recovered_segments, tp
            assert kafka_mode.logs[tp].recovered_segments == full.logs[tp].recovered_segments, tp
    assert not (data / resume.RECOVERED).exists()
    assert changed(tree_state(tmp_path / "ref"), tree_state(tmp_path / "pristine")) == []
    assert rerun.stats.bytes_read < full.stats.bytes_read


@pytest.mark.parametrize("resumable", [True, False], ids=["resumable", "kafka-mode"])
def test_mploader_load_resumable(tmp_path: Path, resumable: bool) -> None:
    """``mploader load --resumable`` leaves each partition's checkpoint entry at the log end offset its ``--json``
    reports (and reports it as the recovery point); without the flag the checkpoint is left as it was, below."""
    data = small_broker(tmp_path / "a", seed=2, clean=False)
    before = _checkpoint(data)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    flag = ["--resumable"] if resumable else []
    proc = subprocess.run([sys.executable, "-m", "mploader", "load", str(data), *flag, "--workers", "1",
                           "--json", "--now-ms", str(GEN_NOW)], capture_output=True, text=True, env=env, cwd=_ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    logs = json.loads(proc.stdout)["logs"]
    log_ends = {TopicPartition(lg["topic"], lg["partition"]): lg["log_end_offset"] for lg in logs}
    assert len(log_ends) == sum(1 for p in data.iterdir() if p.is_dir()) == len(before)
    assert any(before[tp] < end for tp, end in log_ends.items()), "every recovery point already at the log end"
    if resumable:
        assert _checkpoint(data) == log_ends
        assert all(lg["recovery_point"] == lg["log_end_offset"] for lg in logs)
    else:
        assert _checkpoint(data) == before
