"""What a Phase 1 worker process runs, and the layout of the shared-memory block it fills.

Kept apart from :mod:`mploader.engine.pool` so that a worker imports only what a scan needs (numpy, crc32c,
:mod:`mploader.scan.walk`), not loky's parent side, the engine and the loader.

A block (:class:`mploader.engine.block.Block`) has, per slot, room for a batch-table row, for a row of each
recovery-draft array and for an entry of each index the draft prepared; the parent creates it sized for the worst
case (``capacity`` slots, sparse in /dev/shm), the worker writes the arrays packed from byte 0, in that order
(every row width of the arrays before the indexes' bytes is a multiple of 8 bytes, and no array has more rows than
the table; where the indexes' bytes would not fit, they are left to Phase 2), and returns a small typed result
(:data:`WorkerResult`): nothing per batch is pickled; the parent reads them back (:func:`arrays_from_block`).

A worker catches only ``OSError`` (the file's problem: the parent raises it again, as an inline scan
would).  Any other exception is the scan code's own, and loky hands it to the parent with the worker's
traceback; the parent raises it (see :mod:`mploader.engine.pool`).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from mploader.engine.block import Block
from mploader.scan import BATCH_TABLE, SegmentTask, scan_segment
from mploader.scan.draft import RecoveryDraft
from mploader.scan.indexes import PreparedIndexes
from mploader.scan.table import INDEX_DRAFT, ROW


class IndexesLayout(NamedTuple):
    """Where a draft's prepared indexes lie in the block: :class:`PreparedIndexes` less its bytes, which follow the
    draft's arrays (the offset index's, then the time index's)."""

    prepared: PreparedIndexes  # its bytes empty
    lengths: tuple[int, int]  # of its offset_bytes and time_bytes

    @classmethod
    def of(cls, indexes: PreparedIndexes) -> IndexesLayout:
        lengths = (len(indexes.offset_bytes), len(indexes.time_bytes))
        return cls(dataclasses.replace(indexes, offset_bytes=b"", time_bytes=b""), lengths)

    def with_bytes(self, offset_bytes: bytes, time_bytes: bytes) -> PreparedIndexes:
        return dataclasses.replace(self.prepared, offset_bytes=offset_bytes, time_bytes=time_bytes)


class DraftLayout(NamedTuple):
    """Where a recovery draft lies in the block (:class:`mploader.scan.RecoveryDraft` less its arrays)."""

    interval: int
    lengths: tuple[int, int, int]  # rows of RecoveryDraft.index, .producer_rows, .epoch_rows
    seconds: float
    indexes: IndexesLayout | None = None  # RecoveryDraft.indexes


class Scanned(NamedTuple):
    """The scan's descriptor; its batch table (and draft) are in the block."""

    pid: int
    end: int
    valid_bytes: int
    stop: str  # Stop's value
    stop_detail: str
    rows: int
    draft: DraftLayout | None
    fatal: str | None
    fatal_exception: str | None
    seconds: float


class ReadFailed(NamedTuple):
    """The file could not be read: the parent raises this OSError again."""

    pid: int
    errno: int | None
    strerror: str | None
    filename: str | None


class Grown(NamedTuple):
    """More rows than the block has slots: the file grew after the parent sized the block."""

    pid: int


class NoSpace(NamedTuple):
    """The block could not take the rows (a full /dev/shm: ``ENOSPC``; or another error of the write, never the
    segment's): the parent scans the chunk itself."""

    pid: int
    nbytes: int
    error: str = ""


WorkerResult = Scanned | ReadFailed | Grown | NoSpace
# a block has room, per slot, for a table row and a row of each draft array, laid out one after the other
DRAFT_DTYPES = (INDEX_DRAFT, ROW, ROW)  # RecoveryDraft.index, .producer_rows, .epoch_rows
# and the prepared indexes' bytes (RecoveryDraft.indexes): an offset index entry and a time index entry a slot, at
# most one entry of each per drafted row, and the time index's final entry, which the slot a block has beyond its
# rows holds
INDEX_ENTRY_BYTES = 8 + 12
SLOT_BYTES = BATCH_TABLE.itemsize + sum(d.itemsize for d in DRAFT_DTYPES) + INDEX_ENTRY_BYTES


def ignore_interrupts() -> None:
    """A worker's initializer: Ctrl-C is the parent's to handle (a terminal sends SIGINT to the whole
    process group). The parent stops the load and kills its workers; a worker that took the signal itself
    would print a KeyboardInterrupt traceback of its own, or die mid-task and look like a crash."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# The signal the kernel sends a worker when its parent dies (prctl PR_SET_PDEATHSIG).  Not SIGKILL: Linux sends
# it when the *thread* that started the worker ends, not the process (prctl(2)), and loky starts workers in
# whichever thread submits first (a loading thread, after a crash).  The kernel then hands the worker to another
# thread of the same process and sends the signal again when that one ends; only the last one's end changes
# getppid().  So the handler exits only when the parent process is gone.  A signal nothing else in a worker uses.
PARENT_DEATH_SIGNAL = signal.SIGUSR2
PARENT_DIED_EXIT = 70  # a worker's exit status when it left because its parent had died (no one collects it)
_PR_SET_PDEATHSIG = 1


# adaptive workers (mploader.engine.adaptive): the semaphore that lets only so many of a dir's workers scan at once
_GATE: Any = None


def init_worker(parent_pid: int, gate: Any = None, forked: bool = False, name: str = "") -> None:
    """The pool's worker initializer: ignore Ctrl-C (:func:`ignore_interrupts`) and exit as soon as the parent
    (``parent_pid``, the process that made the pool) is gone (:func:`exit_with_parent`); ``gate``: the adaptive
    pool's semaphore (None: a worker scans as soon as it has a task); ``name``: the process's name (default
    :data:`WORKER_NAME`).  A ``forked`` worker first moves every
    object it inherited out of the garbage collector's reach (``gc.freeze``: a collection that walked them would
    write to each one's header and copy the parent's pages it shares), and drops the signal handlers the parent's
    Python code installed (:func:`_default_handlers`)."""
    global _GATE
    if forked:
        gc.freeze()
        _default_handlers()
    _GATE = gate
    _prctl(_PR_SET_NAME, (name or WORKER_NAME).encode()[:15])  # comm holds 15 bytes
    ignore_interrupts()
    exit_with_parent(parent_pid)


def _default_handlers() -> None:
    """A forked worker takes every signal as a fresh interpreter would: a handler the parent's Python code set (an
    experiment's SIGTERM that stops its run, a harness's own) belongs to the parent's objects, and run here it would
    act on copies of them, or raise in the middle of a scan.  The parent's wake-up descriptor (an event loop's) goes
    too: a signal here would write to the parent's pipe."""
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    for signum in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):  # signals no process may handle (SIGKILL, SIGSTOP)
            if callable(signal.getsignal(signum)) and signum != signal.SIGINT:  # SIGINT: ignore_interrupts
                signal.signal(signum, signal.SIG_DFL)


def exit_with_parent(parent_pid: int) -> None:
    """Make this process exit (``os._exit``) within moments of ``parent_pid``'s death, however it dies
    (``kill -9``, the OOM killer): a worker left behind would wait for tasks forever, holding loky's
    semaphores and its resource trackers alive.  Linux: the kernel signals it (``PR_SET_PDEATHSIG``); elsewhere a
    daemon thread polls ``getppid()`` (``PARENT_POLL_S``)."""

    def on_parent_death(signum: int, frame: object) -> None:
        if os.getppid() != parent_pid:  # not just the thread that started this worker: the parent process
            os._exit(PARENT_DIED_EXIT)

    signal.signal(PARENT_DEATH_SIGNAL, on_parent_death)
    if not _prctl(_PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL)):
        threading.Thread(target=_poll_parent, args=(parent_pid,), name="mploader-parent-watch", daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the kernel was asked to tell
        os._exit(PARENT_DIED_EXIT)


PARENT_POLL_S = 0.2

# a worker's process name (``comm``: what top, pidof and psutil's name() show), which a forked worker would
# otherwise share with its parent and a spawned one with every other Python process
WORKER_NAME = "mploader-scan"
_PR_SET_NAME = 15


def _prctl(option: int, arg: int | bytes) -> bool:
    """Linux's prctl(option, arg); False where there is none (another platform, a libc without it) or it failed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # no prctl in this libc
        return False


def _poll_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    os._exit(PARENT_DIED_EXIT)


def _draft_arrays(draft: RecoveryDraft) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return draft.index, draft.producer_rows, draft.epoch_rows


def _index_arrays(indexes: PreparedIndexes) -> tuple[np.ndarray, np.ndarray]:
    return np.frombuffer(indexes.offset_bytes, np.uint8), np.frombuffer(indexes.time_bytes, np.uint8)


def arrays_from_block(block: Block, rows: int, draft: DraftLayout | None) -> tuple[np.ndarray, RecoveryDraft | None]:
    """Read the batch table (and the recovery draft, with its indexes) a worker wrote into ``block``."""
    dtypes = (BATCH_TABLE, *DRAFT_DTYPES, np.dtype(np.uint8), np.dtype(np.uint8))
    lengths = (rows, *(() if draft is None else draft.lengths),
               *(() if draft is None or draft.indexes is None else draft.indexes.lengths))
    out = [np.empty(n, dtype) for dtype, n in zip(dtypes, lengths)]
    block.read(out)
    if draft is None:
        return out[0], None
    indexes = None if draft.indexes is None else draft.indexes.with_bytes(out[4].tobytes(), out[5].tobytes())
    return out[0], RecoveryDraft(draft.interval, out[1], out[2], out[3], seconds=draft.seconds, indexes=indexes)


def scan_many(scan: Callable[[SegmentTask, str, int, float], WorkerResult],
              items: list[tuple[SegmentTask, str, int, float]]) -> list[WorkerResult]:
    """What the pool submits: ``scan`` (:func:`worker_scan`, or a test's stand-in, looked up at submission) of each
    item in turn, one chunk, or small whole segments several to a call (``mploader.engine.pool.GROUP_BYTES``)."""
    return [scan(*item) for item in items]


def worker_scan(task: SegmentTask, block_name: str, capacity: int, not_before: float = 0.0) -> WorkerResult:
    """Runs in a worker: scan, write the batch table (and the recovery draft) into the parent's block,
    return its descriptor.  ``not_before``: the scan's turn in its dir's read budget, a ``time.monotonic()``
    time (:mod:`mploader.engine.throttle`); then the adaptive pool's gate, if any."""
    delay = not_before - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    with _GATE if _GATE is not None else contextlib.nullcontext():
        t0 = time.perf_counter()
        try:
            scan = scan_segment(task)
        except OSError as e:
            return ReadFailed(os.getpid(), e.errno, e.strerror, e.filename)
    rows = len(scan.batches)
    if rows > capacity:
        # every entry takes at least MIN_ENTRY_BYTES, so only a file that grew after the parent sized the block
        # has more rows than slots; the parent scans a file that changed since planning again anyway
        return Grown(os.getpid())
    arrays = [scan.batches]
    draft = None
    if scan.draft is not None:
        arrays += _draft_arrays(scan.draft)
        indexes = scan.draft.indexes
        more = () if indexes is None else _index_arrays(indexes)
        if more and sum(a.nbytes for a in (*arrays, *more)) > capacity * SLOT_BYTES:  # Phase 2 prepares them
            indexes, more = None, ()
        arrays += more
        draft = DraftLayout(scan.draft.interval, (len(arrays[1]), len(arrays[2]), len(arrays[3])),
                            scan.draft.seconds, None if indexes is None else IndexesLayout.of(indexes))
    try:
        Block(block_name).write(arrays)
    except OSError as e:  # the block's (ENOSPC, ENOMEM, a tmpfs quota), never the segment's: recovery must not see it
        return NoSpace(os.getpid(), sum(a.nbytes for a in arrays), str(e))
    return Scanned(os.getpid(), scan.end, scan.valid_bytes, scan.stop.value, scan.stop_detail, rows, draft,
                   scan.fatal, scan.fatal_exception, time.perf_counter() - t0)


__all__ = ["DRAFT_DTYPES", "SLOT_BYTES", "DraftLayout", "Grown", "IndexesLayout", "NoSpace", "ReadFailed", "Scanned",
           "WorkerResult", "PARENT_DEATH_SIGNAL", "PARENT_DIED_EXIT", "WORKER_NAME", "arrays_from_block",
           "exit_with_parent", "ignore_interrupts", "init_worker", "scan_many", "worker_scan"]
