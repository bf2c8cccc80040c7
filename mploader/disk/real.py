"""The disk of a real load: every change hits the file system at once."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import mmap
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from typing import Concatenate, ParamSpec, TypeVar

from mploader.disk.base import Disk
from mploader.disk.mutations import hooked, point
from mploader.errors import EnvironmentFailure, StartupFailedError, hard_linked
from mploader.format.files import open_regular, read_file, read_to, sparse
from mploader.scan import ScanSource, SegmentScan, SegmentTask

# a file up to this size is read whole by view(), a bigger one mapped: an index of a few entries took 4.5 us read
# against 22 us mapped, a 95 KB .log 9 against 31 us; a lookup touches a few pages of a mapping, so past ~256 KiB
# (~25 us of copying) the mapping is the cheaper (perf/README.md, "Phase 2's questions to the file system")
VIEW_READ_BELOW = 256 << 10

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


class RealDisk(Disk):
    def __init__(self) -> None:
        self._listings: dict[str, set[str]] = {}  # directory -> its files, kept up to date by this disk's changes
        self._links: dict[str, set[str]] = {}
        self._others: dict[str, dict[str, int]] = {}  # directory -> its entries neither files nor links: name -> mode
        # path -> size of a file of a kept listing, asked once and forgotten at this disk's next change of the file
        # (a segment's .log was stat-ed ~5 times in its recovery: perf/README.md, "Sizes kept"); by path: a look-up
        # needs no split of it
        self._sizes: dict[str, int] = {}
        self._sized: dict[str, list[str]] = {}  # directory -> the paths in _sizes, for release()
        self._changed: set[str] = set()  # directories in which this disk created, wrote, renamed or deleted
        self._unsynced: dict[int, str] = {}  # st_dev -> a directory on it written to with durable=True
        self._unsynced_lock = threading.Lock()  # loading threads of several data dirs write at once
        self._clock_lock = threading.Lock()
        self.change_seconds = 0.0

    # ---- reading -----------------------------------------------------------------------

    def list_files(self, directory: str) -> list[str]:
        listing = self._listings.get(directory)
        if listing is None:
            listing = set()
            links = set()
            others: dict[str, int] = {}
            with os.scandir(directory) as it:
                for e in it:
                    if not e.is_file():  # follows links, as isFile does
                        if not e.is_symlink():  # a directory or a special file: the environment's check refuses some
                            others[e.name] = stat.S_IFDIR if e.is_dir() else e.stat(follow_symlinks=False).st_mode
                        continue
                    listing.add(e.name)
                    if e.is_symlink():  # a link to a file: the loader's to refuse
                        links.add(e.name)
            self._listings[directory] = listing
            self._links[directory] = links
            self._others[directory] = others
        return sorted(listing)  # Java's order is the file system's; sorted, every run (and a dry run) reports alike

    def kept_listing(self, directory: str) -> list[str] | None:
        return self.list_files(directory) if directory in self._listings else None

    def symlinks(self, directory: str) -> set[str]:
        return self._links.get(directory, set())

    def other_entries(self, directory: str) -> dict[str, int]:
        return self._others.get(directory, {})

    def release(self, directory: str) -> None:
        self._listings.pop(directory, None)
        self._links.pop(directory, None)
        self._others.pop(directory, None)
        for path in self._sized.pop(directory, ()):
            self._sizes.pop(path, None)

    def changed_dirs(self) -> list[str]:
        return sorted(self._changed)

    def changed_elsewhere(self, directories: Iterable[str]) -> None:
        self._changed.update(directories)

    def _listed(self, path: str, present: bool, changed: bool = True) -> None:
        """Keep a cached listing of ``path``'s directory true to a change just made (and note the change)."""
        directory, name = os.path.split(path)
        if changed:
            self._changed.add(directory)
        self._sizes.pop(path, None)
        listing = self._listings.get(directory)
        if listing is not None:
            if present:
                listing.add(name)
            else:
                listing.discard(name)
                self._links.get(directory, set()).discard(name)

    def exists(self, path: str) -> bool:
        directory, name = os.path.split(path)
        listing = self._listings.get(directory)
        # kept true by every change (list_files): a stat saved, ~8 us for a missing file; a link is asked of the
        # file system, as its target may have moved since
        if listing is not None and name not in self._links[directory]:
            return name in listing
        return os.path.isfile(path)

    def size(self, path: str) -> int:
        size = self._sizes.get(path)
        if size is not None:
            return size
        size = os.stat(path).st_size
        directory, name = os.path.split(path)
        # kept where the listing is (nothing but this disk changes the directory meanwhile), not for a link (its
        # target may change by another name)
        if directory in self._listings and name not in self._links[directory]:
            self._sizes[path] = size
            self._sized.setdefault(directory, []).append(path)
        return size

    def current_size(self, path: str) -> int:
        return os.stat(path).st_size

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        return read_file(path, start, end)

    def view(self, path: str) -> bytes | mmap.mmap:
        fd, st = open_regular(path)
        try:
            size = st.st_size
            if size <= VIEW_READ_BELOW or sparse(st):
                return read_to(fd, size)
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        mm.madvise(mmap.MADV_RANDOM)  # lookups touch a few pages: no read-ahead of a preallocated index's zero tail
        return mm

    def mtime_ms(self, path: str) -> int | None:
        try:
            return os.stat(path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return None

    def scan(self, task: SegmentTask, source: ScanSource) -> SegmentScan:
        return source.scan(task)

    # ---- the data dir itself -----------------------------------------------------------

    @_timed
    def make_data_dir(self, directory: str) -> None:
        point("mkdir", directory)
        os.makedirs(directory)
        self._changed.add(directory)

    def lock(self, lock_path: str) -> int | None:
        # new FileLock(new File(dir, ".lock")) opens it with CREATE (content kept); the file stays while the
        # broker runs (only a clean LogManager.shutdown or a dir failure deletes it)
        if not os.path.lexists(lock_path):
            self.write(lock_path, b"")
        # a link (a dangling one would turn the lock off) or a special file is refused: the dir goes offline
        fd, _ = open_regular(lock_path, os.O_RDWR)
        return _lock_or_fail(fd, fcntl.LOCK_EX, lock_path)

    @_timed
    def remove_empty_dir(self, path: str) -> None:
        point("rmdir", path)
        os.rmdir(path)
        self._changed.add(os.path.dirname(path))

    # ---- writing -----------------------------------------------------------------------

    @_timed
    def write(self, path: str, data: bytes, *, fsync: bool = False, durable: bool = False,
              truncate: bool = True, exclusive: bool = False) -> None:
        # no O_TRUNC: ext4 flushes a file truncated to 0 and rewritten when it is closed (auto_da_alloc),
        # which made every rewrite of an existing index cost a disk write; the bytes are the same
        point("write", path)
        created = hooked() and not os.path.lexists(path)
        fd = _open_for_writing(path, exclusive)
        self._listed(path, True)  # there now, whatever happens to the write (a listing after a failure shows it)
        try:
            if created:
                point("write:data", path)
            _write_all(fd, memoryview(data), path)
            if truncate:
                if hooked() and os.fstat(fd).st_size > len(data):
                    point("write:cut", path)
                os.ftruncate(fd, len(data))
            if fsync:
                point("fsync", path)
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
                point("syncfs", directory)
                _syncfs(directory)
            except OSError as e:
                if e.filename is not None:
                    raise
                raise OSError(e.errno, e.strerror, directory) from e  # the file system's, named by a directory on it

    def sync(self, directory: str) -> None:
        point("syncfs", directory)
        _syncfs(directory)

    def write_atomically(self, path: str, data: bytes) -> None:
        tmp = path + ".tmp"
        self.delete(tmp)  # a leftover (or a hard link planted there): only its name goes, then a file of our own
        self.write(tmp, data, fsync=True, exclusive=True)
        self.rename(tmp, path)
        self.sync_dir(os.path.dirname(path))

    @_timed
    def set_size(self, path: str, size: int) -> None:
        point("set-size", path)
        created = hooked() and size > 0 and not os.path.lexists(path)
        fd = _open_for_writing(path)
        self._listed(path, True)
        try:
            if created:
                point("set-size:data", path)
            os.ftruncate(fd, size)
        finally:
            os.close(fd)

    @_timed
    def rename(self, src: str, dst: str) -> None:
        point("rename", dst)
        os.replace(src, dst)
        self._listed(src, False)
        self._listed(dst, True)

    @_timed
    def set_mtime(self, path: str, mtime_ns: int) -> None:
        st = os.stat(path)
        point("set-mtime", path)
        os.utime(path, ns=(st.st_atime_ns, mtime_ns))
        self._changed.add(os.path.dirname(path))

    @_timed
    def sync_dir(self, directory: str) -> None:
        point("sync-dir", directory)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    @_timed
    def delete(self, path: str) -> bool:
        if not self.exists(path):
            return False
        point("delete", path)
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


def _write_all(fd: int, view: memoryview, path: str) -> None:
    """Write every byte at the file position; with a mutation hook installed, in two halves with a point
    between them (a SIGKILL can tear a large write: the state the rerun must cope with)."""
    if hooked() and len(view) > 1:
        half = len(view) // 2
        _write_fully(fd, view[:half])
        point("write:rest", path)
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


def _lock_or_fail(fd: int, mode: int, lock_path: str) -> int:
    """A POSIX record lock (like Java's FileChannel.tryLock), so that mploader and a running broker never
    work on the same dir."""
    try:
        fcntl.lockf(fd, mode | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StartupFailedError(lock_path, "KafkaException", "the data directory is locked by another process "
                                 "(a running broker?); stop it before loading this directory") from None
    return fd


__all__ = ["RealDisk"]
