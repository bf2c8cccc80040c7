"""The iteration order of a ``java.util.HashMap<Long, V>`` filled with ``put``, for millions of keys at once.

While no bucket holds a 9th key, HashMap is a table of plain linked lists: a key goes to the tail of its
bucket, a resize splits each list keeping its order, and iteration walks the buckets in ascending order.  The
order is then the keys sorted by their bucket in the final table, in put order within a bucket: one sort.

A bucket that reaches 9 keys is treeified (``treeifyBin``), or, in a table under 64 slots, doubles the table
early.  :class:`~mploader.format.java_hashmap.JavaLongHashMap` models both; here it takes only the keys they
touch: the first keys, put while the table is under 64 slots, and every key of a bucket that is treeified
(that bucket's keys, and those its later splits receive).  Its order replaces the sort's for those buckets.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mploader.format.java_hashmap import JavaLongHashMap

INITIAL_CAPACITY = 16  # HashMap's DEFAULT_INITIAL_CAPACITY
_MIN_TREEIFY_CAPACITY = 64  # below it, treeifyBin resizes the table instead
_PLAIN_MAX = 8  # a bucket's 9th key makes putVal call treeifyBin
_HEAD = 64  # more keys than a table under 64 slots holds
_CHUNK = 1 << 16  # keys handled at a time: the temporaries stay small

KeysAt = Callable[[np.ndarray], np.ndarray]  # positions in put order -> the keys there (int64)


class _Table(JavaLongHashMap):
    """The model, from a table of ``capacity`` slots, grown on demand as the whole map grows."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def grow_to(self, capacity: int) -> None:
        while self.capacity < capacity:
            self._resize()


def spread_hashes(keys: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """HashMap.hash(Long) of each key: ``Long.hashCode`` spread by ``h ^ (h >>> 16)``, as uint32 (into ``out``)."""
    if out is None:
        out = np.empty(len(keys), np.uint32)
    for start in range(0, len(keys), _CHUNK):
        u = np.asarray(keys[start:start + _CHUNK], np.int64).view(np.uint64)
        h = (u ^ (u >> np.uint64(32))).astype(np.uint32)
        out[start:start + _CHUNK] = h ^ (h >> np.uint32(16))
    return out


def capacity_after(capacity: int, size: int) -> int:
    """The table's length once ``size`` keys are in (putVal doubles it when the size passes 3/4 of it)."""
    while size > capacity * 3 // 4:
        capacity *= 2
    return capacity


def _head(n: int, capacity: int, keys_at: KeysAt) -> tuple[_Table, list[int]]:
    """The model after the keys put while the table is under 64 slots (where a 9th key resizes early), and
    those keys."""
    table = _Table(capacity)
    first = keys_at(np.arange(min(n, _HEAD)))
    put: list[int] = []
    for key in first.tolist():
        if table.capacity >= _MIN_TREEIFY_CAPACITY:
            break
        table.put(key)
        put.append(key)
    return table, put


def table_length(n: int, capacity: int, keys_at: KeysAt) -> int:
    """The length of a table of ``capacity`` slots once the ``n`` keys are put (no early resize past 64 slots)."""
    table, _ = _head(n, capacity, keys_at)
    return capacity_after(table.capacity, n)


def _treeified(hashes: np.ndarray, capacity: int) -> list[tuple[int, np.ndarray]]:
    """Each table length from ``capacity`` on with the buckets that reach 9 keys in it.  A bucket only grows
    between two resizes, so each table is looked at once its last key is in: sorted, 9 keys of one bucket are
    8 places apart."""
    n = len(hashes)
    out = []
    while True:
        end = min(n, capacity * 3 // 4 + 1)  # the key that makes the size pass the threshold is put first
        if end > _PLAIN_MAX:
            buckets = hashes[:end] & np.uint32(capacity - 1)
            buckets.sort()
            full = buckets[_PLAIN_MAX:] == buckets[:-_PLAIN_MAX]
            if full.any():
                out.append((capacity, np.unique(buckets[_PLAIN_MAX:][full])))
        if end == n:
            return out
        capacity *= 2


def bucket_order(hashes: np.ndarray, capacity: int) -> np.ndarray:
    """Positions of the keys sorted by bucket, in put order within one: a single sort of (bucket, position)."""
    n = len(hashes)
    if n >= 1 << 32:
        return np.argsort(hashes & np.uint32(capacity - 1), kind="stable")
    packed = (hashes & np.uint32(capacity - 1)).astype(np.uint64)
    packed <<= np.uint64(32)
    for start in range(0, n, _CHUNK):
        packed[start:start + _CHUNK] |= np.arange(start, min(n, start + _CHUNK), dtype=np.uint64)
    packed.sort()
    packed &= np.uint64(0xFFFFFFFF)
    return packed.astype(np.uint32)


def put_order(hashes: np.ndarray, capacity: int, keys_at: KeysAt) -> tuple[np.ndarray, int]:
    """The iteration order of a HashMap of ``capacity`` slots into which distinct keys of these ``hashes`` were
    put in order, as positions in put order; and the table's length after.  ``keys_at`` gives the keys at some
    positions: those the model takes."""
    n = len(hashes)
    table, head = _head(n, capacity, keys_at)
    if len(head) == n:
        position = {k: i for i, k in enumerate(head)}
        return np.array([position[k] for k in table.order()], np.intp), table.capacity
    start = table.capacity
    final = capacity_after(start, n)
    order = bucket_order(hashes, final)
    treeified = _treeified(hashes, start)
    if not treeified:
        return order, final
    touched = np.zeros(n, bool)
    for length, buckets in treeified:
        touched |= np.isin(hashes & np.uint32(length - 1), buckets)
    put = np.union1d(np.arange(len(head)), np.flatnonzero(touched))
    model = _Table(capacity)
    keys = keys_at(put).tolist()
    for i, key in zip(put.tolist(), keys):
        if i >= len(head):  # past the head the table grows with the whole map's size
            model.grow_to(capacity_after(start, i))
        model.put(key)
    model.grow_to(final)
    position = dict(zip(keys, put.tolist()))
    order[touched[order]] = [position[k] for k in model.order() if touched[position[k]]]
    return order, final
