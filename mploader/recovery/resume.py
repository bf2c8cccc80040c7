"""Resumable recovery: a data dir's ``recovery-point-offset-checkpoint`` advanced as its partitions finish.

Kafka's load leaves every recovery point where it was (``min(checkpoint, log end)``, docs/loading.md §16c):
a broker or a load killed after recovering most of a dir recovers all of it again.  With
``LoaderConfig.persist_recovery_points`` (``mploader load --resumable``) the manager hands each loaded
partition to its dir's :class:`RecoveryPointWriter`, which, once the partition's recovered files are durable
(one ``syncfs`` of the dir's file system covers every partition finished since the last write), rewrites the
checkpoint with that partition's entry at its log end offset, atomically (temporary file, fsync, rename,
fsync of the dir), keeping every other entry.  A killed load, or the broker's next start, then recovers from
there: only the segment holding each advanced recovery point (Kafka always reads that one again) and the
partitions not yet written.

A resumed ``--resumable`` load does better than Kafka's next start: after each checkpoint write the writer
records beside it, in ``mploader-recovered`` (data dir), each written partition's log end offset and its last
segment as left (base offset, size, modification time).  A later ``--resumable`` load that finds a
partition's checkpoint entry at that log end offset and its last segment as recorded knows the segment is
one this load's recovery already rebuilt, and does not recover it again (:func:`recovered_before`); anything
else (a broker that appended since, a torn record) makes it recover as Kafka does.  Kafka ignores the file;
every load that completes deletes it (``manager.dirs.commit_clean_dirs``' neighbour, :func:`forget`).

The writes happen in a thread of their own, one after the other, each taking every partition finished while
the previous one was being made: the loading threads never wait for a sync, and what a kill loses is about
one sync's worth of finished partitions.  (``BACKGROUND = False`` writes in the loading thread instead, after
each partition: one order of changes, for the kill-point tests.)  The file holds its entries sorted by topic
and partition (Kafka's order is a hash map's, undefined: docs/formats.md §13), so that every schedule writes
the same bytes.  A write that fails is logged and ends the writes of that dir: the data is loaded all the
same, only the next load will recover it again.
"""

from __future__ import annotations

import json
import logging
import os
import threading

from mploader.disk.base import Disk
from mploader.format import checkpoint, names
from mploader.format.names import DirKind, TopicPartition
from mploader.result import LoadedLog

log = logging.getLogger(__name__)

#: Write in a thread of the writer's own (False: in the loading thread, after each partition).
BACKGROUND = True
RECOVERED = "mploader-recovered"

#: A partition's record in ``mploader-recovered``: (log end offset, last segment's base offset, its .log size,
#: its modification time in ms).
Recovered = tuple[int, int, int, int | None]


def read_recovered(disk: Disk, data_dir: str) -> dict[TopicPartition, Recovered]:
    """The records a killed ``--resumable`` load left in ``data_dir`` (none: no file, or a torn one)."""
    path = os.path.join(data_dir, RECOVERED)
    if not disk.exists(path):
        return {}
    try:
        rows = json.loads(disk.read(path))
        return {TopicPartition(t, p): (leo, base, size, mtime) for t, p, leo, base, size, mtime in rows}
    except (ValueError, TypeError):
        return {}


def recovered_before(disk: Disk, record: Recovered | None, recovery_point: int, last_log: str,
                     last_base: int) -> bool:
    """Whether a partition's last segment is as a killed ``--resumable`` load left it after recovering the
    whole partition to the recovery point it wrote: then recovering it again changes nothing."""
    if record is None:
        return False
    leo, base, size, mtime = record
    # mtime_ms first: None for a missing file (or one this load changed), before size would raise on it
    return (leo == recovery_point and base == last_base and mtime is not None and disk.mtime_ms(last_log) == mtime
            and disk.size(last_log) == size)


def forget(disk: Disk, data_dir: str) -> None:
    """A load completed: the records of a killed one are of no more use."""
    disk.delete(os.path.join(data_dir, RECOVERED))


class RecoveryPointWriter:
    """The recovery points of one data dir, advanced as its partitions finish (see the module's docstring)."""

    def __init__(self, disk: Disk, data_dir: str, entries: dict[TopicPartition, int]) -> None:
        self.disk = disk
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, checkpoint.RECOVERY_POINT_CHECKPOINT)
        self.entries = dict(entries)  # what the file holds
        self.recovered: dict[TopicPartition, Recovered] = {}  # what mploader-recovered holds
        self.writes = 0
        self._pending: dict[TopicPartition, LoadedLog] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._io = threading.Lock()  # one write at a time
        self._closing = False
        self._failed = False
        self._thread: threading.Thread | None = None
        if BACKGROUND:
            self._thread = threading.Thread(target=self._run, name=f"recovery-points-{data_dir}", daemon=True)
            self._thread.start()

    def loaded(self, lg: LoadedLog) -> None:
        """``lg`` is loaded: its entry goes to its log end offset with the next write.  A -delete or -stray dir
        has no entry (Kafka checkpoints its current and future logs only).  ``lg.recovery_point`` becomes the
        log end offset once the file says so."""
        if lg.kind not in (DirKind.LIVE, DirKind.FUTURE):
            return
        with self._lock:
            if self.entries.get(lg.topic_partition) == lg.log_end_offset:
                lg.recovery_point = lg.log_end_offset
                return
            self._pending[lg.topic_partition] = lg
            self._wake.notify()
        if self._thread is None:
            self._flush()

    def close(self, write: bool = True) -> None:
        """The dir's partitions are done: write what is pending (``write=False``: drop it, e.g. the dir went
        offline) and end the writing thread."""
        if self._thread is not None:
            with self._lock:
                self._closing = True
                if not write:
                    self._pending.clear()
                self._wake.notify()
            self._thread.join()
        elif write:
            self._flush()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closing:
                    self._wake.wait()
                if not self._pending:
                    return
            self._flush()

    def _flush(self) -> None:
        with self._io:
            with self._lock:
                batch, self._pending = self._pending, {}
            if not batch or self._failed:
                return
            entries = {**self.entries, **{tp: lg.log_end_offset for tp, lg in batch.items()}}
            ordered = dict(sorted(entries.items()))  # TopicPartition orders by topic, then partition
            recovered = {**self.recovered, **{tp: self._record(lg) for tp, lg in batch.items()}}
            try:
                self.disk.sync(self.data_dir)  # the partitions' recovered files durable before their entries
                self.disk.write_atomically(self.path, checkpoint.offset_checkpoint_bytes(ordered))
                rows = [[tp.topic, tp.partition, *r] for tp, r in recovered.items()]
                self.disk.write(os.path.join(self.data_dir, RECOVERED), json.dumps(rows).encode())
            except OSError as e:
                self._failed = True
                log.warning("%s: could not write the recovery points (%s); the partitions loaded are recovered "
                            "again by the next load", self.path, e)
                return
            self.entries = entries
            self.recovered = recovered
            self.writes += 1
            for lg in batch.values():
                lg.recovery_point = lg.log_end_offset

    def _record(self, lg: LoadedLog) -> Recovered:
        base = lg.segments[-1].base_offset
        path = os.path.join(lg.dir, names.segment_file_name(base, names.LOG_SUFFIX))
        return lg.log_end_offset, base, self.disk.size(path), self.disk.mtime_ms(path)


__all__ = ["BACKGROUND", "RECOVERED", "RecoveryPointWriter", "forget", "read_recovered", "recovered_before"]
