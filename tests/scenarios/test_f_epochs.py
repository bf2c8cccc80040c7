"""docs/scenarios.md section F: the leader-epoch cache (docs/loading.md §9, §6.11), scenarios 53-58."""

from __future__ import annotations

import pytest

from mploader import StartupFailedError, TopicPartition
from tests.kafkadir import B, N, PartitionBuilder, data_dir, dir_in, load, name

TP = TopicPartition("t", 0)
EPOCHS = "leader-epoch-checkpoint"


def epochs_text(*entries: tuple[int, int]) -> str:
    return f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries)


def std3_with_epochs(d, text: str) -> PartitionBuilder:
    pb = PartitionBuilder(d).std3()
    for base in (0, 10, 20):
        assert len(pb.read(name(base, ".log"))) == 720
    return pb.write(EPOCHS, text)


# ------------------------------------------------------------------------------------------------
# 53. Lost checkpoint entries are rebuilt from batches (LLT testLogRecoversForLeaderEpoch)


def test_s53_lost_checkpoint_entries_rebuilt_from_batches(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d).segment(0, B(0, ple=1), B(1, ple=2), B(2, ple=2), B(3, ple=3))
    pb.write(EPOCHS, "0\n2\n1 0\n2 1\n")

    result = load(d)

    assert pb.read(EPOCHS).decode() == "0\n3\n1 0\n2 1\n3 3\n"
    log = result.logs[TP]
    assert log.leader_epochs == [(1, 0), (2, 1), (3, 3)]
    assert log.log_end_offset == 4


# ------------------------------------------------------------------------------------------------
# 54. Only the first batch of each higher epoch is assigned (LST testRecoveryRebuildsEpochCache)


# SPEC NOTE: the LST segment test as a load: the only segment has base 0 and holds offsets 104..111
# (unclean, RP absent, no leader-epoch-checkpoint file).
def test_s54_only_first_batch_of_each_higher_epoch_assigned(tmp_path):
    d = data_dir(tmp_path, clean=False)
    batches = [N(104, 2, ple=0), N(106, 2, ple=1), N(108, 2, ple=1), N(110, 2, ple=2)]
    pb = PartitionBuilder(d).segment(0, *batches)  # segment base 0; no leader-epoch-checkpoint (empty cache)
    assert not (pb.path / EPOCHS).exists()

    result = load(d)

    log = result.logs[TP]
    assert log.leader_epochs == [(0, 104), (1, 106), (2, 110)]
    assert pb.read(EPOCHS).decode() == epochs_text((0, 104), (1, 106), (2, 110))
    assert log.log_end_offset == 112


# ------------------------------------------------------------------------------------------------
# 55. A stale higher epoch in the checkpoint suppresses assignments


def test_s55_stale_higher_epoch_suppresses_assignments(tmp_path):
    d = data_dir(tmp_path, clean=False)
    batches = [B(o, ple=0) for o in range(40)] + [B(o, ple=3) for o in range(40, 50)]
    pb = PartitionBuilder(d).segment(0, *batches)
    pb.write(EPOCHS, "0\n2\n0 0\n5 100\n")

    result = load(d)

    # no assignment (3 and 0 are not > 5); truncate-from-end(50) removes (5, 100); epoch 3 is lost
    assert pb.read(EPOCHS).decode() == "0\n1\n0 0\n"
    log = result.logs[TP]
    assert log.leader_epochs == [(0, 0)]
    assert log.log_end_offset == 50


# ------------------------------------------------------------------------------------------------
# 56. Truncate-from-start uses the raw log-start checkpoint


@pytest.mark.parametrize(
    "lso, log_start, expected",
    [
        (None, 100, [(0, 0), (1, 50), (2, 110)]),  # (a) entries below the first segment are kept
        (105, 105, [(1, 105), (2, 110)]),  # (b)
        (110, 110, [(2, 110)]),  # (c)
    ],
    ids=["a-lso-absent", "b-lso-105", "c-lso-110"],
)
def test_s56_truncate_from_start_uses_raw_log_start_checkpoint(tmp_path, lso, log_start, expected):
    d = data_dir(tmp_path, clean=True, lso=None if lso is None else [("t", 0, lso)])
    pb = PartitionBuilder(d)
    pb.segment(100, *(B(o, ple=1) for o in range(100, 110)))
    pb.segment(110, *(B(o, ple=2) for o in range(110, 130)))
    pb.write(EPOCHS, "0\n3\n0 0\n1 50\n2 110\n")

    result = load(d)

    log = result.logs[TP]
    assert log.log_start_offset == log_start
    assert log.leader_epochs == expected
    assert pb.read(EPOCHS).decode() == epochs_text(*expected)
    assert log.log_end_offset == 130
    assert log.recovered_segments == []


# ------------------------------------------------------------------------------------------------
# 57. Record version below V2 (LLT testLeaderEpochCacheClearedAfterStaticMessageFormatDowngrade)


def test_s57_record_version_below_v2(tmp_path):
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d)
    # SPEC NOTE: "STD3 with B(0, ple=5)…" read as every batch of STD3 carrying ple 5 (checkpoint (5, 0)).
    for base in (0, 10, 20):  # STD3 written under leader epoch 5
        pb.segment(base, *(B(o, ple=5) for o in range(base, base + 10)))
        assert len(pb.read(name(base, ".log"))) == 720
    for off in (10, 20, 30):
        pb.snapshot(off)
    pb.epochs((5, 0))

    result = load(d, record_version=1)  # message.format.version = 0.10.2

    assert not (pb.path / EPOCHS).exists()
    log = result.logs[TP]
    assert log.leader_epochs is None
    assert log.producers == {}
    assert log.log_end_offset == 30
    # only empty snapshots from the shortcut at [second-to-last base, last base, LEO]
    snapshots = sorted(f for f in pb.files() if f.endswith(".snapshot"))
    assert snapshots == [name(o, ".snapshot") for o in (10, 20, 30)]
    for off in (10, 20, 30):
        assert pb.read(name(off, ".snapshot")) == bytes.fromhex("0001 48674bc7 00000000")


# ------------------------------------------------------------------------------------------------
# 58. Malformed leader-epoch checkpoint (docs/formats.md §14)
# SPEC NOTE: docs/scenarios.md gives only the checkpoint text; the partition is STD3 after a clean shutdown.


def test_s58a_count_mismatch_takes_dir_offline(tmp_path):
    d = data_dir(tmp_path, clean=True)
    std3_with_epochs(d, "0\n2\n0 0\n")

    result = load(d)

    assert TP not in result.logs
    assert dir_in(result.offline_dirs, d)


@pytest.mark.parametrize(
    "text, exception",
    [("0\n1\nx 0\n", "NumberFormatException"), ("0\n1\n-1 0\n", "IllegalArgumentException")],
    ids=["b-number-format", "c-negative-epoch"],
)
def test_s58bc_bad_entry_fails_broker_startup(tmp_path, text, exception):
    d = data_dir(tmp_path, clean=True)
    std3_with_epochs(d, text)

    with pytest.raises(StartupFailedError) as ei:
        load(d)
    assert ei.value.kafka_exception == exception


def test_s58d_non_monotonic_entry_dropped(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = std3_with_epochs(d, "0\n3\n0 0\n2 10\n1 20\n")

    result = load(d)

    log = result.logs[TP]
    assert log.leader_epochs == [(0, 0), (1, 20)]
    # truncate-from-start(0) removes and re-adds (0, 0) => a flush of the cache content (docs/loading.md §6.11)
    assert pb.read(EPOCHS).decode() == "0\n2\n0 0\n1 20\n"
    assert not result.offline_dirs
