"""Compression codecs of record batches (attribute bits 0-2).

gzip is always available (zlib); snappy, lz4 and zstd only when their Python
package is installed.  Recovery never decompresses data batches; control
batches and the tests do.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}


class UnsupportedCodecError(ValueError):
    pass


def _gzip_compress(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


GZIP_HEADER_SIZE = 10


class CompressedDataError(ValueError):
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


_COMPRESS: dict[int, Callable[[bytes], bytes]] = {GZIP: _gzip_compress}
_DECOMPRESS: dict[int, Callable[[bytes], bytes]] = {GZIP: _gzip_decompress}

try:  # lz4 frame format, as Kafka's KafkaLZ4BlockOutputStream writes for v2 batches
    import lz4.frame as _lz4f

    _COMPRESS[LZ4] = lambda d: _lz4f.compress(d)
    _DECOMPRESS[LZ4] = lambda d: _lz4f.decompress(d)
except ImportError:  # pragma: no cover - optional
    pass

try:
    import zstandard as _zstd

    _COMPRESS[ZSTD] = lambda d: _zstd.ZstdCompressor().compress(d)
    _DECOMPRESS[ZSTD] = lambda d: _zstd.ZstdDecompressor().decompressobj().decompress(d)
except ImportError:  # pragma: no cover - optional
    pass


def available_codecs() -> list[str]:
    """Names of the codecs this installation can write."""
    return ["none"] + [CODEC_NAMES[c] for c in sorted(_COMPRESS)]


def codec_id(name: str) -> int:
    for cid, cname in CODEC_NAMES.items():
        if cname == name:
            if cid != NONE and cid not in _COMPRESS:
                raise UnsupportedCodecError(f"codec {name!r} needs its Python package installed")
            return cid
    raise UnsupportedCodecError(f"unknown codec {name!r}; known: {', '.join(CODEC_NAMES.values())}")


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    try:
        return _COMPRESS[codec](data)
    except KeyError:
        raise UnsupportedCodecError(f"cannot compress with codec {codec}") from None


def decompress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    try:
        fn = _DECOMPRESS[codec]
    except KeyError:
        raise UnsupportedCodecError(
            f"cannot decompress codec {CODEC_NAMES.get(codec, codec)}: its package is not installed"
        ) from None
    try:
        return fn(data)
    except CompressedDataError:
        raise
    except Exception as e:  # codec-specific exception types
        raise CompressedDataError(f"{CODEC_NAMES[codec]}: {e}") from e
