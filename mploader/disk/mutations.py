"""The mutation hook: the collaborator a :class:`~mploader.disk.real.RealDisk` tells of every change before it makes it.

Every byte a load changes goes through a RealDisk, so this is the one place where the changes of a load can
be counted and where a test can stop the process between two of them.  A disk is given its hook when it is
made (``RealDisk(mutations=...)``, ``load_logs(..., mutations=...)``, which hands it to every disk of the load,
a worker process's included); a load's own is :data:`NO_HOOK`, told and doing nothing.  ``tests/crash_points.py``
gives a load a hook that SIGKILLs the process at the k-th point, reruns the load and compares every byte with an
uninterrupted load (docs/crash-safety.md).

A point is named by the operation about to run and the path it touches:

``mkdir``           create a data dir                ``rmdir``          remove an empty marker directory
``write``           open (create) a file to write    ``write:data``     the file was just created, still empty
``write:rest``      half of the bytes are written    ``write:cut``      every byte written, the longer old tail next
``fsync``           fsync of a written file          ``set-size``       truncate or zero-extend (``set-size:data``:
``rename``          replace one name by another                         the file was just created, still empty)
``delete``          unlink a file                    ``sync-dir``       fsync of a directory
``set-mtime``       change a modification time       ``syncfs``         syncfs of a file system

The ``:``-points exist only where the file's state between the two system calls differs from both ends
(a created file, a torn write, a tail not yet cut): a SIGKILL can land there.  A disk makes them only for a
hook that asks for them (:attr:`MutationHook.torn`): finding them costs a ``stat`` a write, and a write in two
halves.
"""

from __future__ import annotations

from collections.abc import Callable


class MutationHook:
    """Told of each change a disk is about to make; this class is told and does nothing (:data:`NO_HOOK`)."""

    #: whether the disk also stops at the torn states within one change (the ``:``-points)
    torn = False

    def point(self, op: str, path: str) -> None:
        """About to ``op`` ``path``: an exception raised here is the change's own error (nothing was changed)."""


class CallingHook(MutationHook):
    """A hook that calls ``call(op, path)`` at every point, the torn states included (the kill-point and
    injected-error tests').  Picklable where ``call`` is, for a load whose workers are spawned."""

    torn = True

    def __init__(self, call: Callable[[str, str], None]) -> None:
        self.call = call

    def point(self, op: str, path: str) -> None:
        self.call(op, path)


#: every load's hook unless it is given another: no point is told, no write split
NO_HOOK = MutationHook()

__all__ = ["NO_HOOK", "CallingHook", "MutationHook"]
