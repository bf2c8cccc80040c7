"""Kafka's mutable index objects as a small sequential reference model (docs/formats.md §8-§11).

``OffsetIndex``, ``TimeIndex`` and ``TransactionIndex`` behave like Kafka's
classes of the same names (AbstractIndex.java and friends): the same state
(``entries``, ``max_entries``, ``last_offset`` / ``last_entry``), the same checks
in the same order, the same exceptions.  They work on bytes in memory: the
constructor takes the file's content (``None`` = the file does not exist yet, so
it is created -- preallocated for the offset and time indexes), and
``to_bytes()`` returns what the file holds (Kafka's memory map writes through at
once; here ``save(path)`` writes the file when the caller wants it on disk).

This is not used by the loader.  It is the one-entry-at-a-time reference that
tests drive through docs/loading.md §7.1 batch by batch and compare with the
vectorised Phase 2 (``mploader.scan.indexes.plan_indexes``), and that scenario tests
use for the index primitives (docs/scenarios.md §I).  Keep it obvious rather than fast.

Errors: each Kafka exception is a small class below, a :class:`MploaderError`
whose ``kafka_exception`` attribute names the Java class (the model raises
exactly where Kafka throws; callers that want the loader's error convert with
:meth:`KafkaIndexError.startup_failed`).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from mploader.errors import MploaderError, StartupFailedError
from mploader.format.index import OFFSET_ENTRY, TIME_ENTRY
from mploader.recovery.segment import largest_lower_bound_slot

INT32_MAX = 2**31 - 1
NO_TIMESTAMP = -1


class KafkaIndexError(MploaderError):
    kafka_exception = "KafkaException"

    def startup_failed(self, path: str | None = None) -> StartupFailedError:
        return StartupFailedError(path, self.kafka_exception, str(self))


class KafkaException(KafkaIndexError):
    kafka_exception = "KafkaException"


class InvalidOffsetException(KafkaIndexError):
    kafka_exception = "InvalidOffsetException"


class IllegalArgumentException(KafkaIndexError, ValueError):
    kafka_exception = "IllegalArgumentException"


class IllegalStateException(KafkaIndexError):
    kafka_exception = "IllegalStateException"


class IndexOffsetOverflowException(KafkaIndexError):
    kafka_exception = "IndexOffsetOverflowException"


class BufferOverflowException(KafkaIndexError):
    kafka_exception = "BufferOverflowException"


class CorruptIndexException(KafkaIndexError):
    kafka_exception = "CorruptIndexException"


def _read_if_exists(path: str | os.PathLike[str]) -> bytes | None:
    return Path(path).read_bytes() if os.path.exists(path) else None


def java_round_down(n: int, factor: int) -> int:
    """``factor * (n / factor)`` with Java's int division (towards zero: -1 -> 0)."""
    q = abs(n) // factor
    return factor * (q if n >= 0 else -q)


class _Index:
    """AbstractIndex: a dense array of fixed-size entries over the whole file."""

    ENTRY = 0  # entry size, set by the subclasses
    NAME = "index"

    def __init__(self, base_offset: int, max_index_size: int, data: bytes | None = None):
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        if data is None:  # a new file: created and preallocated with zeros, no entries
            if max_index_size < self.ENTRY:
                raise IllegalArgumentException(f"Invalid max index size: {max_index_size}")
            self._buf = bytearray(java_round_down(max_index_size, self.ENTRY))
            self.entries = 0
        else:  # an existing file: every whole slot up to the length is an entry
            self._buf = bytearray(data)
            self.entries = len(self._buf) // self.ENTRY
        self.max_entries = len(self._buf) // self.ENTRY

    @classmethod
    def open(cls, path: str | os.PathLike[str], base_offset: int, max_index_size: int):
        """Open the file Kafka's way (creating it only in memory if it is missing)."""
        return cls(base_offset, max_index_size, _read_if_exists(path))

    def save(self, path: str | os.PathLike[str]) -> None:
        with open(path, "wb") as f:
            f.write(self._buf)

    def to_bytes(self) -> bytes:
        return bytes(self._buf)

    @property
    def length(self) -> int:
        return len(self._buf)

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def resize(self, new_size: int) -> bool:
        """Set the file length to ``new_size`` rounded down (zero-extending); entries are kept."""
        size = java_round_down(new_size, self.ENTRY)
        if size == self.length:
            return False
        if size < self.length:
            del self._buf[size:]
        else:
            self._buf.extend(bytes(size - self.length))
        self.max_entries = size // self.ENTRY
        if self.entries * self.ENTRY > size:  # Kafka: the new mapping cannot take the old position
            raise IllegalArgumentException(f"newPosition > limit: ({self.entries * self.ENTRY} > {size})")
        self._after_resize()
        return True

    def trim_to_valid_size(self) -> bool:
        return self.resize(self.entries * self.ENTRY)

    close = trim_to_valid_size

    def reset(self) -> None:
        self.truncate()
        self.resize(self.max_index_size)

    def truncate(self) -> None:
        self._truncate_to_entries(0)

    def entry(self, n: int) -> tuple[int, int]:
        if n >= self.entries:
            raise IllegalArgumentException(f"Attempt to fetch the {n}th entry from {self.NAME} of size {self.entries}")
        return self._parse(n)

    def relative_offset(self, offset: int) -> int:
        rel = offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            raise IndexOffsetOverflowException(f"Integer overflow for offset: {offset}")
        return rel

    # -- helpers ---------------------------------------------------------------------------

    def _slots(self) -> np.ndarray:
        dtype = OFFSET_ENTRY if self.ENTRY == 8 else TIME_ENTRY
        return np.frombuffer(bytes(self._buf[: self.entries * self.ENTRY]), dtype)

    def _truncate_slot(self, slot: int, rel_at_slot: int, offset: int) -> None:
        """The 3 cases of truncateTo: keep exactly the entries with offset < ``offset``."""
        if slot < 0:
            self._truncate_to_entries(0)
        elif rel_at_slot == offset - self.base_offset:
            self._truncate_to_entries(slot)
        else:
            self._truncate_to_entries(slot + 1)

    def _truncate_to_entries(self, n: int) -> None:
        self.entries = n
        self._after_resize()

    def _after_resize(self) -> None:
        pass

    def _parse(self, n: int) -> tuple[int, int]:
        raise NotImplementedError


class OffsetIndex(_Index):
    """OffsetIndex (docs/formats.md §8): ``(relativeOffset int32, position int32)``."""

    ENTRY = 8
    NAME = "offset index"

    def __init__(self, base_offset: int, max_index_size: int, data: bytes | None = None):
        super().__init__(base_offset, max_index_size, data)
        self.last_offset = self._last_entry()[0]

    def _parse(self, n: int) -> tuple[int, int]:
        rel, pos = struct.unpack_from(">ii", self._buf, n * 8)
        return self.base_offset + rel, pos

    def _last_entry(self) -> tuple[int, int]:
        return self._parse(self.entries - 1) if self.entries else (self.base_offset, 0)

    def _truncate_to_entries(self, n: int) -> None:
        self.entries = n
        self.last_offset = self._last_entry()[0]

    def lookup(self, target: int) -> tuple[int, int]:
        """``(offset, position)`` of the largest entry <= target, else ``(base, 0)``."""
        slot = largest_lower_bound_slot(self._slots()["relative_offset"], target, 8, self.base_offset)
        return self._parse(slot) if slot >= 0 else (self.base_offset, 0)

    def append(self, offset: int, position: int) -> None:
        if self.is_full():
            raise IllegalArgumentException(f"Attempt to append to a full index (size = {self.entries}).")
        if self.entries and offset <= self.last_offset:
            raise InvalidOffsetException(f"Attempt to append an offset {offset} to position {self.entries} no "
                                         f"larger than the last offset appended ({self.last_offset})")
        struct.pack_into(">ii", self._buf, self.entries * 8, self.relative_offset(offset), position)
        self.entries += 1
        self.last_offset = offset

    def truncate_to(self, offset: int) -> None:
        rel = self._slots()["relative_offset"]
        slot = largest_lower_bound_slot(rel, offset, 8, self.base_offset)
        self._truncate_slot(slot, int(rel[slot]) if slot >= 0 else 0, offset)

    def sanity_check(self) -> None:
        if self.entries and self.last_offset < self.base_offset:
            raise CorruptIndexException(
                f"last offset {self.last_offset} is less than the base offset {self.base_offset}")
        if self.length % 8:
            raise CorruptIndexException(f"index length {self.length} is not a multiple of 8")


class TimeIndex(_Index):
    """TimeIndex (docs/formats.md §9): ``(timestamp int64, relativeOffset int32)``."""

    ENTRY = 12
    NAME = "time index"

    def __init__(self, base_offset: int, max_index_size: int, data: bytes | None = None):
        super().__init__(base_offset, max_index_size, data)
        self.last_entry = self._last_entry()

    def _parse(self, n: int) -> tuple[int, int]:
        ts, rel = struct.unpack_from(">qi", self._buf, n * 12)
        return ts, self.base_offset + rel

    def _last_entry(self) -> tuple[int, int]:
        return self._parse(self.entries - 1) if self.entries else (NO_TIMESTAMP, self.base_offset)

    def _after_resize(self) -> None:  # resize (when it changed the file) and truncation re-read the last entry
        self.last_entry = self._last_entry()

    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1  # the last slot is kept for the entry written at roll/close

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the largest entry with timestamp <= target, else ``(-1, base)``."""
        slot = largest_lower_bound_slot(self._slots()["timestamp"], timestamp, 12)
        return self._parse(slot) if slot >= 0 else (NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        if not skip_full_check and self.is_full():
            raise IllegalArgumentException(f"Attempt to append to a full time index (size = {self.entries}).")
        last_ts, last_off = self.last_entry
        if self.entries and offset < last_off:
            raise InvalidOffsetException(f"Attempt to append an offset ({offset}) to slot {self.entries} no larger "
                                         f"than the last offset appended ({last_off})")
        if self.entries and timestamp < last_ts:
            raise IllegalStateException(f"Attempt to append a timestamp ({timestamp}) to slot {self.entries} no "
                                        f"larger than the last timestamp appended ({last_ts})")
        if timestamp <= last_ts:  # equal: the same entry again (roll, close); -1 on an empty index: never indexed
            return
        pos = self.entries * 12
        if pos + 8 > self.length:  # putLong past the mapping (only reachable with skip_full_check)
            raise BufferOverflowException(f"no room for a time index entry at byte {pos} of {self.length}")
        struct.pack_into(">q", self._buf, pos, timestamp)
        rel = self.relative_offset(offset)
        if pos + 12 > self.length:
            raise BufferOverflowException(f"no room for a time index entry at byte {pos} of {self.length}")
        struct.pack_into(">i", self._buf, pos + 8, rel)
        self.entries += 1
        self.last_entry = (timestamp, offset)

    def truncate_to(self, offset: int) -> None:
        rel = self._slots()["relative_offset"]  # searched by offset (the entry's value), not timestamp
        slot = largest_lower_bound_slot(rel, offset, 12, self.base_offset)
        self._truncate_slot(slot, int(rel[slot]) if slot >= 0 else 0, offset)

    def sanity_check(self) -> None:
        last_ts, last_off = self.last_entry
        if self.entries and last_ts < self._parse(0)[0]:
            raise CorruptIndexException(
                f"last timestamp {last_ts} is less than the first timestamp {self._parse(0)[0]}")
        if self.entries and last_off < self.base_offset:
            raise CorruptIndexException(f"last offset {last_off} is less than the base offset {self.base_offset}")
        if self.length % 12:
            raise CorruptIndexException(f"time index length {self.length} is not a multiple of 12")


TXN_ENTRY_SIZE = 34
_TXN = struct.Struct(">hqqqq")


class TransactionIndex:
    """TransactionIndex (docs/formats.md §11): 34-byte aborted-transaction entries, appended through a channel.

    ``data=None``: the file does not exist (it is created by the first append only).
    The channel position starts at the file size; entries are read up to that position.
    """

    def __init__(self, start_offset: int, data: bytes | None = None):
        self.start_offset = start_offset
        self._data = None if data is None else bytearray(data)
        self._position = 0 if data is None else len(data)
        self._last_offset: int | None = None  # only what was appended since open

    @classmethod
    def open(cls, path: str | os.PathLike[str], start_offset: int) -> TransactionIndex:
        return cls(start_offset, _read_if_exists(path))

    def save(self, path: str | os.PathLike[str]) -> None:
        if self._data is not None:
            with open(path, "wb") as f:
                f.write(self._data)

    def to_bytes(self) -> bytes | None:
        return None if self._data is None else bytes(self._data)

    def append(self, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int) -> None:
        if self._last_offset is not None and self._last_offset >= last_offset:
            raise IllegalArgumentException(f"The last offset of appended transactions must increase sequentially, "
                                           f"but {last_offset} is not greater than {self._last_offset}")
        self._last_offset = last_offset
        if self._data is None:
            self._data = bytearray()
        entry = _TXN.pack(0, producer_id, first_offset, last_offset, last_stable_offset)
        end = self._position + TXN_ENTRY_SIZE
        self._data[self._position:end] = entry  # channel write at its position (overwrites, or extends)
        self._position = end

    def _iter(self):
        """``(position, (pid, first, last, lso))`` of every whole entry before the channel position."""
        p = 0
        while self._data is not None and self._position - p >= TXN_ENTRY_SIZE:
            version = struct.unpack_from(">b", self._data, p)[0]  # Kafka reads only the first byte
            if version > 0:
                raise KafkaException(f"Unexpected aborted transaction version {version}, current version is 0")
            yield p, _TXN.unpack_from(self._data, p)[1:]
            p += TXN_ENTRY_SIZE

    def all_aborted_txns(self) -> list[tuple[int, int, int, int]]:
        return [txn for _, txn in self._iter()]

    def truncate_to(self, offset: int) -> None:
        new_last = None
        for p, txn in self._iter():
            if txn[2] >= offset:
                self._truncate(p)
                self._last_offset = new_last
                return
            new_last = txn[2]

    def reset(self) -> None:
        if self._data is not None:
            self._truncate(0)
        self._last_offset = None

    def _truncate(self, size: int) -> None:  # FileChannel.truncate
        del self._data[size:]
        self._position = min(self._position, size)

    def sanity_check(self) -> None:
        for _, txn in self._iter():
            if txn[2] < self.start_offset:
                raise CorruptIndexException(f"Last offset of aborted transaction {txn} is less than start offset "
                                            f"{self.start_offset}")
