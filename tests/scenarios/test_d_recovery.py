"""docs/scenarios.md section D: recovery of unflushed segments (docs/loading.md §6.6-6.8, docs/loading.md §7),
scenarios 26-45."""

from __future__ import annotations

import os
import struct

import pytest

from mploader import DirKind, StartupFailedError, TopicPartition
from tests.kafkadir import (
    INT64_MAX,
    OFFSET_INDEX_FULL,
    T0,
    TIME_INDEX_FULL,
    B,
    PartitionBuilder,
    append_bytes,
    assert_file,
    assert_gone,
    assert_segment_gone,
    data_dir,
    empty_snapshot,
    expected_indexes,
    flip_bit,
    load,
    name,
    oi_bytes,
    overwrite_bytes,
    snapshot_offsets,
    std3_batches,
    ti_bytes,
)

TP = TopicPartition("t", 0)
UUID = "0123456789abcdef0123456789abcdef"
EPOCHS_00 = b"0\n1\n0 0\n"
EPOCHS_EMPTY = b"0\n0\n"


def std3(d, dirname=None) -> PartitionBuilder:
    pb = PartitionBuilder(d, dirname=dirname).std3()
    for base in (0, 10, 20):
        assert len(pb.read(name(base, ".log"))) == 720
    assert pb.read("leader-epoch-checkpoint") == EPOCHS_00
    for off in (10, 20, 30):
        assert pb.read(name(off, ".snapshot")) == empty_snapshot()
    return pb


def files_of(pb, bases, suffixes=(".log", ".index", ".timeindex")) -> dict[str, bytes]:
    return {name(b, s): pb.read(name(b, s)) for b in bases for s in suffixes}


def assert_unchanged(pb, before: dict[str, bytes]) -> None:
    for f, data in before.items():
        assert pb.read(f) == data, f"{f} changed"


# ------------------------------------------------------------------------------------------------
# 26. Clean shutdown never recovers, even with RP 0


def test_s26_clean_shutdown_never_recovers(tmp_path):
    d = data_dir(tmp_path, clean=True)  # RP absent
    pb = std3(d)
    before = files_of(pb, (0, 10)) | {name(20, ".log"): pb.read(name(20, ".log"))}

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == []
    assert log.truncated_bytes == 0
    assert_unchanged(pb, before)
    assert log.log_end_offset == 30
    assert log.loader_recovery_point == 30
    assert log.recovery_point == 30


# ------------------------------------------------------------------------------------------------
# 27/28. 25 segments of 4 batches of 170 bytes, I = 300, X = 4096


def big_batch(o: int) -> bytes:
    return B(o, ts=T0 + 10 * o, value=b"x" * 100)


def s27_partition(d) -> PartitionBuilder:
    pb = PartitionBuilder(d, interval=300)
    for k in range(25):
        base = 4 * k
        pb.segment(base, *(big_batch(o) for o in range(base, base + 4)))
    assert len(big_batch(0)) == 170
    assert len(pb.read(name(96, ".log"))) == 680
    oi, ti = expected_indexes(96, pb.segments[96], 300)
    assert oi == oi_bytes(96, (98, 340))
    assert ti == ti_bytes(96, (T0 + 980, 98), (T0 + 990, 99))
    return pb


def test_s27_unclean_rp_at_leo_recovers_only_active_segment(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 100)])
    pb = s27_partition(d)
    before = files_of(pb, range(0, 96, 4)) | {name(96, ".log"): pb.read(name(96, ".log"))}

    result = load(d, index_interval_bytes=300, max_index_size=4096)

    log = result.logs[TP]
    assert log.recovered_segments == [96]
    assert log.truncated_bytes == 0
    assert_unchanged(pb, before)
    assert_file(pb.file(96, ".index"), oi_bytes(96, (98, 340)), 4096)
    assert_file(pb.file(96, ".timeindex"), ti_bytes(96, (T0 + 980, 98), (T0 + 990, 99)), 4092)
    assert log.log_end_offset == 100
    assert log.loader_recovery_point == 100
    assert len(log.segments) == 25


def test_s28_unclean_rp_inside_segment_recovers_from_floor(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 10)])
    pb = s27_partition(d)
    before = files_of(pb, (0, 4))
    logs_before = {b: pb.read(name(b, ".log")) for b in range(0, 100, 4)}

    result = load(d, index_interval_bytes=300, max_index_size=4096)

    log = result.logs[TP]
    assert log.recovered_segments == list(range(8, 100, 4))
    assert len(log.recovered_segments) == 23
    assert log.truncated_bytes == 0
    assert_unchanged(pb, before)
    for b in range(0, 100, 4):
        assert pb.read(name(b, ".log")) == logs_before[b]
    for b in range(8, 96, 4):
        oi, ti = expected_indexes(b, pb.segments[b], 300)
        assert pb.read(name(b, ".index")) == oi
        assert pb.read(name(b, ".timeindex")) == ti
    oi, ti = expected_indexes(96, pb.segments[96], 300)
    assert_file(pb.file(96, ".index"), oi, 4096)
    assert_file(pb.file(96, ".timeindex"), ti, 4092)
    assert log.log_end_offset == 100
    assert log.loader_recovery_point == 10
    assert log.recovery_point == 10


# ------------------------------------------------------------------------------------------------
# 29. RP = Long.MAX_VALUE => nothing recovered


def test_s29_rp_long_max_recovers_nothing(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, INT64_MAX)])
    pb = std3(d)
    append_bytes(pb.file(20, ".log"), b"\x7f" * 30)
    assert pb.file(20, ".log").stat().st_size == 750

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == []
    assert pb.file(20, ".log").stat().st_size == 750  # the garbage stays
    assert log.log_end_offset == 30  # size field 0x7F7F7F7F > remaining bytes: the LEO scan stops
    assert log.loader_recovery_point == 30  # min(MAX, 30)
    assert log.recovery_point == 30


def test_s29_variant_rp_long_max_negative_size_field_is_fatal(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, INT64_MAX)])
    pb = std3(d)
    append_bytes(pb.file(20, ".log"), b"\xff" * 30)

    with pytest.raises(StartupFailedError) as ei:  # CorruptRecord from the LEO scan is not caught
        load(d)
    assert "CorruptRecord" in ei.value.kafka_exception


# ------------------------------------------------------------------------------------------------
# 30. RP beyond LEO


def test_s30_rp_beyond_leo(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 1000)])
    std3(d)

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == [20]
    assert log.loader_recovery_point == 30
    assert log.recovery_point == 30
    assert log.log_end_offset == 30


# ------------------------------------------------------------------------------------------------
# 31. Garbage appended to the active segment is truncated


def test_s31_garbage_appended_to_active_segment_truncated(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 50)])
    pb = PartitionBuilder(d, interval=1)
    pb.segment(0, *(B(o) for o in range(0, 13)))
    pb.segment(13, *(B(o) for o in range(13, 26)))
    pb.segment(26, *(B(o) for o in range(26, 38)))
    assert [len(pb.segments[b]) for b in (0, 13, 26)] == [936, 936, 864]
    oi26, ti26 = expected_indexes(26, pb.segments[26], 1)
    assert len(oi26) == 88 and pb.read(name(26, ".index")) == oi26
    append_bytes(pb.file(26, ".log"), b"\xff" * 100)
    append_bytes(pb.file(26, ".index"), b"\xff" * 37)
    before = files_of(pb, (0, 13))

    result = load(d, index_interval_bytes=1)

    log = result.logs[TP]
    assert log.recovered_segments == [26]
    assert log.truncated_bytes == 100  # size field -1 < 14 => CorruptRecord at position 864
    assert pb.read(name(26, ".log")) == pb.segments[26]
    assert_file(pb.file(26, ".index"), oi26, OFFSET_INDEX_FULL)
    assert_file(pb.file(26, ".timeindex"), ti26, TIME_INDEX_FULL)
    assert_unchanged(pb, before)
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(0, 936), (13, 936), (26, 864)]
    assert log.log_end_offset == 38


# ------------------------------------------------------------------------------------------------
# 32/33. CRC corruption in a middle segment


def crc_corrupt_std3(tmp_path) -> tuple[os.PathLike, PartitionBuilder]:
    d = data_dir(tmp_path, clean=False)  # RP absent
    pb = std3(d)
    flip_bit(pb.file(10, ".log"), 360 + 65)  # inside batch B(15)'s record
    assert pb.read(name(10, ".log"))[:360] == std3_batches(10)[:360]
    assert pb.read(name(10, ".log")) != std3_batches(10)
    return d, pb


def test_s32_crc_corruption_middle_segment_deletes_later(tmp_path):
    d, pb = crc_corrupt_std3(tmp_path)
    before0 = files_of(pb, (0,))

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == [0, 10]
    assert log.truncated_bytes == 360
    assert_unchanged(pb, before0)  # S(0) recovered, unchanged
    assert pb.read(name(10, ".log")) == std3_batches(10)[:360]  # batches 10..14 kept
    assert_segment_gone(pb.path, 20)
    # S(10) is now the active segment: rebuilt (no offset entries with I=4096) and resized
    assert_file(pb.file(10, ".index"), b"", OFFSET_INDEX_FULL)
    assert_file(pb.file(10, ".timeindex"), ti_bytes(10, (T0 + 14, 14)), TIME_INDEX_FULL)
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(0, 720), (10, 360)]
    assert log.log_end_offset == 15
    assert log.loader_recovery_point == 0
    assert log.recovery_point == 0
    assert log.leader_epochs == [(0, 0)]
    assert pb.read("leader-epoch-checkpoint") == EPOCHS_00
    assert snapshot_offsets(pb.path) == {10, 15}
    assert pb.read(name(10, ".snapshot")) == empty_snapshot()
    assert pb.read(name(15, ".snapshot")) == empty_snapshot()
    assert_gone(pb.path, name(20, ".snapshot"))
    assert_gone(pb.path, name(30, ".snapshot"))


def test_s33_crc_corruption_without_index_leaves_a_hole(tmp_path):
    d, pb = crc_corrupt_std3(tmp_path)
    os.remove(pb.file(10, ".index"))
    log20 = pb.read(name(20, ".log"))

    result = load(d)

    log = result.logs[TP]
    # Kafka recovers S(10) twice (load phase, then recoverLog); mploader reports it once.
    # SPEC NOTE: the position of 10 in recovered_segments (first or second recovery) is not pinned down.
    assert sorted(log.recovered_segments) == [0, 10, 20]
    assert pb.read(name(10, ".log")) == std3_batches(10)[:360]
    assert pb.read(name(20, ".log")) == log20  # kept (and recovered): offsets 15..19 are missing
    assert pb.read(name(10, ".index")) == b""  # rebuilt and trimmed (not active)
    assert pb.read(name(10, ".timeindex")) == ti_bytes(10, (T0 + 14, 14))
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(0, 720), (10, 360), (20, 720)]
    assert log.log_end_offset == 30
    assert log.loader_recovery_point == 0
    assert log.leader_epochs == [(0, 0)]
    assert snapshot_offsets(pb.path) == {10, 20, 30}
    for n in (10, 20, 30):
        assert pb.read(name(n, ".snapshot")) == empty_snapshot()


# ------------------------------------------------------------------------------------------------
# 34-38. Where iteration stops


def five_batches(tmp_path) -> tuple[os.PathLike, PartitionBuilder]:
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d)
    pb.segment(0, *(B(o) for o in range(5)))
    assert len(pb.segments[0]) == 360
    return d, pb


def test_s34_size_field_below_14_mid_segment(tmp_path):
    d, pb = five_batches(tmp_path)
    overwrite_bytes(pb.file(0, ".log"), 216 + 8, b"\x00\x00\x00\x05")

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == [0]
    assert log.truncated_bytes == 144
    assert pb.read(name(0, ".log")) == B(0) + B(1) + B(2)
    assert log.log_end_offset == 3


@pytest.mark.parametrize("partial", [40, 10])
def test_s35_partial_trailing_batch(tmp_path, partial):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d)
    pb.segment(0, B(0), B(1), B(2))
    append_bytes(pb.file(0, ".log"), B(3)[:partial])
    assert pb.file(0, ".log").stat().st_size == 216 + partial

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == [0]
    assert log.truncated_bytes == partial
    assert pb.read(name(0, ".log")) == B(0) + B(1) + B(2)
    assert log.log_end_offset == 3


def test_s36_v2_batch_shorter_than_header(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d)
    pb.segment(0, B(0))
    entry = struct.pack(">qii", 1, 30, 0) + b"\x02" + b"\xab" * 25
    assert len(entry) == 42
    append_bytes(pb.file(0, ".log"), entry)

    result = load(d)

    log = result.logs[TP]
    assert log.truncated_bytes == 42
    assert pb.read(name(0, ".log")) == B(0)
    assert log.log_end_offset == 1


def test_s37_partition_leader_epoch_outside_crc_is_trusted(tmp_path):
    d, pb = five_batches(tmp_path)
    pb.epochs((0, 0))
    overwrite_bytes(pb.file(0, ".log"), 216 + 12, struct.pack(">i", 7))
    data = pb.read(name(0, ".log"))

    result = load(d)

    log = result.logs[TP]
    assert log.truncated_bytes == 0
    assert pb.read(name(0, ".log")) == data
    assert log.leader_epochs == [(0, 0), (7, 3)]
    assert pb.read("leader-epoch-checkpoint") == b"0\n2\n0 0\n7 3\n"
    assert log.log_end_offset == 5


def test_s37_variant_attributes_inside_crc_checked(tmp_path):
    d, pb = five_batches(tmp_path)
    pb.epochs((0, 0))
    flip_bit(pb.file(0, ".log"), 216 + 22)

    result = load(d)

    log = result.logs[TP]
    assert log.truncated_bytes == 144
    assert pb.read(name(0, ".log")) == B(0) + B(1) + B(2)
    assert log.leader_epochs == [(0, 0)]
    assert pb.read("leader-epoch-checkpoint") == EPOCHS_00
    assert log.log_end_offset == 3


def test_s38_preallocated_log_with_zero_tail(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d)
    pb.segment(0, B(0), B(1), B(2))
    append_bytes(pb.file(0, ".log"), bytes(1048576 - 216))
    assert pb.file(0, ".log").stat().st_size == 1048576

    result = load(d, preallocate=True, segment_bytes=1048576)

    log = result.logs[TP]
    assert log.recovered_segments == [0]
    assert log.truncated_bytes == 1048576 - 216
    assert pb.read(name(0, ".log")) == B(0) + B(1) + B(2)
    assert log.log_end_offset == 3


# ------------------------------------------------------------------------------------------------
# 39/40. Non-monotonic offsets => InvalidOffsetException


def dup_offsets(tmp_path) -> tuple[os.PathLike, PartitionBuilder]:
    d = data_dir(tmp_path, clean=False)  # RP absent
    pb = PartitionBuilder(d, interval=1)
    pb.segment(0, B(0), B(1), B(1), B(2))
    pb.segment(3, B(3))
    pb.write("leader-epoch-checkpoint", b"")
    assert len(pb.segments[0]) == 288
    return d, pb


def test_s39_non_monotonic_offsets_empty_segment_delete_later(tmp_path):
    d, pb = dup_offsets(tmp_path)

    result = load(d, index_interval_bytes=1)

    log = result.logs[TP]
    # SPEC NOTE: S(0)'s recovery attempt (which raised InvalidOffsetException) is counted as recovered
    assert log.recovered_segments[0] == 0 and 3 not in log.recovered_segments
    assert log.truncated_bytes == 288
    assert pb.read(name(0, ".log")) == b""  # truncated to its base offset
    # indexes reset to 0 entries and left at full size (the bytes of stale slots are not specified here)
    assert pb.file(0, ".index").stat().st_size == OFFSET_INDEX_FULL
    assert pb.file(0, ".timeindex").stat().st_size == TIME_INDEX_FULL
    assert_segment_gone(pb.path, 3)
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(0, 0)]
    assert log.log_end_offset == 0
    assert log.loader_recovery_point == 0
    assert log.leader_epochs == []  # (0,0) assigned in the failed pass, removed by truncateFromEnd(0)
    assert pb.read("leader-epoch-checkpoint") == EPOCHS_EMPTY
    assert snapshot_offsets(pb.path) == set()


def test_s39_index_bytes_after_failed_pass_keep_stale_slots(tmp_path):
    # SPEC NOTE: docs/scenarios.md #39 only says "reset to 0 entries and left at full size".
    # docs/formats.md §10 / Kafka's AbstractIndex imply the exact bytes: reset() = truncate (entries := 0, nothing
    # zeroed) + resize(max) (setLength keeps existing bytes); the failed pass rewrites slot 0 only; truncateTo(0)
    # zeroes nothing; the segment is never trimmed (it stays active). So every pre-existing slot survives on disk.
    d, pb = dup_offsets(tmp_path)
    oi_before, ti_before = pb.read(name(0, ".index")), pb.read(name(0, ".timeindex"))
    assert oi_before == oi_bytes(0, (1, 72), (1, 144), (2, 216))
    assert ti_before == ti_bytes(0, (T0 + 1, 1), (T0 + 2, 2))

    load(d, index_interval_bytes=1)

    # slot 0 is rewritten with (1, 72) / (T0+1, 1) -- identical to the old slot 0
    assert_file(pb.file(0, ".index"), oi_before, OFFSET_INDEX_FULL)
    assert_file(pb.file(0, ".timeindex"), ti_before, TIME_INDEX_FULL)


def test_s40_non_monotonic_offsets_without_index_is_fatal(tmp_path):
    d, pb = dup_offsets(tmp_path)
    os.remove(pb.file(0, ".index"))

    with pytest.raises(StartupFailedError) as ei:  # InvalidOffsetException in the load phase: not caught
        load(d, index_interval_bytes=1)
    assert ei.value.kafka_exception == "InvalidOffsetException"
    # LeaderEpochFileCache.assign wrote the epoch met before the failure (as Kafka's own loader leaves it)
    assert pb.read("leader-epoch-checkpoint") == b"0\n1\n0 0\n"


# ------------------------------------------------------------------------------------------------
# 41. Index too small for the recovered data


def test_s41_index_too_small_is_fatal(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d, interval=0)
    pb.segment(0, B(0), B(1), B(2))

    with pytest.raises(StartupFailedError) as ei:  # time index full at batch 2 => IllegalArgument
        load(d, max_index_size=24, index_interval_bytes=0)
    assert ei.value.kafka_exception == "IllegalArgumentException"
    # the files as Kafka's recover() leaves them when the append throws (checked against Kafka's own loader,
    # perf/files_vs_kafka.py): the reset offset index at full size with the entries of batches 1 and 2 (batch
    # 0 starts at byte 0: no entry), and the epoch of batch 0, which LeaderEpochFileCache.assign wrote at once
    index = pb.read(name(0, ".index"))
    assert len(index) == 24 and [struct.unpack_from(">i", index, 8 * k)[0] for k in range(2)] == [1, 2]
    assert pb.read("leader-epoch-checkpoint") == b"0\n1\n0 0\n"


# ------------------------------------------------------------------------------------------------
# 42. Log end below the log start after truncation


def test_s42_log_end_below_log_start_after_truncation(tmp_path):
    d = data_dir(tmp_path, clean=False, lso=[("t", 0, 4)])  # RP absent
    pb = PartitionBuilder(d)
    for k in range(9):
        pb.segment(k, B(k))
    pb.segment(9)  # empty active segment, index files present (0 bytes)
    assert pb.read(name(9, ".index")) == b"" and pb.read(name(9, ".timeindex")) == b""
    for k in range(1, 10):
        pb.snapshot(k)
    pb.epochs((0, 0))
    pb.write(name(1, ".log"), b"corruptRecord")
    assert len(pb.read(name(1, ".log"))) == 13

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == [0, 1]
    for k in (0, 1, 2, 3, 5, 6, 7, 8, 9):
        assert_segment_gone(pb.path, k)
    # the old 04 files were moved away before the new 04 segment was created: the new files are intact
    assert pb.read(name(4, ".log")) == b""
    assert_file(pb.file(4, ".index"), b"", OFFSET_INDEX_FULL)
    assert_file(pb.file(4, ".timeindex"), b"", TIME_INDEX_FULL)
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(4, 0)]
    assert log.log_end_offset == 4
    assert log.log_start_offset == 4
    assert log.loader_recovery_point == 0
    assert log.recovery_point == 4
    assert log.leader_epochs == []
    assert pb.read("leader-epoch-checkpoint") == EPOCHS_EMPTY
    assert snapshot_offsets(pb.path) == set()


# ------------------------------------------------------------------------------------------------
# 43. Empty partition directory


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_s43_empty_partition_directory(tmp_path, clean):
    d = data_dir(tmp_path, clean=clean, lso=[("t", 0, 7)])  # RP absent
    pdir = d / "t-0"
    pdir.mkdir()

    result = load(d)

    assert (pdir / name(7, ".log")).read_bytes() == b""
    assert_file(pdir / name(7, ".index"), b"", OFFSET_INDEX_FULL)
    assert_file(pdir / name(7, ".timeindex"), b"", TIME_INDEX_FULL)
    assert (pdir / "leader-epoch-checkpoint").read_bytes() == b""
    log = result.logs[TP]
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(7, 0)]
    assert log.log_end_offset == 7
    assert log.log_start_offset == 7
    assert log.loader_recovery_point == 0  # min(0, 7)
    assert log.recovery_point == 7
    if clean:  # no snapshot files + clean => shortcut branch writes an empty snapshot at 7
        assert snapshot_offsets(pdir) == {7}
        assert (pdir / name(7, ".snapshot")).read_bytes() == empty_snapshot()
    else:  # truncate-and-reload sets the last snapshot offset to 7 => nothing written
        assert snapshot_offsets(pdir) == set()


# ------------------------------------------------------------------------------------------------
# 44. Log-start checkpoint beyond the log end, clean shutdown


def test_s44_log_start_beyond_log_end_clean(tmp_path):
    d = data_dir(tmp_path, clean=True, lso=[("t", 0, 50)])
    pb = std3(d)

    result = load(d)

    log = result.logs[TP]
    for b in (0, 10, 20):
        assert_segment_gone(pb.path, b)
    assert pb.read(name(50, ".log")) == b""
    assert_file(pb.file(50, ".index"), b"", OFFSET_INDEX_FULL)
    assert_file(pb.file(50, ".timeindex"), b"", TIME_INDEX_FULL)
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(50, 0)]
    assert log.recovered_segments == []
    assert log.log_end_offset == 50
    assert log.log_start_offset == 50
    assert log.loader_recovery_point == 0  # min(0, 50)
    assert log.recovery_point == 50
    assert log.leader_epochs == []
    assert pb.read("leader-epoch-checkpoint") == EPOCHS_EMPTY
    assert snapshot_offsets(pb.path) == {50}
    assert pb.read(name(50, ".snapshot")) == empty_snapshot()


# ------------------------------------------------------------------------------------------------
# 45. `-delete` directory: no recovery


DELETE_DIR = f"t-0.{UUID}-delete"


def test_s45_delete_directory_not_recovered(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = std3(d, dirname=DELETE_DIR)
    append_bytes(pb.file(20, ".log"), b"\xff" * 30)
    before = files_of(pb, (0, 10, 20))

    result = load(d)

    assert TP not in result.logs
    assert len(result.logs_to_delete) == 1
    log = result.logs_to_delete[0]
    assert log.topic_partition == TP
    assert log.kind is DirKind.DELETE
    assert log.recovered_segments == []
    assert log.log_end_offset == 0
    assert log.loader_recovery_point == 0
    assert log.recovery_point == 0
    assert log.leader_epochs == []
    # SPEC NOTE: Kafka deletes a -delete directory only after file.delete.delay.ms; if mploader removed
    # it already, there is nothing left to inspect.
    if pb.path.exists():
        assert_unchanged(pb, before)  # garbage kept (750 bytes), indexes not resized
        assert pb.file(20, ".log").stat().st_size == 750
        assert pb.read("leader-epoch-checkpoint") == EPOCHS_EMPTY
        assert snapshot_offsets(pb.path) == set()  # truncate-and-reload to offset 0


def test_s45_variant_empty_delete_directory(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pdir = d / DELETE_DIR
    pdir.mkdir()

    result = load(d)

    assert TP not in result.logs
    assert len(result.logs_to_delete) == 1
    log = result.logs_to_delete[0]
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(0, 0)]
    assert log.log_end_offset == 0
    if pdir.exists():
        assert (pdir / name(0, ".log")).read_bytes() == b""
        # indexes are lazy and -delete dirs are not resized (docs/loading.md §6.10, docs/formats.md §10): no index files
        assert not (pdir / name(0, ".index")).exists()
        assert not (pdir / name(0, ".timeindex")).exists()
        assert snapshot_offsets(pdir) == set()
