"""KIP-263's lazy start, done safely: load as Kafka does, then audit the inactive segments in the background.

Kafka 2.3+ starts fast by not checking the segments it does not recover, and finds their corruption later, at
runtime, when a fetch or a lookup trips on it (seeds 001, 002; KAFKA-12734, KAFKA-19200).
:class:`BackgroundVerification` keeps the fast start and still reads every byte: once a load has returned, a
daemon thread audits (:func:`mploader.scan.audit.audit_segment`, ``mploader verify``'s checks) the segments the
load neither recovered nor holds as active, in the caller's order (default: newest first, where consumers
read), on an engine of the load's kind (a fresh pool: the load's own pool is closed when the load returns).

What it finds is reported (:meth:`BackgroundVerification.wait` returns a :class:`VerifyReport` of the audited
segments), never acted on: nothing is written.  It can be watched (:attr:`~BackgroundVerification.figures`, and
the ``progress`` callbacks), waited for and cancelled; a process that exits while it runs cancels it first (an
``atexit`` hook), so no worker process or shared memory outlives the caller.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mploader.config import LoaderConfig
from mploader.engine.base import Engine
from mploader.errors import LoadInterrupted
from mploader.format import names
from mploader.load_plan import make_engine
from mploader.progress import NO_PROGRESS, DirProgress, Progress, ProgressTracker
from mploader.result import LoadedLog, LoadResult, LoadStats
from mploader.scan.audit import AuditTask, SegmentAudit
from mploader.verify.report import DataDirReport, PartitionReport, VerifyReport


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One segment to verify after the load (what an ``order`` function sorts)."""

    log: LoadedLog
    base_offset: int
    size_bytes: int
    mtime: float  # of its .log

    @property
    def path(self) -> str:
        return os.path.join(self.log.dir, names.segment_file_name(self.base_offset, names.LOG_SUFFIX))


Order = Callable[[list[SegmentRef]], list[SegmentRef]]


def newest_first(segments: list[SegmentRef]) -> list[SegmentRef]:
    """The most recently written segments first (consumers read near the end of a log)."""
    return sorted(segments, key=lambda s: (-s.mtime, s.path))


def inactive_segments(result: LoadResult) -> list[SegmentRef]:
    """The segments a load left unread: not recovered, not the active one, in a log it did not delete."""
    out = []
    for lg in result.all_logs():
        recovered = set(lg.recovered_segments)
        for seg in lg.segments[:-1]:
            if seg.base_offset not in recovered:
                path = os.path.join(lg.dir, names.segment_file_name(seg.base_offset, names.LOG_SUFFIX))
                try:
                    mtime = os.stat(path).st_mtime
                except OSError:
                    mtime = 0.0  # the audit will say why it cannot read it
                out.append(SegmentRef(lg, seg.base_offset, seg.size_bytes, mtime))
    return out


class BackgroundVerification:
    """The audit of a loaded broker's inactive segments, running in a daemon thread (module docstring)."""

    def __init__(self, result: LoadResult, config: LoaderConfig | None = None, *, order: Order = newest_first,
                 progress: Progress | None = NO_PROGRESS) -> None:
        self._cfg = config or LoaderConfig()
        self._segments = order(inactive_segments(result))
        self._clean = dict(result.clean_shutdown)  # every data dir of the load
        self._figures: dict[str, DirProgress] = {}
        # None: NO_PROGRESS (what its callers pass when there is no display)
        self._tracker = ProgressTracker([_Keep(self._figures), NO_PROGRESS if progress is None else progress])
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self._audits: dict[str, SegmentAudit] = {}
        self._error: BaseException | None = None
        self._engine: Engine | None = None
        self._started = time.perf_counter()
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="mploader-verify-after", daemon=True)
        atexit.register(self.cancel)
        self._thread.start()

    # ---- the caller's side -------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def segments_total(self) -> int:
        return len(self._segments)

    @property
    def figures(self) -> list[DirProgress]:
        """The latest progress figures per data dir (segments and bytes done and to do, rate, ETA)."""
        return list(self._figures.values())

    def wait(self, timeout: float | None = None) -> VerifyReport | None:
        """The report once every segment is audited (None if ``timeout`` passed first); raises what stopped the
        audit (:class:`~mploader.errors.LoadInterrupted` after :meth:`cancel`)."""
        if not self._done.wait(timeout):
            return None
        if self._error is not None:
            raise self._error
        return self._report()

    def cancel(self) -> None:
        """Stop: no further segment is audited, the workers go; returns once they are gone."""
        self._cancelled.set()
        engine = self._engine
        if engine is not None:
            engine.close(kill=True)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    # ---- the thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        stats = LoadStats()
        try:
            by_dir: dict[str, list[SegmentRef]] = {}
            for s in self._segments:
                by_dir.setdefault(s.log.data_dir, []).append(s)
            self._tracker.start({d: len({s.log.dir for s in segs}) for d, segs in by_dir.items()})
            biggest = max((sum(s.size_bytes for s in segs) for segs in by_dir.values()), default=0)
            self._engine = make_engine(self._cfg, list(by_dir), stats, scan_bytes=biggest)
            if self._cancelled.is_set():
                raise LoadInterrupted("cancelled before it started")
            for d, segs in by_dir.items():
                self._tracker.planned(d, None, len(segs))
            threads = [threading.Thread(target=self._audit_dir, args=(d, segs), daemon=True)
                       for d, segs in by_dir.items()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if self._error is not None:
                raise self._error
            if self._cancelled.is_set():
                raise LoadInterrupted("the background verification was cancelled")
        except BaseException as e:  # stored for wait(); a daemon thread has no one else to tell
            self._error = e
        finally:
            if self._engine is not None:
                self._engine.close(kill=self._cancelled.is_set())
            self.seconds = time.perf_counter() - self._started
            self._done.set()
            self._tracker.close()
            atexit.unregister(self.cancel)

    def _audit_dir(self, data_dir: str, segments: Sequence[SegmentRef]) -> None:
        assert self._engine is not None
        tasks = [AuditTask(s.path, s.base_offset) for s in segments]
        try:
            for audit in self._engine.audit(data_dir, tasks):
                self._audits[audit.path] = audit
                self._tracker.segments_scanned(data_dir, 1, audit.size_bytes)
                if self._cancelled.is_set():
                    return
        except BaseException as e:  # a thread of its own: stored for wait() (a cancel's LoadInterrupted is expected)
            if not self._cancelled.is_set():
                self._error = self._error or e

    def _report(self) -> VerifyReport:
        by_log: dict[str, tuple[LoadedLog, list[SegmentAudit]]] = {}
        for s in self._segments:
            audit = self._audits.get(s.path)
            if audit is not None:
                by_log.setdefault(s.log.dir, (s.log, []))[1].append(audit)
        partitions = []
        for directory in sorted(by_log):
            lg, audits = by_log[directory]
            partitions.append(PartitionReport(
                topic=lg.topic, partition=lg.partition, dir=lg.dir, data_dir=lg.data_dir, kind=lg.kind.value,
                log_start_offset=lg.log_start_offset, recovery_point=lg.recovery_point,
                high_watermark=lg.high_watermark, log_end_offset=lg.log_end_offset,
                segments=sorted(audits, key=lambda a: a.base_offset)))
        report = VerifyReport([DataDirReport(d, clean) for d, clean in self._clean.items()], partitions)
        report.seconds["audit"] = report.seconds["total"] = self.seconds
        return report


class _Keep(Progress):
    def __init__(self, figures: dict[str, DirProgress]) -> None:
        self._figures = figures

    def update(self, figures: DirProgress) -> None:
        self._figures[figures.data_dir] = figures


__all__ = ["BackgroundVerification", "Order", "SegmentRef", "inactive_segments", "newest_first"]
