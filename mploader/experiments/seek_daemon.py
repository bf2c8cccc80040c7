"""A disk image served through the disk model (:mod:`.disk_model`) by a FUSE file system:
``python -m mploader.experiments.seek_daemon --owner PID --profile hdd|ssd --image FILE --mount DIR --stats FILE``.

The mount shows one file, ``disk.img``, the image's bytes; a loop device is made on it (:func:`.places.seek_loop`).
Every read and write of it is a request to the modelled disk: it waits for a channel (one on a disk with a
head: one request at a time), is served from the image, and then sleeps until the model's service time has
passed since it started (so the time the image's own read took counts as part of it).  Requests that follow
each other back to back are scheduled from the previous one's end on the monotonic clock, so a sleep that
wakes a little late is not charged again to the next request.  The loop device reads the file with O_DIRECT,
so every read reaches the daemon (no page cache of the FUSE file in between).

Figures of the requests served (count, bytes, sizes, seeks, modelled and real time, the daemon's CPU) are
written as JSON to ``--stats`` every half second and on exit.  ``--owner`` names the experiment that started
it: ``mploader cleanup`` ends a daemon whose owner is gone (:mod:`.leftovers`).  The process is stopped by
unmounting its file system (or SIGTERM, which unmounts it).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import resource
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mploader.experiments.disk_model import PROFILES, DiskProfile, positioning_s, transfer_s

FILE_NAME = "disk.img"
MODULE = "mploader.experiments.seek_daemon"  # the process's command line names it: how cleanup finds one
SLACK_S = 0.001  # a request arriving this soon after the last one's end is taken as queued behind it
STATS_EVERY_S = 0.5
PIECES_S = 0.002  # requests arriving this close together are taken as the pieces of one read
START_WAIT_S = 20.0
STOP_WAIT_S = 10.0
T = TypeVar("T")


@dataclass(slots=True)
class Figures:
    requests: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    positioned: int = 0  # requests that paid a seek, a rotation or an access latency
    modelled_s: float = 0.0  # the sum of the model's service times
    io_s: float = 0.0  # the sum of the image's own read/write times
    late: int = 0  # requests whose image read/write alone took longer than the model allowed
    sizes: Counter[int] = field(default_factory=Counter)  # request bytes rounded up to a power of two

    def to_json(self) -> dict[str, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"requests": self.requests, "read_bytes": self.read_bytes, "write_bytes": self.write_bytes,
                "positioned": self.positioned, "modelled_s": round(self.modelled_s, 4), "io_s": round(self.io_s, 4),
                "late": self.late, "sizes": {str(k): v for k, v in sorted(self.sizes.items())},
                "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}


class ModelledDisk:
    """The image behind the model: ``serve`` runs one request's I/O and holds it for the model's time."""

    def __init__(self, profile: DiskProfile, pieces_s: float = PIECES_S) -> None:
        self.profile = profile
        self.pieces_s = pieces_s
        self.channels = threading.BoundedSemaphore(profile.channels)
        self.turn = threading.Condition()  # one transfer at a time: the head, or the headless device's bus
        self.waiting: list[tuple[float, int]] = []  # (arrival, offset) of the requests waiting, in arrival order
        self.busy = False
        self.head: int | None = None
        self.free_at = 0.0
        self.figures = Figures()
        self.counting = threading.Lock()  # the stats writer reads the figures while requests add to them

    def snapshot(self) -> dict[str, Any]:
        with self.counting:
            return self.figures.to_json()

    def serve(self, offset: int, size: int, io: Callable[[], T], write: bool = False) -> T:
        p = self.profile
        if p.rpm is None:  # a headless device's access latencies overlap on its channels
            with self.channels:
                time.sleep(p.access_s)
        with self._turn(offset):
            now = time.monotonic()
            start = self.free_at if now - self.free_at < SLACK_S else now
            positioning = positioning_s(p, self.head, offset) if p.rpm is not None else 0.0
            deadline = start + positioning + transfer_s(p, offset, size)
            self.head = offset + size
            result = io()
            done = time.monotonic()
            if done < deadline:
                time.sleep(deadline - done)
            self.free_at = max(deadline, done)
            with self.counting:
                self._count(size, write, deadline - start, done - now, positioning > 0 or p.rpm is None)
        return result

    @contextlib.contextmanager
    def _turn(self, offset: int) -> Iterator[None]:
        """The request's turn: the longest waiting, unless one that continues where the head is arrived with it
        (within ``pieces_s``: the kernel sends a large read in pieces, in parallel, and a disk takes them in
        order from its queue); a later continuation does not overtake, or one reader would starve the others."""
        me = (time.monotonic(), offset)
        with self.turn:
            self.waiting.append(me)
            while self.busy or self._next() != me:
                self.turn.wait()
            self.waiting.remove(me)
            self.busy = True
        try:
            yield
        finally:
            with self.turn:
                self.busy = False
                self.turn.notify_all()

    def _next(self) -> tuple[float, int]:
        oldest = self.waiting[0]
        pieces = (w for w in self.waiting if w[1] == self.head and w[0] - oldest[0] <= self.pieces_s)
        return next(pieces, oldest)

    def _count(self, size: int, write: bool, modelled: float, io: float, positioned: bool) -> None:
        f = self.figures
        f.requests += 1
        if write:
            f.write_bytes += size
        else:
            f.read_bytes += size
        f.positioned += positioned
        f.modelled_s += modelled
        f.io_s += io
        f.late += io > modelled
        f.sizes[1 << max(size - 1, 0).bit_length()] += 1


def image_operations(image: Path, profile: DiskProfile) -> Any:
    """The FUSE operations serving ``image`` (mfusepy is imported here: only the daemon needs it)."""
    import mfusepy

    class ServedImage(mfusepy.Operations):  # type: ignore[misc]
        use_ns = True

        def __init__(self) -> None:
            self.fd = os.open(image, os.O_RDWR)
            self.size = os.fstat(self.fd).st_size
            self.disk = ModelledDisk(profile.with_stroke(self.size))
            self.started = time.time_ns()

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            times = {"st_atime": self.started, "st_mtime": self.started, "st_ctime": self.started}
            if path == "/":
                return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, **times}
            if path == "/" + FILE_NAME:
                return {"st_mode": stat.S_IFREG | 0o600, "st_nlink": 1, "st_size": self.size, **times}
            raise mfusepy.FuseOSError(errno.ENOENT)

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", FILE_NAME]

        def open(self, path: str, flags: int) -> int:
            return 0

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            size = max(min(size, self.size - offset), 0)
            return self.disk.serve(offset, size, lambda: os.pread(self.fd, size, offset))

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            if offset + len(data) > self.size:
                raise mfusepy.FuseOSError(errno.ENOSPC)
            return self.disk.serve(offset, len(data), lambda: os.pwrite(self.fd, data, offset), write=True)

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            if length != self.size:  # a disk does not change its size
                raise mfusepy.FuseOSError(errno.EPERM)
            return 0

        def flush(self, path: str, fh: int) -> int:
            return 0  # the image is scratch: its durability on the host's disk does not matter

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            return 0

    return mfusepy, ServedImage()


@contextlib.contextmanager
def stats_writer(path: Path, figures: Callable[[], dict[str, Any]]) -> Iterator[None]:
    """Writes the figures to ``path`` every half second while inside, and once more on leaving."""
    stop = threading.Event()

    def write() -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(figures()))
        os.replace(tmp, path)

    def loop() -> None:
        while not stop.wait(STATS_EVERY_S):
            write()

    t = threading.Thread(target=loop, name="stats", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        write()


class DaemonFailed(OSError):
    """The daemon did not come up (its stderr is in the message)."""


@contextlib.contextmanager
def served_image(image: Path, profile: str, mount: Path, owner: int) -> Iterator[Path]:
    """Serves ``image`` through the model at ``mount`` (an empty directory) while inside; yields the served file.

    The daemon runs in a session of its own, so that a Ctrl-C of the experiment's terminal does not end it while
    the loop device above it is still in use; it is ended by unmounting its file system on leaving."""
    stats, log = stats_path(image), image.with_name(image.name + ".log")
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", MODULE, "--owner", str(owner), "--profile", profile,
                                 "--image", str(image), "--mount", str(mount), "--stats", str(stats)],
                                stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
    try:
        _wait_mounted(proc, mount, log)
        yield mount / FILE_NAME
    finally:
        if os.path.ismount(mount):
            subprocess.run(["umount", str(mount)], capture_output=True)
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()  # SIGKILL of a FUSE daemon aborts its connection: the mount answers ENOTCONN, then goes
            proc.wait()
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        stats.unlink(missing_ok=True)
        log.unlink(missing_ok=True)


def stats_path(image: Path) -> Path:
    return image.with_name(image.name + ".stats.json")


def read_figures(image: Path) -> dict[str, Any]:
    """The daemon's last figures (see :class:`Figures`), written at most half a second ago."""
    return dict(json.loads(stats_path(image).read_text()))


def _wait_mounted(proc: subprocess.Popen[bytes], mount: Path, log: Path) -> None:
    deadline = time.monotonic() + START_WAIT_S
    while not os.path.ismount(mount):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise DaemonFailed(f"the disk model's FUSE daemon did not mount {mount}: "
                               f"{log.read_text(errors='replace').strip()[-2000:] or 'no message'}")
        time.sleep(0.02)


def main(argv: list[str]) -> int:
    a = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    a.add_argument("--owner", type=int, required=True, help="the experiment's pid (for mploader cleanup)")
    a.add_argument("--profile", choices=sorted(PROFILES), required=True)
    a.add_argument("--image", type=Path, required=True)
    a.add_argument("--mount", type=Path, required=True)
    a.add_argument("--stats", type=Path, required=True)
    args = a.parse_args(argv)
    args.stats = args.stats.absolute()  # libfuse changes to / before serving
    mfusepy, ops = image_operations(args.image, PROFILES[args.profile])
    with stats_writer(args.stats, ops.disk.snapshot):
        # foreground: the experiment holds the process; allow_other: the loop device's I/O is the kernel's
        mfusepy.FUSE(ops, str(args.mount), foreground=True, allow_other=True, fsname=f"mploader-exp-{args.owner}",
                     subtype="seekdisk")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
