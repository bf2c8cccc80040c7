"""The size-field floor of every log walk: Kafka's ``FileLogInputStream.nextBatch``.

``nextBatch`` returns nothing once 17 bytes or fewer remain.  Otherwise it reads the entry's size
field and, before asking whether the entry is complete, throws ``CorruptRecordException`` when the
size is below ``LegacyRecord.RECORD_OVERHEAD_V0`` (14).  A size of exactly 14 passes: a v0 message
with a null key and value is 14 bytes and valid (``LegacyRecord.ensureValid``), while a v2 entry of
that size fails later (``DefaultRecordBatch.ensureValid``: smaller than the 61-byte batch header).

The rule is held at each walk that applies it:

* ``iter_entries`` (framing): raises ``CorruptRecordError`` at the entry's byte;
* ``scan_buffer`` checked (``LogSegment.recover``, which catches the exception): ``Stop.CORRUPT_SIZE``
  with the valid bytes ending where the entry starts;
* ``scan_buffer`` unchecked and ``walk_from`` (plain iteration for producer state): the same stop;
* ``read_next_offset`` (``LogSegment.readNextOffset``): nothing catches it, start-up fails.

The entry under test comes after nothing, after plain v2 batches (the scan's fast path walks them and
hands over at the entry), after a legacy message or after a control batch (the scan's general path
walks those), and either in the middle of the data or as its torn tail (18 to 25 bytes left).
"""

from __future__ import annotations

import struct

import pytest

from mploader.disk import RealDisk
from mploader.errors import CorruptRecordError, StartupFailedError
from mploader.format import legacy, records
from mploader.format.log import iter_entries
from mploader.recovery.segment import Segment, read_next_offset, walk_from
from mploader.scan import SegmentTask, Stop, scan_buffer
from tests.kafkadir import V1, B, M

PATH = "/data/t-0/00000000000000000000.log"
BELOW = [13, 12, 0, -1, -(2**31)]
PREFIXES = {
    "nothing": b"",
    "v2 batches": B(0) + B(1),  # fast path up to the entry
    "legacy": V1(0, b"a", 1) + V1(1, b"b", 2),  # general path up to the entry
    "control": B(0) + M(1, 7, True),  # general path (marker parsing) up to the entry
}
SUFFIX = B(10)


def entry(size: int, kind: str = "legacy") -> bytes:
    """A 26-byte entry whose size field is ``size``.

    ``legacy``: a v0 message with null key and value, valid (CRC included) when ``size`` is 14.
    ``v2``: magic 2, attributes 0 and a CRC-32C that matches the bytes ``size`` covers, so that only
    its size keeps it off the scan's fast path for plain v2 batches."""
    if kind == "legacy":
        e = bytearray(legacy.build_message(1, None, magic=0))
        assert len(e) == 26 and struct.unpack_from(">i", e, 8)[0] == 14
    else:
        e = bytearray(struct.pack(">qiib", 1, 0, 0, 2) + bytes(9))
    struct.pack_into(">i", e, 8, size)
    if kind == "v2":
        struct.pack_into(">I", e, 17, records.batch_crc(e, 0, 12 + max(size, 9)))
    return bytes(e)


def scan(data: bytes, check: bool, start: int = 0):  # type: ignore[no-untyped-def]
    return scan_buffer(data, SegmentTask(PATH, 0, start, check_crc=check), len(data))


def positions(prefix: bytes) -> list[int]:
    return [p for p, _, _ in iter_entries(prefix)]


# ---- the scan (checked and unchecked) ----------------------------------------------------------------

@pytest.mark.parametrize("check", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("prefix", PREFIXES, ids=list(PREFIXES))
@pytest.mark.parametrize("kind", ["legacy", "v2"])
@pytest.mark.parametrize("size", BELOW)
def test_scan_stops_at_a_size_field_below_14(size: int, kind: str, prefix: str, check: bool) -> None:
    head = PREFIXES[prefix]
    s = scan(head + entry(size, kind) + SUFFIX, check)
    assert (s.stop, s.valid_bytes) == (Stop.CORRUPT_SIZE, len(head))
    assert s.batches["position"].tolist() == positions(head)
    assert s.fatal is None


@pytest.mark.parametrize("check", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("prefix", PREFIXES, ids=list(PREFIXES))
def test_scan_walks_on_over_a_valid_14_byte_message(prefix: str, check: bool) -> None:
    head = PREFIXES[prefix]
    data = head + entry(14) + SUFFIX
    s = scan(data, check)
    assert (s.stop, s.valid_bytes) == (Stop.END, len(data))
    assert s.batches["position"].tolist() == positions(head) + [len(head), len(head) + 26]


@pytest.mark.parametrize("prefix", PREFIXES, ids=list(PREFIXES))
def test_a_14_byte_v2_entry_passes_the_size_check_and_fails_later(prefix: str) -> None:
    """Checked: DefaultRecordBatch.ensureValid rejects it; plain iteration reads its header from the
    bytes that follow and walks on."""
    head = PREFIXES[prefix]
    data = head + entry(14, "v2") + SUFFIX
    checked = scan(data, True)
    assert (checked.stop, checked.valid_bytes) == (Stop.SMALL_BATCH, len(head))
    plain = scan(data, False)
    assert (plain.stop, plain.valid_bytes, plain.fatal) == (Stop.END, len(data), None)
    assert plain.batches["position"].tolist() == positions(head) + [len(head), len(head) + 26]


@pytest.mark.parametrize("check", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("prefix", PREFIXES, ids=list(PREFIXES))
@pytest.mark.parametrize("kind", ["legacy", "v2"])
@pytest.mark.parametrize("left", [18, 22, 23, 25])
def test_a_torn_tail_is_corrupt_below_14_and_incomplete_at_14(left: int, kind: str, prefix: str,
                                                              check: bool) -> None:
    """More than 17 bytes left: the size is read and checked before the entry is found torn (the scan
    has one branch for fewer than 23 bytes left, one for 23 or more)."""
    head = PREFIXES[prefix]
    bad = scan(head + entry(13, kind)[:left], check)
    assert (bad.stop, bad.valid_bytes) == (Stop.CORRUPT_SIZE, len(head))
    torn = scan(head + entry(14, kind)[:left], check)
    assert (torn.stop, torn.valid_bytes) == (Stop.INCOMPLETE, len(head))
    assert bad.batches["position"].tolist() == torn.batches["position"].tolist() == positions(head)


@pytest.mark.parametrize("check", [True, False], ids=["checked", "unchecked"])
def test_17_bytes_left_end_the_walk_before_the_size_is_read(check: bool) -> None:
    head = PREFIXES["v2 batches"]
    s = scan(head + entry(13)[:17], check)
    assert (s.stop, s.valid_bytes) == (Stop.INCOMPLETE, len(head))


@pytest.mark.parametrize("check", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("size,stop", [(13, Stop.CORRUPT_SIZE), (14, Stop.END)])
def test_scan_from_a_position_inside_the_buffer(size: int, stop: Stop, check: bool) -> None:
    data = B(0) + B(1) + entry(size) + SUFFIX
    s = scan(data, check, start=72)
    assert (s.stop, s.valid_bytes) == (stop, 144 if stop is Stop.CORRUPT_SIZE else len(data))
    assert s.batches["position"].tolist()[:1] == [72]


@pytest.mark.parametrize("size,stop", [(13, Stop.CORRUPT_SIZE), (14, Stop.END)])
def test_walk_from_a_file_position(tmp_path, size: int, stop: Stop) -> None:  # type: ignore[no-untyped-def]
    """The plain walk of an unrecovered segment (producer-state rebuild) from the index's position."""
    data = B(0) + B(1) + entry(size) + SUFFIX
    (tmp_path / "00000000000000000000.log").write_bytes(data)
    w = walk_from(RealDisk(), Segment(str(tmp_path), 0), 72)
    assert (w.stop, w.valid_bytes) == (stop, 144 if stop is Stop.CORRUPT_SIZE else len(data))
    assert w.batches["position"].tolist() == ([72] if stop is Stop.CORRUPT_SIZE else [72, 144, 170])


# ---- iter_entries (framing) and LogSegment.readNextOffset --------------------------------------------

@pytest.mark.parametrize("prefix", PREFIXES, ids=list(PREFIXES))
@pytest.mark.parametrize("kind", ["legacy", "v2"])
@pytest.mark.parametrize("size", BELOW)
def test_iter_entries_raises_at_the_entry(size: int, kind: str, prefix: str) -> None:
    head = PREFIXES[prefix]
    seen: list[int] = []
    with pytest.raises(CorruptRecordError) as info:
        for p, _, _ in iter_entries(head + entry(size, kind) + SUFFIX, path=PATH):
            seen.append(p)
    assert (info.value.path, info.value.position) == (PATH, len(head))
    assert seen == positions(head)


@pytest.mark.parametrize("prefix", PREFIXES, ids=list(PREFIXES))
@pytest.mark.parametrize("kind", ["legacy", "v2"])
def test_iter_entries_frames_a_14_byte_entry(kind: str, prefix: str) -> None:
    head = PREFIXES[prefix]
    got = list(iter_entries(head + entry(14, kind) + SUFFIX, path=PATH))
    assert got[len(positions(head)):] == [(len(head), 26, 0 if kind == "legacy" else 2),
                                          (len(head) + 26, len(SUFFIX), 2)]


@pytest.mark.parametrize("left", [18, 22, 23, 25])
def test_iter_entries_on_a_torn_tail(left: int) -> None:
    head = PREFIXES["v2 batches"]
    with pytest.raises(CorruptRecordError) as info:
        list(iter_entries(head + entry(13)[:left], path=PATH))
    assert info.value.position == len(head)
    assert [p for p, _, _ in iter_entries(head + entry(14)[:left])] == positions(head)
    assert [p for p, _, _ in iter_entries(head + entry(13)[:17])] == positions(head)


def test_iter_entries_from_a_start_position() -> None:
    data = B(0) + B(1) + entry(13) + SUFFIX
    with pytest.raises(CorruptRecordError) as info:
        list(iter_entries(data, 72, path=PATH))
    assert info.value.position == 144


@pytest.mark.parametrize("size", [13, 0, -1])
def test_read_next_offset_fails_start_up_below_14(tmp_path, size: int) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "00000000000000000000.log").write_bytes(B(0) + entry(size) + B(2))
    with pytest.raises(StartupFailedError) as info:
        read_next_offset(RealDisk(), Segment(str(tmp_path), 0))
    assert info.value.kafka_exception == "CorruptRecordException"
    assert "at byte 72 " in str(info.value)


def test_read_next_offset_reads_past_a_14_byte_message(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "00000000000000000000.log").write_bytes(B(0) + entry(14) + B(2))
    assert read_next_offset(RealDisk(), Segment(str(tmp_path), 0)) == 3
