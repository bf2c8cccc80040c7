"""Index files: ``.index``, ``.timeindex`` and ``.txnindex`` (docs/formats.md §8-§11).

Entry layouts (big-endian, no header, no checksum)::

    .index      relativeOffset int32 | position int32                            8 bytes
    .timeindex  timestamp int64 | relativeOffset int32                            12 bytes
    .txnindex   version int16 | producerId int64 | firstOffset int64 |
                lastOffset int64 | lastStableOffset int64                          34 bytes

An offset or time index opened by Kafka counts *every* slot up to the file
length as an entry (``entries = length // entry_size``), zero-filled
preallocated slots included: we do the same and never look for the "real" end.
The views below are numpy arrays over the mapped bytes, so checks over all
entries are vectorised.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from dataclasses import astuple, dataclass

import numpy as np

from mploader.errors import CorruptIndexError, StartupFailedError
from mploader.format.files import open_regular, read_file, read_to, sparse

OFFSET_ENTRY = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
TIME_ENTRY = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])
TXN_ENTRY = np.dtype([("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"),
                      ("last_offset", ">i8"), ("last_stable_offset", ">i8")])
assert (OFFSET_ENTRY.itemsize, TIME_ENTRY.itemsize, TXN_ENTRY.itemsize) == (8, 12, 34)

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024


def round_down(n: int, entry_size: int) -> int:
    return n - n % entry_size


def max_entries(max_index_size: int, entry_size: int) -> int:
    return max_index_size // entry_size


def map_entries(path: str | os.PathLike[str], dtype: np.dtype, *, random_access: bool = False) -> np.ndarray:
    """Read-only numpy view over every whole entry of an index file (Kafka's view of it).

    The mapping lives as long as the returned array.  An empty file gives an empty array.
    ``random_access=True`` advises the kernel not to read ahead: much faster when only a few
    entries are touched (first/last entry, lookups) in a big preallocated file -- touching
    the last slot of a fresh sparse 10 MiB index otherwise costs milliseconds of readahead
    -- but slower for a scan of every entry.
    """
    fd, st = open_regular(path)
    try:
        count = st.st_size // dtype.itemsize
        if count == 0:
            return np.empty(0, dtype)
        if sparse(st):  # a hole read through a mapping on a full tmpfs is a SIGBUS: read it
            return np.frombuffer(read_to(fd, count * dtype.itemsize), dtype, count=count)
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    if random_access and hasattr(mm, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        mm.madvise(mmap.MADV_RANDOM)
    return np.frombuffer(mm, dtype, count=count)


def entries_from_bytes(data: bytes | memoryview | mmap.mmap, dtype: np.dtype) -> np.ndarray:
    return np.frombuffer(data, dtype, count=len(data) // dtype.itemsize)


# --------------------------------------------------------------------------------------------
# Writers: the bytes Kafka writes for a list of entries, and its preallocation rule


def offset_index_bytes(base_offset: int, offsets: np.ndarray | list[int], positions: np.ndarray | list[int],
                       *, file_size: int | None = None) -> bytes:
    """Serialise offset-index entries; ``file_size`` pads with zeros (preallocated file)."""
    arr = np.empty(len(offsets), OFFSET_ENTRY)
    arr["relative_offset"] = np.asarray(offsets, dtype=np.int64) - base_offset
    arr["position"] = positions
    return _pad(arr.tobytes(), file_size, OFFSET_ENTRY.itemsize)


def time_index_bytes(base_offset: int, timestamps: np.ndarray | list[int], offsets: np.ndarray | list[int],
                     *, file_size: int | None = None) -> bytes:
    arr = np.empty(len(offsets), TIME_ENTRY)
    arr["timestamp"] = timestamps
    arr["relative_offset"] = np.asarray(offsets, dtype=np.int64) - base_offset
    return _pad(arr.tobytes(), file_size, TIME_ENTRY.itemsize)


def txn_index_bytes(entries: Sequence[AbortedTxn | tuple[int, int, int, int]]) -> bytes:
    """Serialise aborted transactions, version 0: AbortedTxn or (producer id, first, last, last stable offset)."""
    arr = np.zeros(len(entries), TXN_ENTRY)
    if entries:
        columns = np.array([e if isinstance(e, tuple) else astuple(e) for e in entries], np.int64).T
        for name, col in zip(("producer_id", "first_offset", "last_offset", "last_stable_offset"), columns):
            arr[name] = col
    return arr.tobytes()


def _pad(data: bytes, file_size: int | None, entry_size: int) -> bytes:
    if file_size is None:
        return data
    size = round_down(file_size, entry_size)
    if len(data) > size:
        raise ValueError(f"{len(data)} bytes of entries do not fit an index of {size} bytes")
    return data + bytes(size - len(data))


def written_entries(entries: np.ndarray) -> np.ndarray:
    """An index's entries before the all-zero slots at the end of a preallocated file.

    Kafka appends entries in order, so the written ones are a prefix and the unused slots an all-zero tail (a
    real offset-index entry never has position 0, a real time-index entry never timestamp 0 at relative
    offset 0 after others).  The boundary is found by bisection: a 10 MiB preallocated index costs a few page
    reads, not a pass over 1.3 million slots (a zeroed entry inside the written prefix may hide the entries
    after it from this view)."""
    fields = entries.dtype.names or ()

    def unused(i: int) -> bool:
        return all(entries[f][i] == 0 for f in fields)

    n = len(entries)
    if not n or not unused(n - 1):
        return entries  # the usual case: a trimmed index, its last slot written
    lo, hi = 0, n - 1  # slot hi is unused; the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if unused(mid):
            hi = mid
        else:
            lo = mid + 1
    return entries[:lo]


# --------------------------------------------------------------------------------------------
# Sanity checks: Kafka's (OffsetIndex/TimeIndex/TransactionIndex.sanityCheck), vectorised


@dataclass(frozen=True, slots=True)
class IndexProblem:
    path: str
    reason: str


def offset_index_problem(path: str, base_offset: int, file_length: int, entries: np.ndarray) -> IndexProblem | None:
    """Kafka's OffsetIndex.sanityCheck (not run at load since 2.3; `index_check="sanity"`)."""
    if len(entries) and base_offset + int(entries["relative_offset"][-1]) < base_offset:
        return IndexProblem(path, f"last offset {base_offset + int(entries['relative_offset'][-1])} "
                                  f"is less than the base offset {base_offset}")
    if file_length % OFFSET_ENTRY.itemsize:
        return IndexProblem(path, f"length {file_length} is not a multiple of 8")
    return None


def time_index_problem(path: str, base_offset: int, file_length: int, entries: np.ndarray) -> IndexProblem | None:
    """Kafka's TimeIndex.sanityCheck, judging the last slot as Kafka does (preallocated tail included)."""
    if len(entries):
        last_ts = int(entries["timestamp"][-1])
        first_ts = int(entries["timestamp"][0])
        if last_ts < first_ts:
            return IndexProblem(path, f"last timestamp {last_ts} is less than the first timestamp {first_ts}")
        last_off = base_offset + int(entries["relative_offset"][-1])
        if last_off < base_offset:
            return IndexProblem(path, f"last offset {last_off} is less than the base offset {base_offset}")
    if file_length % TIME_ENTRY.itemsize:
        return IndexProblem(path, f"length {file_length} is not a multiple of 12")
    return None


# --------------------------------------------------------------------------------------------
# Transaction index


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def read_txn_index(path: str | os.PathLike[str], base_offset: int | None = None) -> np.ndarray:
    """Every complete 34-byte entry of a ``.txnindex``; a trailing partial entry is ignored.

    Kafka reads only the first byte of the version field: a positive byte is fatal
    (:class:`StartupFailedError`).  Kafka's sanity check meets the entries one by one and
    reads the version of an entry before testing its lastOffset, so with ``base_offset``
    given a bad version byte counts only if it comes no later than the first entry whose
    lastOffset is below ``base_offset`` (from there on Kafka reports a corrupt index instead,
    :func:`txn_index_problem`, and recovery truncates the file).
    """
    return parse_txn_index(read_file(path), os.fspath(path), base_offset)


def parse_txn_index(data: bytes, path: str | None = None, base_offset: int | None = None) -> np.ndarray:
    """:func:`read_txn_index` on bytes already read."""
    entries = entries_from_bytes(data, TXN_ENTRY)
    if len(entries):
        first_bytes = np.frombuffer(data, np.int8, count=len(entries) * 34)[::34]
        bad = first_bytes > 0
        if base_offset is not None:
            corrupt = np.flatnonzero(entries["last_offset"] < base_offset)
            if corrupt.size:
                bad[int(corrupt[0]) + 1 :] = False
        bad_at = np.flatnonzero(bad)
        if bad_at.size:
            i = int(bad_at[0])
            raise StartupFailedError(
                path, "KafkaException",
                f"transaction index entry {i} (byte {i * 34}) has version byte {int(first_bytes[i])}; only 0 is known",
            )
    return entries


def txn_index_corrupt(data: bytes, path: str, base_offset: int) -> bool:
    """Whether ``LogSegment.sanityCheck`` finds the ``.txnindex`` bytes ``data`` corrupt (an entry below the
    base offset); what :func:`parse_txn_index` refuses raises as there."""
    return txn_index_problem(path, base_offset, parse_txn_index(data, path, base_offset)) is not None


def txn_index_problem(path: str, base_offset: int, entries: np.ndarray) -> CorruptIndexError | None:
    """Kafka's TransactionIndex.sanityCheck, the one index check still run at load."""
    if not len(entries):
        return None
    bad = np.flatnonzero(entries["last_offset"] < base_offset)
    if bad.size:
        i = int(bad[0])
        return CorruptIndexError(path, i * TXN_ENTRY.itemsize,
                                 f"last offset {int(entries['last_offset'][i])} of aborted transaction "
                                 f"is less than the base offset {base_offset}")
    return None
