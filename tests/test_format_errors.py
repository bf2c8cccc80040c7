"""Malformed input: every reader either returns, or reports where Kafka would stop, or raises a
specific :class:`mploader.errors.MploaderError` naming the file (and the byte position or line).

Nothing may escape as IndexError / struct.error / bare ValueError / KeyError.  Rules and error
classes: docs/formats.md §2-§15, docs/scenarios.md #5-7, 9, 23, 25, 34-37, 70, 71, 73.
"""

from __future__ import annotations

import base64
import functools
import json
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, assume, example, given, settings, strategies as st

from mploader.errors import (
    CheckpointNumberFormatError,
    CorruptFileError,
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    InvalidFileNameError,
    InvalidPartitionDirError,
    InvalidRecordError,
    MalformedCheckpointError,
    MploaderError,
    StartupFailedError,
)
from mploader.format import checkpoint, compression, index, legacy, log, names, records, snapshot
from tests.examples import examples
from tests.log_readout import read_log

SETTINGS = settings(max_examples=examples(50), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
DATA = Path(__file__).parent / "data"
PATH = "/data/t-0/00000000000000000000.log"
T0 = 1_700_000_000_000


def _batch(o: int, value: bytes = b"test", **kw: Any) -> bytes:
    """docs/scenarios.md ``B(o)``: 72 bytes, leader epoch 0, timestamp T0+o."""
    return records.build_batch(o, records.simple_records([value]), partition_leader_epoch=0, base_timestamp=T0 + o,
                               **kw)


def _recrc(batch: bytes | bytearray) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def _expect(exc_type: type[MploaderError], fn: Callable[..., Any], *args: Any, path: str | None = PATH,
            position: int | None = None, **kw: Any) -> MploaderError:
    with pytest.raises(exc_type) as info:
        fn(*args, **kw)
    err = info.value
    if isinstance(err, CorruptFileError):
        assert err.path == path and path in str(err)
        if position is not None:
            assert err.position == position and f"at byte {position}" in str(err)
    return err


def _only_mploader_errors(fn: Callable[[], Any], allowed: tuple[type[MploaderError], ...]) -> Any:
    """Run ``fn``; any exception must be one of ``allowed`` (and then names the file)."""
    try:
        return fn()
    except allowed as e:
        if isinstance(e, CorruptFileError):
            assert e.path == PATH and e.position is not None and e.position >= 0
        return e


# --------------------------------------------------------------------------------------------
# .log framing (docs/formats.md §4) and batch validity (§5, §7)

STD = b"".join(_batch(o) for o in range(10))  # 10 x 72 bytes
BOUNDARIES = [72 * i for i in range(11)]


def test_canonical_log() -> None:
    r = read_log(STD, PATH)
    assert (r.valid_bytes, r.stop_reason, len(r.entries)) == (720, "end", 10)
    assert [e.position for e in r.entries] == BOUNDARIES[:-1]


@SETTINGS
@given(st.integers(0, len(STD)))
def test_truncated_log_keeps_the_complete_batches(n: int) -> None:
    """docs/scenarios.md #35: a partial trailing batch is not an error; the valid prefix ends at the last whole
    batch."""
    r = read_log(STD[:n], PATH)
    expected = max(b for b in BOUNDARIES if b <= n)
    assert r.valid_bytes == expected and len(r.entries) == expected // 72
    assert r.stop_reason == ("end" if expected == n else "incomplete")


@SETTINGS
@given(st.integers(0, len(STD) - 1), st.integers(1, 255))
def test_any_flipped_byte_is_caught_or_harmless(pos: int, xor: int) -> None:
    """docs/scenarios.md #37: bytes outside the CRC (offset, length, leader epoch, magic) are trusted, every other
    byte of a batch is protected by the CRC-32C."""
    data = bytearray(STD)
    data[pos] ^= xor
    r = read_log(bytes(data), PATH)
    batch, within = divmod(pos, 72)
    if within < 8 or 12 <= within < 16:  # baseOffset, partitionLeaderEpoch: not checked at all
        assert r.valid_bytes == 720 and all(e.valid for e in r.entries)
    elif within < 17:  # batchLength or magic: framing changes; everything before this batch survives
        assert BOUNDARIES[batch] <= r.valid_bytes
        assert [e.position for e in r.entries[:batch]] == BOUNDARIES[:batch]
    else:  # CRC-covered (or the CRC itself)
        assert r.valid_bytes == BOUNDARIES[batch] and r.stop_reason == "crc"
        _expect(CorruptRecordError, records.ensure_valid, bytes(data), BOUNDARIES[batch], PATH,
                position=BOUNDARIES[batch])


@SETTINGS
@given(st.binary(max_size=300), st.integers(0, 3))
@example(bytes(40), 0)  # zero-filled (preallocated) tail: size 0 < 14
@example(struct.pack(">qiib", 0, -5, 0, 2) + bytes(20), 0)
def test_garbage_after_valid_batches(garbage: bytes, nbatches: int) -> None:
    """Trailing garbage ends iteration or raises inside framing; either way recovery truncates at a boundary."""
    prefix = STD[: 72 * nbatches]
    data = prefix + garbage
    r = read_log(data, PATH)  # never raises
    assert len(prefix) <= r.valid_bytes <= len(data)
    assert r.valid_bytes == sum(e.size for e in r.entries) and all(e.valid for e in r.entries)
    assert [e.position for e in r.entries[:nbatches]] == BOUNDARIES[:nbatches]
    if len(garbage) <= 17:
        assert r.valid_bytes == len(prefix) and r.stop_reason in ("end", "incomplete")
    for e in r.entries:  # what read_log accepted, the validity checks accept too
        check = records.ensure_valid if e.magic >= 2 else legacy.ensure_valid
        check(data, e.position, PATH)


def test_size_field_below_14_stops_framing() -> None:
    """docs/scenarios.md #34 / docs/formats.md §4: CorruptRecord from the iterator; valid bytes end at that entry."""
    bad = struct.pack(">qiib", 10, 13, 0, 2) + bytes(40)
    r = read_log(STD[:144] + bad + STD[144:], PATH)
    assert (r.valid_bytes, r.stop_reason, len(r.entries)) == (144, "corrupt size", 2)
    with pytest.raises(CorruptRecordError) as info:
        list(log.iter_entries(STD[:144] + bad, path=PATH))
    assert (info.value.path, info.value.position) == (PATH, 144)


def test_v2_batch_shorter_than_its_header() -> None:
    """docs/scenarios.md #36: size field 49 (entry 61 - 12 = 49 would be the minimum) frames, but is invalid."""
    short = bytearray(_batch(2)[:60])
    struct.pack_into(">i", short, 8, 48)  # entry of 60 bytes < 61
    data = STD[:144] + bytes(short) + STD[144:]
    r = read_log(data, PATH)
    assert (r.valid_bytes, r.stop_reason) == (144, "crc")
    _expect(CorruptRecordError, records.ensure_valid, data, 144, PATH, position=144)


def test_at_most_17_trailing_bytes_end_silently() -> None:
    for n in range(0, 18):
        r = read_log(STD[:72] + b"\xff" * n, PATH)
        assert r.valid_bytes == 72 and r.stop_reason == ("end" if n == 0 else "incomplete")


def test_any_magic_of_2_or_more_is_a_v2_batch_and_negative_is_legacy() -> None:
    data = bytearray(_batch(0))
    data[16] = 7  # magic is outside the CRC: still "valid" as far as recovery is concerned
    [e] = read_log(bytes(data), PATH).entries
    assert e.magic == 7 and e.valid
    msg = bytearray(legacy.build_message(3, b"v", magic=1, timestamp=55))
    msg[16] = 0xFF  # magic -1 is inside the legacy CRC: framed as legacy, invalid
    r = read_log(bytes(msg), PATH)
    assert r.valid_bytes == 0 and r.stop_reason == "crc"
    struct.pack_into(">I", msg, 12, zlib.crc32(bytes(msg[16:])))  # with a matching CRC-32 it is a valid entry
    [e] = read_log(bytes(msg), PATH).entries
    # LegacyRecord.timestamp(): only magic 0 lacks the timestamp field
    assert (e.magic, e.valid, e.last_offset, e.max_timestamp, e.partition_leader_epoch) == (-1, True, 3, 55, -1)


@SETTINGS
@given(st.binary(min_size=0, max_size=200), st.integers(0, 8))
def test_batch_readers_on_garbage(garbage: bytes, pos: int) -> None:
    assume(pos <= len(garbage))
    for fn in (records.ensure_valid, records.read_batch_header, records.decode_records):
        _only_mploader_errors(functools.partial(fn, garbage, pos, PATH), (CorruptRecordError, InvalidRecordError))
    for fn in (legacy.ensure_valid, legacy.read_entry, legacy.inner_offsets, legacy.decode_messages):
        _only_mploader_errors(functools.partial(fn, garbage, pos, PATH), (CorruptRecordError, InvalidRecordError))


@SETTINGS
@given(st.binary(max_size=120), st.integers(-1, 5), st.sampled_from([compression.NONE, compression.GZIP]),
       st.booleans())
def test_records_section_garbage_with_a_valid_crc(payload: bytes, count: int, codec: int, control: bool) -> None:
    """A CRC-valid batch whose records section is garbage: decode_records and the control-record reader
    raise only InvalidRecordError / StartupFailedError (docs/formats.md §6)."""
    hdr = bytearray(records.build_batch(40, [], codec=compression.NONE, control=control, transactional=control,
                                        producer_id=5 if control else -1, producer_epoch=0))
    struct.pack_into(">h", hdr, 21, codec | (0x30 if control else 0))
    struct.pack_into(">i", hdr, 57, count)
    data = bytearray(hdr + payload)
    struct.pack_into(">i", data, 8, len(data) - 12)
    data = _recrc(data)
    h = records.ensure_valid(data, 0, PATH)
    _only_mploader_errors(lambda: records.decode_records(data, 0, PATH), (InvalidRecordError,))
    if control:
        _only_mploader_errors(lambda: records.read_end_txn_marker(data, 0, h, PATH),
                              (InvalidRecordError, StartupFailedError))


# --------------------------------------------------------------------------------------------
# Control batches: how recovery reads a transaction marker (docs/formats.md §6)


def _control(key: bytes | None, value: bytes | None, *, count: int | None = None, extra: bytes = b"",
             codec: int = compression.NONE) -> tuple[bytes, records.BatchHeader]:
    data = bytearray(records.build_batch(
        100, [records.Record(0, 0, key, value)], control=True, transactional=True, producer_id=9, producer_epoch=0,
        codec=compression.NONE))
    data += extra
    if count is not None:
        struct.pack_into(">i", data, 57, count)
    if codec != compression.NONE:
        payload = compression.compress(codec, bytes(data[61:]))
        data = data[:61] + payload
        struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | codec)
    struct.pack_into(">i", data, 8, len(data) - 12)
    data = _recrc(data)
    return data, records.ensure_valid(data, 0, PATH)


COMMIT_KEY, VALUE = struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 3)


@pytest.mark.parametrize("kw, outcome", [
    (dict(key=COMMIT_KEY, value=VALUE), "commit"),
    (dict(key=COMMIT_KEY + b"xx", value=VALUE + b"yy"), "commit"),  # longer key/value: only the prefix is read
    (dict(key=struct.pack(">hh", 3, 0), value=VALUE), "abort"),  # a higher key version is read as version 0
    (dict(key=COMMIT_KEY, value=VALUE, count=0), None),
    (dict(key=COMMIT_KEY, value=VALUE, count=-1), InvalidRecordError),
    (dict(key=COMMIT_KEY, value=VALUE, extra=b"\x00"), InvalidRecordError),  # bytes after the only record
    (dict(key=COMMIT_KEY, value=VALUE, count=2, extra=b"\x00"), "commit"),  # only the first record is read
    (dict(key=b"\x00\x00\x01", value=VALUE), InvalidRecordError),
    (dict(key=struct.pack(">hh", -1, 1), value=VALUE), InvalidRecordError),
    (dict(key=struct.pack(">hh", 0, 2), value=VALUE), StartupFailedError),  # LEADER_CHANGE: IllegalArgument
    (dict(key=struct.pack(">hh", 0, 99), value=VALUE), StartupFailedError),  # UNKNOWN
    (dict(key=None, value=VALUE), StartupFailedError),  # NullPointer
    (dict(key=COMMIT_KEY, value=None), StartupFailedError),
    (dict(key=COMMIT_KEY, value=b"\x00\x00\x00\x00\x01"), InvalidRecordError),
    (dict(key=COMMIT_KEY, value=struct.pack(">hi", -2, 3)), InvalidRecordError),
    (dict(key=COMMIT_KEY, value=VALUE, codec=compression.GZIP), "commit"),
])
def test_end_txn_marker_rules(kw: dict[str, Any], outcome: Any) -> None:
    data, h = _control(**kw)
    if isinstance(outcome, type):
        err = _expect(outcome, records.read_end_txn_marker, data, 0, h, PATH, position=0)
        if outcome is StartupFailedError:
            assert err.kafka_exception in ("IllegalArgumentException", "NullPointerException")
        return
    marker = records.read_end_txn_marker(data, 0, h, PATH)
    if outcome is None:
        assert marker is None
    else:
        assert marker is not None and marker.is_commit == (outcome == "commit") and marker.coordinator_epoch == 3


def test_compressed_control_batch_failures() -> None:
    """Truncated gzip data: Java's stream hits EOF (InvalidRecord, caught by recovery); a damaged
    header or body is an IOException wrapped in a KafkaException (start-up fails)."""
    good, _ = _control(COMMIT_KEY, VALUE, codec=compression.GZIP)
    payload = good[61:]

    def with_payload(p: bytes) -> tuple[bytes, records.BatchHeader]:
        data = bytearray(good[:61] + p)
        struct.pack_into(">i", data, 8, len(data) - 12)
        data = _recrc(data)
        return data, records.ensure_valid(data, 0, PATH)

    data, h = with_payload(payload[:-12])  # cut inside the deflate stream / trailer
    _expect(InvalidRecordError, records.read_end_txn_marker, data, 0, h, PATH, position=0)
    for bad in (payload[:5], b"XX" + payload[2:], payload[:-4] + b"\0\0\0\1"):
        data, h = with_payload(bad)
        err = _expect(StartupFailedError, records.read_end_txn_marker, data, 0, h, PATH)
        assert err.kafka_exception == "KafkaException"
    data, h = with_payload(payload)
    raw = bytearray(data)
    struct.pack_into(">h", raw, 21, 0x30 | 6)  # codec id 6 does not exist
    data = _recrc(raw)
    err = _expect(StartupFailedError, records.read_end_txn_marker, data, 0, records.ensure_valid(data, 0), PATH)
    assert err.kafka_exception == "IllegalArgumentException"


# --------------------------------------------------------------------------------------------
# Legacy wrappers: inner offsets (docs/formats.md §7)


def _wrapper(inner: bytes, *, offset: int, magic: int = 1, codec: int = compression.GZIP,
             value: bytes | None | str = "compress") -> bytes:
    v = compression.compress(codec, inner) if value == "compress" else value
    return legacy.build_message(offset, v, magic=magic, timestamp=9, attributes=codec)  # type: ignore[arg-type]


def _inner(offsets: list[int], magic: int = 1) -> bytes:
    return b"".join(legacy.build_message(o, b"v%d" % o, magic=magic, timestamp=o) for o in offsets)


def test_inner_offsets_rules() -> None:
    # v1: relative inner offsets, wrapper = absolute offset of the last
    assert legacy.inner_offsets(_wrapper(_inner([0, 1, 2]), offset=52)) == [50, 51, 52]
    assert legacy.inner_offsets(_wrapper(_inner([0, 2, 5]), offset=15)) == [10, 12, 15]
    # v1 wrapper offset 0 (some librdkafka versions): base 0
    assert legacy.inner_offsets(_wrapper(_inner([0, 1, 2]), offset=0)) == [0, 1, 2]
    # v0: inner offsets are absolute whatever the wrapper says
    assert legacy.inner_offsets(_wrapper(_inner([7, 8, 9], magic=0), offset=9, magic=0)) == [7, 8, 9]
    assert legacy.inner_offsets(_wrapper(_inner([7, 8, 9], magic=0), offset=3, magic=0)) == [7, 8, 9]
    # an incomplete trailing inner entry ends the set silently (Kafka's DataLogInputStream)
    assert legacy.inner_offsets(_wrapper(_inner([0, 1, 2]) + _inner([3])[:-1], offset=12)) == [10, 11, 12]
    assert legacy.inner_offsets(_wrapper(_inner([0, 1]) + b"\x00" * 11, offset=5)) == [4, 5]
    # uncompressed: itself
    assert legacy.inner_offsets(legacy.build_message(77, b"x", magic=0)) == [77]


@pytest.mark.parametrize("data, error", [
    (_wrapper(_inner([0, 1, 2]), offset=1), InvalidRecordError),  # non-zero wrapper offset below the last inner
    (_wrapper(b"", offset=3), InvalidRecordError),  # no inner message
    (_wrapper(b"", offset=3, value=None), InvalidRecordError),  # null value
    (_wrapper(_inner([0]), offset=3, codec=compression.ZSTD, value=b"\x28\xb5\x2f\xfd"), InvalidRecordError),
    (_wrapper(_inner([0]), offset=3, value=b"not gzip at all"), InvalidRecordError),
    (_wrapper(struct.pack(">qi", 0, 13) + bytes(13), offset=3), CorruptRecordError),  # inner size < 14
    (_wrapper(_wrapper(_inner([0]), offset=0), offset=3), InvalidRecordError),  # a compressed inner message
])
def test_inner_offsets_errors(data: bytes, error: type[MploaderError]) -> None:
    log_bytes = STD[:72] + data
    _expect(error, legacy.inner_offsets, log_bytes, 72, PATH, position=72)
    _expect(error, legacy.decode_messages, log_bytes, 72, PATH, position=72)
    [_, e] = read_log(log_bytes, PATH).entries  # recovery itself never decompresses: still valid
    assert e.valid


# --------------------------------------------------------------------------------------------
# Offset checkpoints (docs/formats.md §13, docs/scenarios.md #5-7) and leader-epoch checkpoints (§14)


def _write(tmp_path: Path, content: bytes | str, name: str = "recovery-point-offset-checkpoint") -> Path:
    p = tmp_path / name
    p.write_bytes(content.encode() if isinstance(content, str) else content)
    return p


TP = names.TopicPartition


@pytest.mark.parametrize("content, expected", [
    ("", {}),
    ("0\n", {}),
    ("0", {}),
    ("0\n0\n", {}),
    ("0\n1\nt 0 30\n", {TP("t", 0): 30}),
    ("0\r\n1\r\nt 0 30", {TP("t", 0): 30}),
    ("0\r1\rt 0 30\r", {TP("t", 0): 30}),
    ("0\n3\nt 0 20\nu\t1   7   \nt 0 25\n", {TP("t", 0): 25, TP("u", 1): 7}),  # docs/scenarios.md #7
    ("+0\n+1\nt +3 -5\n", {TP("t", 3): -5}),  # Integer.parseInt accepts a sign
    ("0\n1\nt.x-y 2147483647 9223372036854775807\n", {TP("t.x-y", 2**31 - 1): 2**63 - 1}),
])
def test_checkpoint_accepts(tmp_path: Path, content: str, expected: dict[Any, int]) -> None:
    assert checkpoint.read_offset_checkpoint(_write(tmp_path, content)) == expected


@pytest.mark.parametrize("content, line", [
    ("0\n2\nt 0 30\n", None),  # docs/scenarios.md #5: count says 2, one line
    ("1\n1\nt 0 30\n", 1),  # version 1
    (" 0\n1\nt 0 30\n", 1),  # version with a space
    ("0 \n0\n", 1),
    ("x\n", 1),
    ("0\n1\nt 0\n", 3),  # 2 fields
    ("0\n1\n\n", 3),  # empty line
    ("0\n1\n \n", 3),  # blanks only: no field at all
    ("0\n1\n t 0 30\n", 3),  # leading space: empty first field
    ("0\n1\nt 0 30 x\n", 3),
    ("0\n1\nt 0 30\n\n", 4),  # an empty line after the entries is an entry line too
    ("0\nx\n", 2),
    ("0\n99999999999\n", 2),  # count beyond int32
    (b"0\n1\nt\xff 0 30\n", None),  # not UTF-8: MalformedInputException (an IOException)
])
def test_checkpoint_malformed(tmp_path: Path, content: str | bytes, line: int | None) -> None:
    p = _write(tmp_path, content)
    err = _expect(MalformedCheckpointError, checkpoint.read_offset_checkpoint, p)
    assert isinstance(err, OSError) and err.path == str(p) and str(p) in str(err) and err.line_number == line


@pytest.mark.parametrize("content, line", [
    ("0\n1\nt x 30\n", 3),  # docs/scenarios.md #6
    ("0\n1\nt 0 3x\n", 3),
    ("0\n1\nt 2147483648 1\n", 3),  # partition beyond int32
    ("0\n1\nt 0 9223372036854775808\n", 3),
    ("0\n2\nt 0 1\nu y 1\n", 4),
    ("0\n-1\n", 2),  # new ArrayList<>(-1): IllegalArgumentException, like NumberFormatException not an IOException
    ("0\n-1\nt 0\n", 2),  # ... raised before any entry line is looked at
])
def test_checkpoint_number_format(tmp_path: Path, content: str, line: int) -> None:
    p = _write(tmp_path, content)
    err = _expect(CheckpointNumberFormatError, checkpoint.read_offset_checkpoint, p)
    assert not isinstance(err, OSError) and err.path == str(p) and err.line_number == line


def test_checkpoint_errors_in_file_order(tmp_path: Path) -> None:
    """Kafka reads line by line: whichever problem comes first decides the exception class."""
    _expect(CheckpointNumberFormatError, checkpoint.read_offset_checkpoint, _write(tmp_path, "0\n2\nt x 1\nt 0\n"))
    _expect(MalformedCheckpointError, checkpoint.read_offset_checkpoint, _write(tmp_path, "0\n2\nt 0\nt x 1\n"))


@SETTINGS
@given(st.lists(st.sampled_from(["0", "1", "2", "-1", "t 0 5", "t x 5", "a\t1  2", " t 0 5", "", "t 0", "9" * 12,
                                 "t 1 -3", "\u0663", "t \u0663 1"]), max_size=6),
       st.sampled_from(["\n", "\r\n", "\r"]))
def test_checkpoint_fuzz(tmp_path: Path, lines: list[str], sep: str) -> None:
    p = _write(tmp_path, sep.join(lines))
    for reader in (checkpoint.read_offset_checkpoint, checkpoint.read_leader_epoch_checkpoint):
        try:
            result = reader(p)
        except (MalformedCheckpointError, CheckpointNumberFormatError) as e:
            assert e.path == str(p)
        else:
            assert isinstance(result, (dict, list))


@pytest.mark.parametrize("content, expected", [
    ("0\n2\n0 0\n3 150\n", [(0, 0), (3, 150)]),
    ("0\n0\n", []),
    ("", []),
])
def test_leader_epoch_checkpoint(tmp_path: Path, content: str, expected: list[tuple[int, int]]) -> None:
    assert checkpoint.read_leader_epoch_checkpoint(_write(tmp_path, content, "leader-epoch-checkpoint")) == expected


def test_leader_epoch_checkpoint_errors(tmp_path: Path) -> None:
    _expect(MalformedCheckpointError, checkpoint.read_leader_epoch_checkpoint,
            _write(tmp_path, "0\n1\n0 0 0\n", "leader-epoch-checkpoint"))
    _expect(CheckpointNumberFormatError, checkpoint.read_leader_epoch_checkpoint,
            _write(tmp_path, "0\n1\nx 0\n", "leader-epoch-checkpoint"))


@settings(max_examples=examples(500), deadline=None)
@given(st.one_of(
    st.tuples(st.integers(0, 2**64), st.integers(0, 2**64)).map(lambda t: f"{t[0]} {t[1]}"),
    st.tuples(st.sampled_from(["0", "7", "007", "2147483647", "2147483648", "-1", "+3", "\u0663", ""]),
              st.sampled_from([" ", "  ", "\t", " \t"]),
              st.sampled_from(["0", "9223372036854775807", "9223372036854775808", "-5", "12 ", "1 2", "x", ""]))
    .map("".join),
    st.text(alphabet="0123456789 \t+-x\u0663", max_size=12)))
def test_a_plain_epoch_line_is_read_as_java_reads_it(line: str) -> None:
    """The leader-epoch checkpoint's usual line, two numbers and a space, is parsed without the split: the entry
    is Java's, and any line it does not take goes to Java's rules (which then accept or raise as before)."""
    plain = checkpoint._plain_epoch_entry(line)
    try:
        fields = checkpoint.java_split(line)
        java = checkpoint._epoch_entry(fields) if len(fields) == 2 else None
    except ValueError:
        java = None
    if plain is not None:
        assert plain == java
    a, space, b = line.partition(" ")
    if space and a.isascii() and a.isdigit() and b.isascii() and b.isdigit() and java is not None:
        assert plain == java  # the usual line, in range: taken by the shortcut, not left to the split


def test_checkpoints_are_read_with_their_names_in_errors(tmp_path: Path) -> None:
    """Read with os.open: a directory in a checkpoint's place is refused (an error of the environment, EISDIR),
    naming it."""
    import errno

    d = tmp_path / "leader-epoch-checkpoint"
    d.mkdir()
    with pytest.raises(OSError, match=str(d)) as e:
        checkpoint.read_leader_epoch_checkpoint(d)
    assert e.value.errno == errno.EISDIR


# --------------------------------------------------------------------------------------------
# partition.metadata (docs/formats.md §15)

TOPIC_ID = base64.urlsafe_b64decode("gSnfpEbtQfSDpxM2lhEn9A==")


@pytest.mark.parametrize("content", [
    "version: 0\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A",
    "version: 0\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A\n",
    "version: 0\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A==",  # padding is optional for Java's decoder
    "version:\t1\r\nanything:  gSnfpEbtQfSDpxM2lhEn9A\nmore lines are never read",
    "version: 0: \ntopic_id: gSnfpEbtQfSDpxM2lhEn9A",  # trailing empty field dropped by Java's split
])
def test_partition_metadata_accepts(tmp_path: Path, content: str) -> None:
    assert checkpoint.read_partition_metadata(_write(tmp_path, content, "partition.metadata")) == TOPIC_ID


@pytest.mark.parametrize("content, error, detail", [
    ("", StartupFailedError, "NullPointerException"),
    ("version: 0", StartupFailedError, "NullPointerException"),
    ("version: 0\n", StartupFailedError, "NullPointerException"),
    ("version: -1\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A", MalformedCheckpointError, 1),
    ("version: x\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A", MalformedCheckpointError, 1),
    ("version:0\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A", MalformedCheckpointError, 1),
    ("version: 0: 1\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A", MalformedCheckpointError, 1),
    ("\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A", MalformedCheckpointError, 1),
    ("version: 0\ntopic_id: ", MalformedCheckpointError, 2),  # Java's split drops the empty id field
    ("version: 0\ntopic_id:gSnfpEbtQfSDpxM2lhEn9A", MalformedCheckpointError, 2),
    ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", MalformedCheckpointError, 2),  # the zero UUID
    ("version: 0\ntopic_id: gSnfpEbtQfSDpxM2lhEn9+", StartupFailedError, "IllegalArgumentException"),
    ("version: 0\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A=", StartupFailedError, "IllegalArgumentException"),
    ("version: 0\ntopic_id: gSnfpEbtQfSDpxM2lhEn", StartupFailedError, "IllegalArgumentException"),
    ("version: 0\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A==AA", StartupFailedError, "IllegalArgumentException"),
    ("version: 0\ntopic_id: gSnf pEbtQfSDpxM2lhEn9A", StartupFailedError, "IllegalArgumentException"),
])
def test_partition_metadata_errors(tmp_path: Path, content: str, error: type[MploaderError], detail: Any) -> None:
    p = _write(tmp_path, content, "partition.metadata")
    err = _expect(error, checkpoint.read_partition_metadata, p)
    assert err.path == str(p)  # type: ignore[attr-defined]
    if error is StartupFailedError:
        assert err.kafka_exception == detail  # type: ignore[attr-defined]
    else:
        assert err.line_number == detail  # type: ignore[attr-defined]


@SETTINGS
@given(st.text(alphabet="version: topic_id\t\r\n0123456789-+=AgSnfpEbtQfSDpxM2lhEn9_", max_size=60))
def test_partition_metadata_fuzz(tmp_path: Path, content: str) -> None:
    p = _write(tmp_path, content, "partition.metadata")
    try:
        assert len(checkpoint.read_partition_metadata(p)) == 16
    except (MalformedCheckpointError, StartupFailedError) as e:
        assert e.path == str(p)


def test_partition_metadata_round_trip() -> None:
    assert checkpoint.partition_metadata_bytes(TOPIC_ID) == b"version: 0\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A"


def test_clean_shutdown_marker_is_read_tolerantly(tmp_path: Path) -> None:
    for content, epoch in [(b"", None), (b'{"version":0,"brokerEpoch":12}', 12), (b'{"brokerEpoch":-1,"x":[1]}', -1),
                           (b"{", None), (b"\xff", None), (b'{"brokerEpoch":true}', None), (b"[]", None),
                           (b'{"brokerEpoch":1e3}', None), (b'{"brokerEpoch":99999999999999999999}', None)]:
        assert checkpoint.read_broker_epoch(_write(tmp_path, content, ".kafka_cleanshutdown")) == epoch


# --------------------------------------------------------------------------------------------
# Producer snapshots (docs/formats.md §12, docs/scenarios.md #70, 73)


def _entry(pid: int, **kw: int) -> snapshot.ProducerSnapshotEntry:
    values = dict(epoch=0, last_sequence=19, last_offset=19, offset_delta=0, timestamp=T0 + 19, coordinator_epoch=-1,
                  current_txn_first_offset=-1)
    values.update(kw)
    return snapshot.ProducerSnapshotEntry(pid, **values)


def test_a_snapshot_is_its_header_crc_and_entries_in_hashmap_order() -> None:
    """docs/scenarios.md #73: the byte layout of a snapshot, empty and with three producers."""
    data = snapshot.snapshot_bytes([_entry(p) for p in snapshot.java_hashmap_order([4003, 4001, 4002])])
    assert len(data) == 148 and snapshot.snapshot_bytes([]) == bytes.fromhex("000148674bc700000000")
    assert struct.unpack_from(">hIi", data) == (1, crc32c(data[6:]), 3)
    assert [struct.unpack_from(">q", data, 10 + 46 * i)[0] for i in range(3)] == [4001, 4002, 4003]
    assert [e.producer_id for e in snapshot.parse_snapshot(data, PATH)] == [4001, 4002, 4003]


@pytest.mark.parametrize("mutate, position", [
    (lambda d: d[:9], 0),  # shorter than the header
    (lambda d: b"", 0),
    (lambda d: b"\x00\x00" + d[2:], 0),  # version 0
    (lambda d: b"\x00\x02" + d[2:], 0),  # version 2
    (lambda d: d[:6] + struct.pack(">i", -1) + d[10:], 6),  # negative count
    (lambda d: d[:6] + struct.pack(">i", 4) + d[10:], 6),  # count beyond the file
    (lambda d: d[:-1], 6),  # last entry cut
    (lambda d: d[:3] + bytes([d[3] ^ 1]) + d[4:], 2),  # docs/scenarios.md #70: a CRC byte flipped
    (lambda d: d[:60] + bytes([d[60] ^ 0x80]) + d[61:], 2),  # an entry byte flipped
    (lambda d: d + b"\x00" * 46, 2),  # a longer old file overwritten without truncation
])
def test_corrupt_snapshots(mutate: Callable[[bytes], bytes], position: int) -> None:
    data = snapshot.snapshot_bytes([_entry(4001), _entry(4002), _entry(4003)])
    _expect(CorruptSnapshotError, snapshot.parse_snapshot, mutate(data), PATH, position=position)


def test_trailing_bytes_covered_by_the_crc_are_accepted() -> None:
    """Kafka parses the entries it declares and checks the CRC over [6, EOF): extra bytes that the
    stored CRC covers are not an error (docs/formats.md §12 only rules out the CRC-mismatch case)."""
    data = bytearray(snapshot.snapshot_bytes([_entry(4001)]) + b"tail")
    struct.pack_into(">I", data, 2, crc32c(bytes(data[6:])))
    assert [e.producer_id for e in snapshot.parse_snapshot(bytes(data), PATH)] == [4001]


@SETTINGS
@given(st.binary(max_size=160))
@example(bytes.fromhex("000148674bc700000000"))
def test_snapshot_fuzz(data: bytes) -> None:
    result = _only_mploader_errors(lambda: snapshot.parse_snapshot(data, PATH), (CorruptSnapshotError,))
    if isinstance(result, list):
        assert len(data) >= 10 + 46 * len(result) and crc32c(data[6:]) == struct.unpack_from(">I", data, 2)[0]


def test_snapshot_file_errors_name_the_file(tmp_path: Path) -> None:
    p = tmp_path / "00000000000000000020.snapshot"
    p.write_bytes(b"\x00\x01\x00")
    with pytest.raises(CorruptSnapshotError) as info:
        snapshot.read_snapshot(p)
    assert info.value.path == str(p) and info.value.position == 0


# --------------------------------------------------------------------------------------------
# Java HashMap iteration order of the producer map (docs/formats.md §12, docs/scenarios.md #71)


def _hashmap_cases() -> list[dict[str, Any]]:
    with open(DATA / "java_hashmap_order.json") as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("case", _hashmap_cases(), ids=lambda c: c["name"])
def test_java_hashmap_order_matches_a_real_jvm(case: dict[str, Any]) -> None:
    m = snapshot.JavaLongHashMap()
    for op in case["ops"]:
        if op.startswith("~"):
            m.remove(int(op[1:]))
        elif op.startswith("+"):
            m.compute_if_absent(int(op[1:]))
        else:
            m.put(int(op))
    assert (m.order(), m.capacity) == (case["iteration_order"], case["table_length"])
    if all(op.startswith("+") for op in case["ops"]):  # loadProducersFromRecords' map, keys in order of appearance
        assert snapshot.computed_hashmap_order(int(op[1:]) for op in case["ops"]) == case["iteration_order"]
    elif any(op.startswith("+") for op in case["ops"]):
        pass  # put and computeIfAbsent mixed: the model above only
    elif not any(op.startswith("~") for op in case["ops"]):  # the plain function, insertion order given
        assert snapshot.java_hashmap_order([int(op) for op in case["ops"]]) == case["iteration_order"]
    else:  # after removals: live keys in insertion order plus the table length the map reached
        live = list(dict.fromkeys(int(op) for op in case["ops"] if not op.startswith("~")))
        live = [k for k in live if k in m]
        reinserted = sorted(live, key=lambda k: max(i for i, op in enumerate(case["ops"]) if op == str(k)))
        assert snapshot.java_hashmap_order(reinserted, case["table_length"]) == case["iteration_order"]


def test_snapshot_entries_come_in_hashmap_bucket_order() -> None:
    """docs/scenarios.md #71: pids 3, 2, 17 in a 16-bucket HashMap iterate by bucket (17 in 1, 2 in 2, 3 in 3)."""
    assert snapshot.java_hashmap_order([3, 2, 17]) == [17, 2, 3]


def test_tree_bins_follow_java(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Keys colliding in one bucket: 9th key at 16 and 32 slots doubles the table, at 64 slots the bucket
    becomes a red-black tree whose linked list (root first, new keys after their tree parent) Java
    iterates.  Expected orders recorded from OpenJDK 17 (see tests/data/java_hashmap_order.json's recipe)."""
    m = snapshot.JavaLongHashMap()
    for k in range(1, 12):
        m.put(4096 * k)
    assert m.tree_bins == {0} and m.capacity == 64
    assert m.order() == [16384, 4096, 8192, 12288, 20480, 24576, 28672, 32768, 36864, 40960, 45056]


# --------------------------------------------------------------------------------------------
# Transaction index (docs/formats.md §11, docs/scenarios.md #23)


def _txn(version_byte: int, pid: int, first: int, last: int, lso: int) -> bytes:
    return bytes([version_byte & 0xFF, 0]) + struct.pack(">qqqq", pid, first, last, lso)


def test_txn_index_rules(tmp_path: Path) -> None:
    p = tmp_path / "00000000000000000010.txnindex"
    p.write_bytes(_txn(0, 1, 2, 15, 16) + _txn(0xFF, 1, 16, 18, 19) + b"\x00" * 33)  # partial entry ignored
    entries = index.read_txn_index(p)
    assert entries["last_offset"].tolist() == [15, 18] and index.txn_index_problem(str(p), 10, entries) is None
    p.write_bytes(_txn(0, 1, 2, 15, 16) + _txn(0, 1, 2, 5, 2))  # docs/scenarios.md #22: lastOffset 5 < base 10
    problem = index.txn_index_problem(str(p), 10, index.read_txn_index(p))
    assert isinstance(problem, CorruptIndexError) and problem.path == str(p) and problem.position == 34
    p.write_bytes(_txn(0, 1, 2, 15, 16) + _txn(1, 1, 16, 18, 19))  # docs/scenarios.md #23: positive version byte
    err = _expect(StartupFailedError, index.read_txn_index, p, path=str(p))
    assert err.kafka_exception == "KafkaException" and "byte 34" in str(err)


def test_txn_index_first_problem_wins(tmp_path: Path) -> None:
    """Kafka's sanity check meets the entries in order: a corrupt entry before a bad version is a
    CorruptIndex (recovered), a bad version first is fatal."""
    p = tmp_path / "00000000000000000010.txnindex"
    p.write_bytes(_txn(0, 1, 2, 5, 6) + _txn(1, 1, 16, 18, 19))
    entries = index.read_txn_index(p, base_offset=10)
    assert isinstance(index.txn_index_problem(str(p), 10, entries), CorruptIndexError)
    p.write_bytes(_txn(1, 1, 2, 5, 6) + _txn(0, 1, 16, 18, 19))
    _expect(StartupFailedError, index.read_txn_index, p, base_offset=10)


@SETTINGS
@given(st.binary(max_size=120), st.integers(0, 100))
def test_txn_index_fuzz(tmp_path: Path, data: bytes, base: int) -> None:
    p = tmp_path / "00000000000000000000.txnindex"
    p.write_bytes(data)
    try:
        entries = index.read_txn_index(p, base_offset=base)
    except StartupFailedError as e:
        assert e.path == str(p)
        return
    assert len(entries) == len(data) // 34
    problem = index.txn_index_problem(str(p), base, entries)
    assert problem is None or (problem.path == str(p) and problem.position % 34 == 0)


# --------------------------------------------------------------------------------------------
# Offset / time index sanity checks (docs/formats.md §8-§10, docs/scenarios.md #25, 81, 83)


def _index_file(tmp_path: Path, name: str, data: bytes, size: int | None = None) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    if size is not None:
        with open(p, "r+b") as f:
            f.truncate(size)
    return p


def test_untrimmed_preallocated_indexes_count_every_slot_and_fail_the_time_index_check(tmp_path: Path) -> None:
    """docs/scenarios.md #25: a crash leaves the active segment's indexes at their preallocated length, zeros
    after the entries; every slot is an entry, the offset index passes its sanity check, the time index fails it."""
    off = _index_file(tmp_path, "00000000000000000020.index", index.offset_index_bytes(20, [22, 24, 26, 28],
                                                                                      [144, 288, 432, 576]), 10485760)
    tim = _index_file(tmp_path, "00000000000000000020.timeindex",
                      index.time_index_bytes(20, [T0 + 22, T0 + 24, T0 + 26, T0 + 28], [22, 24, 26, 28]), 10485756)
    oe = index.map_entries(off, index.OFFSET_ENTRY, random_access=True)
    te = index.map_entries(tim, index.TIME_ENTRY, random_access=True)
    assert (len(oe), len(te)) == (1310720, 873813)  # every slot counts
    assert index.offset_index_problem(str(off), 20, 10485760, oe) is None
    problem = index.time_index_problem(str(tim), 20, 10485756, te)
    # the last slot, a zero, is the "last" entry: its timestamp 0 is below the first entry's
    assert problem == index.IndexProblem(str(tim), f"last timestamp 0 is less than the first timestamp {T0 + 22}")


def test_offset_and_time_index_sanity_checks(tmp_path: Path) -> None:
    """docs/scenarios.md #81 and #83: what each index's sanity check accepts and refuses."""
    one = _index_file(tmp_path, "00000000000000000020.index", index.offset_index_bytes(20, [20], [0]))
    assert index.offset_index_problem(str(one), 20, 8, index.map_entries(one, index.OFFSET_ENTRY)) is None
    below = _index_file(tmp_path, "00000000000000000021.index", index.offset_index_bytes(21, [25, 20], [0, 9]))
    assert index.offset_index_problem(str(below), 21, 16, index.map_entries(below, index.OFFSET_ENTRY)) == \
        index.IndexProblem(str(below), "last offset 20 is less than the base offset 21")
    odd = _index_file(tmp_path, "00000000000000000022.index", bytes(12))
    assert index.offset_index_problem(str(odd), 22, 12, index.map_entries(odd, index.OFFSET_ENTRY)) == \
        index.IndexProblem(str(odd), "length 12 is not a multiple of 8")
    empty = _index_file(tmp_path, "00000000000000000023.timeindex", b"")
    assert index.time_index_problem(str(empty), 23, 0, index.map_entries(empty, index.TIME_ENTRY)) is None
    five = index.time_index_bytes(45, [10, 20, 30, 40, 50], [46, 47, 48, 49, 50])
    good = _index_file(tmp_path, "00000000000000000045.timeindex", five)
    assert index.time_index_problem(str(good), 45, 60, index.map_entries(good, index.TIME_ENTRY)) is None
    for data, length, reason in [
            (five + index.time_index_bytes(45, [5], [51]), 72, "last timestamp 5 is less than the first timestamp 10"),
            (five + index.time_index_bytes(45, [60], [44]), 72, "last offset 44 is less than the base offset 45"),
            (five + b"\x00", 61, "length 61 is not a multiple of 12")]:
        bad = _index_file(tmp_path, "00000000000000000045.timeindex", data)
        assert index.time_index_problem(str(bad), 45, length, index.map_entries(bad, index.TIME_ENTRY)) == \
            index.IndexProblem(str(bad), reason)


# --------------------------------------------------------------------------------------------
# Names (docs/formats.md §2-§3, docs/scenarios.md #9)

UUID = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize("name, topic, partition, kind", [
    ("t-0", "t", 0, names.DirKind.LIVE),
    ("my.topic-12", "my.topic", 12, names.DirKind.LIVE),
    (f"t-0.{UUID}-delete", "t", 0, names.DirKind.DELETE),
    (f"t-3.{UUID}-future", "t", 3, names.DirKind.FUTURE),
    (f"t-3.{UUID}-stray", "t", 3, names.DirKind.STRAY),
    ("foo--1", "foo-", 1, names.DirKind.LIVE),
    ("t-+1", "t", 1, names.DirKind.LIVE),
    ("t--0", "t-", 0, names.DirKind.LIVE),
    (f"a.b-3.{UUID}-delete", "a.b", 3, names.DirKind.DELETE),
    ("__consumer_offsets-49", "__consumer_offsets", 49, names.DirKind.LIVE),
    ("t-2147483647", "t", 2**31 - 1, names.DirKind.LIVE),
    ("t-\u0663", "t", 3, names.DirKind.LIVE),  # Integer.parseInt takes any Unicode decimal digit
])
def test_partition_dir_parses(name: str, topic: str, partition: int, kind: names.DirKind) -> None:
    assert names.parse_partition_dir(name) == (names.TopicPartition(topic, partition), kind)


@pytest.mark.parametrize("name", [
    "t", "-0", "t-", "t-x", "t-0-delete", f"t-0.{UUID}-future ", "", "lost+found", "t-2147483648", "t-1_0",
    "t- 1", "t-0.-delete", f"-0.{UUID}-delete", f"t.{UUID}-stray", "t-+", "t-0x1", f"t 1-0.{UUID}-delete",
])
def test_partition_dir_errors(name: str) -> None:
    with pytest.raises(InvalidPartitionDirError) as info:
        names.parse_partition_dir(name)
    assert info.value.path == name


@SETTINGS
@given(st.text(max_size=20))
@example("a-1.b-delete")
def test_partition_dir_fuzz(name: str) -> None:
    try:
        tp, kind = names.parse_partition_dir(name)
    except InvalidPartitionDirError as e:
        assert e.path == name
    else:
        assert -(2**31) <= tp.partition < 2**31 and tp.topic and isinstance(kind, names.DirKind)


@SETTINGS
@given(st.text(alphabet=st.characters(blacklist_categories=("Zs", "Cc")), min_size=1, max_size=300)
       .filter(lambda t: not any(c.isspace() for c in t)), st.integers(0, 2**31 - 1),
       st.sampled_from(list(names.DirKind)))
def test_partition_dir_round_trip(topic: str, partition: int, kind: names.DirKind) -> None:
    tp = names.TopicPartition(topic, partition)
    name = names.partition_dir_name(tp, kind)
    parsed, parsed_kind = names.parse_partition_dir(name)
    assert parsed_kind is kind and parsed.partition == partition
    if kind in (names.DirKind.DELETE, names.DirKind.STRAY):
        assert len(name) <= 255 and topic.startswith(parsed.topic)
    else:
        assert parsed.topic == topic


@SETTINGS
@given(st.integers(0, 2**63 - 1), st.sampled_from([".log", ".index", ".timeindex", ".txnindex", ".snapshot",
                                                  ".log.deleted", ".index.swap", ".log.cleaned"]))
def test_offset_from_file_name_round_trip(offset: int, suffix: str) -> None:
    name = names.segment_file_name(offset, suffix)
    assert len(name) == 20 + len(suffix) and names.offset_from_file_name(name) == offset


@pytest.mark.parametrize("name, offset", [("5.log", 5), ("+5.log", 5), ("-5.snapshot", -5), ("007.x.y", 7),
                                          ("00000000000000000010-0000000001.checkpoint", None), ("log", None),
                                          (".log", None), ("x.log", None), ("9223372036854775808.log", None),
                                          ("1 .log", None), ("1_0.log", None),
                                          # 20 digits: the fast path keeps Long.parseLong's bound, and its
                                          # Character.digit, which takes any Unicode decimal digit
                                          ("09223372036854775807.log", 2**63 - 1), ("09223372036854775808.log", None),
                                          ("99999999999999999999.index", None), ("0000000000000000000\u0663.log", 3)])
def test_offset_from_file_name(name: str, offset: int | None) -> None:
    if offset is None:
        with pytest.raises(InvalidFileNameError) as info:
            names.offset_from_file_name(name)
        assert info.value.path == name
    else:
        assert names.offset_from_file_name(name) == offset


@SETTINGS
@given(st.text(max_size=30))
def test_offset_from_file_name_fuzz(name: str) -> None:
    try:
        value = names.offset_from_file_name(name)
    except InvalidFileNameError as e:
        assert e.path == name
    else:
        assert -(2**63) <= value < 2**63 and "." in name


def test_zlib_error_never_escapes_decompress() -> None:
    with pytest.raises(compression.CompressedDataError) as info:
        compression.decompress(compression.GZIP, b"\x1f\x8b garbage")
    assert isinstance(info.value.__cause__, zlib.error)


def test_tree_bin_orders_match_a_real_jvm() -> None:
    with open(DATA / "java_hashmap_trees.json") as f:
        cases = json.load(f)["cases"]
    trees = 0
    for case in cases:
        m = snapshot.JavaLongHashMap()
        for k in case["puts"]:
            m.put(k)
        trees += bool(m.tree_bins)
        assert m.order() == case["iteration_order"]
    assert trees >= 30
