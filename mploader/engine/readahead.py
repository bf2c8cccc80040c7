"""Read-ahead of Phase 1's byte ranges: the disk reads the next segments while the scans compute.

A scan maps its segment and walks it; on a cold page cache every page fault waits for its disk read,
so one scanning process takes about read time + CPU time.  A thread per data dir asks the kernel for
the planned ranges, in the order the scans will take them, with ``POSIX_FADV_WILLNEED``: the kernel
queues the reads and returns, the thread moves on, and the scans find their pages in the page cache.

The thread keeps at most ``window`` bytes asked for and not yet scanned (the engine reports each
finished scan with :meth:`ReadAhead.done`), so a load larger than memory does not evict its own
read-ahead.  At most two pieces are in flight, and the thread reads in the idle I/O class: the
read-ahead never makes a read that somebody waits for queue behind it.  It is advice only: nothing
is read into Python, and an error (a file gone or changed) only ends the advice for that file; the
engine starts no read-ahead where ``os.posix_fadvise`` is missing.  On a warm page cache the kernel finds
every page present: ~12 ms per GB of thread time on the project's machine (perf/README.md).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence

from mploader.format.files import open_regular

STEP_BYTES = 4 * 1024 * 1024  # one piece of advice (one request of the disk: max_sectors_kb is 4 MiB here)
WINDOW_BYTES = 256 * 1024 * 1024  # asked ahead beyond what the busy scans hold (auto_window)
CLOSE_WAIT_S = 0.2  # close() waits this long for the thread (see there)

Range = tuple[str, int, int]  # path, start, end


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


def auto_window(workers: int, largest_range: int) -> int:
    """"auto" read-ahead: WINDOW_BYTES beyond the ranges that ``workers`` scans can hold at once (a
    range counts as done only when its whole scan is), and never more than a quarter of the memory
    now available."""
    return max(STEP_BYTES, min(_available_memory() // 4, WINDOW_BYTES + workers * largest_range))


class ReadAhead:
    """Advises the kernel to read ``ranges`` in order, at most ``window`` bytes ahead of :meth:`done`."""

    def __init__(self, ranges: Sequence[Range], window: int, step: int = STEP_BYTES):
        self.window = max(window, step)  # room for one piece, or the thread could never move
        self.step = step
        self.ranges = tuple(ranges)
        self.advised = 0  # bytes asked for so far
        self.scanned = 0  # bytes reported done
        self._stopped = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="mploader-readahead", daemon=True)
        self._thread.start()

    def done(self, nbytes: int) -> None:
        """``nbytes`` of the ranges have been scanned: their pages are no longer ahead."""
        with self._cond:
            self.scanned += nbytes
            self._cond.notify()

    def close(self) -> None:
        """Stop advising.  The thread ends at once unless it is waiting for a read: a read in the idle I/O
        class can wait as long as other reads keep the disk busy (up to the scheduler's aging, 10 s for
        mq-deadline), so a Ctrl-C does not wait for it; the thread then ends after that read."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=CLOSE_WAIT_S)

    def _room_for(self, n: int) -> bool:
        """Wait until ``n`` more bytes fit in the window, and count them as asked for; False once stopped."""
        with self._cond:
            while not self._stopped and self.advised + n - self.scanned > self.window:
                self._cond.wait()
            if self._stopped:
                return False
            self.advised += n
            return True

    def _run(self) -> None:
        _idle_io_priority()
        # the piece asked for before the last one: the descriptor it was asked through (kept open until then: a
        # file of one piece, most segments, is opened once) and its last byte
        waiting: tuple[int, int] | None = None
        try:
            for path, start, end in self.ranges:
                try:
                    fd, _ = open_regular(path)  # never a FIFO (the thread would block in open) nor a link
                except OSError:
                    continue
                try:
                    for offset in range(start, end, self.step):
                        n = min(self.step, end - offset)
                        if not self._room_for(n):
                            return
                        os.posix_fadvise(fd, offset, n, os.POSIX_FADV_WILLNEED)
                        if waiting is not None:
                            _wait_for_read(*waiting)
                            read, waiting = waiting[0], None  # no longer ours to close, whatever close() does
                            if read != fd:
                                os.close(read)
                        waiting = (fd, offset + n - 1)
                except OSError:  # advice only: a file that changed ends the advice for it
                    continue
                finally:
                    if waiting is None or waiting[0] != fd:
                        os.close(fd)
        finally:
            if waiting is not None:
                os.close(waiting[0])


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


__all__ = ["ReadAhead", "auto_window", "STEP_BYTES", "WINDOW_BYTES"]
