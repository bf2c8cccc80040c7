"""mploader.experiments and the sweep/experiment commands: the sampler on real processes, the page cache made
cold and warm, the findings' arithmetic, a whole (tiny) sweep through the CLI, and, as root, the throttled
loop device: its limit holds, and every loop device, mount, cgroup and file it made is gone after an error,
a Ctrl-C or a SIGTERM of the real command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mploader.cli.main import main
from mploader.experiments.cache import make_cold, make_warm
from mploader.experiments.findings import findings
from mploader.experiments.places import name_prefix, throttled_loop, tmpfs
from mploader.experiments.run import RunResult, RunSpec, copy_broker
from mploader.experiments.sampler import Sampler, shm_bytes
from mploader.format import checkpoint
from mploader.host import cgroup
from mploader.host.cgroup import ReadLimits
from mploader.host.devices import storage_of
from tests.test_host import root_only
from tests.test_readahead import eventually

MiB = 1024 * 1024
REPO = Path(__file__).resolve().parents[1]


def test_the_sampler_sees_the_parent_its_workers_and_their_shared_memory(tmp_path: Path) -> None:
    """A real process tree: a parent holding 60 MB with a child holding 30 MB, and a 2 MB block in /dev/shm named
    as a load of the parent names its blocks."""
    code = ("import os, subprocess, sys, time\n"
            "x = bytearray(60_000_000); x[::4096] = b'1' * len(x[::4096])\n"
            "c = subprocess.Popen([sys.executable, '-c', \"y = bytearray(30_000_000); y[::4096] = b'1' * "
            "len(y[::4096]); print('ok', flush=True); import time; time.sleep(30)\"], stdout=subprocess.PIPE)\n"
            "c.stdout.readline()\n"
            "with open(f'/dev/shm/mploader-{os.getpid()}-0-0-test', 'wb') as f: f.write(b'1' * 2_000_000)\n"
            "print('ready', flush=True); time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        sampler = Sampler(storage_of(str(tmp_path)).sampled(), 0.05).start(proc.pid)
        time.sleep(0.3)
        samples = sampler.stop()
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()
        Path(f"/dev/shm/mploader-{proc.pid}-0-0-test").unlink(missing_ok=True)
    assert len(samples) >= 4
    assert max(s.rss_parent or 0 for s in samples) >= 60_000_000
    assert max(max(s.rss_workers.values(), default=0) for s in samples) >= 30_000_000
    assert max(s.shm_bytes for s in samples) >= 2_000_000
    assert shm_bytes(proc.pid) == 0  # removed
    for s in samples:
        assert len(s.cpu_percent) == psutil.cpu_count() and all(0 <= c <= 100 for c in s.cpu_percent)
        assert all(0 <= r.util_percent <= 100 for r in s.disks.values())


def _cached(path: Path, offset: int) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(4096)], offset, os.RWF_NOWAIT)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_a_cold_and_a_warm_cache_are_made_and_named(tmp_path: Path) -> None:
    if storage_of(str(tmp_path)).in_memory:
        pytest.skip("tmpfs keeps every page")
    f = tmp_path / "d" / "00000000000000000000.log"
    f.parent.mkdir()
    f.write_bytes(os.urandom(8 * MiB))
    assert make_cold([tmp_path / "d"], "fadvise") == "fadvise"
    assert not _cached(f, 4 * MiB)
    assert make_warm([tmp_path / "d"]) == "read once"
    assert _cached(f, 4 * MiB) and _cached(f, 8 * MiB - 4096)
    with pytest.raises(ValueError):
        make_cold([tmp_path], "sometimes")


def test_a_copy_for_an_unclean_restart_recovers_everything(tmp_path: Path) -> None:
    src = tmp_path / "data-0"
    src.mkdir()
    (src / checkpoint.CLEAN_SHUTDOWN_MARKER).write_text("")
    (src / checkpoint.RECOVERY_POINT_CHECKPOINT).write_text("0\n1\norders 0 500\n")
    clean, = copy_broker([src], [tmp_path / "clean"], "clean")
    unclean, = copy_broker([src], [tmp_path / "unclean"], "unclean")
    assert (clean / checkpoint.CLEAN_SHUTDOWN_MARKER).exists()
    assert not (unclean / checkpoint.CLEAN_SHUTDOWN_MARKER).exists()
    assert (unclean / checkpoint.RECOVERY_POINT_CHECKPOINT).read_text() == "0\n0\n"
    assert (src / checkpoint.RECOVERY_POINT_CHECKPOINT).read_text() == "0\n1\norders 0 500\n"  # the source stays


def test_a_copy_keeps_a_preallocated_index_sparse(tmp_path: Path) -> None:
    """Kafka's preallocated indexes are holes; a copy that wrote their zeros would make the load's trim of them
    cost what no broker pays (copy_sparse)."""
    src = tmp_path / "data-0" / "t-0"
    src.mkdir(parents=True)
    index = src / "00000000000000000000.index"
    with open(index, "wb") as f:
        f.write(b"\x00\x00\x00\x01\x00\x00\x00\x10")  # one entry, then a hole to 10 MB
        f.seek(5 * MiB)
        f.write(b"mid")  # data inside the file too
        f.truncate(10 * MiB)
    (src / "00000000000000000000.log").write_bytes(b"x" * 100_000)
    copy, = copy_broker([tmp_path / "data-0"], [tmp_path / "copies"], "unclean")
    for name in ("00000000000000000000.index", "00000000000000000000.log"):
        a, b = src / name, copy / "t-0" / name
        assert b.read_bytes() == a.read_bytes()
        assert os.stat(b).st_mtime_ns == os.stat(a).st_mtime_ns
    assert os.stat(copy / "t-0" / "00000000000000000000.index").st_blocks * 512 < 1 * MiB  # not 10 MB of zeros


def test_a_copy_where_holes_cannot_be_found_is_whole_and_an_error_is_raised(tmp_path: Path, monkeypatch) -> None:
    """A file system without SEEK_DATA gets a plain copy; any other error of the look-up is raised, never a copy
    of zeros."""
    import errno

    from mploader.experiments.run import copy_sparse

    src, dst = tmp_path / "a.log", tmp_path / "b.log"
    src.write_bytes(bytes(range(256)) * 20)
    real_lseek = os.lseek

    def lseek(fd: int, pos: int, how: int, errno_: int = errno.EINVAL) -> int:
        if how == os.SEEK_DATA:
            raise OSError(errno_, os.strerror(errno_))
        return real_lseek(fd, pos, how)

    monkeypatch.setattr(os, "lseek", lseek)
    copy_sparse(str(src), str(dst))
    assert dst.read_bytes() == src.read_bytes()
    monkeypatch.setattr(os, "lseek", lambda fd, pos, how: lseek(fd, pos, how, errno.EIO))
    with pytest.raises(OSError):
        copy_sparse(str(src), str(tmp_path / "c.log"))


def _result(run_id: int, workers: int | str, seconds: float, rate: int | None = None) -> RunResult:
    spec = RunSpec(workers, 1, False, "cold", "unclean", rate)
    return RunResult(run_id, "disk", spec, "fadvise", seconds, seconds + 0.3, int(100e6), 4, 1, "vda", None)


def test_findings_name_the_knee_and_whether_more_workers_hurt() -> None:
    runs = [_result(1, 1, 4.0), _result(2, 2, 2.1), _result(3, 3, 2.0), _result(4, 4, 2.6), _result(5, "adaptive", 2.2),
            _result(6, 1, 2.0, rate=50_000_000)]
    lines = findings(runs)
    assert len(lines) == 2
    assert "fastest 2.00 s (50 MB/s) with 3 worker(s)" in lines[0]
    assert "knee at 2" in lines[0]  # 2.1 s is within 5% of 2.0 s
    assert "4 workers: 2.60 s (38 MB/s), 77% of the best speed (slower: more workers hurt)" in lines[0]
    assert "adaptive: 2.20 s (45 MB/s), 91% of the fastest fixed count's speed" in lines[0]
    assert lines[1].endswith("scanned 50.0 MB/s, 100% of the budget")


def test_a_tiny_sweep_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command itself: generate, copy, cold (fadvise: a test must not empty the machine's cache) and warm
    loads in child processes, CSV, JSON, PNG plots and the report."""
    out = tmp_path / "out"
    code = main(["sweep", "--size", "3MB", "--segment-bytes", "512KiB", "--partitions", "2", "--workers", "1,2",
                 "--modes", "recover", "--cache", "cold,warm", "--cache-method", "fadvise", "--recovery-threads", "1",
                 "--interval", "0.05", "--repeat", "1", "--work-dir", str(tmp_path), "--out", str(out), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["workers"], r["cache"], r["cache_method"]) for r in doc["runs"]] == [
        (1, "cold", "fadvise"), (2, "cold", "fadvise"), (1, "warm", "read once"), (2, "warm", "read once")]
    assert all(r["bytes_read"] > 2_000_000 and r["segments_recovered"] > 0 for r in doc["runs"])
    assert any(r["load_cpu_mean"] > 0 for r in doc["runs"])  # the load's own processes were seen working
    assert len(doc["findings"]) == 2
    for name in ("sweep.md", "sweep.json", "sweep-runs.csv", "sweep-points.csv", "sweep-samples.csv", "sweep-1.png",
                 "sweep-1.json", "sweep-2.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "sweep-1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "sweep.md").read_text()
    assert "## Machine" in md and "rotational" in md and "cold cache" in md
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("mploader-exp-")]  # the scratch dir is gone


# ---- the throttled loop device (root) ----------------------------------------------------------------------


def _ours(tmp_path: Path) -> dict[str, list[str]]:
    """Everything under tmp_path that the kernel still holds: loop devices backed by a file there, mounts there,
    this process's throttle cgroup, and its files."""
    loops = []
    for dev in Path("/sys/block").glob("loop*"):
        backing = dev / "loop" / "backing_file"
        if backing.exists() and backing.read_text().strip().startswith(str(tmp_path)):
            loops.append(dev.name)
    with open("/proc/self/mountinfo") as f:
        mounted = [line.split()[4] for line in f if line.split()[4].startswith(str(tmp_path))]
    h = cgroup.hierarchy()
    groups = [str(p) for p in Path(h.mount_point).glob("mploader-exp-*")] if h else []
    files = [p.name for p in tmp_path.iterdir() if p.name.startswith("mploader-exp-")]
    return {"loops": loops, "mounts": mounted, "cgroups": groups, "files": files}


NOTHING: dict[str, list[str]] = {"loops": [], "mounts": [], "cgroups": [], "files": []}


@root_only
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_the_throttled_device_is_removed_after_an_error_or_a_ctrl_c(tmp_path: Path, error: type[BaseException]) -> None:
    if cgroup.hierarchy() is None:
        pytest.skip("no block IO throttle controller here")
    with pytest.raises(error):
        with throttled_loop(tmp_path, 32 * MiB, ReadLimits(4_000_000, 100)) as place:
            made = _ours(tmp_path)
            assert made["loops"] and made["mounts"] == [str(place.dir)] and made["files"]
            assert place.cgroup_procs is not None and os.path.exists(place.cgroup_procs)
            # the limit is real: 2 MiB read straight from the device by a process in the cgroup takes >= ~0.4 s
            data = place.dir / "f"
            data.write_bytes(os.urandom(2 * MiB))
            os.sync()
            read = ("import mmap, os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
                    "fd = os.open(sys.argv[2], os.O_RDONLY | os.O_DIRECT); buf = mmap.mmap(-1, 1 << 21); "
                    "t = time.perf_counter(); os.preadv(fd, [buf], 0); print(time.perf_counter() - t)")
            took = float(subprocess.run([sys.executable, "-c", read, place.cgroup_procs, str(data)], check=True,
                                        capture_output=True, text=True).stdout)
            assert took >= 0.3, took
            raise error
    assert _ours(tmp_path) == NOTHING
    assert not any(p.name.startswith(name_prefix()) for p in tmp_path.iterdir())


@root_only
def test_a_private_tmpfs_is_unmounted_after_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), tmpfs(tmp_path, 8 * MiB) as place:
        assert place.storage.in_memory and _ours(tmp_path)["mounts"] == [str(place.dir)]
        (place.dir / "x").write_bytes(b"1" * 4096)
        raise RuntimeError
    assert _ours(tmp_path) == NOTHING


@root_only
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stopping_the_experiment_removes_every_device_mount_cgroup_and_file(tmp_path: Path, sig: int) -> None:
    """The real command, stopped while a run reads from the throttled device (held at 1 MB/s: it would take
    seconds); it exits 130 and leaves nothing: no loop device, mount, cgroup, scratch file or run process."""
    h = cgroup.hierarchy()
    if h is None:
        pytest.skip("no block IO throttle controller here")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "mploader", "experiment", "hdd-vs-ssd", "--devices", "throttled",
                             "--restarts", "unclean", "--workers", "1", "--data-dirs", "1", "--size", "6MB",
                             "--segment-bytes", "1MiB",
                             "--partitions", "2", "--read-bps", "1MB", "--read-iops", "50", "--cache-method", "fadvise",
                             "--work-dir", str(tmp_path), "--out", str(out)], cwd=REPO, stderr=subprocess.PIPE,
                            text=True)
    group = Path(h.mount_point) / f"mploader-exp-{proc.pid}" / "cgroup.procs"
    try:
        assert eventually(lambda: group.exists() and bool(group.read_text().split()), 20.0), "no run started"
        runner = int(group.read_text().split()[0])
        assert _ours(tmp_path)["loops"]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not psutil.pid_exists(runner) or psutil.Process(runner).status() == psutil.STATUS_ZOMBIE
    assert _ours(tmp_path) == NOTHING
    assert not out.exists()  # no report of an interrupted experiment
