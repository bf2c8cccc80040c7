"""docs/scenarios.md section E: exact index rebuild (docs/loading.md §7.1), scenarios 46-52.

Every expected index byte below is written out from the §7.1 rule by hand (or with the test-side
``expected_indexes`` of tests/kafkadir.py, an independent implementation of that rule), never taken
from mploader.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

import pytest

from mploader import TopicPartition
from mploader.format import compression, legacy
from tests.kafkadir import (
    OFFSET_INDEX_FULL,
    T0,
    TIME_INDEX_FULL,
    V0,
    V1,
    B,
    PartitionBuilder,
    assert_file,
    batch_facts,
    data_dir,
    empty_snapshot,
    expected_indexes,
    load,
    name,
    oi_bytes,
    snapshot_offsets,
    ti_bytes,
)

TP = TopicPartition("t", 0)
EPOCHS = "leader-epoch-checkpoint"


# ------------------------------------------------------------------------------------------------
# Test-side index readers and lookups (Kafka's OffsetIndex.lookup / TimeIndex.lookup /
# LogSegment.translateOffset / findOffsetByTimestamp), used to check the rebuilt files are usable.


def _entries(data: bytes, fmt: str) -> list[tuple[int, int]]:
    size = struct.calcsize(fmt)
    # The active segment's files end in a zero tail after the final resize (docs/loading.md §6.9); Kafka keeps
    # the real entry count in memory.  Test side only: drop the trailing all-zero slots (no real entry
    # of these scenarios is all zero).
    n = len(data.rstrip(b"\0"))
    n = min(-(-n // size) * size, len(data) - len(data) % size)
    return [struct.unpack_from(fmt, data, p) for p in range(0, n, size)]


def offset_entries(data: bytes, base: int) -> list[tuple[int, int]]:
    """``[(absolute offset, position)]``."""
    return [(base + rel, pos) for rel, pos in _entries(data, ">ii")]


def time_entries(data: bytes, base: int) -> list[tuple[int, int]]:
    """``[(timestamp, absolute offset)]``."""
    return [(ts, base + rel) for ts, rel in _entries(data, ">qi")]


@dataclass
class SegmentView:
    """A loaded segment as the lookups see it: its batches and its on-disk index entries (read once)."""

    base: int
    batches: list
    offsets: list[tuple[int, int]]
    times: list[tuple[int, int]]

    @classmethod
    def read(cls, pb: PartitionBuilder, base: int) -> SegmentView:
        return cls(base, batch_facts(pb.read(name(base, ".log"))),
                   offset_entries(pb.read(name(base, ".index")), base),
                   time_entries(pb.read(name(base, ".timeindex")), base))

    def position_for(self, target: int) -> int:
        """OffsetIndex.lookup: position of the largest entry <= target, else 0."""
        pos = 0
        for off, p in self.offsets:
            if off <= target:
                pos = p
        return pos


def translate_offset(seg: SegmentView, target: int) -> tuple[int, int] | None:
    """``(lastOffset, position)`` of the first batch whose lastOffset >= target, scanning from the
    position the offset index gives (LogSegment.translateOffset)."""
    pos = seg.position_for(target)
    for b in seg.batches:
        if b.position >= pos and b.last_offset >= target:
            return b.last_offset, b.position
    return None


def find_offset_by_timestamp(segs: list[SegmentView], ts: int) -> int | None:
    """Kafka's fetchOffsetByTimestamp for single-record batches, driven by the on-disk indexes."""
    for seg in segs:
        largest = seg.times[-1][0] if seg.times else -1  # maxTimestampSoFar of a loaded segment
        if largest >= ts:
            break
    else:
        return None
    start = seg.base
    for t, off in seg.times:  # TimeIndex.lookup: largest entry with timestamp <= ts, else (-1, base)
        if t <= ts:
            start = off
    pos = seg.position_for(start)
    for b in seg.batches:
        if b.position >= pos and b.max_timestamp >= ts:
            return b.last_offset
    return None


# ------------------------------------------------------------------------------------------------
# 46. Worked example with I = 100


def _s46_setup(tmp_path, kind: str, n: int):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d, interval=100).segment(0, *(B(o) for o in range(n)), indexes=False)
    assert len(pb.read(name(0, ".log"))) == 72 * n
    if kind == "garbage":
        rnd = random.Random(46)
        pb.write(name(0, ".index"), bytes(rnd.randrange(256) for _ in range(37)))
        pb.write(name(0, ".timeindex"), bytes(rnd.randrange(256) for _ in range(50)))
    return d, pb


@pytest.mark.parametrize("index_files", ["missing", "garbage"])
def test_s46_worked_example_interval_100(tmp_path, index_files):
    d, pb = _s46_setup(tmp_path, index_files, 5)  # positions 0, 72, 144, 216, 288; 360 bytes

    result = load(d, index_interval_bytes=100)

    oi = bytes.fromhex("00000002 00000090 00000004 00000120")
    ti = bytes.fromhex("0000018bcfe56802 00000002 0000018bcfe56804 00000004")
    assert oi == oi_bytes(0, (2, 144), (4, 288))
    assert ti == ti_bytes(0, (T0 + 2, 2), (T0 + 4, 4))
    # the only (= active) segment: the recovered bytes, then zeros up to the full size (§6.9)
    assert_file(pb.file(0, ".index"), oi, OFFSET_INDEX_FULL)
    assert_file(pb.file(0, ".timeindex"), ti, TIME_INDEX_FULL)
    assert pb.read(name(0, ".log")) == b"".join(B(o) for o in range(5))
    log = result.logs[TP]
    assert log.recovered_segments == [0]
    assert log.truncated_bytes == 0
    assert log.log_end_offset == 5


def test_s46_variant_sixth_batch_not_indexed(tmp_path):
    d, pb = _s46_setup(tmp_path, "missing", 6)  # B(5) at 360: 360 - 288 = 72 <= 100

    result = load(d, index_interval_bytes=100)

    oi = bytes.fromhex("00000002 00000090 00000004 00000120")
    ti = bytes.fromhex("0000018bcfe56802 00000002 0000018bcfe56804 00000004 0000018bcfe56805 00000005")
    assert_file(pb.file(0, ".index"), oi, OFFSET_INDEX_FULL)
    assert_file(pb.file(0, ".timeindex"), ti, TIME_INDEX_FULL)  # third entry from the final append
    assert result.logs[TP].log_end_offset == 6


# ------------------------------------------------------------------------------------------------
# 47. Default interval, small segment


def test_s47_default_interval_small_segment(tmp_path):
    d, pb = _s46_setup(tmp_path, "missing", 5)

    result = load(d)  # I = 4096

    assert_file(pb.file(0, ".index"), b"", OFFSET_INDEX_FULL)  # 0 entries
    assert_file(pb.file(0, ".timeindex"), ti_bytes(0, (T0 + 4, 4)), TIME_INDEX_FULL)  # final append only
    assert result.logs[TP].log_end_offset == 5


# ------------------------------------------------------------------------------------------------
# 48. I = 1 indexes every batch but the first (LLT testIndexRebuild)


def test_s48_interval_1_indexes_every_batch_but_first(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d, interval=1)
    bases = [2 * k for k in range(100)]
    for base in bases:
        batches = [B(o, ts=T0 + 10 * o, value=b"0123456789") for o in (base, base + 1)]
        assert [len(b) for b in batches] == [78, 78]
        pb.segment(base, *batches, indexes=False)  # every .index and .timeindex deleted
    assert not pb.file(0, ".index").exists() and not pb.file(0, ".timeindex").exists()

    result = load(d, index_interval_bytes=1)

    for base in bases:
        oi = oi_bytes(base, (base + 1, 78))
        ti = ti_bytes(base, (T0 + 10 * (base + 1), base + 1))
        assert oi == struct.pack(">ii", 1, 78)
        if base == 198:  # active: resized to full size
            assert_file(pb.file(base, ".index"), oi, OFFSET_INDEX_FULL)
            assert_file(pb.file(base, ".timeindex"), ti, TIME_INDEX_FULL)
        else:
            assert pb.read(name(base, ".index")) == oi, base
            assert pb.read(name(base, ".timeindex")) == ti, base
    log = result.logs[TP]
    assert log.log_end_offset == 200
    assert [s.base_offset for s in log.segments] == bases
    # lookups by timestamp through the rebuilt indexes
    segs = [SegmentView.read(pb, base) for base in bases]
    for i in range(200):
        assert find_offset_by_timestamp(segs, T0 + 10 * i) == i, i
    assert find_offset_by_timestamp(segs, T0) == 0  # resolves to the segment base 0


# ------------------------------------------------------------------------------------------------
# 49. No timestamps => empty time index (LLT testRebuildTimeIndexForOldMessages)


def test_s49_v0_messages_give_empty_time_index(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 16)])  # RP = LEO + 1
    pb = PartitionBuilder(d, interval=1)
    rnd = random.Random(49)
    segs = {}
    for base in (0, 5, 10):
        msgs = [V0(o, bytes(rnd.randrange(256) for _ in range(10))) for o in range(base, base + 5)]
        assert [len(m) for m in msgs] == [36] * 5
        pb.segment(base, *msgs)  # consistent indexes ...
        (pb.file(base, ".timeindex")).unlink()  # ... but every .timeindex deleted
        segs[base] = pb.read(name(base, ".index"))
    assert segs[0] == oi_bytes(0, (1, 36), (2, 72), (3, 108), (4, 144))
    pb.epochs((0, 0))

    result = load(d, index_interval_bytes=1, record_version=0)

    for base in (0, 5):  # not recovered: a 0-byte .timeindex created by the load-time check
        assert pb.read(name(base, ".timeindex")) == b""
        assert pb.read(name(base, ".index")) == segs[base]
    # active segment recovered: no time entries (timestamps -1), offset entries for messages 2..5
    assert_file(pb.file(10, ".timeindex"), b"", TIME_INDEX_FULL)
    oi10 = oi_bytes(10, (11, 36), (12, 72), (13, 108), (14, 144))
    assert_file(pb.file(10, ".index"), oi10, OFFSET_INDEX_FULL)
    assert not (pb.path / EPOCHS).exists()  # record version < 2: the file is deleted
    log = result.logs[TP]
    assert log.leader_epochs is None
    assert log.recovered_segments == [10]
    assert log.log_end_offset == 15
    assert log.loader_recovery_point == 15  # min(16, 15)
    # the V0/V1 shortcut: empty snapshots at [second-to-last base, last base, LEO]
    assert snapshot_offsets(pb.path) == {5, 10, 15}
    for off in (5, 10, 15):
        assert pb.read(name(off, ".snapshot")) == empty_snapshot()


# ------------------------------------------------------------------------------------------------
# 50. Timestamps going backwards


def test_s50_timestamps_going_backwards(tmp_path):
    d = data_dir(tmp_path, clean=False)
    batches = [B(0, ts=T0 + 50), B(1, ts=T0 + 10), B(2, ts=T0 + 60), B(3, ts=T0 + 20)]
    pb = PartitionBuilder(d, interval=1).segment(0, *batches, indexes=False)

    result = load(d, index_interval_bytes=1)

    assert_file(pb.file(0, ".index"), oi_bytes(0, (1, 72), (2, 144), (3, 216)), OFFSET_INDEX_FULL)
    # batch 1: max (T0+50, 0); batch 2: (T0+60, 2); batch 3: still (T0+60, 2); final: no entry
    assert_file(pb.file(0, ".timeindex"), ti_bytes(0, (T0 + 50, 0), (T0 + 60, 2)), TIME_INDEX_FULL)
    assert result.logs[TP].log_end_offset == 4
    assert result.logs[TP].truncated_bytes == 0


# ------------------------------------------------------------------------------------------------
# 51. Legacy v1 data is indexed shallowly


def test_s51_legacy_v1_indexed_shallowly(tmp_path):
    d = data_dir(tmp_path, clean=False)
    wrapper = legacy.build_wrapper([(0, b"a", T0), (1, b"b", T0 + 1), (2, b"c", T0 + 2)],
                                   codec=compression.GZIP, magic=1)
    # wrapper offset 2 (last inner), timestamp T0+2 (max inner), relative inner offsets 0..2
    assert struct.unpack_from(">q", wrapper, 0)[0] == 2
    assert struct.unpack_from(">q", wrapper, 18)[0] == T0 + 2
    assert legacy.inner_offsets(wrapper, 0) == [0, 1, 2]
    last = V1(3, b"x", T0 + 3)
    assert len(last) == 35
    pb = PartitionBuilder(d, interval=0).segment(0, wrapper, last, indexes=False)
    pb.epochs((0, 0))

    result = load(d, index_interval_bytes=0, record_version=1)

    w = len(wrapper)
    assert_file(pb.file(0, ".index"), oi_bytes(0, (3, w)), OFFSET_INDEX_FULL)
    assert_file(pb.file(0, ".timeindex"), ti_bytes(0, (T0 + 3, 3)), TIME_INDEX_FULL)
    assert pb.read(name(0, ".log")) == wrapper + last  # nothing decompressed or rewritten
    assert not (pb.path / EPOCHS).exists()
    log = result.logs[TP]
    assert log.producers == {}
    assert log.leader_epochs is None
    assert log.log_end_offset == 4
    assert log.truncated_bytes == 0
    # V1 shortcut: the only segment has base 0 (never snapshotted) => just the LEO
    assert snapshot_offsets(pb.path) == {4}
    assert pb.read(name(4, ".snapshot")) == empty_snapshot()


# ------------------------------------------------------------------------------------------------
# 52. Segment-level recovery fixes corrupt indexes (LST testRecoveryFixesCorruptIndex / ...TimeIndex)


# SPEC NOTE: the LST test calls LogSegment.recover directly; here the same segment is the only one of
# an unclean partition (RP absent) with record version V1, so recoverLog recovers it; the lookups are
# done test-side on the rebuilt files.
@pytest.mark.parametrize("corrupt", [".index", ".timeindex"])
def test_s52_recovery_fixes_corrupt_index(tmp_path, corrupt):
    d = data_dir(tmp_path, clean=False)
    msgs = [V1(i, str(i).encode(), 10 * i) for i in range(100)]
    pb = PartitionBuilder(d, interval=10).segment(0, *msgs)
    data = pb.read(name(0, ".log"))
    good_oi, good_ti = expected_indexes(0, data, 10)
    assert len(good_oi) == 99 * 8 and len(good_ti) == 99 * 12  # every message but the first
    size = len(pb.read(name(0, corrupt)))
    rnd = random.Random(52)
    garbage = bytes(rnd.randrange(256) for _ in range(size - 5))
    pb.write(name(0, corrupt), pb.read(name(0, corrupt))[:5] + garbage)
    assert len(pb.read(name(0, corrupt))) == size

    result = load(d, index_interval_bytes=10, record_version=1)

    log = result.logs[TP]
    assert log.recovered_segments == [0]
    assert log.truncated_bytes == 0
    assert log.log_end_offset == 100
    assert_file(pb.file(0, ".index"), good_oi, OFFSET_INDEX_FULL)
    assert_file(pb.file(0, ".timeindex"), good_ti, TIME_INDEX_FULL)
    seg = SegmentView.read(pb, 0)
    assert len(seg.offsets) == 99 and len(seg.times) == 99
    for i in range(100):
        found = translate_offset(seg, i)
        assert found is not None and found[0] == i, i
        assert found[1] == sum(len(m) for m in msgs[:i])
        assert find_offset_by_timestamp([seg], 10 * i) == i, i
        if i < 99:
            assert find_offset_by_timestamp([seg], 10 * i + 1) == i + 1, i
