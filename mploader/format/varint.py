"""Zig-zag varints as Kafka writes them inside v2 records (docs/formats.md §0)."""

from __future__ import annotations

from mploader.errors import InvalidRecordError

_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10


def encode_varint(value: int) -> bytes:
    """Zig-zag encode a signed int (works for int32 and int64 values)."""
    return encode_unsigned_varint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def encode_unsigned_varint(value: int) -> bytes:
    """A non-negative int as Kafka's ``ByteUtils.writeUnsignedVarint`` writes it (7 bits a byte, low first)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode(buf: bytes | memoryview, pos: int, max_bytes: int, bits: int) -> tuple[int, int]:
    if 0 <= pos < len(buf):  # fast path: one-byte varint (-64..63), by far the most common
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    raw = 0
    shift = 0
    for i in range(max_bytes):
        if pos + i >= len(buf):
            raise InvalidRecordError(None, pos, "varint runs past the end of the record")
        b = buf[pos + i]
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            raw &= (1 << bits) - 1
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
        shift += 7
    raise InvalidRecordError(None, pos, f"varint longer than {max_bytes} bytes")


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Return (value, next position) of the varint (at most 5 bytes) at ``pos``."""
    return _decode(buf, pos, _MAX_VARINT_BYTES, 32)


def decode_varlong(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Return (value, next position) of the varlong (at most 10 bytes) at ``pos``."""
    return _decode(buf, pos, _MAX_VARLONG_BYTES, 64)
