"""Producer-state snapshots, ``<20-digit offset>.snapshot`` (docs/formats.md §12).

Layout (Kafka's generated ``ProducerSnapshot`` message, version 1)::

    0   int16   version = 1
    2   uint32  crc = CRC-32C of bytes [6, EOF)
    6   int32   entry count n
    10  46 * n  entries:
                producerId int64 | epoch int16 | lastSequence int32 | lastOffset int64 |
                offsetDelta int32 | timestamp int64 | coordinatorEpoch int32 | currentTxnFirstOffset int64

Kafka writes the entries in ``java.util.HashMap`` iteration order of its
producer map; :func:`java_hashmap_order` reproduces it.

A snapshot holds one entry per producer, millions of them on a busy broker, so the entries are also read
and written as rows of :data:`SNAPSHOT_ENTRY`: a view of the file's bytes, not an object per producer.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from mploader.errors import CorruptSnapshotError
from mploader.format.crc import crc32c
from mploader.format.files import read_file
from mploader.format.java_hashmap import (  # re-exported: the order snapshots are written in
    JavaLongHashMap as JavaLongHashMap,
    computed_hashmap_order as computed_hashmap_order,
    java_hashmap_order as java_hashmap_order,
)

SNAPSHOT_VERSION = 1
HEADER = struct.Struct(">hIi")
ENTRY = struct.Struct(">qhiqiqiq")
assert (HEADER.size, ENTRY.size) == (10, 46)
# one entry as the file holds it (big-endian, packed): ProducerSnapshot's ProducerEntry fields
SNAPSHOT_ENTRY = np.dtype([
    ("producer_id", ">i8"), ("epoch", ">i2"), ("last_sequence", ">i4"), ("last_offset", ">i8"),
    ("offset_delta", ">i4"), ("timestamp", ">i8"), ("coordinator_epoch", ">i4"), ("current_txn_first_offset", ">i8"),
])
assert SNAPSHOT_ENTRY.itemsize == ENTRY.size


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


class SnapshotRows(Sequence[ProducerSnapshotEntry]):
    """A snapshot's entries held as rows of :data:`SNAPSHOT_ENTRY` (an entry object made only when asked for)."""

    __slots__ = ("rows",)

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> ProducerSnapshotEntry: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[ProducerSnapshotEntry]: ...

    def __getitem__(self, i: int | slice) -> ProducerSnapshotEntry | Sequence[ProducerSnapshotEntry]:
        if isinstance(i, slice):
            return entries_of_rows(self.rows[i])
        return ProducerSnapshotEntry(*self.rows[i].tolist())

    def __iter__(self) -> Iterator[ProducerSnapshotEntry]:
        return iter(entries_of_rows(self.rows))


def entries_of_rows(rows: np.ndarray) -> list[ProducerSnapshotEntry]:
    return [ProducerSnapshotEntry(*row) for row in rows.tolist()]


def snapshot_bytes(entries: Sequence[ProducerSnapshotEntry]) -> bytes:
    """Serialise entries in the given order (use :func:`java_hashmap_order` for Kafka's)."""
    body = bytearray(struct.pack(">i", len(entries)))
    for e in entries:
        body += ENTRY.pack(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta,
                           e.timestamp, e.coordinator_epoch, e.current_txn_first_offset)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)


def snapshot_file_bytes(count: int, chunks: Iterable[np.ndarray]) -> bytes:
    """ProducerStateManager.writeSnapshot's bytes for ``count`` entries given in file order as consecutive chunks
    of :data:`SNAPSHOT_ENTRY` rows.  The file is assembled in place (a ``BytesIO`` sized first hands over its
    buffer), so writing it costs its size once, not once per copy."""
    size = HEADER.size + count * ENTRY.size
    out = io.BytesIO()
    out.seek(size - 1)
    out.write(b"\0")
    out.seek(6)
    out.write(struct.pack(">i", count))
    crc = crc32c(struct.pack(">i", count))
    written = 0
    for chunk in chunks:
        view = np.ascontiguousarray(chunk, SNAPSHOT_ENTRY).data.cast("B")
        crc = crc32c(view, crc)
        out.write(view)
        written += len(chunk)
    if written != count:
        raise ValueError(f"{written} snapshot entries given for a count of {count}")
    out.seek(0)
    out.write(struct.pack(">hI", SNAPSHOT_VERSION, crc))
    return out.getvalue()


def snapshot_rows(data: bytes, path: str | None = None) -> np.ndarray:
    """The entries as rows of :data:`SNAPSHOT_ENTRY`, a read-only view of ``data``, in file order; any deviation
    is a :class:`CorruptSnapshotError` (Kafka deletes the file).

    Like Kafka's reader, bytes after the last entry are not an error by themselves: they are
    inside the CRC range, so they only make the file corrupt when the stored CRC does not
    cover them (the usual case: a shorter snapshot written over a longer one).
    """
    if len(data) < HEADER.size:
        raise CorruptSnapshotError(path, 0, f"snapshot of {len(data)} bytes is shorter than its 10-byte header")
    version, crc, count = HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(path, 0, f"snapshot version {version}, expected {SNAPSHOT_VERSION}")
    if count < 0 or HEADER.size + count * ENTRY.size > len(data):
        raise CorruptSnapshotError(path, 6, f"entry count {count} does not fit in {len(data)} bytes")
    actual = crc32c(memoryview(data)[6:])
    if actual != crc:
        raise CorruptSnapshotError(path, 2, f"snapshot CRC mismatch: stored {crc:#010x}, computed {actual:#010x}")
    return np.frombuffer(data, SNAPSHOT_ENTRY, count, HEADER.size)


def parse_snapshot(data: bytes, path: str | None = None) -> list[ProducerSnapshotEntry]:
    """Entries in file order; any deviation is a :class:`CorruptSnapshotError` (:func:`snapshot_rows`)."""
    return entries_of_rows(snapshot_rows(data, path))


def read_snapshot(path: str | os.PathLike[str]) -> list[ProducerSnapshotEntry]:
    return parse_snapshot(read_file(path), os.fspath(path))  # a regular file, never through a link


def rows_of(entries: Sequence[ProducerSnapshotEntry]) -> np.ndarray:
    """``entries`` as rows of :data:`SNAPSHOT_ENTRY` (those of :class:`SnapshotRows` as they are)."""
    if isinstance(entries, SnapshotRows):
        return entries.rows
    return np.array([(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta, e.timestamp,
                      e.coordinator_epoch, e.current_txn_first_offset) for e in entries], SNAPSHOT_ENTRY)
