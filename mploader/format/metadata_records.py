"""KRaft metadata records: the value of each record of a ``__cluster_metadata-0`` batch (docs/formats.md §17).

Frame (Kafka's ``AbstractApiMessageSerde.read``, used by ``MetadataRecordSerde``)::

    uvarint frameVersion   must be 1 (0: the 2.8 preview's, refused; others unknown)
    uvarint apiKey         the record type (``MetadataRecordType``), at most 32767
    uvarint version        the record's version, at most 32767
    ...     the record's fields, per its JSON schema (metadata/src/main/resources/common/metadata/*.json),
            then nothing: a byte left over is an error

Every metadata record is flexible in all its versions ("flexibleVersions": "0+"), so a body reads as Kafka's
generated ``<Record>Data.read`` does at a flexible version: int8/16/32 big-endian, a uuid as 16 bytes, a string
as a *compact* string (uvarint length + 1, 0 = null, then UTF-8), an array as a *compact* array (uvarint count
+ 1, 0 = null), then the tagged fields (uvarint count, then per field uvarint tag, uvarint size, its bytes).
A tagged field this version does not know is skipped by its size; a known tag in a version that does not have
it is an error, as in Kafka.

Only the records an image of topics, assignments and configs needs are decoded (:data:`SCHEMAS`); the others
(brokers, ACLs, quotas, no-ops...) come back as :class:`SkippedRecord` with their api key, their body unread.
Kafka's schemas at trunk of 2024-10-25 (4.0.0-SNAPSHOT).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mploader.errors import MetadataRecordError

FRAME_VERSION = 1  # AbstractApiMessageSerde.DEFAULT_FRAME_VERSION
MAX_STRING_LENGTH = 0x7FFF  # the generated readers' limit on a string's length

# MetadataRecordType at 4.0.0-SNAPSHOT: api key -> record name (for reports of what was skipped)
API_KEYS = {
    0: "RegisterBrokerRecord", 1: "UnregisterBrokerRecord", 2: "TopicRecord", 3: "PartitionRecord",
    4: "ConfigRecord", 5: "PartitionChangeRecord", 7: "FenceBrokerRecord", 8: "UnfenceBrokerRecord",
    9: "RemoveTopicRecord", 10: "DelegationTokenRecord", 11: "UserScramCredentialRecord", 12: "FeatureLevelRecord",
    14: "ClientQuotaRecord", 15: "ProducerIdsRecord", 17: "BrokerRegistrationChangeRecord",
    18: "AccessControlEntryRecord", 19: "RemoveAccessControlEntryRecord", 20: "NoOpRecord",
    21: "ZkMigrationStateRecord", 22: "RemoveUserScramCredentialRecord", 23: "BeginTransactionRecord",
    24: "EndTransactionRecord", 25: "AbortTransactionRecord", 26: "RemoveDelegationTokenRecord",
    27: "RegisterControllerRecord",
}

NO_LEADER_CHANGE = -2  # PartitionChangeRecord.Leader's default (PartitionRegistration.NO_LEADER_CHANGE)
NO_RECOVERY_STATE_CHANGE = -1  # PartitionChangeRecord.LeaderRecoveryState's default (LeaderRecoveryState.NO_CHANGE)


class MalformedRecord(ValueError):
    """A metadata record's bytes do not read; the caller names the file and offset (:class:`MetadataRecordError`)."""


# --------------------------------------------------------------------------------------------
# The records decoded, one dataclass per JSON schema (fields in Kafka's words)


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """TopicRecord.json, api key 2, version 0."""

    name: str
    topic_id: bytes


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """PartitionRecord.json, api key 3, versions 0-2 (1 adds Directories, KIP-858; 2 the ELR fields, KIP-966)."""

    partition_id: int
    topic_id: bytes
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    leader_recovery_state: int = 0  # tag 0
    directories: tuple[bytes, ...] = ()  # version 1+
    eligible_leader_replicas: tuple[int, ...] | None = None  # tag 1, version 2+
    last_known_elr: tuple[int, ...] | None = None  # tag 2, version 2+


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """ConfigRecord.json, api key 4, version 0: a null value removes the key."""

    resource_type: int  # ConfigResource.Type's id: 2 TOPIC, 4 BROKER, 8 BROKER_LOGGER, 16 CLIENT_METRICS, 32 GROUP
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """PartitionChangeRecord.json, api key 5, versions 0-2: every field but the ids is tagged; None (or the
    NO_..._CHANGE default) means unchanged."""

    partition_id: int
    topic_id: bytes
    isr: tuple[int, ...] | None = None  # tag 0
    leader: int = NO_LEADER_CHANGE  # tag 1
    replicas: tuple[int, ...] | None = None  # tag 2
    removing_replicas: tuple[int, ...] | None = None  # tag 3
    adding_replicas: tuple[int, ...] | None = None  # tag 4
    leader_recovery_state: int = NO_RECOVERY_STATE_CHANGE  # tag 5
    directories: tuple[bytes, ...] | None = None  # tag 8, version 1+
    eligible_leader_replicas: tuple[int, ...] | None = None  # tag 6, version 2+
    last_known_elr: tuple[int, ...] | None = None  # tag 7, version 2+


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    """RemoveTopicRecord.json, api key 9, version 0."""

    topic_id: bytes


@dataclass(frozen=True, slots=True)
class FeatureLevelRecord:
    """FeatureLevelRecord.json, api key 12, version 0 (level 0: the feature is removed)."""

    name: str
    feature_level: int


@dataclass(frozen=True, slots=True)
class BeginTransactionRecord:
    """BeginTransactionRecord.json, api key 23, version 0 (KIP-868 metadata transactions)."""

    name: str | None = None  # tag 0


@dataclass(frozen=True, slots=True)
class EndTransactionRecord:
    """EndTransactionRecord.json, api key 24, version 0."""


@dataclass(frozen=True, slots=True)
class AbortTransactionRecord:
    """AbortTransactionRecord.json, api key 25, version 0."""

    reason: str | None = None  # tag 0


@dataclass(frozen=True, slots=True)
class SkippedRecord:
    """A record whose body is not read: a type the image does not need, or an api key Kafka does not know."""

    api_key: int
    version: int

    @property
    def known(self) -> bool:
        return self.api_key in API_KEYS


MetadataRecord = (TopicRecord | PartitionRecord | ConfigRecord | PartitionChangeRecord | RemoveTopicRecord
                  | FeatureLevelRecord | BeginTransactionRecord | EndTransactionRecord | AbortTransactionRecord
                  | SkippedRecord)


# --------------------------------------------------------------------------------------------
# Schemas: the fields of each decoded record as its JSON file lists them


@dataclass(frozen=True, slots=True)
class Field:
    name: str  # the dataclass attribute
    type: str  # "int8" "int16" "int32" "uuid" "string" "[]int32" "[]uuid"
    versions: int = 0  # "N+": the first version that has the field (nullableVersions are the same in these)
    nullable: bool = False
    tag: int | None = None


@dataclass(frozen=True, slots=True)
class Schema:
    record: type[Any]
    max_version: int
    fields: tuple[Field, ...]


_TAG_ELR = (Field("eligible_leader_replicas", "[]int32", 2, True, 1), Field("last_known_elr", "[]int32", 2, True, 2))
SCHEMAS: dict[int, Schema] = {
    2: Schema(TopicRecord, 0, (Field("name", "string"), Field("topic_id", "uuid"))),
    3: Schema(PartitionRecord, 2, (
        Field("partition_id", "int32"), Field("topic_id", "uuid"), Field("replicas", "[]int32"),
        Field("isr", "[]int32"), Field("removing_replicas", "[]int32"), Field("adding_replicas", "[]int32"),
        Field("leader", "int32"), Field("leader_recovery_state", "int8", tag=0), Field("leader_epoch", "int32"),
        Field("partition_epoch", "int32"), Field("directories", "[]uuid", 1), *_TAG_ELR)),
    4: Schema(ConfigRecord, 0, (Field("resource_type", "int8"), Field("resource_name", "string"),
                                Field("name", "string"), Field("value", "string", nullable=True))),
    5: Schema(PartitionChangeRecord, 2, (
        Field("partition_id", "int32"), Field("topic_id", "uuid"), Field("isr", "[]int32", 0, True, 0),
        Field("leader", "int32", tag=1), Field("replicas", "[]int32", 0, True, 2),
        Field("removing_replicas", "[]int32", 0, True, 3), Field("adding_replicas", "[]int32", 0, True, 4),
        Field("leader_recovery_state", "int8", tag=5), Field("directories", "[]uuid", 1, True, 8),
        Field("eligible_leader_replicas", "[]int32", 2, True, 6), Field("last_known_elr", "[]int32", 2, True, 7))),
    9: Schema(RemoveTopicRecord, 0, (Field("topic_id", "uuid"),)),
    12: Schema(FeatureLevelRecord, 0, (Field("name", "string"), Field("feature_level", "int16"))),
    23: Schema(BeginTransactionRecord, 0, (Field("name", "string", 0, True, 0),)),
    24: Schema(EndTransactionRecord, 0, ()),
    25: Schema(AbortTransactionRecord, 0, (Field("reason", "string", 0, True, 0),)),
}


# --------------------------------------------------------------------------------------------
# Reading (Kafka's ByteBufferAccessor and the generated readers)


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None) -> None:
        self.buf, self.pos, self.end = buf, pos, len(buf) if end is None else end

    def take(self, n: int, what: str) -> int:
        """The position of the next ``n`` bytes, consumed."""
        if n < 0 or n > self.end - self.pos:
            raise MalformedRecord(f"{what} of {n} bytes at byte {self.pos}: only {self.end - self.pos} remain")
        p = self.pos
        self.pos += n
        return p

    def uvarint(self) -> int:
        """ByteUtils.readUnsignedVarint: at most 5 bytes, the value as Java's int (bits past 32 dropped)."""
        raw = 0
        for i in range(5):
            b = self.buf[self.take(1, "varint")]
            raw |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                raw &= 0xFFFFFFFF
                return raw - (1 << 32) if raw >= 1 << 31 else raw
        raise MalformedRecord(f"varint longer than 5 bytes ending at byte {self.pos}")

    def fixed(self, fmt: struct.Struct, what: str) -> int:
        value: int = fmt.unpack_from(self.buf, self.take(fmt.size, what))[0]
        return value

    def uuid(self) -> bytes:
        p = self.take(16, "uuid")
        return bytes(self.buf[p : p + 16])

    def compact_length(self, field: Field) -> int | None:
        """A compact string's or array's length; None for null, refused where the field is not nullable."""
        length = self.uvarint() - 1
        if length >= 0:
            return length
        if not field.nullable:
            raise MalformedRecord(f"non-nullable field {field.name} was serialized as null")
        return None


_INT = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "int32": struct.Struct(">i")}


def _read_string(r: _Reader, field: Field) -> str | None:
    length = r.compact_length(field)
    if length is None:
        return None
    if length > MAX_STRING_LENGTH:
        raise MalformedRecord(f"string field {field.name} had invalid length {length}")
    p = r.take(length, f"string field {field.name}")
    return bytes(r.buf[p : p + length]).decode("utf-8", "replace")  # Java's new String(UTF_8) replaces too


def _read_array(r: _Reader, field: Field) -> tuple[Any, ...] | None:
    length = r.compact_length(field)
    if length is None:
        return None
    if length > r.end - r.pos:  # the generated readers' check before allocating
        raise MalformedRecord(f"field {field.name}: a collection of size {length}, but there are only "
                              f"{r.end - r.pos} bytes remaining")
    if field.type == "[]uuid":
        return tuple(r.uuid() for _ in range(length))
    p = r.take(4 * length, f"array field {field.name}")
    return struct.unpack_from(f">{length}i", r.buf, p)


def _read_fixed(r: _Reader, field: Field) -> int:
    return r.fixed(_INT[field.type], field.name)


_READERS: dict[str, Callable[[_Reader, Field], Any]] = {
    "int8": _read_fixed, "int16": _read_fixed, "int32": _read_fixed, "uuid": lambda r, f: r.uuid(),
    "string": _read_string, "[]int32": _read_array, "[]uuid": _read_array,
}


def _read_tagged_fields(r: _Reader, schema: Schema, version: int, values: dict[str, Any]) -> None:
    """The tagged-field section: a known tag read into ``values`` (and it must fill its size exactly), an unknown
    one skipped by its size; a known tag the version lacks is refused ("Tag N is not valid for version V")."""
    tagged = {f.tag: f for f in schema.fields if f.tag is not None}
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        start = r.take(size, f"tagged field {tag}")
        field = tagged.get(tag)
        if field is None:
            continue  # Kafka keeps it as an unknown tagged field
        if version < field.versions:
            raise MalformedRecord(f"Tag {tag} is not valid for version {version}")
        sub = _Reader(r.buf, start, start + size)
        values[field.name] = _READERS[field.type](sub, field)
        if sub.pos != sub.end:
            raise MalformedRecord(f"tagged field {tag} ({field.name}) of {size} bytes holds {sub.pos - start}")


def _read_body(r: _Reader, schema: Schema, version: int) -> MetadataRecord:
    if not 0 <= version <= schema.max_version:
        raise MalformedRecord(f"{schema.record.__name__} version {version} is not supported "
                              f"(versions 0-{schema.max_version})")
    values: dict[str, Any] = {}
    for field in schema.fields:
        if field.tag is None and version >= field.versions:
            values[field.name] = _READERS[field.type](r, field)
    _read_tagged_fields(r, schema, version, values)
    record: MetadataRecord = schema.record(**values)
    return record


def _frame_short(r: _Reader, what: str) -> int:
    """AbstractApiMessageSerde.unsignedIntToShort: above 32767 is refused; Java's (short) of the rest."""
    value = r.uvarint()
    if value > 0x7FFF:
        raise MalformedRecord(f"Value for {what} was too large.")
    return ((value + 0x8000) & 0xFFFF) - 0x8000


def decode_metadata_record(value: bytes) -> MetadataRecord:
    """The metadata record framed in a batch record's ``value`` (MetadataRecordSerde.read); raises
    :class:`MalformedRecord`."""
    r = _Reader(value)
    frame_version = _frame_short(r, "frame version")
    if frame_version != FRAME_VERSION:
        raise MalformedRecord(f"unknown frame version {frame_version} (only frame version {FRAME_VERSION} is "
                              "supported; 0 is the KRaft preview of Kafka 2.8)")
    api_key, version = _frame_short(r, "type"), _frame_short(r, "version")
    schema = SCHEMAS.get(api_key)
    if schema is None:
        return SkippedRecord(api_key, version)
    record = _read_body(r, schema, version)
    if r.pos != r.end:
        raise MalformedRecord(f"Found {r.end - r.pos} byte(s) of garbage after {api_key}")
    return record


def decode_or_raise(value: bytes | None, path: str, position: int, offset: int) -> MetadataRecord:
    """:func:`decode_metadata_record` of the record at ``offset`` (its batch at byte ``position`` of ``path``);
    a failure is a :class:`MetadataRecordError` naming them."""
    if value is None:
        raise MetadataRecordError(path, position, f"metadata record at offset {offset} has a null value")
    try:
        return decode_metadata_record(value)
    except MalformedRecord as e:
        raise MetadataRecordError(path, position, f"metadata record at offset {offset}: {e}") from e
