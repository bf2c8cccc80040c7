"""docs/scenarios.md section I: unit-level behaviour of indexes and segments, scenarios 80-88.

80-84 drive the reference model of Kafka's index objects (mploader/format/index_model.py) and check
mploader's own sanity checks (mploader/format/index.py) on the same bytes; 85 runs mploader.recovery.segment's
helpers on real files and compares the index files they leave with the model driven through Kafka's
LogSegment.truncateTo; 86-88 are full loads (see the note above 87 for how 87/88 map to a load).
"""

from __future__ import annotations

import os
import random
import struct

import pytest

from mploader import TopicPartition
from mploader.disk import RealDisk
from mploader.errors import StartupFailedError
from mploader.format.index import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    TXN_ENTRY,
    entries_from_bytes,
    offset_index_problem,
    read_txn_index,
    time_index_problem,
    txn_index_problem,
)
from mploader.recovery.segment import Segment, offset_index_lookup, read_next_offset, translate_offset, truncate_to
from tests.index_model import (
    CorruptIndexException,
    IllegalArgumentException,
    IllegalStateException,
    InvalidOffsetException,
    KafkaException,
    OffsetIndex,
    TimeIndex,
    TransactionIndex,
)
from tests.kafkadir import (
    OFFSET_INDEX_FULL,
    T0,
    TIME_INDEX_FULL,
    V1,
    B,
    N,
    PartitionBuilder,
    assert_file,
    data_dir,
    load,
    name,
    oi_bytes,
    overwrite_bytes,
    ti_bytes,
)

TP = TopicPartition("t", 0)


def _offset_problem(data: bytes, base: int):
    return offset_index_problem("x.index", base, len(data), entries_from_bytes(data, OFFSET_ENTRY))


def _time_problem(data: bytes, base: int):
    return time_index_problem("x.timeindex", base, len(data), entries_from_bytes(data, TIME_ENTRY))


# ------------------------------------------------------------------------------------------------
# 80. Offset index append and lookup


def test_s80_offset_index_append_and_lookup(tmp_path):
    idx = OffsetIndex(45, 30 * 8)
    assert (idx.entries, idx.max_entries, idx.length) == (0, 30, 240)
    assert idx.lookup(92) == (45, 0)
    assert idx.lookup(45) == (45, 0)
    with pytest.raises(IllegalArgumentException):
        idx.entry(0)

    rng = random.Random(80)
    offsets, positions = [], []
    o, p = 46, 0
    for _ in range(30):
        o += rng.randint(1, 15)
        p += rng.randint(1, 15)
        offsets.append(o)
        positions.append(p)
        idx.append(o, p)
    for k, (o, p) in enumerate(zip(offsets, positions)):
        assert idx.lookup(o) == (o, p)
        assert idx.entry(k) == (o, p)
    # every target: the entry with the largest offset <= x, else (base, 0); mploader's lookup on the file agrees
    seg = Segment(str(tmp_path), 45)
    idx.save(seg.index_path)
    for x in range(40, offsets[-1] + 20):
        below = [(o, p) for o, p in zip(offsets, positions) if o <= x]
        assert idx.lookup(x) == (below[-1] if below else (45, 0))
        assert offset_index_lookup(RealDisk(), seg, x) == idx.lookup(x)

    # the 31st append: the index is full
    assert idx.is_full()
    with pytest.raises(IllegalArgumentException):
        idx.append(offsets[-1] + 1, positions[-1] + 1)

    # strictly increasing offsets
    idx = OffsetIndex(45, 30 * 8)
    idx.append(51, 0)
    with pytest.raises(InvalidOffsetException):
        idx.append(50, 1)
    with pytest.raises(InvalidOffsetException):
        idx.append(51, 1)
    assert idx.entries == 1 and idx.last_offset == 51


def test_s80_lookup_extreme_cases():
    idx = OffsetIndex(45, 30 * 8)
    for i in range(idx.max_entries):
        idx.append(45 + i + 1, i)
    assert idx.lookup(45) == (45, 0)  # below the first entry
    assert idx.lookup(45 + 30) == (45 + 30, 29)
    assert idx.lookup(10**12) == (45 + 30, 29)


# ------------------------------------------------------------------------------------------------
# 81. Offset index reopen, truncate, sanity


def test_s81a_offset_index_reopen():
    idx = OffsetIndex(45, 30 * 8)
    idx.append(51, 0)
    idx.append(52, 1)
    idx.close()  # trimToValidSize
    data = idx.to_bytes()
    assert data == oi_bytes(45, (51, 0), (52, 1))

    reopened = OffsetIndex(45, 30 * 8, data)
    assert reopened.entries == 2 and reopened.last_offset == 52
    assert reopened.lookup(51) == (51, 0)
    assert reopened.lookup(52) == (52, 1)
    assert reopened.is_full()  # every slot of the 16-byte file is an entry
    with pytest.raises(IllegalArgumentException):
        reopened.append(53, 2)
    assert reopened.resize(30 * 8) is True
    reopened.append(53, 2)
    assert reopened.to_bytes() == oi_bytes(45, (51, 0), (52, 1), (53, 2)) + bytes(240 - 24)
    assert _offset_problem(data, 45) is None


def test_s81b_offset_index_truncate():
    idx = OffsetIndex(0, 10 * 8)
    idx.truncate()
    for i in range(1, 10):
        idx.append(i, i)

    idx.truncate_to(12)  # past the end: unchanged
    assert idx.lookup(10) == (9, 9) and idx.last_offset == 9
    idx.append(10, 10)
    idx.truncate_to(10)  # at the end: the entry for 10 goes
    assert idx.lookup(10) == (9, 9) and idx.last_offset == 9
    idx.append(10, 10)
    idx.truncate_to(9)
    assert idx.lookup(10) == (8, 8) and idx.last_offset == 8
    idx.append(9, 9)
    idx.truncate_to(5)
    assert idx.lookup(10) == (4, 4) and idx.last_offset == 4 and idx.entries == 4
    idx.append(5, 5)
    idx.truncate()
    assert idx.entries == 0 and idx.last_offset == 0
    # truncation moves the position only: the file keeps its length and bytes
    assert idx.length == 80 and idx.to_bytes()[:8] == oi_bytes(0, (1, 1))


def test_s81c_offset_index_sanity():
    idx = OffsetIndex(20, 10 * 8)
    idx.append(20, 0)
    idx.sanity_check()  # last offset == base offset is fine
    idx.close()
    assert _offset_problem(idx.to_bytes(), 20) is None
    assert _offset_problem(b"", 20) is None

    below = oi_bytes(20, (19, 0))  # relative offset -1
    with pytest.raises(CorruptIndexException):
        OffsetIndex(20, 80, below).sanity_check()
    assert _offset_problem(below, 20) is not None
    odd = oi_bytes(20, (20, 0)) + b"\0"  # 9 bytes
    with pytest.raises(CorruptIndexException):
        OffsetIndex(20, 80, odd).sanity_check()
    assert _offset_problem(odd, 20) is not None


# ------------------------------------------------------------------------------------------------
# 82. Time index rules


def _time_index_29() -> TimeIndex:
    ti = TimeIndex(45, 30 * 12)
    for i in range(1, 30):
        ti.maybe_append(10 * i, 45 + 10 * i)
    return ti


def test_s82_time_index_lookup_entry_full_append():
    ti = TimeIndex(45, 30 * 12)
    assert ti.lookup(100) == (-1, 45)
    assert ti.last_entry == (-1, 45)
    assert not ti.is_full()
    with pytest.raises(IllegalArgumentException):
        ti.entry(0)

    ti = _time_index_29()
    assert ti.lookup(9) == (-1, 45)
    assert ti.lookup(25) == (20, 65)
    assert ti.lookup(30) == (30, 75)
    assert [ti.entry(k) for k in range(4)] == [(10, 55), (20, 65), (30, 75), (40, 85)]
    assert ti.entries == 29 and ti.is_full()  # one slot is kept for the final entry
    with pytest.raises(IllegalArgumentException):
        ti.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetException):
        ti.maybe_append(10000, 280, skip_full_check=True)  # 280 < 335
    ti.maybe_append(10000, 1000, skip_full_check=True)
    assert ti.entries == 30 and ti.last_entry == (10000, 1000)


def test_s82_time_index_append_rules():
    ti = TimeIndex(45, 30 * 12)
    ti.maybe_append(-1, 46)  # not greater than the empty index's -1: never indexed
    ti.maybe_append(-7, 47)
    assert ti.entries == 0
    ti.maybe_append(1, 46)
    assert ti.last_entry == (1, 46)
    ti.maybe_append(1, 47)  # same timestamp: silently ignored
    ti.maybe_append(1, 46)  # same offset too (the entry written again at roll/close)
    assert ti.entries == 1
    with pytest.raises(InvalidOffsetException):
        ti.maybe_append(5, 45)  # offset check comes before the timestamp check
    with pytest.raises(IllegalStateException):
        ti.maybe_append(0, 50)
    assert ti.entries == 1


def test_s82_time_index_truncate_and_resize():
    ti = _time_index_29()
    ti.truncate()
    assert ti.entries == 0 and ti.last_entry == (-1, 45)
    ti = _time_index_29()
    ti.truncate_to(55)  # by offset: the entry (10, 55) and all after it go
    assert ti.entries == 0
    ti = _time_index_29()
    ti.truncate_to(66)
    assert ti.entries == 2 and ti.last_entry == (20, 65)

    ti = TimeIndex(45, 30 * 12)
    assert ti.resize(360) is False
    assert ti.resize(180) is True and ti.length == 180 and ti.max_entries == 15
    assert ti.resize(720) is True and ti.length == 720 and ti.max_entries == 60
    assert ti.resize(725) is False  # rounded down to a whole entry first


# ------------------------------------------------------------------------------------------------
# 83. Time index sanity check


def test_s83_time_index_sanity_check():
    ti = TimeIndex(45, 30 * 12)
    ti.sanity_check()
    for i in range(1, 6):
        ti.maybe_append(10 * i, 45 + 10 * i)
    ti.sanity_check()
    ti.close()
    good = ti.to_bytes()
    assert len(good) == 60
    TimeIndex(45, 360, good).sanity_check()
    assert _time_problem(good, 45) is None and _time_problem(b"", 45) is None

    bad = {
        "offset below base": good[:48] + ti_bytes(45, (50, 44)),
        "timestamp below the first": good[:48] + ti_bytes(45, (9, 95)),
        "length not a multiple of 12": good + b"\0",
    }
    for why, data in bad.items():
        with pytest.raises(CorruptIndexException):
            TimeIndex(45, 360, data).sanity_check()
        assert _time_problem(data, 45) is not None, why

    # an untrimmed (preallocated) file: its last zero slot reads (0, base) -> timestamp below the first
    untrimmed = good + bytes(300)
    with pytest.raises(CorruptIndexException):
        TimeIndex(45, 360, untrimmed).sanity_check()
    assert _time_problem(untrimmed, 45) is not None


# ------------------------------------------------------------------------------------------------
# 84. Transaction index

TXNS = [(0, 0, 10, 11), (1, 5, 15, 13), (2, 18, 35, 25), (3, 32, 50, 40)]


def test_s84_txn_index_position_when_reopened():
    idx = TransactionIndex(0)
    assert idx.to_bytes() is None  # not created until the first append
    for t in TXNS:
        idx.append(*t)
    data = idx.to_bytes()
    assert len(data) == 4 * 34
    reopened = TransactionIndex(0, data)
    reopened.append(3, 50, 60, 55)
    assert reopened.all_aborted_txns() == TXNS + [(3, 50, 60, 55)]


def test_s84_txn_index_last_offset_must_increase():
    idx = TransactionIndex(0)
    idx.append(1, 5, 15, 13)
    with pytest.raises(IllegalArgumentException):
        idx.append(0, 0, 15, 11)
    with pytest.raises(IllegalArgumentException):
        idx.append(0, 0, 10, 11)
    # checked only against entries appended since open
    reopened = TransactionIndex(0, idx.to_bytes())
    reopened.append(0, 0, 10, 11)
    assert [t[2] for t in reopened.all_aborted_txns()] == [15, 10]


def test_s84_txn_index_truncate_and_reset():
    idx = TransactionIndex(0)
    for t in TXNS:
        idx.append(*t)
    idx.truncate_to(51)
    assert idx.all_aborted_txns() == TXNS
    idx.truncate_to(50)
    assert idx.all_aborted_txns() == TXNS[:3]
    with pytest.raises(IllegalArgumentException):  # the last offset is now 35
        idx.append(9, 30, 35, 30)
    idx.append(9, 30, 36, 30)
    idx.reset()
    assert idx.all_aborted_txns() == [] and idx.to_bytes() == b""  # an existing file is kept, 0 bytes
    idx.append(9, 0, 1, 0)  # reset also forgets the last offset
    assert TransactionIndex(0).to_bytes() is None
    missing = TransactionIndex(0)
    missing.reset()
    missing.truncate_to(0)
    assert missing.to_bytes() is None  # reset and truncate never create the file


def test_s84_txn_index_sanity_check(tmp_path):
    idx = TransactionIndex(0)
    for t in TXNS:
        idx.append(*t)
    data = idx.to_bytes()
    TransactionIndex(0, data).sanity_check()
    entries = entries_from_bytes(data, TXN_ENTRY)
    assert txn_index_problem("x.txnindex", 0, entries) is None
    with pytest.raises(CorruptIndexException):
        TransactionIndex(100, data).sanity_check()
    problem = txn_index_problem("x.txnindex", 100, entries)
    assert problem is not None and problem.position == 0

    # version quirk (docs/formats.md §11): only the first byte is read; positive is fatal, negative accepted
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(b"\x01" + data[1:])
    with pytest.raises(KafkaException):
        TransactionIndex(0, path.read_bytes()).sanity_check()
    with pytest.raises(StartupFailedError):
        read_txn_index(path, 0)
    path.write_bytes(b"\xff" + data[1:])
    TransactionIndex(0, path.read_bytes()).sanity_check()
    assert len(read_txn_index(path, 0)) == 4


# ------------------------------------------------------------------------------------------------
# 85. Segment next offset and truncation (mploader.recovery.segment on real files)

MAX = 1000  # segment.index.bytes of these segments


def _segment(tmp_path, base: int, log: bytes, index: bytes | None = None, timeindex: bytes | None = None):
    d = tmp_path / "t-0"
    d.mkdir(parents=True, exist_ok=True)
    seg = Segment(str(d), base)
    with open(seg.log_path, "wb") as f:
        f.write(log)
    for path, data in ((seg.index_path, index), (seg.time_index_path, timeindex)):
        if data is not None:
            with open(path, "wb") as f:
                f.write(data)
    return RealDisk(), seg


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_s85_next_offset(tmp_path):
    disk, seg = _segment(tmp_path / "a", 40, b"")
    assert read_next_offset(disk, seg) == 40
    disk, seg = _segment(tmp_path / "b", 40, b"", bytes(MAX), bytes(996))  # preallocated, zero slots
    assert read_next_offset(disk, seg) == 40

    batch = N(50, 3)  # offsets 50..52
    disk, seg = _segment(tmp_path / "c", 40, batch, b"", b"")
    assert read_next_offset(disk, seg) == 53
    disk, seg = _segment(tmp_path / "d", 40, batch, bytes(MAX), bytes(996))
    assert read_next_offset(disk, seg) == 53


def _kafka_truncate_indexes(base: int, index: bytes, timeindex: bytes, offset: int) -> tuple[OffsetIndex, TimeIndex]:
    """LogSegment.truncateTo's index steps on the model: truncateTo(offset), then resize(maxIndexSize)."""
    oi, ti = OffsetIndex(base, MAX, index), TimeIndex(base, MAX, timeindex)
    oi.truncate_to(offset)
    ti.truncate_to(offset)
    oi.resize(MAX)
    ti.resize(MAX)
    return oi, ti


def test_s85_truncate_to_offset_in_a_gap(tmp_path):
    # B(40) then B(43) appended with index.interval.bytes 10: the second append is indexed
    index, timeindex = oi_bytes(40, (43, 72)), ti_bytes(40, (T0 + 43, 43))
    disk, seg = _segment(tmp_path, 40, B(40) + B(43), index, timeindex)
    assert translate_offset(disk, seg, 41) == (72, 72)  # the first batch with lastOffset >= 41

    removed = truncate_to(disk, seg, 41, MAX)

    assert removed == 72
    assert _read(seg.log_path) == B(40)
    oi, ti = _kafka_truncate_indexes(40, index, timeindex, 41)
    assert (oi.entries, ti.entries) == (0, 0)
    assert _read(seg.index_path) == oi.to_bytes() and len(oi.to_bytes()) == MAX
    assert _read(seg.time_index_path) == ti.to_bytes() and len(ti.to_bytes()) == 996
    assert read_next_offset(disk, seg) == 41


def test_s85_truncate_full(tmp_path):
    index, timeindex = oi_bytes(40, (45, 72)), ti_bytes(40, (T0 + 45, 45))
    disk, seg = _segment(tmp_path, 40, B(40) + B(45) + B(46), index, timeindex)

    removed = truncate_to(disk, seg, 0, MAX)

    assert removed == 216
    assert _read(seg.log_path) == b""
    oi, ti = _kafka_truncate_indexes(40, index, timeindex, 0)
    assert (oi.entries, ti.entries) == (0, 0) and not oi.is_full() and not ti.is_full()
    # full size; the stale bytes stay (truncation only moves the position)
    assert_file(seg.index_path, index, MAX)
    assert_file(seg.time_index_path, timeindex, 996)
    assert _read(seg.index_path) == oi.to_bytes() and _read(seg.time_index_path) == ti.to_bytes()
    assert read_next_offset(disk, seg) == 40


def test_s85_truncate_to_stops_reading_at_the_hit(tmp_path):
    # what recoverLog meets after an InvalidOffsetException in a segment with a corrupt tail
    # (docs/loading.md §10.2-10.3)
    tail = struct.pack(">qi", 99, 3) + bytes(10)  # size field 3 < 14: CorruptRecordException if ever read
    disk, seg = _segment(tmp_path, 0, B(0) + B(1) + tail, b"", b"")
    assert translate_offset(disk, seg, 0) == (0, 72)
    assert truncate_to(disk, seg, 0, MAX) == 144 + len(tail)
    assert _read(seg.log_path) == b""


# ------------------------------------------------------------------------------------------------
# 86. Segment recovery with random corruption (one load: partition 15·k + j is corrupted from byte j of
# message k on)

MSGS = [V1(i, str(i).encode(), 10 * i) for i in range(20)]
STARTS = [sum(map(len, MSGS[:i])) for i in range(21)]


def test_s86_recovery_with_random_corruption(tmp_path):
    rng = random.Random(86)
    d = data_dir(tmp_path, clean=False)
    data = b"".join(MSGS)
    cases = {}
    for k in range(20):
        for j in range(15):
            pb = PartitionBuilder(d, partition=15 * k + j).segment(0, *MSGS)
            pos = STARTS[k] + j
            overwrite_bytes(pb.file(0, ".log"), pos, rng.randbytes(len(data) - pos))
            cases[(k, j)] = pb

    result = load(d, record_version=1, max_index_size=MAX)  # small indexes: 300 active segments are resized

    for (k, j), pb in cases.items():
        log = result.logs[TopicPartition("t", pb.partition)]
        where = f"corruption from byte {j} of message {k}"
        assert pb.read(name(0, ".log")) == data[: STARTS[k]], where
        assert log.truncated_bytes == len(data) - STARTS[k], where
        assert log.recovered_segments == [0], where
        assert log.log_end_offset == k, where
        # rebuilt indexes (no offset entry with I=4096; the final time entry), then grown as the active segment
        assert_file(pb.file(0, ".index"), b"", MAX)
        assert_file(pb.file(0, ".timeindex"), ti_bytes(0, (10 * (k - 1), k - 1)) if k else b"", 996)


# ------------------------------------------------------------------------------------------------
# 87 and 88: Kafka's LogSegmentTest checks the in-memory segment object: index files are created lazily,
# on first use (87), and a preallocated .log is trimmed to its data when the segment is closed (88).
# mploader has no open-segment object; it reproduces what Kafka's *load* does to the files.  So these
# tests check the consequences on disk:
#   87: a load creates index files only where Kafka's load touches an index -- the load-time check that
#       materialises a missing .timeindex next to an existing .index and resizes it to 0 (docs/loading.md §6.4), the
#       recovery of a segment (reset() materialises both indexes, docs/loading.md §7.1) and the active segment's resize
#       (docs/loading.md §6.9) -- and never a .txnindex without an aborted transaction or an index for a deleted file;
#   88: a preallocated .log left with a zero tail by a crash (no close, so no trim) loads with the LEO of
#       its real data and, being unflushed, is recovered and truncated to the data size (as in 38); a
#       second load ("reopen without preallocation") sees the same size and LEO.

INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")


def _index_files(pb) -> set[str]:
    return {f for f in pb.files() if f.endswith(INDEX_SUFFIXES) or ".index." in f or ".timeindex." in f}


def test_s87_clean_load_creates_index_files_only_where_kafka_does(tmp_path):
    d = data_dir(tmp_path, clean=True, rp=[("t", 0, 30)])
    pb = PartitionBuilder(d)
    pb.segment(0, *(B(o) for o in range(10)))
    pb.segment(10, *(B(o) for o in range(10, 20)))
    pb.segment(20, *(B(o) for o in range(20, 30)))
    os.remove(pb.file(10, ".timeindex"))
    os.remove(pb.file(20, ".timeindex"))
    pb.write(name(30, ".log.deleted"), B(30))  # a leftover of an asynchronous delete: removed, no index made
    pb.snapshot(30)
    before = {f: pb.read(f) for f in pb.files()}
    assert _index_files(pb) == {name(0, ".index"), name(0, ".timeindex"), name(10, ".index"), name(20, ".index")}

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == [] and log.log_end_offset == 30
    assert _index_files(pb) == {name(b, s) for b in (0, 10, 20) for s in (".index", ".timeindex")}
    assert pb.read(name(0, ".index")) == before[name(0, ".index")]
    assert pb.read(name(0, ".timeindex")) == before[name(0, ".timeindex")]
    assert pb.read(name(10, ".index")) == before[name(10, ".index")]
    assert pb.read(name(10, ".timeindex")) == b""  # docs/loading.md §6.4: materialised, resized to 0, not rebuilt
    assert_file(pb.file(20, ".index"), before[name(20, ".index")], OFFSET_INDEX_FULL)  # docs/loading.md §6.9
    assert_file(pb.file(20, ".timeindex"), b"", TIME_INDEX_FULL)  # docs/loading.md §6.4 then docs/loading.md §6.9
    assert name(30, ".log.deleted") not in pb.files()


def test_s87_recovery_materialises_indexes_but_never_a_txnindex(tmp_path):
    d = data_dir(tmp_path, clean=False)  # RP absent: everything is recovered
    pb = PartitionBuilder(d)
    pb.segment(0, *(B(o) for o in range(10)), indexes=False)  # no index files at all
    pb.segment(10, *(B(o) for o in range(10, 20)))

    result = load(d, index_interval_bytes=100)

    log = result.logs[TP]
    assert 0 in log.recovered_segments and 10 in log.recovered_segments
    assert log.log_end_offset == 20
    assert _index_files(pb) == {name(b, s) for b in (0, 10) for s in (".index", ".timeindex")}
    # S(0): created by recovery's reset() and trimmed to the rebuilt entries (interval 100: every 2nd batch)
    assert pb.read(name(0, ".index")) == oi_bytes(0, (2, 144), (4, 288), (6, 432), (8, 576))
    assert pb.read(name(0, ".timeindex")) == ti_bytes(0, *((T0 + o, o) for o in (2, 4, 6, 8, 9)))


PREALLOC = 536_870_912  # the init file size of the LogSegmentTest case (sparse here)


def test_s88_preallocated_log_with_zero_tail_after_a_crash(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 3)])
    pb = PartitionBuilder(d)
    pb.segment(0, B(0), B(1), B(2))
    pb.segment(3, B(3), B(4))
    os.truncate(pb.file(3, ".log"), PREALLOC)  # preallocate=true, never closed: zero tail

    result = load(d, preallocate=True, segment_bytes=PREALLOC)

    log = result.logs[TP]
    assert log.recovered_segments == [3]
    assert log.log_end_offset == 5
    assert log.truncated_bytes == PREALLOC - 144  # the size field 0 at byte 144: CorruptRecord
    assert pb.read(name(3, ".log")) == B(3) + B(4)
    assert pb.read(name(0, ".log")) == B(0) + B(1) + B(2)

    # loading again (an existing file, not preallocated again): same size, same LEO, nothing truncated
    again = load(d, preallocate=True, segment_bytes=PREALLOC).logs[TP]
    assert again.log_end_offset == 5 and again.truncated_bytes == 0
    assert os.path.getsize(pb.file(3, ".log")) == 144
