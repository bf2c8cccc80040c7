"""The engine interface: where Phase 1 runs is a choice, and Phase 2 cannot tell the difference.

An engine does three things for the manager (:mod:`mploader.manager`):

* :meth:`Engine.prefetch` plans each data dir's scans (:func:`mploader.engine.plan.plan_segment_scans`,
  the loader's own rule; the inline engine plans only unclean dirs, where there is read-ahead to start)
  and may start them ahead of Phase 2; it returns the order in which Phase 2 should load the partitions;
* :meth:`Engine.source` hands a loading thread the :class:`~mploader.scan.ScanSource` of a data dir, from which the
  loader takes every whole-segment scan;
* :meth:`Engine.close` ends whatever it started (``kill=True`` on Ctrl-C); an engine is also a context manager,
  which closes it on the way out (killing on Ctrl-C).

Engines: :class:`mploader.engine.inline.InlineEngine` (the calling thread, the reference) and
:class:`mploader.engine.pool.PoolEngine` (loky worker processes).  A scan the loader asks for that
the plan did not hold is counted in ``LoadStats.unplanned_scans`` (in a planned dir): it is scanned all
the same, only later and in the parent.
"""

from __future__ import annotations

import abc
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Self

from mploader.engine.diskorder import disk_ordered, reads_in_disk_order
from mploader.engine.plan import DirPlan, Partition, PlannedScans, plan_segment_scans
from mploader.engine.readahead import Range, ReadAhead, advice_bytes, auto_window, disk_turns
from mploader.engine.throttle import ReadBudget, paced_scan
from mploader.host.devices import queue_of
from mploader.progress import NO_PROGRESS, Progress
from mploader.result import LoadStats
from mploader.scan import ScanSource, SegmentScan, SegmentTask, scan_segment
from mploader.scan.audit import AuditTask, SegmentAudit, audit_segment

log = logging.getLogger(__name__)


class InlineSource:
    """Scans on the calling thread; ``lock`` guards the engine's shared stats (one per engine)."""

    def __init__(self, stats: LoadStats, lock: threading.Lock, progress: Progress = NO_PROGRESS, data_dir: str = "",
                 read_ahead: ReadAhead | None = None, budget: ReadBudget | None = None,
                 cancelled: threading.Event | None = None):
        self.stats = stats
        self.progress = progress
        self.data_dir = data_dir
        self.read_ahead = read_ahead
        self.budget = budget  # the dir's read budget: scans in pieces, each at its turn (waits count as scan time)
        self.cancelled = cancelled  # set: a wait for a turn raises LoadInterrupted (the engine was closed)
        self._lock = lock

    def scan(self, task: SegmentTask) -> SegmentScan:
        t0 = time.perf_counter()
        if self.read_ahead is not None:  # a gated read-ahead: its range read first (engine.readahead)
            self.read_ahead.wait_read(task.path, task.start)
        result = scan_segment(task) if self.budget is None else paced_scan(task, self.budget, self.cancelled)
        elapsed = time.perf_counter() - t0
        with self._lock:
            self.stats.segments_scanned += 1
            self.stats.add_scan(elapsed, result)
        if self.read_ahead is not None:
            self.read_ahead.done(result.bytes_read)
        self.progress.segments_scanned(self.data_dir, 1, result.bytes_read)
        return result


class _PlannedSource:
    """A data dir's source as the loader sees it: counts the scans the plan did not hold."""

    def __init__(self, engine: Engine, data_dir: str):
        self._engine = engine
        self._data_dir = data_dir

    def scan(self, task: SegmentTask) -> SegmentScan:
        planned = self._engine.planned_paths.get(self._data_dir)
        if planned is not None and task.path not in planned:
            with self._engine.lock:
                self._engine.stats.unplanned_scans += 1
            log.debug("%s: %s was not planned for Phase 1; scanning it in the parent", self._data_dir, task.path)
        return self._engine.scan(self._data_dir, task)


class Engine(abc.ABC):
    """Where Phase 1 runs (see the module docstring)."""

    workers_per_dir = 1
    start: str | None = None  # how its worker processes start ("fork", "spawn": mploader.engine.worker_start)

    def __init__(self, stats: LoadStats, progress: Progress | None = NO_PROGRESS,
                 read_ahead_bytes: int | str = "auto", *, max_read_bytes_per_sec: int | None = None,
                 planned: Mapping[str, PlannedScans] | None = None, disk_order: bool | None = None):
        """``progress``: where its scans are reported (None, from an :data:`EngineFactory`'s caller: nowhere);
        ``read_ahead_bytes``, ``max_read_bytes_per_sec``: the LoaderConfig's; ``planned``: the plans already made of
        some data dirs (:func:`mploader.load_plan.plan_scans`), which :meth:`plan` then reuses; ``disk_order``: whether
        the dirs it reads ahead are read by one reader in disk order (:meth:`one_reader`; None: as each dir's device
        and page cache say)."""
        self.stats = stats
        self.progress: Progress = NO_PROGRESS if progress is None else progress
        self.read_ahead_bytes = read_ahead_bytes
        self.max_read_bytes_per_sec = max_read_bytes_per_sec  # the IO budget of each data dir (None: none)
        self.planned: dict[str, PlannedScans] = dict(planned or {})  # per data dir, once planned
        self.planned_paths: dict[str, set[str]] = {}  # the segment files of those plans
        self.disk_order = disk_order
        self.lock = threading.Lock()  # every update of ``stats``, from any thread
        self._read_ahead: dict[str, ReadAhead] = {}
        self._budgets: dict[str, ReadBudget] = {}
        self._closed = threading.Event()  # set by close(): a wait for a read budget's turn stops at once

    def plan(self, dir_plan: DirPlan) -> PlannedScans:
        """The data dir's planned scans, in Phase 2's order (made once)."""
        planned = self.planned.get(dir_plan.data_dir)
        if planned is None:
            planned = self.planned[dir_plan.data_dir] = plan_segment_scans(dir_plan)
        self.planned_paths[dir_plan.data_dir] = {t.path for _, tasks in planned for t in tasks}
        return planned

    @abc.abstractmethod
    def prefetch(self, dirs: Sequence[DirPlan]) -> dict[str, list[Partition]]:
        """Plan the dirs' scans and start what runs ahead of Phase 2; per data dir, the order in which
        Phase 2 should load the partitions."""

    def source(self, data_dir: str) -> ScanSource:
        """The scans of ``data_dir``'s segments, for the loader."""
        return _PlannedSource(self, data_dir)

    @abc.abstractmethod
    def scan(self, data_dir: str, task: SegmentTask) -> SegmentScan:
        """The scan of ``task``, planned or not."""

    def audit(self, data_dir: str, tasks: Sequence[AuditTask]) -> Iterator[SegmentAudit]:
        """``mploader verify``'s Phase 1: :func:`~mploader.scan.audit.audit_segment` of each task, yielded in
        the tasks' order (here in the calling thread; the pool runs them in the dir's workers)."""
        for task in tasks:
            yield audit_segment(task)

    def inline_source(self, data_dir: str) -> InlineSource:
        """Scans in the calling thread, counted in the stats, the progress and the read-ahead of ``data_dir``."""
        return InlineSource(self.stats, self.lock, self.progress, data_dir, self._read_ahead.get(data_dir),
                            self.budget(data_dir), self._closed)

    def budget(self, data_dir: str) -> ReadBudget | None:
        """``data_dir``'s read budget (``LoaderConfig.max_read_bytes_per_sec``, :mod:`mploader.engine.throttle`);
        None without one."""
        if self.max_read_bytes_per_sec is None:
            return None
        with self.lock:
            if data_dir not in self._budgets:
                self._budgets[data_dir] = ReadBudget(self.max_read_bytes_per_sec)
            return self._budgets[data_dir]

    def one_reader(self, plan: DirPlan) -> bool:
        """Whether ``plan``'s dir is read by one reader in disk order, its scans gated on it
        (:func:`mploader.engine.diskorder.reads_in_disk_order`, or the engine's ``disk_order``); never without a
        read-ahead."""
        if self.disk_order is None:
            return reads_in_disk_order(plan, self.read_ahead_bytes)
        return self.disk_order and self.read_ahead_bytes != 0 and hasattr(os, "posix_fadvise")

    def start_read_ahead(self, data_dir: str, ranges: list[Range], gated: bool = False,
                         on_read: Callable[[], None] | None = None) -> None:
        """Advise the kernel to read ``ranges`` (in the order the scans will take them) ahead of Phase 1; ``gated``,
        ``on_read``: see :class:`~mploader.engine.readahead.ReadAhead`."""
        if not ranges or self.read_ahead_bytes == 0 or not hasattr(os, "posix_fadvise"):
            return
        window = self._window(data_dir, max(end - start for _, start, end in ranges))
        try:
            queue = queue_of(data_dir)
        except OSError:
            queue = None
        turns = disk_turns(queue.disk) if gated and queue is not None else None  # one reader at a time a disk
        self._read_ahead[data_dir] = ReadAhead(ranges, window, advice_bytes(queue), gated, on_read, turns)

    def in_disk_order(self, data_dir: str, planned: PlannedScans) -> PlannedScans:
        """``planned`` in disk order (:func:`mploader.engine.diskorder.disk_ordered`), a partition's segments too
        where half the read-ahead's window holds them."""
        return disk_ordered(planned, self._window(data_dir, 0) // 2)

    def _window(self, data_dir: str, largest_range: int) -> int:
        """The read-ahead's window of ``data_dir`` whose largest range is ``largest_range``."""
        window = (auto_window(self.workers_per_dir, largest_range) if self.read_ahead_bytes == "auto"
                  else int(self.read_ahead_bytes))
        budget = self.budget(data_dir)
        if budget is not None:  # the kernel would read the whole window at the disk's speed
            window = min(window, budget.piece_bytes)
        return window

    def close(self, kill: bool = False) -> None:
        """End what the engine started (``kill``: at once, on Ctrl-C)."""
        self._closed.set()
        for read_ahead in self._read_ahead.values():
            read_ahead.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        """Closes the engine; killing what it started when the block ends by Ctrl-C (or another BaseException that
        is not an Exception, e.g. SystemExit), where waiting for its work would hold the exit up."""
        self.close(kill=error is not None and not isinstance(error, Exception))


# makes a load's engine from its stats and progress (load_logs' ``engine``: another engine than the config's); the
# engines take a progress of None for NO_PROGRESS
EngineFactory = Callable[[LoadStats, Progress | None], Engine]

__all__ = ["Engine", "EngineFactory", "InlineSource"]
