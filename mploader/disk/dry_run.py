"""The disk of a dry run: every change is kept in an in-memory overlay over the real files.

Reads through this disk see the changed files, so the load runs exactly as it would; the bytes on
disk never change.  A file the overlay holds is either new bytes (``data``) or the on-disk bytes cut
or zero-extended (``data is None``: the first ``disk_bytes`` bytes on disk, then zeros up to ``size``; a
truncation makes no copy).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace

from mploader.disk.base import Disk
from mploader.disk.reader import FINGERPRINT_BYTES, FileSystemReader
from mploader.scan import ScanSource, SegmentScan, SegmentTask, scan_buffer


@dataclass(slots=True)
class _Virtual:
    data: bytes | None  # None: the first `disk_bytes` on-disk bytes, zero-extended to `size`
    size: int
    disk_bytes: int = 0  # with data None: how many of the on-disk bytes are still the file's (the smallest size yet)


_DELETED = _Virtual(None, -1)


class DryRunDisk(Disk):
    """Reads go to the :class:`FileSystemReader` it holds for files the overlay does not hold; changes go to the
    overlay.  It inherits from no class that writes: a change it does not define itself cannot reach a file."""

    def __init__(self, check_lock: bool = True) -> None:
        self._files = FileSystemReader()  # the files as on disk: nothing this disk does changes them
        self._overlay: dict[str, _Virtual] = {}
        self._check_lock = check_lock  # False: `mploader verify`, which may look at a running broker's dirs
        self._renamed_dirs: dict[str, str] = {}  # log directories renamed (strays), old -> new name

    # ---- reading -----------------------------------------------------------------------

    def list_files(self, directory: str) -> list[str]:
        return self._with_overlay(directory, self._files.list_files(directory))

    def cached_listing(self, directory: str) -> list[str] | None:
        cached = self._files.cached_listing(directory)
        return None if cached is None else self._with_overlay(directory, cached)

    def _with_overlay(self, directory: str, on_disk: list[str]) -> list[str]:
        """The names ``on_disk`` in ``directory`` with this disk's changes: its files added, its deletions gone."""
        names = set(on_disk)
        prefix = os.path.join(directory, "")
        # a copy first, taken at once (in C, under the GIL): the other data dirs' loading threads add to the overlay
        # meanwhile (a multi-dir dry run failed with "dictionary changed size during iteration")
        for path, v in list(self._overlay.items()):
            if path.startswith(prefix) and os.sep not in path[len(prefix):]:
                if v is _DELETED:
                    names.discard(path[len(prefix):])
                else:
                    names.add(path[len(prefix):])
        return sorted(names)

    def symlinks(self, directory: str) -> set[str]:
        return self._files.symlinks(directory)

    def other_entries(self, directory: str) -> dict[str, int]:
        return self._files.other_entries(directory)

    def release(self, directory: str) -> None:
        self._files.release(directory)

    def exists(self, path: str) -> bool:
        v = self._overlay.get(path)
        if v is not None:
            return v is not _DELETED
        return self._files.exists(path)

    def size(self, path: str) -> int:
        v = self._overlay.get(path)
        if v is None:
            return self._files.size(path)
        if v is _DELETED:
            raise FileNotFoundError(path)
        return v.size

    def current_size(self, path: str) -> int:
        return self.size(path) if path in self._overlay else self._files.current_size(path)

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        v = self._overlay.get(path)
        if v is None:
            return self._files.read(path, start, end)
        if v is _DELETED:
            raise FileNotFoundError(path)
        if v.data is not None:
            data = v.data
        else:
            data = self._files.read(path, 0, v.disk_bytes)
            data += bytes(v.size - len(data))
        return data[start:end]

    def view(self, path: str) -> bytes | mmap.mmap:
        return self.read(path) if path in self._overlay else self._files.view(path)

    def mtime_ms(self, path: str) -> int | None:
        return None if path in self._overlay else self._files.mtime_ms(path)

    def fingerprint(self, path: str) -> str:
        if path not in self._overlay:
            return self._files.fingerprint(path)
        data = self.read(path, 0, FINGERPRINT_BYTES)  # a file of this run: no inode, no time of its own
        return f"dry-run:{self.size(path)}:{data.hex()}"

    def scan(self, task: SegmentTask, source: ScanSource) -> SegmentScan:
        v = self._overlay.get(task.path)
        if v is None or v is _DELETED:
            return source.scan(task)
        if v.data is None and v.disk_bytes == v.size:  # the on-disk bytes, cut: the engine scans them
            return source.scan(replace(task, end=v.size))
        data = self.read(task.path)  # bytes of this run: scanned here, the engine only sees the disk
        return scan_buffer(data, replace(task, end=None), len(data))

    # ---- the data dir itself -----------------------------------------------------------

    def make_data_dir(self, directory: str) -> None:
        raise FileNotFoundError(2, "data directory does not exist (dry run: not created)", directory)

    def lock(self, lock_path: str) -> int | None:
        if not os.path.lexists(lock_path):
            self.write(lock_path, b"")
            return None  # (no broker locks a missing file)
        return self._files.lock_shared(lock_path, self._check_lock)

    def remove_empty_dir(self, path: str) -> None:
        if os.listdir(path):
            raise OSError(39, "cannot delete the clean-shutdown marker: a non-empty directory", path)

    # ---- writing -----------------------------------------------------------------------

    def write(self, path: str, data: bytes, *, fsync: bool = False, durable: bool = False,
              truncate: bool = True, exclusive: bool = False) -> None:
        if not truncate and self.exists(path) and self.size(path) > len(data):
            data = data + self.read(path)[len(data):]
        self._overlay[path] = _Virtual(bytes(data), len(data))

    def write_atomically(self, path: str, data: bytes) -> None:
        self._overlay[path] = _Virtual(bytes(data), len(data))

    def set_size(self, path: str, size: int) -> None:
        v = self._overlay.get(path)
        if v is not None and v is not _DELETED and v.data is not None:
            self._overlay[path] = _Virtual(v.data[:size] + bytes(max(0, size - len(v.data))), size)
        elif v is _DELETED or (v is None and not os.path.exists(path)):
            self._overlay[path] = _Virtual(bytes(size), size)
        else:  # as on disk, or already resized: the on-disk bytes beyond the smallest size are gone
            disk_bytes = min(size, self._files.size(path) if v is None else v.disk_bytes)
            self._overlay[path] = _Virtual(None, size, disk_bytes)

    def rename(self, src: str, dst: str) -> None:
        v = self._overlay.get(src)
        if v is None or v.data is None:  # bytes on disk under the old name: copy them, the name changes
            v = _Virtual(self.read(src), self.size(src))
        self._overlay[dst] = v
        self._overlay[src] = _DELETED

    def rename_dir(self, src: str, dst: str) -> None:
        """Kept as the renamed directory's name only: a dry run reads no directory after its partition's load."""
        if self.exists(dst) or os.path.lexists(dst):
            raise FileExistsError(17, "cannot rename a log directory over an existing entry", dst)
        self._renamed_dirs[src] = dst

    def set_mtime(self, path: str, mtime_ns: int) -> None:
        """Times are not modelled: nothing happens."""

    def sync_dir(self, directory: str) -> None:
        """Nothing was written."""

    def flush(self) -> None:
        """Nothing was written."""

    def sync(self, directory: str) -> None:
        """Nothing was written."""

    def changed_dirs(self) -> list[str]:
        return []  # nothing on disk changes

    def changed(self, directory: str) -> bool:
        return False

    def changed_elsewhere(self, directories: Iterable[str]) -> None:
        pass  # another process's dry run changed nothing either

    def delete(self, path: str) -> bool:
        if not self.exists(path):
            return False
        self._overlay[path] = _DELETED
        return True


__all__ = ["DryRunDisk"]
