"""The seek-modelled disk: the model's arithmetic (pure), the daemon's scheduler on real threads, and, as root
with FUSE, its calibration on a real loop device: one sequential reader near the model's rate, two concurrent
readers of far-apart files well below one reader reading them in turn (the head seeks between them)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import given, settings, strategies as st

from mploader.cli.main import main
from mploader.experiments.disk_model import (
    HDD_7200,
    SSD_LIKE,
    positioning_s,
    rate_at,
    seek_s,
    service_s,
    track_bytes,
    transfer_s,
)
from mploader.experiments.leftovers import scratch_base
from mploader.experiments.places import fuse_problem, name_prefix, seek_loop
from mploader.experiments.seek_daemon import MODULE, ModelledDisk
from tests.examples import examples
from tests.test_experiments import NOTHING, REPO, _ours
from tests.test_host import root_only

MB = 1_000_000
MiB = 1 << 20
GiB = 1 << 30
HDD = HDD_7200.with_stroke(GiB)
HALF_TURN = 60 / 7200 / 2

# ---- the model's arithmetic ----------------------------------------------------------------------------------


def test_a_request_that_continues_the_last_one_pays_only_its_transfer() -> None:
    assert positioning_s(HDD, 4096, 4096) == 0.0
    assert service_s(HDD, 4096, 4096, MiB) == pytest.approx(MiB / rate_at(HDD, 4096))


def test_a_seek_pays_the_arm_and_half_a_revolution() -> None:
    assert HALF_TURN == pytest.approx(0.004167, abs=1e-6)
    far = positioning_s(HDD, 0, GiB // 2)
    assert far == pytest.approx(seek_s(HDD, GiB // 2) + HALF_TURN)
    assert 0.010 < far < 0.020


def test_the_seek_grows_with_the_square_root_of_the_distance_up_to_the_full_stroke() -> None:
    assert seek_s(HDD, 0) == 0.0
    assert seek_s(HDD, 1) == pytest.approx(HDD.settle_s, abs=1e-4)  # a neighbouring track: the settle time
    quarter, whole = seek_s(HDD, GiB // 4) - HDD.settle_s, seek_s(HDD, GiB) - HDD.settle_s
    assert quarter == pytest.approx(whole / 2)
    assert seek_s(HDD, 10 * GiB) == seek_s(HDD, GiB) <= HDD.full_stroke_s


def test_the_mean_seek_over_random_positions_is_the_datasheets_average() -> None:
    """Distances of two uniform positions have density 2(1 - d): the mean of the model over it is the 8.5 ms."""
    n = 20_000
    mean = sum(seek_s(HDD, int(GiB * (i + 0.5) / n)) * 2 * (1 - (i + 0.5) / n) / n for i in range(n))
    assert mean == pytest.approx(HDD.average_seek_s, rel=0.01)


def test_a_short_skip_forward_waits_for_the_platter_not_the_arm() -> None:
    gap = 100_000
    assert positioning_s(HDD, 0, gap) == pytest.approx(gap / rate_at(HDD, 0))
    assert positioning_s(HDD, 0, gap) < HALF_TURN
    beyond = int(track_bytes(HDD, 0)) + 1
    assert positioning_s(HDD, 0, beyond) > HALF_TURN  # off the track: a seek and a rotation
    assert positioning_s(HDD, gap, 0) > HALF_TURN  # backwards: the same


def test_the_outer_zone_is_twice_as_fast_as_the_inner_one() -> None:
    assert rate_at(HDD, 0) == 200e6 and rate_at(HDD, GiB) == 100e6 and rate_at(HDD, GiB // 2) == 150e6
    assert transfer_s(HDD, GiB, MiB) == pytest.approx(2 * transfer_s(HDD, 0, MiB))


@given(st.integers(0, GiB), st.integers(0, GiB), st.integers(1, 4 * MiB))
@settings(max_examples=examples(200), deadline=None)
def test_the_ssd_like_profile_has_no_head(head: int, offset: int, size: int) -> None:
    ssd = SSD_LIKE.with_stroke(GiB)
    assert positioning_s(ssd, head, offset) == SSD_LIKE.access_s
    assert service_s(ssd, head, offset, size) == pytest.approx(SSD_LIKE.access_s + size / 550e6)


# ---- the daemon's scheduler, on real threads -----------------------------------------------------------------


def _serve_all(disk: ModelledDisk, requests: list[tuple[int, int]]) -> float:
    """Every request at once, one thread each; returns the wall seconds."""
    threads = [threading.Thread(target=disk.serve, args=(o, s, lambda: None)) for o, s in requests]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - t0


def test_the_hdd_serves_one_request_at_a_time_for_the_models_time() -> None:
    disk = ModelledDisk(HDD)
    far = [(i * (GiB // 8), 64 * 1024) for i in range(8)]  # each a seek: ~8 x 10 ms
    took = _serve_all(disk, far)
    assert took >= 0.95 * disk.figures.modelled_s and disk.figures.modelled_s > 8 * HALF_TURN
    assert disk.figures.requests == 8 and disk.figures.read_bytes == 8 * 64 * 1024


def test_pieces_of_one_read_are_taken_in_disk_order() -> None:
    """The kernel sends a large read in pieces at once, in no set order: the disk takes the one under its head
    first, so a sequential read pays one positioning, not one per piece."""
    disk = ModelledDisk(HDD, pieces_s=1.0)  # "at once": within a second here, whatever the machine's load
    first = threading.Thread(target=disk.serve, args=(0, MiB, lambda: time.sleep(0.05)))
    first.start()  # the pieces arrive while it is served
    time.sleep(0.01)
    _serve_all(disk, [(i * MiB, MiB) for i in (3, 1, 2, 5, 4, 7, 6, 8)])
    first.join()
    assert disk.figures.requests == 9 and disk.figures.positioned == 1  # the first: the head was nowhere yet


def test_a_later_continuation_does_not_overtake_a_waiting_request() -> None:
    """Else one sequential reader would keep the head and starve the others."""
    disk = ModelledDisk(HDD, pieces_s=0.005)
    served: list[int] = []

    def request(offset: int, hold: float) -> threading.Thread:
        def io() -> None:
            served.append(offset)
            time.sleep(hold)
        t = threading.Thread(target=disk.serve, args=(offset, MiB, io))
        t.start()
        return t

    threads = [request(0, 0.1)]  # the first holds the head while the others arrive
    time.sleep(0.02)
    threads.append(request(GiB // 2, 0))
    time.sleep(0.04)  # the continuation comes well after the far request
    threads.append(request(MiB, 0))
    for t in threads:
        t.join()
    assert served == [0, GiB // 2, MiB]


def test_the_ssd_like_profile_serves_its_channels_at_once() -> None:
    slow = dataclasses.replace(SSD_LIKE, access_s=0.02).with_stroke(GiB)  # long enough to time with threads
    took = _serve_all(ModelledDisk(slow), [(i * MiB, 4096) for i in range(8)])
    assert 2 * slow.access_s <= took < 4 * slow.access_s  # 8 latencies on 4 channels: two rounds, not eight


# ---- calibration on a real device (root, FUSE) ---------------------------------------------------------------

needs_fuse = pytest.mark.skipif(fuse_problem() is not None, reason=f"no FUSE here: {fuse_problem()}")
FILE_BYTES = 48 * 4 * MiB  # ~200 MB, in the writer's 4 MiB pieces


def _write(path: Path, size: int) -> None:
    chunk = os.urandom(4 * MiB)
    with open(path, "wb") as f:
        for _ in range(size // len(chunk)):
            f.write(chunk)
        os.fsync(f.fileno())


def _cold(*paths: Path) -> None:
    """Only these files' pages dropped (not the whole machine's cache)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def _read(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(MiB):
            pass


def _first_byte(path: Path) -> int:
    """Where the file starts on the device (filefrag's first extent, in bytes)."""
    out = subprocess.run(["filefrag", "-v", "-b1", str(path)], check=True, capture_output=True, text=True).stdout
    row = next(line for line in out.splitlines() if line.strip().startswith("0:"))
    return int(row.split(":")[2].split("..")[0])


@pytest.mark.slow
@root_only
@needs_fuse
def test_calibration_one_reader_near_the_model_two_readers_far_apart_much_slower(tmp_path: Path) -> None:
    with seek_loop(tmp_path, GiB, HDD_7200) as place:
        assert place.figures is not None
        a, gap, b = place.dir / "a", place.dir / "gap", place.dir / "b"
        _write(a, FILE_BYTES)
        subprocess.run(["fallocate", "-l", str(500 * MB), str(gap)], check=True)  # puts b far from a
        _write(b, FILE_BYTES)
        start = _first_byte(a)
        apart = _first_byte(b) - start
        assert apart > 400 * MB, apart

        _cold(a, b)
        time.sleep(0.6)  # the daemon's figures are written every half second
        before = place.figures()
        t0 = time.monotonic()
        _read(a)
        one = FILE_BYTES / (time.monotonic() - t0)
        time.sleep(0.6)
        after = place.figures()
        requests = after["requests"] - before["requests"]
        mean_request = (after["read_bytes"] - before["read_bytes"]) / requests

        _cold(a, b)
        t0 = time.monotonic()
        _read(a)
        _read(b)
        in_turn = 2 * FILE_BYTES / (time.monotonic() - t0)

        _cold(a, b)
        t0 = time.monotonic()
        readers = [threading.Thread(target=_read, args=(p,)) for p in (a, b)]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        together = 2 * FILE_BYTES / (time.monotonic() - t0)
        cpu = place.figures()["cpu_s"]

    model = rate_at(HDD_7200.with_stroke(GiB), start)
    print(f"one reader {one / MB:.0f} MB/s (model {model / MB:.0f}); in turn {in_turn / MB:.0f} MB/s; "
          f"two at once {together / MB:.0f} MB/s; mean request {mean_request / 1024:.0f} KiB; daemon CPU {cpu} s")
    assert 0.6 * model < one <= 1.05 * model  # near the model's rate (a busy machine's neighbours cost some)
    assert mean_request >= 128 * 1024  # the read-ahead's large requests reach the daemon whole or in big pieces
    assert together < 0.7 * in_turn
    assert _ours(tmp_path) == NOTHING
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(name_prefix())]


def _queues() -> dict[str, tuple[str, ...]]:
    return {d.name: tuple((d / "queue" / s).read_text().strip() for s in ("rotational", "read_ahead_kb", "scheduler"))
            for d in Path("/sys/block").glob("loop*")}


@root_only
@needs_fuse
def test_the_seek_modelled_device_is_removed_after_an_error_its_queue_put_back(tmp_path: Path) -> None:
    before = _queues()
    with pytest.raises(KeyboardInterrupt), seek_loop(tmp_path, 64 * MiB, SSD_LIKE) as place:
        made = _ours(tmp_path)
        assert made["loops"] and str(place.dir) in made["mounts"] and len(made["mounts"]) == 2
        loop = made["loops"][0]
        rotational, read_ahead, scheduler = _queues()[loop]
        assert (rotational, read_ahead) == ("0", "128") and "[none]" in scheduler
        raise KeyboardInterrupt
    assert _ours(tmp_path) == NOTHING
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(name_prefix())]
    if loop in before:  # a loop device keeps its queue's read-ahead and scheduler when detached: put back
        assert _queues()[loop][1:] == before[loop][1:]


@root_only
@needs_fuse
def test_cleanup_removes_what_a_killed_experiment_left(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An experiment killed with SIGKILL while its seek-modelled disk is mounted leaves the mounts, the loop
    device, the daemon and the image; ``mploader cleanup`` finds them by the dead pid in their names and removes
    them all."""
    code = ("import sys, time; from pathlib import Path; from mploader.experiments.places import seek_loop; "
            "from mploader.experiments.disk_model import HDD_7200; "
            "made = seek_loop(Path(sys.argv[1]), 64 << 20, HDD_7200); made.__enter__(); print('ready', flush=True); "
            "time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            cwd=REPO)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        made = _ours(tmp_path)
        assert made["loops"] and len(made["mounts"]) == 2 and made["files"]
        daemons = [p for p in psutil.process_iter(["cmdline"])
                   if MODULE in (p.info["cmdline"] or []) and str(proc.pid) in p.info["cmdline"]]
        assert len(daemons) == 1
    finally:
        proc.kill()
        proc.wait()
    assert _ours(tmp_path)["loops"]  # the kill left them
    assert main(["cleanup"]) == 0
    out = capsys.readouterr().out
    assert f"mploader-exp-{proc.pid}" in out and "could not remove" not in out
    assert _ours(tmp_path) == NOTHING
    assert not daemons[0].is_running()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(f"mploader-exp-{proc.pid}")]


def test_cleanup_removes_a_dead_experiments_scratch_directory_and_keeps_a_live_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()  # a pid that has exited
    base = scratch_base()
    left, live = base / f"mploader-exp-{dead}-test", base / f"mploader-exp-{os.getpid()}-test"
    try:
        for d in (left, live):
            (d / "broker").mkdir(parents=True)
            (d / "broker" / "00000000000000000000.log").write_bytes(b"x")
        assert main(["cleanup"]) == 0
        out = capsys.readouterr().out
        assert not left.exists() and str(left) in out
        assert live.exists() and str(live) not in out
    finally:
        for d in (left, live):
            shutil.rmtree(d, ignore_errors=True)
