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
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

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


def snapshot_bytes(entries: Sequence[ProducerSnapshotEntry]) -> bytes:
    """Serialise entries in the given order (use :func:`java_hashmap_order` for Kafka's)."""
    body = bytearray(struct.pack(">i", len(entries)))
    for e in entries:
        body += ENTRY.pack(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta,
                           e.timestamp, e.coordinator_epoch, e.current_txn_first_offset)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)


def parse_snapshot(data: bytes, path: str | None = None) -> list[ProducerSnapshotEntry]:
    """Entries in file order; any deviation is a :class:`CorruptSnapshotError` (Kafka deletes the file).

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
    actual = crc32c(data[6:])
    if actual != crc:
        raise CorruptSnapshotError(path, 2, f"snapshot CRC mismatch: stored {crc:#010x}, computed {actual:#010x}")
    return [ProducerSnapshotEntry(*ENTRY.unpack_from(data, HEADER.size + i * ENTRY.size)) for i in range(count)]


def read_snapshot(path: str | os.PathLike[str]) -> list[ProducerSnapshotEntry]:
    return parse_snapshot(read_file(path), os.fspath(path))  # a regular file, never through a link
