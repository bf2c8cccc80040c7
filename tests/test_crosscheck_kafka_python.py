"""Cross-check of the format layer against kafka-python, an implementation nobody on the team wrote.

Both directions, with property-based inputs:

* batches built by kafka-python (``DefaultRecordBatchBuilder``, ``LegacyRecordBatchBuilder``,
  ``MemoryRecordsBuilder``) are read by mploader with the same fields and valid CRCs;
* batches written by mploader (``records.build_batch``, ``build_end_txn_marker_batch``,
  ``legacy.build_message`` / ``build_wrapper``) are read by kafka-python with valid CRCs and
  the same values.

Codecs: none and gzip always; snappy/lz4/zstd when both libraries can use them here (scripts/test
installs the ``codecs`` extra and, in ``dev``, what kafka-python needs: python-snappy, xxhash), skipped
otherwise; tests/test_snappy.py adds batches that span several snappy chunks.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka.record.default_records import ControlRecord, DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from mploader.format import compression, legacy, records
from tests.examples import examples
from tests.log_readout import read_log

SETTINGS = settings(max_examples=examples(50), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
INT32_MAX = 2**31 - 1

# kafka-python's codec ids equal Kafka's (docs/formats.md §5): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
_OPTIONAL_CODECS = {compression.SNAPPY: "snappy", compression.LZ4: "lz4", compression.ZSTD: "zstd"}


def _codec_available(codec: int) -> bool:
    if codec in (compression.NONE, compression.GZIP):
        return True
    from kafka import codec as kcodec

    has = {compression.SNAPPY: kcodec.has_snappy, compression.LZ4: kcodec.has_lz4,
           compression.ZSTD: kcodec.has_zstd}[codec]()
    return has and compression.CODEC_NAMES[codec] in compression.available_codecs()


CODECS = [c for c in (compression.NONE, compression.GZIP, *_OPTIONAL_CODECS) if _codec_available(c)]

keys_values = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)


@st.composite
def v2_inputs(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 8))
    first_ts = draw(st.integers(0, 2**42))
    ts = [first_ts] + [first_ts + draw(st.integers(-5000, 5000)) for _ in range(n - 1)]
    idempotent = draw(st.booleans())
    return {
        "codec": draw(st.sampled_from(CODECS)),
        "base_offset": draw(st.integers(0, 2**62)),
        "leader_epoch": draw(st.integers(-1, INT32_MAX)),
        "producer_id": draw(st.integers(0, 2**62)) if idempotent else -1,
        "producer_epoch": draw(st.integers(0, 2**15 - 1)) if idempotent else -1,
        # near INT32_MAX the last sequence wraps around (docs/formats.md §5)
        "base_sequence": draw(st.one_of(st.integers(0, 1000), st.integers(INT32_MAX - 8, INT32_MAX)))
        if idempotent else -1,
        "transactional": idempotent and draw(st.booleans()),
        "records": [(ts[i], draw(keys_values), draw(keys_values), draw(headers)) for i in range(n)],
    }


def _patch_outside_crc(batch: bytearray, base_offset: int, leader_epoch: int) -> bytes:
    """Set what the broker sets (baseOffset, partitionLeaderEpoch): both outside the CRC."""
    struct.pack_into(">q", batch, 0, base_offset)
    struct.pack_into(">i", batch, 12, leader_epoch)
    return bytes(batch)


def _kafka_python_v2(inp: dict[str, Any]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=inp["codec"], is_transactional=inp["transactional"],
        producer_id=inp["producer_id"], producer_epoch=inp["producer_epoch"],
        base_sequence=inp["base_sequence"], batch_size=1 << 20)
    for i, (ts, key, value, hdrs) in enumerate(inp["records"]):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=hdrs) is not None
    return _patch_outside_crc(builder.build(), inp["base_offset"], inp["leader_epoch"])


# --------------------------------------------------------------------------------------------
# kafka-python writes, mploader reads


@SETTINGS
@given(v2_inputs())
def test_v2_batch_built_by_kafka_python(inp: dict[str, Any]) -> None:
    data = _kafka_python_v2(inp)
    h = records.ensure_valid(data, 0, "kp.log")  # size >= 61 and CRC-32C match
    theirs = MemoryRecords(data).next_batch()
    n = len(inp["records"])
    timestamps = [r[0] for r in inp["records"]]
    assert h.size == len(data) == theirs.size_in_bytes
    assert (h.base_offset, h.partition_leader_epoch, h.magic) == (inp["base_offset"], inp["leader_epoch"], 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == \
        (inp["producer_id"], inp["producer_epoch"], inp["base_sequence"])
    assert h.has_producer_id == (inp["producer_id"] >= 0) == theirs.has_producer_id()
    assert h.is_transactional == inp["transactional"] and not h.is_control and not h.is_log_append_time
    # kafka-python sends uncompressed when compressing does not pay off
    assert h.compression == theirs.compression_type in (compression.NONE, inp["codec"])
    assert (h.records_count, h.last_offset_delta, h.last_offset) == (n, n - 1, inp["base_offset"] + n - 1)
    assert (h.base_timestamp, h.max_timestamp) == (timestamps[0], max(timestamps))
    assert h.last_sequence == theirs.last_sequence
    if inp["base_sequence"] >= 0:
        expected_last = inp["base_sequence"] + n - 1
        assert h.last_sequence == (expected_last if expected_last <= INT32_MAX else expected_last - 2**31)
    assert (h.crc, h.attributes) == (theirs.crc, theirs.attributes)

    recs = records.decode_records(data, 0, "kp.log")
    assert [r.offset_delta for r in recs] == list(range(n))
    assert [h.base_timestamp + r.timestamp_delta for r in recs] == timestamps
    assert [(r.key, r.value, list(r.headers)) for r in recs] == [(k, v, hd) for _, k, v, hd in inp["records"]]

    readout = read_log(data)
    assert readout.valid_bytes == len(data) and readout.stop_reason == "end"
    [e] = readout.entries
    assert (e.base_offset, e.last_offset, e.max_timestamp, e.partition_leader_epoch, e.valid) == \
        (h.base_offset, h.last_offset, h.max_timestamp, h.partition_leader_epoch, True)


@SETTINGS
@given(st.lists(v2_inputs(), min_size=1, max_size=4))
def test_log_of_kafka_python_batches_frames_like_kafka_python(inputs: list[dict[str, Any]]) -> None:
    data = b"".join(_kafka_python_v2(i) for i in inputs)
    readout = read_log(data, "kp.log")
    theirs = list(MemoryRecords(data))
    assert readout.valid_bytes == len(data) == MemoryRecords(data).valid_bytes()
    assert [(e.size, e.base_offset, e.last_offset, e.valid) for e in readout.entries] == \
        [(b.size_in_bytes, b.base_offset, b.last_offset, b.validate_crc()) for b in theirs]
    # a torn tail: everything before the last batch stays valid, the rest is an incomplete entry
    cut = len(data) - readout.entries[-1].size + 20
    torn = read_log(data[:cut])
    assert torn.valid_bytes == readout.entries[-1].position and torn.stop_reason == "incomplete"


def test_memory_records_builder_v2_producer_side_offsets() -> None:
    """MemoryRecordsBuilder writes baseOffset 0 and puts its offsets in the record deltas."""
    b = MemoryRecordsBuilder(magic=2, compression_type=compression.GZIP, batch_size=1 << 20, offset=7,
                             transactional=True, producer_id=42, producer_epoch=3, base_sequence=11)
    for i in range(30):
        b.append(timestamp=1_700_000_000_000 + i, key=b"k", value=b"value-%d" % i, headers=[("h", b"1")])
    b.close()
    data = bytes(b.buffer())
    h = records.ensure_valid(data, 0)
    assert (h.base_offset, h.last_offset, h.compression, h.records_count) == (0, 36, compression.GZIP, 30)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (42, 3, 11, True)
    recs = records.decode_records(data)
    assert [r.offset_delta for r in recs] == list(range(7, 37))
    assert [r.value for r in recs] == [b"value-%d" % i for i in range(30)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [c for c in CODECS if c != compression.ZSTD])  # zstd is illegal in legacy
def test_legacy_messages_built_by_kafka_python(magic: int, codec: int) -> None:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    inputs = [(i, 1_600_000_000_000 + 7 * i, None if i % 3 == 0 else b"key%d" % i, None if i == 4 else b"v" * i)
              for i in range(6)]
    for off, ts, key, value in inputs:
        assert builder.append(off, timestamp=ts, key=key, value=value) is not None
    data = bytes(builder.build())
    readout = read_log(data, "legacy.log")
    assert readout.valid_bytes == len(data) and all(e.valid for e in readout.entries)
    expected_ts = [ts if magic else -1 for _, ts, _, _ in inputs]
    if codec == compression.NONE:  # one uncompressed message per entry
        assert [e.last_offset for e in readout.entries] == [0, 1, 2, 3, 4, 5]
        got = [m for e in readout.entries for m in legacy.decode_messages(data, e.position)]
    else:  # one wrapper; kafka-python (like a producer) gives it offset 0, so inner offsets stay relative
        [e] = readout.entries
        entry = legacy.ensure_valid(data, 0)
        assert (entry.offset, entry.compression, entry.magic) == (0, codec, magic)
        assert legacy.inner_offsets(data, 0) == [0, 1, 2, 3, 4, 5]
        got = legacy.decode_messages(data, 0)
        # the broker assigns the wrapper the last absolute offset (outside the CRC, so patch it):
        # v1 inner offsets are relative to it, v0 inner offsets are absolute already
        moved = struct.pack(">q", 105) + data[8:]
        expected_offsets = [100 + i for i in range(6)] if magic == 1 else list(range(6))
        assert legacy.inner_offsets(moved, 0) == expected_offsets
        assert [(r.offset, r.value) for r in next(iter(MemoryRecords(moved)))] == \
            [(o, v) for o, (_, _, _, v) in zip(expected_offsets, inputs)]
    assert [(m.offset, m.timestamp, m.key, m.value) for m in got] == \
        [(off, ts, key, value) for (off, _, key, value), ts in zip(inputs, expected_ts)]


# --------------------------------------------------------------------------------------------
# mploader writes, kafka-python reads


def _kp_batch(data: bytes) -> DefaultRecordBatch:
    mr = MemoryRecords(data)
    batch = mr.next_batch()
    assert isinstance(batch, DefaultRecordBatch) and mr.next_batch() is None
    assert batch.validate_crc()
    return batch


@SETTINGS
@given(v2_inputs(), st.booleans(), st.sampled_from([None, 5, 10]))
def test_v2_batch_built_by_mploader(inp: dict[str, Any], log_append_time: bool, offset_gap: int | None) -> None:
    base_ts = inp["records"][0][0]
    recs = [records.Record(i * (offset_gap or 1), ts - base_ts, k, v, tuple(hd))
            for i, (ts, k, v, hd) in enumerate(inp["records"])]
    data = records.build_batch(
        inp["base_offset"], recs, partition_leader_epoch=inp["leader_epoch"], codec=inp["codec"],
        log_append_time=log_append_time, transactional=inp["transactional"], producer_id=inp["producer_id"],
        producer_epoch=inp["producer_epoch"], base_sequence=inp["base_sequence"], base_timestamp=base_ts)
    b = _kp_batch(data)
    max_ts = max(ts for ts, _, _, _ in inp["records"])
    assert (b.base_offset, b.leader_epoch, b.magic, b.size_in_bytes) == \
        (inp["base_offset"], inp["leader_epoch"], 2, len(data))
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == \
        (inp["producer_id"], inp["producer_epoch"], inp["base_sequence"])
    assert (b.is_transactional, b.is_control_batch, b.compression_type) == (inp["transactional"], False, inp["codec"])
    assert (b.first_timestamp, b.max_timestamp, b.timestamp_type) == (base_ts, max_ts, int(log_append_time))
    assert b.last_offset == inp["base_offset"] + recs[-1].offset_delta and b.records_count == len(recs)
    got = [(r.offset, r.timestamp, r.key, r.value, [tuple(x) for x in r.headers]) for r in b]
    assert got == [(inp["base_offset"] + r.offset_delta, max_ts if log_append_time else ts, k, v, hd)
                   for r, (ts, k, v, hd) in zip(recs, inp["records"])]
    assert records.ensure_valid(data, 0).crc == b.crc


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_marker_built_by_mploader(codec: int, commit: bool) -> None:
    data = records.build_end_txn_marker_batch(
        1234, producer_id=2**40 + 5, producer_epoch=17, commit=commit, coordinator_epoch=77,
        timestamp=1_700_000_123_456, partition_leader_epoch=9, codec=codec)
    if codec == compression.NONE:
        assert len(data) == 78  # docs/formats.md §6
    b = _kp_batch(data)
    assert (b.is_control_batch, b.is_transactional, b.base_offset, b.leader_epoch) == (True, True, 1234, 9)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.compression_type) == (2**40 + 5, 17, -1, codec)
    [rec] = list(b)
    assert isinstance(rec, ControlRecord)
    assert (rec.offset, rec.timestamp, rec.version) == (1234, 1_700_000_123_456, 0)
    assert (rec.commit, rec.abort) == (commit, not commit)
    assert struct.unpack(">hi", rec.value) == (0, 77)  # end-transaction marker value: version, coordinatorEpoch
    h = records.ensure_valid(data, 0)
    marker = records.read_end_txn_marker(data, 0, h)
    assert marker is not None
    assert (marker.is_commit, marker.coordinator_epoch, marker.timestamp) == (commit, 77, 1_700_000_123_456)


def test_delete_horizon_and_empty_batch_built_by_mploader() -> None:
    """A compacted-away batch (no records, kept for its producer state) and the delete-horizon bit."""
    data = records.build_batch(50, [], producer_id=8, producer_epoch=1, base_sequence=3, last_offset_delta=4,
                               max_timestamp=1234, delete_horizon=99_000, transactional=True)
    b = _kp_batch(data)
    assert (b.records_count, b.last_offset, b.first_timestamp, b.max_timestamp) == (0, 54, 99_000, 1234)
    assert b.attributes & 0x40 and list(b) == []
    h = records.read_batch_header(data)
    assert h.has_delete_horizon and h.last_sequence == b.last_sequence == 7


@SETTINGS
@given(magic=st.sampled_from([0, 1]), codec=st.sampled_from([c for c in CODECS if c != compression.ZSTD]),
       log_append_time=st.booleans(), first=st.integers(0, 2**40), gaps=st.lists(st.integers(1, 3), max_size=5),
       values=st.lists(keys_values, min_size=6, max_size=6), timestamps=st.lists(st.integers(0, 2**41), min_size=6,
                                                                                  max_size=6))
def test_legacy_built_by_mploader(magic: int, codec: int, log_append_time: bool, first: int, gaps: list[int],
                                  values: list[bytes | None], timestamps: list[int]) -> None:
    offsets = [first]
    for g in gaps:
        offsets.append(offsets[-1] + g)
    n = len(offsets)
    if codec == compression.NONE:
        data = b"".join(legacy.build_message(o, values[i], key=b"k%d" % i, magic=magic, timestamp=timestamps[i])
                        for i, o in enumerate(offsets))
        expected = [(o, timestamps[i] if magic else None, b"k%d" % i, values[i]) for i, o in enumerate(offsets)]
    else:
        data = legacy.build_wrapper([(o, values[i], timestamps[i]) for i, o in enumerate(offsets)], codec=codec,
                                    magic=magic, log_append_time=log_append_time and magic == 1)
        wrapper_ts = max(timestamps[:n])
        expected = [(o, (wrapper_ts if log_append_time else timestamps[i]) if magic else None, None, values[i])
                    for i, o in enumerate(offsets)]
    theirs = list(MemoryRecords(data))
    assert all(isinstance(b, LegacyRecordBatch) and b.validate_crc() and b.magic == magic for b in theirs)
    got = [(r.offset, r.timestamp, r.key, r.value) for b in theirs for r in b]
    assert got == expected
    readout = read_log(data)
    assert readout.valid_bytes == len(data) and all(e.valid for e in readout.entries)
    assert [o for e in readout.entries for o in legacy.inner_offsets(data, e.position)] == offsets
    assert [(m.offset, m.timestamp if magic else None, m.key, m.value)
            for e in readout.entries for m in legacy.decode_messages(data, e.position)] == expected
    if codec != compression.NONE:
        [e] = readout.entries
        assert e.last_offset == offsets[-1] and e.max_timestamp == (max(timestamps[:n]) if magic else -1)


@pytest.mark.parametrize("codec", [c for c in _OPTIONAL_CODECS])
def test_optional_codecs_are_skipped_not_faked(codec: int) -> None:
    """snappy/lz4/zstd: exercised above only when both libraries support them; say so explicitly."""
    if not _codec_available(codec):
        pytest.skip(f"{compression.CODEC_NAMES[codec]}: Python package not installed")
    data = records.build_batch(0, records.simple_records([b"x" * 100] * 3), codec=codec)
    assert [r.value for r in _kp_batch(data)] == [b"x" * 100] * 3
