"""The files of the data dirs as they are on disk, read: the reading half of both disks.

:class:`~mploader.disk.real.RealDisk` is this reader and the changes; :class:`~mploader.disk.dry_run.DryRunDisk`
holds one under its overlay.  Nothing here changes a file: a listing (and the sizes of its files) is kept from
the first read of a directory, and the disk that changes a file says so (:meth:`FileSystemReader.note_change`),
so that what is kept stays what is on disk.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import stat

from mploader.disk.base import DiskReader
from mploader.errors import StartupFailedError
from mploader.format.files import open_regular, read_file, read_to, sparse
from mploader.scan import ScanSource, SegmentScan, SegmentTask

# a file up to this size is read whole by view(), a bigger one mapped: an index of a few entries took 4.5 us read
# against 22 us mapped, a 95 KB .log 9 against 31 us; a lookup touches a few pages of a mapping, so past ~256 KiB
# (~25 us of copying) the mapping is the cheaper (perf/README.md, "Phase 2's questions to the file system")
VIEW_READ_BELOW = 256 << 10
FINGERPRINT_BYTES = 4096  # how much of a file its fingerprint holds (a clean-shutdown marker is a few dozen bytes)


class FileSystemReader(DiskReader):
    def __init__(self) -> None:
        self._listings: dict[str, set[str]] = {}  # directory -> its files, kept up to date by the disk's changes
        self._links: dict[str, set[str]] = {}
        self._others: dict[str, dict[str, int]] = {}  # directory -> its entries neither files nor links: name -> mode
        # path -> size of a file of a kept listing, asked once and forgotten at the disk's next change of the file
        # (a segment's .log was stat-ed ~5 times in its recovery: perf/README.md, "Sizes kept"); by path: a look-up
        # needs no split of it
        self._sizes: dict[str, int] = {}
        self._sized: dict[str, list[str]] = {}  # directory -> the paths in _sizes, for release()

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

    def cached_listing(self, directory: str) -> list[str] | None:
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

    def note_change(self, path: str, present: bool) -> None:
        """A disk just created or changed (``present``) or removed the file at ``path``: keep a kept listing of its
        directory true, and forget its kept size."""
        directory, name = os.path.split(path)
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
        # kept where the listing is (nothing but the disk changes the directory meanwhile), not for a link (its
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

    def fingerprint(self, path: str) -> str:
        fd, st = open_regular(path)
        try:
            head = read_to(fd, FINGERPRINT_BYTES)
        finally:
            os.close(fd)
        return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{head.hex()}"

    def lock_shared(self, lock_path: str, check: bool = True) -> int | None:
        """The data dir's ``.lock`` opened to read (a link or a special file is refused, as a real load refuses it)
        and, if ``check``, a shared lock on it: the descriptor to close at the end, StartupFailedError where another
        process holds it exclusively (a running broker).  Without ``check``: opened, closed, None."""
        fd, _ = open_regular(lock_path)
        if not check:
            os.close(fd)
            return None
        return lock_or_fail(fd, fcntl.LOCK_SH, lock_path)


def lock_or_fail(fd: int, mode: int, lock_path: str) -> int:
    """A POSIX record lock (like Java's FileChannel.tryLock), so that mploader and a running broker never
    work on the same dir."""
    try:
        fcntl.lockf(fd, mode | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StartupFailedError(lock_path, "KafkaException", "the data directory is locked by another process "
                                 "(a running broker?); stop it before loading this directory") from None
    return fd


__all__ = ["VIEW_READ_BELOW", "FileSystemReader", "lock_or_fail"]
