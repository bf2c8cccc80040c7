"""docs/scenarios.md section G: producer state, transaction index, snapshots
(docs/loading.md §6.13-6.14, §7.2, §8), scenarios 59-73.

Expected snapshot contents come from a small test-side model of the producer state a broker holds
after a prefix of the log (docs/formats.md §12 field rules, docs/loading.md §8.1-8.2), not from mploader.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pytest
from crc32c import crc32c

from mploader import ProducerInfo, TopicPartition
from mploader.format import records
from mploader.format.snapshot import ProducerSnapshotEntry, java_hashmap_order, read_snapshot, snapshot_bytes
from tests.kafkadir import (
    NOW,
    T0,
    B,
    M,
    N,
    P,
    PartitionBuilder,
    T,
    assert_gone,
    data_dir,
    empty_snapshot,
    load,
    name,
    snapshot_offsets,
    txn_entry,
)

TP = TopicPartition("t", 0)
EXPIRATION = 86_400_000


# ------------------------------------------------------------------------------------------------
# Batch descriptions and the test-side producer-state model


@dataclass(frozen=True)
class Desc:
    kind: str  # "T" transactional data, "P" idempotent data, "N" no producer, "M" end-txn marker
    o: int
    n: int = 1
    pid: int = -1
    seq: int = -1
    commit: bool = False
    coord: int = 0
    ts: int | None = None

    @property
    def timestamp(self) -> int:
        return T0 + self.o if self.ts is None else self.ts

    def batch(self) -> bytes:
        if self.kind == "T":
            if self.ts is None:
                return T(self.o, self.n, self.pid, self.seq)
            return T_ts(self.o, self.n, self.pid, self.seq, self.ts)
        if self.kind == "P":
            assert self.n == 1
            return P(self.o, self.pid, self.seq, ts=self.ts)
        if self.kind == "N":
            return N(self.o, self.n)
        return M(self.o, self.pid, self.commit, coord=self.coord, ts=self.ts)


def T_ts(o: int, n: int, pid: int, seq: int, ts: int) -> bytes:
    """``T(o, n, pid, seq)`` with a timestamp override (the kafkadir builder has none)."""
    recs = [records.Record(i, 0, None, str(seq + i).encode()) for i in range(n)]
    return records.build_batch(o, recs, partition_leader_epoch=0, base_timestamp=ts, max_timestamp=ts,
                               transactional=True, producer_id=pid, producer_epoch=0, base_sequence=seq)


def entry(pid, last_seq, last_offset, delta, ts, coord=-1, txn=-1, epoch=0) -> ProducerSnapshotEntry:
    return ProducerSnapshotEntry(pid, epoch, last_seq, last_offset, delta, ts, coord, txn)


def info(e: ProducerSnapshotEntry) -> ProducerInfo:
    return ProducerInfo(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta, e.timestamp,
                        e.coordinator_epoch, e.current_txn_first_offset)


def model(descs: list[Desc], upto: int) -> list[ProducerSnapshotEntry]:
    """Producer entries after applying every batch with offsets < ``upto``, in Java HashMap order."""
    st: dict[int, dict] = {}
    for d in descs:
        if d.o >= upto:
            break
        if d.pid < 0:
            continue
        e = st.setdefault(d.pid, dict(last_seq=-1, last_offset=-1, delta=0, ts=-1, coord=-1, txn=-1))
        if d.kind in ("T", "P"):
            e.update(last_seq=d.seq + d.n - 1, last_offset=d.o + d.n - 1, delta=d.n - 1, ts=d.timestamp)
            if d.kind == "T" and e["txn"] < 0:
                e["txn"] = d.o
        else:  # marker: coordinator epoch, the marker record's timestamp, transaction closed
            e.update(coord=d.coord, ts=d.timestamp, txn=-1)
    return [entry(pid, st[pid]["last_seq"], st[pid]["last_offset"], st[pid]["delta"], st[pid]["ts"],
                  st[pid]["coord"], st[pid]["txn"]) for pid in java_hashmap_order(st)]


def producers_of(entries: list[ProducerSnapshotEntry]) -> dict[int, ProducerInfo]:
    return {e.producer_id: info(e) for e in entries}


def split_segments(descs: list[Desc], max_bytes: int) -> list[list[Desc]]:
    """Roll before a batch that would make the segment exceed ``max_bytes`` (segment.bytes)."""
    segs: list[list[Desc]] = [[]]
    size = 0
    for d in descs:
        n = len(d.batch())
        if segs[-1] and size + n > max_bytes:
            segs.append([])
            size = 0
        segs[-1].append(d)
        size += n
    return segs


def write_segments(pb: PartitionBuilder, segs: list[list[Desc]]) -> list[int]:
    bases = []
    for seg in segs:
        base = seg[0].o
        pb.segment(base, *(d.batch() for d in seg))
        bases.append(base)
    return bases


def read_txn(pb: PartitionBuilder, base: int) -> bytes | None:
    p = pb.file(base, ".txnindex")
    return p.read_bytes() if p.exists() else None


# ------------------------------------------------------------------------------------------------
# TXN90


def txn90() -> list[Desc]:
    seqs: dict[int, int] = {}

    def t(o, n, pid):
        s = seqs.get(pid, 0)
        seqs[pid] = s + n
        return Desc("T", o, n, pid, s)

    return [
        t(0, 5, 1), Desc("N", 5, 3), t(8, 2, 2), t(10, 4, 1), t(14, 3, 3), Desc("N", 17, 2), t(19, 10, 1),
        Desc("M", 29, pid=1, commit=False), t(30, 6, 2), t(36, 3, 4), Desc("N", 39, 10), t(49, 9, 3),
        Desc("M", 58, pid=3, commit=True), t(59, 8, 4), t(67, 7, 2), Desc("M", 74, pid=2, commit=False),
        Desc("N", 75, 10), t(85, 4, 4), Desc("M", 89, pid=4, commit=True),
    ]


# SPEC NOTE: "a snapshot at every segment base (as rolls write them)": at 19, 49 and 75 with the producer
# state at that offset; none at 0 (Kafka never snapshots offset 0) and none at the LEO (the LLT's
# log.close() would also write 90.snapshot; docs/scenarios.md does not list it).
TXN90_BASES = [0, 19, 49, 75]  # segments of at most 640 bytes: 518, 563, 539, 316 bytes
ABORTED = [(1, 0, 29, 8), (2, 8, 74, 36)]  # (pid, first, last, lso)
TXN_BY_SEGMENT = {19: txn_entry(1, 0, 29, 8), 49: txn_entry(2, 8, 74, 36)}  # the segment holding lastOffset


def build_txn90(d, *, snapshots: bool = True, txnindexes: bool = True) -> tuple[PartitionBuilder, list[Desc]]:
    descs = txn90()
    pb = PartitionBuilder(d)
    segs = split_segments(descs, 640)
    assert write_segments(pb, segs) == TXN90_BASES
    assert [len(pb.read(name(b, ".log"))) for b in TXN90_BASES] == [518, 563, 539, 316]
    assert sum(d_.n for d_ in descs) == 90
    if snapshots:  # as rolls write them: the producer state at every segment base (never at 0)
        for base in TXN90_BASES[1:]:
            pb.snapshot(base, model(descs, base))
    if txnindexes:  # as the broker appended them
        for base, data in TXN_BY_SEGMENT.items():
            pb.write(name(base, ".txnindex"), data)
    pb.epochs((0, 0))
    return pb, descs


def concatenated_txn_entries(pb: PartitionBuilder) -> list[tuple[int, int, int, int]]:
    data = b"".join(read_txn(pb, b) or b"" for b in TXN90_BASES)
    assert len(data) % 34 == 0
    out = []
    for p in range(0, len(data), 34):
        version, pid, first, last, lso = struct.unpack_from(">hqqqq", data, p)
        assert version == 0
        out.append((pid, first, last, lso))
    return out


def assert_txn90_final_state(pb: PartitionBuilder, log, descs: list[Desc]) -> None:
    assert concatenated_txn_entries(pb) == ABORTED
    for base in TXN90_BASES:  # each entry in the segment that contains its lastOffset; commits: none
        assert read_txn(pb, base) == TXN_BY_SEGMENT.get(base), base
    assert log.log_end_offset == 90
    assert [s.base_offset for s in log.segments] == TXN90_BASES
    assert log.truncated_bytes == 0
    final = model(descs, 90)
    assert [e.producer_id for e in final] == [1, 2, 3, 4]
    assert final[0] == entry(1, 18, 28, 9, T0 + 29, coord=0)  # hand check of the model
    assert final[3] == entry(4, 14, 88, 3, T0 + 89, coord=0)
    assert log.producers == producers_of(final)
    # the last recovery leaves a snapshot at its end offset (= LEO) with the final state
    assert snapshot_offsets(pb.path) == {19, 49, 75, 90}
    for off in (19, 49, 75, 90):
        assert read_snapshot(pb.file(off, ".snapshot")) == model(descs, off), off


# ------------------------------------------------------------------------------------------------
# 59. Full transaction-index rebuild (LLT testFullTransactionIndexRecovery)


def test_s59_full_transaction_index_rebuild(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb, descs = build_txn90(d, txnindexes=False)  # every .txnindex deleted ...
    for base in TXN90_BASES:  # ... and every .index
        pb.file(base, ".index").unlink()

    result = load(d)

    log = result.logs[TP]
    assert_txn90_final_state(pb, log, descs)
    assert log.recovered_segments == TXN90_BASES  # each one twice (docs/loading.md §16a), reported once


# ------------------------------------------------------------------------------------------------
# 60. Only the last segment recovered (LLT testRecoverOnlyLastSegment)


def test_s60_only_last_segment_recovered(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 75)])
    pb, descs = build_txn90(d)
    pb.file(75, ".index").unlink()
    assert not pb.file(75, ".txnindex").exists()  # the broker never created one (no abort in it)
    before = {b: read_txn(pb, b) for b in TXN90_BASES}

    result = load(d)

    log = result.logs[TP]
    assert {b: read_txn(pb, b) for b in (0, 19, 49)} == {b: before[b] for b in (0, 19, 49)}  # untouched
    assert_txn90_final_state(pb, log, descs)
    assert log.recovered_segments == [75]
    assert log.loader_recovery_point == 75


# ------------------------------------------------------------------------------------------------
# 61. Last segment with no snapshots at all (LLT testRecoverLastSegmentWithNoSnapshots)


def test_s61_last_segment_recovered_without_snapshots(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 75)])
    pb, descs = build_txn90(d, snapshots=False)
    pb.file(75, ".index").unlink()
    assert snapshot_offsets(pb.path) == set()

    result = load(d)

    log = result.logs[TP]
    assert read_txn(pb, 19) == TXN_BY_SEGMENT[19] and read_txn(pb, 49) == TXN_BY_SEGMENT[49]
    assert_txn90_final_state(pb, log, descs)  # state rebuilt by scanning 0..75
    assert log.recovered_segments == [75]


# ------------------------------------------------------------------------------------------------
# 62. Segment-level txn index and LSO (LST testRecoverTransactionIndex)


def _s62_batches() -> list[bytes]:
    return [
        T(100, 2, 5, 100, ple=15), T(102, 2, 10, 100, ple=15), N(104, 2),
        M(106, 10, False), M(107, 5, True),
    ]


# SPEC NOTE: the LST segment test as a load: S(100) is the only segment (unclean, RP and LSO absent);
# the variant's pre-loaded producer state is a 100.snapshot (pid 10's timestamp T0, not expired).
@pytest.mark.parametrize("preloaded", [False, True], ids=["empty-state", "pid10-preloaded"])
def test_s62_segment_txn_index_and_lso(tmp_path, preloaded):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d).segment(100, *_s62_batches())
    if preloaded:
        # pid 10: epoch 0, coordinatorEpoch 0, open txn at 75, one batch (lastSeq 10, lastOffset 10, delta 5)
        pb.snapshot(100, [entry(10, 10, 10, 5, T0, coord=0, txn=75)])

    result = load(d)

    log = result.logs[TP]
    assert log.log_end_offset == 108  # map end offset
    first = 75 if preloaded else 102
    assert pb.read(name(100, ".txnindex")) == txn_entry(10, first, 106, 100)
    assert log.producers == {
        5: ProducerInfo(5, 0, 101, 101, 1, T0 + 107, 0, -1),
        10: ProducerInfo(10, 0, 101, 103, 1, T0 + 106, 0, -1),
    }


# ------------------------------------------------------------------------------------------------
# 63. Coordinator epoch going backwards is tolerated (LLT testRecoverAfterNonMonotonicCoordinatorEpochWrite)


def test_s63_coordinator_epoch_going_backwards(tmp_path):
    t1 = T0
    t2 = t1 + EXPIRATION
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d).segment(0, M(0, 1, False, coord=5, ts=t1), M(1, 1, False, coord=4, ts=t2))
    assert len(pb.read(name(0, ".log"))) == 156

    result = load(d, now_ms=t2)

    log = result.logs[TP]
    assert log.producers == {1: ProducerInfo(1, 0, -1, -1, 0, t2, 4, -1)}  # no batch metadata
    assert not pb.file(0, ".txnindex").exists()
    assert snapshot_offsets(pb.path) == {2}
    assert pb.read(name(2, ".snapshot")) == snapshot_bytes([entry(1, -1, -1, 0, t2, coord=4)])


# ------------------------------------------------------------------------------------------------
# 64. Delete-records in the middle of a segment (LLT testLoadProducersAfterDeleteRecordsMidSegment)


def test_s64_delete_records_mid_segment(tmp_path):
    d = data_dir(tmp_path, clean=False, lso=[("t", 0, 1)])
    pb = PartitionBuilder(d).segment(0, P(0, 1, 0), P(1, 2, 0))
    both = [entry(1, 0, 0, 0, T0), entry(2, 0, 1, 0, T0 + 1)]
    pb.snapshot(2, both)
    pb.epochs((0, 0))

    result = load(d)

    log = result.logs[TP]
    assert log.log_start_offset == 1
    assert snapshot_offsets(pb.path) == {2}
    assert pb.read(name(2, ".snapshot")) == snapshot_bytes(both)  # rewritten: pid 1, pid 2
    assert log.producers == producers_of(both)
    assert log.log_end_offset == 2


# ------------------------------------------------------------------------------------------------
# 65. Delete-records at a segment boundary (LLT testLoadProducersAfterDeleteRecordsOnSegment)


def test_s65_delete_records_on_segment_boundary(tmp_path):
    d = data_dir(tmp_path, clean=False, lso=[("t", 0, 1)])
    pb = PartitionBuilder(d).segment(1, P(1, 2, 0))  # segment 0 deleted earlier
    pid1 = entry(1, 0, 0, 0, T0)
    pid2 = entry(2, 0, 1, 0, T0 + 1)
    pb.snapshot(1, [pid1])
    pb.snapshot(2, [pid1, pid2])
    pb.epochs((0, 0))

    result = load(d)

    log = result.logs[TP]
    assert_gone(pb.path, name(1, ".snapshot"))
    assert snapshot_offsets(pb.path) == {2}
    assert pb.read(name(2, ".snapshot")) == snapshot_bytes([pid2])  # only pid 2
    assert log.producers == producers_of([pid2])
    assert log.log_start_offset == 1
    assert log.log_end_offset == 2


# ------------------------------------------------------------------------------------------------
# 66. The largest stray snapshot is kept (LLT testLoadingLogKeepsLargestStrayProducerStateSnapshot)


def test_s66_largest_stray_snapshot_kept(tmp_path):
    d = data_dir(tmp_path, clean=False)
    descs = [Desc("P", o, 1, 1, o) for o in range(4)]
    pb = PartitionBuilder(d)
    pb.segment(0, descs[0].batch())
    pb.segment(1, descs[1].batch())
    pb.segment(2, descs[2].batch(), descs[3].batch())
    for off in (1, 2, 4):
        pb.snapshot(off, model(descs, off))
    pb.write(name(3, ".snapshot"), b"")  # an empty (0-byte) snapshot file
    pb.epochs((0, 0))

    result = load(d)

    snapshots = sorted(f for f in pb.files() if f.endswith(".snapshot"))
    assert snapshots == [name(o, ".snapshot") for o in (1, 2, 4)]
    for off in (1, 2, 4):
        assert read_snapshot(pb.file(off, ".snapshot")) == model(descs, off)
    assert result.logs[TP].log_end_offset == 4


# ------------------------------------------------------------------------------------------------
# 67. Which segments are read for producer state (LLT testProducerSnapshotsRecoveryAfterUncleanShutdown...)

# SPEC NOTE: "R = base of segment n-4" read with 0-based segment numbers (as the LLT's
# segmentOffsets(size - 4)), the only reading under which the recovered set is "the last four".
S67_BASES = [0, 2, 4, 6, 8, 10]  # n = 6 segments of two P batches; LEO 12
S67_R = S67_BASES[len(S67_BASES) - 4]  # 4


def _s67_setup(tmp_path, rp: int, snapshot_offsets_: list[int]):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, rp)])
    descs = [Desc("P", o, 1, 1, o) for o in range(12)]
    pb = PartitionBuilder(d)
    for base in S67_BASES:
        pb.segment(base, descs[base].batch(), descs[base + 1].batch())
    for off in snapshot_offsets_:
        pb.snapshot(off, model(descs, off))
    pb.epochs((0, 0))
    return d, pb, descs


@pytest.mark.parametrize("variant", ["rp-at-R", "snapshots-from-R-rp-R+1"])
def test_s67_segments_read_for_producer_state(tmp_path, variant):
    if variant == "rp-at-R":  # snapshots only at the bases of the last two segments and at the LEO
        d, pb, descs = _s67_setup(tmp_path, S67_R, [8, 10, 12])
    else:
        d, pb, descs = _s67_setup(tmp_path, S67_R + 1, [4, 6, 8, 10, 12])

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == [4, 6, 8, 10]  # the last four
    assert snapshot_offsets(pb.path) == {4, 6, 8, 10, 12}  # bases of the last four segments + LEO
    for off in (4, 6, 8, 10, 12):
        assert read_snapshot(pb.file(off, ".snapshot")) == model(descs, off), off
    assert log.producers == producers_of(model(descs, 12))
    assert log.producers[1] == ProducerInfo(1, 0, 11, 11, 0, T0 + 11, -1, -1)
    assert log.log_end_offset == 12


def test_s67_variant_v1_format(tmp_path):
    d, pb, descs = _s67_setup(tmp_path, S67_R, [8, 10, 12])

    result = load(d, record_version=1)

    log = result.logs[TP]
    assert log.recovered_segments == [4, 6, 8, 10]
    # SPEC NOTE: only the set is stated.  The V1 shortcut writes *empty* snapshots over the existing
    # 56-byte files with create+write and no truncation (docs/formats.md §12), so their bytes are not asserted.
    assert snapshot_offsets(pb.path) == {8, 10, 12}  # bases of the last two segments + LEO
    assert log.producers == {}  # nothing read
    assert log.leader_epochs is None


# ------------------------------------------------------------------------------------------------
# 68. Clean shutdown without snapshot files => empty snapshots, no scan
# (LLT testSkipTruncateAndReloadIfNewMessageFormatAndCleanShutdown)


def test_s68_clean_shutdown_without_snapshots_writes_empty_ones(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d)
    for base in (0, 10, 20):
        pb.segment(base, *(P(o, 7, o) for o in range(base, base + 10)))
    pb.epochs((0, 0))
    assert snapshot_offsets(pb.path) == set()

    result = load(d)

    assert snapshot_offsets(pb.path) == {10, 20, 30}
    for off in (10, 20, 30):
        assert pb.read(name(off, ".snapshot")) == bytes.fromhex("0001 48674bc7 00000000")
    log = result.logs[TP]
    assert log.producers == {}  # pid 7 unknown
    assert log.recovered_segments == []
    assert log.log_end_offset == 30


# ------------------------------------------------------------------------------------------------
# 69. Unclean empty log => no snapshot (LLT testSkipLoadingIfEmptyProducerStateBeforeTruncation)


def test_s69_unclean_empty_log_no_snapshot(tmp_path):
    d = data_dir(tmp_path, clean=False)
    (d / "t-0").mkdir()

    result = load(d)

    assert snapshot_offsets(d / "t-0") == set()
    assert (d / "t-0" / name(0, ".log")).read_bytes() == b""
    log = result.logs[TP]
    assert log.log_end_offset == 0
    assert log.producers == {}


# ------------------------------------------------------------------------------------------------
# 70. Corrupt latest snapshot falls back to an older one


def test_s70_corrupt_latest_snapshot_falls_back(tmp_path, caplog):
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d)
    pb.segment(0, *(P(o, 7, o) for o in range(10)))
    pb.segment(10, *(P(o, 7, o) for o in range(10, 20)))
    at10 = entry(7, 9, 9, 0, T0 + 9)
    at20 = entry(7, 19, 19, 0, T0 + 19)
    pb.snapshot(10, [at10])
    good20 = snapshot_bytes([at20])
    bad20 = bytearray(good20)
    bad20[2] ^= 0x01  # one CRC byte flipped
    pb.write(name(20, ".snapshot"), bytes(bad20))
    pb.epochs((0, 0))

    with caplog.at_level("WARNING", logger="mploader.recovery.producer_state"):
        result = load(d)

    # like Kafka, a WARN names the snapshot it replaces (once for the dry run, once for the load)
    warned = [r.getMessage() for r in caplog.records if name(20, ".snapshot") in r.getMessage()]
    assert warned and all("corrupt producer snapshot" in m for m in warned)
    assert pb.read(name(10, ".snapshot")) == snapshot_bytes([at10])
    assert pb.read(name(20, ".snapshot")) == good20  # deleted, then re-written valid after scanning S(10)
    assert snapshot_offsets(pb.path) == {10, 20}
    log = result.logs[TP]
    assert log.producers == {7: ProducerInfo(7, 0, 19, 19, 0, T0 + 19, -1, -1)}
    assert log.recovered_segments == []


# ------------------------------------------------------------------------------------------------
# 71. Producer expiry when loading a snapshot, and entry order


def test_s71_expiry_on_snapshot_load_and_hashmap_order(tmp_path):
    old = NOW - 2 * EXPIRATION
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 2)])
    descs = [Desc("P", 0, 1, 9, 0, ts=old), Desc("T", 1, 1, 3, 0, ts=old),
             Desc("P", 2, 1, 2, 0), Desc("P", 3, 1, 17, 0)]
    assert descs[1].batch()[:8] == struct.pack(">q", 1)
    pb = PartitionBuilder(d)
    pb.segment(0, descs[0].batch(), descs[1].batch())
    pb.segment(2, descs[2].batch(), descs[3].batch())
    pid9 = entry(9, 0, 0, 0, old)
    pid3 = entry(3, 0, 1, 0, old, txn=1)  # its transaction is never closed
    assert model(descs, 2) == [pid3, pid9]  # HashMap order: bucket 3, bucket 9
    pb.snapshot(2, [pid3, pid9])
    pb.epochs((0, 0))

    result = load(d)

    assert java_hashmap_order([3, 2, 17]) == [17, 2, 3]  # buckets 1, 2, 3 at capacity 16
    expected4 = [entry(17, 0, 3, 0, T0 + 3), entry(2, 0, 2, 0, T0 + 2), pid3]  # pid 9 expired and dropped
    assert snapshot_offsets(pb.path) == {2, 4}
    assert pb.read(name(4, ".snapshot")) == snapshot_bytes(expected4)
    log = result.logs[TP]
    assert log.recovered_segments == [2]
    assert set(log.producers) == {2, 3, 17}
    assert log.producers[3].current_txn_first_offset == 1
    assert log.producers == producers_of(expected4)


# ------------------------------------------------------------------------------------------------
# 72. Snapshot at the log start offset is deleted at every load


def test_s72_snapshot_at_log_start_deleted(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d)
    pb.segment(100, *(B(o) for o in range(100, 110)))
    pb.segment(110, *(B(o) for o in range(110, 120)))
    for off in (100, 110, 120):
        pb.snapshot(off)
    pb.epochs((0, 100))

    result = load(d)

    log = result.logs[TP]
    assert log.log_start_offset == 100
    assert_gone(pb.path, name(100, ".snapshot"))  # offset <= logStart
    assert snapshot_offsets(pb.path) == {110, 120}
    assert pb.read(name(110, ".snapshot")) == empty_snapshot()
    assert pb.read(name(120, ".snapshot")) == empty_snapshot()


# ------------------------------------------------------------------------------------------------
# 73. Snapshot byte layout (docs/formats.md §12)


# SPEC NOTE: a format statement turned into a load: the snapshots checked are the ones the loader writes.
def test_s73_snapshot_byte_layout(tmp_path):
    d = data_dir(tmp_path, clean=False)
    # t-0: three producers inserted as 4003, 4001, 4002; t-1: no producers
    pb0 = PartitionBuilder(d, partition=0).segment(0, P(0, 4003, 0), P(1, 4001, 0), P(2, 4002, 0))
    pb1 = PartitionBuilder(d, partition=1).segment(0, B(0), B(1), B(2))

    result = load(d)

    assert set(result.logs) == {TopicPartition("t", 0), TopicPartition("t", 1)}
    # empty snapshot (written after recovering t-1's only segment)
    assert snapshot_offsets(pb1.path) == {3}
    assert pb1.read(name(3, ".snapshot")) == bytes([0x00, 0x01, 0x48, 0x67, 0x4B, 0xC7, 0, 0, 0, 0])
    # three producers: 10 + 3 * 46 = 148 bytes, ascending pid order (buckets 1, 2, 3)
    assert snapshot_offsets(pb0.path) == {3}
    data = pb0.read(name(3, ".snapshot"))
    assert len(data) == 148
    assert data[:2] == b"\x00\x01"
    assert struct.unpack_from(">I", data, 2)[0] == crc32c(data[6:148])
    assert struct.unpack_from(">i", data, 6)[0] == 3
    body = struct.pack(">i", 3)
    for pid, off in ((4001, 1), (4002, 2), (4003, 0)):
        # pid(8) epoch(2) lastSeq(4) lastOffset(8) offsetDelta(4) timestamp(8) coordinatorEpoch(4) txnFirst(8)
        body += struct.pack(">qhiqiqiq", pid, 0, 0, off, 0, T0 + off, -1, -1)
    assert data == struct.pack(">hI", 1, crc32c(body)) + body
    assert [struct.unpack_from(">q", data, 10 + 46 * i)[0] for i in range(3)] == [4001, 4002, 4003]
