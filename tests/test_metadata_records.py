"""KRaft metadata records (mploader.format.metadata_records): the frame, the schemas' fields by version, tagged
fields, and every way Kafka's generated readers refuse bytes. Kafka's own decoding of real logs is compared in
tests/test_metadata_image.py."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from mploader.errors import MetadataRecordError
from mploader.format import metadata_records as mr
from tests.examples import examples
from tests.metadata_writer import at_version, encode, encode_body, frame, tagged_section, uvarint

ids = st.binary(min_size=16, max_size=16)
int32 = st.integers(-(2**31), 2**31 - 1)
brokers = st.lists(st.integers(-1, 5000), max_size=6).map(tuple)
maybe_brokers = st.none() | brokers
text = st.text(max_size=40)
directories = st.lists(ids, max_size=6).map(tuple)

topic_records = st.builds(mr.TopicRecord, text, ids)
partition_records = st.builds(
    mr.PartitionRecord, int32, ids, brokers, brokers, brokers, brokers, int32, int32, int32,
    st.sampled_from([0, 1]), directories, maybe_brokers, maybe_brokers)
change_records = st.builds(
    mr.PartitionChangeRecord, int32, ids, maybe_brokers, int32, maybe_brokers, maybe_brokers, maybe_brokers,
    st.sampled_from([-1, 0, 1]), st.none() | directories, maybe_brokers, maybe_brokers)
config_records = st.builds(mr.ConfigRecord, st.sampled_from([0, 2, 4, 8, 16, 32, 7]), text, text, st.none() | text)
any_record = st.one_of(
    st.tuples(topic_records, st.just(0)), st.tuples(partition_records, st.integers(0, 2)),
    st.tuples(change_records, st.integers(0, 2)), st.tuples(config_records, st.just(0)),
    st.tuples(st.builds(mr.RemoveTopicRecord, ids), st.just(0)),
    st.tuples(st.builds(mr.FeatureLevelRecord, text, st.integers(-(2**15), 2**15 - 1)), st.just(0)),
    st.tuples(st.builds(mr.BeginTransactionRecord, st.none() | text), st.just(0)),
    st.tuples(st.just(mr.EndTransactionRecord()), st.just(0)),
    st.tuples(st.builds(mr.AbortTransactionRecord, st.none() | text), st.just(0)))
unknown_tags = st.dictionaries(st.integers(9, 2**20), st.binary(max_size=20), max_size=3)


@settings(max_examples=examples(400))
@given(any_record, unknown_tags)
def test_records_read_back_at_their_version(record_and_version: tuple[object, int], extra: dict[int, bytes]) -> None:
    """What a version has reads back; what it lacks reads as the default; unknown tags are skipped."""
    record, version = record_and_version
    assert mr.decode_metadata_record(encode(record, version, extra)) == at_version(record, version)


@settings(max_examples=examples(200))
@given(any_record)
def test_every_truncation_is_refused(record_and_version: tuple[object, int]) -> None:
    value = encode(*record_and_version)
    for n in range(len(value)):
        with pytest.raises(mr.MalformedRecord):
            mr.decode_metadata_record(value[:n])


def test_bytes_of_a_real_topic_record() -> None:
    """A TopicRecord as a controller at metadata.version 19 (3.7) wrote it (Niloufar1171__LDI-POC, offset 416)."""
    topic_id = bytes.fromhex("81 29 df a4 46 ed 41 f4 83 a7 13 36 96 11 27 f4")
    value = bytes([1, 2, 0, 19]) + b"__consumer_offsets" + topic_id + b"\0"
    assert mr.decode_metadata_record(value) == mr.TopicRecord("__consumer_offsets", topic_id)


def test_tagged_leader_recovery_state_and_elr() -> None:
    """PartitionRecord keeps LeaderRecoveryState in tag 0 and, from version 2, the ELR in tags 1 and 2."""
    p = mr.PartitionRecord(0, bytes(16), (1, 2), (1,), (), (), 1, 5, 7, leader_recovery_state=1,
                           directories=(b"d" * 16, b"e" * 16), eligible_leader_replicas=(2,), last_known_elr=())
    assert mr.decode_metadata_record(encode(p, 2)) == p
    assert mr.decode_metadata_record(encode(p, 1)).eligible_leader_replicas is None  # type: ignore[union-attr]


def test_unknown_api_keys_are_skipped_known_or_not() -> None:
    assert mr.decode_metadata_record(frame(20, 0, b"\0")) == mr.SkippedRecord(20, 0)  # NoOpRecord
    skipped = mr.decode_metadata_record(frame(99, 3, b"anything"))
    assert skipped == mr.SkippedRecord(99, 3) and not skipped.known  # type: ignore[union-attr]


TOPIC = mr.TopicRecord("t", bytes(range(16)))
CHANGE = mr.PartitionChangeRecord(0, bytes(16))


@pytest.mark.parametrize(("value", "message"), [
    (frame(2, 0, encode_body(TOPIC, 0), frame_version=0), "unknown frame version 0"),
    (frame(2, 0, encode_body(TOPIC, 0), frame_version=2), "unknown frame version 2"),
    (uvarint(1) + uvarint(0x8000) + uvarint(0), "Value for type was too large."),
    (frame(2, 1, encode_body(TOPIC, 0)), "TopicRecord version 1 is not supported"),
    (frame(3, 3, b""), "PartitionRecord version 3 is not supported"),
    (encode(TOPIC) + b"\0", "Found 1 byte(s) of garbage after 2"),
    (frame(2, 0, uvarint(0) + bytes(16) + b"\0"), "non-nullable field name was serialized as null"),
    (frame(2, 0, uvarint(0x8001) + b"x" * 0x8000 + bytes(17)), "string field name had invalid length 32768"),
    (frame(2, 0, b"\x80\x80\x80\x80\x80\x01"), "varint longer than 5 bytes"),
    (frame(5, 0, encode_body(CHANGE, 0, {8: uvarint(1)})), "Tag 8 is not valid for version 0"),
    (frame(5, 1, encode_body(CHANGE, 1, {6: uvarint(1)})), "Tag 6 is not valid for version 1"),
    (frame(5, 0, encode_body(CHANGE, 0, {1: struct.pack(">ih", 3, 0)})), "tagged field 1 (leader) of 6 bytes holds 4"),
    (frame(5, 0, struct.pack(">i", 0) + bytes(16) + uvarint(1) + uvarint(0) + uvarint(9) + b"\0"),
     "tagged field 0 of 9 bytes"),
    (frame(9, 0, bytes(16) + tagged_section({0: b""})[:-1]), "varint of 1 bytes"),
    (frame(3, 0, struct.pack(">i", 0) + bytes(16) + uvarint(1000)), "a collection of size 999"),
])
def test_refused_like_kafka(value: bytes, message: str) -> None:
    with pytest.raises(mr.MalformedRecord, match=message.replace("(", r"\(").replace(")", r"\)")):
        mr.decode_metadata_record(value)


def test_a_null_value_and_a_bad_record_name_the_file_and_offset() -> None:
    with pytest.raises(MetadataRecordError, match=r"^f\.log at byte 61: metadata record at offset 7 has a null"):
        mr.decode_or_raise(None, "f.log", 61, 7)
    with pytest.raises(MetadataRecordError, match=r"^f\.log at byte 0: metadata record at offset 3: Found 1"):
        mr.decode_or_raise(encode(TOPIC) + b"\0", "f.log", 0, 3)


def test_a_negative_compact_length_reads_as_null_like_javas_int() -> None:
    """Kafka reads the uvarint into an int: 2**32 - 1 is -1, so length - 1 = -2 is read as null."""
    value = frame(4, 0, struct.pack(">b", 2) + uvarint(2) + b"t" + uvarint(2) + b"k" + uvarint(2**32 - 1) + b"\0")
    assert mr.decode_metadata_record(value) == mr.ConfigRecord(2, "t", "k", None)
