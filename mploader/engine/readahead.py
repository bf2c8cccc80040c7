"""Read-ahead of Phase 1's byte ranges: the disk reads the next segments while the scans compute.

A scan maps its segment and walks it; on a cold page cache every page fault waits for its disk read,
so one scanning process takes about read time + CPU time.  A thread per data dir asks the kernel for
the planned ranges, in the order the scans will take them, with ``POSIX_FADV_WILLNEED``: the kernel
queues the reads and returns, the thread moves on, and the scans find their pages in the page cache.

Pieces: the kernel reads at most the larger of the device's read-ahead and its largest request of one
``WILLNEED`` (``force_page_cache_ra``: 1280 KiB on a loop device, where a 4 MiB piece left 2.75 MiB to the
scans' page faults, 128 KiB at a time).  So a piece is that size (:func:`advice_bytes`, from the device's queue,
at most :data:`STEP_BYTES`): every request the read-ahead makes is as large as the device takes, never smaller
than the kernel's own read-ahead.

The thread keeps at most ``window`` bytes asked for and not yet scanned (the engine reports each
finished scan with :meth:`ReadAhead.done`), so a load larger than memory does not evict its own
read-ahead.  At most two pieces are in flight.  It is advice only: nothing is read into Python, and an
error (a file gone or changed) only ends the advice for that file; the engine starts no read-ahead where
``os.posix_fadvise`` is missing.  On a warm page cache the kernel finds every page present: ~12 ms per GB
of thread time on the project's machine (perf/README.md).

Two ways to run, as the engine chooses per data dir (:mod:`mploader.engine.diskorder`):

* alongside the scans (a device without a head, or a warm cache): the scans fault what is not read yet, and the
  thread reads in the idle I/O class, so that it never makes a read somebody waits for queue behind it;
* gated (a disk with a head, cold): the thread is the dir's one reader, the ranges in disk order; a scan starts
  only once its range is read (:meth:`ReadAhead.wait_read`, :meth:`ReadAhead.ready`; the pool submits a chunk
  then), so however many scan, the disk sees one sequential stream of large requests.  Its reads are what every
  scan waits for: the normal I/O class.  No scan waits for a thread that waits for room in its window (the scans
  it waits for might be the waiting ones): the gate opens then, and when the thread ends or is closed.  The gated
  threads of one disk (several data dirs on it) take turns, a range each (:class:`DiskTurns`).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mploader.format.files import open_regular
from mploader.host.devices import Queue

STEP_BYTES = 4 * 1024 * 1024  # the largest piece of advice (vda here: 4 MiB requests, 8 MiB read-ahead)
WINDOW_BYTES = 256 * 1024 * 1024  # asked ahead beyond what the busy scans hold (auto_window)
CLOSE_WAIT_S = 0.2  # close() waits this long for the thread (see there)
TURN_POLL_S = 0.1  # a reader waiting for its disk's turn looks this often whether it was closed

Range = tuple[str, int, int]  # path, start, end

log = logging.getLogger(__name__)


def _available_memory() -> int:
    """MemAvailable (what psutil.virtual_memory().available reads on Linux), without importing psutil: ~20 ms
    of every load's start-up for one number."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import psutil

    return int(psutil.virtual_memory().available)


def advice_bytes(queue: Queue | None) -> int:
    """The read-ahead's piece for files on the device of ``queue``: what one ``WILLNEED`` reads there (the larger
    of its ``read_ahead_kb`` and ``max_sectors_kb``), at most :data:`STEP_BYTES`; that where the device is unknown."""
    sizes = [] if queue is None else [b for b in (queue.read_ahead_bytes, queue.max_request_bytes) if b]
    return min(STEP_BYTES, max(sizes)) if sizes else STEP_BYTES


class DiskTurns:
    """The gated read-aheads of one disk take turns, a range each, in the order they ask (several data dirs on one
    disk: one reader at a time, or the head would jump between them at every piece)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[object] = deque()  # the readers asking, the one whose turn it is first

    def take(self, reader: object, stopped: Callable[[], bool]) -> bool:
        """Wait for ``reader``'s turn; False (not taken) once ``stopped`` says so."""
        with self._cond:
            self._queue.append(reader)
            while self._queue[0] is not reader:
                if stopped():
                    self._queue.remove(reader)
                    self._cond.notify_all()
                    return False
                self._cond.wait(TURN_POLL_S)
        return True

    def give(self, reader: object) -> None:
        with self._cond:
            self._queue.remove(reader)
            self._cond.notify_all()


_TURNS: dict[str, DiskTurns] = {}
_TURNS_LOCK = threading.Lock()


def disk_turns(disk: str) -> DiskTurns:
    """The turns of the gated read-aheads of ``disk`` (a kernel device name: :attr:`Queue.disk`)."""
    with _TURNS_LOCK:
        return _TURNS.setdefault(disk, DiskTurns())


def auto_window(workers: int, largest_range: int) -> int:
    """"auto" read-ahead: WINDOW_BYTES beyond the ranges that ``workers`` scans can hold at once (a
    range counts as done only when its whole scan is), and never more than a quarter of the memory
    now available."""
    return max(STEP_BYTES, min(_available_memory() // 4, WINDOW_BYTES + workers * largest_range))


@dataclass(slots=True)
class _Piece:
    """One piece asked for and not yet waited for."""

    fd: int  # the descriptor it was asked through
    byte: int  # its last byte
    range: int  # the range it is of
    last: bool = False  # the last piece asked of its range: the range is read once it is


class ReadAhead:
    """Advises the kernel to read ``ranges`` in order, in pieces of ``step`` bytes, at most ``window`` bytes ahead
    of :meth:`done`.  ``gated``: the scans wait for their range (:meth:`wait_read`; see the module docstring), and
    ``on_read`` is called (in the thread) whenever a scan may have stopped waiting."""

    def __init__(self, ranges: Sequence[Range], window: int, step: int = STEP_BYTES, gated: bool = False,
                 on_read: Callable[[], None] | None = None, turns: DiskTurns | None = None):
        self.window = max(window, step)  # room for one piece, or the thread could never move
        self.step = step
        self.ranges = tuple(ranges)
        self.gated = gated
        self.advised = 0  # bytes asked for so far
        self.scanned = 0  # bytes reported done
        self.read = 0  # ranges read (in the order given, mostly the scans' order: see engine.diskorder)
        self._read = [False] * len(self.ranges)
        self._index = {(path, start): i for i, (path, start, _) in reversed(list(enumerate(self.ranges)))}
        self._on_read = on_read
        self._turns = turns  # gated: the disk's turns, taken a range at a time (None: the disk is this one's)
        self._holding = False  # the disk's turn is this reader's
        self._waiting_room = False  # the thread waits for scans to end: no scan may wait for it
        self._ended = False
        self._stopped = False
        self._in_flight: deque[_Piece] = deque()
        self._advising: int | None = None  # the descriptor the thread asks through now
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="mploader-readahead", daemon=True)
        self._thread.start()

    def done(self, nbytes: int) -> None:
        """``nbytes`` of the ranges have been scanned: their pages are no longer ahead."""
        with self._cond:
            self.scanned += nbytes
            self._cond.notify_all()

    def ready(self, path: str, start: int) -> bool:
        """Whether the scan of the range ``path`` from ``start`` may start: not gated, not one of the ranges, read,
        or the thread waits for room or has ended (no scan ever waits for a thread that waits for scans)."""
        i = self._index.get((path, start))
        with self._cond:
            return self._ready(i)

    def wait_read(self, path: str, start: int) -> None:
        """Wait until :meth:`ready` says the scan of the range from ``start`` may start."""
        i = self._index.get((path, start))
        with self._cond:
            while not self._ready(i):
                self._cond.wait()

    def close(self) -> None:
        """Stop advising.  The thread ends at once unless it is waiting for a read: a read in the idle I/O class can
        wait as long as other reads keep the disk busy (up to the scheduler's aging, 10 s for mq-deadline), so a
        Ctrl-C does not wait for it; the thread then ends after that read."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=CLOSE_WAIT_S)

    def _ready(self, i: int | None) -> bool:
        return not self.gated or i is None or self._read[i] or self._waiting_room or self._ended or self._stopped

    def _run(self) -> None:
        if not self.gated:  # gated, the scans wait for these reads: they are nobody's idle time
            _idle_io_priority()
        try:
            for i, (path, start, end) in enumerate(self.ranges):
                if not self._advise(i, path, start, end):
                    return
            self._settle(0)
        finally:
            for fd in {piece.fd for piece in self._in_flight}:  # stopped: not waited for
                os.close(fd)
            with self._cond:
                self._ended = True
                self._cond.notify_all()
            self._tell()

    def _advise(self, i: int, path: str, start: int, end: int) -> bool:
        """Ask for range ``i`` piece by piece, at most two pieces in flight, in the disk's turn; False once stopped.
        Advice only: a file that cannot be opened, or changed, ends the advice for it."""
        if not self._take_turn():
            return False
        try:
            self._advising, _ = open_regular(path)  # never a FIFO (the thread would block in open) nor a link
            for offset in range(start, end, self.step):
                n = min(self.step, end - offset)
                if not self._room_for(n):
                    return False
                os.posix_fadvise(self._advising, offset, n, os.POSIX_FADV_WILLNEED)
                self._in_flight.append(_Piece(self._advising, offset + n - 1, i))
                self._settle(1)
        except OSError:
            pass
        finally:
            self._give_turn()
            fd, self._advising = self._advising, None
            if fd is not None and all(p.fd != fd for p in self._in_flight):
                os.close(fd)
        if self._in_flight and self._in_flight[-1].range == i:  # read once the last piece asked of it is
            self._in_flight[-1].last = True
        else:  # nothing asked of it, or all read already
            self._mark(i)
        return True

    def _settle(self, keep: int) -> None:
        """Wait for the pieces in flight but the last ``keep``, oldest first, and count their ranges read."""
        while len(self._in_flight) > keep:
            piece = self._in_flight.popleft()
            _wait_for_read(piece.fd, piece.byte)
            self._close(piece.fd)
            if piece.last:
                self._mark(piece.range)

    def _close(self, fd: int) -> None:
        """Close ``fd`` unless a piece in flight or the range being asked for still needs it."""
        if fd != self._advising and all(p.fd != fd for p in self._in_flight):
            os.close(fd)

    def _mark(self, i: int) -> None:
        """Range ``i`` is read."""
        with self._cond:
            self._read[i] = True
            self.read += 1
            self._cond.notify_all()
        self._tell()

    def _room_for(self, n: int) -> bool:
        """Wait until ``n`` more bytes fit in the window, and count them as asked for; False once stopped.  Before
        it waits, what is in flight is read, and the scans no longer wait for the thread."""
        with self._cond:
            if self._stopped:
                return False
            if self.advised + n - self.scanned <= self.window:
                self.advised += n
                return True
        self._settle(0)
        self._give_turn()  # the disk's other readers go on meanwhile
        with self._cond:
            self._waiting_room = True
            self._cond.notify_all()
        self._tell()
        with self._cond:
            while not self._stopped and self.advised + n - self.scanned > self.window:
                self._cond.wait()
            self._waiting_room = False
        if not self._take_turn():
            return False
        with self._cond:
            self.advised += n
            return True

    def _take_turn(self) -> bool:
        """The disk's turn (at once where it has no turns); False once stopped."""
        def stopped() -> bool:
            with self._cond:
                return self._stopped

        if stopped():
            return False
        if self._turns is not None:
            self._holding = self._turns.take(self, stopped)
            return self._holding
        return True

    def _give_turn(self) -> None:
        if self._turns is not None and self._holding:
            self._turns.give(self)
            self._holding = False

    def _tell(self) -> None:
        """``on_read``, whose failure is its caller's to see again (the engine tops up after every scan too)."""
        if self._on_read is None:
            return
        try:
            self._on_read()
        except Exception:  # the engine's own errors: logged, and met again where they matter
            log.debug("the read-ahead's on_read failed", exc_info=True)


# ioprio_set(2) by number (libc has no wrapper), where it is known; elsewhere psutil's
_SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}.get(os.uname().machine)
_IOPRIO_WHO_PROCESS = 1  # with a thread id: that thread only
_IOPRIO_IDLE = 3 << 13  # IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT


def _idle_io_priority() -> None:
    """This thread's reads go to the disk only when nobody else's wait (the idle I/O class, honoured by
    the mq-deadline and bfq schedulers): the read-ahead must not delay what the scans and the workers'
    start-up read themselves.  The system call itself where its number is known: importing psutil for it took
    ~15 ms of the interpreter's lock from the loading thread at every load that reads ahead."""
    tid = threading.get_native_id()
    if _SYS_IOPRIO_SET is not None:
        ctypes.CDLL(None, use_errno=True).syscall(_SYS_IOPRIO_SET, _IOPRIO_WHO_PROCESS, tid, _IOPRIO_IDLE)
        return  # advice only: a refusal changes nothing
    import psutil  # here: the thread runs only where there is something to read ahead

    try:
        psutil.Process(tid).ionice(psutil.IOPRIO_CLASS_IDLE)
    except (psutil.Error, OSError, AttributeError, ValueError):
        pass


def _wait_for_read(fd: int, byte: int) -> None:
    """Block until the page holding ``byte`` is read.  WILLNEED only queues reads: asking for the whole
    window at once would queue hundreds of MB ahead of every other read of the machine (a worker's
    imports at pool start were measured to wait 0.45 s behind it), so at most two pieces are in flight.
    (RANDOM on the descriptor the pieces are asked through: WILLNEED does not heed it.)"""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # this one byte, not the kernel's own read-ahead
        os.pread(fd, 1, byte)
    except OSError:
        pass


__all__ = ["DiskTurns", "ReadAhead", "auto_window", "advice_bytes", "disk_turns", "STEP_BYTES", "WINDOW_BYTES"]
