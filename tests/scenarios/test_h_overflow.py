"""docs/scenarios.md section H: offset overflow and segment split (docs/loading.md §11, §6.1-6.2), scenarios 74-79.

OVF (LLT ``initializeLogDirWithOverflowedSegment``): v2 batches, ple 0, key = value = the offset as
decimal text, no timestamps (Kafka's ``SimpleRecord(key, value)``: NO_TIMESTAMP), ``I = 1``,
``file.delete.delay.ms = 1000``; M = 2^31 - 1.

SPEC NOTE: the LLT helper actually writes its third segment at 4M (``nextOffset += ...`` adds the
returned *next offset*); docs/scenarios.md places it at 3M (LEO 4M).  These tests follow docs/scenarios.md.
SPEC NOTE: docs/scenarios.md gives no timestamps for OVF; like Kafka's ``SimpleRecord(key, value)`` the batches
carry NO_TIMESTAMP (-1), so every time index stays empty and the split output's append-time indexes
are empty (one chunk per new segment, I = 1: no offset entry either).
"""

from __future__ import annotations

import struct

import pytest

from mploader import TopicPartition
from mploader.format import records
from tests.kafkadir import (
    INT64_MAX,
    OFFSET_INDEX_FULL,
    TIME_INDEX_FULL,
    PartitionBuilder,
    assert_file,
    batch_facts,
    data_dir,
    expected_indexes,
    load,
    name,
)

TP = TopicPartition("t", 0)
M = 2**31 - 1
CONFIG = dict(index_interval_bytes=1)
FINAL_BASES = [0, M, 2 * M + 1, 3 * M]


def ovf_batch(first: int, last: int | None = None) -> bytes:
    """``[first..last]``: one batch, records at offsets first..last, key = value = str(offset)."""
    last = first if last is None else last
    recs = [records.Record(o - first, 0, str(o).encode(), str(o).encode()) for o in range(first, last + 1)]
    return records.build_batch(first, recs, partition_leader_epoch=0, base_timestamp=-1, max_timestamp=-1)


def sample_batches(base: int) -> list[bytes]:
    """``[b]``, ``[b+1, b+2]``, ``[b+M-1]`` (Kafka's writeSampleBatches)."""
    return [ovf_batch(base), ovf_batch(base + 1, base + 2), ovf_batch(base + M - 1)]


# the segment contents: OVF before the split, and the two halves of S(M) after it
S0 = sample_batches(0)
SM_OLD = sample_batches(M) + sample_batches(2 * M)  # [M] [M+1,M+2] [2M-1] [2M] [2M+1,2M+2] [3M-1]
S3M = sample_batches(3 * M)
SM_NEW = SM_OLD[:4]  # [M] [M+1,M+2] [2M-1] [2M]
S2M1_NEW = SM_OLD[4:]  # [2M+1,2M+2] [3M-1]
ALL_OFFSETS = [o for b in (0, M, 2 * M, 3 * M) for o in (b, b + 1, b + 2, b + M - 1)]


def write_log(pb: PartitionBuilder, filename: str, batches: list[bytes]) -> None:
    pb.write(filename, b"".join(batches))


def write_segment_0_byte_indexes(pb: PartitionBuilder, base: int, batches: list[bytes],
                                 suffix: str = "") -> None:
    """``.log`` plus 0-byte ``.index``/``.timeindex`` (created explicitly so no load-phase recovery runs)."""
    write_log(pb, name(base, ".log" + suffix), batches)
    pb.write(name(base, ".index" + suffix), b"")
    pb.write(name(base, ".timeindex" + suffix), b"")


def ovf(tmp_path, *, clean: bool, rp=None, old_m: bool = True, orphans: bool = True):
    d = data_dir(tmp_path, clean=clean, rp=rp)
    pb = PartitionBuilder(d, interval=1)
    write_segment_0_byte_indexes(pb, 0, S0)
    if old_m:
        write_segment_0_byte_indexes(pb, M, SM_OLD)
    if orphans:
        pb.write(name(2 * M, ".index"), b"")
        pb.write(name(2 * M, ".timeindex"), b"")
    write_segment_0_byte_indexes(pb, 3 * M, S3M)
    pb.epochs((0, 0))
    check_ovf_data()
    return d, pb


def check_ovf_data() -> None:
    """The data is as docs/scenarios.md H states (checked by hand, not by mploader)."""
    # S(M)'s fifth batch is the first whose lastOffset - M exceeds 2^31 - 1
    lasts = [f.last_offset for f in batch_facts(b"".join(SM_OLD))]
    assert lasts == [M, M + 2, 2 * M - 1, 2 * M, 2 * M + 2, 3 * M - 1]
    assert [last - M <= M for last in lasts] == [True, True, True, True, False, False]
    assert [f.last_offset - (2 * M + 1) for f in batch_facts(b"".join(S2M1_NEW))] == [1, M - 2]
    assert [f.last_offset for f in batch_facts(b"".join(S0))] == [0, 2, M - 1]
    assert [f.last_offset for f in batch_facts(b"".join(S3M))] == [3 * M, 3 * M + 2, 4 * M - 1]
    assert [f.max_timestamp for f in batch_facts(b"".join(S0 + SM_OLD + S3M))] == [-1] * 12
    assert struct.unpack_from(">q", SM_OLD[4], 0)[0] == 2 * M + 1  # baseOffset of [2M+1, 2M+2]
    assert [len(b) for b in S0] == [70, 79, 88]  # 61 + records of 7 + 2 * len(str(offset)) bytes


def segment_files(pb: PartitionBuilder) -> set[str]:
    """Live segment-family files (no snapshots, no checkpoint, no ``*.deleted``)."""
    return {f for f in pb.files()
            if not f.endswith((".snapshot", ".deleted")) and f != "leader-epoch-checkpoint"}


def decoded_keys(pb: PartitionBuilder, base: int) -> list[tuple[int, bytes, bytes]]:
    data = pb.read(name(base, ".log"))
    out = []
    for f in batch_facts(data):
        recs = records.decode_records(data, f.position)
        first = records.read_batch_header(data, f.position).base_offset
        out += [(first + r.offset_delta, r.key, r.value) for r in recs]
    return out


def assert_split_result(pb: PartitionBuilder, log, *, allow_deleted_m: bool) -> None:
    """The outcome of scenario 75, shared by 76-79."""
    assert [s.base_offset for s in log.segments] == FINAL_BASES  # one more segment than before
    assert log.log_end_offset == 4 * M
    assert pb.read(name(0, ".log")) == b"".join(S0)
    assert pb.read(name(M, ".log")) == b"".join(SM_NEW)
    assert pb.read(name(2 * M + 1, ".log")) == b"".join(S2M1_NEW)
    assert pb.read(name(3 * M, ".log")) == b"".join(S3M)
    # every record key preserved, key = value = offset; no batch overflows its segment
    keys = []
    for base in FINAL_BASES:
        for off, k, v in decoded_keys(pb, base):
            assert k == v == str(off).encode()
            keys.append(off)
        for f in batch_facts(pb.read(name(base, ".log"))):
            assert 0 <= f.last_offset - base <= M
    assert keys == ALL_OFFSETS
    # no temp files left; the old S(M) files may still be pending as *.deleted only where the split
    # itself renamed them (mploader deletes at once; Kafka after file.delete.delay.ms)
    assert segment_files(pb) == {name(b, s) for b in FINAL_BASES for s in (".log", ".index", ".timeindex")}
    assert not {f for f in pb.files() if f.endswith((".cleaned", ".swap"))}
    pending = {f for f in pb.files() if f.endswith(".deleted") and not f.endswith(".snapshot.deleted")}
    allowed = {name(M, s) for s in (".log.deleted", ".index.deleted", ".timeindex.deleted")}
    if not allow_deleted_m:
        allowed = set()
    assert pending <= allowed, pending
    # unclean, RP absent: every segment (re-)recovered by recoverLog => §7.1 indexes (I = 1, no timestamps)
    for base, batches in ((0, S0), (M, SM_NEW), (2 * M + 1, S2M1_NEW)):
        oi, ti = expected_indexes(base, b"".join(batches), 1)
        assert len(oi) == 8 * (len(batches) - 1) and ti == b""
        assert pb.read(name(base, ".index")) == oi, base
        assert pb.read(name(base, ".timeindex")) == ti, base
    oi, _ = expected_indexes(3 * M, b"".join(S3M), 1)
    assert_file(pb.file(3 * M, ".index"), oi, OFFSET_INDEX_FULL)
    assert_file(pb.file(3 * M, ".timeindex"), b"", TIME_INDEX_FULL)
    assert log.recovered_segments == FINAL_BASES
    assert log.truncated_bytes == 0


# ------------------------------------------------------------------------------------------------
# 74. Overflowed segment is loaded as is when not recovered (LLT createLogWithOffsetOverflow)


def test_s74_overflowed_segment_loaded_as_is_when_not_recovered(tmp_path):
    d, pb = ovf(tmp_path, clean=True, rp=[("t", 0, INT64_MAX)])

    result = load(d, **CONFIG)

    assert not pb.file(2 * M, ".index").exists()  # orphans deleted
    assert not pb.file(2 * M, ".timeindex").exists()
    log = result.logs[TP]
    assert [s.base_offset for s in log.segments] == [0, M, 3 * M]  # no split
    assert pb.read(name(M, ".log")) == b"".join(SM_OLD)
    assert segment_files(pb) == {name(b, s) for b in (0, M, 3 * M) for s in (".log", ".index", ".timeindex")}
    assert pb.read(name(0, ".index")) == b"" and pb.read(name(M, ".index")) == b""  # not recovered
    assert log.log_end_offset == 4 * M
    assert log.recovered_segments == []


# ------------------------------------------------------------------------------------------------
# 75. Recovery splits the overflowed segment (LLT testRecoveryOfSegmentWithOffsetOverflow)


def test_s75_recovery_splits_overflowed_segment(tmp_path):
    d, pb = ovf(tmp_path, clean=False)

    result = load(d, **CONFIG)

    assert not pb.file(2 * M, ".index").exists()
    # recoverLog ran twice: 0 and M recovered before and again after the split (reported once each)
    assert_split_result(pb, result.logs[TP], allow_deleted_m=True)


# ------------------------------------------------------------------------------------------------
# 76. Crash during split, before any .swap (LLT testRecoveryAfterCrashDuringSplitPhase1)
# SPEC NOTE: 76-79 start from the OVF directory *after* a first load (LLT createLogWithOffsetOverflow),
# so the orphan (2M).index/.timeindex are already gone.


def test_s76_crash_during_split_before_any_swap(tmp_path):
    d, pb = ovf(tmp_path, clean=False, orphans=False)  # old S(M) files back under their normal names
    for base in (M, 2 * M + 1):  # new segments only as *.cleaned, truncated to 0 bytes
        for sfx in (".log.cleaned", ".index.cleaned", ".timeindex.cleaned"):
            pb.write(name(base, sfx), b"")

    result = load(d, **CONFIG)

    assert_split_result(pb, result.logs[TP], allow_deleted_m=True)


# ------------------------------------------------------------------------------------------------
# 77. Crash with only the highest new segment renamed to .swap (LLT ...Phase2)


def test_s77_crash_with_highest_new_segment_swapped(tmp_path):
    d, pb = ovf(tmp_path, clean=False, orphans=False)
    for sfx in (".log.cleaned", ".index.cleaned", ".timeindex.cleaned"):
        pb.write(name(M, sfx), b"")
    # 0-byte swap files of the higher new segment: offset >= minCleaned M => deleted
    for sfx in (".log.swap", ".index.swap", ".timeindex.swap"):
        pb.write(name(2 * M + 1, sfx), b"")

    result = load(d, **CONFIG)

    assert_split_result(pb, result.logs[TP], allow_deleted_m=True)


# ------------------------------------------------------------------------------------------------
# 78. Crash after all new segments were renamed to .swap (LLT ...Phase3, ...Phase4)


@pytest.mark.parametrize("phase", [3, 4])
def test_s78_crash_after_all_new_segments_swapped(tmp_path, phase):
    d, pb = ovf(tmp_path, clean=False, old_m=(phase == 3), orphans=False)
    if phase == 3:  # the old …M.log present but truncated to 0 bytes
        # SPEC NOTE: the old .index/.timeindex are left 0-byte (LLT's truncateTo(0) would leave them
        # at full size); they are deleted either way (offset M in [minSwap, maxSwap)).
        pb.write(name(M, ".log"), b"")
    # complete swap files; split output has append-time indexes: one chunk per new segment => no
    # offset entry, and no time entry (no timestamps) => 0-byte trimmed indexes
    write_segment_0_byte_indexes(pb, M, SM_NEW, ".swap")
    write_segment_0_byte_indexes(pb, 2 * M + 1, S2M1_NEW, ".swap")
    s3m_log = pb.read(name(3 * M, ".log"))

    result = load(d, **CONFIG)

    # minSwap = M, maxSwap = 3M: old S(M) deleted, swaps renamed, S(3M) outside the range and kept
    assert pb.read(name(3 * M, ".log")) == s3m_log
    assert_split_result(pb, result.logs[TP], allow_deleted_m=False)


# ------------------------------------------------------------------------------------------------
# 79. Crash with the lower new segment finished and the higher one still .swap (LLT ...Phase5)


def test_s79_crash_with_lower_done_and_higher_swapped(tmp_path):
    d, pb = ovf(tmp_path, clean=False, old_m=False, orphans=False)
    write_segment_0_byte_indexes(pb, M, SM_NEW)  # new S(M) under normal names
    write_segment_0_byte_indexes(pb, 2 * M + 1, S2M1_NEW, ".swap")
    for sfx in (".log.deleted", ".index.deleted", ".timeindex.deleted"):  # old S(M), truncated
        pb.write(name(M, sfx), b"")

    result = load(d, **CONFIG)

    for sfx in (".log.deleted", ".index.deleted", ".timeindex.deleted"):
        assert not pb.file(M, sfx).exists()  # removed first (docs/loading.md §6.1), not merely pending
    assert_split_result(pb, result.logs[TP], allow_deleted_m=False)
