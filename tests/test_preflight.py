"""A load that makes a Kafka broker fail to start changes no byte anywhere (issue 13, finding 3).

Each start-up failure that can be known without recovering is put in the last of three data dirs, after
two dirs on which a load writes (an unclean one with a corrupt partition to recover and a clean one without
``.lock`` or checkpoints); the load must fail with Kafka's exception and leave every tree as it was.  Before
the preflight, each of these loads had rewritten files in the first dirs (and, for the partition-level
failures, in the failing dir) before it failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mploader import LoaderConfig, StartupFailedError, load_logs
from mploader.manager import written_dirs
from tests.fingerprint import tree_state
from tests.kafkadir import NOW, B, PartitionBuilder, data_dir, flip_bit, name


def _three_dirs(tmp_path: Path) -> list[Path]:
    d1 = data_dir(tmp_path, "d1", clean=False)
    pb = PartitionBuilder(d1, "orders", 0).std3()
    flip_bit(pb.file(10, ".log"), 72 * 4 + 40)  # a CRC failure in batch 14: recovery truncates, deletes S(20)
    (pb.file(0, ".index")).unlink()  # and a load-time index rebuild
    d2 = data_dir(tmp_path, "d2", clean=True)  # no .lock, no checkpoints: a load creates them, deletes the marker
    PartitionBuilder(d2, "orders", 1).segment(0, *(B(o) for o in range(5)))
    d3 = data_dir(tmp_path, "d3", clean=False, rp=[("other", 0, 0)])
    PartitionBuilder(d3, "other", 0).segment(0, *(B(o) for o in range(5)))
    return [d1, d2, d3]


def _lost_found(d3: Path) -> None:
    (d3 / "lost+found").mkdir()


def _partition_dir_link(d3: Path) -> None:
    target = d3.parent / "elsewhere" / "linked-0"
    PartitionBuilder(target.parent, "linked", 0).segment(0, B(0))
    (d3 / "linked-0").symlink_to(target, target_is_directory=True)


def _duplicate(d3: Path) -> None:
    PartitionBuilder(d3, "orders", 0).segment(0, B(0))  # orders-0 is in d1 too


def _epoch_checkpoint(d3: Path) -> None:
    (d3 / "other-0" / "leader-epoch-checkpoint").write_text("0\n1\n0 zero\n")  # NumberFormatException


def _segment_link(d3: Path) -> None:
    outside = d3.parent / "outside.log"
    outside.write_bytes(B(5))
    (d3 / "other-0" / name(5, ".log")).symlink_to(outside)


def _snapshot_name(d3: Path) -> None:
    (d3 / "other-0" / "x1.snapshot").write_bytes(b"")


def _index_name(d3: Path) -> None:
    (d3 / "other-0" / "12a.index").write_bytes(b"")


def _cleaned_name(d3: Path) -> None:
    (d3 / "other-0" / "abc.log.cleaned").write_bytes(b"")


def _topic_id(d3: Path) -> None:
    (d3 / "other-0" / "partition.metadata").write_text("version: 0\ntopic_id: not-a-uuid\n")


def _huge_segment(d3: Path) -> None:
    with open(d3 / "other-0" / name(100, ".log"), "wb") as f:
        f.truncate(2**31)  # sparse: over FileRecords' limit


FAILURES: dict[str, tuple[Callable[[Path], None], str]] = {
    "lost+found": (_lost_found, "KafkaException"),
    "partition dir is a link": (_partition_dir_link, "KafkaException"),
    "duplicate partition": (_duplicate, "IllegalStateException"),
    "leader-epoch checkpoint": (_epoch_checkpoint, "NumberFormatException"),
    "segment file is a link": (_segment_link, "KafkaException"),
    "snapshot name": (_snapshot_name, "NumberFormatException"),
    "index name": (_index_name, "NumberFormatException"),
    "cleaned name": (_cleaned_name, "NumberFormatException"),
    "topic id": (_topic_id, "IllegalArgumentException"),
    "segment over 2 GiB": (_huge_segment, "KafkaException"),
}


@pytest.mark.parametrize("dry_run", [False, True], ids=["real", "dry-run"])
@pytest.mark.parametrize("kind", list(FAILURES))
def test_a_start_up_failure_found_before_recovery_changes_no_byte(tmp_path: Path, kind: str, dry_run: bool) -> None:
    dirs = _three_dirs(tmp_path)
    break_it, kafka_exception = FAILURES[kind]
    break_it(dirs[2])
    before = {d: tree_state(d) for d in dirs}
    with pytest.raises(StartupFailedError) as e:
        load_logs([str(d) for d in dirs], LoaderConfig(dry_run=dry_run), now_ms=NOW)
    assert e.value.kafka_exception == kafka_exception, e.value
    assert {d: tree_state(d) for d in dirs} == before, "the failed load changed files"
    assert written_dirs(e.value) is None  # found before the first write: nothing to report


@pytest.mark.parametrize("kind", ["lost+found", "leader-epoch checkpoint", "duplicate partition"])
def test_without_the_fault_the_same_dirs_load_and_change(tmp_path: Path, kind: str) -> None:
    """The control: the dirs of the test above do change when loaded (so 'no byte changed' means something)."""
    dirs = _three_dirs(tmp_path)
    before = {d: tree_state(d) for d in dirs}
    result = load_logs([str(d) for d in dirs], LoaderConfig(), now_ms=NOW)
    assert not result.offline_dirs and len(result.logs) == 3
    after = {d: tree_state(d) for d in dirs}
    assert all(after[d] != before[d] for d in dirs)


def test_a_held_lock_in_the_last_dir_changes_no_byte_in_the_others(tmp_path: Path) -> None:
    dirs = _three_dirs(tmp_path)
    lock = dirs[2] / ".lock"
    lock.write_bytes(b"")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'r+'); fcntl.lockf(f, fcntl.LOCK_EX); "
         "print('locked', flush=True); sys.stdin.read()", str(lock)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = {d: tree_state(d) for d in dirs}
        with pytest.raises(StartupFailedError, match="locked by another process"):
            load_logs([str(d) for d in dirs], LoaderConfig(), now_ms=NOW)
        assert {d: tree_state(d) for d in dirs} == before
    finally:
        holder.communicate("", timeout=30)


def test_no_usable_data_dir_foreseen_changes_no_byte(tmp_path: Path) -> None:
    """Every dir offline (a file, and a dir whose marker is a non-empty directory): Kafka halts.  Before, the
    second dir got its ``.lock`` and two checkpoint files first."""
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    d = data_dir(tmp_path, "d", clean=False)
    PartitionBuilder(d, "t", 0).segment(0, B(0))
    (d / ".kafka_cleanshutdown").mkdir()
    (d / ".kafka_cleanshutdown" / "junk").write_text("x")
    before = tree_state(d)
    with pytest.raises(StartupFailedError, match="no usable data directory"):
        load_logs([str(a_file), str(d)], LoaderConfig(), now_ms=NOW)
    assert tree_state(d) == before


def test_an_offline_dir_among_live_ones_keeps_kafkas_outcome(tmp_path: Path) -> None:
    """Not a start-up failure: the dir with the non-empty marker directory goes offline after Kafka's writes
    in it (lock and checkpoint files), the other loads."""
    d = data_dir(tmp_path, "d", clean=False)
    (d / ".kafka_cleanshutdown").mkdir()
    (d / ".kafka_cleanshutdown" / "junk").write_text("x")
    good = data_dir(tmp_path, "good", clean=True)
    PartitionBuilder(good, "t", 0).segment(0, B(0))
    result = load_logs([str(d), str(good)], LoaderConfig(), now_ms=NOW)
    assert list(result.offline_dirs) == [str(d)] and "Errno 39" in result.offline_dirs[str(d)]
    assert {".lock", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint"} <= set(os.listdir(d))


def test_a_failure_only_recovery_finds_says_where_the_load_had_written(tmp_path: Path) -> None:
    """An active .index longer than segment.index.bytes: Kafka cuts it, then fails (docs/loading.md §6.9).
    That is known only after recovery; the error names the dirs already changed."""
    dirs = _three_dirs(tmp_path)
    pb = PartitionBuilder(dirs[1], "bad", 0).segment(0, *(B(o) for o in range(3)), indexes=False)  # clean dir
    pb.write(name(0, ".index"), bytes(128)).write(name(0, ".timeindex"), b"")
    with pytest.raises(StartupFailedError) as e:
        load_logs([str(d) for d in dirs], LoaderConfig(max_index_size=64), now_ms=NOW)
    assert e.value.kafka_exception == "IllegalArgumentException"
    written = written_dirs(e.value)
    assert written is not None and str(pb.path) in written and str(dirs[0] / "orders-0") in written
    assert any("found during recovery, after the load had changed files" in n for n in e.value.__notes__)


@pytest.mark.parametrize("kept_names, kept_partitions", [(100_000, 6), (0, 0), (10, 2)])
def test_the_preflight_leaves_its_listings_to_the_loader_within_a_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       kept_names: int, kept_partitions: int) -> None:
    """Each partition directory is listed once when the preflight's listing is kept (``preflight.LISTING_CACHE_NAMES``
    names at most, over all partitions), twice when it is not; the outcome is the same either way."""
    import mploader.disk.reader as reader
    from mploader.recovery import preflight

    d = data_dir(tmp_path, clean=True)
    for p in range(6):  # 5 files each: .log, .index, .timeindex, and the epoch and metadata checkpoints
        PartitionBuilder(d, "orders", p).segment(0, *(B(o) for o in range(3))).epochs((0, 0)).write(
            "partition.metadata", "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n")
    listed: list[str] = []
    scandir = os.scandir

    def counting(path: str) -> object:
        listed.append(os.path.basename(path))
        return scandir(path)

    monkeypatch.setattr(reader.os, "scandir", counting)
    monkeypatch.setattr(preflight, "LISTING_CACHE_NAMES", kept_names)
    result = load_logs([str(d)], LoaderConfig(), now_ms=NOW)
    assert sorted(lg.log_end_offset for lg in result.logs.values()) == [3] * 6
    per_partition = [listed.count(f"orders-{p}") for p in range(6)]
    assert per_partition == [1] * kept_partitions + [2] * (6 - kept_partitions)


def test_the_preflight_bounds_what_a_clean_load_scans(tmp_path: Path) -> None:
    """``clean_scans``: per partition, the bytes of the .log files a clean load recovers at load time for want of an
    .index, and of those with a .txnindex (recovered if it fails its check): what "auto" weighs, and what lets the
    pool skip a clean dir's plan."""
    from mploader.disk import RealDisk
    from mploader.format.names import DirKind
    from mploader.recovery.preflight import startup_failure
    from mploader.scan.plan import CleanScans

    d = data_dir(tmp_path, "d1", clean=True)
    pb = PartitionBuilder(d, "orders", 0)
    for base in (0, 10, 20, 30):
        pb.segment(base, *(B(o) for o in range(base, base + 10)))
    cfg = LoaderConfig().for_topic("orders")
    sized: list[CleanScans] = []
    assert startup_failure(RealDisk(), str(pb.path), DirKind.LIVE, cfg, clean_scans=sized) is None
    assert sized == [CleanScans(0, 0)]  # every segment indexed, no .txnindex: nothing to scan
    pb.file(10, ".index").unlink()
    pb.write(name(20, ".txnindex"), b"")
    pb.write(name(30, ".txnindex"), b"")
    pb.file(30, ".index").unlink()  # no .index: recovered, whatever its .txnindex
    assert startup_failure(RealDisk(), str(pb.path), DirKind.LIVE, cfg, clean_scans=sized) is None
    seg = {b: len(data) for b, data in pb.segments.items()}
    assert sized[1] == CleanScans(seg[10] + seg[30], seg[20]) and sized[1].bound == seg[10] + seg[20] + seg[30]
