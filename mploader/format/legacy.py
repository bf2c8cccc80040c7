"""Legacy message sets, magic v0 and v1 (FORMATS.md §7).

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

from ..errors import CorruptRecordError
from . import compression

MESSAGE_OVERHEAD_V0 = 14  # crc+magic+attributes+keyLength+valueLength
MESSAGE_OVERHEAD_V1 = 22
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
    timestamp: int  # v1 outer timestamp; -1 for v0

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_CODEC_MASK


def read_entry(buf: bytes | memoryview, pos: int = 0, path: str | None = None) -> LegacyEntry:
    if pos + ENTRY_PREFIX.size > len(buf):
        raise CorruptRecordError(path, pos, "truncated legacy message")
    offset, size, crc, magic, attributes = ENTRY_PREFIX.unpack_from(buf, pos)
    timestamp = -1
    if magic >= 1 and pos + 26 <= len(buf):
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
        raise CorruptRecordError(path, pos, f"legacy message CRC mismatch: stored {entry.crc:#010x}, computed {actual:#010x}")
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
    for i, (off, value, ts) in enumerate(entries):
        inner_off = off if magic == 0 else off - entries[0][0]
        inner += build_message(inner_off, value, magic=magic, timestamp=ts)
    attrs = (codec & ATTR_CODEC_MASK) | (ATTR_LOG_APPEND_TIME if log_append_time else 0)
    max_ts = max(ts for _, _, ts in entries) if magic >= 1 else -1
    return build_message(last, compression.compress(codec, bytes(inner)), magic=magic, timestamp=max_ts,
                         attributes=attrs)


def inner_offsets(buf: bytes | memoryview, pos: int, path: str | None = None) -> list[int]:
    """Absolute offsets of the messages inside the entry at ``pos`` (itself if uncompressed)."""
    entry = read_entry(buf, pos, path)
    if entry.compression == compression.NONE:
        return [entry.offset]
    key_at = pos + 12 + (MESSAGE_OVERHEAD_V1 - 4 if entry.magic >= 1 else MESSAGE_OVERHEAD_V0 - 4)
    (klen,) = LENGTH.unpack_from(buf, key_at)
    vat = key_at + 4 + max(klen, 0)
    (vlen,) = LENGTH.unpack_from(buf, vat)
    data = compression.decompress(entry.compression, bytes(memoryview(buf)[vat + 4 : vat + 4 + vlen]))
    rel: list[int] = []
    p = 0
    while p + 12 <= len(data):
        off, size = struct.unpack_from(">qi", data, p)
        rel.append(off)
        p += 12 + size
    if entry.magic == 0 or not rel:
        return rel
    base = 0 if entry.offset == 0 else entry.offset - rel[-1]
    return [base + r for r in rel]
