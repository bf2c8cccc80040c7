"""The disk of a real load: every change hits the file system at once."""

from __future__ import annotations

import fcntl
import mmap
import os

from mploader.disk.base import Disk
from mploader.errors import StartupFailedError
from mploader.scan import ScanSource, SegmentScan, SegmentTask


class RealDisk(Disk):
    def __init__(self) -> None:
        self._links: dict[str, set[str]] = {}

    # ---- reading -----------------------------------------------------------------------

    def list_files(self, directory: str) -> list[str]:
        names = []
        links = set()
        with os.scandir(directory) as it:
            for e in it:
                if not e.is_file():  # follows links, as isFile does
                    continue
                names.append(e.name)
                if e.is_symlink():  # a link to a file: the loader's to refuse
                    links.add(e.name)
        self._links[directory] = links
        return sorted(names)  # Java's order is the file system's; sorted, every run (and a dry run) reports alike

    def symlinks(self, directory: str) -> set[str]:
        return self._links.get(directory, set())

    def exists(self, path: str) -> bool:
        return os.path.isfile(path)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read() if end is None else f.read(max(0, end - start))

    def view(self, path: str) -> bytes | mmap.mmap:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        mm.madvise(mmap.MADV_RANDOM)  # lookups touch a few pages: no read-ahead of a sparse zero tail
        return mm

    def mtime_ms(self, path: str) -> int | None:
        try:
            return os.stat(path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return None

    def scan(self, task: SegmentTask, source: ScanSource) -> SegmentScan:
        return source.scan(task)

    # ---- the data dir itself -----------------------------------------------------------

    def make_data_dir(self, directory: str) -> None:
        os.makedirs(directory)

    def lock(self, lock_path: str) -> int | None:
        # new FileLock(new File(dir, ".lock")) opens it with CREATE (content kept); the file stays while the
        # broker runs (only a clean LogManager.shutdown or a dir failure deletes it)
        if not os.path.lexists(lock_path):
            self.write(lock_path, b"")
        if not os.path.exists(lock_path):  # a dangling link: nothing to lock (and nothing created outside)
            return None
        return _lock_or_fail(os.open(lock_path, os.O_RDWR), fcntl.LOCK_EX, lock_path)

    def remove_empty_dir(self, path: str) -> None:
        os.rmdir(path)

    # ---- writing -----------------------------------------------------------------------

    def write(self, path: str, data: bytes, *, fsync: bool = False, truncate: bool = True) -> None:
        # no O_TRUNC: ext4 flushes a file truncated to 0 and rewritten when it is closed (auto_da_alloc),
        # which made every rewrite of an existing index cost a disk write; the bytes are the same
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if truncate:
                os.ftruncate(fd, len(data))
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def write_atomically(self, path: str, data: bytes) -> None:
        tmp = path + ".tmp"
        self.write(tmp, data, fsync=True)
        os.replace(tmp, path)
        self.sync_dir(os.path.dirname(path))

    def set_size(self, path: str, size: int) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def set_mtime(self, path: str, mtime_ns: int) -> None:
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, mtime_ns))

    def sync_dir(self, directory: str) -> None:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def delete(self, path: str) -> bool:
        if not self.exists(path):
            return False
        try:
            os.remove(path)
        except FileNotFoundError:
            return False
        return True


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
