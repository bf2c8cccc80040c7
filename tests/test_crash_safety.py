"""Crash safety, proven by killing loads: at every change they make to disk, and at random moments.

The kill-point enumeration (tests/crash_points.py) SIGKILLs a forked child load at each point of an
uninterrupted load's changes (every write, torn write, cut, rename, delete, sync), reruns the load to completion
and compares every byte of the data dir and the final outcome the load reports with the uninterrupted load's.
The brokers here are small (the bigger enumerations, with their figures, are perf/crash_points.py).  Each test
prints its counts; docs/crash-safety.md says which orderings make them 0 and where Kafka's own order is not safe.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mploader import LoaderConfig, load_logs
from mploader.engine.cleanup import remove_orphaned_blocks
from mploader.format.checkpoint import CLEAN_SHUTDOWN_MARKER
from mploader.recovery import journal
from mploader.recovery.journal import JOURNAL
from tests.conftest import corpus_data_dirs
from tests.crash_points import (
    GEN_NOW,
    copy_tree,
    enumerate_error_points,
    enumerate_kill_points,
    final_outcome,
    load_killed_at,
    outcome_difference,
    recorded_load,
    small_broker,
)
from tests.crashy_worker import scan_workers
from tests.fingerprint import changed, tree_state

_ROOT = Path(__file__).resolve().parents[1]
INLINE = LoaderConfig(segment_scan_workers_per_data_dir=1)


def _assert_every_point_safe(report, minimum: int) -> None:  # type: ignore[no-untyped-def]
    print(report.summary())
    assert report.points >= minimum, f"fewer kill points than expected: {report.summary()}"
    assert report.killed == report.points, report.summary()
    assert not report.nondeterministic, f"children took another path at points {report.nondeterministic[:10]}"
    detail = "; ".join(f"point {m.point} ({m.op} {m.path}): {m.why}" for m in report.mismatches[:5])
    assert not report.mismatches, f"{report.summary()}: {detail}"


def _one_dir(work: Path) -> list[str]:
    return [str(work / "data-0")]


def test_every_kill_point_of_an_unclean_broker_with_faults(tmp_path: Path) -> None:
    """Every segment unflushed (no recovery-point checkpoint), faults of every kind: recovery cuts damaged
    segments and deletes the segments after them, rebuilds missing indexes, drops corrupt snapshots and stray
    files.  Also checks the order that makes the cut safe: the segments a cut condemns are gone before it."""
    small_broker(tmp_path / "pristine", seed=1, clean=False, everything_unflushed=True)
    report = enumerate_kill_points("unclean, every segment unflushed, 6 faults", tmp_path / "pristine",
                                   tmp_path / "work", _one_dir, INLINE, GEN_NOW)
    _assert_every_point_safe(report, 100)
    # the order, from the uninterrupted load's points: a .log cut comes after every deletion of a later .log
    copy_tree(tmp_path / "pristine", tmp_path / "work")
    _, points = recorded_load(_one_dir(tmp_path / "work"), INLINE, GEN_NOW)
    cuts_with_deletions = 0
    for i, (op, path) in enumerate(points):
        if op != "set-size" or not path.endswith(".log"):
            continue
        base = int(os.path.basename(path)[:20])
        later = [p for o, p in points if o == "delete" and p.endswith(".log")
                 and os.path.dirname(p) == os.path.dirname(path) and int(os.path.basename(p)[:20]) > base]
        after = [p for o, p in points[i:] if o == "delete" and p in later]
        assert not after, f"{path} was cut before the later segments {after} were deleted (a kill leaves a hole)"
        cuts_with_deletions += bool(later)
    assert cuts_with_deletions, "no cut deleted later segments: the data set no longer tests that order"


def test_every_kill_point_of_a_clean_broker_with_faults(tmp_path: Path) -> None:
    """A clean shutdown with missing, corrupt and truncated indexes, stray files, a corrupt snapshot, and two
    partitions without snapshots (Kafka's clean-start shortcut): the marker stays until the load is done, the
    load-time recoveries rename their rebuilt .index into place last, the shortcut is journaled."""
    small_broker(tmp_path / "pristine", seed=3, clean=True, faults=8, drop_snapshots=2)
    report = enumerate_kill_points("clean, 8 faults, 2 partitions without snapshots", tmp_path / "pristine",
                                   tmp_path / "work", _one_dir, INLINE, GEN_NOW)
    _assert_every_point_safe(report, 50)
    assert not list((tmp_path / "work").rglob(JOURNAL)), "a completed load left a journal behind"


def test_an_error_of_the_environment_at_every_point_of_an_unclean_broker_with_faults(tmp_path: Path) -> None:
    """At every point of an unclean load (every segment unflushed, faults that cut segments and delete later ones),
    each of EMFILE, EACCES, EIO, ENOSPC raised there as the system call raises it (docs/loading.md §18): the failed
    load changes no valid ``.log`` byte (Kafka's own cuts and deletions may be made already), completes or takes the
    data dir offline naming the file and the error, and a load without the fault reaches the uninterrupted
    outcome byte for byte."""
    small_broker(tmp_path / "pristine", seed=1, clean=False, everything_unflushed=True, total_bytes=100_000,
                 faults=4)
    report = enumerate_error_points("unclean, every segment unflushed, 4 faults, 100 kB", tmp_path / "pristine",
                                    tmp_path / "work", _one_dir, INLINE, GEN_NOW)
    print(report.summary())
    assert report.points >= 50 and report.by_op.get("set-size", 0) and report.by_op.get("delete", 0), report.summary()
    assert report.injected == report.tried * 4, report.summary()
    assert not report.nondeterministic, f"loads took another path at points {report.nondeterministic[:10]}"
    assert report.offline >= report.injected // 2, report.summary()
    _assert_no_mismatch(report)


def test_an_error_of_the_environment_at_every_point_of_a_clean_broker_taking_the_shortcut(tmp_path: Path) -> None:
    """The same for a clean broker two of whose partitions lost their snapshots (Kafka's clean-start shortcut, with
    mploader's journal): a dir an error of the environment takes offline keeps its marker, so the load after the
    fix is clean again and reaches the uninterrupted outcome (not the unclean one a deleted marker would give)."""
    small_broker(tmp_path / "pristine", seed=1, clean=True, drop_snapshots=2, total_bytes=100_000, faults=4)
    report = enumerate_error_points("clean, 2 partitions without snapshots, 100 kB", tmp_path / "pristine",
                                    tmp_path / "work", _one_dir, INLINE, GEN_NOW)
    print(report.summary())
    assert report.points >= 10 and report.injected == report.tried * 4, report.summary()
    _assert_no_mismatch(report)


def _assert_no_mismatch(report) -> None:  # type: ignore[no-untyped-def]
    detail = "; ".join(f"point {m.point} ({m.op} {m.path}, {m.errno}): {m.why}" for m in report.mismatches[:5])
    assert not report.mismatches, f"{report.summary()}: {detail}"


def test_a_load_time_recovery_fsyncs_its_indexes_before_renaming_the_index_into_place(tmp_path: Path) -> None:
    """After a power loss the marker of a clean load not yet committed is still there, and the next load, clean,
    trusts every ``.index`` it finds: a load-time recovery's rebuilt ``.index`` (pending) and ``.timeindex`` are
    fsynced after their last write and before the rename that puts the ``.index`` in place."""
    data = small_broker(tmp_path / "b", seed=3, clean=True, faults=8, drop_snapshots=2)
    _, points = recorded_load([str(data)], INLINE, GEN_NOW)
    renames = [k for k, (op, path) in enumerate(points) if op == "rename" and path.endswith(".index")
               and ("write", path + ".deleted") in points[:k]]
    assert renames, "no load-time recovery: the data set no longer has the case"
    for k in renames:
        index = points[k][1]
        for path in (index + ".deleted", index.removesuffix(".index") + ".timeindex"):
            last_write = max(i for i, (op, p) in enumerate(points[:k]) if op == "write" and p == path)
            assert ("fsync", path) in points[last_write:k], f"{path} is not durable before {index} is put in place"


@pytest.mark.parametrize("name", ["SharaWeil__kafka-0.11.0/data", "williamjie__kafakainfo/data",
                                  "williamjie__kafakainfo/history/3a48fb7/data"])
def test_every_kill_point_of_real_corpus_dirs(real_corpus: Path, tmp_path: Path, name: str) -> None:
    """Real brokers' data dirs (a clean 0.11 broker, an unclean 1.x one with its recovery point at 0, an
    earlier one with three partitions); the other corpus dirs have hundreds of points each: perf/crash_points.py."""
    source = next(d for d in corpus_data_dirs(real_corpus) if d.relative_to(real_corpus).as_posix() == name)
    report = enumerate_kill_points(name, source, tmp_path / "work", lambda w: [str(w)], INLINE, 1_800_000_000_000)
    _assert_every_point_safe(report, 10)


def test_every_kill_point_of_a_clean_empty_log_whose_snapshot_the_replay_deletes(real_corpus: Path,
                                                                                tmp_path: Path) -> None:
    """A clean KRaft broker's partition of one empty segment at offset 5 with a snapshot at 5 (the real corpus,
    ronem123's topic_transactions-0): the final producer-state rebuild replays (a snapshot is there), which
    deletes the snapshot (at the log start) and writes none; a rerun that found no snapshot would take the
    clean-start shortcut and write one.  The choice is journaled."""
    broker = next(d for d in corpus_data_dirs(real_corpus) if "ronem123" in str(d))
    data = tmp_path / "pristine"
    data.mkdir()
    for f in broker.iterdir():
        if f.is_file():
            copy_tree(f, data / f.name)
    copy_tree(broker / "topic_transactions-0", data / "topic_transactions-0")
    subprocess.run(["chmod", "-R", "u+w", str(data)], check=True)
    report = enumerate_kill_points("ronem123, topic_transactions-0 alone", data, tmp_path / "work",
                                   lambda w: [str(w)], INLINE, 1_800_000_000_000)
    _assert_every_point_safe(report, 8)
    assert any(op == "fsync" and os.path.basename(path) == JOURNAL for op, path in report.trace), \
        "no journal written: the data set no longer has the case"


def _interrupted_swap(data: Path, moved: bool) -> Path:
    """A compaction's swap left by a killed broker, in the first partition: its two middle segments rewritten as
    ``.swap`` files (here byte-equal copies), the old segments still there (``moved=False``: not yet deleted)
    or gone (``moved=True``: every file of the two renamed).  Returns the partition directory."""
    part = sorted(p for p in data.iterdir() if p.is_dir())[0]
    bases = sorted(p.name[:20] for p in part.glob("*.log"))
    assert len(bases) >= 4, f"{part}: too few segments for a swap of two"
    for base in bases[len(bases) // 2 - 1 : len(bases) // 2 + 1]:
        for f in part.glob(f"{base}.*"):
            if f.suffix in (".log", ".index", ".timeindex", ".txnindex"):
                if moved:
                    f.rename(f.with_name(f.name + ".swap"))
                else:
                    copy_tree(f, f.with_name(f.name + ".swap"))
    return part


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
@pytest.mark.parametrize("moved", [False, True], ids=["old-segments-kept", "old-segments-gone"])
def test_every_kill_point_of_completing_an_interrupted_swap(tmp_path: Path, clean: bool, moved: bool) -> None:
    """LogLoader.load completes a swap (compaction, split) that a killed broker left: it deletes the segment files
    in the swapped range, then renames every ``.swap``.  The ``.log.swap`` go first: an index renamed before its
    ``.log`` lies in the range of the ``.log.swap`` still there, and the next load deletes and rebuilds it (a
    rebuilt index differs from the swapped one).  Every point of the swapped partition is killed."""
    data = small_broker(tmp_path / "pristine", seed=3, clean=clean, faults=0)
    part = _interrupted_swap(data, moved)
    report = enumerate_kill_points(f"swap of two segments, clean={clean}, moved={moved}", tmp_path / "pristine",
                                   tmp_path / "work", _one_dir, INLINE, GEN_NOW,
                                   select=lambda op, path: os.path.dirname(path).endswith(os.sep + part.name))
    print(report.summary())
    renames = report.by_op.get("rename", 0)
    assert renames >= 6, f"{report.summary()}: the swap's renames are not there"
    assert report.killed == report.tried >= renames, report.summary()
    assert not report.nondeterministic, f"children took another path at points {report.nondeterministic[:10]}"
    detail = "; ".join(f"point {m.point} ({m.op} {m.path}): {m.why}" for m in report.mismatches[:5])
    assert not report.mismatches, f"{report.summary()}: {detail}"
    assert not list((tmp_path / "work").rglob("*.swap")), "a completed load left a swap"


def test_a_dry_run_writes_no_journal_and_a_stale_journal_is_dropped(tmp_path: Path) -> None:
    """The journal of Kafka's clean-start shortcut is never written by a dry run; one left under another
    marker (a broker ran since) is deleted and does not change the outcome."""
    data = small_broker(tmp_path / "b", seed=3, clean=True, faults=0, drop_snapshots=4)
    before = tree_state(data)
    load_logs([str(data)], INLINE.replace(dry_run=True), now_ms=GEN_NOW)
    assert changed(before, tree_state(data)) == []
    partition = next(p for p in data.iterdir() if p.is_dir())
    (partition / JOURNAL).write_text(json.dumps({"marker": "another marker", "shortcut": True}))
    reference = tmp_path / "reference" / data.name
    reference.parent.mkdir()
    copy_tree(data, reference)
    (reference / partition.name / JOURNAL).unlink()
    ref = load_logs([str(reference)], INLINE, now_ms=GEN_NOW)
    got = load_logs([str(data)], INLINE, now_ms=GEN_NOW)
    assert not (partition / JOURNAL).exists()
    assert changed(tree_state(reference), tree_state(data)) == []
    diff = outcome_difference(_by_name(final_outcome(ref)), _by_name(final_outcome(got)))
    assert diff is None, diff


@pytest.mark.parametrize("record_version", [2, 1])
def test_the_commit_deletes_journals_only_where_the_load_wrote_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   record_version: int) -> None:
    """Two of four partitions of a clean broker have no snapshot (the shortcut, journaled): the commit deletes
    those two journals and looks in no other partition directory (a stat each, on every clean load).  With
    record version 1 the producer-state rebuild writes the same snapshots whatever the choice: no journal."""
    data = small_broker(tmp_path / "b", seed=3, clean=True, faults=0, drop_snapshots=2)
    removed: list[str] = []
    remove = journal.remove
    monkeypatch.setattr(journal, "remove", lambda disk, d: (removed.append(d), remove(disk, d))[-1])
    result, points = recorded_load([str(data)], INLINE.replace(record_version=record_version), GEN_NOW)
    written = sorted(os.path.dirname(p) for op, p in points if op == "write" and p.endswith(JOURNAL))
    assert sorted(removed) == written == sorted(lg.dir for lg in result.all_logs() if lg.journal)
    assert len(written) == (2 if record_version == 2 else 0) and len(result.logs) == 4
    assert not list(data.rglob(JOURNAL))


def _by_name(outcome: dict[str, Any]) -> dict[str, Any]:
    """An outcome whose paths are names (two copies of a data dir compared)."""
    return {key: {os.path.basename(d): v for d, v in value.items()} for key, value in outcome.items()}


def test_a_killed_clean_load_keeps_the_marker_and_the_rerun_is_clean(tmp_path: Path) -> None:
    """Kafka deletes the marker when it reads it (KAFKA-10471): killed during a clean start, it recovers on the
    next.  mploader deletes it last: killed at the first partition's first change, the marker is there."""
    data = small_broker(tmp_path / "b", seed=3, clean=True, faults=0)
    copy_tree(data, tmp_path / "probe")
    _, points = recorded_load([str(tmp_path / "probe")], INLINE, GEN_NOW)
    first_partition_change = next(k for k, (_, path) in enumerate(points, start=1)
                                  if os.path.dirname(path) != str(tmp_path / "probe"))
    marker_at = [k for k, (op, path) in enumerate(points, start=1)
                 if op == "delete" and path.endswith(CLEAN_SHUTDOWN_MARKER)]
    assert marker_at and marker_at[0] > max(k for k, (_, path) in enumerate(points, start=1)
                                            if path.endswith(".snapshot")), "the marker goes before the last write"
    assert load_killed_at(first_partition_change, [str(data)], INLINE, GEN_NOW)
    assert (data / CLEAN_SHUTDOWN_MARKER).exists()
    rerun = load_logs([str(data)], INLINE, now_ms=GEN_NOW)
    assert rerun.clean_shutdown == {str(data): True}
    assert not any(lg.recovered_segments for lg in rerun.all_logs())


# ---- SIGKILL of the whole process tree (the parent and its Phase 1 workers) at random moments

CHILD = """if True:
    import json, sys
    from mploader import LoaderConfig, load_logs
    from mploader.engine.pool import PoolEngine
    PoolEngine.parent_head_bytes = 0  # a small broker: the workers scan everything (as tests/conftest.py does)
    spec = json.loads(sys.argv[1])
    open(spec["started"], "w").close()
    load_logs(spec["dirs"], LoaderConfig(segment_scan_workers_per_data_dir=2,
                                         persist_recovery_points=spec["resumable"]), now_ms=spec["now"])
"""


def _child(dirs: list[str], started: Path, resumable: bool) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    spec = json.dumps({"dirs": dirs, "now": GEN_NOW, "started": str(started), "resumable": resumable})
    return subprocess.Popen([sys.executable, "-c", CHILD, spec], cwd=str(_ROOT), env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_started(proc: subprocess.Popen[bytes], started: Path) -> float:
    """When the child is about to load (its imports done): the time zero of a kill's moment."""
    while not started.exists() and proc.poll() is None:
        time.sleep(0.002)
    return time.monotonic()


@pytest.mark.parametrize("resumable", [False, True], ids=["kafka-mode", "resumable"])
def test_random_sigkills_of_the_process_tree_during_two_worker_loads(tmp_path: Path, resumable: bool) -> None:
    """A broker of two data dirs with faults, loaded by a child with 2 workers per dir; the child's whole
    session (parent, workers, resource trackers) gets SIGKILL at random moments of the load; a rerun leaves
    every byte and the outcome of one uninterrupted load.  The moments are drawn over an uninterrupted child
    load's duration, measured first, and one more over the part of it its workers lived (forked workers scan a
    load's segments in a part of it), from the first moment one was seen to the last; a moment the load outran is
    tried again, earlier, and one of the workers' part that met none, again in that part.  "resumable": the
    recovery points are written by their writer's own thread meanwhile (the rerun starts from them: the
    loader's own recovery point is not compared)."""
    config = INLINE.replace(persist_recovery_points=resumable)
    ignore = ("loader_recovery_point",) if resumable else ()
    from mploader.generate import GeneratorConfig, generate

    generate(tmp_path / "pristine", GeneratorConfig(
        data_dirs=2, topics=3, partitions_per_topic=4, total_bytes=12_000_000, segment_bytes=128 * 1024,
        batch_bytes=4096, records_per_batch=8, faults=8, seed=21))
    work = tmp_path / "work"
    dirs = [str(work / "data-0"), str(work / "data-1")]
    copy_tree(tmp_path / "pristine", work)
    expected = final_outcome(load_logs(dirs, config, now_ms=GEN_NOW))
    expected_tree = tree_state(work)
    started = tmp_path / "started"
    copy_tree(tmp_path / "pristine", work)
    proc = _child(dirs, started, resumable)
    t0 = _wait_started(proc, started)
    first_worker = last_worker = None  # the moments a worker was first and last seen
    while proc.poll() is None and time.monotonic() - t0 < 120:
        if scan_workers(proc.pid):
            last_worker = time.monotonic() - t0
            first_worker = last_worker if first_worker is None else first_worker
        time.sleep(0.005)
    assert proc.wait(timeout=120) == 0
    window = time.monotonic() - t0
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    assert first_worker is not None and last_worker is not None, "no worker was seen in the uninterrupted load"
    pool = (first_worker, last_worker)
    tries = [rng.uniform(0.05, 0.9) * window for _ in range(5)] + [rng.uniform(*pool)]
    in_pool = {len(tries) - 1}  # the tries drawn over the workers' part
    report = []
    for i, moment in enumerate(tries):
        copy_tree(tmp_path / "pristine", work)
        started.unlink(missing_ok=True)
        proc = _child(dirs, started, resumable)
        t0 = _wait_started(proc, started)
        time.sleep(max(0.0, moment - (time.monotonic() - t0)))
        ended = proc.poll() is not None
        workers = len(scan_workers(proc.pid))
        if not ended:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended in between
                ended = True
        if ended and len(tries) < 12:
            tries.append(moment / 2)
        elif i in in_pool and not workers and len(tries) < 12:  # its workers came or went at another moment
            in_pool.add(len(tries))
            tries.append(rng.uniform(*pool))
        proc.wait()
        remove_orphaned_blocks()  # what the next pool load's start does
        rerun = final_outcome(load_logs(dirs, config, now_ms=GEN_NOW))
        files = changed(expected_tree, tree_state(work))
        assert not files, f"kill {i} at {moment:.2f} s: {len(files)} files differ after the rerun: {files[:5]}"
        assert outcome_difference(expected, rerun, ignore) is None, outcome_difference(expected, rerun, ignore)
        report.append(f"{moment:.2f} s{' (had ended)' if ended else f' ({workers} workers)'}")
    print(f"SIGKILL of the process tree at {', '.join(report)} of a {window:.2f} s load: 0 mismatches")
    assert sum("ended" not in r for r in report) >= 3, report
    assert any("(0 workers)" not in r and "ended" not in r for r in report), f"no kill while workers ran: {report}"
