"""The batch table: one row per valid batch of a scanned range, every header field Phase 2 needs; and the rows
of the index draft made from it (:mod:`mploader.scan.draft`). The compiled walk writes both layouts
(:mod:`mploader.scan.compiled` checks them).

Phase 1 fills it (:mod:`mploader.scan.walk`), the pool's workers hand it back through shared memory
row for row, and Phase 2 reads it column by column (:class:`BatchColumns`).
"""

from __future__ import annotations

import enum

import numpy as np

BATCH_TABLE = np.dtype([
    ("position", "<i8"),
    ("size", "<i8"),
    ("magic", "<i1"),
    ("attributes", "<i4"),
    ("base_offset", "<i8"),
    ("last_offset", "<i8"),
    ("max_timestamp", "<i8"),
    ("partition_leader_epoch", "<i4"),
    ("producer_id", "<i8"),
    ("producer_epoch", "<i2"),
    ("base_sequence", "<i4"),
    ("records_count", "<i4"),
    ("marker", "<i1"),  # Marker below
    ("coordinator_epoch", "<i4"),
    ("marker_timestamp", "<i8"),
])


class Field:
    """Where each field sits in a row of the table taken as a tuple (``table.tolist()``: one call for many rows,
    where each field of a numpy row is a look-up of its own; Phase 2's batch-at-a-time loops read them so)."""

    (POSITION, SIZE, MAGIC, ATTRIBUTES, BASE_OFFSET, LAST_OFFSET, MAX_TIMESTAMP, PARTITION_LEADER_EPOCH, PRODUCER_ID,
     PRODUCER_EPOCH, BASE_SEQUENCE, RECORDS_COUNT, MARKER, COORDINATOR_EPOCH, MARKER_TIMESTAMP) = range(15)


assert BATCH_TABLE.names == tuple(n.lower() for n in Field.__dict__ if n.isupper())

# a row of the index draft (mploader.scan.draft): a batch that recovery indexes, and what it offers the indexes
INDEX_DRAFT = np.dtype([
    ("row", "<i8"),  # a batch that recovery indexes (index_entry_rows)
    ("offset", "<i8"),  # its last offset: the offset index entry's key
    ("position", "<i8"),  # its position: the offset index entry's value
    ("max_timestamp", "<i8"),  # the largest timestamp up to it (at least -1): the time index candidate
    ("max_timestamp_offset", "<i8"),  # last offset of the batch holding that timestamp (the base offset if none)
])
ROW = np.dtype("<i8")  # a row number of the batch table (the draft's producer and epoch rows)
assert all(dtype == ROW for dtype, *_ in (INDEX_DRAFT.fields or {}).values())  # the compiled twin writes <i8s


class Marker(enum.IntEnum):
    """What a batch is for producer state (column ``marker`` of the batch table)."""

    NONE = -1  # a data batch, or a control batch without producer id
    ABORT = 0
    COMMIT = 1
    EMPTY_CONTROL = 2  # control batch with 0 records: ignored
    INVALID = 3  # Kafka's InvalidRecordException: the batch is kept, recovery stops after it
    FATAL = 4  # an exception Kafka does not catch: broker start-up fails if this batch is applied


class BatchColumns:
    """A batch table read column by column, each column copied out once on first use.

    The table's rows are 80 bytes wide, so every read of one column is a pass over the whole
    table; Phase 2 reads the same few columns many times."""

    __slots__ = ("table", "_cols", "_parent")

    def __init__(self, table: np.ndarray, parent: BatchColumns | None = None):
        self.table = table
        self._cols: dict[str, np.ndarray] = {}
        self._parent = parent

    def __getitem__(self, name: str) -> np.ndarray:
        col = self._cols.get(name)
        if col is None:
            if self._parent is not None:
                col = self._parent[name][: len(self.table)]
            else:
                col = np.ascontiguousarray(self.table[name])
            self._cols[name] = col
        return col

    def at(self, name: str, index: np.ndarray) -> np.ndarray:
        """``self[name][index]`` for a few rows, without copying the column out when it is not yet."""
        col = self._cols.get(name)
        src: np.ndarray = self.table[name] if col is None else col
        rows: np.ndarray = src[index]
        return rows

    def __len__(self) -> int:
        return len(self.table)

    def head(self, n: int) -> BatchColumns:
        """The first ``n`` rows, sharing this table's columns."""
        return self if n >= len(self.table) else BatchColumns(self.table[:n], self)
