"""The one interface through which a load reads the files it may change, and changes them.

Two halves: :class:`DiskReader`, what a load reads, and :class:`Disk`, that and the changes.  The files as they
are on disk are read by one class, :class:`mploader.disk.reader.FileSystemReader`; two disks build on it.
:class:`mploader.disk.real.RealDisk` is that reader and the changes, made to the data dirs at once;
:class:`mploader.disk.dry_run.DryRunDisk` holds a reader (it inherits from no class that writes) and keeps every
change in an overlay in memory, so that later reads through the same disk see the changed files (the algorithm
runs exactly as it would) while no byte on disk changes.  Nothing outside this package knows which one it has:
:func:`mploader.disk.open_disk` chooses.  ``tests/test_disk.py`` holds both to one conformance class.
"""

from __future__ import annotations

import abc
import mmap
from collections.abc import Iterable

from mploader.scan import ScanSource, SegmentScan, SegmentTask


class DiskReader(abc.ABC):
    """What a load reads of the files it may change: listings, sizes, bytes, times, scans."""

    @abc.abstractmethod
    def list_files(self, directory: str) -> list[str]:
        """Names of the regular files in ``directory``, sorted (Java's listFiles filtered by ``File.isFile``,
        which follows links: a dangling link or one to a directory is not listed).  The directory is read
        once; later listings come from what this disk knows of it (every change goes through it), until
        :meth:`release`."""

    def cached_listing(self, directory: str) -> list[str] | None:
        """:meth:`list_files` of ``directory`` where this disk keeps its listing already, else None (and nothing
        listed or kept: a planner's question must not keep every partition's listing until its load)."""
        return None

    @abc.abstractmethod
    def other_entries(self, directory: str) -> dict[str, int]:
        """Of the listing :meth:`list_files` made, the entries that are neither files nor links (directories, special
        files), by name with their ``lstat`` mode; empty for a directory not listed."""

    @abc.abstractmethod
    def release(self, directory: str) -> None:
        """The load is done with ``directory``: forget its listing (a partition's listing can be large)."""

    @abc.abstractmethod
    def symlinks(self, directory: str) -> set[str]:
        """Names of the symbolic links (to files) that the last listing of ``directory`` met."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether ``path`` is a file."""

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """The file's size; FileNotFoundError when it does not exist."""

    @abc.abstractmethod
    def current_size(self, path: str) -> int:
        """The file's size now, never a kept one: :meth:`size` keeps what it found until this disk changes the file,
        so the two differ when another process changed it meanwhile."""

    @abc.abstractmethod
    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``start`` to ``end`` (None: the end of the file)."""

    @abc.abstractmethod
    def view(self, path: str) -> bytes | mmap.mmap:
        """The whole file for reading: its bytes where it is small, else a read-only mapping (lookups in a big or
        preallocated index touch a few pages)."""

    @abc.abstractmethod
    def mtime_ms(self, path: str) -> int | None:
        """``File.lastModified()`` in milliseconds; None for a file this disk wrote or truncated."""

    @abc.abstractmethod
    def scan(self, task: SegmentTask, source: ScanSource) -> SegmentScan:
        """The Phase 1 scan of ``task``'s ``.log`` as this disk sees the file: from ``source`` (an
        engine) when the file is as on disk, else of the bytes this disk holds for it."""

    @abc.abstractmethod
    def fingerprint(self, path: str) -> str:
        """The file as one string: its inode, size and modification time (ns) and its first 4 KiB, so that another
        file at the same name later is told apart (a dry run's own file, which has neither: its size and bytes);
        FileNotFoundError where there is none, EnvironmentFailure where a directory, a link or a special file stands
        there."""


class Disk(DiskReader):
    """A :class:`DiskReader` that also changes the files: every change a load makes goes through one."""

    #: Seconds spent changing files (creating, writing, truncating, renaming, deleting them, syncing a directory),
    #: summed over the threads that changed them; :meth:`flush`'s sync apart.  Nothing changes on a dry run: 0.
    change_seconds: float = 0.0

    # ---- the data dir itself -----------------------------------------------------------

    @abc.abstractmethod
    def make_data_dir(self, directory: str) -> None:
        """Create a missing data dir, as Kafka does (a dry run refuses: it creates nothing)."""

    @abc.abstractmethod
    def lock(self, lock_path: str) -> int | None:
        """Take the data dir's lock (``LogManager.lockLogDirs``): an exclusive POSIX record lock on
        ``.lock``, the file created if missing; a dry run only checks that nobody holds it exclusively.
        Returns the descriptor to close at the end (None: nothing held); StartupFailedError when held."""

    @abc.abstractmethod
    def remove_empty_dir(self, path: str) -> None:
        """``Files.deleteIfExists`` on a directory: an empty one goes, a non-empty one is an OSError."""

    # ---- writing -----------------------------------------------------------------------

    @abc.abstractmethod
    def write(self, path: str, data: bytes, *, fsync: bool = False, durable: bool = False,
              truncate: bool = True, exclusive: bool = False) -> None:
        """Write ``data`` at position 0; without ``truncate`` a longer old file keeps its tail.  ``fsync``:
        durable before this returns; ``durable``: durable before :meth:`flush` returns (docs/architecture.md,
        "Durability"); ``exclusive``: a file this write creates, never one that exists (O_EXCL)."""

    @abc.abstractmethod
    def changed_dirs(self) -> list[str]:
        """The directories in which this disk has changed something on disk so far, sorted (a dry run: none)."""

    @abc.abstractmethod
    def changed(self, directory: str) -> bool:
        """Whether ``directory`` is one of :meth:`changed_dirs` (asked without a sorted copy of them all)."""

    @abc.abstractmethod
    def changed_elsewhere(self, directories: Iterable[str]) -> None:
        """Count ``directories``, changed for this load by other processes' disks (a ``partitions=`` runner's), in
        :meth:`changed_dirs` (a dry run: nothing changed, nothing counted)."""

    @abc.abstractmethod
    def flush(self) -> None:
        """Make every ``durable`` write durable (one sync per file system written to)."""

    @abc.abstractmethod
    def sync(self, directory: str) -> None:
        """Make everything written so far on ``directory``'s file system durable (``syncfs``; a dry run: nothing)."""

    @abc.abstractmethod
    def write_atomically(self, path: str, data: bytes) -> None:
        """Kafka's checkpoint write: tmp file, fsync, rename, fsync of the directory."""

    @abc.abstractmethod
    def set_size(self, path: str, size: int) -> None:
        """Truncate or zero-extend (creating the file if missing), like RandomAccessFile.setLength."""

    @abc.abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Replace ``dst`` by ``src``."""

    @abc.abstractmethod
    def rename_dir(self, src: str, dst: str) -> None:
        """Rename directory ``src`` to ``dst`` (a new name) and make the rename durable: Kafka's
        ``LocalLog.renameDir`` (``Utils.atomicMoveWithFallback``, which flushes the parent directory)."""

    @abc.abstractmethod
    def set_mtime(self, path: str, mtime_ns: int) -> None:
        """Set the modification time (the access time is kept), like Files.setLastModifiedTime."""

    @abc.abstractmethod
    def sync_dir(self, directory: str) -> None:
        """fsync a directory after renames (Kafka's Utils.flushDir)."""

    @abc.abstractmethod
    def delete(self, path: str) -> bool:
        """Delete if present; returns whether something was deleted."""


__all__ = ["Disk", "DiskReader"]
