"""Snappy batches as Kafka stores them: snappy-java's stream framing (docs/formats.md §5.1), written and read by
:mod:`mploader.format.xerial_snappy`.

Checked three ways, none of them against mploader itself: the layout walked here by hand with cramjam's raw
snappy; kafka-python's own xerial encoder and decoder; and Kafka: batches Kafka's record classes wrote
(tests/data/kafka_snappy.json) are read, recovered and split by mploader, and, where the Kafka oracle is built
(``~/.cache/kafka-oracle``, never in CI), Kafka reads mploader's batches and decompresses the edge cases below.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import cramjam
import pytest
from hypothesis import given, settings, strategies as st
from kafka import codec as kcodec
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from mploader import StartupFailedError, TopicPartition
from mploader.errors import InvalidRecordError
from mploader.format import compression, legacy, records
from mploader.format.xerial_snappy import BLOCK_SIZE, HEADER, MAGIC
from tests.examples import examples
from tests.kafkadir import V1, PartitionBuilder, data_dir, load, name
from tests.log_readout import read_log

pytestmark = pytest.mark.skipif("snappy" not in compression.available_codecs(),
                                reason="snappy needs cramjam (pip install 'mploader[codecs]')")

SNAPPY = compression.SNAPPY
TP = TopicPartition("t", 0)
M = 2**31 - 1  # the largest relative offset an index holds
T0 = 1_700_000_000_000
KAFKA = json.loads((Path(__file__).parent / "data" / "kafka_snappy.json").read_text())
JAVA = Path(__file__).parent / "java" / "KafkaSnappy.java"


def raw(data: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(data))


def chunks_of(stream: bytes) -> list[bytes]:
    """The raw blocks of a framed stream, walked by hand from the header on."""
    assert stream[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    out, p = [], 16
    while p < len(stream):
        (n,) = struct.unpack_from(">i", stream, p)
        out.append(stream[p + 4 : p + 4 + n])
        p += 4 + n
    assert p == len(stream)
    return out


def sample(n: int) -> bytes:
    """Half text, half bytes that do not compress: blocks of both kinds."""
    noise = bytes((i * 2654435761 >> 13) & 0xFF for i in range(n // 2))
    return (b"snappy framing " * (n // 30 + 1))[: n - len(noise)] + noise


# --------------------------------------------------------------------------------------------
# The framing, written


@settings(max_examples=examples(40), deadline=None, database=None)
@given(st.one_of(st.binary(max_size=300),
                 st.sampled_from([BLOCK_SIZE - 1, BLOCK_SIZE, BLOCK_SIZE + 1, 3 * BLOCK_SIZE + 7]).map(sample)))
def test_written_as_snappy_java_frames_it(data: bytes) -> None:
    framed = compression.compress(SNAPPY, data)
    blocks = chunks_of(framed)
    assert len(blocks) == -(-len(data) // BLOCK_SIZE)  # one chunk per 32 KiB of input, none for an empty input
    assert b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks) == data
    assert all(len(bytes(cramjam.snappy.decompress_raw(b))) == BLOCK_SIZE for b in blocks[:-1])
    assert compression.decompress(SNAPPY, framed) == data


def test_kafka_python_frames_the_same_way() -> None:
    """kafka-python's xerial encoder (32 KiB blocks) over python-snappy, which uses the same raw snappy."""
    for n in (0, 100, BLOCK_SIZE, 3 * BLOCK_SIZE + 7):
        data = sample(n)
        assert kcodec.snappy_encode(data) == compression.compress(SNAPPY, data)
        assert compression.decompress(SNAPPY, kcodec.snappy_encode(data)) == data
        if n:  # kafka-python cannot read a bare header (snappy-java reads it as empty, see READ_CASES)
            assert kcodec.snappy_decode(compression.compress(SNAPPY, data)) == data
            # raw snappy, as non-Java clients may send it
            assert compression.decompress(SNAPPY, kcodec.snappy_encode(data, xerial_compatible=False)) == data


# --------------------------------------------------------------------------------------------
# The framing, read: what SnappyInputStream yields (each case checked against Kafka when the oracle is built)

ABC = compression.compress(SNAPPY, b"abc")
DEF = compression.compress(SNAPPY, b"def")
ONE_CHUNK = HEADER + struct.pack(">i", len(raw(b"xyz"))) + raw(b"xyz")
ERROR = None

READ_CASES: list[tuple[str, bytes, bytes | None]] = [
    ("framed", ABC, b"abc"),
    ("header only (an empty input compressed)", HEADER, b""),
    ("raw snappy, no header", raw(b"raw block " * 20), b"raw block " * 20),
    ("raw snappy shorter than a header", raw(b"tiny"), b"tiny"),
    ("1 trailing byte ignored", ABC + b"\x00", b"abc"),
    ("3 trailing bytes ignored", ABC + b"\x00\x00\x07", b"abc"),
    ("concatenated streams", ABC + DEF, b"abcdef"),
    ("a first header's versions are not checked", MAGIC + struct.pack(">ii", 0, 7) + ONE_CHUNK[16:], b"xyz"),
    ("a wrong magic after the magic's first 4 bytes: 16 bytes skipped", ABC + MAGIC[:4] + bytes(12) + DEF[16:],
     b"abcdef"),
    ("a wrong magic, then what follows is read as chunks", ABC + MAGIC[:4] + b"nope" + DEF, ERROR),
    ("a concatenated header of version 0", ABC + MAGIC + struct.pack(">ii", 0, 1) + DEF[16:], ERROR),
    ("a concatenated header cut short", ABC + HEADER[:10], ERROR),
    ("empty input", b"", ERROR),
    ("garbage, read as raw snappy", b"\x05ab", ERROR),
    ("a negative chunk length", HEADER + struct.pack(">i", -2) + b"x" * 8, ERROR),
    ("a chunk cut short", ONE_CHUNK[:-1], ERROR),
    ("a zero-length chunk", HEADER + bytes(4), ERROR),
    ("a corrupt block", HEADER + struct.pack(">i", 3) + b"\x05ab", ERROR),
]


@pytest.mark.parametrize("what, data, expected", READ_CASES, ids=[c[0] for c in READ_CASES])
def test_read_like_snappy_input_stream(what: str, data: bytes, expected: bytes | None) -> None:
    if expected is not None:
        assert compression.decompress(SNAPPY, data) == expected
        return
    with pytest.raises(compression.CompressedDataError) as info:
        compression.decompress(SNAPPY, data)
    assert not info.value.truncated and str(info.value).startswith("snappy: ")


# --------------------------------------------------------------------------------------------
# Batches: kafka-python and mploader each read what the other wrote (more than one chunk)


def big_records(n: int) -> list[tuple[int, bytes | None, bytes]]:
    """Kafka's fixture records (tests/data/kafka_snappy.json): ``(timestamp, key, value)``."""
    return [(T0 + i, None if i % 4 == 0 else b"key-%d" % i,
             (b"record %d of the snappy fixture; " % i) * (1 + i % 13)) for i in range(n)]


def test_v2_batches_across_chunks_both_ways() -> None:
    recs = big_records(300)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=SNAPPY, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (ts, key, value) in enumerate(recs):
        builder.append(i, timestamp=ts, key=key, value=value, headers=[])
    theirs = bytes(builder.build())
    h = records.ensure_valid(theirs, 0)
    assert h.compression == SNAPPY and len(chunks_of(theirs[records.RECORD_BATCH_OVERHEAD:])) > 1
    assert [(h.base_timestamp + r.timestamp_delta, r.key, r.value) for r in records.decode_records(theirs)] == recs

    ours = records.build_batch(0, [records.Record(i, ts - T0, k, v) for i, (ts, k, v) in enumerate(recs)],
                               codec=SNAPPY, base_timestamp=T0)
    assert len(chunks_of(ours[records.RECORD_BATCH_OVERHEAD:])) > 1
    [batch] = list(MemoryRecords(ours))
    assert batch.validate_crc() and batch.compression_type == SNAPPY
    assert [(r.timestamp, r.key, r.value) for r in batch] == recs


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_wrappers_across_chunks_both_ways(magic: int) -> None:
    recs = big_records(400)
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=SNAPPY, batch_size=1 << 20)
    for i, (ts, key, value) in enumerate(recs):
        builder.append(i, timestamp=ts, key=key, value=value)
    theirs = bytes(builder.build())
    entry = legacy.ensure_valid(theirs, 0)
    assert entry.compression == SNAPPY and legacy.inner_offsets(theirs) == list(range(400))
    assert [(m.key, m.value) for m in legacy.decode_messages(theirs)] == [(k, v) for _, k, v in recs]

    ours = legacy.build_wrapper([(7 + i, v, ts) for i, (ts, _, v) in enumerate(recs)], codec=SNAPPY, magic=magic)
    [batch] = list(MemoryRecords(ours))
    assert batch.validate_crc() and batch.compression_type == SNAPPY
    assert [(r.offset, r.value) for r in batch] == [(7 + i, v) for i, (_, _, v) in enumerate(recs)]


# --------------------------------------------------------------------------------------------
# Bytes Kafka wrote (tests/data/kafka_snappy.json)


def kafka_bytes(which: str) -> bytes:
    return bytes.fromhex(KAFKA[which])


def test_kafka_v2_batch() -> None:
    data = kafka_bytes("v2")
    h = records.ensure_valid(data, 0)
    assert (h.compression, h.base_offset, h.last_offset, h.records_count) == (SNAPPY, 0, 299, 300)
    section = data[records.RECORD_BATCH_OVERHEAD:]
    # Kafka's chunks hold 32 KiB of records each, like ours (the compressed bytes may differ: another snappy)
    kafka_chunks = [len(bytes(cramjam.snappy.decompress_raw(b))) for b in chunks_of(section)]
    plain = compression.decompress(SNAPPY, section)
    assert len(kafka_chunks) > 1 and kafka_chunks == \
        [len(bytes(cramjam.snappy.decompress_raw(b))) for b in chunks_of(compression.compress(SNAPPY, plain))]
    recs = records.decode_records(data)
    assert [(r.offset_delta, h.base_timestamp + r.timestamp_delta, r.key, r.value) for r in recs] == \
        [(i, ts, k, v) for i, (ts, k, v) in enumerate(big_records(300))]
    assert read_log(data).valid_bytes == len(data)


@pytest.mark.parametrize("magic, first", [(1, 100), (0, 200)])
def test_kafka_legacy_wrappers(magic: int, first: int) -> None:
    data = kafka_bytes(f"v{magic}")
    entry = legacy.ensure_valid(data, 0)
    assert (entry.magic, entry.compression, entry.offset) == (magic, SNAPPY, first + 39)
    assert legacy.inner_offsets(data) == list(range(first, first + 40))
    got = [(m.offset, m.timestamp, m.key, m.value) for m in legacy.decode_messages(data)]
    assert got == [(first + i, ts if magic else -1, k, v) for i, (ts, k, v) in enumerate(big_records(40))]


def test_kafka_compressed_commit_marker() -> None:
    data = kafka_bytes("commit")
    h = records.ensure_valid(data, 0)
    assert (h.compression, h.is_control, h.producer_id, h.producer_epoch) == (SNAPPY, True, 77, 3)
    marker = records.read_end_txn_marker(data, 0, h)
    assert marker is not None and (marker.type, marker.coordinator_epoch, marker.timestamp) == \
        (records.ControlRecordType.COMMIT, 12, T0 + 9)


def with_section(batch: bytes, section: bytes) -> bytes:
    """``batch`` with another records section: length and CRC-32C made right."""
    from crc32c import crc32c

    data = bytearray(batch[: records.RECORD_BATCH_OVERHEAD] + section)
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def damaged_markers() -> tuple[bytes, bytes]:
    """Kafka's compressed commit marker with its stream ended after the header, and with its chunk cut short."""
    commit = kafka_bytes("commit")
    section = commit[records.RECORD_BATCH_OVERHEAD:]
    assert len(chunks_of(section)) == 1
    return with_section(commit, HEADER + b"\x00\x00"), with_section(commit, section[:-1])


def test_damaged_compressed_marker_fails_like_kafka() -> None:
    """A stream that ends early (a chunk missing) is an EOF to Kafka's record reader: InvalidRecordException,
    which recovery catches; a chunk cut short is an IOException in snappy-java: start-up fails."""
    ended, cut = damaged_markers()
    with pytest.raises(InvalidRecordError):
        records.read_end_txn_marker(ended, 0, records.ensure_valid(ended, 0), "x.log")
    with pytest.raises(StartupFailedError) as info:
        records.read_end_txn_marker(cut, 0, records.ensure_valid(cut, 0), "x.log")
    assert info.value.kafka_exception == "KafkaException"


def marker_partition(tmp_path: Path) -> Path:
    """Kafka's snappy data batch, its compressed commit marker, then a torn copy of the data batch; unclean."""
    v2, commit = kafka_bytes("v2"), kafka_bytes("commit")
    d = data_dir(tmp_path, clean=False)
    PartitionBuilder(d).segment(0, v2, commit, v2[:-100], indexes=False).epochs((0, 0))
    return d


def test_load_recovers_kafka_snappy_batches(tmp_path: Path) -> None:
    """An unclean load re-reads Kafka's snappy batches; the compressed marker is decompressed for the producer
    state; the torn copy after it is truncated."""
    log = load([marker_partition(tmp_path)]).logs[TP]
    assert log.log_end_offset == 501 and log.truncated_bytes == len(kafka_bytes("v2")) - 100
    p = log.producers[77]
    assert (p.epoch, p.coordinator_epoch, p.last_timestamp, p.current_txn_first_offset) == (3, 12, T0 + 9, -1)


OVERFLOW_HEAD = V1(0, b"x", T0) + V1(1, b"y", T0 + 1)


def overflow_partition(tmp_path: Path, wrapper: str) -> tuple[Path, bytes]:
    """A segment at 0: two v1 messages, then a magic-1 wrapper of offsets M+100..M+139, past the offset limit.
    ``wrapper``: a codec (mploader writes it) or "kafka-snappy" (Kafka's, moved by its wrapper offset, which
    lies outside the CRC: v1 inner offsets are relative to it)."""
    if wrapper == "kafka-snappy":
        data = struct.pack(">q", M + 139) + kafka_bytes("v1")[8:]
    else:
        if wrapper not in compression.available_codecs():
            pytest.skip(f"{wrapper} is not installed")
        data = legacy.build_wrapper([(M + 100 + i, v, ts) for i, (ts, _, v) in enumerate(big_records(40))],
                                    codec=compression.codec_id(wrapper), magic=1)
    d = data_dir(tmp_path, clean=False)
    PartitionBuilder(d).segment(0, OVERFLOW_HEAD, data, indexes=False)
    return d, data


WRAPPERS = ["gzip", "snappy", "lz4", "kafka-snappy"]


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_offset_overflow_split_reads_the_wrapper(tmp_path: Path, wrapper: str) -> None:
    """Recovery splits the segment, and the new segment's base is the wrapper's first inner offset, which only
    decompressing tells: the same outcome for snappy (Kafka's wrapper and mploader's) as for other codecs."""
    d, data = overflow_partition(tmp_path, wrapper)
    log = load([d]).logs[TP]
    assert [s.base_offset for s in log.segments] == [0, M + 100]
    assert log.log_end_offset == M + 140 and log.truncated_bytes == 0
    pb = PartitionBuilder(d)
    assert pb.read(name(0, ".log")) == OVERFLOW_HEAD and pb.read(name(M + 100, ".log")) == data


# --------------------------------------------------------------------------------------------
# Kafka reads mploader's bytes (the oracle's classes, when built; never in CI)


def oracle_command() -> list[str] | None:
    """``java -cp <the oracle's classpath> tests/java/KafkaSnappy.java``, from the oracle's launcher script."""
    launcher = Path(os.environ.get("KAFKA_ORACLE") or Path.home() / ".cache" / "kafka-oracle" / "oracle")
    try:
        text = launcher.read_text()
    except OSError:
        return None
    home = str(launcher.resolve().parent)
    cp, lib = re.search(r'-cp "([^"]+)"', text), re.search(r"-Djava\.library\.path=(\S+)", text)
    if cp is None or lib is None:
        return None
    return ["java", f"-Djava.library.path={lib.group(1)}", "-cp", cp.group(1).replace("$H", home), str(JAVA)]


def kafka_run(mode: str, inputs: list[bytes]) -> list[dict[str, Any]]:
    cmd = oracle_command()
    if cmd is None:
        pytest.skip("the Kafka oracle is not built (~/.cache/kafka-oracle, see ../shared/kafka-oracle)")
    out = subprocess.run([*cmd, mode], input="".join(b.hex() + "\n" for b in inputs), capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_kafka_decompresses_the_read_cases_alike() -> None:
    got = kafka_run("stream", [data for _, data, _ in READ_CASES])
    assert len(got) == len(READ_CASES)
    for (what, _, expected), kafka in zip(READ_CASES, got):
        if expected is None:
            assert "error" in kafka, what  # which exception: docs/formats.md §5.1
        else:
            assert bytes.fromhex(kafka.get("data", "??")) == expected, (what, kafka)


def test_kafka_reads_the_damaged_markers_alike() -> None:
    got = kafka_run("read", list(damaged_markers()))
    assert got == [{"error": "InvalidRecordException"}, {"end": True}, {"error": "KafkaException"}, {"end": True}]


@pytest.mark.parametrize("case", ["marker", *WRAPPERS])
def test_kafka_loads_the_partitions_alike(tmp_path: Path, case: str) -> None:
    """Kafka's LogLoader (the oracle) and mploader recover copies of the same partition: every file in the
    partition directory ends byte-identical (segments, rebuilt indexes, producer snapshots, epochs)."""
    launcher = Path(os.environ.get("KAFKA_ORACLE") or Path.home() / ".cache" / "kafka-oracle" / "oracle")
    if not launcher.exists():
        pytest.skip("the Kafka oracle is not built (~/.cache/kafka-oracle, see ../shared/kafka-oracle)")
    d = marker_partition(tmp_path) if case == "marker" else overflow_partition(tmp_path, case)[0]
    theirs = tmp_path / "kafka"
    shutil.copytree(d, theirs)
    out = subprocess.run([str(launcher), "datadir", str(theirs)], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    [kafka] = [json.loads(line) for line in out.splitlines() if '"segments"' in line]
    log = load([d], dry_run_first=False).logs[TP]
    assert kafka["log_end_offset"] == log.log_end_offset
    assert [(s["base_offset"], s["size"]) for s in kafka["segments"]] == \
        [(s.base_offset, s.size_bytes) for s in log.segments]
    part = "t-0"
    assert sorted(os.listdir(theirs / part)) == sorted(os.listdir(d / part))
    for f in os.listdir(d / part):
        assert (theirs / part / f).read_bytes() == (d / part / f).read_bytes(), f


def test_kafka_reads_mploader_snappy_batches() -> None:
    recs = big_records(300)
    v2 = records.build_batch(5, [records.Record(i, ts - T0, k, v) for i, (ts, k, v) in enumerate(recs)],
                             codec=SNAPPY, base_timestamp=T0)
    raw_v2 = with_section(v2, raw(compression.decompress(SNAPPY, v2[records.RECORD_BATCH_OVERHEAD:])))
    marker = records.build_end_txn_marker_batch(400, 9, 2, False, coordinator_epoch=6, timestamp=T0, codec=SNAPPY)
    wrappers = [legacy.build_wrapper([(50 + i, v, ts) for i, (ts, _, v) in enumerate(recs[:60])], codec=SNAPPY,
                                     magic=magic) for magic in (0, 1)]
    got = kafka_run("read", [v2 + marker, raw_v2, *wrappers])
    ends = [i for i, line in enumerate(got) if line.get("end")]
    assert len(ends) == 4 and not [line for line in got if "error" in line], got
    expected_v2 = [[5 + i, ts, k.hex() if k is not None else None, v.hex()] for i, (ts, k, v) in enumerate(recs)]
    assert got[0]["compression"] == SNAPPY and got[0]["records"] == expected_v2
    [control] = got[1]["records"]
    assert (control[0], control[1], control[4:]) == (400, T0, ["ABORT", 6])
    assert got[3]["records"] == expected_v2  # the raw-snappy section (no framing) reads the same
    for magic, line in zip((0, 1), (got[5], got[7])):
        assert (line["magic"], line["compression"], line["last_offset"]) == (magic, SNAPPY, 109)
        assert [(r[0], r[3]) for r in line["records"]] == [(50 + i, v.hex()) for i, (_, _, v) in enumerate(recs[:60])]


# --------------------------------------------------------------------------------------------
# Without cramjam: errors that say what to install


def test_without_cramjam_the_errors_name_the_package(tmp_path: Path) -> None:
    """A Python where ``import cramjam`` fails (a None entry in sys.modules): writing, reading and the generator's
    command line each name the package and the extra, and so does the error of a snappy wrapper's offsets."""
    script = f"""
import sys
sys.modules["cramjam"] = None
from mploader.format import compression, legacy
from mploader.cli import main
print(compression.available_codecs())
for call in (lambda: compression.codec_id("snappy"), lambda: compression.decompress(2, b"x")):
    try:
        call()
    except compression.UnsupportedCodecError as e:
        print(e)
try:
    legacy.inner_offsets(bytes.fromhex(sys.argv[1]))
except Exception as e:
    print(type(e).__name__, e)
sys.exit(main(["generate", {str(tmp_path / "out")!r}, "--compression", "snappy"]))
"""
    proc = subprocess.run([sys.executable, "-c", script, kafka_bytes("v1").hex()], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).parent.parent)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 2 and not (tmp_path / "out").exists(), proc.stderr
    assert "'snappy'" not in lines[0] and "'gzip'" in lines[0]
    assert "needs the Python package 'cramjam'" in lines[1] and "mploader[codecs]" in lines[1]
    assert "'cramjam' is not installed" in lines[2] and "mploader[codecs]" in lines[2]
    assert lines[3].startswith("InvalidRecordError") and "'cramjam' is not installed" in lines[3]
    assert "needs the Python package 'cramjam'" in proc.stderr and "available here: none, gzip" in proc.stderr


# --------------------------------------------------------------------------------------------
# A generated broker of snappy batches, next to the other codecs


@pytest.mark.parametrize("clean", [False, True], ids=["unclean", "clean"])
@pytest.mark.parametrize("codec", list(compression.CODEC_NAMES.values()))
def test_generated_broker_loads_as_the_model_says(tmp_path: Path, codec: str, clean: bool) -> None:
    """``mploader generate --compression CODEC`` with faults of every kind: every data batch carries the codec
    (kafka-python decodes a sample of them to the values mploader decodes), and the load matches
    tests/test_load_generated.py's model of Kafka's recovery, for snappy as for every other codec."""
    from kafka.record.default_records import DefaultRecordBatch

    from mploader.generate import FAULT_KINDS
    from tests.test_load_generated import GEN, direct_checks, load_and_check, make_broker

    if codec not in compression.available_codecs():
        pytest.skip(f"{codec} is not installed")
    kinds = FAULT_KINDS if not clean else tuple(k for k in FAULT_KINDS if k != "zero_tail")
    b = make_broker(tmp_path, GEN.replace(compression=codec, fault_kinds=kinds, faults=10, clean_shutdown=clean,
                                          seed=4))
    checked = 0
    for key, part in b.manifest["partitions"].items():
        for seg in part["segments"]:
            data = b.before[key][name(seg["base_offset"], ".log")]
            assert isinstance(data, bytes)
            intact = {e.position for e in read_log(data).entries}  # the batches before a fault
            for row in (r for r in seg["batches"] if r["position"] in intact):
                h = records.read_batch_header(data, row["position"])
                assert h.compression == (compression.NONE if row["control"] else compression.codec_id(codec))
                if codec == "snappy" and not row["control"]:  # framed as Kafka writes it, not raw snappy
                    assert data[row["position"] + records.RECORD_BATCH_OVERHEAD :][: len(HEADER)] == HEADER
                if checked < 40 and not row["control"]:
                    theirs = DefaultRecordBatch(bytearray(data[row["position"] : row["position"] + row["size"]]))
                    assert [(r.key, r.value) for r in theirs] == \
                        [(r.key, r.value) for r in records.decode_records(data, row["position"])]
                    checked += 1
    assert checked == 40 and b.manifest["faults"]
    out = load_and_check(b)
    assert out.result is not None and len(out.models) == len(b.manifest["partitions"])
    assert direct_checks(b, out)
    if not clean:
        assert any(m.truncated for m in out.models.values())
