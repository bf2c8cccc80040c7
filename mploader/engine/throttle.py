"""An IO budget per data dir (``LoaderConfig.max_read_bytes_per_sec``): recovery on a live host must not hold
its disks busy so long that the other tenants starve (BookKeeper added a rate limit to its rebuilds after an
unthrottled one kept disks busy for tens of minutes).

What is counted: the bytes Phase 1 scans, wherever they come from (the disk, or the page cache: the load
cannot tell them apart, so it errs on the safe side).  A scan of ``n`` bytes may start only at its turn
(:meth:`ReadBudget.reserve`): the turns of one data dir follow each other at the budget's rate, a virtual
clock that banks at most ``PIECE_SECONDS`` of idle time: a scan that started late (its process waited for a
CPU, Phase 2 took longer than its turn) is caught up, a pause of the load is not.  The parent waits
for its own scans' turns (:func:`paced_scan`); a worker receives its turn with its task and waits for it
there (:func:`mploader.engine.worker.worker_scan`), so that the parent never blocks on another dir's budget.

Granularity: a scan reads its bytes as fast as it can once started, so scans are cut into pieces of about a
quarter second of budget (:attr:`ReadBudget.piece_bytes`, at confirmed batch starts:
:func:`mploader.engine.chunks.chunk_boundaries`): over any second the reads exceed the budget by at most
two pieces (one started, one banked).  A segment without a confirmed cut (no usable ``.index``: the case of
many unclean recoveries; a legacy v0/v1 segment) is one piece: it is read at full speed once its turn comes,
and the turns after it wait for all its bytes, so the budget holds over time, not within that segment.  The
engines also keep the kernel's read-ahead to one piece ahead of the scans
(:meth:`mploader.engine.base.Engine.start_read_ahead`), or it would read the next 256 MiB at the disk's speed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from mploader.engine.chunks import chunk_boundaries, chunk_tasks, stitch_whole
from mploader.errors import LoadInterrupted
from mploader.scan import SegmentScan, SegmentTask, scan_segment

PIECE_SECONDS = 0.25  # a piece is about this much of the budget
MIN_PIECE_BYTES = 1 << 20  # ... and never smaller (a cut costs a stitch and the segment's recovery draft)


class ReadBudget:
    """The turns of one data dir's scans at ``bytes_per_s`` (see the module docstring)."""

    def __init__(self, bytes_per_s: int, clock: Callable[[], float] = time.monotonic):
        if bytes_per_s < 1:
            raise ValueError("a read budget must be >= 1 byte per second")
        self.bytes_per_s = bytes_per_s
        self._clock = clock
        self._next: float | None = None  # the clock time from which the next scan may start (None: the first)
        self._lock = threading.Lock()

    @property
    def piece_bytes(self) -> int:
        """The size to cut scans at: a quarter second of budget, at least 1 MiB."""
        return max(MIN_PIECE_BYTES, int(self.bytes_per_s * PIECE_SECONDS))

    def reserve(self, nbytes: int) -> float:
        """Book a scan of ``nbytes``; returns the clock time (``time.monotonic``, the same in every process
        of the machine) at which it may start."""
        with self._lock:
            now = self._clock()
            start = now if self._next is None else max(now - PIECE_SECONDS, self._next)  # (one in the past: now)
            self._next = start + max(0, nbytes) / self.bytes_per_s
            return start

    def wait(self, nbytes: int, cancelled: threading.Event | None = None) -> None:
        """Book a scan of ``nbytes`` and wait for its turn (``cancelled`` set: stop waiting, raise
        :class:`~mploader.errors.LoadInterrupted`)."""
        wait_turn(self.reserve(nbytes) - self._clock(), cancelled)


def wait_turn(delay: float, cancelled: threading.Event | None = None) -> None:
    """Sleep ``delay`` seconds (none if it is not positive); ``cancelled`` set meanwhile: raise
    :class:`~mploader.errors.LoadInterrupted`."""
    if delay <= 0:
        return
    if cancelled is None:
        time.sleep(delay)
    elif cancelled.wait(delay):
        raise LoadInterrupted("the load was interrupted")


def paced_scan(task: SegmentTask, budget: ReadBudget, cancelled: threading.Event | None = None) -> SegmentScan:
    """``scan_segment(task)`` within ``budget``: a whole segment larger than a piece is scanned in pieces, each
    after its turn, and stitched as the pool stitches its chunks (the same scan results)."""
    size = os.path.getsize(task.path) if task.end is None else task.end
    cuts = []
    if task.start == 0 and task.end is None:  # a whole segment: cut where the offset index confirms a batch
        cuts = chunk_boundaries(task.path, task.base_offset, size, budget.piece_bytes)
    if not cuts:
        budget.wait(size - task.start, cancelled)
        return scan_segment(task)
    parts = []
    for piece in chunk_tasks(task, [0, *cuts, size]):
        budget.wait((piece.end if piece.end is not None else size) - piece.start, cancelled)
        parts.append(scan_segment(piece))
    return stitch_whole(task, parts)[0]


__all__ = ["MIN_PIECE_BYTES", "PIECE_SECONDS", "ReadBudget", "paced_scan", "wait_turn"]
