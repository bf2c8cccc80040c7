"""Legacy message sets, magic v0 and v1 (docs/formats.md §7).

A legacy log entry is ``offset int64 | size int32 | message``; the message is::

    v0: crc uint32 | magic int8 | attributes int8 | keyLength int32 | key | valueLength int32 | value
    v1: crc uint32 | magic int8 | attributes int8 | timestamp int64 | keyLength int32 | ...

The CRC-32 (IEEE) covers the message from its magic byte to its end, i.e. file
bytes ``[p+16, p+12+size)``.  A compressed "wrapper" message holds, as its value,
the compressed concatenation of inner log entries.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from mploader.errors import CorruptRecordError, InvalidRecordError
from mploader.format import compression

MESSAGE_OVERHEAD_V0 = 14  # crc+magic+attributes+keyLength+valueLength
MESSAGE_OVERHEAD_V1 = 22
KEY_LENGTH_OFFSET_V0 = 6  # in the message: crc 4 | magic 1 | attributes 1
KEY_LENGTH_OFFSET_V1 = 14  # ... | timestamp 8
ENTRY_PREFIX = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
TIMESTAMP = struct.Struct(">q")
LENGTH = struct.Struct(">i")
ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08


@dataclass(frozen=True, slots=True)
class LegacyEntry:
    """One outer (shallow) legacy entry as recovery sees it."""

    offset: int  # for a wrapper: the offset of its last inner message
    size: int  # bytes on disk, 12 + size field
    crc: int
    magic: int
    attributes: int
    timestamp: int  # v1 (any magic but 0) outer timestamp; -1 for v0

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_CODEC_MASK


def read_entry(buf: bytes | memoryview, pos: int = 0, path: str | None = None) -> LegacyEntry:
    if pos + ENTRY_PREFIX.size > len(buf):
        raise CorruptRecordError(path, pos, "truncated legacy message")
    offset, size, crc, magic, attributes = ENTRY_PREFIX.unpack_from(buf, pos)
    timestamp = -1
    # LegacyRecord.timestamp(): only magic 0 has none; any other (even negative) magic byte reads
    # the int64 at message offset 6 (it lies inside any message of the minimum size 14)
    if magic != 0 and pos + 26 <= len(buf):
        (timestamp,) = TIMESTAMP.unpack_from(buf, pos + 18)
    return LegacyEntry(offset, 12 + size, crc, magic, attributes & 0xFF, timestamp)


def message_crc(buf: bytes | memoryview, pos: int, size: int) -> int:
    """CRC-32 of the entry at ``pos`` whose total on-disk size is ``size``."""
    return zlib.crc32(memoryview(buf)[pos + 16 : pos + size])


def ensure_valid(buf: bytes | memoryview, pos: int, path: str | None = None) -> LegacyEntry:
    """Kafka's LegacyRecord.ensureValid on a shallow entry: size >= 14 and the CRC-32 matches."""
    entry = read_entry(buf, pos, path)
    if entry.size - 12 < MESSAGE_OVERHEAD_V0:
        raise CorruptRecordError(path, pos, f"legacy message size {entry.size - 12} below {MESSAGE_OVERHEAD_V0}")
    if pos + entry.size > len(buf):
        raise CorruptRecordError(path, pos, "legacy message runs past the end")
    actual = message_crc(buf, pos, entry.size)
    if actual != entry.crc:
        raise CorruptRecordError(
            path, pos, f"legacy message CRC mismatch: stored {entry.crc:#010x}, computed {actual:#010x}")
    return entry


def build_message(
    offset: int, value: bytes | None, *, key: bytes | None = None, magic: int = 1, timestamp: int = -1,
    attributes: int = 0,
) -> bytes:
    """One legacy log entry (offset | size | message) with a valid CRC-32."""
    body = bytearray()
    body += struct.pack(">bb", magic, attributes)
    if magic >= 1:
        body += TIMESTAMP.pack(timestamp)
    for b in (key, value):
        if b is None:
            body += LENGTH.pack(-1)
        else:
            body += LENGTH.pack(len(b)) + b
    message = struct.pack(">I", zlib.crc32(body)) + bytes(body)
    return struct.pack(">qi", offset, len(message)) + message


def build_wrapper(
    entries: list[tuple[int, bytes | None, int]], *, codec: int, magic: int = 1, log_append_time: bool = False,
) -> bytes:
    """A compressed wrapper around inner messages ``(offset, value, timestamp)``.

    v0 keeps absolute inner offsets; v1 stores them relative (0..n-1), the wrapper
    carrying the absolute offset of the last one, and the max timestamp.
    """
    if not entries:
        raise ValueError("a wrapper needs at least one inner message")
    last = entries[-1][0]
    inner = bytearray()
    for off, value, ts in entries:
        inner_off = off if magic == 0 else off - entries[0][0]
        inner += build_message(inner_off, value, magic=magic, timestamp=ts)
    attrs = (codec & ATTR_CODEC_MASK) | (ATTR_LOG_APPEND_TIME if log_append_time else 0)
    max_ts = max(ts for _, _, ts in entries) if magic >= 1 else -1
    return build_message(last, compression.compress(codec, bytes(inner)), magic=magic, timestamp=max_ts,
                         attributes=attrs)


def _inner_error(path: str | None, pos: int, reason: str) -> InvalidRecordError:
    return InvalidRecordError(path, pos, f"legacy wrapper: {reason}")


def _key_value(msg: bytes | memoryview, magic: int) -> tuple[bytes | None, bytes | None]:
    """Key and value of one message (``msg`` = its bytes from the CRC on); ValueError if they do not fit."""
    p = KEY_LENGTH_OFFSET_V0 if magic == 0 else KEY_LENGTH_OFFSET_V1
    out: list[bytes | None] = []
    for what in ("key", "value"):
        if p + 4 > len(msg):
            raise ValueError(f"{what} length field runs past the message")
        (n,) = LENGTH.unpack_from(msg, p)
        p += 4
        if n < 0:
            out.append(None)
            continue
        if p + n > len(msg):
            raise ValueError(f"{what} length {n} runs past the message")
        out.append(bytes(msg[p : p + n]))
        p += n
    return out[0], out[1]


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    """One message as a consumer sees it (deep iteration): absolute offset, key, value."""

    offset: int
    magic: int
    attributes: int
    timestamp: int  # -1 for v0; inner v1 messages of a LogAppendTime wrapper get the wrapper's
    key: bytes | None
    value: bytes | None
    crc: int


def _validated_entry(buf: bytes | memoryview, pos: int, path: str | None) -> LegacyEntry:
    entry = read_entry(buf, pos, path)
    if entry.size - 12 < MESSAGE_OVERHEAD_V0:
        raise CorruptRecordError(path, pos, f"legacy message size {entry.size - 12} below {MESSAGE_OVERHEAD_V0}")
    if pos + entry.size > len(buf):
        raise CorruptRecordError(path, pos, "legacy message runs past the end")
    return entry


def _wrapper_inner(buf: bytes | memoryview, pos: int, entry: LegacyEntry,
                   path: str | None) -> tuple[bytes, list[tuple[int, int, int]]]:
    """Decompressed value of a wrapper and its inner entries ``(stored offset, message start, size)``."""
    if entry.magic not in (0, 1):
        raise _inner_error(path, pos, f"invalid wrapper magic {entry.magic}")
    if entry.compression not in (compression.GZIP, compression.SNAPPY, compression.LZ4):
        name = compression.CODEC_NAMES.get(entry.compression, str(entry.compression))
        raise _inner_error(path, pos, f"invalid wrapper compression {name}")
    try:
        _, value = _key_value(memoryview(buf)[pos + 12 : pos + entry.size], entry.magic)
    except ValueError as e:
        raise _inner_error(path, pos, str(e)) from None
    if value is None:
        raise _inner_error(path, pos, "compressed message set with a null value")
    if entry.compression == compression.LZ4 and entry.magic == 0:
        value = compression.lz4_frame_of_magic_0(bytes(value))
    try:
        data = compression.decompress(entry.compression, value)
    except (compression.UnsupportedCodecError, compression.CompressedDataError) as e:
        raise _inner_error(path, pos, f"value does not decompress: {e}") from e
    inner: list[tuple[int, int, int]] = []
    p = 0
    while p + 12 <= len(data):
        off, size = struct.unpack_from(">qi", data, p)
        if size < MESSAGE_OVERHEAD_V0:
            raise CorruptRecordError(path, pos, f"inner message {len(inner)} (byte {p} of the decompressed value) "
                                                f"has size {size} < {MESSAGE_OVERHEAD_V0}")
        if p + 12 + size > len(data):
            break  # incomplete inner entry: Kafka's DataLogInputStream ends here
        if data[p + 17] & ATTR_CODEC_MASK:
            raise _inner_error(path, pos, f"inner message {len(inner)} is itself compressed")
        inner.append((off, p + 12, size))
        p += 12 + size
    if not inner:
        raise _inner_error(path, pos, "compressed message set with no inner messages")
    return data, inner


def _absolute_offsets(entry: LegacyEntry, stored: list[int], pos: int, path: str | None) -> list[int]:
    if entry.magic == 0 or entry.offset == 0:  # v0: absolute; v1 wrapper offset 0: some librdkafka versions
        return stored
    if entry.offset < stored[-1]:
        raise _inner_error(path, pos,
                           f"wrapper offset {entry.offset} is less than the last inner offset {stored[-1]}")
    base = entry.offset - stored[-1]
    return [base + r for r in stored]


def inner_offsets(buf: bytes | memoryview, pos: int = 0, path: str | None = None) -> list[int]:
    """Absolute offsets of the messages inside the entry at ``pos`` (itself if uncompressed).

    Kafka's deep iteration of a wrapper (AbstractLegacyRecordBatch.DeepRecordsIterator):
    the decompressed value is cut into ``offset int64 | size int32 | message`` entries until
    fewer than 12 bytes remain or an entry is incomplete (both end silently); an inner size
    below 14 is a :class:`CorruptRecordError`.  v0 inner offsets are absolute; v1 ones are
    relative to ``wrapper offset - last inner offset`` (base 0 when the wrapper offset is 0),
    and a non-zero wrapper offset below the last inner offset is invalid.  Everything else
    Kafka refuses (null value, zstd, unknown codec, no inner message, a compressed inner
    message, undecompressable data, a key/value length beyond the message) is an
    :class:`InvalidRecordError`; Kafka throws InvalidRecordException, KafkaException or a
    runtime exception there, all fatal where the loader needs this (segment split, docs/loading.md §11).
    """
    entry = _validated_entry(buf, pos, path)
    if entry.compression == compression.NONE:
        return [entry.offset]
    _, inner = _wrapper_inner(buf, pos, entry, path)
    return _absolute_offsets(entry, [off for off, _, _ in inner], pos, path)


def decode_messages(buf: bytes | memoryview, pos: int = 0, path: str | None = None) -> list[LegacyMessage]:
    """Every message of the entry at ``pos``, deep (for tests and tools; recovery never calls this).

    Same rules and errors as :func:`inner_offsets`; a key or value length running past an
    uncompressed message is an :class:`InvalidRecordError`.  Inner CRCs are not checked.
    """
    entry = _validated_entry(buf, pos, path)
    if entry.compression == compression.NONE:
        try:
            key, value = _key_value(memoryview(buf)[pos + 12 : pos + entry.size], entry.magic)
        except ValueError as e:
            raise InvalidRecordError(path, pos, f"legacy message: {e}") from None
        ts = -1 if entry.magic == 0 else entry.timestamp
        return [LegacyMessage(entry.offset, entry.magic, entry.attributes, ts, key, value, entry.crc)]
    data, inner = _wrapper_inner(buf, pos, entry, path)
    offsets = _absolute_offsets(entry, [off for off, _, _ in inner], pos, path)
    out: list[LegacyMessage] = []
    for off, (_, start, size) in zip(offsets, inner):
        msg = memoryview(data)[start : start + size]
        crc, magic, attributes = struct.unpack_from(">Ibb", msg, 0)
        try:
            key, value = _key_value(msg, magic)
        except ValueError as e:
            raise _inner_error(path, pos, f"inner message at offset {off}: {e}") from None
        if magic == 0:
            ts = -1
        elif entry.attributes & ATTR_LOG_APPEND_TIME:
            ts = entry.timestamp
        else:
            (ts,) = TIMESTAMP.unpack_from(msg, 6)
        out.append(LegacyMessage(off, magic, attributes & 0xFF, ts, key, value, crc))
    return out
