"""Phase 1: read one segment's ``.log`` and describe it. Pure and read-only.

``scan_segment(task) -> SegmentScan`` walks the entries of a ``.log`` file the
way Kafka's recovery iterates it (docs/formats.md §4), CRC-checks every batch
(CRC-32C for v2, CRC-32 for legacy) and stops at the first invalid byte.  The
result is a small descriptor plus a *batch table*: one row per valid entry with
every header field Phase 2 needs (indexes, leader epochs, producer state), and,
for control batches that carry a producer id, the parsed end-transaction marker.

Nothing here writes, renames or deletes; that is what lets scans run in any
process, in any order, or twice.

The walk's inner loop over plain v2 batches has a compiled twin, ``walk_v2`` of the compiled walk
(``_walk.c``, built when a C compiler is at hand; optional), which :func:`scan_buffer` takes as its ``compiled``
argument: :data:`mploader.scan.compiled.WALK` unless told otherwise (None: the Python loop, the reference).
:data:`COMPILED` says whether scans use it by default. It replaces that loop, and takes on the control batches
the general path below would accept without parsing anything or with :func:`_canonical_marker`; it hands back the
batch-table rows of what it accepted, filled as :func:`batch_table` fills them (its layout is checked against
BATCH_TABLE when it loads). Every stop reason and every other entry stays the Python below.
tests/test_walk_compiled.py checks that both give the same scans, fuzzed.
"""

from __future__ import annotations

import enum
import mmap
import os
import struct
import zlib
from array import array
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mploader.errors import InvalidRecordError, StartupFailedError
from mploader.format import crc as crc_functions, records
from mploader.format.files import open_regular, read_to, sparse
from mploader.format.records import BatchHeader
from mploader.scan.compiled import WALK, CompiledWalk
from mploader.scan.draft import RecoveryDraft, draft_recovery
from mploader.scan.table import BATCH_TABLE, BatchColumns, Marker


class Stop(enum.Enum):
    """Why the walk ended (docs/loading.md §7.3)."""

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
    # log.index.interval.bytes of the partition: a scan from byte 0 also drafts what LogSegment.recover
    # will need (mploader.scan.draft), in parallel with the other scans; None: Phase 2 drafts it
    index_interval: int | None = None
    # segment.index.bytes of the partition: such a scan also prepares the indexes recover() rebuilds
    # (mploader.scan.indexes); None: Phase 2 prepares them
    max_index_size: int | None = None


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
    draft: RecoveryDraft | None = None  # what Phase 2's recovery needs besides the table (a scan from byte 0)

    @property
    def truncated_bytes(self) -> int:
        return self.end - self.valid_bytes


class ScanSource(Protocol):
    """Where Phase 2 gets its whole-segment scans: an engine's (:mod:`mploader.engine`), or a plain
    :func:`scan_segment` call."""

    def scan(self, task: SegmentTask) -> SegmentScan: ...


_PREFIX = struct.Struct(">qiib")
_PREFIX23 = struct.Struct(">qiibIh")  # offset, size, epoch-or-crc, magic, v2 crc, v2 attributes
_PRODUCER_ID = struct.Struct(">q")
_V2_HEADER = np.dtype([
    ("base_offset", ">i8"), ("batch_length", ">i4"), ("partition_leader_epoch", ">i4"), ("magic", "i1"),
    ("crc", ">u4"), ("attributes", ">i2"), ("last_offset_delta", ">i4"), ("base_timestamp", ">i8"),
    ("max_timestamp", ">i8"), ("producer_id", ">i8"), ("producer_epoch", ">i2"), ("base_sequence", ">i4"),
    ("records_count", ">i4"),
])
_LEGACY_HEADER = np.dtype([
    ("offset", ">i8"), ("size", ">i4"), ("crc", ">u4"), ("magic", "i1"), ("attributes", "u1"), ("timestamp", ">i8"),
])
assert (_V2_HEADER.itemsize, _LEGACY_HEADER.itemsize) == (61, 26)


# Whether scans use the compiled walk unless told otherwise (mploader.scan.compiled.WALK is loaded)
COMPILED: bool = WALK is not None
crc32c = crc_functions.implementation()  # called per batch by the Python walk: the function itself


def scan_buffer(buf: bytes | memoryview | mmap.mmap, task: SegmentTask, end: int,
                compiled: CompiledWalk | None = WALK) -> SegmentScan:
    """Walk ``buf[task.start:end]`` (the bytes of ``task.path``).

    The Python loop does the least it can per entry (one unpack, one CRC), and the batch table of its
    entries is then filled by gathering every header at once with numpy (:func:`batch_table`). The
    ``compiled`` walk's loop (None: none) replaces it over runs of v2 batches and hands back their rows
    filled; the table is those runs and the Python walk's rows, in order.  The recovery draft is made
    with the same ``compiled`` walk.
    """
    # (position, marker, coordinator epoch, timestamp) of each parsed control batch, in order, flat
    markers = array("q")
    p = task.start
    stop, detail = Stop.END, ""
    fatal: tuple[str, str] | None = None
    mv = memoryview(buf)
    try:
        # the compiled loop reads bytes [start, end) of a contiguous buffer; anything else (a range past the
        # buffer's end, a negative start, a memoryview of wider items) takes the Python loop
        fast_walk = (compiled.walk_v2 if compiled is not None and 0 <= p and end <= mv.nbytes
                     and mv.itemsize == 1 and mv.c_contiguous else None)
        positions: list[int] = []  # of the valid entries the Python loops took
        # in order: the compiled walk's rows, and the number of the Python loops' entries between them
        pieces: list[bytearray | int] = []
        taken = 0  # positions already counted in pieces
        up23 = _PREFIX23.unpack_from
        append = positions.append
        check, parse_markers = task.check_crc, task.parse_markers
        limit = end - records.HEADER_SIZE_UP_TO_MAGIC
        fast_end = end - 23
        while True:
            if fast_walk is not None:  # the same loop, compiled (mploader/scan/_walk.c)
                p, rows = fast_walk(buf, p, end, check, parse_markers)
                if rows:
                    if len(positions) > taken:
                        pieces.append(len(positions) - taken)
                        taken = len(positions)
                    pieces.append(rows)
            else:
                # fast path: plain v2 batches (CRC-valid when checked), the common case, as few Python operations
                # as possible
                while p < fast_end:
                    _, size, _, magic, crc, attributes = up23(buf, p)
                    total = size + 12
                    if (magic < 2 or size < 49 or total > end - p or attributes & records.ATTR_CONTROL
                            or (check and crc32c(mv[p + 21 : p + total]) != crc)):
                        break
                    append(p)
                    p += total
            # general path: one entry with every rule of FileLogInputStream and recovery
            if p >= limit:
                if p < end:
                    stop, detail = Stop.INCOMPLETE, f"{end - p} trailing bytes too short for an entry header"
                break
            if p + 23 > end:  # too short for any complete entry; only the size field can still matter
                size = _PREFIX.unpack_from(buf, p)[1]
                if size < 14:
                    stop, detail = Stop.CORRUPT_SIZE, f"size field {size} below the minimum 14"
                else:
                    stop, detail = Stop.INCOMPLETE, f"entry of {size + 12} bytes runs past the end ({end})"
                break
            _, size, ple_or_crc, magic, crc, attributes = up23(buf, p)
            if size < 14:
                stop, detail = Stop.CORRUPT_SIZE, f"size field {size} below the minimum 14"
                break
            total = size + 12
            if p > end - total:
                stop, detail = Stop.INCOMPLETE, f"entry of {total} bytes runs past the end ({end})"
                break
            if magic >= 2:
                if total < records.RECORD_BATCH_OVERHEAD:
                    if check:  # ensureValid rejects it
                        stop, detail = Stop.SMALL_BATCH, f"v2 batch of {total} bytes is smaller than its 61-byte header"
                        break
                    # plain iteration reads the 61 header bytes from the file: only the file's end fails it
                    if records.header_load_fails(p, len(buf)):
                        fatal = (f"v2 entry of {total} bytes: {records.header_load_failure(p, len(buf))}",
                                 "KafkaException")
                        break
                    append(p)  # its header fields come from the bytes that follow, as Kafka reads them
                    p += total
                    continue
                if check and crc32c(mv[p + 21 : p + total]) != crc:
                    stop, detail = Stop.CRC, "record batch CRC mismatch"
                    break
                if (attributes & records.ATTR_CONTROL and parse_markers
                        and _PRODUCER_ID.unpack_from(buf, p + 43)[0] >= 0):
                    marker, coord, mts, message = _marker(buf, p, records.read_batch_header(buf, p), task.path)
                    markers.extend((p, marker, coord, mts))
                    append(p)
                    p += total
                    if marker == Marker.INVALID:
                        stop, detail = Stop.INVALID_RECORD, f"control record at byte {p - total} is invalid"
                        break
                    if marker == Marker.FATAL:
                        fatal = message
                        break
                    continue
            elif check and zlib.crc32(mv[p + 16 : p + total]) != (ple_or_crc & 0xFFFFFFFF):
                stop, detail = Stop.CRC, "legacy message CRC mismatch"
                break
            append(p)
            p += total
    finally:  # an exception out of the walk must not leave the mapping exported (BufferError on close)
        mv.release()
    table = batch_table(buf, positions, markers)
    if pieces:
        if len(positions) > taken:
            pieces.append(len(positions) - taken)
        table = _in_order(pieces, table)
    scan = SegmentScan(task.path, task.base_offset, task.start, end, p, stop, detail, table,
                       bytes_read=end - task.start)
    if fatal is not None:
        scan.fatal, scan.fatal_exception = fatal
    if task.index_interval is not None and task.start == 0:
        scan.draft = draft_recovery(BatchColumns(scan.batches), task.base_offset, task.index_interval,
                                    task.max_index_size, task.path, fatal is not None, compiled)
    return scan


def _in_order(pieces: list[bytearray | int], python_rows: np.ndarray) -> np.ndarray:
    """The batch table of a walk whose ``pieces`` are the compiled walk's rows (BATCH_TABLE rows as bytes) and
    counts of ``python_rows``."""
    if len(pieces) == 1 and not isinstance(pieces[0], int):  # the usual case: one compiled run, no copy
        return np.frombuffer(pieces[0], BATCH_TABLE)
    # joined as bytes, straight into the table's own buffer (one copy): np.concatenate of structured arrays spends
    # ~40 us a piece on their dtypes, which made a segment of alternating v2 and legacy entries (a compiled run of
    # one row between each two) 15x slower to scan
    python_bytes = python_rows.view(np.uint8).data  # plain bytes: a structured array's own buffer costs its format
    width = BATCH_TABLE.itemsize
    parts: list[bytearray | memoryview] = []
    at = 0
    for piece in pieces:
        if isinstance(piece, int):
            parts.append(python_bytes[at * width : (at + piece) * width])
            at += piece
        else:
            parts.append(piece)
    return np.frombuffer(bytearray().join(parts), BATCH_TABLE)


def batch_table(buf: bytes | memoryview | mmap.mmap, positions: list[int] | array[int],
                markers: array[int]) -> np.ndarray:
    """Gather the headers at ``positions`` into a BATCH_TABLE, vectorised; ``markers`` holds
    (position, marker, coordinator epoch, timestamp) of the parsed control batches, flat.

    Columns are written one at a time (a structured row copy costs ten times as much); when every
    entry is a v2 batch, the usual case, straight into the table's columns."""
    n = len(positions)
    table = np.zeros(n, BATCH_TABLE)
    if not n:
        return table
    pos = np.array(positions, np.int64)
    u8 = np.frombuffer(buf, np.uint8)
    magic = u8[pos + 16].view(np.int8)
    table["position"] = pos
    table["magic"] = magic
    table["marker"] = Marker.NONE
    v2 = np.flatnonzero(magic >= 2)
    everyone = v2.size == n

    def put(rows: np.ndarray, name: str, values: np.ndarray | int) -> None:
        if everyone:
            table[name] = values
        else:
            table[name][rows] = values

    if v2.size:
        # every v2 batch holds at least 61 bytes: rows of a sliding window are its headers
        h = np.lib.stride_tricks.sliding_window_view(u8, 61)[pos if everyone else pos[v2]].view(_V2_HEADER)
        h = h.reshape(-1)
        base_offset = h["base_offset"]
        put(v2, "size", h["batch_length"].astype(np.int64) + 12)
        put(v2, "attributes", h["attributes"].astype(np.int32) & 0xFFFF)
        put(v2, "base_offset", base_offset)
        put(v2, "last_offset", base_offset + h["last_offset_delta"])
        for name in ("max_timestamp", "partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence",
                     "records_count"):
            put(v2, name, h[name])
        put(v2, "coordinator_epoch", -1)
        put(v2, "marker_timestamp", -1)
        del h
    if not everyone:
        legacy = np.flatnonzero(magic < 2)
        h = np.lib.stride_tricks.sliding_window_view(u8, 26)[pos[legacy]].view(_LEGACY_HEADER).reshape(-1)
        table["size"][legacy] = h["size"].astype(np.int64) + 12
        table["attributes"][legacy] = h["attributes"]
        table["base_offset"][legacy] = table["last_offset"][legacy] = h["offset"]
        # Kafka reads a legacy message's timestamp for any magic but 0
        table["max_timestamp"][legacy] = np.where(h["magic"] != 0, h["timestamp"], -1)
        for name in ("partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence", "coordinator_epoch",
                     "marker_timestamp"):
            table[name][legacy] = -1
        table["records_count"][legacy] = 1
        del h
    del u8
    if markers:
        parsed = np.frombuffer(markers, np.int64).reshape(-1, 4)
        at = np.searchsorted(pos, parsed[:, 0])
        table["marker"][at], table["coordinator_epoch"][at], table["marker_timestamp"][at] = parsed[:, 1:].T
    return table


_CANONICAL_MARKER = struct.Struct(">BBBBBhhBhiB")  # 17-byte record of a 78-byte marker batch, from byte 61


def _canonical_marker(buf: bytes | memoryview | mmap.mmap, pos: int,
                      header: BatchHeader) -> tuple[int, int, int, None] | None:
    """The common case without the general record parser: an uncompressed batch holding one 17-byte
    COMMIT/ABORT record (1-byte varints, no headers).  None for anything else."""
    if header.size != 78 or header.records_count != 1 or header.compression:
        return None
    length, _, ts_delta, off_delta, klen, kversion, ctype, vlen, vversion, coord, nheaders = \
        _CANONICAL_MARKER.unpack_from(buf, pos + records.RECORD_BATCH_OVERHEAD)
    if (length, klen, vlen, nheaders) != (32, 8, 12, 0) or ts_delta & 0x80 or off_delta & 0x80 \
            or kversion < 0 or vversion < 0 or ctype not in (0, 1):
        return None
    ts = (header.max_timestamp if header.is_log_append_time
          else records.java_long(header.base_timestamp + ((ts_delta >> 1) ^ -(ts_delta & 1))))
    return ctype, coord, ts, None


def _marker(buf: bytes | memoryview | mmap.mmap, pos: int, header: BatchHeader,
            path: str) -> tuple[int, int, int, tuple[str, str] | None]:
    fast = _canonical_marker(buf, pos, header)
    if fast is not None:
        return fast
    try:
        m = records.read_end_txn_marker(buf, pos, header, path)
    except InvalidRecordError:
        return Marker.INVALID, -1, -1, None
    except StartupFailedError as e:
        return Marker.FATAL, -1, -1, (str(e), e.kafka_exception)
    if m is None:
        return Marker.EMPTY_CONTROL, -1, -1, None
    return int(m.type), m.coordinator_epoch, m.timestamp, None


# a segment file up to this size is read into memory, a bigger one mapped: a read() copies the bytes, a mapping costs
# a mmap, a page fault per 64 KiB and a munmap; the read was ~40% faster for 100 KB, the same at 1 MB
# (perf/README.md, "Small segments read, not mapped")
READ_BELOW_BYTES = 1 << 20


def scan_segment(task: SegmentTask, compiled: CompiledWalk | None = WALK) -> SegmentScan:
    """Read ``task.path`` (a small file) or map it read-only, and scan it (with the ``compiled`` walk: see
    :func:`scan_buffer`)."""
    fd, st = open_regular(task.path)  # not open(): a buffered file costs 3 more system calls
    try:
        size = st.st_size
        end = size if task.end is None else min(task.end, size)
        if end <= task.start:
            return scan_buffer(b"", task, task.start, compiled)
        if size > READ_BELOW_BYTES and not sparse(st):
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
                return scan_buffer(mm, task, end, compiled)
        # the whole file, as a mapping shows it: the walk reads a header past ``end`` up to the file's end
        data = read_to(fd, size)
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror, task.path) from e  # fstat, pread and mmap name no file
    finally:
        os.close(fd)
    # shorter than the fstat said only if the file shrank since (where a mapping would raise SIGBUS)
    end = min(end, len(data))
    return (scan_buffer(data, task, end, compiled) if end > task.start
            else scan_buffer(b"", task, task.start, compiled))
