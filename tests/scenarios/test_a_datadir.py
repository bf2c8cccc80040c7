"""docs/scenarios.md section A: data directory level (Kafka's LogManager), scenarios 1-13."""

from __future__ import annotations

import os

import pytest

import tests.faults
from mploader import DirKind, StartupFailedError, TopicPartition
from mploader.metrics import REMAINING_LOGS_TO_RECOVER, REMAINING_SEGMENTS_TO_RECOVER
from tests.kafkadir import (
    B,
    PartitionBuilder,
    append_bytes,
    assert_gone,
    data_dir,
    dir_entry,
    dir_in,
    load,
    name,
    parse_offset_checkpoint_text,
    same_path,
    segment_layout,
    snapshot_offsets,
    std3_batches,
    tree_bytes,
    txn_entry,
)

TP = TopicPartition("t", 0)
MARKER = ".kafka_cleanshutdown"
RP_FILE = "recovery-point-offset-checkpoint"
LSO_FILE = "log-start-offset-checkpoint"
UUID = "0123456789abcdef0123456789abcdef"


def std3(d, topic="t", partition=0, dirname=None) -> PartitionBuilder:
    pb = PartitionBuilder(d, topic=topic, partition=partition, dirname=dirname).std3()
    for base in (0, 10, 20):
        assert len(pb.read(name(base, ".log"))) == 720
    assert len(B(0)) == 72
    return pb


def std3_with_tail(d, tail: bytes = b"\xff" * 5) -> PartitionBuilder:
    pb = std3(d)
    append_bytes(pb.file(20, ".log"), tail)
    assert pb.file(20, ".log").stat().st_size == 720 + len(tail)
    return pb


# ------------------------------------------------------------------------------------------------
# 1. Clean marker is honoured and deleted before loading


def test_s01_clean_marker_honoured_and_deleted(tmp_path):
    d = data_dir(tmp_path, clean=True)
    assert (d / MARKER).read_bytes() == b'{"version":0,"brokerEpoch":0}'
    pb = std3_with_tail(d)  # S(20) = 725 bytes; RP absent

    result = load(d)

    assert dir_entry(result.clean_shutdown, d) is True
    assert not (d / MARKER).exists()
    log = result.logs[TP]
    assert log.clean_shutdown is True
    assert log.recovered_segments == []
    assert log.truncated_bytes == 0
    assert pb.file(20, ".log").stat().st_size == 725  # no recovery: the 5 trailing bytes stay
    assert pb.read(name(20, ".log"))[:720] == std3_batches(20)
    assert log.log_end_offset == 30  # the trailing 5 bytes (<= 17) end the LEO scan silently
    assert log.loader_recovery_point == 30  # clean: RPout = LEO
    assert log.recovery_point == 30
    assert log.log_start_offset == 0
    assert segment_layout(log) == [(0, 720), (10, 720), (20, 725)]


def test_s01_marker_gone_even_when_partition_load_fails(tmp_path):
    """A failure of the bytes (a malformed leader-epoch checkpoint: Kafka's IOException for the content)."""
    d = data_dir(tmp_path, clean=True)
    pb = std3_with_tail(d)
    pb.write("leader-epoch-checkpoint", "0\n2\n0 0\n")  # says 2 entries, holds 1

    result = load(d)

    assert not (d / MARKER).exists()
    assert dir_entry(result.clean_shutdown, d) is True
    assert TP not in result.logs
    assert dir_in(result.offline_dirs, d)


def test_s01_marker_kept_when_the_environment_fails_the_partition(tmp_path):
    """mploader's departure (docs/loading.md §18): an I/O error is the environment's; the marker stays, so that the
    load after the fix is clean again."""
    d = data_dir(tmp_path, clean=True)
    pb = std3_with_tail(d)

    with tests.faults.io_error_on(pb.file(0, ".log")):
        result = load(d)

    assert (d / MARKER).exists()
    assert TP not in result.logs
    assert dir_in(result.offline_dirs, d)
    again = load(d)
    assert not (d / MARKER).exists() and again.logs[TP].clean_shutdown is True


# ------------------------------------------------------------------------------------------------
# 2. No marker => unclean; a crash during loading stays unclean


def test_s02_no_marker_is_unclean_and_active_segment_recovered(tmp_path):
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 30)])
    pb = std3_with_tail(d)

    result = load(d)

    assert dir_entry(result.clean_shutdown, d) is False
    log = result.logs[TP]
    assert log.clean_shutdown is False
    assert log.recovered_segments == [20]  # floor of RP 30 is S(20)
    assert log.truncated_bytes == 5
    assert pb.read(name(20, ".log")) == std3_batches(20)  # truncated back to 720 bytes
    assert log.log_end_offset == 30
    assert log.loader_recovery_point == 30  # min(30, 30)
    assert log.recovery_point == 30
    assert segment_layout(log) == [(0, 720), (10, 720), (20, 720)]


def test_s02_variant_marker_gone_after_aborted_load_next_load_unclean(tmp_path):
    d = data_dir(tmp_path, clean=True)
    pb = std3_with_tail(d)
    # a fatal error inside the partition load (docs/formats.md §11: positive first version byte => KafkaException)
    bad = txn_entry(1, 12, 15, 12, version=0x0100)
    assert len(bad) == 34 and bad[0] == 0x01
    pb.write(name(10, ".txnindex"), bad)

    with pytest.raises(StartupFailedError):
        load(d)
    assert not (d / MARKER).exists()  # deleted before any partition loaded

    os.remove(pb.file(10, ".txnindex"))
    result = load(d)

    assert dir_entry(result.clean_shutdown, d) is False
    log = result.logs[TP]
    assert log.clean_shutdown is False
    assert log.recovered_segments == [0, 10, 20]  # RP absent => 0
    assert pb.file(20, ".log").stat().st_size == 720
    assert log.log_end_offset == 30


# ------------------------------------------------------------------------------------------------
# 3. Marker content is irrelevant


def test_s03_marker_content_irrelevant(tmp_path):
    markers = [b"", b'{"version":0,"brokerEpoch":10,"unknown":123}', b"garbage"]
    dirs = []
    for i, m in enumerate(markers):
        d = data_dir(tmp_path, f"d{i}", clean=True, marker=m)
        assert (d / MARKER).read_bytes() == m
        std3(d, topic=f"topic{i}")
        dirs.append(d)

    result = load(dirs)

    for i, d in enumerate(dirs):
        assert dir_entry(result.clean_shutdown, d) is True
        assert not (d / MARKER).exists()
        log = result.logs[TopicPartition(f"topic{i}", 0)]
        assert log.clean_shutdown is True
        assert log.recovered_segments == []
        assert log.log_end_offset == 30
    assert result.offline_dirs == {}


# ------------------------------------------------------------------------------------------------
# 4. Missing checkpoint files


def test_s04_missing_checkpoint_files_created_empty(tmp_path):
    d = data_dir(tmp_path, clean=False)  # no recovery-point / log-start-offset checkpoint files
    assert not (d / RP_FILE).exists() and not (d / LSO_FILE).exists()
    std3(d)

    result = load(d)

    assert (d / RP_FILE).read_bytes() == b""
    assert (d / LSO_FILE).read_bytes() == b""
    log = result.logs[TP]
    assert log.recovered_segments == [0, 10, 20]
    assert log.log_end_offset == 30
    assert log.loader_recovery_point == 0
    assert log.log_start_offset == 0
    assert log.recovery_point == 0
    assert result.offline_dirs == {}


# ------------------------------------------------------------------------------------------------
# 5. Malformed recovery-point checkpoint (IOException class)

MALFORMED_RP = {
    "count_mismatch": "0\n2\nt 0 30\n",
    "version_1": "1\n1\nt 0 30\n",
    "version_leading_space": " 0\n1\nt 0 30\n",
    "two_fields": "0\n1\nt 0\n",
    "empty_line": "0\n1\n\n",
    "leading_space_entry": "0\n1\n t 0 30\n",
}


@pytest.mark.parametrize("content", list(MALFORMED_RP.values()), ids=list(MALFORMED_RP))
def test_s05_malformed_recovery_point_checkpoint(tmp_path, content):
    d = data_dir(tmp_path, clean=False)
    (d / RP_FILE).write_text(content)
    pb = std3(d)

    result = load(d)

    log = result.logs[TP]  # loading of the dir still completes
    assert log.recovered_segments == [0, 10, 20]  # RP map empty => RP 0 (with "t 0 30" only S(20))
    assert log.loader_recovery_point == 0
    assert log.log_end_offset == 30
    assert dir_in(result.offline_dirs, d)  # reported to the log-dir failure channel
    assert pb.file(20, ".log").stat().st_size == 720


def test_s05_malformed_checkpoint_in_a_dir_without_partitions_still_offline(tmp_path):
    # Nothing to load, but the checkpoint was still read and failed: the dir is reported offline all the same.
    d = data_dir(tmp_path, clean=False)
    (d / RP_FILE).write_text(MALFORMED_RP["version_1"])
    healthy = data_dir(tmp_path, "d2", clean=False)
    std3(healthy)

    result = load([d, healthy])

    assert "unrecognised version 1" in dir_entry(result.offline_dirs, d)
    assert not dir_in(result.offline_dirs, healthy)
    assert result.logs[TP].log_end_offset == 30


def test_s05_malformed_log_start_checkpoint_same_rule(tmp_path):
    # docs/loading.md §3: the same handling applies to log-start-offset-checkpoint: map empty, dir offline.
    d = data_dir(tmp_path, clean=True)
    (d / LSO_FILE).write_text("0\n2\nt 0 15\n")
    std3(d)

    result = load(d)

    log = result.logs[TP]
    assert log.log_start_offset == 0
    assert log.leader_epochs == [(0, 0)]
    assert dir_in(result.offline_dirs, d)


# ------------------------------------------------------------------------------------------------
# 6. Non-numeric field in a checkpoint (NumberFormatException class)


def test_s06_non_numeric_checkpoint_field_not_offline(tmp_path):
    d = data_dir(tmp_path, clean=False)
    (d / RP_FILE).write_text("0\n1\nt x 30\n")
    std3(d)

    result = load(d)

    log = result.logs[TP]
    assert log.recovered_segments == [0, 10, 20]
    assert log.loader_recovery_point == 0
    assert log.log_end_offset == 30
    assert not dir_in(result.offline_dirs, d)


# ------------------------------------------------------------------------------------------------
# 7. Checkpoint lexical rules


def test_s07_checkpoint_lexical_rules(tmp_path):
    d = data_dir(tmp_path, clean=False)
    (d / RP_FILE).write_text("0\n3\nt 0 20\nu\t1   7   \nt 0 25\n")
    std3(d)
    std3(d, topic="u", partition=1)

    result = load(d)

    t0 = result.logs[TP]
    assert t0.recovered_segments == [20]  # RP 25 (last duplicate wins), floor segment 20
    assert t0.loader_recovery_point == 25  # min(25, 30)
    assert t0.recovery_point == 25
    assert t0.log_end_offset == 30
    u1 = result.logs[TopicPartition("u", 1)]
    assert u1.recovered_segments == [0, 10, 20]  # RP 7, floor segment 0
    assert u1.loader_recovery_point == 7
    assert result.offline_dirs == {}


# ------------------------------------------------------------------------------------------------
# 8. Directory filtering


def _filtered_entries(d):
    ric = d / "remote-log-index-cache"
    ric.mkdir()
    (ric / "00000000000000000000_abc.index").write_bytes(b"\x01\x02\x03")
    (ric / "junk.txt").write_text("arbitrary")
    meta = d / "__cluster_metadata-0"
    meta.mkdir()
    (meta / name(0, ".log")).write_bytes(B(0) + b"\xff" * 5)
    (meta / name(0, ".index")).write_bytes(b"\x20\x20")
    (meta / "quorum-state").write_text('{"leaderId":1}')
    (d / "notes.txt").write_text("not a partition")
    return {p: tree_bytes(d / p) if (d / p).is_dir() else (d / p).read_bytes()
            for p in ("remote-log-index-cache", "__cluster_metadata-0", "notes.txt")}


def test_s08_directory_filtering(tmp_path):
    d = data_dir(tmp_path, clean=False)
    before = _filtered_entries(d)
    std3(d)

    result = load(d)

    assert set(result.logs) == {TP}
    assert result.future_logs == {} and result.logs_to_delete == [] and result.stray_logs == []
    after = {p: tree_bytes(d / p) if (d / p).is_dir() else (d / p).read_bytes() for p in before}
    assert after == before
    assert result.logs[TP].log_end_offset == 30


def test_s08_variant_lost_and_found_is_fatal(tmp_path):
    d = data_dir(tmp_path, clean=False)
    _filtered_entries(d)
    std3(d)
    (d / "lost+found").mkdir()

    with pytest.raises(StartupFailedError) as ei:
        load(d)
    assert ei.value.kafka_exception == "KafkaException"


# ------------------------------------------------------------------------------------------------
# 9. Partition directory name parsing


def test_s09_partition_directory_names_parse(tmp_path):
    d = data_dir(tmp_path, clean=True)
    names = ["t-0", "my.topic-12", f"t-0.{UUID}-delete", f"t-3.{UUID}-future", f"s-5.{UUID}-stray",
             "foo--1", "t-+1"]
    for n in names:
        (d / n).mkdir()

    result = load(d)

    assert set(result.logs) == {TopicPartition("t", 0), TopicPartition("my.topic", 12),
                                TopicPartition("foo-", 1), TopicPartition("t", 1)}
    assert same_path(result.logs[TopicPartition("t", 1)].dir, d / "t-+1")
    assert same_path(result.logs[TopicPartition("foo-", 1)].dir, d / "foo--1")
    for log in result.logs.values():
        assert log.kind is DirKind.LIVE
    assert set(result.future_logs) == {TopicPartition("t", 3)}
    assert result.future_logs[TopicPartition("t", 3)].kind is DirKind.FUTURE
    assert [(lg.topic_partition, lg.kind) for lg in result.logs_to_delete] == [(TopicPartition("t", 0), DirKind.DELETE)]
    assert [(lg.topic_partition, lg.kind) for lg in result.stray_logs] == [(TopicPartition("s", 5), DirKind.STRAY)]


@pytest.mark.parametrize("bad", ["t", "-0", "t-", "t-x", "t-0-delete", f"t-0.{UUID}-future "])
def test_s09_partition_directory_name_errors_are_fatal(tmp_path, bad):
    d = data_dir(tmp_path, clean=True)
    (d / "t-0").mkdir()
    (d / bad).mkdir()

    with pytest.raises(StartupFailedError) as ei:
        load(d)
    assert ei.value.kafka_exception == "KafkaException"


# ------------------------------------------------------------------------------------------------
# 10. IOException in one partition


def test_s10_io_error_in_one_partition(tmp_path):
    d = data_dir(tmp_path, clean=True)
    std3(d, topic="a")
    b = std3(d, topic="b")

    with tests.faults.io_error_on(b.file(0, ".log")):
        result = load(d)

    assert TopicPartition("b", 0) not in result.logs
    assert all(lg.topic_partition != TopicPartition("b", 0) for lg in result.all_logs())
    a = result.logs[TopicPartition("a", 0)]
    assert a.log_end_offset == 30 and a.recovered_segments == []
    assert dir_in(result.offline_dirs, d)


def test_s10_storage_exception_with_io_cause_is_swallowed(tmp_path):
    # docs/formats.md §14: a malformed leader-epoch-checkpoint (IOException class) => KafkaStorageException after the
    # dir was reported offline => this partition is not loaded, the others are, no startup failure.
    d = data_dir(tmp_path, clean=True)
    std3(d, topic="a")
    std3(d, topic="b").write("leader-epoch-checkpoint", "1\n0\n")

    result = load(d)

    assert TopicPartition("b", 0) not in result.logs
    assert result.logs[TopicPartition("a", 0)].log_end_offset == 30
    assert dir_in(result.offline_dirs, d)


# ------------------------------------------------------------------------------------------------
# 11. Same partition in two data dirs


def test_s11_same_partition_in_two_data_dirs_is_fatal(tmp_path):
    d1 = data_dir(tmp_path, "d1", clean=True)
    d2 = data_dir(tmp_path, "d2", clean=True)
    std3(d1)
    std3(d2)

    with pytest.raises(StartupFailedError) as ei:
        load([d1, d2])
    assert ei.value.kafka_exception == "IllegalStateException"


def test_s11_current_plus_future_is_fine(tmp_path):
    d1 = data_dir(tmp_path, "d1", clean=True)
    d2 = data_dir(tmp_path, "d2", clean=True)
    std3(d1)
    std3(d2, dirname=f"t-0.{UUID}-future")

    result = load([d1, d2])

    assert same_path(result.logs[TP].data_dir, d1)
    assert result.logs[TP].kind is DirKind.LIVE
    fut = result.future_logs[TP]
    assert same_path(fut.data_dir, d2)
    assert fut.kind is DirKind.FUTURE
    assert fut.log_end_offset == 30


# ------------------------------------------------------------------------------------------------
# 12. Recovery progress metrics


def test_s12_recovery_progress_metrics(tmp_path, metrics_registry):
    dirs = []
    for i, topic in enumerate(("a", "b")):
        d = data_dir(tmp_path, f"d{i}", clean=False, rp=[(topic, 0, 0)])
        pb = PartitionBuilder(d, topic=topic)
        pb.segment(0, std3_batches(0))
        pb.segment(10, std3_batches(10))
        dirs.append(d)

    result = load(dirs, metrics=metrics_registry, num_recovery_threads_per_data_dir=2)

    reg = metrics_registry
    for d, topic in zip(dirs, ("a", "b")):
        dpath = os.path.abspath(d)
        assert result.logs[TopicPartition(topic, 0)].recovered_segments == [0, 10]
        logs_vals = [v for v in reg.values_of(REMAINING_LOGS_TO_RECOVER, dir=dpath) if v is not None]
        assert logs_vals and logs_vals[0] == 1 and logs_vals[-1] == 0
        # SPEC NOTE: threadNum is Kafka's 0-based pool thread index (log-recovery-<dir>-<i>), i < 2
        thread_nums = {dict(e.tags)["threadNum"] for e in reg.history
                       if e.name == REMAINING_SEGMENTS_TO_RECOVER and dict(e.tags).get("dir") == dpath}
        assert thread_nums and thread_nums <= {"0", "1"}
        # which of the 2 threads takes the partition is not fixed: exactly one of them recovers it
        seqs = {n: [v for v in reg.values_of(REMAINING_SEGMENTS_TO_RECOVER, dir=dpath, threadNum=n) if v is not None]
                for n in thread_nums}
        used = {n: s for n, s in seqs.items() if s}
        assert len(used) == 1, seqs
        assert list(used.values())[0] == [2, 1, 0]
    # all gauges are unregistered when loading completes
    assert not [k for k in reg.current() if k[0] in (REMAINING_LOGS_TO_RECOVER, REMAINING_SEGMENTS_TO_RECOVER)]


# ------------------------------------------------------------------------------------------------
# 13. Checkpoint and marker content Kafka writes afterwards


def test_s13_reported_offsets_and_effects_for_next_checkpoint(tmp_path):
    d = data_dir(tmp_path, clean=True, lso=[("t", 0, 15)])
    lso_before = (d / LSO_FILE).read_text()
    t = std3(d)
    for sfx in (".log", ".index", ".timeindex"):  # retention removed S(0)
        os.remove(t.file(0, sfx))
    u = std3(d, topic="u")

    result = load(d)

    tl = result.logs[TP]
    assert tl.log_start_offset == 15
    assert tl.recovery_point == 30  # RPeff = max(RPout 30, 15)
    assert tl.loader_recovery_point == 30
    assert tl.log_end_offset == 30
    assert tl.recovered_segments == []
    assert tl.leader_epochs == [(0, 15)]
    assert t.read("leader-epoch-checkpoint") == b"0\n1\n0 15\n"
    assert_gone(t.path, name(10, ".snapshot"))  # 10 <= log start checkpoint 15
    # SPEC NOTE: the remaining set {20, 30} is derived (docs/loading.md §6.13/§6.14); docs/scenarios.md #13 names only
    # the deletion
    assert snapshot_offsets(t.path) == {20, 30}
    ul = result.logs[TopicPartition("u", 0)]
    assert ul.log_start_offset == 0
    assert ul.recovery_point == 30
    assert ul.leader_epochs == [(0, 0)]
    assert u.read("leader-epoch-checkpoint") == b"0\n1\n0 0\n"
    assert snapshot_offsets(u.path) == {10, 20, 30}

    # loading writes no marker (only a clean shutdown does)
    assert not (d / MARKER).exists()
    # mploader does not write checkpoints at load by default; if it does, they must equal Kafka's first
    # periodic checkpoint (compared as sets: Kafka's entry order is hash-map order)
    rp_text = (d / RP_FILE).read_text()
    if rp_text:
        assert parse_offset_checkpoint_text(rp_text) == {("t", 0): 30, ("u", 0): 30}
    lso_text = (d / LSO_FILE).read_text()
    if lso_text != lso_before:
        assert parse_offset_checkpoint_text(lso_text) == {("t", 0): 15}  # u-0 omitted: logStart = first base


def test_s13_marker_bytes_written_by_clean_shutdown():
    from mploader.format.checkpoint import clean_shutdown_marker_bytes

    assert clean_shutdown_marker_bytes(3) == b'{"version":0,"brokerEpoch":3}'
