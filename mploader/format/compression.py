"""Compression codecs of record batches (attribute bits 0-2).

gzip is always available (zlib); snappy, lz4 and zstd only when their Python
package is installed (the ``codecs`` extra).  Recovery never decompresses data
batches; control batches, legacy wrappers split for offset overflow and the
tests do.
"""

from __future__ import annotations

import functools
import gzip
import zlib
from collections.abc import Callable

from mploader.errors import MploaderError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}


class UnsupportedCodecError(MploaderError, ValueError):
    """A codec id this installation cannot (de)compress: unknown, or its optional package missing."""


def _gzip_compress(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


GZIP_HEADER_SIZE = 10


class CompressedDataError(MploaderError, ValueError):
    """Compressed bytes that do not decompress.

    ``truncated``: the stream ended early after a complete header.  Java's gzip stream
    reports that as an EOFException (Kafka's record reader: "premature EOF", an
    InvalidRecordException); a shorter input fails in the stream's constructor and any
    other corruption is an IOException, both of which Kafka wraps in a KafkaException.
    """

    def __init__(self, message: str, truncated: bool = False):
        super().__init__(message)
        self.truncated = truncated


def _gzip_decompress(data: bytes) -> bytes:
    try:
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)  # like Java, ignores bytes after the member
    except zlib.error as e:
        truncated = "incomplete or truncated stream" in str(e) and len(data) >= GZIP_HEADER_SIZE
        raise CompressedDataError(f"gzip: {e}", truncated) from e


def _gzip_head(data: bytes, limit: int) -> bytes:
    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, limit)


_PACKAGES = {SNAPPY: "cramjam", LZ4: "lz4", ZSTD: "zstandard"}  # what each optional codec needs
_COMPRESS: dict[int, Callable[[bytes], bytes]] = {GZIP: _gzip_compress}
_DECOMPRESS: dict[int, Callable[[bytes], bytes]] = {GZIP: _gzip_decompress}
_HEAD: dict[int, Callable[[bytes, int], bytes]] = {GZIP: _gzip_head}  # the first N bytes only


@functools.cache  # not locked: a thread that calls while another registers registers the same again, harmlessly
def _optional_codecs() -> None:
    """Register snappy, lz4 and zstd on the first (de)compression: importing their packages costs every
    process ~10 ms at start-up (the CLI, each pool worker), and most loads never decompress anything."""
    try:  # snappy-java's framing, as Kafka's SnappyCompression writes and reads it for every magic
        from mploader.format import xerial_snappy as _snappy

        _COMPRESS[SNAPPY] = _snappy.compress
        _DECOMPRESS[SNAPPY] = _snappy.decompress
        _HEAD[SNAPPY] = _snappy.decompress_head
    except ImportError:  # pragma: no cover - optional
        pass

    try:  # lz4 frame format, as Kafka's KafkaLZ4BlockOutputStream writes for v2 batches
        import lz4.frame as _lz4f

        _COMPRESS[LZ4] = lambda d: _lz4f.compress(d)

        def _lz4_decompress(data: bytes) -> bytes:
            # not lz4.frame.decompress: it allocates the frame's declared content size first (8 bytes of header
            # asking for 2**62 raise MemoryError; for 1 GiB, 1 GiB is reserved before a byte is read)
            frame = _lz4f.LZ4FrameDecompressor()
            out: bytes = frame.decompress(data)
            if not frame.eof:
                raise CompressedDataError("lz4: frame incomplete")
            return out

        _DECOMPRESS[LZ4] = _lz4_decompress
        _HEAD[LZ4] = lambda d, limit: _lz4f.LZ4FrameDecompressor().decompress(d, max_length=limit)
    except ImportError:  # pragma: no cover - optional
        pass

    try:
        import zstandard as _zstd

        _COMPRESS[ZSTD] = lambda d: _zstd.ZstdCompressor().compress(d)
        _DECOMPRESS[ZSTD] = lambda d: _zstd.ZstdDecompressor().decompressobj().decompress(d)

        def _zstd_head(data: bytes, limit: int) -> bytes:
            out = bytearray()
            with _zstd.ZstdDecompressor().stream_reader(data) as reader:
                while len(out) < limit and (chunk := reader.read(limit - len(out))):
                    out += chunk
            return bytes(out)

        _HEAD[ZSTD] = _zstd_head
    except ImportError:  # pragma: no cover - optional
        pass


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (the LZ4 frame format's checksum), for the few bytes of a frame descriptor."""
    n, p = len(data), 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while p + 16 <= n:
            for i in range(4):
                v[i] = (_rotl((v[i] + int.from_bytes(data[p:p + 4], "little") * _P2) & _M32, 13) * _P1) & _M32
                p += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while p + 4 <= n:
        h = (_rotl((h + int.from_bytes(data[p:p + 4], "little") * _P3) & _M32, 17) * _P4) & _M32
        p += 4
    while p < n:
        h = (_rotl((h + data[p] * _P5) & _M32, 11) * _P1) & _M32
        p += 1
    h = ((h ^ (h >> 15)) * _P2) & _M32
    h = ((h ^ (h >> 13)) * _P3) & _M32
    return h ^ (h >> 16)


def lz4_frame_of_magic_0(data: bytes) -> bytes:
    """A magic-v0 LZ4 wrapper's frame with its header checksum made right (KAFKA-3160: brokers and clients
    of 0.8/0.9 hashed the 4-byte magic number too). Kafka reads such a frame with
    ``KafkaLZ4BlockInputStream(ignoreFlagDescriptorChecksum = magic == 0)``; lz4's reader checks it, so the
    byte is recomputed over the descriptor (FLG, BD and the optional 8-byte content size) alone."""
    if len(data) < 7:
        return data
    end = 6 + (8 if data[4] & 0x08 else 0)  # FLG's content-size bit
    if len(data) <= end:
        return data
    return data[:end] + bytes([(xxh32(data[4:end]) >> 8) & 0xFF]) + data[end + 1:]


def available_codecs() -> list[str]:
    """Names of the codecs this installation can write."""
    _optional_codecs()
    return ["none"] + [CODEC_NAMES[c] for c in sorted(_COMPRESS)]


def codec_id(name: str) -> int:
    _optional_codecs()
    for cid, cname in CODEC_NAMES.items():
        if cname == name:
            if cid != NONE and cid not in _COMPRESS:
                raise UnsupportedCodecError(f"codec {name!r} needs the Python package {_PACKAGES.get(cid, name)!r} "
                                            f"(pip install 'mploader[codecs]')")
            return cid
    raise UnsupportedCodecError(f"unknown codec {name!r}; known: {', '.join(CODEC_NAMES.values())}")


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    _optional_codecs()
    try:
        return _COMPRESS[codec](data)
    except KeyError:
        raise UnsupportedCodecError(f"cannot compress with codec {codec}") from None


def decompress_head(codec: int, data: bytes, limit: int) -> bytes:
    """The first ``limit`` bytes ``data`` decompresses to, without decompressing the rest: a stream that is no
    longer comes whole, with :func:`decompress`'s outcome and errors, so a shorter result means the whole
    stream.  What a reader that needs only the start of a stream takes (a control batch's first record, all
    Kafka's RecordIterator reads of it): a few KB of zstd that decompress to gigabytes (its frames reach tens of
    thousands to one) cost ``limit`` bytes, not gigabytes."""
    if codec == NONE:
        return data[:limit]
    _optional_codecs()
    head_of = _HEAD.get(codec)
    if head_of is None:
        return decompress(codec, data)  # unknown or not installed: its error
    try:
        head = head_of(data, limit)
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001 - corrupt within the head: decompress() says how, stopping at the same place
        return decompress(codec, data)[:limit]
    return head if len(head) >= limit else decompress(codec, data)


def decompress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    _optional_codecs()
    try:
        fn = _DECOMPRESS[codec]
    except KeyError:
        raise UnsupportedCodecError(
            f"cannot decompress codec {CODEC_NAMES.get(codec, codec)}: the Python package "
            f"{_PACKAGES.get(codec, '?')!r} is not installed (pip install 'mploader[codecs]')"
        ) from None
    try:
        return fn(data)
    except (CompressedDataError, MemoryError):  # no memory is this process's trouble, not the data's
        raise
    except Exception as e:  # codec-specific exception types
        raise CompressedDataError(f"{CODEC_NAMES[codec]}: {e}") from e
