"""Where Phase 1 runs: inline, or a process pool per data dir.

Data flow of the process-pool engine::

    parent (Phase 2 threads)                        worker processes (N per data dir, loky)
    ------------------------                        ---------------------------------------
    prefetch(): plan the scans Phase 2 will ask
      for (recovery range of unclean partitions,
      segments without .index), biggest first,
      big segments cut into chunks at confirmed
      offset-index positions; a read-ahead thread
      asks the disk for them in that order
      (mploader.engine.readahead)
    for each task: create a SharedMemory block  ──►  scan the mmap'd .log range (CRC, headers,
      sized for the worst case (sparse in /dev/shm)    control markers), write the batch table
                                                       into the block through a raw byte view
                                                 ◄──  return a small descriptor (stop, valid bytes,
                                                       row count): nothing per batch is pickled
    source(dir).scan(task): wait for the future,
      copy the rows out, unlink the block, stitch
      chunks; a task never prefetched, a stale file
      or a crashed worker falls back to a retry on
      a fresh pool, then to an inline scan

The parent creates and unlinks every shared-memory block; workers only attach
(on Python 3.11 a worker must not unregister a block it did not create).
Phase 2's results never depend on whether or where a scan ran.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from mploader.config import LoaderConfig
from mploader.format import names, records
from mploader.format.index import OFFSET_ENTRY
from mploader.format.names import DirKind, TopicPartition
from mploader.metrics import MetricsRegistry
from mploader.progress import Progress
from mploader.engine.readahead import Range, ReadAhead, auto_window
from mploader.result import LoadStats
from mploader.scan.walk import SegmentScan, SegmentTask, Stop, scan_segment

log = logging.getLogger(__name__)

MIN_ENTRY_BYTES = 26  # the smallest legacy entry; bounds the rows a byte range can hold
CHUNK_BYTES = 64 * 1024 * 1024  # no piece of a cut segment is smaller (except the last)
PIECES_PER_WORKER = 4  # segments are cut only when a dir has fewer pieces of that size than this per worker
PARENT_HEAD_BYTES = 256 * 1024 * 1024  # see PoolEngine.parent_head_bytes


def piece_bytes(total_bytes: int, workers: int) -> int:
    """The size at which a dir's segments are cut into chunks: only as small as it takes for each
    worker to get about PIECES_PER_WORKER pieces of the dir's bytes (so that one big segment does not
    make the tail of the load), and never below CHUNK_BYTES (a cut costs a stitch and keeps Phase 1
    from picking the index entries)."""
    return max(CHUNK_BYTES, total_bytes // max(1, workers * PIECES_PER_WORKER))


class InlineSource:
    """Scans on the calling thread; ``lock`` guards the engine's shared stats (one per engine)."""

    def __init__(self, stats: LoadStats, lock: threading.Lock, progress: Progress | None = None, data_dir: str = "",
                 read_ahead: ReadAhead | None = None):
        self.stats = stats
        self.progress = progress
        self.data_dir = data_dir
        self.read_ahead = read_ahead
        self._lock = lock

    def scan(self, task: SegmentTask) -> SegmentScan:
        t0 = time.perf_counter()
        result = scan_segment(task)
        elapsed = time.perf_counter() - t0
        with self._lock:
            self.stats.segments_scanned += 1
            self.stats.add_scan(elapsed, result)
        if self.read_ahead is not None:
            self.read_ahead.done(result.bytes_read)
        if self.progress is not None:
            self.progress.segments_scanned(self.data_dir, 1, result.bytes_read)
        return result


class Engine:
    """The inline engine: Phase 1 in the calling thread, nothing to start or stop."""

    workers_per_dir = 1

    def __init__(self, stats: LoadStats, progress: Progress | None = None, read_ahead_bytes: int | str = "auto"):
        self.stats = stats
        self.progress = progress
        self.read_ahead_bytes = read_ahead_bytes  # LoaderConfig.read_ahead_bytes
        self.planned: dict[str, list[tuple[tuple[str, TopicPartition, DirKind], list[SegmentTask]]]] = {}
        self._lock = threading.Lock()  # every update of ``stats``, from any thread
        self._read_ahead: dict[str, ReadAhead] = {}

    def source(self, data_dir: str) -> InlineSource:
        return self.inline_source(data_dir)

    def inline_source(self, data_dir: str) -> InlineSource:
        """Scans in the calling thread, counted in the stats, the progress and the read-ahead of ``data_dir``."""
        return InlineSource(self.stats, self._lock, self.progress, data_dir, self._read_ahead.get(data_dir))

    def prefetch(self, dirs: Sequence["DirPlan"]) -> dict[str, list[tuple[str, TopicPartition, DirKind]]]:
        """Start Phase 1 ahead of Phase 2; returns, per data dir, the order in which Phase 2 should load
        the partitions (inline: as listed; only the disk's read-ahead of an unclean dir starts now)."""
        for plan in dirs:
            if not plan.clean:  # a clean dir scans only segments without an index: not worth a listing
                rank = {part: i for i, part in enumerate(plan.partitions)}
                planned = sorted(self.planned.get(plan.data_dir) or plan_segment_scans(plan), key=lambda p: rank[p[0]])
                self._start_read_ahead(plan.data_dir, [(t.path, 0, _size(t.path)) for _, ts in planned for t in ts])
        return {plan.data_dir: list(plan.partitions) for plan in dirs}

    def _start_read_ahead(self, data_dir: str, ranges: list[Range]) -> None:
        """Advise the kernel to read ``ranges`` (in the order the scans will take them) ahead of Phase 1."""
        if not ranges or self.read_ahead_bytes == 0 or not hasattr(os, "posix_fadvise"):
            return
        window = (auto_window(self.workers_per_dir, max(end - start for _, start, end in ranges))
                  if self.read_ahead_bytes == "auto" else int(self.read_ahead_bytes))
        self._read_ahead[data_dir] = ReadAhead(ranges, window)

    def close(self, kill: bool = False) -> None:
        for read_ahead in self._read_ahead.values():
            read_ahead.close()


@dataclass(frozen=True, slots=True)
class DirPlan:
    data_dir: str
    clean: bool
    partitions: list[tuple[str, TopicPartition, DirKind]]
    recovery_points: dict[TopicPartition, int]
    index_interval: Callable[[str], int] | None = None  # log.index.interval.bytes of a topic


def usable_cpus() -> int:
    """CPUs this process may use: affinity mask, then a cgroup v2 CPU quota if one is set."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


AUTO_POOL_MIN_BYTES = 1 << 30  # "auto" scans inline below this much Phase 1 work in every data dir


def workers_per_dir(cfg: LoaderConfig, n_dirs: int, scan_bytes: int | None = None) -> int:
    """``num_segment_loading_threads_per_data_dir``.

    "auto" = the usable CPUs shared among the data dirs, but 1 (the inline path) when no data dir has
    :data:`AUTO_POOL_MIN_BYTES` of segments to scan (``scan_bytes``: the largest per-dir amount):
    starting a pool costs 0.3-0.5 s, which on a 2-vCPU machine only pays back above ~1 GB
    (perf/README.md).  An explicit number always wins.
    """
    n = cfg.num_segment_loading_threads_per_data_dir
    if n == "auto":
        if scan_bytes is not None and scan_bytes < AUTO_POOL_MIN_BYTES:
            return 1
        return max(1, usable_cpus() // max(1, n_dirs))
    return int(n)


def make_engine(cfg: LoaderConfig, data_dirs: list[str] | list[DirPlan], stats: LoadStats,
                metrics: MetricsRegistry | None = None, progress: Progress | None = None) -> Engine:
    """The engine for these data dirs; given their plans, "auto" also weighs the Phase 1 work."""
    plans = [d for d in data_dirs if isinstance(d, DirPlan)]
    paths = [d.data_dir if isinstance(d, DirPlan) else d for d in data_dirs]
    planned: dict[str, list[tuple[tuple[str, TopicPartition, DirKind], list[SegmentTask]]]] = {}
    scan_bytes = None
    if plans and cfg.num_segment_loading_threads_per_data_dir == "auto":
        planned = {p.data_dir: plan_segment_scans(p) for p in plans}
        scan_bytes = max((sum(_size(t.path) for _, tasks in parts for t in tasks) for parts in planned.values()),
                         default=0)
    n = workers_per_dir(cfg, len(paths), scan_bytes)
    if n <= 1 or not paths:
        engine = Engine(stats, progress, cfg.read_ahead_bytes)
    else:
        from mploader.engine.pool import PoolEngine

        engine = PoolEngine(stats, n, paths, metrics, progress, read_ahead_bytes=cfg.read_ahead_bytes)
    engine.planned = planned  # prefetch reuses the plans "auto" already made
    return engine


# --------------------------------------------------------------------------------------------
# Planning: which scans Phase 2 will ask for


def plan_segment_scans(plan: DirPlan) -> list[tuple[tuple[str, TopicPartition, DirKind], list[SegmentTask]]]:
    """Per partition, the segments whose full scan Phase 2 will need: every segment at or after the
    floor of the recovery point of an unclean partition, and every segment without its ``.index``;
    in the order Phase 2 should take them (partitions with the most bytes to scan first, so that a
    huge partition does not make the tail of the load; segments in offset order)."""
    planned = []
    for rank, part in enumerate(plan.partitions):
        path, tp, kind = part
        try:
            files = set(os.listdir(path))
        except OSError:
            planned.append((0, rank, part, []))
            continue
        bases = sorted(names.offset_from_file_name(f) for f in files
                       if f.endswith(names.LOG_SUFFIX) and len(f) == 24 and f[:20].isdigit())
        rp = plan.recovery_points.get(tp, 0)
        floor = max((b for b in bases if b <= rp), default=None)
        interval = None if plan.index_interval is None else plan.index_interval(tp.topic)
        tasks = []
        for b in bases:
            unflushed = not plan.clean and kind is not DirKind.DELETE and (floor is None or b >= floor)
            if unflushed or names.segment_file_name(b, names.INDEX_SUFFIX) not in files:
                tasks.append(SegmentTask(os.path.join(path, names.segment_file_name(b, names.LOG_SUFFIX)), b,
                                         index_interval=interval))
        nbytes = sum(_size(t.path) for t in tasks)
        planned.append((nbytes, rank, part, tasks))
    planned.sort(key=lambda p: (-p[0], p[1]))
    return [(part, tasks) for _, _, part, tasks in planned]


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def chunk_boundaries(log_path: str, base_offset: int, size: int, chunk_bytes: int = CHUNK_BYTES) -> list[int]:
    """Positions at which a big segment can be cut: offset-index entries whose position holds a
    v2 batch header whose last offset equals the entry's offset (confirmed batch starts)."""
    if size <= chunk_bytes:
        return []
    index_path = log_path[: -len(names.LOG_SUFFIX)] + names.INDEX_SUFFIX
    try:
        with open(index_path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    entries = np.frombuffer(data, OFFSET_ENTRY, count=len(data) // 8)
    if not len(entries):
        return []
    pos = entries["position"].astype(np.int64)
    rel = entries["relative_offset"].astype(np.int64)
    # the first entry at or past a target, in index order, always raises the largest position so far:
    # searching those (increasing) positions visits one entry per cut, not every entry
    raising = np.flatnonzero(pos > np.maximum.accumulate(np.concatenate(([0], pos[:-1]))))
    raised = pos[raising]
    out: list[int] = []
    target = chunk_bytes
    with open(log_path, "rb") as f:
        while (k := int(np.searchsorted(raised, target))) < len(raising):
            i = int(raising[k])
            p = int(pos[i])
            if records.header_load_fails(p, size):
                break
            f.seek(p)
            head = f.read(records.RECORD_BATCH_OVERHEAD)
            if len(head) < records.RECORD_BATCH_OVERHEAD:
                break  # the file is shorter than planned
            base, _, _, magic, _, _, last_offset_delta = records.BATCH_HEADER.unpack_from(head)[:7]
            # past the real entries (a preallocated zero tail), not a v2 batch, or not the entry's batch: stop
            if magic != 2 or base + last_offset_delta != base_offset + int(rel[i]):
                break
            out.append(p)
            target = p + chunk_bytes
    return out


def stitch(task: SegmentTask, parts: list[SegmentScan]) -> tuple[SegmentScan, int | None]:
    """Join chunk scans in order.  Returns the joined scan and, when a chunk stopped on a torn entry
    (one running past its end: a cut that the continuous walk does not hit), the position from which the
    rest must be scanned again without cuts.  A chunk that ends with Stop.END and no fatal batch ended
    exactly at its cut; one that met a batch Kafka cannot read (``fatal``, also with Stop.END) ends the
    walk there, as it would end the continuous one."""
    if len(parts) == 1:
        return parts[0], None
    rows = []
    for k, part in enumerate(parts):
        rows.append(part.batches)
        last = k == len(parts) - 1
        if not last and part.stop is Stop.END and part.fatal is None:
            continue
        resume = part.valid_bytes if not last and part.stop is Stop.INCOMPLETE else None
        return join_scans(task, rows, part), resume
    raise AssertionError("unreachable: the last part returns")


def join_scans(task: SegmentTask, rows: list[np.ndarray], last: SegmentScan) -> SegmentScan:
    """One scan of ``task``'s range from the tables of its consecutive pieces, ending as ``last`` ends."""
    table = rows[0] if len(rows) == 1 else np.concatenate(rows)
    return SegmentScan(task.path, task.base_offset, task.start, last.end, last.valid_bytes, last.stop,
                       last.stop_detail, table, last.fatal, last.fatal_exception,
                       bytes_read=last.end - task.start)


__all__ = ["Engine", "DirPlan", "InlineSource", "make_engine", "plan_segment_scans", "chunk_boundaries", "piece_bytes",
           "stitch", "join_scans",
           "usable_cpus", "workers_per_dir"]
