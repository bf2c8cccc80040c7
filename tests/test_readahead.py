"""The read-ahead of Phase 1's ranges (mploader.engine.readahead) and how the engines drive it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import mploader.engine.pool as pool_mod
from mploader import LoaderConfig, load_logs
from mploader.engine import readahead
from mploader.engine.inline import InlineEngine
from mploader.engine.plan import DirPlan
from mploader.engine.pool import PoolEngine
from mploader.engine.readahead import ReadAhead
from mploader.result import LoadStats
from tests.kafkadir import NOW, B, PartitionBuilder, data_dir
from tests.test_engine import _partitions_of

MiB = 1024 * 1024

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="posix_fadvise: Linux only")


def eventually(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def cached(fd: int, offset: int) -> bool:
    """Whether the page at ``offset`` is in the page cache: a read that must not wait for the disk."""
    try:
        os.preadv(fd, [bytearray(4096)], offset, os.RWF_NOWAIT)
    except BlockingIOError:
        return False
    return True


def test_the_advised_pages_come_into_the_page_cache(tmp_path) -> None:
    """Each page is probed once, after the thread is done: a probe of a page not in the cache starts its
    read, so polling a page would bring it in without any read-ahead."""
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(os.urandom(16 * MiB))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean pages of our own file: evicted
        if cached(fd, 4 * MiB):
            pytest.skip("this file system keeps the pages (tmpfs?) or has no RWF_NOWAIT reads")
        ra = ReadAhead([(str(path), 8 * MiB, 16 * MiB)], window=64 * MiB, step=MiB)
        assert eventually(lambda: not ra._thread.is_alive())
        # the thread waited for the read of every piece but the last (8..15 MiB), so these pages are in;
        # none is the last byte of a piece (the one byte the thread reads itself)
        assert [cached(fd, o) for o in (8 * MiB, 9 * MiB + 40960, 12 * MiB + 65536, 14 * MiB + 131072)] == [True] * 4
        assert not cached(fd, 2 * MiB)  # outside the range: not read
        ra.close()
    finally:
        os.close(fd)


def test_the_read_ahead_stays_within_its_window_of_what_was_scanned(tmp_path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(bytes(10 * MiB))
    b.write_bytes(bytes(6 * MiB))
    ra = ReadAhead([(str(a), 0, 10 * MiB), (str(tmp_path / "gone.log"), 0, 4 * MiB), (str(b), 0, 6 * MiB)],
                   window=4 * MiB, step=MiB)
    try:
        assert eventually(lambda: ra.advised == 4 * MiB)
        time.sleep(0.05)
        assert ra.advised == 4 * MiB  # and no further: nothing scanned yet
        ra.done(3 * MiB)
        assert eventually(lambda: ra.advised == 7 * MiB)
        ra.done(13 * MiB)
        assert eventually(lambda: not ra._thread.is_alive())
        assert ra.advised == 16 * MiB  # a file that is gone is skipped, not an error
    finally:
        ra.close()


def test_close_stops_a_read_ahead_that_waits_for_its_window(tmp_path) -> None:
    a = tmp_path / "a.log"
    a.write_bytes(bytes(8 * MiB))
    ra = ReadAhead([(str(a), 0, 8 * MiB)], window=MiB, step=MiB)
    assert eventually(lambda: ra.advised == MiB)
    ra.close()
    assert not ra._thread.is_alive() and ra.advised == MiB


def test_close_does_not_wait_for_a_read_in_flight(tmp_path, monkeypatch) -> None:
    """A read in the idle I/O class can wait for seconds behind other reads: close() (Ctrl-C) returns
    without it, and the thread ends once the read does, advising nothing more."""
    a = tmp_path / "a.log"
    a.write_bytes(bytes(8 * MiB))
    read_done = threading.Event()
    waiting = threading.Event()

    def slow_read(path: str, byte: int) -> None:
        waiting.set()
        read_done.wait(30)

    monkeypatch.setattr(readahead, "_wait_for_read", slow_read)
    ra = ReadAhead([(str(a), 0, 8 * MiB)], window=64 * MiB, step=MiB)
    assert waiting.wait(5)
    t0 = time.monotonic()
    ra.close()
    assert time.monotonic() - t0 < 0.5 and ra._thread.is_alive()
    advised = ra.advised
    read_done.set()
    assert eventually(lambda: not ra._thread.is_alive()) and ra.advised == advised


def _unclean_dir(root: Path) -> tuple[Path, list[str]]:
    """One unclean data dir, partitions t-0 (4.6 MB) and t-1 (0.8 MB) of three segments each; their .log
    paths in offset order."""
    d = data_dir(root, "d1", clean=False)
    logs = []
    for p, value in ((0, 5000), (1, 800)):
        part = PartitionBuilder(d, "t", p)
        for base in (0, 300, 600):
            part.segment(base, *(B(o, value=bytes(value)) for o in range(base, base + 300)))
            logs.append(os.path.join(d, f"t-{p}", f"{base:020d}.log"))
    return d, logs


def test_the_inline_engine_reads_ahead_in_phase_2_order_and_only_for_unclean_dirs(tmp_path) -> None:
    d, logs = _unclean_dir(tmp_path)
    parts = _partitions_of(str(d))
    engine = InlineEngine(LoadStats())
    try:
        # t-1 listed first: the smaller one, which the biggest-first plan puts last
        order = engine.prefetch([DirPlan(str(d), False, parts[::-1], {})])
        ra = engine._read_ahead[str(d)]
        assert [p for p, _, _ in ra.ranges] == logs[3:] + logs[:3] and order[str(d)] == parts[::-1]
        assert all((start, end) == (0, os.path.getsize(p)) for p, start, end in ra.ranges)
        source = engine.source(str(d))
        from mploader.scan import SegmentTask

        for p in logs:
            source.scan(SegmentTask(p, int(os.path.basename(p)[:20])))
        assert ra.scanned == sum(os.path.getsize(p) for p in logs)
    finally:
        engine.close()
    clean = InlineEngine(LoadStats())
    clean.prefetch([DirPlan(str(d), True, parts, {})])
    assert clean._read_ahead == {}
    off = InlineEngine(LoadStats(), read_ahead_bytes=0)
    off.prefetch([DirPlan(str(d), False, parts, {})])
    assert off._read_ahead == {}


def test_the_pool_engine_reads_ahead_the_parents_head_then_the_chunks_as_submitted(tmp_path, monkeypatch) -> None:
    d, logs = _unclean_dir(tmp_path)
    monkeypatch.setattr(PoolEngine, "parent_head_bytes", os.path.getsize(logs[0]))
    monkeypatch.setattr(pool_mod, "IN_FLIGHT_PER_WORKER", 1000)  # every chunk submitted at once
    engine = PoolEngine(LoadStats(), 2, [str(d)], None, chunk_bytes=20_000)
    submitted: list[tuple[str, int, int | None]] = []
    real_submit = PoolEngine._submit

    def submit(self, data_dir, tasks, broken=None):  # type: ignore[no-untyped-def]
        submitted.extend((task.path, task.start, task.end or os.path.getsize(task.path)) for task in tasks)
        return real_submit(self, data_dir, tasks, broken)

    monkeypatch.setattr(PoolEngine, "_submit", submit)
    try:
        engine.prefetch([DirPlan(str(d), False, _partitions_of(str(d)), {})])
        ra = engine._read_ahead[str(d)]
        assert ra.ranges[0] == (logs[0], 0, os.path.getsize(logs[0]))  # the parent's own scan comes first
        assert list(ra.ranges[1:]) == submitted and len(submitted) > len(logs) - 1  # cut segments: chunks
        for pend in list(engine._pending.values()):
            for chunk in pend.chunks:
                chunk.future.result()
        # every worker's scan is reported done as it ends; the parent's own when it scans it
        assert eventually(lambda: ra.scanned == sum(e - s for _, s, e in ra.ranges[1:]))
    finally:
        engine.close()
    assert not ra._thread.is_alive()


def test_a_load_leaves_no_read_ahead_thread_behind(tmp_path, monkeypatch) -> None:
    """With nothing reported done, the read-ahead waits for its window (4 MiB, under the 5.4 MB to
    scan) until the load ends: closing the engine must end it."""
    d, _ = _unclean_dir(tmp_path)
    monkeypatch.setattr(ReadAhead, "done", lambda self, nbytes: None)
    result = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=2, read_ahead_bytes=1),
                       now_ms=NOW)
    assert result.stats.segments_recovered == 6 and result.stats.scans_in_parent == 0
    assert eventually(lambda: not [t for t in threading.enumerate() if t.name == "mploader-readahead"], 1.0)


def test_read_ahead_bytes_is_auto_or_a_size() -> None:
    assert LoaderConfig(read_ahead_bytes=0).read_ahead_bytes == 0
    with pytest.raises(ValueError, match="read_ahead_bytes"):
        LoaderConfig(read_ahead_bytes=-1)


@pytest.mark.parametrize("available_mib, workers, largest_mib, expected_mib", [
    (64_000, 2, 128, 256 + 2 * 128),  # room: what the busy scans hold plus WINDOW_BYTES
    (128_000, 16, 1024, 256 + 16 * 1024),
    (1_000, 2, 128, 250),  # at most a quarter of the memory available now
    (8, 2, 128, 4),  # never below one piece
])
def test_auto_window_is_the_busy_scans_plus_a_margin_within_a_quarter_of_free_memory(
        monkeypatch, available_mib: int, workers: int, largest_mib: int, expected_mib: int) -> None:
    MiB = 1024 * 1024
    monkeypatch.setattr(readahead, "_available_memory", lambda: available_mib * MiB)
    assert readahead.auto_window(workers, largest_mib * MiB) == expected_mib * MiB


def test_available_memory_is_what_psutil_says() -> None:
    import psutil

    ours, theirs = readahead._available_memory(), psutil.virtual_memory().available
    assert abs(ours - theirs) < 64 * 1024 * 1024  # read a moment apart


def test_the_read_ahead_thread_reads_in_the_idle_io_class_and_only_it() -> None:
    """``_idle_io_priority`` sets the calling thread's I/O class (ioprio_set by thread id, without psutil);
    the other threads of the process keep theirs.  psutil (a test dependency) reads the classes back."""
    import psutil

    seen: list[int] = []

    def reader() -> None:
        readahead._idle_io_priority()
        seen.append(int(psutil.Process(threading.get_native_id()).ionice().ioclass))

    before = int(psutil.Process(threading.get_native_id()).ionice().ioclass)
    t = threading.Thread(target=reader)
    t.start()
    t.join()
    assert seen == [int(psutil.IOPRIO_CLASS_IDLE)]
    assert int(psutil.Process(threading.get_native_id()).ionice().ioclass) == before != psutil.IOPRIO_CLASS_IDLE
