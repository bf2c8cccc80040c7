"""Writing KRaft metadata records and metadata log dirs for the tests (mploader itself only reads them).

Records are written as Kafka's generated ``write`` does at a flexible version: the untagged fields the version has,
in schema order, then the tagged fields that differ from their default, by tag; ``extra_tags`` adds raw tagged
fields (unknown ones, or known ones written by hand).
"""

from __future__ import annotations

import base64
import dataclasses
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mploader.format import metadata_records as mr, records
from mploader.format.metadata_image import OFFSET_WIDTH, SNAPSHOT_SUFFIX
from mploader.format.varint import encode_unsigned_varint

API_KEY = {schema.record: key for key, schema in mr.SCHEMAS.items()}


def uvarint(n: int) -> bytes:
    return encode_unsigned_varint(n & 0xFFFFFFFF)


def encode_field(f: mr.Field, value: Any) -> bytes:
    if f.type in ("int8", "int16", "int32"):
        return struct.pack({"int8": ">b", "int16": ">h", "int32": ">i"}[f.type], value)
    if f.type == "uuid":
        return bytes(value)
    if value is None:
        return uvarint(0)
    if f.type == "string":
        raw = value.encode("utf-8")
        return uvarint(len(raw) + 1) + raw
    items = b"".join(struct.pack(">i", v) if f.type == "[]int32" else bytes(v) for v in value)
    return uvarint(len(value) + 1) + items


def tagged_section(fields: dict[int, bytes]) -> bytes:
    return uvarint(len(fields)) + b"".join(uvarint(t) + uvarint(len(b)) + b for t, b in sorted(fields.items()))


def encode_body(record: Any, version: int, extra_tags: dict[int, bytes] | None = None) -> bytes:
    schema = mr.SCHEMAS[API_KEY[type(record)]]
    defaults = {f.name: f.default for f in dataclasses.fields(record)}
    body = b""
    tags = dict(extra_tags or {})
    for f in schema.fields:
        value = getattr(record, f.name)
        if version < f.versions:
            continue
        if f.tag is None:
            body += encode_field(f, value)
        elif value != defaults[f.name] and f.tag not in tags:
            tags[f.tag] = encode_field(f, value)
    return body + tagged_section(tags)


def frame(api_key: int, version: int, body: bytes, frame_version: int = 1) -> bytes:
    return uvarint(frame_version) + uvarint(api_key) + uvarint(version) + body


def encode(record: Any, version: int = 0, extra_tags: dict[int, bytes] | None = None) -> bytes:
    """The value of a metadata log record holding ``record`` (MetadataRecordSerde's frame)."""
    return frame(API_KEY[type(record)], version, encode_body(record, version, extra_tags))


def at_version(record: Any, version: int) -> Any:
    """``record`` as a reader of ``version`` sees it: the fields the version lacks at their defaults."""
    schema = mr.SCHEMAS[API_KEY[type(record)]]
    missing = {f.name for f in schema.fields if version < f.versions}
    defaults = {f.name: f.default for f in dataclasses.fields(record) if f.name in missing}
    return dataclasses.replace(record, **defaults)


def kafka_uuid(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: base64url of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


# --------------------------------------------------------------------------------------------
# Files


Value = bytes  # an encoded metadata record


def batch(base_offset: int, values: Sequence[Value], epoch: int = 1) -> bytes:
    return records.build_batch(base_offset, records.simple_records(list(values)), partition_leader_epoch=epoch)


def control_batch(base_offset: int, control_type: int) -> bytes:
    key = records.CONTROL_KEY.pack(0, control_type)
    return records.build_batch(base_offset, records.simple_records([b"\0\0"], keys=[key]), control=True)


def write_log(directory: Path, batches: Iterable[Sequence[Value]], base_offset: int = 0) -> Path:
    """A segment of one batch per entry of ``batches``, offsets from ``base_offset``."""
    data, offset = b"", base_offset
    for values in batches:
        data += batch(offset, values)
        offset += len(values)
    path = directory / f"{base_offset:0{OFFSET_WIDTH}d}.log"
    path.write_bytes(data)
    return path


def write_snapshot(directory: Path, end_offset: int, epoch: int, values: Sequence[Value]) -> Path:
    """A KRaft snapshot: header control batch, the records in one batch, footer control batch."""
    data = control_batch(0, records.ControlRecordType.SNAPSHOT_HEADER)
    data += batch(1, values) + control_batch(1 + len(values), records.ControlRecordType.SNAPSHOT_FOOTER)
    path = directory / f"{end_offset:0{OFFSET_WIDTH}d}-{epoch:010d}{SNAPSHOT_SUFFIX}"
    path.write_bytes(data)
    return path
