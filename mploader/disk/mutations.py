"""The mutation hook: one function called before every change a :class:`~mploader.disk.real.RealDisk` makes.

Every byte a load changes goes through a RealDisk, so this is the one place where the changes of a load can
be counted and where a test can stop the process between two of them.  ``tests/crash_points.py`` installs a
hook that SIGKILLs the process at the k-th point, reruns the load and compares every byte with an
uninterrupted load (docs/crash-safety.md).  A load never installs one; without a hook a point costs one test
of a global.

A point is named by the operation about to run and the path it touches:

``mkdir``           create a data dir                ``rmdir``          remove an empty marker directory
``write``           open (create) a file to write    ``write:data``     the file was just created, still empty
``write:rest``      half of the bytes are written    ``write:cut``      every byte written, the longer old tail next
``fsync``           fsync of a written file          ``set-size``       truncate or zero-extend (``set-size:data``:
``rename``          replace one name by another                         the file was just created, still empty)
``delete``          unlink a file                    ``sync-dir``       fsync of a directory
``set-mtime``       change a modification time       ``syncfs``         syncfs of a file system

The ``:``-points exist only where the file's state between the two system calls differs from both ends
(a created file, a torn write, a tail not yet cut): a SIGKILL can land there.
"""

from __future__ import annotations

from collections.abc import Callable

MutationHook = Callable[[str, str], None]

_hook: MutationHook | None = None


def set_mutation_hook(hook: MutationHook | None) -> MutationHook | None:
    """Install ``hook`` (None: remove it); returns the one it replaces.  Process-wide: every RealDisk calls it."""
    global _hook
    previous, _hook = _hook, hook
    return previous


def hooked() -> bool:
    """Whether a hook is installed (the disk then splits writes so that their torn states become points)."""
    return _hook is not None


def point(op: str, path: str) -> None:
    """About to ``op`` ``path``: tell the hook, if any."""
    if _hook is not None:
        _hook(op, path)


__all__ = ["MutationHook", "hooked", "point", "set_mutation_hook"]
