"""mploader.recovery.split: Kafka's offset-overflow segment split (docs/loading.md §11), beyond scenarios 74-79.

Expected values are worked out by hand from Kafka's LogSegment.appendFromFile / append and
LocalLog.splitOverflowedSegment / replaceSegments.
"""

from __future__ import annotations

import os

import pytest

from mploader import StartupFailedError, TopicPartition
from mploader.config import LoaderConfig
from mploader.disk import RealDisk
from mploader.format import records
from mploader.recovery.segment import Segment
from mploader.recovery.split import has_overflow, replace_in_segment_map, split_overflowed_segment
from tests.kafkadir import T0, V0, V1, PartitionBuilder, data_dir, load, name, oi_bytes, ti_bytes

TP = TopicPartition("t", 0)
M = 2**31 - 1
MIB = 1024 * 1024


def big(o: int, total: int, ts: int | None = None) -> bytes:
    """A v2 batch at offset ``o`` of exactly ``total`` bytes (one record, value padded)."""
    t = T0 + o if ts is None else ts
    v = total - 80
    while True:
        b = records.build_batch(o, [records.Record(0, 0, None, b"x" * v)], partition_leader_epoch=0,
                                base_timestamp=t, max_timestamp=t)
        if len(b) == total:
            return b
        assert len(b) < total
        v += total - len(b) if total - len(b) > 1 else 1


def small(first: int, last: int | None = None, ts: int = -1) -> bytes:
    last = first if last is None else last
    recs = [records.Record(o - first, 0, str(o).encode(), str(o).encode()) for o in range(first, last + 1)]
    return records.build_batch(first, recs, partition_leader_epoch=0, base_timestamp=ts, max_timestamp=ts)


def cfg(**kw):
    kw.setdefault("index_interval_bytes", 4096)
    return LoaderConfig(**kw).for_topic("t")


def test_chunks_follow_the_copy_buffer_and_index_per_chunk(tmp_path):
    # chunk 1 = b0 b1 (800000 + 400000 >= 1 MiB); chunk 2 = b2 alone (1.5 MB: the buffer grows to it);
    # chunk 3 = b3 b4 b5 (1.2 MB < 1.5 MB, would be 2 chunks with 1 MiB); chunk 4 = b6; b7 overflows
    sizes = [400_000, 400_000, 1_500_000, 400_000, 400_000, 400_000, 400_000]
    batches = [big(o, s) for o, s in enumerate(sizes)]
    tail = big(M + 10, 1000)
    pb = PartitionBuilder(tmp_path / "d")
    pb.segment(0, *batches, tail, indexes=False)
    seg = Segment(str(pb.path), 0)
    os.utime(seg.log_path, ns=(1_000_000_000, 1_234_567_891_234_567))
    disk = RealDisk()
    assert has_overflow(disk, seg, cfg(index_interval_bytes=0))

    new = split_overflowed_segment(disk, seg, cfg(index_interval_bytes=0), in_segment_map=False)

    assert [s.base_offset for s in new] == [0, M + 10]
    pos = [sum(sizes[:i]) for i in range(len(sizes))]
    assert pb.read(name(0, ".log")) == b"".join(batches)
    # an entry at every chunk but the first: (chunk lastOffset, chunk start), time (max ts so far, its offset)
    assert pb.read(name(0, ".index")) == oi_bytes(0, (2, pos[2]), (5, pos[3]), (6, pos[6]))
    assert pb.read(name(0, ".timeindex")) == ti_bytes(0, (T0 + 2, 2), (T0 + 5, 5), (T0 + 6, 6))
    assert pb.read(name(M + 10, ".log")) == tail
    assert pb.read(name(M + 10, ".index")) == b""
    assert pb.read(name(M + 10, ".timeindex")) == ti_bytes(M + 10, (T0 + M + 10, M + 10))  # the final entry
    for base in (0, M + 10):
        for sfx in (".log", ".index", ".timeindex"):
            assert os.stat(pb.file(base, sfx)).st_mtime_ns == 1_234_567_891_000_000  # File.lastModified(): ms
    assert not [f for f in pb.files() if f.endswith((".cleaned", ".swap", ".deleted"))]


def test_interval_counts_bytes_since_the_last_entry_per_chunk(tmp_path):
    # every chunk is one 600 kB batch (two do not fit 1 MiB); I = 1000000: entry when > I bytes since the last
    sizes = [600_000] * 6
    batches = [big(o, s) for o, s in enumerate(sizes)]
    pb = PartitionBuilder(tmp_path / "d")
    pb.segment(0, *batches, small(M + 1), indexes=False)
    seg = Segment(str(pb.path), 0)

    split_overflowed_segment(RealDisk(), seg, cfg(index_interval_bytes=1_000_000), in_segment_map=False)

    # before chunk k the bytes since the last entry are 0, 600k, 1.2M(entry), 600k, 1.2M(entry), 600k
    assert pb.read(name(0, ".index")) == oi_bytes(0, (2, 1_200_000), (4, 2_400_000))
    assert pb.read(name(0, ".timeindex")) == ti_bytes(0, (T0 + 2, 2), (T0 + 4, 4), (T0 + 5, 5))


def test_overflow_in_load_phase_keeps_old_txnindex_and_overwrites_old_files(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d, interval=1)
    s0 = [small(0), small(1, 2), small(M - 1)]
    sm = [small(M), small(M + 1, M + 2), small(2 * M - 1), small(2 * M), small(2 * M + 1, 2 * M + 2)]
    pb.write(name(0, ".log"), b"".join(s0)).write(name(0, ".index"), b"").write(name(0, ".timeindex"), b"")
    pb.write(name(M, ".log"), b"".join(sm))  # no .index: recovered inside loadSegmentFiles -> overflow
    pb.write(name(M, ".txnindex"), b"")
    pb.epochs((0, 0))

    result = load(d, index_interval_bytes=1)

    log = result.logs[TP]
    assert [s.base_offset for s in log.segments] == [0, M, 2 * M + 1]
    assert log.log_end_offset == 2 * M + 3
    assert pb.read(name(M, ".log")) == b"".join(sm[:4])
    assert pb.read(name(2 * M + 1, ".log")) == sm[4]
    assert pb.file(M, ".txnindex").exists()  # not renamed away: the old segment was not in the map
    assert not pb.file(2 * M + 1, ".txnindex").exists()
    assert not [f for f in pb.files() if f.endswith((".cleaned", ".swap", ".deleted"))]
    # the split output is not recovered again (clean, indexes present); the aborted recovery of the old
    # S(M) is not reported either
    assert log.recovered_segments == []
    assert pb.read(name(M, ".index")) == b""  # one chunk: no append-time entry; no timestamps
    assert pb.read(name(M, ".timeindex")) == b""


def test_old_segment_with_another_base_in_load_phase_stays(tmp_path):
    # S(0) starts at offset 5: the new segment is S(5); the old S(0), not in the map, keeps its files
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d, interval=1)
    data = small(5) + small(6) + small(M + 4)  # M + 4 - 5 = M - 1 fits base 5; M + 4 does not fit base 0
    pb.write(name(0, ".log"), data)

    result = load(d, index_interval_bytes=1)

    assert [s.base_offset for s in result.logs[TP].segments] == [0, 5]
    assert pb.read(name(0, ".log")) == data and pb.read(name(5, ".log")) == data


def test_old_segment_with_another_base_in_recovery_is_deleted(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d, interval=1)
    data = small(5) + small(6) + small(M + 4)
    pb.write(name(0, ".log"), data).write(name(0, ".index"), b"").write(name(0, ".timeindex"), b"")

    result = load(d, index_interval_bytes=1)

    log = result.logs[TP]
    assert [s.base_offset for s in log.segments] == [5]
    assert log.log_end_offset == M + 5
    assert pb.read(name(5, ".log")) == data
    assert not [f for f in pb.files() if f.startswith(name(0, ""))]


def test_no_overflow_at_the_last_batch_is_fatal(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d, interval=1)
    pb.write(name(100, ".log"), small(100) + small(50) + small(101))  # 50 < base: recovery overflows
    pb.write(name(100, ".index"), b"").write(name(100, ".timeindex"), b"")

    with pytest.raises(StartupFailedError) as ei:
        load(d, index_interval_bytes=1)
    assert ei.value.kafka_exception == "IllegalArgumentException"
    assert not [f for f in pb.files() if f.endswith(".cleaned")]


def test_torn_tail_is_fatal_and_cleaned_files_go(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d, interval=1)
    pb.write(name(0, ".log"), small(0) + small(M + 1) + b"\x00" * 10)
    pb.write(name(0, ".index"), b"").write(name(0, ".timeindex"), b"")

    with pytest.raises(StartupFailedError) as ei:
        load(d, index_interval_bytes=1)
    assert ei.value.kafka_exception == "NoSuchElementException"
    assert not [f for f in pb.files() if f.endswith((".cleaned", ".swap"))]
    assert pb.file(0, ".log").exists()


def test_non_increasing_chunk_offsets_are_fatal(tmp_path):
    # three 600 kB chunks with lastOffsets 0, 7, 3 (all fit base 0), then an overflow: with I = 0 the third
    # chunk's offset index append (3 after 7) raises InvalidOffsetException -- outside recoverLog's catch
    batches = [big(0, 600_000), big(7, 600_000), big(3, 600_000), small(M + 1)]
    pb = PartitionBuilder(tmp_path / "d")
    pb.segment(0, *batches, indexes=False)
    seg = Segment(str(pb.path), 0)

    with pytest.raises(StartupFailedError) as ei:
        split_overflowed_segment(RealDisk(), seg, cfg(index_interval_bytes=0), in_segment_map=True)
    assert ei.value.kafka_exception == "InvalidOffsetException"
    assert not [f for f in pb.files() if f.endswith((".cleaned", ".swap", ".deleted"))]
    assert pb.read(name(0, ".log")) == b"".join(batches)


def test_a_size_field_below_14_after_the_overflow_is_fatal(tmp_path):
    """hasOverflow's readNextOffset iterates to the end of the segment: an entry whose size field is
    below 14 there throws CorruptRecordException, which nothing catches."""
    corrupt = (0).to_bytes(8, "big") + (5).to_bytes(4, "big") + bytes(20)
    pb = PartitionBuilder(tmp_path / "d")
    pb.segment(0, small(0), small(M + 1), indexes=False)
    pb.write(name(0, ".log"), pb.read(name(0, ".log")) + corrupt)
    seg = Segment(str(pb.path), 0)

    with pytest.raises(StartupFailedError) as ei:
        has_overflow(RealDisk(), seg, cfg())
    assert ei.value.kafka_exception == "CorruptRecordException"
    assert f"at byte {len(small(0)) + len(small(M + 1))}" in str(ei.value)


def test_legacy_base_offset_comes_from_the_wrapper(tmp_path):
    from mploader.format import compression, legacy

    wrapper = legacy.build_wrapper([(M + 3, b"a", 10), (M + 4, b"b", 11)], codec=compression.GZIP)
    data = V1(0, b"x", 5) + V0(1, b"y") + wrapper
    pb = PartitionBuilder(tmp_path / "d")
    pb.segment(0, indexes=False)
    pb.write(name(0, ".log"), data)
    seg = Segment(str(pb.path), 0)

    new = split_overflowed_segment(RealDisk(), seg, cfg(), in_segment_map=True)

    assert [s.base_offset for s in new] == [0, M + 3]  # first inner offset, not the wrapper's M + 4
    assert pb.read(name(M + 3, ".log")) == wrapper
    assert pb.read(name(0, ".timeindex")) == ti_bytes(0, (5, 0))
    assert pb.read(name(M + 3, ".timeindex")) == ti_bytes(M + 3, (11, M + 4))


def test_replace_in_segment_map():
    segs = {0: Segment("d", 0), 100: Segment("d", 100), 500: Segment("d", 500)}
    old = segs[100]
    new = [Segment("d", 100), Segment("d", 50), Segment("d", 300)]  # bases out of file order
    assert replace_in_segment_map(segs, old, new, True) == []
    # the old base is not the lowest new base (50): Kafka removes base 100 -- the new segment there
    assert sorted(segs) == [0, 50, 300, 500]
    segs = {0: Segment("d", 0)}
    assert replace_in_segment_map(segs, Segment("d", 0), [Segment("d", 5)], True) == [0]
    assert sorted(segs) == [5]
    segs = {}
    assert replace_in_segment_map(segs, Segment("d", 0), [Segment("d", 5)], False) == []


def test_dry_run_changes_nothing_and_reports_the_same(tmp_path):
    from tests.kafkadir import tree_bytes
    from tests.scenarios.test_h_overflow import ovf

    d, pb = ovf(tmp_path / "a", clean=False)
    before = tree_bytes(d)
    dry = load(d, index_interval_bytes=1, dry_run=True)
    assert tree_bytes(d) == before
    real = load(d, index_interval_bytes=1)
    a, b = dry.logs[TP], real.logs[TP]
    assert [s.base_offset for s in a.segments] == [s.base_offset for s in b.segments] == [0, M, 2 * M + 1, 3 * M]
    assert a.log_end_offset == b.log_end_offset == 4 * M
    assert [s.size_bytes for s in a.segments] == [s.size_bytes for s in b.segments]


def test_two_new_segments_with_one_base_fail_like_kafkas_rename(tmp_path):
    # bases 0, M+5, 2M+20, then M+5 again: Kafka's second createNewCleanedSegment(M+5) deletes the first
    # one's .cleaned files, so replaceSegments' rename of that one fails (NoSuchFileException) and all go
    data = small(0) + small(M + 5) + small(2 * M + 20) + small(M + 5)
    pb = PartitionBuilder(tmp_path / "d")
    pb.segment(0, indexes=False)
    pb.write(name(0, ".log"), data)

    with pytest.raises(FileNotFoundError):
        split_overflowed_segment(RealDisk(), Segment(str(pb.path), 0), cfg(), in_segment_map=True)
    assert pb.files() == {name(0, ".log")}
    assert pb.read(name(0, ".log")) == data


def test_old_segment_in_the_map_loses_all_its_files(tmp_path):
    pb = PartitionBuilder(tmp_path / "d")
    pb.segment(0, indexes=False)
    data = small(0) + small(M + 1)
    pb.write(name(0, ".log"), data).write(name(0, ".index"), b"\0" * 80).write(name(0, ".txnindex"), b"")
    deleted: list[str] = []

    split_overflowed_segment(RealDisk(), Segment(str(pb.path), 0), cfg(), in_segment_map=True, deleted=deleted)

    assert pb.files() == {name(b, s) for b in (0, M + 1) for s in (".log", ".index", ".timeindex")}
    assert sorted(deleted) == [name(0, ".index"), name(0, ".log"), name(0, ".txnindex")]


def test_the_impact_reports_before_is_read_before_a_split_of_an_earlier_segment(tmp_path) -> None:
    """recoverLog waits with the impact report's "before" for the highest segment's recovery; an overflow split of an
    earlier segment comes first and changes .log files: here the split writes a segment with the highest one's base,
    whose .swap replaces its files (Kafka's replaceSegments).  The report says what the files held before it, and the
    offsets the split's replacement lost (a review found this)."""
    from mploader.recovery.impact import log_end_as_found

    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 0)])
    pb = PartitionBuilder(d, interval=1)
    pb.write(name(0, ".log"), small(0) + small(M + 1)).write(name(0, ".index"), b"").write(name(0, ".timeindex"), b"")
    pb.segment(M + 1, *(small(o) for o in range(M + 1, M + 21)))
    as_found = log_end_as_found(RealDisk(), str(pb.path))
    assert as_found == M + 21
    lg = load(d, index_interval_bytes=1).logs[TopicPartition("t", 0)]
    assert (lg.impact.log_end_offset_before, lg.impact.log_end_offset_after) == (as_found, M + 2)
    assert lg.impact.records_removed == 19
