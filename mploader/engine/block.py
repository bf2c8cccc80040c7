"""A scan's shared-memory block: a sparse file in /dev/shm that a worker writes a scan's arrays into and the
parent reads back (the pool engine's transport: :mod:`mploader.engine.pool`, :mod:`mploader.engine.worker`).

Neither side maps it:

* the worker writes with ``pwritev``: the kernel copies into the block's pages without a page fault for each,
  and a page tmpfs cannot give fails the write with ``ENOSPC`` (a store through a mapping would kill the worker
  with SIGBUS, so each block had to be ``posix_fallocate``\\ d first);
* the parent reads with ``preadv`` straight into the arrays it keeps, and unlinks the block: its pages go back
  at once, as nothing maps them.

On the 2 GB load these halved the cost of handing the tables over (perf/README.md, "Tables written, not mapped").
No descriptor stays open between calls: a worker forked meanwhile (``mploader.engine.worker_start``) would hold
the block's pages in /dev/shm after the unlink, until it exits; one open for the moment of a call is closed in a
child forked during it (:func:`mploader.engine.cleanup.open_held`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from mploader.engine.cleanup import SHM_DIR, close_held, open_held


class Block:
    """The block ``name`` in ``shm_dir``: :meth:`create` makes one, ``Block(name)`` names one to write or read."""

    __slots__ = ("name", "path")

    def __init__(self, name: str, shm_dir: str = SHM_DIR):
        self.name = name
        self.path = os.path.join(shm_dir, name)

    @classmethod
    def create(cls, name: str, size: int, shm_dir: str = SHM_DIR) -> Block:
        """A new block of ``size`` bytes, sparse: only the bytes written take memory."""
        block = cls(name, shm_dir)
        with _opened(block.path, os.O_RDWR | os.O_CREAT | os.O_EXCL) as fd:
            try:
                os.ftruncate(fd, size)
            except OSError:  # no block: none left behind either
                block.unlink()
                raise
        return block

    def write(self, arrays: Sequence[np.ndarray]) -> None:
        """Write ``arrays`` packed from byte 0 (an ``OSError`` of ``ENOSPC`` when /dev/shm has no room)."""
        with _opened(self.path, os.O_WRONLY) as fd:
            _transfer(os.pwritev, fd, arrays, self.path)

    def read(self, arrays: Sequence[np.ndarray]) -> None:
        """Fill ``arrays`` with the bytes packed from byte 0 (what :meth:`write` wrote)."""
        with _opened(self.path, os.O_RDONLY) as fd:
            _transfer(os.preadv, fd, arrays, self.path)

    def unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


@contextlib.contextmanager
def _opened(path: str, flags: int) -> Iterator[int]:
    fd = open_held(path, flags)  # a child forked meanwhile closes it (mploader.engine.cleanup.open_held)
    try:
        yield fd
    finally:
        close_held(fd)


def _transfer(call: Callable[[int, list[memoryview], int], int], fd: int, arrays: Sequence[np.ndarray],
              path: str) -> None:
    """``call`` (``os.preadv`` or ``os.pwritev``) over the arrays' bytes until all are done: one call, unless the
    kernel does less (over 2 GiB at once, a signal)."""
    views = [a.view(np.uint8).data for a in arrays if a.nbytes]
    offset = 0
    while views:
        n = call(fd, views, offset)
        if n == 0:  # only a read can: the block is shorter than the arrays (it never is: the writer wrote them)
            raise EOFError(f"{path}: {sum(v.nbytes for v in views)} bytes missing at byte {offset}")
        offset += n
        while views and n >= views[0].nbytes:
            n -= views[0].nbytes
            del views[0]
        if views:
            views[0] = views[0][n:]


__all__ = ["Block"]
