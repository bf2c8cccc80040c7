"""The Spark engine: Phase 1 as Spark tasks, Phase 2 where the caller runs it (``load_logs`` on the driver).

Data flow::

    driver (load_logs: Phase 2 threads)                 executors (tasks of Spark jobs)
    -----------------------------------                 -------------------------------
    prefetch(): plan each dir's scans (the loader's
      own rule), cut big segments into chunks as the
      pool cuts them, interleave the dirs, split the
      pieces into waves of WAVE_BYTES in Phase 2's
      order; a thread runs one Spark job per wave:
      the wave's pieces packed by bytes into Spark  ──►  mapInArrow: scan_segment of each piece,
      partitions (mploader.spark.tasks)                   read through its path; the batch table (and
                                                          the recovery draft) as Arrow list columns
      toArrow(): the wave's rows, decoded into      ◄──  (mploader.spark.arrow), an OSError as a row
      SegmentScans by piece
    scan(dir, task) (Phase 2 asks): wait for the task's
      pieces, stitch chunks (engine.chunks); a piece
      whose job failed (lost executors, a stopped
      session, no executor: mploader.spark.jobs) fails
      the load (SparkJobFailed) unless driver_fallback;
      a file changed since planning, or a task never
      planned, is scanned here
    audit(dir, tasks) (verify): one job per wave of
      segments, audit_segment on the executors, the
      audits back in Arrow, yielded in order (a failed
      job: as a failed scan)

Phase 1 is pure, so a Spark task retried or run twice changes nothing.  The results never depend on
where a scan ran: ``tests/test_spark_engine.py`` holds this engine to the engine conformance tests.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mploader.engine.base import Engine
from mploader.engine.chunks import (
    FileStat,
    TaskKey,
    chunk_tasks,
    file_stat,
    plan_cuts,
    stitch_whole,
    task_key,
)
from mploader.engine.plan import DirPlan, Partition, PlannedScans, file_size
from mploader.errors import LoadInterrupted
from mploader.progress import NO_PROGRESS, Progress
from mploader.result import LoadStats
from mploader.scan import SegmentScan, SegmentTask
from mploader.scan.audit import AuditTask, SegmentAudit, audit_segment
from mploader.spark.arrow import audits_from_arrow, scans_from_arrow
from mploader.spark.gathering import Seat
from mploader.spark.jobs import EXECUTOR_TIMEOUT, SparkJobFailed, collect, job_group
from mploader.spark.phase1 import audit_frame, scan_frame
from mploader.spark.session import check_session
from mploader.spark.tasks import Piece, cores, piece_frame

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# A Spark job costs ~0.1 s to start (local mode); a wave is what Phase 2 waits for before its first scan.
WAVE_BYTES = 1 << 30


@dataclass(slots=True)
class _Planned:
    stat: FileStat  # at planning time
    pieces: list[int]  # its pieces' ids, in order


def waves(pieces: Sequence[Piece], wave_bytes: int) -> list[list[Piece]]:
    """Consecutive runs of ``pieces`` of about ``wave_bytes`` each (at least one piece each)."""
    out: list[list[Piece]] = []
    total = wave_bytes
    for p in pieces:
        if total >= wave_bytes:
            out.append([])
            total = 0
        out[-1].append(p)
        total += p.size
    return out


class AuditJob:
    """One Spark job auditing the segments of any number of dirs (a fleet's, each its seat:
    :class:`mploader.spark.gathering.Gathering` calls it once per round), packed by bytes
    (:func:`mploader.spark.tasks.piece_frame`); each dir's audits in its tasks' order."""

    def __init__(self, spark: SparkSession, executor_timeout: float | None = EXECUTOR_TIMEOUT) -> None:
        self.spark = spark
        self.executor_timeout = executor_timeout  # jobs.Watchdog's bound
        self.job_group = job_group("audit")  # its Spark jobs' group (statusTracker)

    def __call__(self, work: Mapping[int, Sequence[AuditTask]]) -> dict[int, list[SegmentAudit | None]]:
        ids = itertools.count()
        pieces = {seat: [Piece(next(ids), t.path, t.base_offset, 0, None, file_size(t.path)) for t in tasks]
                  for seat, tasks in work.items()}
        every = [p for ps in pieces.values() for p in ps]
        dirs = f"{len(work)} dirs" if len(work) > 1 else "a dir"
        got = audits_from_arrow(collect(audit_frame(piece_frame(self.spark, every)), self.job_group,
                                        f"mploader verify: {len(every)} segments of {dirs}", self.executor_timeout))
        return {seat: [got.get(p.id) for p in ps] for seat, ps in pieces.items()}


class SparkEngine(Engine):
    """Phase 1 in Spark tasks (see the module docstring); ``workers_per_dir`` is the cluster's cores."""

    def __init__(self, spark: SparkSession, stats: LoadStats, progress: Progress | None = NO_PROGRESS,
                 chunk_bytes: int | None = None, wave_bytes: int = WAVE_BYTES, *,
                 max_read_bytes_per_sec: int | None = None, planned: Mapping[str, PlannedScans] | None = None,
                 driver_fallback: bool = False, executor_timeout: float | None = EXECUTOR_TIMEOUT,
                 audit_seats: Mapping[str, Seat[Sequence[AuditTask], list[SegmentAudit | None]]] | None = None):
        # the executors read: the driver's hints help none
        super().__init__(stats, progress, read_ahead_bytes=0, max_read_bytes_per_sec=max_read_bytes_per_sec,
                         planned=planned)
        check_session(spark)
        self.spark = spark
        self.workers_per_dir = cores(spark)
        self.chunk_bytes = chunk_bytes  # None: piece_bytes() of each dir, as the pool
        self.wave_bytes = wave_bytes
        self.executor_pieces = 0  # pieces whose scan or audit came back from an executor
        self.driver_pieces = 0  # pieces scanned or audited in the driver instead (driver_fallback)
        self.driver_fallback = driver_fallback  # a failed job's pieces done in the driver (else the job's error)
        self.executor_timeout = executor_timeout  # jobs.Watchdog's bound
        self._planned: dict[TaskKey, _Planned] = {}
        self._results: dict[int, tuple[SegmentScan | OSError, float]] = {}
        self._failed: dict[int, str] = {}  # piece -> why its job failed
        self._arrived = threading.Condition()
        self._ids = itertools.count()
        self.job_group = job_group("phase1")  # its Spark jobs' group (statusTracker)
        self.audit_job = AuditJob(spark, executor_timeout)  # verify's audits, where no seat is given
        self.audit_seats = audit_seats or {}  # per data dir: its seat at a fleet's audit job
        self._thread: threading.Thread | None = None

    # ---- Phase 1 of a load ---------------------------------------------------------------------

    def prefetch(self, dirs: Sequence[DirPlan]) -> dict[str, list[Partition]]:
        order: dict[str, list[Partition]] = {}
        per_dir: list[list[Piece]] = []
        tasks: dict[int, SegmentTask] = {}
        for plan in dirs:
            planned = self.plan(plan)  # in Phase 2's order
            order[plan.data_dir] = [part for part, _ in planned]
            _, cut = plan_cuts((t for _, ts in planned for t in ts), self.workers_per_dir, self.chunk_bytes)
            pieces: list[Piece] = []
            for task, st, cuts in cut:
                chunks = chunk_tasks(task, cuts)
                ids = [next(self._ids) for _ in chunks]
                self._planned[task_key(task)] = _Planned(st, ids)
                for pid, chunk in zip(ids, chunks):
                    tasks[pid] = chunk
                    end = st[0] if chunk.end is None else chunk.end
                    pieces.append(Piece(pid, chunk.path, chunk.base_offset, chunk.start, chunk.end, end - chunk.start,
                                        chunk.index_interval))
            per_dir.append(pieces)
        # every dir's first pieces in the first wave: Phase 2 loads the dirs side by side
        interleaved = [p for group in itertools.zip_longest(*per_dir) for p in group if p is not None]
        if interleaved:
            self._thread = threading.Thread(target=self._run, args=(waves(interleaved, self.wave_bytes), tasks),
                                            name="mploader-spark-phase1", daemon=True)
            self._thread.start()
        return order

    def _run(self, planned: list[list[Piece]], tasks: dict[int, SegmentTask]) -> None:
        for wave in planned:
            if self._closed.is_set():
                error = "the load was closed"
                results = {}
            else:
                try:
                    table = collect(scan_frame(piece_frame(self.spark, wave)), self.job_group,
                                    "mploader Phase 1 scans", self.executor_timeout)
                    results, error = scans_from_arrow(table, tasks), ""
                except SparkJobFailed as e:  # lost executors, a stopped session, Ctrl-C, no executor
                    results, error = {}, str(e)
            with self._arrived:
                self._results.update(results)
                self.executor_pieces += len(results)
                self._failed.update((p.id, error) for p in wave if p.id not in results)
                self._arrived.notify_all()

    def scan(self, data_dir: str, task: SegmentTask) -> SegmentScan:
        with self._arrived:
            planned = self._planned.pop(task_key(task), None)
        if planned is None:
            return self.inline_source(data_dir).scan(task)
        t0 = time.perf_counter()
        with self._arrived:
            while not all(p in self._results or p in self._failed for p in planned.pieces):
                if self._closed.is_set():
                    raise LoadInterrupted("the load was interrupted")
                self._arrived.wait(0.5)
            got = [self._results.pop(p, None) for p in planned.pieces]
            failed = [why for p in planned.pieces if (why := self._failed.pop(p, None)) is not None]
        with self.lock:
            self.stats.wait_seconds += time.perf_counter() - t0
        if failed:
            if not self.driver_fallback:
                raise SparkJobFailed(f"{data_dir}: {failed[0]}")
            log.warning("%s: %s; scanning %s in the driver (--driver-fallback)", data_dir, failed[0], task.path)
            with self.lock:
                self.stats.inline_fallbacks += 1
                self.driver_pieces += len(planned.pieces)
            return self.inline_source(data_dir).scan(task)
        try:
            fresh = file_stat(task.path) == planned.stat
        except OSError:
            fresh = False
        if not fresh:  # the file changed since planning (e.g. a swap was completed): the pieces are of no use
            return self.inline_source(data_dir).scan(task)
        parts = []
        for result, seconds in (g for g in got if g is not None):
            if isinstance(result, OSError):
                raise OSError(result.errno, result.strerror, result.filename)
            with self.lock:
                self.stats.add_scan(seconds, result)
            parts.append(result)
        scan, rescan_seconds = stitch_whole(task, parts)
        with self.lock:
            self.stats.scan_seconds += rescan_seconds
            self.stats.segments_scanned += 1
        self.progress.segments_scanned(data_dir, 1, scan.bytes_read)
        return scan

    # ---- verify's audits -----------------------------------------------------------------------

    def audit(self, data_dir: str, tasks: Sequence[AuditTask]) -> Iterator[SegmentAudit]:
        """The dir's audits in order: with a seat for it (:attr:`audit_seats`: a fleet's one job for every dir),
        in its gathering's job, else in one job per wave of segments; a failed job fails the audit
        (SparkJobFailed), or with ``driver_fallback`` its segments are audited here."""
        seat = self.audit_seats.get(data_dir)
        if seat is not None:
            yield from self._audited(data_dir, tasks, seat.submit)
            return
        for wave in waves([Piece(i, t.path, t.base_offset, 0, None, file_size(t.path)) for i, t in enumerate(tasks)],
                          self.wave_bytes):
            if self._closed.is_set():
                raise LoadInterrupted("the engine was closed")
            yield from self._audited(data_dir, [tasks[p.id] for p in wave], lambda some: self.audit_job({0: some})[0])

    def _audited(self, data_dir: str, tasks: Sequence[AuditTask],
                 job: Callable[[Sequence[AuditTask]], list[SegmentAudit | None]]) -> Iterator[SegmentAudit]:
        try:
            got = job(tasks)
        except SparkJobFailed as e:
            if not self.driver_fallback:
                raise
            log.warning("%s: %s; auditing its %d segments in the driver (--driver-fallback)", data_dir, e,
                        len(tasks))
            got = [None] * len(tasks)
        missed = sum(a is None for a in got)
        with self.lock:
            self.executor_pieces += len(tasks) - missed
            self.driver_pieces += missed
            self.stats.inline_fallbacks += missed
        for task, audit in zip(tasks, got, strict=True):
            yield audit or audit_segment(task)

    def close(self, kill: bool = False) -> None:
        """Cancel what still runs (a load that ended early, Ctrl-C) and wait for the job thread."""
        if self._closed.is_set():
            return
        super().close(kill)
        thread = self._thread
        if thread is not None and thread.is_alive():
            self.spark.sparkContext.cancelJobGroup(self.job_group)
            thread.join()
        with self._arrived:
            self._arrived.notify_all()


__all__ = ["WAVE_BYTES", "AuditJob", "SparkEngine", "waves"]
