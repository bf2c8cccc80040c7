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
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Iterator

from mploader.disk.base import Disk
from mploader.errors import InvalidFileNameError, StartupFailedError
from mploader.format import names


class SnapshotFiles:
    """Snapshot file names by offset, iterated in ascending offset order."""

    __slots__ = ("_names", "_offsets")

    def __init__(self, files: dict[int, str] | None = None) -> None:
        self._names: dict[int, str] = dict(files or {})
        self._offsets: list[int] = sorted(self._names)

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

    def pop(self, offset: int) -> str | None:
        """Forget ``offset``; its file name, or None where there was none."""
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

    def outside(self, start: int, end: int) -> list[int]:
        """The offsets at or below ``start`` and those above ``end``, ascending."""
        low = bisect.bisect_right(self._offsets, start)
        return self._offsets[:low] + self._offsets[max(low, bisect.bisect_right(self._offsets, end)):]


__all__ = ["SnapshotFiles"]
