"""Kafka's producer map, ``ProducerStateManager.producers`` (a ``HashMap<Long, ProducerStateEntry>``), in the
memory of its snapshot.

A snapshot may list millions of producers, and a load touches few of them.  The map keeps the entries it
loaded from a snapshot as that snapshot's rows (:data:`~mploader.format.snapshot.SNAPSHOT_ENTRY`, a view of the
file's bytes) with their producer ids sorted beside them for lookups, and makes a :class:`ProducerEntry` only
of a producer the load looks up or adds.  A snapshot is written by merging both, chunk by chunk, in the
HashMap's iteration order (:mod:`mploader.format.hashmap_order`).

Each key has a slot, its place in put order: the loaded rows first, then the keys put after the load.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView

import numpy as np

from mploader.format.hashmap_order import INITIAL_CAPACITY, put_order, spread_hashes, table_length
from mploader.format.snapshot import SNAPSHOT_ENTRY
from mploader.recovery.producer_entry import ProducerEntry, SnapshotRow, entry_of_row, info_of_row
from mploader.result import ProducerInfo

CHUNK = 1 << 16  # snapshot rows handled at a time: bounds the copies a write or a report makes
_NO_ROWS = np.empty(0, SNAPSHOT_ENTRY)
_NO_IDS = np.empty(0, np.int64)


class ProducerMap:
    """The producers of one ProducerStateManager: snapshot rows, plus entries for those the load touched."""

    __slots__ = ("_added", "_at", "_ids", "_live", "_rows", "_start_capacity")

    def __init__(self) -> None:
        self._rows = _NO_ROWS  # the entries a snapshot loaded, in put order (never changed: a change goes to _live)
        self._ids = _NO_IDS  # their producer ids, sorted
        self._at = _NO_IDS  # the row of each of those ids
        self._live: dict[int, ProducerEntry] = {}  # the producers looked up or put since the load: their entries
        self._added: dict[int, int] = {}  # keys put after the load (no row): their slot after the rows'
        self._start_capacity = INITIAL_CAPACITY  # the table's length when it was last emptied

    def __len__(self) -> int:
        return len(self._rows) + len(self._added)

    def __iter__(self) -> Iterator[int]:
        """The producer ids in put order (what a LinkedHashMap would iterate)."""
        return _ids_in_put_order(self._rows, self._added)

    def __contains__(self, pid: object) -> bool:
        return isinstance(pid, int) and (pid in self._live or self._row_of(pid) >= 0)

    def __getitem__(self, pid: int) -> ProducerEntry:
        entry = self.get(pid)
        if entry is None:
            raise KeyError(pid)
        return entry

    def _row_of(self, pid: int) -> int:
        """The loaded row of ``pid``, or -1."""
        ids = self._ids
        if not len(ids):
            return -1
        i = int(np.searchsorted(ids, pid))
        return int(self._at[i]) if i < len(ids) and ids[i] == pid else -1

    def get(self, pid: int) -> ProducerEntry | None:
        """HashMap.get; a loaded producer's entry is made from its row the first time (readSnapshot's)."""
        entry = self._live.get(pid)
        if entry is None and len(self._rows):
            row = self._row_of(pid)
            if row >= 0:
                entry = self._live[pid] = entry_of_row(self._rows[row].tolist())
        return entry

    def put(self, entry: ProducerEntry) -> None:
        """HashMap.put: a new key takes the next slot, a key already there keeps its own."""
        pid = entry.producer_id
        if pid not in self._live and self._row_of(pid) < 0:
            self._added[pid] = len(self._added)
        self._live[pid] = entry

    def items(self) -> Iterator[tuple[int, ProducerEntry]]:
        """Every producer with its entry, in put order (each entry made: for small maps)."""
        for pid in self:
            yield pid, self[pid]

    def load(self, rows: np.ndarray) -> None:
        """loadProducerEntry of each snapshot row, in file order, into this empty map: a producer listed twice keeps
        the slot of its first row and the entry of its last, as HashMap.put leaves it."""
        assert not len(self), "a snapshot is loaded into an emptied map"
        ids = rows["producer_id"].astype(np.int64)
        at = np.argsort(ids)
        ids.sort()  # = ids[at], without a second copy
        if len(at) < 2**31:
            at = at.astype(np.int32)
        twice = ids[1:] == ids[:-1]
        if twice.any():
            rows, ids, at = _first_slot_last_entry(rows, ids, at, twice)
        self._rows, self._ids, self._at = rows, ids, at

    def clear(self) -> None:
        """HashMap.clear: every key goes, the table keeps its length."""
        if len(self):
            self._start_capacity = self._capacity()
        self._rows, self._ids, self._at = _NO_ROWS, _NO_IDS, _NO_IDS
        self._live = {}
        self._added = {}

    # ---- iteration order ---------------------------------------------------------------------------------------

    def _hashes(self) -> np.ndarray:
        out = np.empty(len(self), np.uint32)
        spread_hashes(self._rows["producer_id"], out[:len(self._rows)])
        spread_hashes(np.fromiter(self._added, np.int64, len(self._added)), out[len(self._rows):])
        return out

    def _keys_at(self, slots: np.ndarray) -> np.ndarray:
        """The producer ids in these slots."""
        slots = np.asarray(slots, np.intp)
        added = np.fromiter(self._added, np.int64, len(self._added))
        loaded = slots < len(self._rows)
        keys = np.empty(len(slots), np.int64)
        keys[loaded] = self._rows["producer_id"][slots[loaded]]
        keys[~loaded] = added[slots[~loaded] - len(self._rows)]
        return keys

    def _capacity(self) -> int:
        return table_length(len(self), self._start_capacity, self._keys_at)

    def _slots_in_order(self) -> np.ndarray:
        """Every key's slot, in the HashMap's iteration order."""
        return put_order(self._hashes(), self._start_capacity, self._keys_at)[0]

    def order(self) -> list[int]:
        """The producer ids in the HashMap's iteration order."""
        order: list[int] = self._keys_at(self._slots_in_order()).tolist()
        return order

    # ---- what a snapshot writes, what a load reports ----------------------------------------------------------

    def _live_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The slots of the producers that have an entry, and the snapshot rows of those entries."""
        loaded = [pid for pid in self._live if pid not in self._added]
        slots = np.empty(len(self._live), np.intp)
        if loaded:
            slots[:len(loaded)] = self._at[np.searchsorted(self._ids, np.array(loaded, np.int64))]
        slots[len(loaded):] = np.fromiter(self._added.values(), np.intp, len(self._added)) + len(self._rows)
        entries = [self._live[pid] for pid in loaded] + [self._live[pid] for pid in self._added]
        return slots, np.array([e.snapshot_row() for e in entries], SNAPSHOT_ENTRY)

    def snapshot_chunks(self) -> Iterator[np.ndarray]:
        """ProducerStateManager.writeSnapshot's entries, in the HashMap's iteration order, as consecutive chunks of
        rows: a loaded row as its entry would write it, an entry as it is now.  The order is worked out here, before
        the caller makes room for the file."""
        slots = self._slots_in_order()
        live_slots, live_rows = self._live_rows()
        live_places = _places(slots, live_slots)
        by_place = np.argsort(live_places)
        return self._chunks(slots, live_places[by_place], live_rows[by_place])

    def _chunks(self, slots: np.ndarray, live_places: np.ndarray, live_rows: np.ndarray) -> Iterator[np.ndarray]:
        for start in range(0, len(slots), CHUNK):
            part = slots[start:start + CHUNK]
            chunk = np.take(self._rows, part, mode="clip") if len(self._rows) else np.empty(len(part), SNAPSHOT_ENTRY)
            _as_entries_write(chunk)
            i, j = np.searchsorted(live_places, (start, start + len(part)))
            chunk[live_places[i:j] - start] = live_rows[i:j]
            yield chunk

    def infos(self) -> ProducerInfos:
        """The producers as a load reports them, as they are now."""
        return ProducerInfos(self._rows, self._ids, self._at, {pid: e.info() for pid, e in self._live.items()},
                             list(self._added))


def _places(order: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Where each of ``slots`` comes in ``order`` (a permutation of the slots)."""
    if not len(slots):
        return slots
    n = len(order)
    place = np.empty(n, np.int32 if n < 2**31 else np.intp)
    place[order] = np.arange(n, dtype=place.dtype)
    places: np.ndarray = place[slots]
    return places


def _first_slot_last_entry(rows: np.ndarray, ids: np.ndarray, at: np.ndarray,
                           twice: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows with each producer once, where its first row was and as its last row says (``ids`` sorted, ``at`` the
    row of each; ``twice``: an id equal to the one before)."""
    head = np.flatnonzero(np.concatenate(([True], ~twice)))
    first, last = np.minimum.reduceat(at, head), np.maximum.reduceat(at, head)
    by_first = np.argsort(first)
    new_at = np.empty(len(head), at.dtype)
    new_at[by_first] = np.arange(len(head))
    return rows[last[by_first]], ids[head], new_at


def _as_entries_write(rows: np.ndarray) -> None:
    """A snapshot row as the entry read from it writes it again: no batch (lastOffset < 0) writes -1, -1, 0, no
    transaction (currentTxnFirstOffset < 0) writes -1 (ProducerStateEntry's empty batch list and OptionalLong)."""
    no_batch = rows["last_offset"] < 0
    if no_batch.any():
        rows["last_sequence"][no_batch] = -1
        rows["last_offset"][no_batch] = -1
        rows["offset_delta"][no_batch] = 0
    no_txn = rows["current_txn_first_offset"] < 0
    if no_txn.any():
        rows["current_txn_first_offset"][no_txn] = -1


class ProducerInfos(Mapping[int, ProducerInfo]):
    """``LoadedLog.producers``: producer id -> :class:`ProducerInfo`, in put order.  A loaded producer that the
    load did not touch is read from its snapshot row when asked for."""

    def __init__(self, rows: np.ndarray, ids: np.ndarray, at: np.ndarray, live: dict[int, ProducerInfo],
                 added: list[int]) -> None:
        self._rows, self._ids, self._at = rows, ids, at
        self._live = live
        self._added = added

    def __len__(self) -> int:
        return len(self._rows) + len(self._added)

    def __iter__(self) -> Iterator[int]:
        return _ids_in_put_order(self._rows, self._added)

    def __getitem__(self, pid: int) -> ProducerInfo:
        info = self._live.get(pid)
        if info is not None:
            return info
        ids = self._ids
        i = int(np.searchsorted(ids, pid)) if len(ids) else 0
        if i < len(ids) and ids[i] == pid:
            row: SnapshotRow = self._rows[int(self._at[i])].tolist()
            return info_of_row(row)
        raise KeyError(pid)

    def pairs(self) -> Iterator[tuple[int, ProducerInfo]]:
        """(producer id, info) in put order, a chunk of rows read at a time."""
        live = self._live
        for start in range(0, len(self._rows), CHUNK):
            for row in self._rows[start:start + CHUNK].tolist():
                info = live.get(row[0])
                yield row[0], info if info is not None else info_of_row(row)
        for pid in self._added:
            yield pid, live[pid]

    def items(self) -> ItemsView[int, ProducerInfo]:
        return _Items(self)

    def values(self) -> ValuesView[ProducerInfo]:
        return _Values(self)

    def __repr__(self) -> str:
        return f"ProducerInfos({dict(self.pairs())!r})"


class _Items(ItemsView[int, ProducerInfo]):
    def __init__(self, infos: ProducerInfos) -> None:
        super().__init__(infos)
        self._infos = infos

    def __iter__(self) -> Iterator[tuple[int, ProducerInfo]]:
        return self._infos.pairs()


class _Values(ValuesView[ProducerInfo]):
    def __init__(self, infos: ProducerInfos) -> None:
        super().__init__(infos)
        self._infos = infos

    def __iter__(self) -> Iterator[ProducerInfo]:
        return (info for _, info in self._infos.pairs())


def _ids_in_put_order(rows: np.ndarray, added: Iterable[int]) -> Iterator[int]:
    """The snapshot's rows' producer ids, a chunk at a time (no list of millions), then the ids put after it."""
    for start in range(0, len(rows), CHUNK):
        yield from rows["producer_id"][start:start + CHUNK].tolist()
    yield from added
