"""Record batches, magic v2 (docs/formats.md §5-§6), and the control records inside them.

Layout of the 61-byte batch header, written down once::

    off size field                 off size field
     0   8   baseOffset             27   8   baseTimestamp (or delete horizon)
     8   4   batchLength (size-12)  35   8   maxTimestamp
    12   4   partitionLeaderEpoch   43   8   producerId
    16   1   magic (2)              51   2   producerEpoch
    17   4   crc (uint32)           53   4   baseSequence
    21   2   attributes             57   4   recordsCount
    23   4   lastOffsetDelta        61   .   records (maybe compressed)

The CRC-32C covers bytes ``[21, end of batch)``: neither the offset, the length,
the leader epoch nor the magic byte are protected.
"""

from __future__ import annotations

import enum
import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from mploader.errors import CorruptRecordError, InvalidRecordError, StartupFailedError
from mploader.format import compression
from mploader.format.crc import crc32c
from mploader.format.varint import decode_varint, decode_varlong, encode_varint

MAGIC_V2 = 2
LOG_OVERHEAD = 12  # offset + size fields before every entry
HEADER_SIZE_UP_TO_MAGIC = 17
RECORD_BATCH_OVERHEAD = 61
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
assert BATCH_HEADER.size == RECORD_BATCH_OVERHEAD


@overload
def header_load_fails(position: int, file_size: int) -> bool: ...


@overload
def header_load_fails(position: np.ndarray, file_size: int) -> np.ndarray: ...


def header_load_fails(position: int | np.ndarray, file_size: int) -> bool | np.ndarray:
    """Whether Kafka fails to read a v2 entry's header at ``position`` of a file of ``file_size`` bytes.

    DefaultFileChannelRecordBatch.loadBatchHeader reads the whole 61-byte header from the file for
    lastOffset() or maxTimestamp(), whatever the entry's own size and the end of the read it came from:
    only the end of the file makes that read fail (EOFException, rethrown as KafkaException, which
    fails start-up).  Applies to any index of positions (numpy arrays too)."""
    return position + RECORD_BATCH_OVERHEAD > file_size


def header_load_failure(position: int, file_size: int) -> str:
    """The message for :func:`header_load_fails`."""
    return (f"failed to load the record batch header at byte {position}: end of file after "
            f"{file_size - position} of {RECORD_BATCH_OVERHEAD} bytes")

ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """Kafka's DefaultRecordBatch.lastSequence: incrementSequence in Java int arithmetic, overflows included
    (a negative ``last_offset_delta`` wraps too)."""
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    if base_sequence > java_int(INT32_MAX - last_offset_delta):
        return java_int(last_offset_delta - java_int(INT32_MAX - base_sequence) - 1)
    return java_int(base_sequence + last_offset_delta)


def last_sequences(base_sequence: np.ndarray, last_offset_delta: np.ndarray) -> np.ndarray:
    """:func:`last_sequence` of many batches at once (int64 arrays in, int64 out)."""
    seq = base_sequence.astype(np.int64)
    inc = last_offset_delta.astype(np.int64)
    wraps = seq > _java_ints(INT32_MAX - inc)
    out = np.where(wraps, _java_ints(inc - _java_ints(INT32_MAX - seq) - 1), _java_ints(seq + inc))
    return np.where(seq == NO_SEQUENCE, NO_SEQUENCE, out)


def java_int(v: int) -> int:
    """Java's (int) of a long: the low 32 bits, signed."""
    return ((v + 2**31) & 0xFFFFFFFF) - 2**31


def _java_ints(v: np.ndarray) -> np.ndarray:
    return v.astype(np.int32).astype(np.int64)


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """Every field of a v2 batch header, named as in Kafka's DefaultRecordBatch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        return last_sequence(self.base_sequence, self.last_offset_delta)


def java_long(value: int) -> int:
    """``value`` as Java's ``long`` arithmetic leaves it: wrapped to 64 bits, signed."""
    return (value + 2**63) % 2**64 - 2**63


def read_batch_header(buf: bytes | memoryview | mmap.mmap, pos: int = 0, path: str | None = None) -> BatchHeader:
    """Parse the 61-byte header at ``pos`` (no validation beyond its length)."""
    if pos < 0 or pos + RECORD_BATCH_OVERHEAD > len(buf):
        raise CorruptRecordError(path, pos, "fewer than 61 bytes left for a record batch header")
    # attributes are stored as int16 but every flag is in the low byte; keep the raw value
    fields = list(BATCH_HEADER.unpack_from(buf, pos))
    fields[5] &= 0xFFFF
    return BatchHeader(*fields)


def batch_crc(buf: bytes | memoryview, pos: int, size: int) -> int:
    """CRC-32C of a v2 batch's protected range ``[pos+21, pos+size)``."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])


def ensure_valid(buf: bytes | memoryview, pos: int, path: str | None = None) -> BatchHeader:
    """Kafka's DefaultRecordBatch.ensureValid: size >= 61 and the CRC matches."""
    if pos + LOG_OVERHEAD > len(buf):
        raise CorruptRecordError(path, pos, "truncated batch")
    (batch_length,) = struct.unpack_from(">i", buf, pos + 8)
    size = LOG_OVERHEAD + batch_length
    if size < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(path, pos, f"record batch is only {size} bytes, smaller than its 61-byte header")
    if pos + size > len(buf):
        raise CorruptRecordError(path, pos, f"record batch of {size} bytes runs past the end ({len(buf)})")
    header = read_batch_header(buf, pos, path)
    actual = batch_crc(buf, pos, size)
    if actual != header.crc:
        raise CorruptRecordError(
            path, pos, f"record batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}"
        )
    return header


# --------------------------------------------------------------------------------------------
# Records (docs/formats.md §6)


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a v2 batch, as stored (deltas relative to the batch)."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    attributes: int = 0


def _encode_bytes(b: bytes | None) -> bytes:
    if b is None:
        return encode_varint(-1)
    return encode_varint(len(b)) + b


def encode_record(r: Record) -> bytes:
    body = bytearray()
    body.append(r.attributes & 0xFF)
    body += encode_varint(r.timestamp_delta)
    body += encode_varint(r.offset_delta)
    body += _encode_bytes(r.key)
    body += _encode_bytes(r.value)
    body += encode_varint(len(r.headers))
    for hkey, hval in r.headers:
        body += _encode_bytes(hkey.encode("utf-8"))
        body += _encode_bytes(hval)
    return encode_varint(len(body)) + bytes(body)


def _read_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = decode_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise InvalidRecordError(None, pos, f"field of {n} bytes runs past the end of the record")
    return bytes(buf[pos : pos + n]), pos + n


def decode_record(buf: bytes, pos: int) -> tuple[Record, int]:
    """Decode the record at ``pos`` of an uncompressed records section (Kafka's DefaultRecord.readFrom)."""
    size, body = decode_varint(buf, pos)
    end = body + size
    if size < 0 or end > len(buf):
        raise InvalidRecordError(None, pos, f"invalid record size {size}: only {len(buf) - body} bytes remain")
    if body >= end:
        raise InvalidRecordError(None, pos, "empty record")
    attributes = buf[body]
    p = body + 1
    ts_delta, p = decode_varlong(buf, p)
    off_delta, p = decode_varint(buf, p)
    key, p = _read_bytes(buf, p, end)
    value, p = _read_bytes(buf, p, end)
    nheaders, p = decode_varint(buf, p)
    if nheaders < 0 or nheaders > end - p:
        raise InvalidRecordError(None, p, f"invalid number of record headers {nheaders}")
    headers = []
    for _ in range(nheaders):
        hk, p = _read_bytes(buf, p, end)
        if hk is None:
            raise InvalidRecordError(None, p, "null header key")
        hv, p = _read_bytes(buf, p, end)
        headers.append((hk.decode("utf-8", "replace"), hv))
    if p != end:
        raise InvalidRecordError(None, p, f"invalid record size: expected to read {size} bytes, read {p - body}")
    return Record(off_delta, ts_delta, key, value, tuple(headers), attributes), end


def records_section(buf: bytes | memoryview | mmap.mmap, pos: int, header: BatchHeader) -> bytes:
    """The batch's records bytes, decompressed (codec errors propagate as raised by the codec)."""
    raw = bytes(memoryview(buf)[pos + RECORD_BATCH_OVERHEAD : pos + header.size])
    return compression.decompress(header.compression, raw)


def decode_records(buf: bytes | memoryview, pos: int = 0, path: str | None = None) -> list[Record]:
    """All records of the v2 batch at ``pos`` (for tests and tools; recovery never calls this).

    Every failure is an :class:`InvalidRecordError` naming ``path`` and the batch position
    (the reason gives the position inside the uncompressed records section).
    """
    header = read_batch_header(buf, pos, path)
    if pos + header.size > len(buf) or header.size < RECORD_BATCH_OVERHEAD:
        raise InvalidRecordError(path, pos, f"batch of {header.size} bytes does not fit the buffer")
    try:
        data = records_section(buf, pos, header)
    except (compression.UnsupportedCodecError, compression.CompressedDataError) as e:
        raise InvalidRecordError(path, pos, f"records section does not decompress: {e}") from e
    out: list[Record] = []
    p = 0
    try:
        for _ in range(max(header.records_count, 0)):
            rec, p = decode_record(data, p)
            out.append(rec)
    except InvalidRecordError as e:
        raise InvalidRecordError(
            path, pos, f"record {len(out)} (at byte {e.position} of the records section): {e.reason}"
        ) from e
    if p != len(data):
        raise InvalidRecordError(path, pos, "incorrect declared batch size, records still remaining")
    return out


def build_batch(
    base_offset: int,
    records: Sequence[Record],
    *,
    partition_leader_epoch: int = -1,
    codec: int = compression.NONE,
    log_append_time: bool = False,
    transactional: bool = False,
    control: bool = False,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    base_timestamp: int = 0,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    delete_horizon: int | None = None,
) -> bytes:
    """Serialise a v2 batch exactly as Kafka lays it out, with a valid CRC-32C.

    ``max_timestamp`` defaults to the largest record timestamp; ``last_offset_delta``
    to the last record's offset delta (a compacted batch may keep a larger one).
    """
    payload = b"".join(encode_record(r) for r in records)
    payload = compression.compress(codec, payload)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if records else 0
    if max_timestamp is None:
        max_timestamp = max((base_timestamp + r.timestamp_delta for r in records), default=NO_TIMESTAMP)
    attributes = codec & ATTR_CODEC_MASK
    if log_append_time:
        attributes |= ATTR_LOG_APPEND_TIME
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    if delete_horizon is not None:
        attributes |= ATTR_DELETE_HORIZON
        base_timestamp = delete_horizon
    size = RECORD_BATCH_OVERHEAD + len(payload)
    out = bytearray(size)
    BATCH_HEADER.pack_into(
        out, 0, base_offset, size - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, 0, attributes,
        last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
        len(records),
    )
    out[RECORD_BATCH_OVERHEAD:] = payload
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def simple_records(values: Sequence[bytes | None], timestamps: Sequence[int] | None = None,
                   base_timestamp: int = 0, keys: Sequence[bytes | None] | None = None) -> list[Record]:
    """Records with offset deltas 0..n-1 (the common case when writing a batch)."""
    return [
        Record(i, (timestamps[i] - base_timestamp) if timestamps else 0, keys[i] if keys else None, v)
        for i, v in enumerate(values)
    ]


# --------------------------------------------------------------------------------------------
# Control records (end-transaction markers)


class ControlRecordType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


CONTROL_KEY = struct.Struct(">hh")  # version, type
END_TXN_MARKER_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """The first record of a transaction-marker control batch."""

    type: ControlRecordType
    coordinator_epoch: int
    timestamp: int  # the record's timestamp (producer state's lastTimestamp)

    @property
    def is_commit(self) -> bool:
        return self.type == ControlRecordType.COMMIT


def build_end_txn_marker_batch(
    offset: int, producer_id: int, producer_epoch: int, commit: bool, *, coordinator_epoch: int = 0,
    timestamp: int = 0, partition_leader_epoch: int = -1, codec: int = compression.NONE,
) -> bytes:
    """A control batch holding one COMMIT or ABORT marker (78 bytes uncompressed)."""
    ctype = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    key = CONTROL_KEY.pack(0, int(ctype))
    value = END_TXN_MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        offset, [Record(0, 0, key, value)], partition_leader_epoch=partition_leader_epoch, codec=codec,
        transactional=True, control=True, producer_id=producer_id, producer_epoch=producer_epoch,
        base_timestamp=timestamp, max_timestamp=timestamp,
    )


# Decompressed bytes of a control batch read at once: every real one whole (a marker is 17 bytes), so that the
# codec meets what is wrong anywhere in it; past this, only as far as Kafka reads (_first_record).
CONTROL_HEAD_BYTES = 1 << 20


def _first_record(buf: bytes | memoryview | mmap.mmap, pos: int, header: BatchHeader) -> bytes:
    """The decompressed records section of a control batch as far as Kafka's RecordIterator reads it: its first
    record and one byte more (``ensureNoneRemaining`` when the count is 1); a section under
    CONTROL_HEAD_BYTES whole.  So a few KB that decompress to gigabytes cost the first record's size at most,
    which Kafka allocates too (``DefaultRecord.readFrom``)."""
    raw = bytes(memoryview(buf)[pos + RECORD_BATCH_OVERHEAD : pos + header.size])
    head = compression.decompress_head(header.compression, raw, CONTROL_HEAD_BYTES)
    if len(head) < CONTROL_HEAD_BYTES:
        return head
    try:
        size, body = decode_varint(head, 0)
    except InvalidRecordError:
        return head
    need = body + size + 1
    return head if need <= len(head) else compression.decompress_head(header.compression, raw, need)


def read_end_txn_marker(
    buf: bytes | memoryview | mmap.mmap, pos: int, header: BatchHeader, path: str | None = None
) -> EndTxnMarker | None:
    """Interpret a control batch the way Kafka's ProducerAppendInfo does during recovery.

    Returns None for an empty control batch.  Raises InvalidRecordError where Kafka
    raises InvalidRecordException (recovery stops after this batch) and
    StartupFailedError where Kafka's exception is not caught (docs/formats.md §6).
    """
    if header.records_count == 0:
        return None
    if header.records_count < 0:
        raise InvalidRecordError(path, pos, f"control batch with negative record count {header.records_count}")
    try:
        data = _first_record(buf, pos, header)
    except compression.UnsupportedCodecError as e:
        # codec ids 5-7: CompressionType.forId throws IllegalArgumentException; a known codec whose
        # Python package is missing is a limitation of this installation, reported the same way
        kafka_exc = "KafkaException" if header.compression in compression.CODEC_NAMES else "IllegalArgumentException"
        raise StartupFailedError(path, kafka_exc, f"control batch at byte {pos}: {e}") from e
    except compression.CompressedDataError as e:
        if e.truncated:
            # Java's stream reader hits EOF: "Incorrect declared batch size, premature EOF reached"
            raise InvalidRecordError(path, pos, f"control batch: premature end of compressed data ({e})") from e
        # a bad header or corrupt data: IOException inside the codec stream, wrapped in a KafkaException
        raise StartupFailedError(path, "KafkaException",
                                 f"control batch at byte {pos} does not decompress: {e}") from e
    try:
        record, end = decode_record(data, 0)
    except InvalidRecordError as e:
        raise InvalidRecordError(path, pos, f"control record unreadable: {e.reason}") from e
    if header.records_count == 1 and end != len(data):
        raise InvalidRecordError(path, pos, "incorrect declared batch size, records still remaining")
    if record.key is None:
        raise StartupFailedError(path, "NullPointerException", f"control record with null key at byte {pos}")
    if len(record.key) < 4:
        raise InvalidRecordError(path, pos, f"control record key of {len(record.key)} bytes, need 4")
    version, ctype = CONTROL_KEY.unpack_from(record.key, 0)
    if version < 0:
        raise InvalidRecordError(path, pos, f"control record key version {version}")
    if ctype not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        name = ControlRecordType(ctype).name if ctype in ControlRecordType._value2member_map_ else "UNKNOWN"
        raise StartupFailedError(
            path, "IllegalArgumentException",
            f"control batch at byte {pos} with producer id {header.producer_id} has type {name}, "
            "not a transaction marker",
        )
    if record.value is None:
        raise StartupFailedError(path, "NullPointerException", f"end-transaction marker with null value at byte {pos}")
    if len(record.value) < END_TXN_MARKER_VALUE.size:
        raise InvalidRecordError(path, pos, f"end-transaction marker value of {len(record.value)} bytes, need 6")
    mversion, coordinator_epoch = END_TXN_MARKER_VALUE.unpack_from(record.value, 0)
    if mversion < 0:
        raise InvalidRecordError(path, pos, f"end-transaction marker version {mversion}")
    # DefaultRecord's timestamp is a long addition: it wraps
    ts = (header.max_timestamp if header.is_log_append_time
          else java_long(header.base_timestamp + record.timestamp_delta))
    return EndTxnMarker(ControlRecordType(ctype), coordinator_epoch, ts)


__all__ = [
    "BATCH_HEADER", "BatchHeader", "ControlRecordType", "EndTxnMarker", "Record", "build_batch",
    "build_end_txn_marker_batch", "decode_records", "ensure_valid", "java_long", "read_batch_header",
    "read_end_txn_marker", "simple_records",
]
