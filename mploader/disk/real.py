"""The disk of a real load: the files read as they are on disk, every change made to them at once."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Concatenate, ParamSpec, TypeVar

from mploader.disk.base import Disk
from mploader.disk.mutations import NO_HOOK, MutationHook
from mploader.disk.reader import FileSystemReader, lock_or_fail
from mploader.errors import EnvironmentFailure, StartupFailedError, hard_linked
from mploader.format.files import open_regular

P = ParamSpec("P")
R = TypeVar("R")


def _timed(change: Callable[Concatenate[RealDisk, P], R]) -> Callable[Concatenate[RealDisk, P], R]:
    """Count the time of a change in ``change_seconds`` (how much of Phase 2 the file system takes), and name the
    changed file in an error that names none."""
    @functools.wraps(change)
    def timed(self: RealDisk, /, *args: P.args, **kwargs: P.kwargs) -> R:
        t0 = time.perf_counter()
        try:
            return change(self, *args, **kwargs)
        except OSError as e:
            if e.filename is not None or not args:
                raise
            raise OSError(e.errno, e.strerror, args[0]) from e  # a write's ENOSPC names no file: name it
        finally:
            spent = time.perf_counter() - t0
            with self._clock_lock:
                self.change_seconds += spent
    return timed


class RealDisk(FileSystemReader, Disk):
    """The reader of the files as they are (:class:`FileSystemReader`) and the changes, made at once; ``mutations``
    is told of each change before it is made (:mod:`mploader.disk.mutations`)."""

    def __init__(self, mutations: MutationHook = NO_HOOK) -> None:
        super().__init__()
        self._mutations = mutations
        self._changed: set[str] = set()  # directories in which this disk created, wrote, renamed or deleted
        self._unsynced: dict[int, str] = {}  # st_dev -> a directory on it written to with durable=True
        self._unsynced_lock = threading.Lock()  # loading threads of several data dirs write at once
        self._clock_lock = threading.Lock()
        self.change_seconds = 0.0

    def changed_dirs(self) -> list[str]:
        return sorted(self._changed)

    def changed(self, directory: str) -> bool:
        return directory in self._changed  # a Spark task asks after each partition's load

    def changed_elsewhere(self, directories: Iterable[str]) -> None:
        self._changed.update(directories)

    def _listed(self, path: str, present: bool, changed: bool = True) -> None:
        """Keep a kept listing of ``path``'s directory true to a change just made (and note the change)."""
        if changed:
            self._changed.add(os.path.dirname(path))
        self.note_change(path, present)

    # ---- the data dir itself -----------------------------------------------------------

    @_timed
    def make_data_dir(self, directory: str) -> None:
        self._mutations.point("mkdir", directory)
        os.makedirs(directory)
        self._changed.add(directory)

    def lock(self, lock_path: str) -> int | None:
        # new FileLock(new File(dir, ".lock")) opens it with CREATE (content kept); the file stays while the
        # broker runs (only a clean LogManager.shutdown or a dir failure deletes it)
        if not os.path.lexists(lock_path):
            self.write(lock_path, b"")
        # a link (a dangling one would turn the lock off) or a special file is refused: the dir goes offline
        fd, _ = open_regular(lock_path, os.O_RDWR)
        return lock_or_fail(fd, fcntl.LOCK_EX, lock_path)

    @_timed
    def remove_empty_dir(self, path: str) -> None:
        self._mutations.point("rmdir", path)
        os.rmdir(path)
        self._changed.add(os.path.dirname(path))

    # ---- writing -----------------------------------------------------------------------

    @_timed
    def write(self, path: str, data: bytes, *, fsync: bool = False, durable: bool = False,
              truncate: bool = True, exclusive: bool = False) -> None:
        # no O_TRUNC: ext4 flushes a file truncated to 0 and rewritten when it is closed (auto_da_alloc),
        # which made every rewrite of an existing index cost a disk write; the bytes are the same
        hook = self._mutations
        hook.point("write", path)
        created = hook.torn and not os.path.lexists(path)
        fd = _open_for_writing(path, exclusive)
        self._listed(path, True)  # there now, whatever happens to the write (a listing after a failure shows it)
        try:
            if created:
                hook.point("write:data", path)
            _write_all(fd, memoryview(data), path, hook)
            if truncate:
                if hook.torn and os.fstat(fd).st_size > len(data):
                    hook.point("write:cut", path)
                os.ftruncate(fd, len(data))
            if fsync:
                hook.point("fsync", path)
                os.fsync(fd)
            elif durable:
                self._note_unsynced(os.fstat(fd).st_dev, path)
        finally:
            os.close(fd)

    def _note_unsynced(self, device: int, path: str) -> None:
        if device not in self._unsynced:
            with self._unsynced_lock:
                self._unsynced.setdefault(device, os.path.dirname(path) or ".")

    def flush(self) -> None:
        with self._unsynced_lock:
            unsynced, self._unsynced = self._unsynced, {}
        for directory in unsynced.values():
            try:
                self._mutations.point("syncfs", directory)
                _syncfs(directory)
            except OSError as e:
                if e.filename is not None:
                    raise
                raise OSError(e.errno, e.strerror, directory) from e  # the file system's, named by a directory on it

    def sync(self, directory: str) -> None:
        self._mutations.point("syncfs", directory)
        _syncfs(directory)

    def write_atomically(self, path: str, data: bytes) -> None:
        tmp = path + ".tmp"
        self.delete(tmp)  # a leftover (or a hard link planted there): only its name goes, then a file of our own
        self.write(tmp, data, fsync=True, exclusive=True)
        self.rename(tmp, path)
        self.sync_dir(os.path.dirname(path))

    @_timed
    def set_size(self, path: str, size: int) -> None:
        hook = self._mutations
        hook.point("set-size", path)
        created = hook.torn and size > 0 and not os.path.lexists(path)
        fd = _open_for_writing(path)
        self._listed(path, True)
        try:
            if created:
                hook.point("set-size:data", path)
            os.ftruncate(fd, size)
        finally:
            os.close(fd)

    @_timed
    def rename(self, src: str, dst: str) -> None:
        self._mutations.point("rename", dst)
        os.replace(src, dst)
        self._listed(src, False)
        self._listed(dst, True)

    @_timed
    def rename_dir(self, src: str, dst: str) -> None:
        if os.path.lexists(dst):  # never over another directory (os.rename would replace an empty one)
            raise FileExistsError(17, "cannot rename a log directory over an existing entry", dst)
        self._mutations.point("rename-dir", dst)
        os.rename(src, dst)
        self.release(src)

        def moved(path: str) -> str:  # what this disk noted under the old name, now under the new one
            return dst + path[len(src):] if path == src or path.startswith(src + os.sep) else path

        with self._unsynced_lock:
            self._unsynced = {dev: moved(d) for dev, d in self._unsynced.items()}
        parent = os.path.dirname(dst)
        self._changed = {moved(d) for d in self._changed} | {parent, dst}
        self.sync_dir(parent)

    @_timed
    def set_mtime(self, path: str, mtime_ns: int) -> None:
        st = os.stat(path)
        self._mutations.point("set-mtime", path)
        os.utime(path, ns=(st.st_atime_ns, mtime_ns))
        self._changed.add(os.path.dirname(path))

    @_timed
    def sync_dir(self, directory: str) -> None:
        self._mutations.point("sync-dir", directory)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    @_timed
    def delete(self, path: str) -> bool:
        if not self.exists(path):
            return False
        self._mutations.point("delete", path)
        try:
            os.remove(path)
        except FileNotFoundError:
            self._listed(path, False, changed=False)
            return False
        self._listed(path, False)
        return True


def _open_for_writing(path: str, exclusive: bool = False) -> int:
    """Open (creating; ``exclusive``: only creating) ``path`` for writing: a regular file with one name.  Never
    through a symbolic link: the loader refuses links to files when it lists a partition; a dangling one is skipped
    (as Kafka's isFile skips it), and a write by its name would create its target outside the data dir.  That write
    is refused as the listed links are, failing start-up.  A hard link (the same file under a name outside the data
    dir, perhaps) or a special file is refused before a byte is written (the preflight refuses them first)."""
    try:
        fd, st = open_regular(path, os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else 0))
    except EnvironmentFailure as e:
        if e.errno != errno.ELOOP:
            raise
        raise StartupFailedError(path, "KafkaException", "a file mploader writes is a dangling symbolic link; "
                                 "mploader does not follow links out of a data dir: remove the link") from None
    if st.st_nlink > 1:
        os.close(fd)
        raise hard_linked(path, st.st_nlink)
    return fd


def _write_all(fd: int, view: memoryview, path: str, hook: MutationHook) -> None:
    """Write every byte at the file position; for a hook of torn states, in two halves with a point between them
    (a SIGKILL can tear a large write: the state the rerun must cope with)."""
    if hook.torn and len(view) > 1:
        half = len(view) // 2
        _write_fully(fd, view[:half])
        hook.point("write:rest", path)
        view = view[half:]
    _write_fully(fd, view)


def _write_fully(fd: int, view: memoryview) -> None:
    while view:
        n = os.write(fd, view)
        view = view[n:]


_libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols, libc's among them (find_library runs ldconfig)


def _syncfs(directory: str) -> None:
    """syncfs(2) of the file system holding ``directory`` (os.sync() where there is no syncfs)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        if not hasattr(_libc, "syncfs"):  # pragma: no cover - not Linux
            os.sync()
        elif _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), directory)
    finally:
        os.close(fd)


__all__ = ["RealDisk"]
