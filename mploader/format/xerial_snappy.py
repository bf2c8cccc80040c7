"""Snappy as Kafka stores it: xerial snappy-java's stream framing around raw snappy blocks.

Kafka compresses a snappy batch (v2) or wrapper message (magic 0/1) with ``SnappyCompression``, which
wraps snappy-java's ``SnappyOutputStream``; it reads one with ``SnappyInputStream``.  The layout
(integers big-endian)::

    header   8 bytes  magic 0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00
             int32    version (1)
             int32    minimum compatible version (1)
    chunks   int32    length N of the block
             N bytes  one raw snappy block: at most BLOCK_SIZE (32 KiB) of the input

An empty input is the header alone.  Reading, ``SnappyInputStream`` decides once, from the first 16
bytes: if there are fewer or the magic is absent, the whole input is one raw snappy block (what
``Snappy.compress`` returns, as some non-Java clients send).  Otherwise (the two versions are not
checked) it reads chunks until fewer than 4 bytes remain (those 1-3 bytes are ignored, not an error).
A length equal to the magic's first 4 bytes starts the 16-byte header of a concatenated stream (a
version below 1 is an error).  With a wrong magic there, snappy-java reports the end of the stream to
that one call but reads on after the 16 bytes at the next; Kafka's reader calls again
(``ChunkedBytesStream`` asks ``available()`` after a short read), so what follows is read as chunks here
too.  Errors: an empty input, a negative length, a chunk cut short, a block that is not valid snappy.
Every error here is a ValueError; :mod:`.compression` wraps it with the codec's name.

Needs ``cramjam`` (its raw snappy, also what python-snappy uses); importing this module without it
raises ImportError, which :mod:`.compression` turns into "install the package" errors.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import cramjam

MAGIC = b"\x82SNAPPY\x00"
VERSION = 1  # SnappyCodec.DEFAULT_VERSION and MINIMUM_COMPATIBLE_VERSION
BLOCK_SIZE = 32 * 1024  # SnappyOutputStream.DEFAULT_BLOCK_SIZE, which Kafka does not change
_VERSIONS = struct.Struct(">ii")
HEADER = MAGIC + _VERSIONS.pack(VERSION, VERSION)
_LENGTH = struct.Struct(">i")
_CONCATENATED = _LENGTH.unpack(MAGIC[:4])[0]  # a chunk length that is really a next stream's header


def compress(data: bytes) -> bytes:
    """``data`` framed as Kafka's producer and broker write it: the header, then one chunk per 32 KiB."""
    view = memoryview(data)
    out = [HEADER]
    for start in range(0, len(view), BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + BLOCK_SIZE]))
        out += (_LENGTH.pack(len(block)), block)
    return b"".join(out)


# A raw snappy element yields at most 64 bytes for 3 of input (a copy with a 2-byte offset): a block that
# declares more than this many bytes per input byte is corrupt whatever follows.
MAX_EXPANSION = 22


def _declared_length(block: memoryview) -> int | None:
    """The uncompressed length a raw snappy block starts with (an unsigned varint), None if unreadable."""
    value = 0
    for i in range(min(5, len(block))):
        value |= (block[i] & 0x7F) << (7 * i)
        if not block[i] & 0x80:
            return value
    return None


def _raw(block: memoryview, what: str) -> bytes:
    declared = _declared_length(block)
    if declared is None and len(block) >= 5:
        # snappy's length is a varint of at most 5 bytes: this one does not end, so the block is corrupt. cramjam
        # reads it anyway when more bytes follow (fb ff ff ff 8e 00 00: 4,026,531,835 bytes allocated, an abort
        # where that fails; found by perf/fuzz.py), so it is refused here with the error cramjam gives 5 bytes
        raise ValueError(f"{what}: corrupt input (invalid header)")
    if declared is not None and declared > MAX_EXPANSION * len(block):
        # cramjam allocates the declared length before it reads a byte (4 GiB for a 5-byte block, and an abort
        # of the process where that fails): refused first, as snappy-java's decompression would fail on it
        raise ValueError(f"{what}: corrupt input (the block declares {declared} bytes, more than its "
                         f"{len(block)} bytes can hold)")
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as e:
        raise ValueError(f"{what}: {str(e).removeprefix('snappy: ')}") from e


def decompress(data: bytes | memoryview) -> bytes:
    """What ``SnappyInputStream`` yields for ``data``: framed chunks, or one raw block without the header."""
    return b"".join(_blocks(data))


def decompress_head(data: bytes | memoryview, limit: int) -> bytes:
    """The first ``limit`` bytes :func:`decompress` gives, decompressing the blocks up to there only."""
    out = bytearray()
    for block in _blocks(data):
        out += block
        if len(out) >= limit:
            break
    return bytes(out[:limit])


def _blocks(data: bytes | memoryview) -> Iterator[bytes]:
    view = memoryview(data)
    if not view:
        raise ValueError("empty stream")
    if len(view) < len(HEADER) or view[: len(MAGIC)] != MAGIC:
        yield _raw(view, "no xerial header, not a raw snappy block either")
        return
    p = len(HEADER)
    while p + _LENGTH.size <= len(view):
        (n,) = _LENGTH.unpack_from(view, p)
        if n == _CONCATENATED:
            if p + len(HEADER) > len(view):
                raise ValueError(f"concatenated stream header at byte {p} cut short")
            version, _ = _VERSIONS.unpack_from(view, p + len(MAGIC))
            if view[p : p + len(MAGIC)] == MAGIC and version < VERSION:
                raise ValueError(f"concatenated stream at byte {p} has version {version}, below {VERSION}")
            p += len(HEADER)
            continue
        p += _LENGTH.size
        if n < 0:
            raise ValueError(f"chunk at byte {p - _LENGTH.size} has negative length {n}")
        if p + n > len(view):
            raise ValueError(f"chunk at byte {p - _LENGTH.size} declares {n} bytes, {len(view) - p} remain")
        yield _raw(view[p : p + n], f"chunk at byte {p - _LENGTH.size}")
        p += n
