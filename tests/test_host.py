"""mploader.host: the iostat arithmetic against known counter deltas, the block devices under a path (tmpfs, a
real loop device and a real partition on it when running as root), and the cgroup limit files."""

from __future__ import annotations

import mmap
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mploader.host import devices
from mploader.host.cgroup import ReadLimits, parse_io_max, parse_v1_limits
from mploader.host.devices import mounts, parse_mountinfo, storage_of
from mploader.host.iostat import DiskCounters, cpu_busy_percent, disk_counters, disk_rates

MiB = 1024 * 1024
root_only = pytest.mark.skipif(os.geteuid() != 0 or not (shutil.which("losetup") and shutil.which("mkfs.ext4")),
                               reason="needs root, losetup and mkfs.ext4 (a real loop device)")


def counters(**kw: int) -> DiskCounters:
    base = dict(read_count=0, write_count=0, read_bytes=0, write_bytes=0, read_time_ms=0, write_time_ms=0,
                busy_time_ms=0)
    return DiskCounters(**{**base, **kw})


# ---- the arithmetic of iostat -x ------------------------------------------------------------------------


def test_disk_rates_compute_what_iostat_prints() -> None:
    """2 s between snapshots; the device was busy 1.5 s of them, completed 400 reads of 128 KiB that waited
    800 ms in all and 100 writes of 4 KiB that waited 200 ms: iostat -x says %util 75, r/s 200, rkB/s 25600,
    rareq-sz 128 kB, r_await 2 ms, w/s 50, aqu-sz 0.5."""
    before = counters(read_count=1000, write_count=50, read_bytes=10 * MiB, write_bytes=MiB, read_time_ms=5000,
                      write_time_ms=700, busy_time_ms=90_000)
    after = counters(read_count=1400, write_count=150, read_bytes=10 * MiB + 400 * 128 * 1024,
                     write_bytes=MiB + 100 * 4096, read_time_ms=5800, write_time_ms=900, busy_time_ms=91_500)
    r = disk_rates(before, after, 2.0)
    assert r.util_percent == pytest.approx(75.0)
    assert r.read_iops == pytest.approx(200.0)
    assert r.read_bytes_per_s == pytest.approx(400 * 128 * 1024 / 2)
    assert r.read_request_bytes == pytest.approx(128 * 1024)
    assert r.read_await_ms == pytest.approx(2.0)
    assert r.write_iops == pytest.approx(50.0)
    assert r.write_bytes_per_s == pytest.approx(100 * 4096 / 2)
    assert r.queue_depth == pytest.approx(0.5)


def test_util_is_capped_at_100_and_an_idle_device_has_no_request_size() -> None:
    """io_ticks can run ahead of the wall clock between two reads of /proc/diskstats (iostat caps it too); an
    interval without reads has no mean request size or wait; a counter that went backwards counts as 0."""
    r = disk_rates(counters(busy_time_ms=0), counters(busy_time_ms=1100), 1.0)
    assert r.util_percent == 100.0
    assert r.read_request_bytes is None and r.read_await_ms is None and r.read_iops == 0
    back = disk_rates(counters(read_count=10, read_bytes=MiB), counters(read_count=5, read_bytes=0), 1.0)
    assert back.read_iops == 0 and back.read_bytes_per_s == 0
    with pytest.raises(ValueError):
        disk_rates(counters(), counters(), 0.0)


def test_cpu_busy_counts_iowait_as_idle_and_guest_time_once() -> None:
    cputimes = type(psutil.cpu_times())
    zero = dict.fromkeys(cputimes._fields, 0.0)
    before = [cputimes(**zero), cputimes(**zero)]
    after = [cputimes(**{**zero, "user": 3.0, "system": 1.0, "idle": 4.0, "iowait": 2.0}),
             cputimes(**{**zero, "user": 2.0, "idle": 2.0,
                         **({"guest": 1.0} if "guest" in cputimes._fields else {})})]
    busy = cpu_busy_percent(before, after)
    assert busy[0] == pytest.approx(40.0)  # 4 of 10 s busy; iowait is idle
    assert busy[1] == pytest.approx(50.0)  # guest time is already in user time


# ---- block devices under a path ----------------------------------------------------------------------------


def test_mountinfo_is_parsed_with_its_escapes_and_the_longest_mount_point_wins() -> None:
    text = ("22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
            "40 22 0:38 / /mnt/with\\040space rw - tmpfs tmpfs rw,size=10k\n"
            "41 22 7:1 / /mnt/with\\040space/inner rw shared:5 - ext4 /dev/loop1 rw\n")
    table = parse_mountinfo(text)
    assert [m.mount_point for m in table] == ["/", "/mnt/with space", "/mnt/with space/inner"]
    assert devices.mount_of("/mnt/with space/inner/x", table).source == "/dev/loop1"
    assert devices.mount_of("/mnt/with space/x", table).fstype == "tmpfs"
    assert devices.mount_of("/mnt/with spaces", table).mount_point == "/"
    assert table[2].options == "rw"


def test_a_tmpfs_has_no_block_device() -> None:
    tmpfs = next((m.mount_point for m in mounts() if m.fstype == "tmpfs" and os.access(m.mount_point, os.R_OK)), None)
    if tmpfs is None:
        pytest.skip("no tmpfs mounted here")
    s = storage_of(tmpfs)
    assert s.in_memory and s.devices == () and s.device is None and s.sampled() == ()
    assert "in memory: no block device" in s.describe()


def test_the_devices_of_a_directory_are_known_to_the_kernels_counters(tmp_path: Path) -> None:
    s = storage_of(str(tmp_path))
    if not s.devices:
        pytest.skip(f"{tmp_path} is on {s.mount.fstype}, without a block device")
    assert set(s.sampled()) <= set(psutil.disk_io_counters(perdisk=True))
    if not os.path.isdir("/sys/block"):
        pytest.skip("no /sys here to check the disks against")
    # each disk is one in the kernel's sense: a whole device in /sys/block, not a partition of one
    assert s.disks
    for disk in s.disks:
        assert os.path.isdir(f"/sys/block/{disk.name}"), disk
        assert not os.path.exists(f"/sys/class/block/{disk.name}/partition"), disk
    # the first name watched is the device the kernel says holds the directory (where stat gives a real one)
    st = os.stat(tmp_path)
    if os.major(st.st_dev) != 0:
        with open(f"/sys/class/block/{s.sampled()[0]}/dev") as f:
            assert f.read().strip() == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real loop device over a file in tmp_path (partition scanning on), detached afterwards."""
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(48 * MiB)
    loop = subprocess.run(["losetup", "--find", "--show", "--partscan", str(image)], check=True, capture_output=True,
                          text=True).stdout.strip()
    try:
        yield loop, image
    finally:
        subprocess.run(["losetup", "-d", loop], check=False)


def _mounted(dev: str, at: Path) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", dev], check=True, capture_output=True)
    at.mkdir()
    subprocess.run(["mount", dev, str(at)], check=True)


@root_only
def test_a_loop_device_resolves_to_its_backing_files_disk(tmp_path: Path, loop_device: tuple[str, Path]) -> None:
    loop, image = loop_device
    mnt = tmp_path / "mnt"
    _mounted(loop, mnt)
    try:
        s = storage_of(str(mnt / "data"))
        under = storage_of(str(tmp_path))
        assert s.device is not None and s.device.kind == "loop" and s.device.name == os.path.basename(loop)
        assert s.device.backing_file == str(image)
        assert s.devices[1:] == under.devices  # then the chain of the file system holding the image
        assert s.sampled()[0] == s.device.name and s.disks == under.disks
        before = disk_counters([s.device.name])[s.device.name]
        fd = os.open(loop, os.O_RDONLY | os.O_DIRECT)  # 1 MiB straight from the device: the counters see it
        try:
            buf = mmap.mmap(-1, MiB)  # page-aligned, as O_DIRECT needs
            os.preadv(fd, [buf], 8 * MiB)
        finally:
            os.close(fd)
        after = disk_counters([s.device.name])[s.device.name]
        assert after.read_bytes - before.read_bytes == MiB
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@root_only
@pytest.mark.skipif(shutil.which("addpart") is None, reason="needs addpart (util-linux) to add a partition")
def test_a_partition_resolves_to_its_disk(tmp_path: Path, loop_device: tuple[str, Path]) -> None:
    """A real partition: added to the loop device with BLKPG (addpart), so it needs no partition-table parser
    in the kernel (this VM's kernel has none)."""
    loop, _ = loop_device
    subprocess.run(["addpart", loop, "1", "2048", str(40 * 2048)], check=True)
    part = f"{loop}p1"
    mnt = tmp_path / "mnt"
    _mounted(part, mnt)
    try:
        s = storage_of(str(mnt))
        kinds = [(d.name, d.kind) for d in s.devices[:2]]
        assert kinds == [(os.path.basename(part), "partition"), (os.path.basename(loop), "loop")]
        assert s.devices[0].rotational == s.devices[1].rotational  # a partition has its disk's queue
        assert s.sampled()[0] == os.path.basename(part)
        assert os.path.basename(loop) not in s.sampled()[1:]  # the loop is neither the file system's nor a disk
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


# ---- cgroup limits ---------------------------------------------------------------------------------------


def test_cgroup_limit_files_are_read_per_device() -> None:
    assert parse_v1_limits("8:0 1000\n7:3 150000000\n", "7:3") == 150_000_000
    assert parse_v1_limits("8:0 1000\n", "7:3") is None
    assert parse_io_max("7:3 rbps=2097152 wbps=max riops=120 wiops=max\n", "7:3") == ReadLimits(2097152, 120)
    assert parse_io_max("7:3 rbps=max wbps=max riops=max wiops=max\n", "7:3") == ReadLimits()
    limits = ReadLimits(100_000_000, 200)
    assert limits.use_percent(50e6, 150) == pytest.approx(75.0)  # the larger of the two shares
    assert ReadLimits().use_percent(1e9, 1e5) is None
