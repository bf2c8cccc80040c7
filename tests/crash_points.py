"""Kill-point enumeration: SIGKILL a load at every change it makes to disk, rerun, compare with one uninterrupted load.

Used by tests/test_crash_safety.py (small brokers, in the suite) and perf/crash_points.py (bigger ones, with
recorded figures).  The hook (:mod:`mploader.disk.mutations`), given to a load as ``load_logs(..., mutations=)``,
is called before every change its RealDisk makes, and at the torn states between the system calls of one change.
For every point ``k`` of an uninterrupted load's sequence, a forked child loads a fresh copy of the data with a
hook that records each point and sends the child SIGKILL at point ``k`` (a real kill: nothing of the child runs
after it); the parent then loads the copy again to completion and compares every byte of it, and the final
outcome the load reports, with the uninterrupted load's.

A clean data dir's load commits when it deletes the clean-shutdown marker (mploader keeps it until every
partition is loaded: docs/crash-safety.md); after that point the dir reads as unclean, so a kill after it is
compared with the uninterrupted load followed by that second, unclean, load.

The loads enumerated run Phase 1 inline and Phase 2 with one thread (``num_recovery_threads_per_data_dir=1``):
their points come in one order, the same every run (each child's recorded points are checked against the
uninterrupted load's: a different prefix is reported, not silently compared).  Kills of loads with worker
processes at random moments are tests/test_crash_safety.py's other test.

The same points serve a second enumeration (:func:`enumerate_error_points`): at every point ``k`` the hook
raises an error of the environment (``OSError(errno, strerror)``, no file named, as a system call raises it:
EMFILE, EACCES, EIO, ENOSPC) instead of killing, in-process (the load returns), and the failed load is judged
by docs/loading.md §18: it changed no valid byte (every ``.log`` the uninterrupted load leaves is there with at
least those bytes; one that load left alone is unchanged), it completed (the point's failure is tolerated) or
took its data dir offline naming the file and the error, and a load after the fault is removed reaches the
uninterrupted outcome byte for byte (the clean-dir commit rule as for kills: a failed clean load that deleted
the marker, Kafka's outcome, is compared with the uninterrupted load followed by a second load).  With
``opens=True`` the opens of files (:func:`mploader.format.files.open_regular`, wrapped by the harness: the
read path has no hook of its own) are points too, named ``open``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import hashlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mploader.disk.reader
import mploader.disk.real
import mploader.engine.chunks
import mploader.format.files
import mploader.format.index
import mploader.scan.walk
from mploader import LoaderConfig, load_logs
from mploader.disk.mutations import MutationHook
from mploader.errors import StartupFailedError
from mploader.format.checkpoint import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT
from mploader.generate import GeneratorConfig, generate
from mploader.result import LoadResult
from tests.fingerprint import changed, tree_state


class Recorder(MutationHook):
    """A mutation hook (the torn states included) that writes each point to ``fd`` as ``op path`` lines and SIGKILLs
    the process at point ``kill_at`` (1-based; None: never), or raises ``OSError(strike_errno, strerror)`` there
    (``strike_errno`` given: an error of the environment, no file named, as a system call raises it)."""

    torn = True

    def __init__(self, fd: int | None, kill_at: int | None = None, strike_errno: int | None = None) -> None:
        self.fd = fd
        self.kill_at = kill_at
        self.strike_errno = strike_errno
        self.points: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def point(self, op: str, path: str) -> None:
        with self._lock:
            self.points.append((op, path))
            if self.fd is not None:
                os.write(self.fd, f"{op} {path}\n".encode())
            if len(self.points) == self.kill_at:
                if self.strike_errno is not None:  # as the system call raises it: os.open names its file
                    raise OSError(self.strike_errno, os.strerror(self.strike_errno), *([path] if op == "open" else []))
                os.kill(os.getpid(), signal.SIGKILL)


#: the modules that bind :func:`mploader.format.files.open_regular` (``files`` itself: its ``read_file``)
_OPENERS = (mploader.format.files, mploader.engine.chunks, mploader.format.index, mploader.disk.reader,
            mploader.disk.real, mploader.scan.walk)


@contextlib.contextmanager
def opens_as_points(hook: MutationHook, opens: bool = True) -> Iterator[None]:
    """While it lasts (and if ``opens``), every open of a file to read it (``open_regular`` without a write flag:
    reads, the ``.lock``) is a point of ``hook`` named ``open`` (a hook that raises there is the open's error);
    opens to write follow their ``write``/``set-size`` point already."""
    if not opens:
        yield
        return
    real = mploader.format.files.open_regular

    def hooked_open(path: str | os.PathLike[str], flags: int = mploader.format.files.READ_FLAGS,
                    mode: int = 0o644) -> tuple[int, os.stat_result]:
        if not flags & os.O_WRONLY:
            hook.point("open", os.fspath(path))
        return real(path, flags, mode)

    for module in _OPENERS:
        module.open_regular = hooked_open  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in _OPENERS:
            module.open_regular = real  # type: ignore[attr-defined]


def recorded_load(dirs: list[str], config: LoaderConfig, now_ms: int,
                  opens: bool = False) -> tuple[LoadResult, list[tuple[str, str]]]:
    """One uninterrupted load of ``dirs`` and the mutation points it passed, in order (``opens``: the opens of files
    to read among them, :func:`opens_as_points`)."""
    recorder = Recorder(None)
    with opens_as_points(recorder, opens):
        return load_logs(dirs, config, now_ms=now_ms, mutations=recorder), recorder.points


def load_killed_at(k: int, dirs: list[str], config: LoaderConfig, now_ms: int, log_path: Path | None = None) -> bool:
    """Load ``dirs`` in a forked child that SIGKILLs itself at point ``k`` (``log_path``: where it writes the points
    it passes); whether it died of that signal."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if log_path is not None else None
    try:
        pid = os.fork()
        if pid == 0:  # the child: load until the kill; reaching the end is a failure of the caller's enumeration
            try:
                load_logs(dirs, config, now_ms=now_ms, mutations=Recorder(fd, kill_at=k))
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
    errno: str = ""  # the error injected (enumerate_error_points), by name


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
                 drop_snapshots: int = 0, total_bytes: int = SMALL_BROKER.total_bytes) -> Path:
    """Generate a :data:`SMALL_BROKER` at ``dest`` and return its data dir.  ``everything_unflushed``: no
    recovery-point checkpoint, so that recovery reads every segment (a damaged one then cuts the log and
    deletes the segments after it); ``drop_snapshots``: that many partitions lose their producer snapshots
    (a clean start then takes Kafka's shortcut: empty snapshots, the log not read); ``total_bytes``: a smaller
    (or bigger) broker of the same shape."""
    kinds = CLEAN_FAULTS if clean else SMALL_BROKER.fault_kinds
    generate(dest, SMALL_BROKER.replace(seed=seed, clean_shutdown=clean, faults=faults, fault_kinds=kinds,
                                        total_bytes=total_bytes))
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


@dataclass
class _Reference:
    """The uninterrupted load of a copy of ``pristine``, what every interrupted one is compared with."""

    points: list[tuple[str, str]]  # its points, limited
    tree: dict[str, tuple[int, str]]  # every file it leaves
    outcome: dict[str, Any]
    commit: int | None  # the point deleting a clean dir's marker (None: none, or the rule is off)
    committed_tree: dict[str, tuple[int, str]] | None = None  # after a second load (a dir read as unclean)
    committed: dict[str, Any] | None = None

    def wanted(self, after_commit: bool) -> tuple[dict[str, tuple[int, str]], dict[str, Any]]:
        if after_commit:
            assert self.committed_tree is not None and self.committed is not None
            return self.committed_tree, self.committed
        return self.tree, self.outcome


def _reference(report: Enumeration, pristine: Path, work: Path, data_dirs: Callable[[Path], list[str]],
               config: LoaderConfig, now_ms: int, limit: int | None, commit_rule: bool,
               opens: bool = False) -> _Reference:
    """Load a copy of ``pristine`` at ``work`` uninterrupted (and, where a clean dir commits, once more), and
    fill ``report``'s counts of its points (``opens``: the opens of files to read among them)."""
    copy_tree(pristine, work)
    result, points = recorded_load(data_dirs(work), config, now_ms, opens)
    points = points[:limit] if limit is not None else points
    commit = max((k for k, (op, path) in enumerate(points, start=1)
                  if op == "delete" and os.path.basename(path) == CLEAN_SHUTDOWN_MARKER), default=None)
    ref = _Reference(points, tree_state(work), final_outcome(result), commit if commit_rule else None)
    if ref.commit is not None:  # an interruption after the commit: compared with a second load of the outcome
        ref.committed = final_outcome(load_logs(data_dirs(work), config, now_ms=now_ms))
        ref.committed_tree = tree_state(work)
    report.points = len(points)
    report.trace = list(points)
    report.by_op = dict(collections.Counter(op for op, _ in points))
    return ref


def _points_to_try(report: Enumeration, points: list[tuple[str, str]], select: Callable[[str, str], bool] | None,
                   on_point: Callable[[int, int], None] | None) -> Iterator[tuple[int, str, str]]:
    """The points (1-based ``k``, op, path) that ``select`` accepts, each counted in ``report.tried``;
    ``on_point`` after each."""
    for k, (op, path) in enumerate(points, start=1):
        if select is not None and not select(op, path):
            continue
        report.tried += 1
        yield k, op, path
        if on_point is not None:
            on_point(k, len(points))


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
    ref = _reference(report, pristine, work, data_dirs, config, now_ms, limit, commit_rule)
    points = ref.points
    log_path = work.parent / f"{work.name}.points"
    for k, op, path in _points_to_try(report, points, select, on_point):
        copy_tree(pristine, work)
        died = load_killed_at(k, data_dirs(work), config, now_ms, log_path)
        recorded = [tuple(line.split(" ", 1)) for line in log_path.read_text().splitlines()]
        if died:
            report.killed += 1
        if not died or recorded != points[:k]:
            report.nondeterministic.append(k)
            continue
        after_commit = ref.commit is not None and k > ref.commit
        report.after_commit += after_commit
        want_tree, want = ref.wanted(after_commit)
        why = _rerun_difference(work, data_dirs(work), config, now_ms, want_tree, want, ignore)
        if why is not None:
            report.mismatches.append(Mismatch(k, op, os.path.relpath(path, work), why))
    return report


#: The errors of the environment injected at every point: a descriptor limit, a permission, a failing device,
#: a full file system (docs/loading.md §18)
ENV_ERRNOS = (errno.EMFILE, errno.EACCES, errno.EIO, errno.ENOSPC)


@dataclass
class ErrorEnumeration(Enumeration):
    """The figures of an enumeration of injected errors: each tried point is tried with every errno."""

    errnos: tuple[int, ...] = ENV_ERRNOS
    injected: int = 0  # (point, errno) pairs whose load met its error
    completed: int = 0  # loads that completed all the same (the point's failure is tolerated)
    offline: int = 0  # loads that took the data dir offline, naming the file and the error
    halted: int = 0  # the only data dir offline before loading: Kafka's start-up failure (Exit.halt), nothing changed
    outcomes: dict[str, int] = field(default_factory=dict)  # "errno op -> completed/offline/halted": counts

    def summary(self) -> str:
        ops = ", ".join(f"{op} {n}" for op, n in sorted(self.by_op.items()))
        committed = f" ({self.after_commit} reruns after the commit)" if self.after_commit else ""
        tried = f", {self.tried} tried" if self.tried != self.points else ""
        names = "/".join(errno.errorcode[e] for e in self.errnos)
        return (f"{self.name}: {self.points} points{tried} ({ops}) x {names}: {self.injected} errors injected"
                f"{committed}; {self.completed} completed, {self.offline} offline, {self.halted} halted; "
                f"{len(self.mismatches)} mismatches; {len(self.nondeterministic)} nondeterministic")


def enumerate_error_points(name: str, pristine: Path, work: Path, data_dirs: Callable[[Path], list[str]],
                           config: LoaderConfig, now_ms: int, *, errnos: tuple[int, ...] = ENV_ERRNOS,
                           opens: bool = False, limit: int | None = None, commit_rule: bool = True,
                           ignore: tuple[str, ...] = (), select: Callable[[str, str], bool] | None = None,
                           on_point: Callable[[int, int], None] | None = None) -> ErrorEnumeration:
    """At each point of a load of a copy of ``pristine`` (at ``work``), and for each of ``errnos``, load a fresh
    copy whose hook raises ``OSError(errno, strerror)`` at that point; judge the failed load (below), remove the
    fault, rerun, compare with the uninterrupted load.  Arguments as :func:`enumerate_kill_points`'s; ``opens``:
    the opens of files to read are points too (:func:`opens_as_points`).

    A failed load must (docs/loading.md §18): leave every ``.log`` of the uninterrupted load's final tree with
    at least that load's bytes as a prefix, and every ``.log`` that load left alone unchanged (Kafka's own cuts
    and deletions of condemned segments may be made already: a cut segment is longer, a condemned one may still
    be there); complete (the reference's offline dirs and its whole outcome) or report each dir it took offline
    with a reason naming the point's file and the error's strerror; raise nothing out of ``load_logs`` but a
    StartupFailedError where the uninterrupted load failed start-up too, or where the only data dir went offline
    before loading (Kafka's ``Exit.halt``: "no usable data directory", its reason naming the file and the
    error)."""
    report = ErrorEnumeration(name, errnos=errnos)
    ref = _reference(report, pristine, work, data_dirs, config, now_ms, limit, commit_rule, opens)
    valid = _log_prefixes(work)
    copy_tree(pristine, work)
    untouched = {rel for rel, got in _log_prefixes(work).items() if valid.get(rel) == got}
    markers = [os.path.join(d, CLEAN_SHUTDOWN_MARKER) for d in data_dirs(work)
               if os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_MARKER))]
    for k, op, path in _points_to_try(report, ref.points, select, on_point):
        for err in errnos:
            copy_tree(pristine, work)
            recorder = Recorder(None, kill_at=k, strike_errno=err)
            why, recorded = _failed_load(report, recorder, data_dirs(work), config, now_ms, op, path, err,
                                      ref, ignore, opens)
            if recorded[:k] != ref.points[:k]:
                report.nondeterministic.append(k)
                continue
            report.injected += 1
            after_commit = ref.commit is not None and not all(os.path.exists(m) for m in markers)
            report.after_commit += after_commit
            want_tree, want = ref.wanted(after_commit)
            whys = [why, _valid_bytes_changed(work, valid, untouched),
                    _rerun_difference(work, data_dirs(work), config, now_ms, want_tree, want, ignore)]
            if any(whys):
                report.mismatches.append(Mismatch(k, op, os.path.relpath(path, work),
                                                  "; ".join(w for w in whys if w), errno.errorcode[err]))
    return report


def _failed_load(report: ErrorEnumeration, recorder: Recorder, dirs: list[str], config: LoaderConfig, now_ms: int,
                 op: str, path: str, err: int, ref: _Reference, ignore: tuple[str, ...],
                 opens: bool) -> tuple[str | None, list[tuple[str, str]]]:
    """Load ``dirs`` with ``recorder`` (it raises ``err`` at its point, ``op`` of ``path``; ``opens``: the opens of
    files to read are points) as its hook; how the way it ended breaks the rule (None: it does not; ``report``'s
    outcome counts are kept) and the points it passed."""
    strerror = os.strerror(err)
    try:
        with opens_as_points(recorder, opens):
            result = load_logs(dirs, config, now_ms=now_ms, mutations=recorder)
    except StartupFailedError as e:
        text = str(e)
        if "no usable data directory" not in text:
            return f"start-up failed, where the uninterrupted load did not: {text}", recorder.points
        if path not in text or strerror not in text:
            return f"the halt does not name {path} and {strerror!r}: {text}", recorder.points
        _count(report, "halted", err, op)
        return None, recorder.points
    except Exception as e:  # noqa: BLE001 - any other exception out of load_logs is what is reported
        return f"load_logs raised {type(e).__name__}: {e}", recorder.points
    gone = {d: reason for d, reason in result.offline_dirs.items() if ref.outcome["offline_dirs"].get(d) != reason}
    if not gone:  # tolerated: then it reports what the uninterrupted load reports (the error changed nothing)
        differs = outcome_difference(ref.outcome, final_outcome(result), ignore)
        if differs is not None:
            return f"completed with another outcome: {differs}", recorder.points
        _count(report, "completed", err, op)
        return None, recorder.points
    for d, reason in gone.items():  # a rename's point names its target; the error may name its source, beside it
        named = path in reason or (op == "rename" and os.path.dirname(path) + os.sep in reason)
        if not named or strerror not in reason:
            return f"{d} offline without naming {path} and {strerror!r}: {reason}", recorder.points
    _count(report, "offline", err, op)
    return None, recorder.points


def _count(report: ErrorEnumeration, outcome: str, err: int, op: str) -> None:
    setattr(report, outcome, getattr(report, outcome) + 1)
    key = f"{errno.errorcode[err]} {op} -> {outcome}"
    report.outcomes[key] = report.outcomes.get(key, 0) + 1


def _log_prefixes(root: Path) -> dict[str, tuple[int, str]]:
    """{relative path: (size, sha256 of its bytes)} of every ``.log`` under ``root``."""
    return {str(p.relative_to(root)): (p.stat().st_size, _digest(p, p.stat().st_size)) for p in root.rglob("*.log")
            if p.is_file()}


def _digest(path: Path, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(size))
    return h.hexdigest()


def _valid_bytes_changed(work: Path, valid: dict[str, tuple[int, str]], untouched: set[str]) -> str | None:
    """How a failed load changed valid bytes: a ``.log`` of the uninterrupted outcome (``valid``) gone, or without
    those bytes as its prefix, or one that load left alone (``untouched``) changed at all (None: none)."""
    for rel, (size, digest) in sorted(valid.items()):
        p = work / rel
        if not p.is_file():
            return f"valid data deleted: {rel}"
        now = p.stat().st_size
        if now < size or _digest(p, size) != digest:
            return f"valid data changed: {rel} ({size} bytes before, {now} now)"
        if rel in untouched and now != size:
            return f"a .log the load leaves alone changed: {rel} ({size} bytes before, {now} now)"
    return None


def _rerun_difference(work: Path, dirs: list[str], config: LoaderConfig, now_ms: int,
                      expected_tree: dict[str, tuple[int, str]], expected: dict[str, Any],
                      ignore: tuple[str, ...]) -> str | None:
    """Load the interrupted copy to completion; how its files or its outcome differ from the uninterrupted load's."""
    try:
        rerun = load_logs(dirs, config, now_ms=now_ms)
    except Exception as e:  # noqa: BLE001 - a rerun that fails is a mismatch to report, not a test crash
        return f"the rerun failed: {type(e).__name__}: {e}"
    files = changed(expected_tree, tree_state(work))
    if files:
        return f"{len(files)} files differ: {', '.join(files[:6])}"
    return outcome_difference(expected, final_outcome(rerun), ignore)


__all__ = ["CLEAN_FAULTS", "ENV_ERRNOS", "GEN_NOW", "SMALL_BROKER", "Enumeration", "ErrorEnumeration", "Mismatch",
           "Recorder", "copy_tree", "enumerate_error_points", "enumerate_kill_points", "final_outcome",
           "load_killed_at", "opens_as_points", "outcome_difference", "recorded_load", "small_broker"]
