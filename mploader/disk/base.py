"""Every change Phase 2 makes to a data dir goes through a :class:`Disk`.

In a normal load the operations hit the file system at once.  With
``dry_run=True`` they are recorded in an in-memory overlay instead: later reads
through the same Disk see the changed files (so the algorithm runs exactly as
it would), while the bytes on disk stay untouched.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass



@dataclass(slots=True)
class _Virtual:
    data: bytes | None  # None: the on-disk bytes, cut or zero-extended to `size`
    size: int


_DELETED = _Virtual(None, -1)


class Disk:
    def __init__(self, dry_run: bool = False):
        self.dry_run = dry_run
        self._overlay: dict[str, _Virtual] = {}
        self._links: dict[str, set[str]] = {}

    # ---- reading -----------------------------------------------------------------------

    def list_files(self, directory: str) -> list[str]:
        """Names of the regular files in ``directory`` (unsorted, like Java's listFiles filtered by
        ``File.isFile``, which follows links: a dangling link or one to a directory is not listed)."""
        names = set()
        links = set()
        with os.scandir(directory) as it:
            for e in it:
                if not e.is_file():  # follows links, as isFile does
                    continue
                names.add(e.name)
                if e.is_symlink():  # a link to a file: the loader's to refuse
                    links.add(e.name)
        self._links[directory] = links
        if self._overlay:
            prefix = os.path.join(directory, "")
            for path, v in self._overlay.items():
                if path.startswith(prefix) and os.sep not in path[len(prefix):]:
                    if v is _DELETED:
                        names.discard(path[len(prefix):])
                    else:
                        names.add(path[len(prefix):])
        return list(names)

    def symlinks(self, directory: str) -> set[str]:
        """Names of the symbolic links the last listing of ``directory`` met."""
        return self._links.get(directory, set())

    def exists(self, path: str) -> bool:
        v = self._overlay.get(path)
        if v is not None:
            return v is not _DELETED
        return os.path.isfile(path)

    def size(self, path: str) -> int:
        v = self._overlay.get(path)
        if v is not None:
            if v is _DELETED:
                raise FileNotFoundError(path)
            return v.size
        return os.stat(path).st_size

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        v = self._overlay.get(path)
        if v is None:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read() if end is None else f.read(max(0, end - start))
        if v is _DELETED:
            raise FileNotFoundError(path)
        if v.data is not None:
            data = v.data
        else:
            with open(path, "rb") as f:
                data = f.read(v.size)
            data += bytes(v.size - len(data))
        return data[start:end]

    def view(self, path: str) -> bytes | mmap.mmap:
        """The file's bytes for reading: a read-only mapping when the file is as on disk (index
        files are mostly preallocated zeros: only the pages a lookup touches are read)."""
        if path in self._overlay:
            return self.read(path)
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        mm.madvise(mmap.MADV_RANDOM)  # lookups touch a few pages: no read-ahead of a sparse zero tail
        return mm

    def overlay_size(self, path: str) -> int | None:
        """The size a dry run gave ``path`` (None when the file is as on disk)."""
        v = self._overlay.get(path)
        return None if v is None or v is _DELETED else v.size

    def has_virtual_content(self, path: str) -> bool:
        v = self._overlay.get(path)
        return v is not None and v is not _DELETED and v.data is not None

    # ---- writing -----------------------------------------------------------------------

    def write(self, path: str, data: bytes, *, fsync: bool = False, truncate: bool = True) -> None:
        """Write ``data`` at position 0; without ``truncate`` a longer old file keeps its tail."""
        if self.dry_run:
            if not truncate and self.exists(path) and self.size(path) > len(data):
                old = self.read(path)
                data = data + old[len(data):]
            self._overlay[path] = _Virtual(bytes(data), len(data))
            return
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
        """Kafka's checkpoint write: tmp file, fsync, rename, fsync of the directory."""
        if self.dry_run:
            self._overlay[path] = _Virtual(bytes(data), len(data))
            return
        tmp = path + ".tmp"
        self.write(tmp, data, fsync=True)
        os.replace(tmp, path)
        dfd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def set_size(self, path: str, size: int) -> None:
        """Truncate or zero-extend (creating the file if missing), like RandomAccessFile.setLength."""
        if self.dry_run:
            v = self._overlay.get(path)
            if v is not None and v is not _DELETED and v.data is not None:
                data = v.data[:size] + bytes(max(0, size - len(v.data)))
                self._overlay[path] = _Virtual(data, size)
            elif (v is None or v is _DELETED) and not os.path.exists(path) or v is _DELETED:
                self._overlay[path] = _Virtual(bytes(size), size)
            else:
                self._overlay[path] = _Virtual(None, size)
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        if self.dry_run:
            v = self._overlay.get(src)
            if v is None:
                v = _Virtual(self.read(src), self.size(src))
            self._overlay[dst] = v
            self._overlay[src] = _DELETED
            return
        os.replace(src, dst)

    def set_mtime(self, path: str, mtime_ns: int) -> None:
        """Set the modification time (the access time is kept), like Files.setLastModifiedTime.

        A dry run does not model times: nothing happens.
        """
        if self.dry_run:
            return
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, mtime_ns))

    def sync_dir(self, directory: str) -> None:
        """fsync a directory after renames (Kafka's Utils.flushDir); nothing in a dry run."""
        if self.dry_run:
            return
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def delete(self, path: str) -> bool:
        """Delete if present; returns whether something was deleted."""
        if not self.exists(path):
            return False
        if self.dry_run:
            self._overlay[path] = _DELETED
            return True
        try:
            os.remove(path)
        except FileNotFoundError:
            return False
        return True
