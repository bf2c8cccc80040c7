"""One reader per disk with a head, in disk order (mploader.engine.diskorder and the gated
mploader.engine.readahead): the gate and the turns on real files, the order against ``filefrag``'s (an independent
reading of the file system's map), and, as root, on a real loop device: the requests the read-ahead makes against
``cat``'s, and when a dir is read so."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mploader import LoaderConfig
from mploader.engine.diskorder import cached_share, disk_ordered, physical_offset, reads_in_disk_order
from mploader.engine.inline import InlineEngine
from mploader.engine.plan import DirPlan, plan_segment_scans
from mploader.engine.pool import PoolEngine
from mploader.engine.readahead import DiskTurns, ReadAhead, advice_bytes, disk_turns
from mploader.host.cpus import usable_cpus
from mploader.host.devices import queue_of
from mploader.load_plan import plan_load
from mploader.result import LoadStats
from mploader.scan import SegmentTask
from tests.kafkadir import B, PartitionBuilder, data_dir
from tests.test_engine import _partitions_of
from tests.test_host import root_only

MiB = 1 << 20

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="posix_fadvise: Linux only")
from tests.test_readahead import eventually  # noqa: E402 - the one poller

needs_filefrag = pytest.mark.skipif(shutil.which("filefrag") is None, reason="needs filefrag (e2fsprogs)")


def write(path: Path, size: int) -> str:
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        os.fsync(f.fileno())
    return str(path)


def cold(*paths: str) -> None:
    """These files' pages dropped (they are clean: written and synced)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cachestat_works(path: str) -> bool:
    """Whether the page cache can be asked here (cachestat, Linux 6.5) and drops pages (not a tmpfs); leaves the
    file's first pages cached."""
    cold(path)
    if cached_share([path]) != 0.0:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, 4096, 0)
    finally:
        os.close(fd)
    return cached_share([path]) > 0.0


def first_byte(path: str) -> int:
    """Where the file's first byte lies on its device: ``filefrag``'s first extent, in bytes."""
    out = subprocess.run(["filefrag", "-v", "-b1", path], check=True, capture_output=True, text=True).stdout
    row = next(line for line in out.splitlines() if line.strip().startswith("0:"))
    return int(row.split(":")[2].split("..")[0])


# ---- the gate and the turns ----------------------------------------------------------------------------------


def test_a_gated_scan_waits_until_its_range_is_read(tmp_path: Path) -> None:
    """The disk's turn held by another reader: nothing is read, and a scan of the range waits; the turn given, the
    range is read and the scan goes on.  A range the read-ahead does not hold never waits."""
    a = write(tmp_path / "a.log", 2 * MiB)
    cold(a)
    turns, other = DiskTurns(), object()
    assert turns.take(other, lambda: False)
    ra = ReadAhead([(a, 0, 2 * MiB)], window=64 * MiB, step=MiB, gated=True, turns=turns)
    try:
        scanned = threading.Event()
        scan = threading.Thread(target=lambda: (ra.wait_read(a, 0), scanned.set()))
        scan.start()
        assert not scanned.wait(0.3) and not ra.ready(a, 0) and ra.advised == 0
        assert ra.ready(str(tmp_path / "b.log"), 0)  # not one of its ranges
        turns.give(other)
        assert scanned.wait(5) and ra.read == 1 and ra.advised == 2 * MiB
        scan.join()
    finally:
        ra.close()


def test_a_read_ahead_not_gated_never_holds_a_scan(tmp_path: Path) -> None:
    a = write(tmp_path / "a.log", MiB)
    turns, other = DiskTurns(), object()
    assert turns.take(other, lambda: False)
    ra = ReadAhead([(a, 0, MiB)], window=64 * MiB, step=MiB, turns=turns)
    try:
        assert ra.ready(a, 0)
        ra.wait_read(a, 0)  # returns at once
    finally:
        turns.give(other)
        ra.close()


def test_a_gated_reader_waiting_for_room_lets_every_scan_go(tmp_path: Path) -> None:
    """With its window full and nothing scanned, the reader could wait for ever for scans that wait for it: the
    gate opens while it waits for room."""
    a, b = write(tmp_path / "a.log", 4 * MiB), write(tmp_path / "b.log", MiB)
    ra = ReadAhead([(a, 0, 4 * MiB), (b, 0, MiB)], window=MiB, step=MiB, gated=True)
    try:
        assert eventually(lambda: ra.ready(b, 0))
        assert ra.advised == MiB and ra.read == 0  # b is not read: the gate is open
        ra.done(5 * MiB)
        assert eventually(lambda: ra.read == 2)
    finally:
        ra.close()


def test_the_readers_of_one_disk_take_turns_in_the_order_they_ask() -> None:
    turns, holder = DiskTurns(), object()
    assert turns.take(holder, lambda: False)
    taken: list[str] = []
    quitting = threading.Event()

    def reader(name: str, stopped: Callable[[], bool] = lambda: False) -> threading.Thread:
        def run() -> None:
            if turns.take(name, stopped):
                taken.append(name)
                turns.give(name)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.05)  # in the queue before the next one asks
        return t

    threads = [reader("b"), reader("quits", quitting.is_set), reader("c")]
    quitting.set()  # a reader closed while it waits gives up its place, and holds nobody up
    time.sleep(0.2)
    turns.give(holder)
    for t in threads:
        t.join(5)
    assert taken == ["b", "c"]


def test_two_gated_readers_of_one_disk_read_all_their_ranges(tmp_path: Path) -> None:
    turns = DiskTurns()
    files = [write(tmp_path / f"{i}.log", 3 * MiB) for i in range(4)]
    readers = [ReadAhead([(f, 0, 3 * MiB) for f in pair], window=64 * MiB, step=MiB, gated=True, turns=turns)
               for pair in (files[:2], files[2:])]
    try:
        assert all(eventually(lambda r=r: r.read == 2) for r in readers)
    finally:
        for r in readers:
            r.close()


# ---- disk order ---------------------------------------------------------------------------------------------


@needs_filefrag
def test_physical_offset_is_where_filefrag_says(tmp_path: Path) -> None:
    path = write(tmp_path / "a.log", 2 * MiB)
    fd = os.open(path, os.O_RDONLY)
    try:
        at = physical_offset(fd, 0)
    except OSError as e:
        pytest.skip(f"no FIEMAP on this file system: {e}")
    try:
        assert at == first_byte(path)
        out = subprocess.run(["filefrag", "-v", "-b1", path], capture_output=True, text=True).stdout
        first_extent = next(line for line in out.splitlines() if line.strip().startswith("0:"))
        length = int(first_extent.split(":")[3])
        assert physical_offset(fd, length // 2) == at + length // 2  # inside the first extent
        os.ftruncate(os.open(tmp_path / "hole", os.O_WRONLY | os.O_CREAT), MiB)
        hole = os.open(tmp_path / "hole", os.O_RDONLY)
        assert physical_offset(hole, 0) is None
        os.close(hole)
    finally:
        os.close(fd)


def _partitions_written_out_of_name_order(root: Path) -> tuple[str, list[str]]:
    """A data dir whose partitions were written t-2, t-0, t-1, t-1's segment 300 before its segment 0 (real
    batches, each file synced as written); its .log paths in that order."""
    d = data_dir(root, "d1", clean=False)
    logs = []
    for p, bases in ((2, (0,)), (0, (0, 300)), (1, (300, 0))):
        part = PartitionBuilder(d, "t", p)
        for base in bases:
            part.segment(base, *(B(o, value=bytes(3000)) for o in range(base, base + 300)))
            logs.append(os.path.join(d, f"t-{p}", f"{base:020d}.log"))
            fd = os.open(logs[-1], os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    return str(d), logs


def assert_disk_order(parts: list[list[str]], where: dict[str, int]) -> None:
    """Partitions (their .log paths in the order read) by where their first byte lies, each one's segments too."""
    firsts = [min(where[p] for p in paths) for paths in parts]
    assert firsts == sorted(firsts)
    for paths in parts:
        assert [where[p] for p in paths] == sorted(where[p] for p in paths)


@needs_filefrag
def test_the_plan_in_disk_order_is_filefrags_order(tmp_path: Path) -> None:
    """Partitions by where their first planned byte lies, a small partition's segments in that order too; a
    partition above ``within_bytes`` keeps its offset order (Phase 2's)."""
    d, logs = _partitions_written_out_of_name_order(tmp_path)
    try:
        where = {p: first_byte(p) for p in logs}
    except (subprocess.CalledProcessError, StopIteration):
        pytest.skip("filefrag shows no extents here")
    if sorted(logs, key=where.__getitem__) == sorted(logs):
        pytest.skip("the file system laid the files out in name order: nothing to reorder")
    planned = plan_segment_scans(DirPlan(d, False, _partitions_of(d), {}))
    ordered = disk_ordered(planned, 64 * MiB)
    assert sorted(t.path for _, tasks in ordered for t in tasks) == sorted(logs) and len(ordered) == 3
    assert_disk_order([[t.path for t in tasks] for _, tasks in ordered], where)
    kept = disk_ordered(planned, 0)  # no partition small enough: segments in offset order (Phase 2's)
    assert all([t.base_offset for t in tasks] == sorted(t.base_offset for t in tasks) for _, tasks in kept)
    firsts = [where[tasks[0].path] for _, tasks in kept]  # each partition where its first planned byte lies
    assert firsts == sorted(firsts)


@needs_filefrag
def test_the_inline_engine_in_disk_order_reads_ahead_gated_and_loads_in_that_order(tmp_path: Path) -> None:
    d, logs = _partitions_written_out_of_name_order(tmp_path)
    try:
        where = {p: first_byte(p) for p in logs}
    except (subprocess.CalledProcessError, StopIteration):
        pytest.skip("filefrag shows no extents here")
    engine = InlineEngine(LoadStats(), disk_order=True)
    try:
        order = engine.prefetch([DirPlan(d, False, _partitions_of(d), {})])[d]
        ra = engine._read_ahead[d]
        assert ra.gated and sorted(path for path, _, _ in ra.ranges) == sorted(logs)
        # Phase 2 takes the partitions in the order the reader reads them
        parts = [[path for path, _, _ in ra.ranges if path.startswith(part[0] + os.sep)] for part in order]
        assert [path for paths in parts for path in paths] == [path for path, _, _ in ra.ranges]
        assert_disk_order(parts, where)
        assert eventually(lambda: ra.read == len(logs))
    finally:
        engine.close()


def test_the_pool_submits_a_chunk_only_once_it_is_read(tmp_path: Path) -> None:
    """The disk's turn held elsewhere: the gated read-ahead reads nothing, so no chunk goes to a worker; the turn
    given, they do, and Phase 2's scans come back whole."""
    d, logs = _partitions_written_out_of_name_order(tmp_path)
    queue = queue_of(d)
    if queue is None:
        pytest.skip(f"{d} is on no block device (no disk to take turns on)")
    turns, holder = disk_turns(queue.disk), object()
    assert turns.take(holder, lambda: False)
    engine = PoolEngine(LoadStats(), 2, [d], None, chunk_bytes=300_000, disk_order=True)
    engine.parent_head_bytes = 0  # every segment to the workers
    try:
        engine.prefetch([DirPlan(d, False, _partitions_of(d), {})])
        time.sleep(0.3)
        assert engine._pending and not any(p.chunks for p in engine._pending.values())
        turns.give(holder)
        assert eventually(lambda: any(p.chunks for p in engine._pending.values()))
        for path in logs:
            scan = engine.scan(d, SegmentTask(path, int(os.path.basename(path)[:20])))
            assert scan.valid_bytes == os.path.getsize(path)
    finally:
        with contextlib.suppress(ValueError):
            turns.give(holder)
        engine.close()


# ---- a real loop device (root) ------------------------------------------------------------------------------


@contextlib.contextmanager
def _loop_ext4(tmp_path: Path, read_ahead_kb: int = 128) -> Iterator[tuple[str, Path]]:
    """A loop device (direct I/O) over a sparse file, its queue set as a SATA disk's (rotational, 128 KiB of
    read-ahead), ext4 on it, mounted; all undone after (a detached loop device keeps its read-ahead: put back)."""
    image, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    with open(image, "wb") as f:
        f.truncate(256 * MiB)
    mnt.mkdir()
    dev = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(image)], check=True,
                         capture_output=True, text=True).stdout.strip()
    queue = Path("/sys/block") / os.path.basename(dev) / "queue"
    before = (queue / "read_ahead_kb").read_text().strip()
    try:
        (queue / "rotational").write_text("1")
        (queue / "read_ahead_kb").write_text(str(read_ahead_kb))
        subprocess.run(["mkfs.ext4", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev], check=True)
        subprocess.run(["mount", "-o", "noatime", dev, str(mnt)], check=True)
        try:
            yield os.path.basename(dev), mnt
        finally:
            subprocess.run(["umount", str(mnt)], check=False)
    finally:
        (queue / "read_ahead_kb").write_text(before)
        subprocess.run(["losetup", "-d", dev], check=False)


def _reads(dev: str) -> tuple[int, int]:
    """The device's completed reads and bytes read so far (/sys/block/DEV/stat)."""
    fields = (Path("/sys/block") / dev / "stat").read_text().split()
    return int(fields[0]), int(fields[2]) * 512


def _mean_request(dev: str, read: Callable[[], object]) -> tuple[float, int]:
    """The mean request and the bytes of the reads ``read`` made of the device (counted once they completed: the
    read-ahead's last pieces may still be in flight when it has waited for their last pages)."""
    ios0, bytes0 = _reads(dev)
    read()
    assert eventually(lambda: (Path("/sys/block") / dev / "inflight").read_text().split() == ["0", "0"])
    ios, nbytes = _reads(dev)
    return (nbytes - bytes0) / max(1, ios - ios0), nbytes - bytes0


@root_only
def test_one_willneed_reads_at_most_the_larger_of_read_ahead_and_largest_request(tmp_path: Path) -> None:
    """Why the pieces are sized from the device (readahead.advice_bytes): the kernel cuts one WILLNEED there."""
    with _loop_ext4(tmp_path) as (dev, mnt):
        path = write(mnt / "a.log", 8 * MiB)
        if not cachestat_works(path):
            pytest.skip("no cachestat here (Linux 6.5)")
        queue = queue_of(str(mnt))
        assert queue is not None and queue.read_ahead_bytes == 128 * 1024
        cap = max(queue.read_ahead_bytes, queue.max_request_bytes or 0)
        assert cap < 4 * MiB, "this kernel's loop devices take 4 MiB requests: nothing to show"
        cold(path)
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 4 * MiB, os.POSIX_FADV_WILLNEED)
        os.close(fd)
        assert eventually(lambda: cached_share([path]) * 8 * MiB >= cap)
        time.sleep(0.2)
        assert cached_share([path]) * 8 * MiB == cap  # not the 4 MiB asked for
        assert advice_bytes(queue) == cap


@root_only
def test_the_read_ahead_requests_are_never_smaller_than_the_kernels_own(tmp_path: Path) -> None:
    """The same cold files read by ``cat`` and by the gated read-ahead: the read-ahead's mean request is at least
    cat's, and it reads every byte (nothing left to the scans' page faults)."""
    with _loop_ext4(tmp_path) as (dev, mnt):
        files = [write(mnt / f"{i:020d}.log", 6 * MiB + 12345) for i in range(4)]
        cold(*files)
        cat, cat_bytes = _mean_request(dev, lambda: subprocess.run(["cat", *files], stdout=subprocess.DEVNULL,
                                                                     check=True))
        cold(*files)
        ranges = [(f, 0, os.path.getsize(f)) for f in files]
        ra = ReadAhead(ranges, window=256 * MiB, step=advice_bytes(queue_of(str(mnt))), gated=True)
        try:
            ours, our_bytes = _mean_request(dev, lambda: eventually(lambda: ra.read == len(files)))
        finally:
            ra.close()
        total = sum(os.path.getsize(f) for f in files)
        assert cat_bytes >= total and our_bytes >= total
        assert ours >= cat, f"read-ahead {ours / 1024:.0f} KiB a request, cat {cat / 1024:.0f} KiB"
        assert cached_share(files) == 1.0 or not cachestat_works(files[0])


@root_only
def test_a_cold_dir_on_a_disk_with_a_head_is_read_by_one_reader_and_auto_takes_no_partition_workers(
        tmp_path: Path) -> None:
    """200 small partitions: "auto" loads them in partition workers (its estimate is past the bar on 2 CPUs), but
    not while they are cold on a rotational device, where each worker would be another reader of the disk."""
    if usable_cpus() < 2:
        pytest.skip("auto takes partition workers only with 2 CPUs or more")
    with _loop_ext4(tmp_path) as (dev, mnt):
        d = mnt / "d1"
        for p in range(200):
            (d / f"t-{p}").mkdir(parents=True)
            (d / f"t-{p}" / f"{0:020d}.log").write_bytes(os.urandom(16384))
        os.sync()
        logs = [str(d / f"t-{p}" / f"{0:020d}.log") for p in range(200)]
        if not cachestat_works(logs[0]):
            pytest.skip("no cachestat here (Linux 6.5)")
        plan = DirPlan(str(d), False, _partitions_of(str(d)), {})
        for p in logs:  # warm: nothing to read from the disk, partitions in workers as before
            with open(p, "rb") as f:
                f.read()
        assert not reads_in_disk_order(plan, "auto")
        if plan_load(LoaderConfig(), [plan]).partition_workers < 2:  # e.g. spawned workers: dearer to start
            pytest.skip("auto takes no partition workers for this dir here even when it is warm")
        cold(*logs)
        assert reads_in_disk_order(plan, "auto") and not reads_in_disk_order(plan, 0)
        assert plan_load(LoaderConfig(), [plan]).partition_workers == 0
        (Path("/sys/block") / dev / "queue" / "rotational").write_text("0")
        assert not reads_in_disk_order(plan, "auto")  # no head: no seeks to spare
