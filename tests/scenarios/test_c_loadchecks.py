"""docs/scenarios.md section C: load-time checks (docs/loading.md §6.3-6.4), scenarios 18-25."""

from __future__ import annotations

import os

import pytest

from mploader import ProducerInfo, StartupFailedError, TopicPartition
from mploader.format.snapshot import ProducerSnapshotEntry
from tests.kafkadir import (
    OFFSET_INDEX_FULL,
    T0,
    TIME_INDEX_FULL,
    P,
    PartitionBuilder,
    assert_file,
    data_dir,
    expected_indexes,
    load,
    name,
    oi_bytes,
    snapshot_of,
    snapshot_offsets,
    std3_batches,
    ti_bytes,
    txn_entry,
)

TP = TopicPartition("t", 0)


def std3(d, interval: int = 4096) -> PartitionBuilder:
    pb = PartitionBuilder(d, interval=interval).std3()
    for base in (0, 10, 20):
        assert len(pb.read(name(base, ".log"))) == 720
    return pb


def pid7_snapshot(n: int) -> bytes:
    """Snapshot at offset n after P(0..n-1, pid 7, seq = offset)."""
    return snapshot_of([ProducerSnapshotEntry(7, 0, n - 1, n - 1, 0, T0 + n - 1, -1, -1)])


# ------------------------------------------------------------------------------------------------
# 18. Missing `.timeindex` with `.index` present, clean => 0-byte file, not rebuilt


def test_s18_missing_timeindex_clean_creates_empty_file(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = std3(d)
    ti10 = pb.read(name(10, ".timeindex"))
    assert len(ti10) == 12
    os.remove(pb.file(0, ".timeindex"))
    os.remove(pb.file(20, ".timeindex"))

    result = load(d)

    assert pb.read(name(0, ".timeindex")) == b""  # created, resized to 0; not rebuilt
    assert_file(pb.file(20, ".timeindex"), b"", TIME_INDEX_FULL)  # created at 0 bytes, resized (docs/loading.md §6.9)
    assert pb.read(name(10, ".timeindex")) == ti10
    log = result.logs[TP]
    assert log.recovered_segments == []
    assert log.log_end_offset == 30


# ------------------------------------------------------------------------------------------------
# 19. Missing `.index` (clean shutdown) => that segment is recovered at load time; later snapshots rewritten


def test_s19_missing_index_clean_recovers_segment_and_rewrites_snapshots(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d)
    for base in (0, 10, 20):
        pb.segment(base, *(P(o, 7, o) for o in range(base, base + 10)))
        assert len(pb.read(name(base, ".log"))) == 720
    for n in (10, 20, 30):
        pb.write(name(n, ".snapshot"), pid7_snapshot(n))
        assert len(pb.read(name(n, ".snapshot"))) == 10 + 46
    pb.epochs((0, 0))
    logs_before = {b: pb.read(name(b, ".log")) for b in (0, 10, 20)}
    os.remove(pb.file(10, ".index"))

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == [10]  # once, in the load phase
    assert log.truncated_bytes == 0
    assert pb.read(name(10, ".index")) == b""  # rebuilt: 0 entries with I=4096, trimmed
    assert pb.read(name(10, ".timeindex")) == ti_bytes(10, (T0 + 19, 19))
    for b in (0, 10, 20):
        assert pb.read(name(b, ".log")) == logs_before[b]
    assert snapshot_offsets(pb.path) == {10, 20, 30}
    for n in (10, 20, 30):
        assert pb.read(name(n, ".snapshot")) == pid7_snapshot(n), n
    assert log.producers == {7: ProducerInfo(7, 0, 29, 29, 0, T0 + 29, -1, -1)}
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(0, 720), (10, 720), (20, 720)]
    assert log.log_end_offset == 30
    assert log.loader_recovery_point == 30


# ------------------------------------------------------------------------------------------------
# 20. Garbage index content is not detected after a clean shutdown


def _garbage_indexes(pb):
    for b in (0, 10, 20):
        pb.write(name(b, ".index"), b"\x20\x20")
        pb.write(name(b, ".timeindex"), b"\x20\x20")


def test_s20_garbage_index_not_detected_after_clean_shutdown(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = std3(d)
    _garbage_indexes(pb)

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == []
    for b in (0, 10):
        assert pb.read(name(b, ".index")) == b"\x20\x20"
        assert pb.read(name(b, ".timeindex")) == b"\x20\x20"
    assert_file(pb.file(20, ".index"), b"\x20\x20", OFFSET_INDEX_FULL)  # resize keeps existing bytes
    assert_file(pb.file(20, ".timeindex"), b"\x20\x20", TIME_INDEX_FULL)
    assert log.log_end_offset == 30  # 0 entries => S(20) scanned from position 0


# ------------------------------------------------------------------------------------------------
# 21. Garbage index content is rebuilt when recovered


def test_s21_garbage_index_rebuilt_when_recovered(tmp_path):
    d = data_dir(tmp_path, clean=False)  # RP absent
    pb = std3(d)
    _garbage_indexes(pb)

    result = load(d, index_interval_bytes=1)

    log = result.logs[TP]
    assert log.recovered_segments == [0, 10, 20]
    for b in (0, 10, 20):
        oi = oi_bytes(b, *((b + k, 72 * k) for k in range(1, 10)))
        ti = ti_bytes(b, *((T0 + b + k, b + k) for k in range(1, 10)))
        assert len(oi) == 72 and len(ti) == 108
        assert (oi, ti) == expected_indexes(b, std3_batches(b), 1)
        if b < 20:
            assert pb.read(name(b, ".index")) == oi
            assert pb.read(name(b, ".timeindex")) == ti
        else:
            assert_file(pb.file(b, ".index"), oi, OFFSET_INDEX_FULL)
            assert_file(pb.file(b, ".timeindex"), ti, TIME_INDEX_FULL)
    assert log.log_end_offset == 30


# ------------------------------------------------------------------------------------------------
# 22. Corrupt `.txnindex` => segment recovered and txn index rebuilt


@pytest.mark.parametrize("garbage_indexes", [False, True], ids=["consistent_indexes", "garbage_indexes"])
def test_s22_corrupt_txnindex_recovers_segment(tmp_path, garbage_indexes):
    d = data_dir(tmp_path, clean=True)
    pb = std3(d)
    entry = txn_entry(1, 2, 5, 2)  # lastOffset 5 < base 10
    assert len(entry) == 34
    pb.write(name(10, ".txnindex"), entry)
    consistent = {sfx: pb.read(name(10, sfx)) for sfx in (".index", ".timeindex")}
    if garbage_indexes:  # extra variant (not in docs/scenarios.md): makes the rebuild observable
        pb.write(name(10, ".index"), b"\x20\x20")
        pb.write(name(10, ".timeindex"), b"\x20\x20")

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == [10]
    assert pb.read(name(10, ".txnindex")) == b""  # truncated to 0, kept
    assert pb.read(name(10, ".index")) == consistent[".index"] == b""
    assert pb.read(name(10, ".timeindex")) == consistent[".timeindex"] == ti_bytes(10, (T0 + 19, 19))
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(0, 720), (10, 720), (20, 720)]
    assert log.truncated_bytes == 0
    assert snapshot_offsets(pb.path) == {10, 20, 30}
    for n in (10, 20, 30):
        assert pb.read(name(n, ".snapshot")) == snapshot_of([])
    assert log.log_end_offset == 30


# ------------------------------------------------------------------------------------------------
# 23. `.txnindex` entry with a positive first version byte is fatal


def test_s23_txnindex_positive_version_byte_is_fatal(tmp_path):
    # SPEC NOTE: docs/scenarios.md #23 does not say clean/unclean; the txn-index read happens in the load phase
    # either way
    d = data_dir(tmp_path, clean=True)
    pb = std3(d)
    entry = txn_entry(1, 12, 15, 12, version=0x0100)
    assert len(entry) == 34 and entry[0] == 0x01
    pb.write(name(10, ".txnindex"), entry)

    with pytest.raises(StartupFailedError) as ei:
        load(d)
    assert ei.value.kafka_exception == "KafkaException"


def test_s23_txnindex_negative_version_byte_accepted(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = std3(d)
    entry = txn_entry(1, 12, 15, 12, version=-256)  # first byte 0xFF
    assert len(entry) == 34 and entry[0] == 0xFF
    pb.write(name(10, ".txnindex"), entry)

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == []  # lastOffset 15 >= base 10: sanity check passes
    assert pb.read(name(10, ".txnindex")) == entry
    assert log.log_end_offset == 30


# ------------------------------------------------------------------------------------------------
# 24. Empty active segment without index files, unclean


def test_s24_empty_active_segment_without_indexes_unclean(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 20)])
    pb = PartitionBuilder(d)
    pb.segment(0, std3_batches(0))
    pb.segment(10, std3_batches(10))
    pb.segment(20, indexes=False)
    assert pb.read(name(20, ".log")) == b""
    before = {name(b, sfx): pb.read(name(b, sfx)) for b in (0, 10) for sfx in (".log", ".index", ".timeindex")}

    result = load(d)

    log = result.logs[TP]
    # Kafka recovers S(20) twice (load phase: no .index; recoverLog: floor of RP); reported once
    assert log.recovered_segments == [20]
    assert_file(pb.file(20, ".index"), b"", OFFSET_INDEX_FULL)
    assert_file(pb.file(20, ".timeindex"), b"", TIME_INDEX_FULL)
    assert pb.read(name(20, ".log")) == b""
    for f, data in before.items():
        assert pb.read(f) == data, f
    assert log.log_end_offset == 20
    assert log.loader_recovery_point == 20
    assert log.truncated_bytes == 0


# ------------------------------------------------------------------------------------------------
# 25. Untrimmed preallocated active indexes after a crash

S25_OI = [(22, 144), (24, 288), (26, 432), (28, 576)]
S25_TI = [(T0 + 22, 22), (T0 + 24, 24), (T0 + 26, 26), (T0 + 28, 28)]


def _s25_setup(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 30)])
    pb = std3(d, interval=100)
    pb.write(name(20, ".index"), oi_bytes(20, *S25_OI) + bytes(OFFSET_INDEX_FULL - 32))
    pb.write(name(20, ".timeindex"), ti_bytes(20, *S25_TI) + bytes(TIME_INDEX_FULL - 48))
    # the broker's append-time entries for I = 100 are the 4 recovery entries (single-batch appends)
    oi, ti = expected_indexes(20, std3_batches(20), 100)
    assert oi == oi_bytes(20, *S25_OI)
    assert ti == ti_bytes(20, *S25_TI, (T0 + 29, 29))
    return d, pb


def test_s25_untrimmed_preallocated_active_indexes_after_crash(tmp_path):
    d, pb = _s25_setup(tmp_path)
    before = {name(b, sfx): pb.read(name(b, sfx)) for b in (0, 10) for sfx in (".log", ".index", ".timeindex")}

    result = load(d, index_interval_bytes=100)

    log = result.logs[TP]
    assert log.recovered_segments == [20]  # exactly once, by recoverLog
    assert_file(pb.file(20, ".index"), oi_bytes(20, *S25_OI), OFFSET_INDEX_FULL)
    assert_file(pb.file(20, ".timeindex"), ti_bytes(20, *S25_TI, (T0 + 29, 29)), TIME_INDEX_FULL)
    for f, data in before.items():
        assert pb.read(f) == data, f
    assert log.truncated_bytes == 0
    assert log.log_end_offset == 30


def test_s25_input_index_sanity_checks(tmp_path):
    """docs/formats.md §9 check on the crashed input .timeindex reports corruption; docs/formats.md §8 check on the
    .index passes."""
    import numpy as np

    from mploader.format.index import OFFSET_ENTRY, TIME_ENTRY, map_entries, offset_index_problem, time_index_problem

    _, pb = _s25_setup(tmp_path)
    tpath, opath = str(pb.file(20, ".timeindex")), str(pb.file(20, ".index"))
    tentries = map_entries(tpath, TIME_ENTRY)
    assert len(tentries) == 873813
    assert int(tentries["timestamp"][-1]) == 0 and int(tentries["timestamp"][0]) == T0 + 22
    assert time_index_problem(tpath, 20, TIME_INDEX_FULL, tentries) is not None
    oentries = map_entries(opath, OFFSET_ENTRY)
    assert len(oentries) == OFFSET_INDEX_FULL // 8
    assert 20 + int(np.asarray(oentries["relative_offset"])[-1]) == 20  # last slot decodes to offset 20
    assert offset_index_problem(opath, 20, OFFSET_INDEX_FULL, oentries) is None
