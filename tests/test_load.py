"""Whole loads of real and generated data dirs: nothing valid is lost, a second load and a dry run
change nothing, and the API/CLI report what happened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatch

from mploader import LoaderConfig, StartupFailedError, TopicPartition, load_logs
from mploader.format.log import iter_entries
from tests.cli_json import validate
from tests.conftest import corpus_data_dirs
from tests.fingerprint import changed, tree_state
from tests.kafkadir import NOW, B, PartitionBuilder, data_dir


def kafka_python_valid_prefix(data: bytes) -> int:
    """Bytes of the leading entries that kafka-python (code nobody here wrote) finds CRC-valid."""
    valid = 0
    try:
        for pos, size, magic in iter_entries(data):
            chunk = bytearray(data[pos : pos + size])
            batch = DefaultRecordBatch(chunk) if magic >= 2 else LegacyRecordBatch(bytes(chunk), magic)
            if not batch.validate_crc():
                break
            valid = pos + size
    except Exception:  # noqa: BLE001 - anything kafka-python cannot read ends the valid prefix
        pass
    return valid


def log_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.log") if p.is_file())


def test_real_corpus_loads_without_losing_a_valid_byte(fresh_real_corpus: Path) -> None:
    dirs = corpus_data_dirs(fresh_real_corpus)
    assert len(dirs) >= 13
    before = {}
    for d in dirs:
        for p in log_files(d):
            data = p.read_bytes()
            before[p] = data[: kafka_python_valid_prefix(data)]
    logs = []
    for d in dirs:  # every corpus data dir comes from a different broker: load each on its own
        result = load_logs([str(d)], LoaderConfig(), now_ms=NOW)
        assert result.offline_dirs == {}
        logs.extend(result.logs.values())
    assert len(logs) > 300
    for p, valid in before.items():
        if "__cluster_metadata" in str(p):
            continue  # not loaded by the log manager
        assert p.exists(), f"{p} was deleted"
        assert p.read_bytes()[: len(valid)] == valid, f"valid bytes of {p} were changed or truncated"
    # every partition's log end is the next offset after its last valid batch
    for lg in logs:
        assert lg.log_end_offset >= lg.log_start_offset
        assert lg.recovery_point <= max(lg.log_end_offset, lg.log_start_offset)


def test_second_load_changes_nothing(fresh_real_corpus: Path) -> None:
    """A load deletes the clean-shutdown marker (as Kafka does), so every later load is unclean.  After an
    unclean load a second one finds nothing to do: every byte stays.  A dir that started clean is
    recovered by its second load (Kafka rebuilds indexes with its recovery rule, which may differ from
    the broker's append-time ones, and drops the snapshot at the log start), and its third load changes
    nothing."""
    dirs = [str(d) for d in corpus_data_dirs(fresh_real_corpus)]
    first = {d: load_logs([d], LoaderConfig(), now_ms=NOW) for d in dirs}
    s1 = tree_state(fresh_real_corpus)
    second = {d: load_logs([d], LoaderConfig(), now_ms=NOW) for d in dirs}
    s2 = tree_state(fresh_real_corpus)
    for d in dirs:
        rel = str(Path(d).relative_to(fresh_real_corpus)) + os.sep
        touched = [p for p in changed(s1, s2) if p.startswith(rel)]
        if not first[d].clean_shutdown[d]:
            assert touched == [], f"second load of unclean {d} changed {touched}"
        for tp, lg in first[d].logs.items():
            again = second[d].logs[tp]
            assert (again.log_end_offset, again.log_start_offset, again.segments, again.leader_epochs) == \
                (lg.log_end_offset, lg.log_start_offset, lg.segments, lg.leader_epochs)
            assert again.truncated_bytes == 0 and not again.deleted_files
    assert any(not r.clean_shutdown[d] for d, r in first.items())
    for d in dirs:
        load_logs([d], LoaderConfig(), now_ms=NOW)
    assert changed(s2, tree_state(fresh_real_corpus)) == []


def test_dry_run_changes_no_byte_and_reports_what_a_load_does(fresh_real_corpus: Path, tmp_path: Path) -> None:
    dirs = [str(d) for d in corpus_data_dirs(fresh_real_corpus)]
    before = tree_state(fresh_real_corpus)
    dry = [load_logs([d], LoaderConfig(dry_run=True), now_ms=NOW) for d in dirs]
    assert changed(before, tree_state(fresh_real_corpus)) == []
    real = [load_logs([d], LoaderConfig(), now_ms=NOW) for d in dirs]
    assert changed(before, tree_state(fresh_real_corpus)) != []  # the real load did recover something
    for a, b in zip(dry, real):
        assert a.to_json()["logs"] == b.to_json()["logs"]
        assert a.clean_shutdown == b.clean_shutdown


def _corrupt_broker(tmp_path: Path) -> tuple[Path, PartitionBuilder]:
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d).std3()
    log10 = bytearray(pb.read("00000000000000000010.log"))
    log10[72 * 4 + 40] ^= 0xFF  # a flipped byte inside batch 14: CRC fails
    pb.write("00000000000000000010.log", bytes(log10))
    return d, pb


@pytest.mark.parametrize("workers", [1, 2])
def test_dry_run_on_a_corrupt_unclean_log_matches_the_real_load(tmp_path: Path, workers: int) -> None:
    d, pb = _corrupt_broker(tmp_path)
    (pb.path / "00000000000000000000.index").unlink()  # a load-time recovery too (its writes stay in memory)
    before = tree_state(d)
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=workers)
    dry = load_logs([str(d)], cfg.replace(dry_run=True), now_ms=NOW)
    assert changed(before, tree_state(d)) == []
    real = load_logs([str(d)], cfg, now_ms=NOW)
    assert changed(before, tree_state(d)) != []
    log = real.logs[TopicPartition("t", 0)]
    assert log.log_end_offset == 14 and log.truncated_bytes == 720 - 72 * 4
    assert dry.to_json()["logs"] == real.to_json()["logs"]


def test_cli_load_passes_its_options_to_the_loader(tmp_path: Path, monkeypatch) -> None:
    """Each option of ``mploader load`` reaches the LoaderConfig that load_logs gets."""
    import mploader.cli.load as cli_load
    from mploader.cli import main

    seen: list[LoaderConfig] = []

    def fake_load_logs(dirs, cfg, now_ms=None, **options):  # type: ignore[no-untyped-def]
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(cli_load, "load_logs", fake_load_logs)
    with pytest.raises(SystemExit):
        main(["load", "--workers", "3", "--recovery-threads", "2", "--read-ahead", "64MiB", "--dry-run",
              "--create-missing", str(tmp_path)])  # an empty dir is a new data dir only with --create-missing
    (cfg,) = seen
    assert (cfg.segment_scan_workers_per_data_dir, cfg.num_recovery_threads_per_data_dir,
            cfg.read_ahead_bytes, cfg.dry_run) == (3, 2, 64 << 20, True)


def test_cli_load_json_and_exit_codes(tmp_path: Path) -> None:
    d, _ = _corrupt_broker(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-m", "mploader", "load", "--json", "--read-ahead", "64MiB", "--now-ms",
                          str(NOW), str(d)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = validate(json.loads(out.stdout))  # the published schema (docs/mploader-output.schema.json)
    (log,) = doc["logs"]
    assert (log["topic"], log["partition"], log["log_end_offset"]) == ("t", 0, 14)
    assert log["recovered_segments"] == [0, 10] and log["truncated_bytes"] == 432
    assert [s["base_offset"] for s in log["segments"]] == [0, 10]
    assert doc["clean_shutdown"] == {str(d): False} and doc["offline_dirs"] == {}
    human = subprocess.run([sys.executable, "-m", "mploader", "load", str(d)], capture_output=True, text=True,
                           env=env, timeout=120)
    assert human.returncode == 0 and "1 partition," in human.stdout
    usage = subprocess.run([sys.executable, "-m", "mploader", "load", "--workers", "0", str(d)],
                           capture_output=True, text=True, env=env, timeout=120)
    assert usage.returncode == 2
    usage = subprocess.run([sys.executable, "-m", "mploader", "load", "--read-ahead", "lots", str(d)],
                           capture_output=True, text=True, env=env, timeout=120)
    assert usage.returncode == 2 and "not a size" in usage.stderr
    (tmp_path / "lost+found").mkdir()
    (d / "lost+found").mkdir()
    fatal = subprocess.run([sys.executable, "-m", "mploader", "load", str(d)], capture_output=True, text=True,
                           env=env, timeout=120)
    assert fatal.returncode == 1 and "lost+found" in fatal.stderr


def test_offline_dir_exit_status(tmp_path: Path) -> None:
    d = data_dir(tmp_path, clean=True)
    PartitionBuilder(d).segment(0, B(0))
    (d / "recovery-point-offset-checkpoint").write_text("0\n2\nt 0 1\n")  # count says 2: IOException class
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-m", "mploader", "load", str(d)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 1 and "OFFLINE" in out.stdout


def test_bad_data_dirs_are_reported_with_their_path(tmp_path: Path) -> None:
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    good = data_dir(tmp_path, clean=True)
    r = load_logs([str(a_file), str(good)], LoaderConfig(), now_ms=NOW)
    assert str(a_file) in r.offline_dirs and "not a directory" in r.offline_dirs[str(a_file)]
    assert str(good) not in r.offline_dirs
    with pytest.raises(StartupFailedError, match="no usable data directory") as e:  # Kafka halts
        load_logs([str(a_file)], LoaderConfig(), now_ms=NOW)
    assert str(a_file) in str(e.value)
    with pytest.raises(StartupFailedError, match="duplicate log directory"):
        load_logs([str(tmp_path), str(tmp_path) + "/."], LoaderConfig(), now_ms=NOW)
    missing = tmp_path / "missing"
    r = load_logs([str(missing), str(good)], LoaderConfig(dry_run=True), now_ms=NOW)
    assert str(missing) in r.offline_dirs and not missing.exists()


def test_symlinked_partition_dir_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    PartitionBuilder(outside, dirname="t-0").segment(0, B(0))
    d = data_dir(tmp_path, clean=True)
    (d / "t-0").symlink_to(outside / "t-0")
    with pytest.raises(StartupFailedError, match="symbolic link"):
        load_logs([str(d)], LoaderConfig(), now_ms=NOW)


def test_symlinked_segment_file_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.log"
    outside.write_bytes(B(0))
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d).segment(0, B(0))
    (pb.path / "00000000000000000001.log").symlink_to(outside)
    with pytest.raises(StartupFailedError, match="symbolic link") as e:
        load_logs([str(d)], LoaderConfig(), now_ms=NOW)
    assert "00000000000000000001.log" in str(e.value)
    assert outside.read_bytes() == B(0)


def test_links_that_are_not_files_are_skipped_like_kafka(tmp_path: Path) -> None:
    """Kafka lists a partition dir's entries through File.isFile, which follows links: a dangling link
    (an editor's lock file) or a link to a directory is not a file, so it is skipped, not refused."""
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d).segment(0, B(0))
    (pb.path / ".#leader-epoch-checkpoint").symlink_to("user@host.1234:1700000000")
    (tmp_path / "elsewhere").mkdir()
    (pb.path / "00000000000000000005.log").symlink_to(tmp_path / "elsewhere")
    result = load_logs([str(d)], LoaderConfig(), now_ms=NOW)
    (log,) = result.logs.values()
    assert [s.base_offset for s in log.segments] == [0] and log.log_end_offset == 1
    assert (pb.path / ".#leader-epoch-checkpoint").is_symlink() and list((tmp_path / "elsewhere").iterdir()) == []


def test_a_write_never_follows_a_dangling_link_out_of_the_data_dir(tmp_path: Path) -> None:
    """A dangling link is skipped like Kafka's isFile skips it, but a snapshot written by its name would create
    the link's target outside the data dir: refused as a listed link is (start-up fails naming it); nothing
    outside is touched and the segment being recovered is not cut."""
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d).segment(0, B(0)).segment(1, B(1))
    outside = tmp_path / "outside" / "target"
    outside.parent.mkdir()
    link = pb.path / "00000000000000000001.snapshot"
    link.symlink_to(outside)
    with pytest.raises(StartupFailedError, match="dangling symbolic link") as e:
        load_logs([str(d)], LoaderConfig(), now_ms=NOW)
    assert e.value.path == str(link)
    assert list(outside.parent.iterdir()) == []
    assert pb.read("00000000000000000000.log") == B(0)


def test_scans_kept_for_recover_log_are_only_those_it_recovers_again(tmp_path: Path, monkeypatch) -> None:
    """An unclean partition whose 20 segments all lack their .index: each is recovered in the load phase,
    and recoverLog recovers again only the floor segment of the recovery point (190).  The scans kept
    for it are that one, not all 20 batch tables."""
    from mploader.recovery import loader as loader_mod

    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 195)])
    pb = PartitionBuilder(d)
    for base in range(0, 200, 10):
        pb.segment(base, *(B(o) for o in range(base, base + 10)))
        (pb.path / f"{base:020d}.index").unlink()
    held: list[int] = []
    real_put = loader_mod._ScanCache.put

    def put(self, path, scan):  # type: ignore[no-untyped-def]
        real_put(self, path, scan)
        held.append(len(self._scans))

    monkeypatch.setattr(loader_mod._ScanCache, "put", put)
    result = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=1), now_ms=NOW)
    (log,) = result.logs.values()
    assert log.log_end_offset == 200 and log.recovered_segments == list(range(0, 200, 10))
    assert result.stats.segments_scanned == 20  # the floor segment was read once, for both recoveries
    assert max(held) <= loader_mod._ScanCache.KEEP + 1


def test_log_over_2_gib_fails_like_kafka(tmp_path: Path) -> None:
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d).segment(0, B(0))
    with open(pb.file(0, ".log"), "r+b") as f:
        f.truncate(2**31)  # sparse: one byte over Integer.MAX_VALUE
    with pytest.raises(StartupFailedError, match="larger than the maximum segment size") as e:
        load_logs([str(d)], LoaderConfig(), now_ms=NOW)
    assert e.value.kafka_exception == "KafkaException" and "00000000000000000000.log" in str(e.value)


def test_index_longer_than_max_index_size(tmp_path: Path) -> None:
    """Kafka opens an existing index at whatever length it has.  Inactive segments' indexes stay as
    they are; resizing the active segment's longer index to segment.index.bytes cuts the file and
    then fails (AbstractIndex.resize restores a write position past the new end): start-up fails."""
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d).std3()
    big = pb.read("00000000000000000000.timeindex") + bytes(4000)
    pb.write("00000000000000000000.timeindex", big)
    load_logs([str(d)], LoaderConfig(max_index_size=1000), now_ms=NOW)
    assert pb.read("00000000000000000000.timeindex") == big
    assert len(pb.read("00000000000000000020.index")) == 1000
    assert len(pb.read("00000000000000000020.timeindex")) == 996
    pb.write("00000000000000000020.index", bytes(2000))
    (d / ".kafka_cleanshutdown").write_text("")
    with pytest.raises(StartupFailedError, match="holds more entries") as e:
        load_logs([str(d)], LoaderConfig(max_index_size=1000), now_ms=NOW)
    assert e.value.kafka_exception == "IllegalArgumentException"
    assert pb.read("00000000000000000020.index") == bytes(1000)


def test_file_vanishing_during_the_load_takes_the_dir_offline(tmp_path: Path, monkeypatch) -> None:
    """A segment listed but gone when opened (deleted by something else mid-load): Kafka's
    IOException; the partition is not loaded and the data dir goes offline, other partitions load."""
    from mploader.disk import RealDisk as Disk

    d = data_dir(tmp_path, clean=False)
    PartitionBuilder(d, topic="a").std3()
    gone = PartitionBuilder(d, topic="b").std3()
    real_size = Disk.size

    def size_after_vanish(self, path):  # type: ignore[no-untyped-def]
        if path == str(gone.file(10, ".log")) and gone.file(10, ".log").exists():
            gone.file(10, ".log").unlink()  # listed a moment ago, gone when the loader opens it
        return real_size(self, path)

    monkeypatch.setattr(Disk, "size", size_after_vanish)
    r = load_logs([str(d)], LoaderConfig(), now_ms=NOW)
    assert TopicPartition("a", 0) in r.logs and TopicPartition("b", 0) not in r.logs
    assert str(d) in r.offline_dirs and "00000000000000000010.log" in r.offline_dirs[str(d)]


def test_a_dir_goes_offline_after_another_partition_failed_the_load(tmp_path: Path, monkeypatch, caplog) -> None:
    """Kafka waits for every partition, then rethrows the first fatal error: a partition whose IOException came
    after it still takes its dir offline (logged)."""
    import logging

    import mploader.runners.threads as threads_mod

    d1, d2 = data_dir(tmp_path / "one", clean=False), data_dir(tmp_path / "two", clean=False)
    PartitionBuilder(d1, topic="a").std3()
    PartitionBuilder(d2, topic="b").std3()

    def failing(job, *args, **kwargs):  # type: ignore[no-untyped-def]
        if job.dir.startswith(str(d1)):
            raise RuntimeError("a bug")
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(threads_mod, "load_partition", failing)
    with caplog.at_level(logging.ERROR, logger="mploader.manager"), pytest.raises(RuntimeError, match="a bug"):
        load_logs([str(d1), str(d2)], LoaderConfig(num_recovery_threads_per_data_dir=1), now_ms=NOW)
    assert any(f"{d2} goes offline" in r.getMessage() for r in caplog.records), caplog.text


class _CountScans:
    """A Progress that counts Phase 1 scans per segment file (every scan reports here)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.scans = 0

    def start(self, partitions_per_dir):  # type: ignore[no-untyped-def]
        pass

    def partition_done(self, data_dir, partition):  # type: ignore[no-untyped-def]
        pass

    def segments_scanned(self, data_dir, segments, nbytes):  # type: ignore[no-untyped-def]
        self.scans += segments
        self.bytes += nbytes

    def close(self) -> None:
        pass


@pytest.mark.parametrize("workers", [1, 2])
def test_a_segment_kafka_recovers_twice_is_read_once(tmp_path: Path, workers: int) -> None:
    """docs/scenarios.md #33 (docs/loading.md §16a): Kafka recovers S(10) in the load phase and again in recoverLog,
    reading its bytes twice; mploader scans each segment once and keeps every effect of the two passes
    (S(20) kept, the hole at 15..19, the snapshot set)."""
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d).std3()
    log10 = bytearray(pb.read("00000000000000000010.log"))
    log10[360 + 65] ^= 0x01
    pb.write("00000000000000000010.log", bytes(log10))
    (pb.path / "00000000000000000010.index").unlink()
    sizes = {b: len(pb.segments[b]) for b in (0, 10, 20)}
    counter = _CountScans()
    r = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=workers), now_ms=NOW,
                  progress=counter)  # type: ignore[arg-type]
    log = r.logs[TopicPartition("t", 0)]
    assert [s.base_offset for s in log.segments] == [0, 10, 20] and log.log_end_offset == 30
    assert sorted(log.recovered_segments) == [0, 10, 20]
    assert counter.scans == 3 and r.stats.segments_scanned == 3  # Kafka: 4 reads (S(10) twice)
    assert counter.bytes == r.stats.bytes_read == sum(sizes.values())  # every byte read once
    assert sorted(f for f in pb.files() if f.endswith(".snapshot")) == [
        "00000000000000000010.snapshot", "00000000000000000020.snapshot", "00000000000000000030.snapshot"]


def test_a_dir_locked_by_a_running_broker_is_refused(tmp_path: Path) -> None:
    """Like a broker (LogManager.lockLogDirs), mploader takes the data dir's .lock for the load."""
    d = data_dir(tmp_path, clean=True)
    PartitionBuilder(d).segment(0, B(0))
    load_logs([str(d)], LoaderConfig(), now_ms=NOW)  # creates .lock and releases it afterwards
    assert (d / ".lock").exists()
    script = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); "
              "fcntl.lockf(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(30)")
    holder = subprocess.Popen([sys.executable, "-c", script, str(d / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(StartupFailedError, match="locked by another process"):
            load_logs([str(d)], LoaderConfig(), now_ms=NOW)
        with pytest.raises(StartupFailedError, match="locked by another process"):
            load_logs([str(d)], LoaderConfig(dry_run=True), now_ms=NOW)
    finally:
        holder.kill()
        holder.wait()
    load_logs([str(d)], LoaderConfig(), now_ms=NOW)


def test_many_recovered_segments_are_each_read_once_with_a_bounded_scan_cache(tmp_path: Path) -> None:
    """8 segments recovered, the seventh also in the load phase (no .index): 8 scans, every byte once,
    although only the latest few batch tables are kept (the load-phase one is kept until recoverLog
    comes back to it after six others)."""
    from mploader.recovery.loader import _ScanCache

    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d)
    for base in range(0, 80, 10):
        pb.segment(base, *(B(o) for o in range(base, base + 10)))
    (pb.path / "00000000000000000060.index").unlink()
    counter = _CountScans()
    r = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=1), now_ms=NOW,
                  progress=counter)  # type: ignore[arg-type]
    assert sorted(r.logs[TopicPartition("t", 0)].recovered_segments) == list(range(0, 80, 10))
    assert counter.scans == 8 and counter.bytes == 8 * 720

    cache = _ScanCache()
    scans = {f"{i}.log": object() for i in range(10)}
    cache.put("pinned.log", object())  # type: ignore[arg-type]
    cache.pin("pinned.log")
    for path, scan in scans.items():
        cache.put(path, scan)  # type: ignore[arg-type]
    assert list(cache._scans) == ["pinned.log", "6.log", "7.log", "8.log", "9.log"]


# ---- the impact report's "before" (recovery.impact.log_end_as_found)


@pytest.mark.parametrize("recovery_point", [10, 0], ids=["active-only", "every-segment"])
@pytest.mark.parametrize("damage", ["none", "flipped byte", "torn tail", "first segment cut"])
def test_the_log_end_as_found_is_read_off_the_active_segments_scan_where_it_proves_it(tmp_path, monkeypatch,
                                                                                      damage, recovery_point) -> None:
    """An unclean shutdown leaves the active segment's ``.index`` preallocated (zeros), so readNextOffset walks
    the whole segment.  Where the recovery's scan of that segment found it valid to its end, the report's
    "before" is read off the scan, with no walk, also when earlier segments are recovered first; where the scan
    stopped early, it is walked; where an earlier segment's cut deletes the active one, it is walked before that
    change.  Either way it is the value the walk gives on the files as they were.  (An active segment that cannot
    be read is an error of the environment: nothing is cut, tests/test_hostile_env.py.)"""
    from mploader.disk.real import RealDisk
    from mploader.recovery import impact, segment
    from tests.kafkadir import OFFSET_INDEX_FULL, flip_bit, load

    d = data_dir(tmp_path, clean=False, rp=[("t", 0, recovery_point)])
    pb = PartitionBuilder(d).segment(0, *(B(o) for o in range(10))).segment(10, *(B(o) for o in range(10, 40)))
    idx = pb.file(10, ".index")
    idx.write_bytes(idx.read_bytes().ljust(OFFSET_INDEX_FULL, b"\0"))
    log_path = pb.file(10, ".log")
    if damage == "flipped byte":
        flip_bit(log_path, log_path.stat().st_size - 30)  # in the last batch: the scan stops there
    elif damage == "torn tail":
        with open(log_path, "ab") as f:
            f.write(B(40)[:40])
    elif damage == "first segment cut":
        flip_bit(pb.file(0, ".log"), 100)
    expected = impact.log_end_as_found(RealDisk(), str(pb.path))  # walked, before any change
    walks: list[int] = []
    real = segment.last_entry

    def counting(buf, start, end, path=None):  # type: ignore[no-untyped-def]
        walks.append(start)
        return real(buf, start, end, path)

    monkeypatch.setattr(segment, "last_entry", counting)
    result = load(d, dry_run_first=False)
    (lg,) = result.logs.values()
    if damage == "first segment cut" and recovery_point == 10:  # segment 0 is not recovered: nothing is cut
        damage = "none"
    assert lg.log_end_offset_before == expected
    # the report's walk, where it is made, and readNextOffset's after the recovery (Kafka's own), but for a log whose
    # last segment was cut empty
    assert len(walks) == {"none": 1}.get(damage, 2), walks
    assert lg.log_end_offset == {"none": 40, "flipped byte": 39, "torn tail": 40, "first segment cut": 1}[damage]
