"""A partition's producer snapshot files, by offset (the ``snapshots`` map of Kafka's ProducerStateManager).

Kafka's constructor lists the directory's ``.snapshot`` files into a sorted map, and every manager keeps its
map to itself: what another manager writes or deletes later, it does not see (docs/loading.md §8).  Recovery
makes a manager per recovered segment (``LogLoader.recoverSegment``), and each of those snapshots the next
segment's base offset, so a partition of N recovered segments lists up to N snapshot names N times: listing
and parsing them anew made a load quadratic in its recovered segments (perf/README.md, "Limits").

Here the partition's loader lists the files once (:meth:`SnapshotFiles.listed`) and keeps that set true to
the disk: every manager applies its writes and deletes to it as well as to its own view, and the loader its
own changes of snapshot files (:meth:`SnapshotFiles.note`: the swap pass deletes the files in a swapped range
by name, and renames any ``.swap``).  A new manager's view is a copy of it, which is what Kafka's listing would return.
Lookups are by bisection of the sorted offsets, so a change, the latest offset and the offsets outside a
range cost no walk over the map.

The set also keeps the entries of the snapshot a manager wrote last (:meth:`SnapshotFiles.wrote`), when that
file did not exist before: the next recovered segment's manager loads exactly that file, and reads it back
from memory (what the file holds, byte for byte) instead of opening and parsing it again.

While ``LogLoader.recoverLog`` recovers segments, the deletes of its managers are deferred
(:meth:`SnapshotFiles.defer_deletes`): a broker takes a snapshot at every segment roll, and each recovered
segment's manager deletes every snapshot above the segment's base (``truncateAndReload``), then the next
ones write the same names again.  Deleting a file and creating it again costs two changes to the directory
(about 0.5 ms on this project's machines); overwriting the file still there costs one write.  The set forgets
a deferred file at once, as it forgets a deleted one; a manager that writes that name again rewrites it whole
(:meth:`revive`: the write must truncate, since the deleted file would be gone); the loader deletes the files
still owed when the loop ends (:meth:`end_deferral`).  Why a kill in between is safe: docs/crash-safety.md,
"Snapshots a recovery rewrites".
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Iterator, Sequence

from mploader.disk.base import Disk
from mploader.errors import InvalidFileNameError, StartupFailedError
from mploader.format import names
from mploader.format.snapshot import ProducerSnapshotEntry


class SnapshotFiles:
    """Snapshot file names by offset, iterated in ascending offset order."""

    __slots__ = ("_doomed", "_names", "_offsets", "_written")

    def __init__(self, files: dict[int, str] | None = None) -> None:
        self._names: dict[int, str] = dict(files or {})
        self._offsets: list[int] = sorted(self._names)
        self._written: tuple[int, str, Sequence[ProducerSnapshotEntry]] | None = None
        self._doomed: dict[int, str] | None = None  # offset -> a file deleted in name, still on disk (None: off)

    @classmethod
    def listed(cls, disk: Disk, directory: str) -> SnapshotFiles:
        """The ``.snapshot`` files of ``directory`` (ProducerStateManager.loadSnapshots)."""
        return cls.of(directory, disk.list_files(directory))

    @classmethod
    def of(cls, directory: str, listing: Iterable[str]) -> SnapshotFiles:
        """The ``.snapshot`` files among ``directory``'s ``listing``: a name that does not start with a decimal
        offset fails start-up (``new SnapshotFile``: ``Long.parseLong``)."""
        files: dict[int, str] = {}
        for name in listing:
            if name.endswith(names.SNAPSHOT_SUFFIX):
                try:
                    files[names.offset_from_file_name(name)] = name
                except InvalidFileNameError as e:
                    raise StartupFailedError(os.path.join(directory, name), "NumberFormatException", str(e)) from e
        return cls(files)

    def copy(self) -> SnapshotFiles:
        """The files, without the entries :meth:`wrote` keeps (a manager's view holds no bytes)."""
        other = SnapshotFiles()
        other._names = self._names.copy()
        other._offsets = self._offsets.copy()
        return other

    def __contains__(self, offset: int) -> bool:
        return offset in self._names

    def __getitem__(self, offset: int) -> str:
        return self._names[offset]

    def __len__(self) -> int:
        return len(self._offsets)

    def __iter__(self) -> Iterator[int]:
        return iter(self._offsets)

    def latest(self) -> int | None:
        return self._offsets[-1] if self._offsets else None

    def add(self, offset: int, name: str) -> None:
        if offset not in self._names:
            bisect.insort(self._offsets, offset)
        self._names[offset] = name
        self._forget_written(offset)

    def wrote(self, offset: int, name: str, entries: Sequence[ProducerSnapshotEntry]) -> None:
        """A manager wrote ``entries`` as the snapshot ``name`` at ``offset``.  They are cached (the latest
        only) when no file was there: an older, longer file keeps its tail under the new bytes (Kafka's write
        does not truncate), so its content is only known by reading it."""
        new = offset not in self._names
        self.add(offset, name)
        self._written = (offset, name, entries) if new else None

    def written(self, offset: int, name: str) -> Sequence[ProducerSnapshotEntry] | None:
        """The entries the file ``name`` at ``offset`` holds, when :meth:`wrote` cached them and nothing changed
        it since; else None."""
        if self._written is not None and self._written[:2] == (offset, name):
            return self._written[2]
        return None

    def _forget_written(self, offset: int) -> None:
        if self._written is not None and self._written[0] == offset:
            self._written = None

    def pop(self, offset: int) -> str | None:
        """Forget ``offset``; its file name, or None where there was none."""
        self._forget_written(offset)
        name = self._names.pop(offset, None)
        if name is not None:
            del self._offsets[bisect.bisect_left(self._offsets, offset)]
        return name

    def note(self, name: str, present: bool) -> None:
        """A change the loader made itself, not a manager: a file deleted (the swap and temporary-file passes
        delete by name) or created by a rename (a ``.snapshot.swap`` completed).  Kafka's next manager lists
        the directory and sees it; so must the next copy of this set."""
        if not name.endswith(names.SNAPSHOT_SUFFIX):
            return
        offset = names.offset_from_file_name(name)  # a name the loader passed on: one the listing could parse
        if present:
            self.add(offset, name)
        else:
            self.pop(offset)

    # ---- deferred deletes (recoverLog) ----------------------------------------------------------

    def defer_deletes(self) -> None:
        """From now on a manager's delete leaves the file on disk until :meth:`end_deferral` (module doc)."""
        self._doomed = {}

    def doom(self, offset: int, name: str) -> bool:
        """Whether the delete of ``name`` at ``offset`` (already forgotten by :meth:`pop`) is deferred."""
        if self._doomed is None:
            return False
        self._doomed[offset] = name
        return True

    def revive(self, offset: int, name: str) -> bool:
        """A manager is about to write ``name`` at ``offset``: True where that file's delete was deferred (the
        file is still on disk and the write must replace all of it).  It is no longer owed."""
        if self._doomed is None or self._doomed.get(offset) != name:
            return False
        del self._doomed[offset]
        return True

    def end_deferral(self) -> list[str]:
        """Stop deferring; the names of the files whose delete is still owed, in ascending offset order."""
        doomed, self._doomed = self._doomed or {}, None
        return [doomed[o] for o in sorted(doomed)]

    def outside(self, start: int, end: int) -> list[int]:
        """The offsets at or below ``start`` and those above ``end``, ascending."""
        low = bisect.bisect_right(self._offsets, start)
        return self._offsets[:low] + self._offsets[max(low, bisect.bisect_right(self._offsets, end)):]


__all__ = ["SnapshotFiles"]
