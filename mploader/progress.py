"""Progress reporting through an injectable callback object (fsspec style): the library never prints.

``load_logs(..., progress=p)`` calls ``p``'s methods as the load goes: the raw events (:meth:`Progress.start`,
:meth:`~Progress.partition_done`, :meth:`~Progress.segments_scanned`, :meth:`~Progress.close`) and, when a
dir's plan is known and after each partition or scan, :meth:`Progress.update` with the figures of that dir
(:class:`DirProgress`: partitions, segments and bytes done and to do, percentage, rate, ETA), which
:class:`ProgressTracker` keeps.  An object that lacks one of the methods (an older duck-typed callback) is
simply not called for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class DirProgress:
    """The figures of one data dir at one moment of a load.

    ``bytes_total`` is what the load will read whole in that dir: the ``.log`` bytes of every segment the
    engine planned to scan (:func:`mploader.engine.plan.plan_segment_scans`, the loader's own rule), i.e. the
    segments recovery reads after an unclean shutdown and those with a missing or corrupt index.  It is
    ``None`` where the engine did not plan the dir (a clean dir loaded inline: it has next to nothing to scan,
    and planning it would cost a listing of every partition); ``bytes_done`` then still counts what is scanned.
    ``bytes_done`` counts the scans Phase 2 has taken (a scan ahead in a worker counts when recovery uses it)
    and, for a finished partition, what its plan held and recovery did not need to read (e.g. the segments
    after a truncation, deleted unread): it reaches ``bytes_total`` when the dir's last partition is done.
    """

    data_dir: str
    partitions_done: int
    partitions_total: int
    segments_done: int  # scans taken by recovery
    segments_total: int | None  # planned scans (None: not known, e.g. a clean dir loaded inline)
    bytes_done: int
    bytes_total: int | None  # planned bytes (None: not known, e.g. a clean dir loaded inline)
    elapsed_seconds: float  # since the load started on its data dirs (after the preflight)
    planned: bool = True  # False until the engine has planned the dir (its totals are not known yet)

    @property
    def finished(self) -> bool:
        return self.planned and self.partitions_done >= self.partitions_total

    @property
    def fraction(self) -> float:
        """Done, from 0 to 1: by bytes where there are planned bytes, else by partitions."""
        if self.finished:
            return 1.0
        if self.bytes_total:
            return min(1.0, self.bytes_done / self.bytes_total)
        if self.partitions_total and self.planned:
            return self.partitions_done / self.partitions_total
        return 0.0

    @property
    def percent(self) -> float:
        return 100.0 * self.fraction

    @property
    def rate_bytes_per_second(self) -> float | None:
        """Bytes done per second since the start (None before the first byte)."""
        if self.bytes_done <= 0 or self.elapsed_seconds <= 0:
            return None
        return self.bytes_done / self.elapsed_seconds

    @property
    def eta_seconds(self) -> float | None:
        """Seconds still to go at the average pace so far (0 once finished; None before anything is done)."""
        f = self.fraction
        if f >= 1.0:
            return 0.0
        if f <= 0.0 or self.elapsed_seconds <= 0:
            return None
        return self.elapsed_seconds * (1.0 - f) / f

    def to_json(self) -> dict[str, Any]:
        return {"data_dir": self.data_dir, "partitions_done": self.partitions_done,
                "partitions_total": self.partitions_total, "segments_done": self.segments_done,
                "segments_total": self.segments_total, "bytes_done": self.bytes_done, "bytes_total": self.bytes_total,
                "elapsed_seconds": self.elapsed_seconds, "percent": self.percent,
                "rate_bytes_per_second": self.rate_bytes_per_second, "eta_seconds": self.eta_seconds}


class Progress:
    """Override what you need; every method is called from the loading threads."""

    def start(self, partitions_per_dir: dict[str, int]) -> None:
        """Called once before loading, with the number of partition directories per data dir."""

    def partition_done(self, data_dir: str, partition: str) -> None:
        """Called when one partition finished loading (or failed)."""

    def segments_scanned(self, data_dir: str, segments: int, nbytes: int) -> None:
        """Called as Phase 1 scans complete."""

    def update(self, figures: DirProgress) -> None:
        """Called with a data dir's figures: once per data dir when its scans are planned (before recovery
        starts; ``figures.planned`` is True from then on), then after every partition done and every scan in
        that dir.  Calls are serialised (one at a time, in order); keep them short."""

    def close(self) -> None:
        """Called once after loading."""


# what a load, an engine or a verification reports to when no one listens: every method does nothing
NO_PROGRESS = Progress()


class ProgressTracker(Progress):
    """Keeps each data dir's :class:`DirProgress` from the load's events and passes every event, and the new
    figures, on to ``sinks`` (Progress objects, or any object with some of Progress's methods)."""

    def __init__(self, sinks: Sequence[object], clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._t0 = clock()
        self._dirs: dict[str, _DirCounts] = {}
        self._sinks = list(sinks)
        self._calls = {method: [m for s in sinks if callable(m := getattr(s, method, None))]
                       for method in ("start", "partition_done", "segments_scanned", "update", "close")}

    @property
    def watched(self) -> bool:
        """Whether anyone hears of the load's progress (a tracker of no sinks keeps figures nobody reads)."""
        return bool(self._sinks)

    def _each(self, method: str) -> list[Callable[..., None]]:
        return self._calls[method]

    def start(self, partitions_per_dir: dict[str, int]) -> None:
        with self._lock:
            self._t0 = self._clock()
            self._dirs = {d: _DirCounts(n) for d, n in partitions_per_dir.items()}
        for start in self._each("start"):
            start(partitions_per_dir)

    def planned(self, data_dir: str, partition_bytes: dict[str, int] | None, segments: int | None) -> None:
        """The dir's plan: per partition directory, the bytes planned for scanning (None: not planned), and
        the number of planned scans."""
        with self._lock:
            c = self._dirs.setdefault(data_dir, _DirCounts(0))
            c.planned = True
            c.partition_bytes = partition_bytes
            c.bytes_total = None if partition_bytes is None else sum(partition_bytes.values())
            c.segments_total = segments
            self._emit(data_dir, c)

    def segments_scanned(self, data_dir: str, segments: int, nbytes: int) -> None:
        for scanned in self._each("segments_scanned"):
            scanned(data_dir, segments, nbytes)
        with self._lock:
            c = self._dirs.setdefault(data_dir, _DirCounts(0))
            c.segments_done += segments
            c.bytes_scanned += nbytes
            self._emit(data_dir, c)

    def partition_done(self, data_dir: str, partition: str) -> None:
        self.partition_loaded(data_dir, partition, None, None)

    def partition_loaded(self, data_dir: str, partition: str, path: str | None, bytes_scanned: int | None) -> None:
        """One partition finished loading (or failed): ``path`` is its directory (the plan's key) and
        ``bytes_scanned`` what its recovery read (None: not known, e.g. it failed)."""
        for done in self._each("partition_done"):
            done(data_dir, partition)
        with self._lock:
            c = self._dirs.setdefault(data_dir, _DirCounts(0))
            c.partitions_done += 1
            if path is not None and c.partition_bytes is not None:  # what its plan held and it did not read
                c.bytes_unread += max(0, c.partition_bytes.get(path, 0) - (bytes_scanned or 0))
            self._emit(data_dir, c)

    def close(self) -> None:
        for close in self._each("close"):
            close()

    def _figures(self, data_dir: str, c: _DirCounts) -> DirProgress:
        done = c.bytes_scanned + c.bytes_unread
        total = c.bytes_total
        if total is not None:
            total = max(total, c.bytes_scanned)  # scans the plan did not hold (expected none) count too
            if c.partitions_done >= c.partitions_total:
                done = total
            done = min(done, total)
        segments_total = None if c.segments_total is None else max(c.segments_total, c.segments_done)
        return DirProgress(data_dir, c.partitions_done, c.partitions_total, c.segments_done, segments_total, done,
                           total, max(0.0, self._clock() - self._t0), c.planned)

    def _emit(self, data_dir: str, c: _DirCounts) -> None:  # under the lock: updates arrive one at a time, in order
        updates = self._each("update")
        if updates:
            figures = self._figures(data_dir, c)
            for update in updates:
                update(figures)


class _DirCounts:
    __slots__ = ("partitions_total", "partitions_done", "segments_done", "segments_total", "bytes_scanned",
                 "bytes_unread", "bytes_total", "partition_bytes", "planned")

    def __init__(self, partitions_total: int) -> None:
        self.partitions_total = partitions_total
        self.partitions_done = 0
        self.segments_done = 0
        self.segments_total: int | None = None
        self.bytes_scanned = 0
        self.bytes_unread = 0
        self.bytes_total: int | None = None
        self.partition_bytes: dict[str, int] | None = None
        self.planned = False


__all__ = ["NO_PROGRESS", "DirProgress", "Progress", "ProgressTracker"]
