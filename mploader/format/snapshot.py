"""Producer-state snapshots, ``<20-digit offset>.snapshot`` (FORMATS.md §12).

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

import logging
import os
import struct
from dataclasses import dataclass
from typing import Iterable, Sequence

from crc32c import crc32c

from ..errors import CorruptSnapshotError

log = logging.getLogger(__name__)

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
    with open(path, "rb") as f:
        return parse_snapshot(f.read(), os.fspath(path))


# --------------------------------------------------------------------------------------------
# java.util.HashMap<Long, V> iteration order


def _java_long_hash(key: int) -> int:
    u = key & 0xFFFFFFFFFFFFFFFF
    h = (u ^ (u >> 32)) & 0xFFFFFFFF  # Long.hashCode
    return h ^ (h >> 16)  # HashMap.hash spreads the high bits (unsigned shift)


_INITIAL_CAPACITY = 16
_TREEIFY_THRESHOLD = 8  # a bin holding this many nodes gets a 9th => treeifyBin
_MIN_TREEIFY_CAPACITY = 64  # below this, treeifyBin resizes the table instead


def java_hashmap_capacity(max_size: int) -> int:
    """Table size of a HashMap that held at most ``max_size`` entries (it never shrinks).

    Size rule only; :class:`JavaLongHashMap` also applies the resize that 9 keys
    colliding in one bucket of a table shorter than 64 trigger.
    """
    capacity = _INITIAL_CAPACITY
    while max_size > capacity * 3 // 4:
        capacity *= 2
    return capacity


class JavaLongHashMap:
    """The key order of a ``java.util.HashMap<Long, V>`` under ``put``/``remove``.

    Models the table length (doubling when the size exceeds 0.75 x length, and when a
    bucket of a table shorter than 64 receives its 9th key) and the bucket lists
    (new keys appended; resizes keep relative order).  A bucket that Java would turn
    into a red-black tree (9th key in one bucket at length >= 64) is recorded in ``tree_bins`` and
    logged: its keys keep insertion order here, which may differ from Java's tree order.
    """

    def __init__(self) -> None:
        self.capacity = _INITIAL_CAPACITY
        self._keys: dict[int, None] = {}  # live keys in the order they were (last) inserted
        self._bucket_sizes: dict[int, int] = {}
        self.tree_bins: set[int] = set()  # buckets Java would have turned into trees

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def _bucket(self, key: int) -> int:
        return _java_long_hash(key) & (self.capacity - 1)

    def _resize(self) -> None:
        self.capacity *= 2
        sizes: dict[int, int] = {}
        for k in self._keys:
            b = self._bucket(k)
            sizes[b] = sizes.get(b, 0) + 1
        self._bucket_sizes = sizes

    def put(self, key: int) -> None:
        if key in self._keys:  # replacing a value keeps the node where it is
            return
        b = self._bucket(key)
        before = self._bucket_sizes.get(b, 0)
        self._keys[key] = None
        self._bucket_sizes[b] = before + 1
        if before >= _TREEIFY_THRESHOLD:
            if self.capacity >= _MIN_TREEIFY_CAPACITY:
                # Java turns the bucket into a red-black tree, whose list order is not modelled: the
                # state is right, only the order of these keys in a snapshot file may differ from Kafka's
                if not self.tree_bins:
                    log.warning("%d producer ids share HashMap bucket %d of %d: snapshot entry order inside "
                                "that bucket may differ from Kafka's (tree bins are not modelled)",
                                before + 1, b, self.capacity)
                self.tree_bins.add(b)
            else:
                self._resize()
        if len(self._keys) > self.capacity * 3 // 4:
            self._resize()

    def remove(self, key: int) -> None:
        if key in self._keys:
            del self._keys[key]
            self._bucket_sizes[self._bucket(key)] -= 1

    def order(self) -> list[int]:
        """Iteration order: buckets ascending, insertion order inside a bucket."""
        return java_hashmap_order(self._keys, self.capacity)


def java_hashmap_order(keys_in_insertion_order: Iterable[int], capacity: int | None = None) -> list[int]:
    """The order in which a HashMap iterates its Long keys.

    Buckets ascending; inside a bucket, insertion order (resizes split buckets
    preserving relative order).  Without ``capacity`` the table length is that of a
    new map into which the keys were put in this order (:class:`JavaLongHashMap`);
    pass ``capacity`` for a map that held more keys before some were removed.
    Tree bins (>= 9 colliding keys at capacity >= 64) keep insertion order (logged; not Java's order).
    """
    keys = list(dict.fromkeys(keys_in_insertion_order))
    if capacity is None:
        sim = JavaLongHashMap()
        for k in keys:
            sim.put(k)
        cap = sim.capacity
    else:
        cap = capacity
    return [k for _, _, k in sorted((_java_long_hash(k) & (cap - 1), i, k) for i, k in enumerate(keys))]
