"""The leader-epoch cache of one partition (Kafka's LeaderEpochFileCache, docs/loading.md §9, §6.11).

Only the cache's final content reaches disk: Kafka rewrites
``leader-epoch-checkpoint`` on every assignment and after truncations that
removed something, and the last write is all a reader can see.  We therefore
track whether any write would have happened (``dirty``) and write once.
"""

from __future__ import annotations

from mploader.errors import StartupFailedError


class LeaderEpochCache:
    def __init__(self, path: str):
        self.path = path
        self.entries: list[tuple[int, int]] = []  # (epoch, start offset), ascending epoch
        self.dirty = False

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise StartupFailedError(self.path, "IllegalArgumentException",
                                     f"leader epoch entry ({epoch}, {start_offset}) has a negative field")
        if self.entries and self.entries[-1][0] == epoch and start_offset >= self.entries[-1][1]:
            return False
        while self.entries and (self.entries[-1][0] >= epoch or self.entries[-1][1] >= start_offset):
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        return True

    def load(self, entries: list[tuple[int, int]]) -> None:
        """Feed the checkpoint's lines through the assign rule, without writing back."""
        for epoch, start in entries:
            self._assign(epoch, start)

    def assign(self, epoch: int, start_offset: int) -> None:
        """Kafka's assign(epoch, startOffset) followed by a synchronous flush."""
        if self._assign(epoch, start_offset):
            self.dirty = True

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove the entries that start at or after ``end_offset`` (none for a negative offset)."""
        if end_offset >= 0 and self.entries and self.entries[-1][1] >= end_offset:
            while self.entries and self.entries[-1][1] >= end_offset:
                self.entries.pop()
            self.dirty = True

    def truncate_from_start(self, start_offset: int) -> None:
        removed: tuple[int, int] | None = None
        while self.entries and self.entries[0][1] <= start_offset:
            removed = self.entries.pop(0)
        if removed is not None:
            self.entries.insert(0, (removed[0], start_offset))
            self.dirty = True

    def clear(self) -> None:
        self.entries.clear()
        self.dirty = True
