"""docs/scenarios.md section B: temporary, swap and orphan files (docs/loading.md §6.1-6.3), scenarios 14-17."""

from __future__ import annotations

import struct

from mploader import TopicPartition
from tests.kafkadir import (
    T0,
    B,
    PartitionBuilder,
    assert_file,
    assert_gone,
    assert_segment_gone,
    data_dir,
    load,
    name,
    snapshot_offsets,
    std3_batches,
)

TP = TopicPartition("t", 0)


def std3(d) -> PartitionBuilder:
    pb = PartitionBuilder(d).std3()
    for base in (0, 10, 20):
        assert len(pb.read(name(base, ".log"))) == 720
    return pb


# ------------------------------------------------------------------------------------------------
# 14. `.deleted` files are removed, KRaft `.checkpoint.deleted` kept


def test_s14_deleted_files_removed_checkpoint_deleted_kept(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = std3(d)
    deleted = [name(5, ".log.deleted"), name(5, ".index.deleted"), name(5, ".timeindex.deleted"),
               name(5, ".snapshot.deleted")]
    pb.write(deleted[0], B(5))
    pb.write(deleted[1], b"\x00" * 8)
    pb.write(deleted[2], b"\x00" * 12)
    pb.write(deleted[3], b"\x00\x01")
    kraft = "00000000000000000000-0000000000.checkpoint.deleted"
    pb.write(kraft, b"kraft snapshot")

    result = load(d)

    for f in deleted:
        assert not (pb.path / f).exists()
    assert pb.read(kraft) == b"kraft snapshot"
    log = result.logs[TP]
    assert [s.base_offset for s in log.segments] == [0, 10, 20]
    assert log.log_end_offset == 30
    assert log.recovered_segments == []


# ------------------------------------------------------------------------------------------------
# 15. Log-compaction swap completed by renaming; replaced range deleted (incl. snapshots)


def test_s15_swap_completed_by_renaming(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = std3(d)
    swap_log = B(3) + B(9) + B(15) + B(19)
    assert len(swap_log) == 288
    swap_ti = struct.pack(">qi", T0 + 19, 19)
    assert len(swap_ti) == 12
    pb.write(name(0, ".log.swap"), swap_log)
    pb.write(name(0, ".index.swap"), b"")
    pb.write(name(0, ".timeindex.swap"), swap_ti)

    result = load(d)

    # replaced range [minSwap 0, maxSwap 20): old S(0), S(10) and the 10.snapshot are deleted
    assert_gone(pb.path, name(10, ".log"))
    assert_gone(pb.path, name(10, ".index"))
    assert_gone(pb.path, name(10, ".timeindex"))
    assert_gone(pb.path, name(10, ".snapshot"))
    for sfx in (".log.swap", ".index.swap", ".timeindex.swap"):
        assert not (pb.path / name(0, sfx)).exists()
    assert pb.read(name(0, ".log")) == swap_log
    assert pb.read(name(0, ".index")) == b""  # not active, not recovered: stays as renamed
    assert pb.read(name(0, ".timeindex")) == swap_ti
    assert pb.read(name(20, ".log")) == std3_batches(20)
    log = result.logs[TP]
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(0, 288), (20, 720)]
    assert log.log_end_offset == 30
    assert log.loader_recovery_point == 30
    assert log.recovered_segments == []
    assert snapshot_offsets(pb.path) == {20, 30}


# ------------------------------------------------------------------------------------------------
# 16. `.cleaned` files and swaps at/after the lowest `.cleaned` offset are discarded


def test_s16_cleaned_and_later_swaps_discarded(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = std3(d)
    before = {name(b, sfx): pb.read(name(b, sfx)) for b in (0, 10, 20) for sfx in (".log", ".index", ".timeindex")}
    leftovers = [name(0, ".log.cleaned"), name(0, ".index.cleaned"), name(0, ".timeindex.cleaned"),
                 name(10, ".log.swap"), name(10, ".index.swap"), name(10, ".timeindex.swap")]
    for f in leftovers:
        pb.write(f, b"irrelevant contents")

    result = load(d)

    for f in leftovers:
        assert not (pb.path / f).exists()
    for f, data in before.items():
        if f.startswith(name(20, "")) and not f.endswith(".log"):
            continue  # active indexes are resized
        assert pb.read(f) == data, f
    log = result.logs[TP]
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(0, 720), (10, 720), (20, 720)]
    assert log.log_end_offset == 30
    assert log.recovered_segments == []


# ------------------------------------------------------------------------------------------------
# 17. Orphaned index files are deleted


def test_s17_orphaned_index_files_deleted(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d)
    for sfx in (".index", ".timeindex", ".txnindex"):
        pb.write(name(5, sfx), b"")

    result = load(d, max_index_size=1000, index_interval_bytes=1)

    assert_segment_gone(pb.path, 5, (".index", ".timeindex", ".txnindex"))
    assert pb.read(name(0, ".log")) == b""
    assert_file(pb.file(0, ".index"), b"", 1000)
    assert_file(pb.file(0, ".timeindex"), b"", 996)  # roundDown(1000, 12)
    assert not pb.file(0, ".txnindex").exists()
    # created empty (docs/loading.md §5.2), nothing removed => no flush
    assert pb.read("leader-epoch-checkpoint") == b""
    assert snapshot_offsets(pb.path) == set()  # clean shortcut: never a snapshot at offset 0
    log = result.logs[TP]
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(0, 0)]
    assert log.log_end_offset == 0
    assert log.log_start_offset == 0
    assert log.loader_recovery_point == 0
