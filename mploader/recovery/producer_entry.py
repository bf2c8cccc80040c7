"""One producer's state: Kafka's ProducerStateEntry and its BatchMetadata (docs/loading.md §8).

An entry read from a snapshot holds at most one batch's metadata; :func:`entry_of_row` makes it from the
snapshot's row as ``ProducerStateManager.readSnapshot`` does, and :meth:`ProducerEntry.snapshot_row` is the row
``writeSnapshot`` makes of it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from mploader.errors import StartupFailedError
from mploader.format.records import java_int, last_sequence
from mploader.format.snapshot import ProducerSnapshotEntry
from mploader.result import ProducerInfo

NUM_BATCHES_TO_RETAIN = 5

SnapshotRow = tuple[int, int, int, int, int, int, int, int]  # a ProducerSnapshotEntry's fields, in file order


@dataclass(slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @staticmethod
    def of_batch(base_offset: int, last_offset: int, base_sequence: int, max_timestamp: int) -> BatchMetadata:
        delta = java_int(last_offset - base_offset)
        return BatchMetadata(last_sequence(base_sequence, delta), last_offset, delta, max_timestamp)


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = -1
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(default_factory=deque)

    def copy_without_batches(self) -> ProducerEntry:
        return ProducerEntry(self.producer_id, self.epoch, self.coordinator_epoch, self.last_timestamp,
                             self.current_txn_first_offset)

    def maybe_update_epoch(self, epoch: int) -> None:
        if self.epoch != epoch:
            self.batches.clear()
            self.epoch = epoch

    def add_batch_metadata(self, b: BatchMetadata) -> None:
        if len(self.batches) == NUM_BATCHES_TO_RETAIN:
            self.batches.popleft()
        self.batches.append(b)

    def add_batches(self, batches: list[BatchMetadata]) -> None:
        """add_batch_metadata for each, in order."""
        self.batches.extend(batches)
        while len(self.batches) > NUM_BATCHES_TO_RETAIN:
            self.batches.popleft()

    def append_data(self, epoch: int, base_offset: int, last_offset: int, base_sequence: int, max_timestamp: int,
                    transactional: bool, path: str) -> bool:
        """ProducerAppendInfo.appendDataBatch on this entry; True when the batch opens a transaction."""
        self.maybe_update_epoch(epoch)
        self.add_batch_metadata(BatchMetadata.of_batch(base_offset, last_offset, base_sequence, max_timestamp))
        self.last_timestamp = max_timestamp
        if self.current_txn_first_offset is not None and not transactional:
            raise StartupFailedError(path, "InvalidTxnStateException",
                                     f"non-transactional batch at offset {base_offset} from producer "
                                     f"{self.producer_id} while its transaction is open")
        if self.current_txn_first_offset is None and transactional:
            self.current_txn_first_offset = base_offset
            return True
        return False

    def merge(self, other: ProducerEntry) -> None:
        """ProducerStateEntry.update(nextEntry)."""
        self.maybe_update_epoch(other.epoch)
        for b in other.batches:
            self.add_batch_metadata(b)
        self.coordinator_epoch = other.coordinator_epoch
        self.current_txn_first_offset = other.current_txn_first_offset
        self.last_timestamp = other.last_timestamp

    def snapshot_row(self) -> SnapshotRow:
        """ProducerStateManager.writeSnapshot's fields for this entry: its last batch's, if it has one."""
        last = self.batches[-1] if self.batches else None
        return (self.producer_id, self.epoch, last.last_seq if last else -1, last.last_offset if last else -1,
                last.offset_delta if last else 0, self.last_timestamp, self.coordinator_epoch,
                -1 if self.current_txn_first_offset is None else self.current_txn_first_offset)

    def snapshot_entry(self) -> ProducerSnapshotEntry:
        return ProducerSnapshotEntry(*self.snapshot_row())

    def info(self) -> ProducerInfo:
        return ProducerInfo(*self.snapshot_row())


def entry_of_row(row: SnapshotRow) -> ProducerEntry:
    """ProducerStateManager.readSnapshot: one batch's metadata when ``lastOffset >= 0``, an open transaction when
    ``currentTxnFirstOffset >= 0``."""
    pid, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch, txn_first = row
    entry = ProducerEntry(pid, epoch, coordinator_epoch, timestamp, txn_first if txn_first >= 0 else None)
    if last_offset >= 0:
        entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
    return entry


def info_of_row(row: SnapshotRow) -> ProducerInfo:
    """What :meth:`ProducerEntry.info` says of the entry read from ``row`` (without making the entry)."""
    pid, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch, txn_first = row
    if last_offset < 0:
        last_seq, last_offset, offset_delta = -1, -1, 0
    return ProducerInfo(pid, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch,
                        txn_first if txn_first >= 0 else -1)
