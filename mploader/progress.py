"""Progress reporting through an injectable callback object (fsspec style): the library never prints."""

from __future__ import annotations


class Progress:
    """Override what you need; every method is called from the loading threads."""

    def start(self, partitions_per_dir: dict[str, int]) -> None:
        """Called once before loading, with the number of partition directories per data dir."""

    def partition_done(self, data_dir: str, partition: str) -> None:
        """Called when one partition finished loading (or failed)."""

    def segments_scanned(self, data_dir: str, segments: int, nbytes: int) -> None:
        """Called as Phase 1 scans complete."""

    def close(self) -> None:
        """Called once after loading."""
