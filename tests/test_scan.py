"""Phase 1's shortcuts agree with the general code they bypass."""

from __future__ import annotations

import struct

from hypothesis import given, settings, strategies as st

from mploader.format import records
from mploader.scan.walk import Marker, SegmentTask, _canonical_marker, scan_buffer
from tests.examples import examples


def _general(buf: bytes) -> tuple[int, int, int]:
    h = records.read_batch_header(buf, 0)
    m = records.read_end_txn_marker(buf, 0, h)
    assert m is not None
    return int(m.type), m.coordinator_epoch, m.timestamp


@settings(max_examples=examples(200), deadline=None)
@given(commit=st.booleans(), coord=st.integers(-(2**31), 2**31 - 1), ts=st.integers(0, 2**41),
       ts_delta=st.integers(-64, 63), log_append=st.booleans(), pid=st.integers(0, 2**40))
def test_canonical_marker_fast_path_matches_the_record_parser(commit, coord, ts, ts_delta, log_append, pid):
    ctype = records.ControlRecordType.COMMIT if commit else records.ControlRecordType.ABORT
    rec = records.Record(0, ts_delta, struct.pack(">hh", 0, int(ctype)), struct.pack(">hi", 0, coord))
    buf = records.build_batch(7, [rec], control=True, transactional=True, producer_id=pid, producer_epoch=0,
                              base_timestamp=ts, max_timestamp=ts + 5, log_append_time=log_append)
    assert len(buf) == 78
    fast = _canonical_marker(buf, 0, records.read_batch_header(buf, 0))
    assert fast is not None and fast[:3] == _general(buf)


def test_non_canonical_markers_take_the_general_path():
    # a header on the record, a compressed batch and an unknown type are all left to the record parser
    with_header = records.Record(0, 0, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 3), (("h", b"v"),))
    leader_change = records.Record(0, 0, struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 3))
    for rec, codec in ((with_header, 0), (leader_change, 0)):
        buf = records.build_batch(0, [rec], control=True, producer_id=1, producer_epoch=0, codec=codec)
        assert _canonical_marker(buf, 0, records.read_batch_header(buf, 0)) is None
    gz = records.build_end_txn_marker_batch(0, 1, 0, True, codec=1)
    assert _canonical_marker(gz, 0, records.read_batch_header(gz, 0)) is None
    scan = scan_buffer(gz, SegmentTask("x.log", 0), len(gz))
    assert scan.batches["marker"][0] == Marker.COMMIT


def test_fast_walk_and_general_walk_agree_on_every_stop_reason():
    b = records.build_batch(0, records.simple_records([b"x" * 100]))
    good = b * 3
    cases = {
        "end": good,
        "torn": good + b[:40],
        "short tail": good + b[:10],
        "crc": good + b[:30] + bytes([b[30] ^ 1]) + b[31:],
        "size<14": good + struct.pack(">qi", 0, 5) + bytes(20),
        "small v2": good + struct.pack(">qiib", 0, 40, 0, 2) + bytes(35),
    }
    expected = {"end": (3 * len(b), "end"), "torn": (3 * len(b), "incomplete"),
                "short tail": (3 * len(b), "incomplete"), "crc": (3 * len(b), "crc mismatch"),
                "size<14": (3 * len(b), "corrupt size"), "small v2": (3 * len(b), "batch below 61 bytes")}
    for name, data in cases.items():
        s = scan_buffer(data, SegmentTask("x.log", 0), len(data))
        assert (s.valid_bytes, s.stop.value) == expected[name], name
        assert list(s.batches["position"]) == [0, len(b), 2 * len(b)], name


@settings(max_examples=examples(300), deadline=None)
@given(sizes=st.lists(st.integers(26, 9000), max_size=80), interval=st.sampled_from([0, 1, 100, 4096, 10_000]))
def test_index_entry_rows_follow_kafkas_rule(sizes, interval):  # type: ignore[no-untyped-def]
    """LogSegment.recover: a batch is indexed when it starts more than ``interval`` bytes after the
    last indexed batch (byte 0 before the first)."""
    import numpy as np

    from mploader.scan.draft import index_entry_rows

    pos, p = [], 0
    for size in sizes:
        pos.append(p)
        p += size
    expected, last = [], 0
    for i, at in enumerate(pos):
        if at - last > interval:
            expected.append(i)
            last = at
    assert index_entry_rows(np.array(pos, np.int64), interval).tolist() == expected


def test_a_scan_from_byte_0_drafts_the_recovery_only_when_asked(tmp_path):  # type: ignore[no-untyped-def]
    from mploader.scan import scan_segment

    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(records.build_batch(i, records.simple_records([b"x" * 300]),
                                                  partition_leader_epoch=i // 10)
                              for i in range(40)))
    plain = scan_segment(SegmentTask(str(path), 0))
    asked = scan_segment(SegmentTask(str(path), 0, index_interval=1000))
    later = scan_segment(SegmentTask(str(path), 0, start=int(plain.batches["position"][3]), index_interval=1000))
    assert plain.draft is None and later.draft is None  # from byte 0 only: the chain starts there
    d = asked.draft
    rows, last = [], 0  # LogSegment.recover's rule, batch by batch
    for i, pos in enumerate(plain.batches["position"].tolist()):
        if pos - last > 1000:
            rows.append(i)
            last = pos
    assert d.interval == 1000 and len(rows) > 5
    assert d.index["row"].tolist() == rows
    assert d.index["offset"].tolist() == rows  # one record per batch: its offset is its row
    assert d.index["position"].tolist() == plain.batches["position"][rows].tolist()
    assert d.epoch_rows.tolist() == [0, 10, 20, 30]
    assert d.producer_rows.tolist() == []  # no producer ids in these batches


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=30), st.booleans())
def test_batch_table_of_mixed_magics_matches_the_entry_parsers(magics, only_v2):  # type: ignore[no-untyped-def]
    """A segment written before and after a message-format upgrade: every column of every row equals what
    the per-entry parsers read (the table is filled column by column, all-v2 tables take a shortcut)."""
    from mploader.format import legacy
    from mploader.scan import scan_buffer

    if only_v2:
        magics = [2] * len(magics)
    parts, offset = [], 0
    for i, magic in enumerate(magics):
        if magic == 2:
            parts.append(records.build_batch(offset, records.simple_records([b"v" * i, b"w"]), partition_leader_epoch=i,
                                             producer_id=100 + i, producer_epoch=3, base_sequence=i))
            offset += 2
        else:
            parts.append(legacy.build_message(offset, b"v" * (i + 1), magic=magic, timestamp=1000 + i))
            offset += 1
    data = b"".join(parts)
    scan = scan_buffer(data, SegmentTask("x.log", 0), len(data))
    assert len(scan.batches) == len(magics)
    for row, magic in zip(scan.batches, magics):
        pos = int(row["position"])
        if magic == 2:
            h = records.read_batch_header(data, pos)
            want = (h.size, h.attributes, h.base_offset, h.last_offset, h.max_timestamp, h.partition_leader_epoch,
                    h.producer_id, h.producer_epoch, h.base_sequence, h.records_count, -1, -1)
        else:
            e = legacy.read_entry(data, pos)
            want = (e.size, e.attributes, e.offset, e.offset, e.timestamp if magic else -1, -1, -1, -1, -1, 1, -1, -1)
        got = tuple(int(row[k]) for k in ("size", "attributes", "base_offset", "last_offset", "max_timestamp",
                                          "partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence",
                                          "records_count", "coordinator_epoch", "marker_timestamp"))
        assert (int(row["magic"]), got) == (magic, want)


def test_a_plain_walk_from_a_position_reports_file_positions(tmp_path):  # type: ignore[no-untyped-def]
    """walk_from (producer-state reads of unrecovered segments) names the byte of a bad entry in the file,
    not in the range it was asked for."""
    from mploader.disk import RealDisk
    from mploader.recovery.segment import Segment, walk_from

    first = records.build_batch(0, records.simple_records([b"a" * 100]))
    second = records.build_batch(1, records.simple_records([b"b" * 100]))
    bad = struct.pack(">qiib", 2, 14, 0, 2) + bytes(13)  # a 26-byte v2 entry: smaller than a batch header
    seg = Segment(str(tmp_path), 0)
    (tmp_path / "00000000000000000000.log").write_bytes(first + second + bad)
    walk = walk_from(RealDisk(), seg, len(first))
    at = len(first) + len(second)
    assert walk.batches["position"].tolist() == [len(first)]
    assert (walk.start, walk.valid_bytes, walk.end) == (len(first), at, at + len(bad))
    assert walk.fatal is not None and f"at byte {at}" in walk.fatal, walk.fatal


def _tiny_v2_entry(offset: int) -> bytes:
    """A v2 entry of 32 bytes: below the 61-byte batch header, which plain iteration reads anyway."""
    return struct.pack(">qiib", offset, 20, 0, 2) + bytes(15)


def test_a_plain_walk_reads_a_tiny_v2_entrys_header_up_to_the_end_of_the_file_not_of_the_walk() -> None:
    """Kafka's plain iteration (producer-state reads up to a position) loads a v2 header from the file:
    an entry within 61 bytes of the walk's end but not of the file's is read, not a failed start-up."""
    head = records.build_batch(0, [records.Record(0, 0, None, b"v")])
    tiny = _tiny_v2_entry(1)
    tail = records.build_batch(2, [records.Record(0, 0, None, b"w" * 100)])
    data = head + tiny + tail
    end = len(head) + len(tiny)  # the walk stops right after the tiny entry; the file goes on
    scan = scan_buffer(data, SegmentTask("x.log", 0, check_crc=False), end)
    assert scan.fatal is None and scan.valid_bytes == end and len(scan.batches) == 2
    at_eof = scan_buffer(head + tiny, SegmentTask("x.log", 0, check_crc=False), end)
    assert at_eof.fatal is not None and at_eof.fatal_exception == "KafkaException"


def _scan_fields(scan):  # type: ignore[no-untyped-def]
    d = scan.draft
    return (scan.end, scan.valid_bytes, scan.stop, scan.stop_detail, scan.fatal, scan.batches.tobytes(),
            None if d is None else (d.index.tobytes(), d.producer_rows.tobytes(), d.epoch_rows.tobytes()))


def test_a_small_segment_read_and_a_big_one_mapped_scan_the_same(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """scan_segment reads a file up to READ_BELOW_BYTES and maps a bigger one: the same scan either way, from
    byte 0 or from a position, whole or up to an end, with a torn tail; and a read the kernel cuts short is read
    on (taken for the file's end, it would look like a torn tail, and recovery would cut valid bytes)."""
    import os

    import mploader.scan.walk as walk

    batch = records.build_batch(0, records.simple_records([b"x" * 300]))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch * 40 + batch[:50])
    tasks = [SegmentTask(str(path), 0, index_interval=1024), SegmentTask(str(path), 0, start=3 * len(batch)),
             SegmentTask(str(path), 0, end=7 * len(batch) + 5), SegmentTask(str(path), 0, start=10**6),
             SegmentTask(str(path), 0, end=40 * len(batch) + 30, check_crc=False)]
    monkeypatch.setattr(walk, "READ_BELOW_BYTES", 0)  # every file mapped
    mapped = [_scan_fields(walk.scan_segment(t)) for t in tasks]
    monkeypatch.setattr(walk, "READ_BELOW_BYTES", 1 << 20)
    assert [_scan_fields(walk.scan_segment(t)) for t in tasks] == mapped
    assert mapped[0][1] == 40 * len(batch) and mapped[0][2] is walk.Stop.INCOMPLETE
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: real_pread(fd, min(n, 1000), at))  # 1,000 bytes a call
    assert [_scan_fields(walk.scan_segment(t)) for t in tasks] == mapped


def test_a_read_error_names_the_segment(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """An I/O error of the read (os.pread names no file) is raised with the segment's path, as open() gave it."""
    import errno
    import os

    import pytest

    import mploader.scan.walk as walk

    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(records.build_batch(0, records.simple_records([b"x"])) * 3)

    def failing_pread(fd, n, at):  # type: ignore[no-untyped-def]
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pread", failing_pread)
    with pytest.raises(OSError) as got:
        walk.scan_segment(SegmentTask(str(path), 0))
    assert (got.value.errno, got.value.filename) == (errno.EIO, str(path))
