"""Phase 1: read one segment's ``.log`` and describe it. Pure and read-only.

``scan_segment(task) -> SegmentScan`` walks the entries of a ``.log`` file the
way Kafka's recovery iterates it (FORMATS.md §4), CRC-checks every batch
(CRC-32C for v2, CRC-32 for legacy) and stops at the first invalid byte.  The
result is a small descriptor plus a *batch table*: one row per valid entry with
every header field Phase 2 needs (indexes, leader epochs, producer state), and,
for control batches that carry a producer id, the parsed end-transaction marker.

Nothing here writes, renames or deletes; that is what lets scans run in any
process, in any order, or twice.
"""

from __future__ import annotations

import enum
import mmap
import os
import struct
from dataclasses import dataclass, field

import numpy as np
import zlib

from crc32c import crc32c

from .errors import InvalidRecordError, StartupFailedError
from .format import records
from .format.records import BatchHeader
from .testing import check_readable

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


class Marker(enum.IntEnum):
    """What a batch is for producer state (column ``marker`` of the batch table)."""

    NONE = -1  # a data batch, or a control batch without producer id
    ABORT = 0
    COMMIT = 1
    EMPTY_CONTROL = 2  # control batch with 0 records: ignored
    INVALID = 3  # Kafka's InvalidRecordException: the batch is kept, recovery stops after it
    FATAL = 4  # an exception Kafka does not catch: broker start-up fails if this batch is applied


class Stop(enum.Enum):
    """Why the walk ended (LOADING.md §7.3)."""

    END = "end"  # the whole range was valid
    INCOMPLETE = "incomplete"  # <= 17 bytes left or a torn last entry: ends silently
    CORRUPT_SIZE = "corrupt size"  # size field below 14
    SMALL_BATCH = "batch below 61 bytes"
    CRC = "crc mismatch"
    INVALID_RECORD = "invalid control record"  # stop after the batch


@dataclass(frozen=True, slots=True)
class SegmentTask:
    """What to scan: ``path`` from byte ``start`` to ``end`` (None = the file's size)."""

    path: str
    base_offset: int
    start: int = 0
    end: int | None = None
    parse_markers: bool = True
    check_crc: bool = True  # False: Kafka's plain iteration (producer-state reads of unrecovered segments)


@dataclass(slots=True)
class SegmentScan:
    """The descriptor of one scanned range plus its batch table."""

    path: str
    base_offset: int
    start: int
    end: int  # the end of the scanned range (the file size unless the task said otherwise)
    valid_bytes: int  # position after the last valid entry
    stop: Stop
    stop_detail: str
    batches: np.ndarray  # BATCH_TABLE rows of the valid entries
    fatal: str | None = None  # message of a Marker.FATAL batch (Kafka exception name in fatal_exception)
    fatal_exception: str | None = None
    bytes_read: int = 0
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def truncated_bytes(self) -> int:
        return self.end - self.valid_bytes


_PREFIX = struct.Struct(">qiib")
_V2 = records.BATCH_HEADER
_LEGACY_TS = struct.Struct(">q")


def scan_buffer(buf: bytes | memoryview | mmap.mmap, task: SegmentTask, end: int) -> SegmentScan:
    """Walk ``buf[task.start:end]`` (the bytes of ``task.path``)."""
    rows: list[tuple] = []
    p = task.start
    stop, detail = Stop.END, ""
    fatal: tuple[str, str] | None = None
    mv = memoryview(buf)
    while True:
        if p >= end - records.HEADER_SIZE_UP_TO_MAGIC:
            if p < end:
                stop, detail = Stop.INCOMPLETE, f"{end - p} trailing bytes too short for an entry header"
            break
        offset, size, ple_or_crc, magic = _PREFIX.unpack_from(buf, p)
        if size < 14:
            stop, detail = Stop.CORRUPT_SIZE, f"size field {size} below the minimum 14"
            break
        total = size + 12
        if p > end - total:
            stop, detail = Stop.INCOMPLETE, f"entry of {total} bytes runs past the end ({end})"
            break
        if magic >= 2:
            if total < records.RECORD_BATCH_OVERHEAD:
                stop, detail = Stop.SMALL_BATCH, f"v2 batch of {total} bytes is smaller than its 61-byte header"
                break
            h = _V2.unpack_from(buf, p)
            if task.check_crc and crc32c(mv[p + 21 : p + total]) != h[4]:
                stop, detail = Stop.CRC, "record batch CRC mismatch"
                break
            attributes = h[5] & 0xFFFF
            marker, coord, mts = -1, -1, -1
            if attributes & records.ATTR_CONTROL and h[9] >= 0 and task.parse_markers:
                marker, coord, mts, message = _marker(buf, p, BatchHeader(*h[:5], attributes, *h[6:]), task.path)
                if marker == Marker.FATAL and fatal is None:
                    fatal = message
            rows.append((p, total, magic, attributes, h[0], h[0] + h[6], h[8], h[2], h[9], h[10], h[11], h[12],
                         marker, coord, mts))
            p += total
            if marker == Marker.INVALID:
                stop, detail = Stop.INVALID_RECORD, f"control record at byte {p - total} is invalid"
                break
            if marker == Marker.FATAL:
                break
        else:
            if task.check_crc and zlib.crc32(mv[p + 16 : p + total]) != (ple_or_crc & 0xFFFFFFFF):
                stop, detail = Stop.CRC, "legacy message CRC mismatch"
                break
            ts = _LEGACY_TS.unpack_from(buf, p + 18)[0] if magic == 1 and total >= 26 else -1
            attributes = buf[p + 17]
            rows.append((p, total, magic, attributes, offset, offset, ts, -1, -1, -1, -1, 1, -1, -1, -1))
            p += total
    mv.release()
    table = np.array(rows, dtype=BATCH_TABLE) if rows else np.empty(0, BATCH_TABLE)
    scan = SegmentScan(task.path, task.base_offset, task.start, end, p, stop, detail, table,
                       bytes_read=end - task.start)
    if fatal is not None:
        scan.fatal, scan.fatal_exception = fatal
    return scan


def _marker(buf: bytes | memoryview | mmap.mmap, pos: int, header: BatchHeader,
            path: str) -> tuple[int, int, int, tuple[str, str] | None]:
    try:
        m = records.read_end_txn_marker(buf, pos, header, path)
    except InvalidRecordError:
        return Marker.INVALID, -1, -1, None
    except StartupFailedError as e:
        return Marker.FATAL, -1, -1, (str(e), e.kafka_exception)
    if m is None:
        return Marker.EMPTY_CONTROL, -1, -1, None
    return int(m.type), m.coordinator_epoch, m.timestamp, None


def scan_segment(task: SegmentTask) -> SegmentScan:
    """Map ``task.path`` read-only and scan it."""
    check_readable(task.path)
    with open(task.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        end = size if task.end is None else min(task.end, size)
        if end <= task.start:
            return scan_buffer(b"", task, task.start)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return scan_buffer(mm, task, end)
