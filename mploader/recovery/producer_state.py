"""Producer state of one partition (Kafka's ProducerStateManager, docs/loading.md §8).

The manager holds, per producer id, an entry (epoch, coordinator epoch, last
timestamp, open transaction, the last few batches' metadata), the ongoing and
"unreplicated" transactions, and the snapshot files of the directory.  Batches
arrive as rows of a Phase 1 batch table (see :mod:`mploader.scan.walk`).

The producer map is a :class:`~mploader.recovery.producer_map.ProducerMap`: a snapshot's millions of
producers stay its rows, and snapshots are written in ``java.util.HashMap`` iteration order.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from mploader.disk.base import Disk
from mploader.errors import CorruptSnapshotError, StartupFailedError
from mploader.format import names
from mploader.format.java_hashmap import computed_hashmap_order
from mploader.format.snapshot import SnapshotRows, rows_of, snapshot_file_bytes, snapshot_rows
from mploader.recovery.producer_entry import (  # re-exported: the entries' own module
    NUM_BATCHES_TO_RETAIN as NUM_BATCHES_TO_RETAIN,
    BatchMetadata as BatchMetadata,
    ProducerEntry as ProducerEntry,
)
from mploader.recovery.producer_map import ProducerMap
from mploader.recovery.snapshot_files import SnapshotFiles
from mploader.result import ProducerInfo
from mploader.scan import Field, Marker

log = logging.getLogger(__name__)

Row = tuple[int, ...]  # a batch-table row as a tuple (``table.tolist()``), its fields at :class:`~mploader.scan.Field`
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class AppendInfo:
    """Kafka's ProducerAppendInfo (origin REPLICATION: no sequence checks)."""

    __slots__ = ("producer_id", "entry", "started")

    def __init__(self, current: ProducerEntry):
        self.producer_id = current.producer_id
        self.entry = current.copy_without_batches()
        self.started: list[tuple[int, int]] = []  # (first offset, producer id)

    def append(self, row: Row, path: str) -> CompletedTxn | None:
        """One batch: a row of the batch table as a tuple (:class:`~mploader.scan.Field`)."""
        attributes = row[Field.ATTRIBUTES]
        epoch = row[Field.PRODUCER_EPOCH]
        if attributes & ATTR_CONTROL:
            marker = row[Field.MARKER]
            if marker == Marker.EMPTY_CONTROL:
                return None
            if marker not in (Marker.ABORT, Marker.COMMIT):  # INVALID/FATAL are handled by the caller
                raise AssertionError(f"unexpected marker {marker}")
            offset = row[Field.BASE_OFFSET]
            first = self.entry.current_txn_first_offset
            completed = None if first is None else CompletedTxn(self.producer_id, first, offset, marker == Marker.ABORT)
            self.entry.maybe_update_epoch(epoch)
            self.entry.coordinator_epoch = row[Field.COORDINATOR_EPOCH]
            self.entry.current_txn_first_offset = None
            self.entry.last_timestamp = row[Field.MARKER_TIMESTAMP]
            return completed
        first_offset = row[Field.BASE_OFFSET]
        if self.entry.append_data(epoch, first_offset, row[Field.LAST_OFFSET], row[Field.BASE_SEQUENCE],
                                  row[Field.MAX_TIMESTAMP], bool(attributes & ATTR_TRANSACTIONAL), path):
            self.started.append((first_offset, self.producer_id))
        return None


class ProducerStateManager:
    def __init__(self, disk: Disk, log_dir: str, producer_id_expiration_ms: int, on_disk: SnapshotFiles, *,
                 own_view: bool = True):
        """``on_disk``: the partition's snapshot files as they are on disk, shared by its managers
        (:mod:`mploader.recovery.snapshot_files`, ``SnapshotFiles.listed`` outside a load).  This manager's view
        starts as a copy of it (Kafka's constructor lists the files) and goes stale as Kafka's does; ``on_disk``
        follows every change this manager makes.  ``own_view=False``: the view is ``on_disk`` itself, for a
        manager during whose life only it changes snapshot files (a recovered segment's: a copy per segment
        made recovery quadratic again, O(snapshots) each)."""
        self.disk = disk
        self.dir = log_dir
        self.expiration_ms = producer_id_expiration_ms
        self.producers = ProducerMap()  # Kafka's HashMap: its iteration order makes the snapshot bytes
        self.ongoing: dict[int, int] = {}  # first offset -> producer id
        self.unreplicated: dict[int, tuple[int, int]] = {}  # first offset -> (producer id, last offset)
        self.map_end_offset = 0
        self.last_snap_offset = 0
        self.on_disk = on_disk
        self.snapshots = on_disk.copy() if own_view else on_disk

    # ---- snapshot files ------------------------------------------------------------------

    def latest_snapshot_offset(self) -> int | None:
        return self.snapshots.latest()

    def _delete_snapshot(self, offset: int) -> str | None:
        """removeAndDeleteSnapshot: the file goes if this manager knows of it; its name, or None."""
        name = self.snapshots.pop(offset)
        if name is not None:
            self.on_disk.pop(offset)  # (nothing left to pop where the view is on_disk)
            if not self.on_disk.doom(offset, name):  # recoverLog defers it (recovery/snapshot_files.py)
                self.disk.delete(os.path.join(self.dir, name))
        return name

    def take_snapshot(self) -> None:
        if self.map_end_offset > self.last_snap_offset:
            name = names.segment_file_name(self.map_end_offset, names.SNAPSHOT_SUFFIX)
            data = snapshot_file_bytes(len(self.producers), self.producers.snapshot_chunks())
            path = os.path.join(self.dir, name)
            # Kafka's write does not truncate an existing file; a file whose delete was deferred is one Kafka
            # would have deleted, so it is rewritten whole
            rewrite = self.on_disk.revive(self.map_end_offset, name)
            try:
                self.disk.write(path, data, durable=True, truncate=rewrite)
            except BaseException:  # a failed write (recoverLog goes on after an IOException) may leave the file:
                if rewrite:  # Kafka deleted it before this write: the delete is still owed
                    self.on_disk.doom(self.map_end_offset, name)
                elif self.disk.exists(path):  # the next manager's listing sees it, this one's map does not
                    self.on_disk.add(self.map_end_offset, name)
                raise
            # first: wrote() keeps the entries of a new file, as a view of the bytes just written
            self.on_disk.wrote(self.map_end_offset, name, SnapshotRows(snapshot_rows(data, path)))
            if self.snapshots is not self.on_disk:
                self.snapshots.add(self.map_end_offset, name)
            self.last_snap_offset = self.map_end_offset

    def remove_stray_snapshots(self, segment_base_offsets: list[int]) -> None:
        bases = set(segment_base_offsets)
        self.snapshots = self.on_disk.copy()  # Kafka lists the directory again
        stray: int | None = None
        for off in list(self.snapshots):
            if off not in bases:
                if stray is not None:
                    self._delete_snapshot(stray)
                stray = off
        if stray is not None and bases and stray < max(bases):
            self._delete_snapshot(stray)

    def mark_snapshot_deleted(self, base_offset: int) -> str | None:
        """removeAndMarkSnapshotForDeletion (segment deletion): the file goes; its name, or None."""
        return self._delete_snapshot(base_offset)

    # ---- producer map ----------------------------------------------------------------------

    def _clear(self) -> None:
        self.producers.clear()  # HashMap.clear() keeps the table's length
        self.ongoing.clear()
        self.unreplicated.clear()

    def is_empty(self) -> bool:
        return not self.producers and not self.unreplicated

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._clear()
        for off in list(self.snapshots):
            self._delete_snapshot(off)
        self.last_snap_offset = 0
        self.map_end_offset = offset

    def truncate_and_reload(self, log_start: int, log_end: int, now_ms: int) -> None:
        for off in self.snapshots.outside(log_start, log_end):
            self._delete_snapshot(off)
        if log_end != self.map_end_offset:
            self._clear()
            self._load_from_snapshot(log_start, now_ms)
        else:
            for first, (_, last) in list(self.unreplicated.items()):
                if last < log_start:
                    del self.unreplicated[first]
            self.map_end_offset = max(self.map_end_offset, log_start)
            latest = self.latest_snapshot_offset()
            self.last_snap_offset = log_start if latest is None else latest

    def _load_from_snapshot(self, log_start: int, now_ms: int) -> None:
        while (off := self.snapshots.latest()) is not None:
            name = self.snapshots[off]
            path = os.path.join(self.dir, name)
            try:  # the file the previous recovered segment's manager just wrote is known without reading it
                written = self.on_disk.written(off, name)
                rows = rows_of(written) if written is not None else snapshot_rows(self.disk.read(path), path)
            except CorruptSnapshotError as corrupt:  # ProducerStateManager.loadFromSnapshot: WARN, delete, next
                log.warning("%s: deleting the corrupt producer snapshot %s and loading an older one (%s)", self.dir,
                            name, corrupt)
                self._delete_snapshot(off)
                continue
            rows = unexpired(rows, now_ms, self.expiration_ms)
            self.producers.load(rows)
            txn = rows["current_txn_first_offset"]
            opened = np.flatnonzero(txn >= 0)
            self.ongoing.update(zip(txn[opened].tolist(), rows["producer_id"][opened].tolist()))
            self.last_snap_offset = self.map_end_offset = off
            return
        self.last_snap_offset = self.map_end_offset = log_start

    def prepare_update(self, producer_id: int) -> AppendInfo:
        current = self.producers.get(producer_id) or ProducerEntry(producer_id)
        return AppendInfo(current)

    def ensure_producer(self, pid: int) -> None:
        """Insert an empty entry for a producer not seen yet (what prepareUpdate + update would insert)."""
        if pid not in self.producers:
            self.producers.put(ProducerEntry(pid))

    def update(self, info: AppendInfo) -> None:
        current = self.producers.get(info.producer_id)
        if current is not None:
            current.merge(info.entry)
        else:
            self.producers.put(info.entry)
        for first, pid in info.started:
            self.ongoing[first] = pid

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        for first in sorted(self.ongoing):
            if self.ongoing[first] != completed.producer_id:
                return first
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn, path: str) -> None:
        if self.ongoing.pop(completed.first_offset, None) is None:
            raise StartupFailedError(path, "IllegalArgumentException",
                                     f"transaction of producer {completed.producer_id} at {completed.first_offset} "
                                     "was not started")
        self.unreplicated[completed.first_offset] = (completed.producer_id, completed.last_offset)

    # ---- batches ---------------------------------------------------------------------------

    def load_producers_from_batches(self, rows: np.ndarray, path: str) -> None:
        """loadProducersFromRecords (§8.4): per-segment working copies, applied in the order of Kafka's HashMap of
        them, which it fills with computeIfAbsent (a new producer goes to the head of its bucket)."""
        working: dict[int, AppendInfo] = {}
        completed: list[CompletedTxn] = []
        for row in rows[rows["producer_id"] >= 0].tolist():
            if row[Field.MAGIC] < 2:
                continue
            check_marker(row, path)
            pid = row[Field.PRODUCER_ID]
            info = working.get(pid)
            if info is None:
                info = working[pid] = self.prepare_update(pid)
            c = info.append(row, path)
            if c is not None:
                completed.append(c)
        for pid in computed_hashmap_order(working):
            self.update(working[pid])
        for c in completed:
            self.complete_txn(c, path)

    def producer_infos(self) -> Mapping[int, ProducerInfo]:
        return self.producers.infos()


def unexpired(rows: np.ndarray, now_ms: int, expiration_ms: int) -> np.ndarray:
    """The snapshot rows loadFromSnapshot loads: not those of an expired producer (isProducerExpired: no open
    transaction and ``now - lastTimestamp >= producer.id.expiration.ms``, in Java's ``long``: the difference wraps,
    so a timestamp near Long.MIN_VALUE is not expired)."""
    if not len(rows):
        return rows
    since = np.int64(now_ms) - rows["timestamp"].astype(np.int64)  # an array's int64 arithmetic wraps, as Java's
    expired = (rows["current_txn_first_offset"] < 0) & (since >= expiration_ms)
    return rows[~expired] if expired.any() else rows


def check_marker(row: Row, path: str) -> None:
    """Outside segment recovery nothing catches a control batch Kafka cannot interpret: start-up fails."""
    marker = row[Field.MARKER]
    if marker == Marker.FATAL:
        raise StartupFailedError(path, "IllegalArgumentException",
                                 f"control batch at byte {row[Field.POSITION]} is not a transaction marker")
    if marker == Marker.INVALID:
        raise StartupFailedError(path, "InvalidRecordException",
                                 f"control batch at byte {row[Field.POSITION]} holds an invalid record")
