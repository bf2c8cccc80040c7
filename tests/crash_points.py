"""Kill-point enumeration: SIGKILL a load at every change it makes to disk, rerun, compare with one uninterrupted load.

Used by tests/test_crash_safety.py (small brokers, in the suite) and perf/crash_points.py (bigger ones, with
recorded figures).  The hook (:mod:`mploader.disk.mutations`) is called before every change a RealDisk makes,
and at the torn states between the system calls of one change.  For every point ``k`` of an uninterrupted
load's sequence, a forked child loads a fresh copy of the data with a hook that records each point and sends
the child SIGKILL at point ``k`` (a real kill: nothing of the child runs after it); the parent then loads the
copy again to completion and compares every byte of it, and the final outcome the load reports, with the
uninterrupted load's.

A clean data dir's load commits when it deletes the clean-shutdown marker (mploader keeps it until every
partition is loaded: docs/crash-safety.md); after that point the dir reads as unclean, so a kill after it is
compared with the uninterrupted load followed by that second, unclean, load.

The loads enumerated run Phase 1 inline and Phase 2 with one thread (``num_recovery_threads_per_data_dir=1``):
their points come in one order, the same every run (each child's recorded points are checked against the
uninterrupted load's: a different prefix is reported, not silently compared).  Kills of loads with worker
processes at random moments are tests/test_crash_safety.py's other test.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mploader import LoaderConfig, load_logs
from mploader.disk.mutations import set_mutation_hook
from mploader.format.checkpoint import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT
from mploader.generate import GeneratorConfig, generate
from mploader.result import LoadResult
from tests.fingerprint import changed, tree_state


class Recorder:
    """A mutation hook that writes each point to ``fd`` as ``op path`` lines and SIGKILLs the process at point
    ``kill_at`` (1-based; None: never)."""

    def __init__(self, fd: int | None, kill_at: int | None = None) -> None:
        self.fd = fd
        self.kill_at = kill_at
        self.points: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __call__(self, op: str, path: str) -> None:
        with self._lock:
            self.points.append((op, path))
            if self.fd is not None:
                os.write(self.fd, f"{op} {path}\n".encode())
            if len(self.points) == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)


def recorded_load(dirs: list[str], config: LoaderConfig, now_ms: int) -> tuple[LoadResult, list[tuple[str, str]]]:
    """One uninterrupted load of ``dirs`` and the mutation points it passed, in order."""
    recorder = Recorder(None)
    previous = set_mutation_hook(recorder)
    try:
        return load_logs(dirs, config, now_ms=now_ms), recorder.points
    finally:
        set_mutation_hook(previous)


def load_killed_at(k: int, dirs: list[str], config: LoaderConfig, now_ms: int, log_path: Path | None = None) -> bool:
    """Load ``dirs`` in a forked child that SIGKILLs itself at point ``k`` (``log_path``: where it writes the points
    it passes); whether it died of that signal."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if log_path is not None else None
    try:
        pid = os.fork()
        if pid == 0:  # the child: load until the kill; reaching the end is a failure of the caller's enumeration
            try:
                set_mutation_hook(Recorder(fd, kill_at=k))
                load_logs(dirs, config, now_ms=now_ms)
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
    finally:
        if fd is not None:
            os.close(fd)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def final_outcome(result: LoadResult) -> dict[str, Any]:
    """What a load reports about the state it leaves, and nothing about what it did to get there.

    Kept (each must equal the uninterrupted load's): per partition directory its kind, topic-partition,
    log start offset, recovery point (also the loader's own), log end offset, segments (base, bytes, next
    offset), leader epochs, every producer's full state, the index checks; per data dir whether it was
    clean and whether it is offline.  These describe the files a load leaves and what a broker would serve
    from them.

    Left out, because they describe what *this* run did to the files it found, and a rerun finds files the
    killed run had already changed: ``recovered_segments`` (a segment the killed run truncated is recovered
    again with nothing to cut), ``truncated_bytes``, ``deleted_files`` and ``deleted_segments`` (already
    gone), ``log_end_offset_before`` and so the impact report and its warnings (read before the rerun's first
    change), and ``stats`` (work done and timings).
    """
    logs = {}
    for lg in result.all_logs():
        logs[lg.dir] = {
            "kind": lg.kind.value, "topic_partition": str(lg.topic_partition), "clean_shutdown": lg.clean_shutdown,
            "log_start_offset": lg.log_start_offset, "recovery_point": lg.recovery_point,
            "loader_recovery_point": lg.loader_recovery_point, "log_end_offset": lg.log_end_offset,
            "segments": [dataclasses.astuple(s) for s in lg.segments], "leader_epochs": lg.leader_epochs,
            "producers": {pid: dataclasses.astuple(p) for pid, p in sorted(lg.producers.items())},
            "index_checks": lg.index_checks, "high_watermark": lg.high_watermark,
        }
    return {"logs": logs, "offline_dirs": dict(result.offline_dirs), "clean_shutdown": dict(result.clean_shutdown)}


def outcome_difference(a: dict[str, Any], b: dict[str, Any], ignore: tuple[str, ...] = ()) -> str | None:
    """The first difference between two :func:`final_outcome` s, in words (None: equal); ``ignore``: keys of a
    log not compared."""
    for key in ("offline_dirs", "clean_shutdown"):
        if a[key] != b[key]:
            return f"{key}: {a[key]} != {b[key]}"
    for d in sorted(a["logs"].keys() | b["logs"].keys()):
        x, y = a["logs"].get(d), b["logs"].get(d)
        if x is None or y is None:
            return f"{d}: loaded in only one of the two"
        for k in x:
            if k not in ignore and x[k] != y[k]:
                return f"{d}: {k}: {x[k]} != {y[k]}"
    return None


@dataclass
class Mismatch:
    point: int  # 1-based
    op: str
    path: str
    why: str


@dataclass
class Enumeration:
    """The figures of one enumeration: every point of the uninterrupted load, what each kill led to."""

    name: str
    points: int = 0
    by_op: dict[str, int] = field(default_factory=dict)
    tried: int = 0  # points at which a child was killed (all unless a selection was made)
    killed: int = 0  # children that died of SIGKILL at their point
    after_commit: int = 0  # points after the clean-shutdown marker's deletion (compared with a second load)
    mismatches: list[Mismatch] = field(default_factory=list)
    nondeterministic: list[int] = field(default_factory=list)  # points whose child took another path
    trace: list[tuple[str, str]] = field(default_factory=list)  # the uninterrupted load's points (op, path)

    def summary(self) -> str:
        ops = ", ".join(f"{op} {n}" for op, n in sorted(self.by_op.items()))
        committed = f" ({self.after_commit} after the commit)" if self.after_commit else ""
        tried = f", {self.tried} tried" if self.tried != self.points else ""
        return (f"{self.name}: {self.points} kill points{committed}{tried} ({ops}); {self.killed} killed; "
                f"{len(self.mismatches)} mismatches; {len(self.nondeterministic)} nondeterministic")


GEN_NOW = 1_730_000_000_000 + 600_000  # a few minutes after the generator's first batch

#: A small broker: one data dir, 4 partitions of ~8 segments, idempotent and transactional producers, epochs.
SMALL_BROKER = GeneratorConfig(
    data_dirs=1, topics=2, partitions_per_topic=2, total_bytes=300_000, segment_bytes=32 * 1024, batch_bytes=4096,
    records_per_batch=8, transactional_fraction=0.4, idempotent_fraction=0.4, abort_fraction=0.4,
    max_transaction_batches=3, leader_epoch_changes=3, faults=6,
)
#: The faults a clean broker can have without failing Kafka's start (damaged .log bytes fail a clean start).
CLEAN_FAULTS = ("missing_index", "corrupt_index", "truncated_index", "stray_files", "orphaned_index",
                "corrupt_snapshot")


def small_broker(dest: Path, *, seed: int, clean: bool, faults: int = 6, everything_unflushed: bool = False,
                 drop_snapshots: int = 0) -> Path:
    """Generate a :data:`SMALL_BROKER` at ``dest`` and return its data dir.  ``everything_unflushed``: no
    recovery-point checkpoint, so that recovery reads every segment (a damaged one then cuts the log and
    deletes the segments after it); ``drop_snapshots``: that many partitions lose their producer snapshots
    (a clean start then takes Kafka's shortcut: empty snapshots, the log not read)."""
    kinds = CLEAN_FAULTS if clean else SMALL_BROKER.fault_kinds
    generate(dest, SMALL_BROKER.replace(seed=seed, clean_shutdown=clean, faults=faults, fault_kinds=kinds))
    data = dest / "data-0"
    if everything_unflushed:
        (data / RECOVERY_POINT_CHECKPOINT).unlink()
    for part in sorted(p for p in data.iterdir() if p.is_dir())[:drop_snapshots]:
        for snap in part.glob("*.snapshot"):
            snap.unlink()
    return data


def copy_tree(src: Path, dest: Path) -> None:
    """A copy that keeps sparse files sparse (preallocated indexes are mostly holes)."""
    if dest.exists():
        shutil.rmtree(dest)
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dest)], check=True)


def enumerate_kill_points(name: str, pristine: Path, work: Path, data_dirs: Callable[[Path], list[str]],
                          config: LoaderConfig, now_ms: int, *, limit: int | None = None, commit_rule: bool = True,
                          ignore: tuple[str, ...] = (), select: Callable[[str, str], bool] | None = None,
                          on_point: Callable[[int, int], None] | None = None) -> Enumeration:
    """Kill a load of a copy of ``pristine`` (at ``work``) at each of its points, rerun, compare.

    ``data_dirs(work)`` names the data dirs to load; ``config`` must run Phase 1 inline with one recovery
    thread (the points' order is then fixed).  ``limit``: only the first that many points.  ``commit_rule``:
    compare a kill after the marker's deletion with the uninterrupted load followed by a second load (False:
    every kill with the uninterrupted load alone, e.g. for code that deletes the marker first, as Kafka does).
    ``ignore``: outcome keys not compared (with ``persist_recovery_points`` the rerun's loader starts from the
    recovery points the killed run advanced: ``loader_recovery_point``).  ``select(op, path)``: kill only at
    the points it accepts (the others are counted in ``points`` but not tried).  ``on_point(k, n)`` is called
    after each point (progress for long runs)."""
    report = Enumeration(name)
    copy_tree(pristine, work)
    reference, points = recorded_load(data_dirs(work), config, now_ms)
    expected_tree = tree_state(work)
    expected = final_outcome(reference)
    points = points[:limit] if limit is not None else points
    commit = max((k for k, (op, path) in enumerate(points, start=1)
                  if op == "delete" and os.path.basename(path) == CLEAN_SHUTDOWN_MARKER), default=None)
    if not commit_rule:
        commit = None
    if commit is not None:  # a kill after the commit: compared with a second load of the uninterrupted outcome
        committed = final_outcome(load_logs(data_dirs(work), config, now_ms=now_ms))
        committed_tree = tree_state(work)
    report.points = len(points)
    report.trace = list(points)
    report.by_op = dict(collections.Counter(op for op, _ in points))
    log_path = work.parent / f"{work.name}.points"
    for k, (op, path) in enumerate(points, start=1):
        if select is not None and not select(op, path):
            continue
        report.tried += 1
        copy_tree(pristine, work)
        died = load_killed_at(k, data_dirs(work), config, now_ms, log_path)
        recorded = [tuple(line.split(" ", 1)) for line in log_path.read_text().splitlines()]
        if died:
            report.killed += 1
        if not died or recorded != points[:k]:
            report.nondeterministic.append(k)
            continue
        after_commit = commit is not None and k > commit
        report.after_commit += after_commit
        want_tree, want = (committed_tree, committed) if after_commit else (expected_tree, expected)
        why = _rerun_difference(work, data_dirs(work), config, now_ms, want_tree, want, ignore)
        if why is not None:
            report.mismatches.append(Mismatch(k, op, os.path.relpath(path, work), why))
        if on_point is not None:
            on_point(k, len(points))
    return report


def _rerun_difference(work: Path, dirs: list[str], config: LoaderConfig, now_ms: int,
                      expected_tree: dict[str, tuple[int, str]], expected: dict[str, Any],
                      ignore: tuple[str, ...]) -> str | None:
    """Load the killed copy to completion; how its files or its outcome differ from the uninterrupted load's."""
    try:
        rerun = load_logs(dirs, config, now_ms=now_ms)
    except Exception as e:  # noqa: BLE001 - a rerun that fails is a mismatch to report, not a test crash
        return f"the rerun failed: {type(e).__name__}: {e}"
    files = changed(expected_tree, tree_state(work))
    if files:
        return f"{len(files)} files differ: {', '.join(files[:6])}"
    return outcome_difference(expected, final_outcome(rerun), ignore)


__all__ = ["CLEAN_FAULTS", "GEN_NOW", "SMALL_BROKER", "Enumeration", "Mismatch", "Recorder", "copy_tree",
           "enumerate_kill_points", "final_outcome", "load_killed_at", "outcome_difference", "recorded_load",
           "small_broker"]
