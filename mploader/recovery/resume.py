"""Resumable recovery: a data dir's ``recovery-point-offset-checkpoint`` advanced as its partitions finish.

Kafka's load leaves every recovery point where it was (``min(checkpoint, log end)``, docs/loading.md §16c):
a broker or a load killed after recovering most of a dir recovers all of it again.  With
``LoaderConfig.persist_recovery_points`` (``mploader load --resumable``) the manager hands each loaded
partition to a :class:`RecoveryPointWriter`, which, once the partition's recovered files are durable (one
``syncfs`` of the dir's file system covers every partition finished since the last write), rewrites the
checkpoint with that partition's entry at its log end offset, atomically (temporary file, fsync, rename,
fsync of the dir), keeping every other entry.  A killed load, or the broker's next start, then recovers
from there: only the segment holding each advanced recovery point (Kafka always reads that one again) and
the partitions not yet written.

Writes are spaced by at least ``interval`` seconds (the sync and the two fsyncs cost milliseconds; a dir of
thousands of small partitions must not pay them per partition); :meth:`close` writes what is left.  The file
holds its entries sorted by topic and partition (Kafka's order is a hash map's, undefined: docs/formats.md
§13), so that every schedule of the loading threads writes the same bytes.  A dir whose checkpoint could not
be read is not written (Kafka would rewrite it with what it loaded; mploader leaves that to Kafka).
"""

from __future__ import annotations

import os
import threading
import time

from mploader.disk.base import Disk
from mploader.format import checkpoint
from mploader.format.names import DirKind, TopicPartition
from mploader.result import LoadedLog

#: Seconds between two checkpoint writes of one data dir.
INTERVAL_S = 0.5


class RecoveryPointWriter:
    """The recovery points of one data dir, advanced as its partitions finish (see the module's docstring)."""

    def __init__(self, disk: Disk, data_dir: str, entries: dict[TopicPartition, int],
                 interval: float | None = None) -> None:
        self.disk = disk
        self.path = os.path.join(data_dir, checkpoint.RECOVERY_POINT_CHECKPOINT)
        self.data_dir = data_dir
        self.entries = dict(entries)  # what the file holds (or will once the next write is done)
        self.interval = INTERVAL_S if interval is None else interval
        self.writes = 0
        self._pending: dict[TopicPartition, int] = {}
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def loaded(self, lg: LoadedLog) -> None:
        """``lg`` is loaded: its entry goes to the log end offset with the next write (now, if the last write
        is ``interval`` old).  A -delete or -stray dir has no entry (Kafka checkpoints its current and future
        logs only); an entry already there is not written again.  ``lg.recovery_point`` becomes what the file
        will say."""
        if lg.kind not in (DirKind.LIVE, DirKind.FUTURE):
            return
        lg.recovery_point = lg.log_end_offset
        with self._lock:
            if self.entries.get(lg.topic_partition) != lg.log_end_offset:
                self._pending[lg.topic_partition] = lg.log_end_offset
            if self._pending and time.monotonic() - self._last >= self.interval:
                self._write()

    def close(self) -> None:
        """Write what is pending (the dir's partitions are all loaded)."""
        with self._lock:
            if self._pending:
                self._write()

    def _write(self) -> None:
        self.disk.sync(self.data_dir)  # every partition in _pending: its recovered files durable first
        self.entries.update(self._pending)
        self._pending.clear()
        ordered = dict(sorted(self.entries.items(), key=lambda e: (e[0].topic, e[0].partition)))
        self.disk.write_atomically(self.path, checkpoint.offset_checkpoint_bytes(ordered))
        self.writes += 1
        self._last = time.monotonic()


__all__ = ["INTERVAL_S", "RecoveryPointWriter"]
