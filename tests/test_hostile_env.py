"""A hostile environment never costs valid data (docs/loading.md, "Errors of the environment").

Each case takes a generated broker with no data faults (so every byte a load removed would have been valid), every
segment unflushed (so recovery reads all of them and rewrites their snapshots and indexes), makes the environment
hostile in one way, and asserts: no ``.log`` byte changed, nothing outside the data dir changed, the command came
back within a bound, the failure names the file, and once the cause is removed a load reaches exactly the outcome
of an undisturbed load.  Kafka's own ``recoverLog`` takes an IOException of a recovery for corruption: it cuts the
segment to its base offset and deletes every later one (``tests/test_limits.py`` shows the same for a full disk).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mploader import LoaderConfig, load_logs
from mploader.disk.mutations import CallingHook
from mploader.errors import EnvironmentFailure, StartupFailedError, environment_failure, of_the_environment
from tests.crash_points import GEN_NOW, copy_tree, final_outcome, small_broker
from tests.fingerprint import changed, tree_state

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mknod, chattr and mounts need root")
CONFIG = LoaderConfig(segment_scan_workers_per_data_dir=1)
BOUND_S = 60  # a load of the small broker takes well under a second; a hang is what this bounds


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    small_broker(root, seed=11, clean=False, faults=0, everything_unflushed=True)
    return root


@pytest.fixture(scope="module")
def undisturbed(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict]:
    work = tmp_path_factory.mktemp("undisturbed") / "b"
    copy_tree(pristine, work)
    result = load_logs([str(work / "data-0")], CONFIG, now_ms=GEN_NOW)
    assert result.offline_dirs == {}
    return outcome(result, work), tree_state(work)


def outcome(result: object, root: Path) -> object:
    """The load's final outcome (tests/crash_points.py) with the copy's own path left out."""
    return json.loads(json.dumps(final_outcome(result), default=str, sort_keys=True).replace(str(root), "ROOT"))


def refusal(data: Path, config: LoaderConfig = CONFIG) -> str:
    """Why the load of ``data`` took it offline: in the result, or, the only data dir, in the start-up failure that
    no usable data dir is (Kafka's Exit.halt, before anything is written)."""
    try:
        result = load_logs([str(data)], config, now_ms=GEN_NOW)
    except StartupFailedError as e:
        assert "no usable data directory" in str(e), e
        return str(e)
    assert list(result.offline_dirs) == [str(data)]
    return result.offline_dirs[str(data)]


def logs_of(root: Path) -> dict[str, tuple[int, str]]:
    return {k: v for k, v in tree_state(root).items() if k.endswith(".log")}


def partitions(data: Path) -> list[Path]:
    return sorted(p for p in data.iterdir() if p.is_dir())


def a_middle_snapshot(data: Path) -> Path:
    """The name of a snapshot recovery writes at a middle segment's end (the base offset of the next one)."""
    part = max(partitions(data), key=lambda p: len(list(p.glob("*.log"))))
    logs = sorted(part.glob("*.log"))
    assert len(logs) >= 3, "the broker's biggest partition has too few segments"
    return logs[len(logs) // 2].with_suffix(".snapshot")


def load_in_child(data: Path, *args: str, timeout: float = BOUND_S) -> tuple[int, str, float]:
    """``mploader load`` in a child process, bounded: (exit code, output, seconds); a hang fails the test."""
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "mploader", "load", str(data), "--recovery-threads", "1", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(cmd)} did not return within {timeout} s")
    return done.returncode, done.stdout + done.stderr, time.monotonic() - t0


def check_refused_then_recovered(pristine: Path, undisturbed: tuple[object, dict], work: Path,
                                 spoil: Callable[[Path], Path], repair: Callable[[Path], None],
                                 expect_in_reason: str) -> None:
    """The shared shape: spoil a fresh copy, load (the dir goes offline naming the file, no .log byte changes),
    repair, load again: the undisturbed outcome, byte for byte."""
    copy_tree(pristine, work)
    data = work / "data-0"
    culprit = spoil(data)
    before = logs_of(work)
    predicted = refusal(data, dataclasses.replace(CONFIG, dry_run=True))
    reason = refusal(data)
    assert predicted == reason  # the dry run predicts the refusal, word for word
    assert str(culprit) in reason and expect_in_reason in reason, reason
    assert "nothing was truncated or deleted" in reason, reason
    assert logs_of(work) == before
    repair(data)
    again = load_logs([str(data)], CONFIG, now_ms=GEN_NOW)
    expected, expected_tree = undisturbed
    assert outcome(again, work) == expected
    assert changed(expected_tree, tree_state(work)) == []


# ---- the one rule -------------------------------------------------------------------------------------------


def test_the_rule_tells_the_environment_from_the_bytes() -> None:
    from mploader.errors import MalformedCheckpointError

    for err in (errno.EACCES, errno.EPERM, errno.EMFILE, errno.ENFILE, errno.EISDIR, errno.ENOTDIR, errno.ELOOP,
                errno.EROFS, errno.ENOMEM, errno.EAGAIN, errno.EIO, errno.ENOSPC):
        e = OSError(err, os.strerror(err))
        assert of_the_environment(e)
        failure = environment_failure(e, "/data/t-0")
        assert failure.filename == "/data/t-0" and failure.errno == err and "nothing was truncated" in str(failure)
    assert not of_the_environment(MalformedCheckpointError("/d/recovery-point-offset-checkpoint", 1, "bad"))
    assert not of_the_environment(ValueError("not an OSError"))


@pytest.mark.parametrize("err", [errno.EACCES, errno.EPERM, errno.EMFILE, errno.EISDIR, errno.EIO, errno.ENOMEM,
                                 errno.EROFS], ids=errno.errorcode.get)
def test_an_error_of_the_environment_in_a_recovery_cuts_nothing(pristine: Path, undisturbed, tmp_path: Path,
                                                                 err: int) -> None:
    """The error strikes the write of a middle segment's snapshot during recoverLog (where Kafka cuts that segment
    to its base offset and deletes every later one): the partition stops, its dir goes offline naming the file,
    no .log byte changes; without the error a load reaches the undisturbed outcome."""
    work = tmp_path / "b"
    copy_tree(pristine, work)
    data = work / "data-0"
    target = str(a_middle_snapshot(data))
    before = logs_of(work)

    def strike(op: str, path: str) -> None:
        if op == "write" and path == target:
            raise OSError(err, os.strerror(err))  # as the system call raises it: no file named

    result = load_logs([str(data)], CONFIG, now_ms=GEN_NOW, mutations=CallingHook(strike))
    assert list(result.offline_dirs) == [str(data)]
    reason = result.offline_dirs[str(data)]
    assert target in reason and os.strerror(err) in reason and "nothing was truncated or deleted" in reason, reason
    assert logs_of(work) == before
    again = load_logs([str(data)], CONFIG, now_ms=GEN_NOW)
    expected, expected_tree = undisturbed
    assert outcome(again, work) == expected
    assert changed(expected_tree, tree_state(work)) == []


def test_an_unreadable_segment_is_not_cut(pristine: Path, undisturbed, tmp_path: Path) -> None:
    """EIO reading a segment (a failing medium): the bytes were not read, so nothing says they are invalid."""
    from mploader.recovery.loader import LogLoader

    work = tmp_path / "b"
    copy_tree(pristine, work)
    data = work / "data-0"
    target = str(a_middle_snapshot(data).with_suffix(".log"))
    before = logs_of(work)
    real = LogLoader.full_scan

    def failing(self, seg, to_recover=True):  # type: ignore[no-untyped-def]
        if seg.log_path == target:
            raise OSError(errno.EIO, "Input/output error", seg.log_path)
        return real(self, seg, to_recover)

    LogLoader.full_scan = failing  # type: ignore[method-assign]
    try:
        result = load_logs([str(data)], CONFIG, now_ms=GEN_NOW)
    finally:
        LogLoader.full_scan = real  # type: ignore[method-assign]
    reason = result.offline_dirs[str(data)]
    assert target in reason and "ddrescue" in reason, reason
    assert logs_of(work) == before


# ---- found before the first write -----------------------------------------------------------------------------


def test_a_directory_where_a_snapshot_belongs(pristine: Path, undisturbed, tmp_path: Path) -> None:
    def spoil(data: Path) -> Path:
        snap = a_middle_snapshot(data)
        snap.unlink(missing_ok=True)
        snap.mkdir()
        return snap

    check_refused_then_recovered(pristine, undisturbed, tmp_path / "b", spoil,
                                 lambda data: a_middle_snapshot(data).rmdir(), "directory")


@needs_root
def test_an_immutable_snapshot(pristine: Path, undisturbed, tmp_path: Path) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("no chattr")
    work = tmp_path / "b"

    def spoil(data: Path) -> Path:
        snap = a_middle_snapshot(data)
        if not snap.exists():
            snap.write_bytes(b"")
        if subprocess.run(["chattr", "+i", str(snap)], capture_output=True).returncode != 0:
            pytest.skip("this file system has no immutable attribute")
        return snap

    def repair(data: Path) -> None:
        subprocess.run(["chattr", "-i", str(a_middle_snapshot(data))], check=True)

    try:
        check_refused_then_recovered(pristine, undisturbed, work, spoil, repair, "chattr")
    finally:
        subprocess.run(["chattr", "-R", "-i", str(work)], capture_output=True)


@pytest.mark.parametrize("kind", ["fifo-snapshot", "fifo-index", "fifo-checkpoint", "fifo-tmp", "char-device",
                                  "block-device"])
def test_special_files_are_refused_without_being_opened(pristine: Path, undisturbed, tmp_path: Path,
                                                        kind: str) -> None:
    """A FIFO blocked load, verify and the dry run for ever (in open); a device node named like a snapshot was
    written into.  Each is refused from lstat, in a child process bounded in time, by load, the dry run and verify;
    the device behind a node is never opened."""
    if kind.endswith("device") and not ROOT:
        pytest.skip("mknod of a device needs root")
    work = tmp_path / "b"
    copy_tree(pristine, work)
    data = work / "data-0"
    part = a_middle_snapshot(data).parent
    culprit = {"fifo-snapshot": a_middle_snapshot(data), "fifo-index": sorted(part.glob("*.index"))[0],
               "fifo-checkpoint": data / "log-start-offset-checkpoint",
               "fifo-tmp": data / "recovery-point-offset-checkpoint.tmp",
               "char-device": a_middle_snapshot(data), "block-device": a_middle_snapshot(data)}[kind]
    culprit.unlink(missing_ok=True)
    if kind.startswith("fifo"):
        os.mkfifo(culprit)
    else:  # /dev/null's numbers, and a loop device's that no driver answers
        device = os.makedev(1, 3) if kind == "char-device" else os.makedev(7, 250)
        os.mknod(culprit, (0o020000 if kind == "char-device" else 0o060000) | 0o600, device)
    before = logs_of(work)
    for args in (["--dry-run"], []):
        code, out, _ = load_in_child(data, *args)
        assert code != 0 and str(culprit) in out, out
        assert logs_of(work) == before
    verify = subprocess.run([sys.executable, "-m", "mploader", "verify", str(data)], capture_output=True, text=True,
                            timeout=BOUND_S)
    assert str(culprit) in verify.stdout + verify.stderr and verify.returncode != 0, verify.stdout + verify.stderr
    culprit.unlink()
    original = pristine / culprit.relative_to(work)
    if original.exists():
        shutil.copy2(original, culprit)
    again = load_logs([str(data)], CONFIG, now_ms=GEN_NOW)
    expected, _ = undisturbed
    assert outcome(again, work) == expected


# ---- links out of the data dir ---------------------------------------------------------------------------------


def test_a_hard_link_from_outside_to_a_segment_recovery_cuts(tmp_path: Path) -> None:
    """A segment with a torn tail (recovery cuts it, as Kafka does) hard-linked from outside: the load refuses to
    change a file that another name shares, the outside file keeps every byte; with the link broken the cut is
    Kafka's."""
    pristine = tmp_path / "pristine"
    small_broker(pristine, seed=12, clean=False, faults=0, everything_unflushed=True)
    data = pristine / "data-0"
    seg = sorted(a_middle_snapshot(data).parent.glob("*.log"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\x00\x01torn tail")
    reference = tmp_path / "reference"
    copy_tree(pristine, reference)
    outside = tmp_path / "outside.log"
    os.link(seg, outside)
    kept = outside.read_bytes()
    reason = refusal(data)
    assert str(seg) in reason and "hard links" in reason, reason
    assert outside.read_bytes() == kept and seg.read_bytes() == kept
    shutil.copy2(seg, str(seg) + ".copy")
    os.replace(str(seg) + ".copy", seg)
    again = load_logs([str(data)], CONFIG, now_ms=GEN_NOW)
    expected = load_logs([str(reference / "data-0")], CONFIG, now_ms=GEN_NOW)
    assert outcome(again, pristine) == outcome(expected, reference)
    assert outside.read_bytes() == kept and len(seg.read_bytes()) < len(kept)


def test_a_hard_linked_checkpoint_tmp_never_writes_the_outside_file(pristine: Path, tmp_path: Path) -> None:
    work = tmp_path / "b"
    copy_tree(pristine, work)
    data = work / "data-0"
    outside = tmp_path / "precious"
    outside.write_bytes(b"not mploader's")
    os.link(outside, data / "recovery-point-offset-checkpoint.tmp")
    result = load_logs([str(data)], LoaderConfig(segment_scan_workers_per_data_dir=1,
                                                 persist_recovery_points=True), now_ms=GEN_NOW)
    assert result.offline_dirs == {}
    assert outside.read_bytes() == b"not mploader's"
    assert not (data / "recovery-point-offset-checkpoint.tmp").exists()


def test_a_checkpoint_linked_to_a_private_file_is_never_read(pristine: Path, tmp_path: Path) -> None:
    work = tmp_path / "b"
    copy_tree(pristine, work)
    data = work / "data-0"
    secret = tmp_path / "secret"
    secret.write_text("root:the-password-hash\n")
    (data / "log-start-offset-checkpoint").unlink(missing_ok=True)
    (data / "log-start-offset-checkpoint").symlink_to(secret)
    before = tree_state(work)
    code, out, _ = load_in_child(data)
    assert code != 0 and "the-password-hash" not in out and "log-start-offset-checkpoint" in out, out
    assert changed(before, tree_state(work)) == []


def test_a_dangling_lock_link_is_refused_not_skipped(pristine: Path, tmp_path: Path) -> None:
    work = tmp_path / "b"
    copy_tree(pristine, work)
    data = work / "data-0"
    (data / ".lock").unlink(missing_ok=True)
    (data / ".lock").symlink_to(tmp_path / "nowhere")
    with pytest.raises(Exception) as e:  # the only data dir offline: no usable data dir (Kafka's Exit.halt)
        load_logs([str(data)], CONFIG, now_ms=GEN_NOW)
    assert ".lock" in str(e.value) and "symbolic link" in str(e.value)
    assert not (tmp_path / "nowhere").exists()


def test_environment_failure_pickles() -> None:
    import pickle

    e = EnvironmentFailure("/d/t-0/1.snapshot", errno.EACCES, "Permission denied", "fix it")
    back = pickle.loads(pickle.dumps(e))
    assert str(back) == str(e) and back.errno == errno.EACCES and back.filename == "/d/t-0/1.snapshot"


# ---- as an unprivileged user ----------------------------------------------------------------------------------


def _load_as(uid: int, data: Path, config: LoaderConfig = CONFIG) -> dict[str, object]:
    """load_logs in a forked child that has dropped to ``uid`` (no new interpreter: the test's may not be
    reachable by that user): its offline dirs, its outcome, or the error it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                result = load_logs([str(data)], config, now_ms=GEN_NOW)
                doc: dict[str, object] = {"offline": result.offline_dirs,
                                          "outcome": outcome(result, data.parent)}
            except Exception as e:  # noqa: BLE001 - reported to the parent
                doc = {"error": f"{type(e).__name__}: {e}"}
            os.write(write, json.dumps(doc).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        doc = json.loads(f.read() or b"{}")
    os.waitpid(pid, 0)
    return doc


@needs_root
def test_a_root_owned_snapshot_when_another_user_loads(pristine: Path, undisturbed) -> None:
    """The load runs as 'nobody' over a data dir that user owns, but for one root-owned snapshot recovery must
    rewrite (EACCES): Kafka cut 484 acknowledged offsets here; the preflight refuses the dir, naming the file."""
    nobody = 65534
    work = Path(tempfile.mkdtemp(prefix="mploader-hostile-", dir="/tmp"))
    try:
        os.chmod(work, 0o755)
        copy_tree(pristine, work / "b")
        data = work / "b" / "data-0"
        for path in [work / "b", *(work / "b").rglob("*")]:
            os.lchown(path, nobody, nobody)
        snap = a_middle_snapshot(data)
        if not snap.exists():
            snap.write_bytes(b"")
        os.chown(snap, 0, 0)
        os.chmod(snap, 0o644)
        before = logs_of(work / "b")
        doc = _load_as(nobody, data)
        reason = str(doc.get("error") or doc.get("offline"))
        assert str(snap) in reason and "EACCES" in reason, doc
        assert logs_of(work / "b") == before
        os.chown(snap, nobody, nobody)
        again = _load_as(nobody, data)
        assert again.get("offline") == {}, again
        assert json.loads(json.dumps(again["outcome"]).replace(str(work / "b"), "ROOT")) == undisturbed[0]
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- names a checkpoint cannot carry, a concurrent writer, a full tmpfs ------------------------------------------


@pytest.mark.parametrize("name", ["new\nline-0", "bad\udcff-0", "sp ace-0"], ids=["newline", "non-utf8", "space"])
def test_a_partition_name_a_checkpoint_cannot_carry_is_refused_with_resumable(pristine: Path, tmp_path: Path,
                                                                            name: str) -> None:
    work = tmp_path / "b"
    copy_tree(pristine, work)
    data = work / "data-0"
    shutil.copytree(partitions(data)[0], data / name)
    before = tree_state(work)
    with pytest.raises(StartupFailedError, match="cannot be named in a checkpoint"):
        load_logs([str(data)], LoaderConfig(persist_recovery_points=True), now_ms=GEN_NOW)
    assert changed(before, tree_state(work)) == []


def test_a_segment_appended_to_during_the_load_is_not_cut(pristine: Path, tmp_path: Path) -> None:
    """Another process appends to a segment after the plan and before its recovery (a broker running without its
    lock): the load stops that partition; the appended bytes, and every byte before them, stay."""
    work = tmp_path / "b"
    copy_tree(pristine, work)
    data = work / "data-0"
    seg = a_middle_snapshot(data).with_suffix(".log")
    appended = False

    def writer(op: str, path: str) -> None:
        nonlocal appended
        if not appended and op == "write" and os.path.dirname(path) == str(seg.parent):
            with open(seg, "ab") as f:  # half a batch: what a writer leaves between two writes
                f.write(seg.read_bytes()[:40])
            appended = True

    result = load_logs([str(data)], CONFIG, now_ms=GEN_NOW, mutations=CallingHook(writer))
    assert appended
    grown = seg.read_bytes()
    reason = result.offline_dirs[str(data)]
    assert str(seg) in reason and "changed size during the load" in reason, reason
    assert seg.read_bytes() == grown
    assert all(p.stat().st_size > 0 for p in seg.parent.glob("*.log"))


@needs_root
def test_a_full_tmpfs_under_a_sparse_index_is_no_sigbus(pristine: Path, tmp_path: Path) -> None:
    """A preallocated index is mostly holes; read through a mapping on a full tmpfs, a hole is a SIGBUS that ended
    the process without a word (exit 135).  The load reads such files: it ends with an exit code and a message."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        copy_tree(pristine, mount / "b")
        holes = [p for p in (mount / "b").rglob("*index") if p.stat().st_blocks * 512 < p.stat().st_size]
        assert holes, "no sparse index in the copy"
        with open(mount / "filler", "wb") as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\xff" * 65536)
                    f.flush()
        code, out, _ = load_in_child(mount / "b" / "data-0")
        assert code not in (-7, 135), out  # SIGBUS
        assert code == 0 or "No space left on device" in out or "ENOSPC" in out, out
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.parametrize("where", ["middle", "last"])
def test_offsets_cut_past_a_broken_size_field_are_counted(pristine: Path, tmp_path: Path, where: str) -> None:
    """A batch whose size field reads 2^31-1, in the middle of a segment: Kafka cuts there (and deletes every later
    segment); the batches behind it were valid, and the impact report counts their offsets as removed (it read
    "0 offsets removed" for the last segment, and called the acknowledged ones "not on this disk")."""
    import struct

    from mploader.scan import SegmentTask, scan_segment

    work = tmp_path / "b"
    copy_tree(pristine, work)
    data = work / "data-0"

    def batches(log: Path):  # type: ignore[no-untyped-def]
        return scan_segment(SegmentTask(str(log), int(log.stem))).batches

    def pick(logs: list[Path]) -> Path:
        return logs[len(logs) // 2] if where == "middle" else logs[-1]

    part = next(p for p in partitions(data)
                if len(logs := sorted(p.glob("*.log"))) >= 3 and len(batches(pick(logs))) >= 3)
    logs = sorted(part.glob("*.log"))
    seg = pick(logs)
    rows = batches(seg)
    broken = len(rows) // 2
    raw = bytearray(seg.read_bytes())
    raw[int(rows["position"][broken]) + 8 : int(rows["position"][broken]) + 12] = struct.pack(">i", 2**31 - 1)
    seg.write_bytes(raw)
    highest = batches(logs[-1])
    true_end = int(highest["last_offset"][-1]) + 1 if where == "middle" else int(rows["last_offset"][-1]) + 1
    result = load_logs([str(data)], CONFIG, now_ms=GEN_NOW)
    (lg,) = [lg for lg in result.logs.values() if lg.dir == str(part)]
    impact = lg.impact
    assert impact.log_end_offset_after == int(rows["last_offset"][broken - 1]) + 1
    assert impact.log_end_offset_before == true_end
    assert impact.records_removed == true_end - impact.log_end_offset_after > 0


def test_too_few_file_descriptors_are_refused_before_the_first_write(pristine: Path, tmp_path: Path) -> None:
    """A limit on open files below what the load holds at once (several loading threads and workers): refused
    before anything is written, naming the limit and the fix; Kafka's loader lost 13.7 MB to EMFILE here."""
    work = tmp_path / "b"
    copy_tree(pristine, work)
    before = tree_state(work)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (12, "
            "resource.getrlimit(resource.RLIMIT_NOFILE)[1])); from mploader.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "load", str(work / "data-0"), "--recovery-threads", "8",
                           "--workers", "2"], capture_output=True, text=True, timeout=BOUND_S)
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "ulimit -n" in out and "may open 12" in out, out
    assert changed(before, tree_state(work)) == []


def test_only_the_files_a_load_may_change_must_be_writable(pristine: Path, tmp_path: Path) -> None:
    """A clean load changes only the highest segment's files (and snapshots, checkpoints): an immutable old segment
    of a clean dir does not stop it; the same file in an unclean dir recovered from offset 0 does."""
    from mploader.disk import RealDisk
    from mploader.disk.environment import changed_from, partition_problem

    work = tmp_path / "b"
    copy_tree(pristine, work)
    part = a_middle_snapshot(work / "data-0").parent
    logs = sorted(part.glob("*.log"))
    files = sorted(p.name for p in part.iterdir())
    assert changed_from(files, clean=True, recovery_point=0) == int(logs[-1].stem)
    assert changed_from(files, clean=False, recovery_point=int(logs[1].stem) + 1) == int(logs[1].stem)
    assert changed_from(files, clean=False, recovery_point=0) == int(logs[0].stem)
    old = next(log for log in logs[:-1] if not log.with_suffix(".txnindex").exists())  # no load-time recovery
    os.chmod(old, 0o444)
    if ROOT:  # root writes whatever the mode says: only an immutable file stops it
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(old)]).returncode != 0:
            pytest.skip("no immutable attribute here")
    try:
        assert partition_problem(RealDisk(), str(part), int(logs[-1].stem)) is None
        problem = partition_problem(RealDisk(), str(part), int(logs[0].stem))
        assert problem is not None and problem.filename == str(old)
    finally:
        if ROOT:
            subprocess.run(["chattr", "-i", str(old)], capture_output=True)


def test_a_checkpoint_hard_linked_to_a_private_file_is_never_quoted(pristine: Path, tmp_path: Path) -> None:
    """A hard link is no symlink: the read cannot tell the file is not Kafka's.  Its malformed lines are described,
    never quoted, so a load run by root over a dir another user controls leaks nothing of the linked file."""
    work = tmp_path / "b"
    copy_tree(pristine, work)
    data = work / "data-0"
    secret = tmp_path / "private"
    secret.write_text("root:$6$the-password-hash:19000:0:99999:7:::\n")
    (data / "recovery-point-offset-checkpoint").unlink(missing_ok=True)
    os.link(secret, data / "recovery-point-offset-checkpoint")
    code, out, _ = load_in_child(data)
    assert "recovery-point-offset-checkpoint" in out and "malformed version line" in out, out
    assert "password" not in out and "root:" not in out, out
    assert secret.read_text().startswith("root:")
