"""What a killed load leaves in ``/dev/shm``, and its removal by the next one.

A pool load (:mod:`mploader.engine.pool`) names its shared-memory blocks after itself::

    mploader-<pid>-<start>-<load>          the load's owner marker (empty), flock()ed by the load while it runs
    mploader-<pid>-<start>-<load>-<seq>    a block (one per chunk in flight)

``<pid>`` and ``<start>`` (the process's start time, in clock ticks after boot: ``/proc/<pid>/stat`` field 22,
so that a pid used again by another process is not taken for the owner) say which process made them, ``<load>``
which of its loads (a count per process).  The marker (:func:`claim`) is created before the load's first block
and its loky pools, and removed after its last block and after its pools ended (:func:`release`).  Neither the
marker nor the blocks (:mod:`mploader.engine.block`) are registered with a resource tracker; loky registers its
semaphores with its own, so the marker, which stays (an empty file), also tells the next load which process's
semaphores it may remove (a kill can land between loky's creating a semaphore and registering it).

A load that ends in any way a process can (return, exception, Ctrl-C) removes everything it made.  A process
killed outright (``kill -9``, the OOM killer) cannot: when only the parent dies, its workers exit
(:func:`mploader.engine.worker.exit_with_parent`) and loky's resource tracker then sees its pipe close and removes
the semaphores registered with it, but the marker and the blocks stay; when the whole process tree dies at once
(a process group or a container killed) the semaphores stay too.  :func:`remove_orphaned_blocks`, which every
pool load (and ``mploader cleanup``) calls when it starts, removes then what such a load left:

* every ``mploader-<pid>-<start>-<load>[-<seq>]`` entry whose process is gone (no process ``<pid>``, a zombie,
  or a process ``<pid>`` that started at another time), unless its marker is still locked: a live load in
  another pid namespace that shares this ``/dev/shm`` (a container with ``--ipc=host``) looks dead from here but
  holds its marker's lock;
* loky's named semaphores (``sem.loky-<pid>-*``, named after the process that created the pool) of such a dead
  load, when no process ``<pid>`` runs at all (a pid used again may be another loky user's).

Blocks of Python's default naming (``psm_*``, made by mploader before this naming, or by any other program)
cannot be attributed to a process and are never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import os
import re
import threading
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

SHM_DIR = "/dev/shm"
PREFIX = "mploader-"
_NAME = re.compile(r"mploader-(\d+)-(\d+)-(\d+)(?:-(\d+))?")
_LOKY_SEMAPHORE = re.compile(r"sem\.loky-(\d+)-.+")
_loads = itertools.count(1)


@dataclass
class Removed:
    """What :func:`remove_orphaned_blocks` removed (names in ``/dev/shm``) and what it left to a live owner."""

    blocks: list[str] = field(default_factory=list)  # markers and blocks of dead loads
    semaphores: list[str] = field(default_factory=list)  # loky's sem.loky-<pid>-* of those loads
    locked: list[str] = field(default_factory=list)  # markers of loads that look dead but hold their lock


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), 0 where that cannot be read (no ``/proc``), or
    None if no such process runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:  # no /proc (not Linux) or not readable: fall back to the pid alone
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return 0
    fields = stat[stat.rindex(b")") + 2:].split()  # after "pid (comm) ": state is field 3, starttime field 22
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def load_prefix() -> str:
    """A name for a new load of this process: ``mploader-<pid>-<start>-<load>`` (its owner marker's name; its
    blocks add ``-<seq>``)."""
    pid = os.getpid()
    return f"{PREFIX}{pid}-{process_start(pid) or 0}-{next(_loads)}"


# the descriptors of this process's owner markers while their loads run, and of its blocks while one is created,
# written or read (mploader.engine.block): a forked child (a pool worker, see mploader.engine.worker_start) closes
# its copies, or an flock() it shares would keep a killed load's marker locked, and its blocks kept from the next
# load's cleanup, until the last worker had exited too (and a block's descriptor would keep its pages after the
# unlink).  A fork waits for an open or a close in progress (_fork_guard), so that no descriptor is ever open and not
# yet in the set, or out of it and not yet closed, at the moment of a fork.
_held: set[int] = set()
_fork_guard = threading.Lock()


def open_held(path: str, flags: int, mode: int = 0o600) -> int:
    """``os.open`` a descriptor that no child forked while it is open keeps (close it with :func:`close_held`)."""
    with _fork_guard:
        fd = os.open(path, flags | os.O_CLOEXEC, mode)
        _held.add(fd)
    return fd


def close_held(fd: int) -> None:
    with _fork_guard:
        _held.discard(fd)
        os.close(fd)


def _close_held_in_child() -> None:
    for fd in list(_held):
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()
    _fork_guard.release()


os.register_at_fork(before=_fork_guard.acquire, after_in_parent=_fork_guard.release,
                    after_in_child=_close_held_in_child)


def claim(name: str, shm_dir: str = SHM_DIR) -> int | None:
    """Create the owner marker ``name`` of a load of this process and lock it; returns its descriptor for
    :func:`release`, or None if it could not be created (the load goes on without: its blocks' names still say
    whose they are)."""
    path = os.path.join(shm_dir, name)
    try:
        fd = open_held(path, os.O_CREAT | os.O_EXCL | os.O_RDWR)
    except OSError as e:
        log.info("no owner marker %s for this load's shared memory (%s)", path, e)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:  # pragma: no cover - a file system without flock
        log.info("could not lock the owner marker %s (%s)", path, e)
    return fd


def release(name: str, fd: int, shm_dir: str = SHM_DIR) -> None:
    """Remove the owner marker :func:`claim` made (still locked while it is removed)."""
    try:
        _unlink(os.path.join(shm_dir, name))
    finally:
        close_held(fd)


def _owner_gone(pid: int, start: int) -> bool:
    now = process_start(pid)
    return now is None or (now != 0 and start != 0 and now != start)


def _marker_locked(path: str) -> bool:
    """Whether a live process holds the lock of marker ``path`` (False if there is no such file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the lock, if it was taken
    return False


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:  # another cleaner, or the dead load's resource tracker, was first
        return False
    return True


def remove_orphaned_blocks(shm_dir: str = SHM_DIR) -> Removed:
    """Remove from ``shm_dir`` the shared-memory blocks and markers of mploader loads whose process is gone, and
    the loky semaphores of those processes (see the module's docstring).  Never touches a live load's; an error
    on one entry is logged and the others are still done.  Nothing to do where ``shm_dir`` does not exist."""
    removed = Removed()
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return removed
    loads: dict[tuple[int, int, int], list[str]] = {}
    semaphores: dict[int, list[str]] = {}
    for name in names:
        if m := _NAME.fullmatch(name):
            loads.setdefault((int(m[1]), int(m[2]), int(m[3])), []).append(name)
        elif m := _LOKY_SEMAPHORE.fullmatch(name):
            semaphores.setdefault(int(m[1]), []).append(name)
    dead_pids: set[int] = set()
    for (pid, start, load), entries in sorted(loads.items()):
        if not _owner_gone(pid, start):
            continue
        marker = f"{PREFIX}{pid}-{start}-{load}"
        try:
            if _marker_locked(os.path.join(shm_dir, marker)):
                removed.locked.append(marker)
                continue
            # the blocks first, the marker last: a cleaner killed in between leaves the marker to the next one
            for name in sorted(entries, key=lambda n: n == marker):
                if _unlink(os.path.join(shm_dir, name)):
                    removed.blocks.append(name)
        except OSError as e:
            log.warning("could not remove the shared memory of a dead load (%s): %s", marker, e)
            continue
        if process_start(pid) is None:
            dead_pids.add(pid)
    for pid in sorted(dead_pids):
        for name in semaphores.get(pid, ()):
            try:
                if _unlink(os.path.join(shm_dir, name)):
                    removed.semaphores.append(name)
            except OSError as e:
                log.warning("could not remove the semaphore %s of a dead load: %s", name, e)
    if removed.blocks or removed.semaphores:
        log.info("removed %d shared-memory blocks and %d semaphores left by killed loads", len(removed.blocks),
                 len(removed.semaphores))
    return removed


__all__ = ["PREFIX", "SHM_DIR", "Removed", "claim", "close_held", "load_prefix", "open_held", "process_start",
           "release", "remove_orphaned_blocks"]
