"""``mploader verify``: each kind of damage is named by file, position and reason, on 1 and 2 workers, and no
byte changes; healthy data (generated and real) is called healthy; the JSON holds to its schema."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mploader.cli.verify import report_lines
from mploader.config import LoaderConfig
from mploader.format import checkpoint, index, names
from mploader.generate import GeneratorConfig, generate
from mploader.scan.audit import AuditTask, audit_segment
from mploader.verify import VerifyReport, verify_logs
from mploader.verify.report import segment_healthy
from tests import cli_json
from tests.conftest import corpus_data_dirs
from tests.fingerprint import changed, tree_state

SMALL = GeneratorConfig(
    data_dirs=1, topics=2, partitions_per_topic=2, total_bytes=900_000, segment_bytes=64 * 1024, batch_bytes=4096,
    records_per_batch=8, transactional_fraction=0.4, idempotent_fraction=0.4, abort_fraction=0.5,
    max_transaction_batches=3, leader_epoch_changes=3, faults=0, seed=3,
)


def _validate(doc: dict[str, Any]) -> None:
    cli_json.validate(doc)


@pytest.fixture(scope="module")
def clean_broker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verify") / "clean"
    generate(out, SMALL.replace(clean_shutdown=True))
    return out / "data-0"


@pytest.fixture
def broker(clean_broker: Path, tmp_path: Path) -> Path:
    """A private copy of the clean broker's data dir, to damage."""
    dest = tmp_path / "data-0"
    shutil.copytree(clean_broker, dest)
    return dest


def _verify(d: Path, workers: int = 1) -> VerifyReport:
    """verify_logs, holding it to what every run must do: change no byte, give the same answer on 1 and 2
    workers, and a document that holds to the schema."""
    before = tree_state(d)
    report = verify_logs([d], LoaderConfig(segment_scan_workers_per_data_dir=workers))
    assert changed(before, tree_state(d)) == []
    doc = report.to_json()
    _validate({**doc, "command": "verify"})
    if workers == 1:
        other = verify_logs([d], LoaderConfig(segment_scan_workers_per_data_dir=2)).to_json()
        assert other["stats"]["workers_per_dir"] == 2
        assert {k: v for k, v in other.items() if k != "stats"} == {k: v for k, v in doc.items() if k != "stats"}
    return report


def _segments(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))


def _partition(d: Path, n: int = 0) -> Path:
    return sorted(p for p in d.iterdir() if p.is_dir())[n]


def _problems(report: VerifyReport) -> list[tuple[str, str, int | None, str]]:
    """(file name, field, position, text) of everything wrong."""
    out = []
    for p in report.partitions:
        for s in p.segments:
            if not segment_healthy(s):
                name = os.path.basename(s.path)
                if s.first_invalid_position is not None:
                    out.append((name, "log", s.first_invalid_position, s.reason or ""))
                for field, verdict in (("index", s.index), ("timeindex", s.timeindex), ("txnindex", s.txnindex)):
                    if verdict not in ("ok", "missing") or (verdict == "missing" and field != "txnindex"):
                        out.append((name, field, None, verdict))
        out += [(os.path.basename(f.file), "finding", f.position, f.reason) for f in p.findings]
    return out


def _batch_starts(log: Path) -> list[int]:
    scan = audit_segment(AuditTask(str(log), names.offset_from_file_name(log.name)))
    assert scan.first_invalid_position is None
    from mploader.scan import SegmentTask, scan_segment

    return [int(p) for p in scan_segment(SegmentTask(str(log), names.offset_from_file_name(log.name))).batches[
        "position"]]


# --------------------------------------------------------------------------------------------
# Healthy data


@pytest.mark.parametrize("workers", [1, 2])
def test_a_clean_generated_broker_is_healthy(clean_broker: Path, workers: int) -> None:
    report = _verify(clean_broker, workers)
    assert report.healthy, _problems(report)
    assert report.startup_failure is None
    assert all(p.recovery is not None and not p.recovery["truncated_segments"] for p in report.partitions)
    segs = [s for p in report.partitions for s in p.segments]
    assert sum(s.batches for s in segs) > 100 and all(s.valid_bytes == s.size_bytes for s in segs)
    # the transactional producers aborted some transactions: their .txnindex files were checked, and found right
    assert any(s.txnindex == "ok" for s in segs)


def test_the_real_corpus_is_healthy_but_for_the_files_github_lost(real_corpus: Path, real_corpus_source: Path) -> None:
    """Every data dir written by a real broker: the only problems verify finds are the index files the corpus
    README lists as lost (MISSING.tsv), and the .log lost beside its index files."""
    lost = set()
    for tsv in real_corpus_source.glob("*/MISSING.tsv"):
        for line in tsv.read_text().splitlines()[1:]:
            if line.strip():
                lost.add(os.path.basename(line.split("\t")[0]))
    assert lost
    seen = 0
    for d in corpus_data_dirs(real_corpus):
        report = verify_logs([d], LoaderConfig(segment_scan_workers_per_data_dir=1))
        for name, field, _pos, text in _problems(report):
            seen += 1
            if field == "finding":  # an index file whose .log is the one lost
                assert "without its .log" in text and name.split(".")[0] + ".log" in lost, (d, name, text)
            else:
                assert text == "missing" and name.replace(".log", "." + field) in lost, (d, name, field, text)
    assert seen  # the lost files were found


# --------------------------------------------------------------------------------------------
# Damage to a .log


def test_flipped_byte_below_the_recovery_point_is_named(broker: Path) -> None:
    part = _partition(broker)
    log = _segments(part)[1]  # below the recovery point: a clean load never reads it
    starts = _batch_starts(log)
    with open(log, "r+b") as f:
        f.seek(starts[3] + 40)
        b = f.read(1)
        f.seek(starts[3] + 40)
        f.write(bytes([b[0] ^ 0x5A]))
    report = _verify(broker)
    assert not report.healthy
    assert (log.name, "log", starts[3], "crc mismatch: record batch CRC mismatch") in [
        (n, f, p, t.split(" (")[0]) for n, f, p, t in _problems(report)]
    p = next(p for p in report.partitions if p.dir == str(part))
    assert p.recovery is not None and p.recovery["truncated_segments"] == []  # Kafka: clean, nothing read
    base = names.offset_from_file_name(log.name)
    assert f"  a load leaves segment(s) {base} as they are: Kafka's start-up does not read them" in \
        "\n".join(report_lines(report))


def test_generated_data_faults_are_named_where_the_manifest_says(tmp_path: Path) -> None:
    summary = generate(tmp_path / "b", SMALL.replace(faults=4, fault_kinds=("torn_tail", "flipped_byte",
                                                                            "zero_tail"), seed=9))
    report = _verify(Path(summary.data_dirs[0]))
    found = {(n, p) for n, f, p, _ in _problems(report) if f == "log"}
    assert summary.faults
    for fault in summary.faults:
        assert (fault.file, fault.valid_end) in found, (fault, found)


def test_zeroed_middle_segment(broker: Path) -> None:
    log = _segments(_partition(broker))[1]
    size = log.stat().st_size
    log.write_bytes(bytes(size))
    problems = _problems(_verify(broker))
    assert (log.name, "log", 0) in [(n, f, p) for n, f, p, _ in problems]
    assert any(n == log.name and f == "index" and "past the valid data" in t for n, f, _, t in problems)


def test_emptied_middle_segment(broker: Path) -> None:
    log = _segments(_partition(broker))[1]
    os.truncate(log, 0)
    problems = _problems(_verify(broker))
    assert any(n == log.name and f == "index" and "past the valid data (which ends at byte 0)" in t
               for n, f, _, t in problems), problems


def test_garbage_appended(broker: Path) -> None:
    log = _segments(_partition(broker))[0]
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x03\xe8garbage" * 20)
    problems = _problems(_verify(broker))
    assert [(n, f, p) for n, f, p, _ in problems if f == "log"] == [(log.name, "log", size)]


def test_offsets_going_backwards(broker: Path) -> None:
    log = _segments(_partition(broker))[0]
    starts = _batch_starts(log)
    # the base offset field of batch 2 is outside the CRC: set it to batch 0's, and the CRC still holds
    with open(log, "r+b") as f:
        first = f.read(8)
        f.seek(starts[2])
        f.write(first)
    problems = _problems(_verify(broker))
    hit = [(p, t) for n, f, p, t in problems if n == log.name and f == "log"]
    assert hit and hit[0][0] == starts[2] and "not above the previous batch's last offset" in hit[0][1]


# --------------------------------------------------------------------------------------------
# Damage to the indexes


def _rewrite_entries(path: Path, dtype: np.dtype, change: Any) -> None:
    entries = np.fromfile(path, dtype)
    change(entries)
    entries.tofile(path)


def _indexed_segment(part: Path, suffix: str, entries: int = 3) -> Path:
    size = 8 if suffix == names.INDEX_SUFFIX else 12
    return next(p for p in sorted(part.glob("*" + suffix)) if p.stat().st_size >= entries * size)


def test_index_entries_swapped(broker: Path) -> None:
    idx = _indexed_segment(_partition(broker), names.INDEX_SUFFIX)

    def swap(e: np.ndarray) -> None:
        e[[0, 1]] = e[[1, 0]]
    _rewrite_entries(idx, index.OFFSET_ENTRY, swap)
    assert any(n == idx.name.replace(".index", ".log") and f == "index" and t.startswith("entry 1: offset")
               for n, f, _, t in _problems(_verify(broker)))


def test_index_entry_inside_a_batch_and_out_of_range(broker: Path) -> None:
    part = _partition(broker)
    idx = _indexed_segment(part, names.INDEX_SUFFIX)
    log_name = idx.name.replace(".index", ".log")

    def inside(e: np.ndarray) -> None:
        e["position"][1] += 7
    _rewrite_entries(idx, index.OFFSET_ENTRY, inside)
    assert any(n == log_name and f == "index" and "inside a batch" in t for n, f, _, t in _problems(_verify(broker)))

    def beyond(e: np.ndarray) -> None:
        e["position"][1] -= 7
        e["position"][-1] = 1 << 30
    _rewrite_entries(idx, index.OFFSET_ENTRY, beyond)
    problems = _problems(_verify(broker))
    assert any(n == log_name and f == "index" and "past the valid data" in t for n, f, _, t in problems)


def test_time_index_timestamp_going_back(broker: Path) -> None:
    tidx = _indexed_segment(_partition(broker), names.TIME_INDEX_SUFFIX)

    def back(e: np.ndarray) -> None:
        e["timestamp"][1] = e["timestamp"][0] - 1
    _rewrite_entries(tidx, index.TIME_ENTRY, back)
    assert any(f == "timeindex" and t.startswith("entry 1: timestamp") for _, f, _, t in _problems(_verify(broker)))


def test_truncated_index(broker: Path) -> None:
    idx = _indexed_segment(_partition(broker), names.INDEX_SUFFIX)
    os.truncate(idx, idx.stat().st_size - 3)
    report = _verify(broker)
    assert any(f == "index" and "not a multiple of 8" in t for _, f, _, t in _problems(report))
    # a load would not rebuild it (nor recover its segment): the report says so, and what does
    base = names.offset_from_file_name(idx.name)
    [left] = [line for line in report_lines(report) if "a load leaves" in line]
    assert f".index / .timeindex of segment(s) {base} as they are" in left and "--index-check full" in left


def test_preallocated_indexes_are_judged_by_their_written_entries(broker: Path) -> None:
    """Kafka's TimeIndex.sanityCheck calls a preallocated .timeindex corrupt (its last slot reads timestamp 0);
    verify calls it right, and still finds a bad written entry in it."""
    part = _partition(broker)
    tidx = _indexed_segment(part, names.TIME_INDEX_SUFFIX)
    for p in (tidx, tidx.with_suffix(".index")):
        os.truncate(p, index.round_down(10 * 1024 * 1024, 12 if p == tidx else 8))
    assert _verify(broker).healthy

    def late(e: np.ndarray) -> None:
        e["relative_offset"][0] = 1 << 30
    _rewrite_entries(tidx, index.TIME_ENTRY, late)
    assert any(f == "timeindex" for _, f, _, _ in _problems(_verify(broker)))


def test_corrupt_txn_index(broker: Path) -> None:
    txn = next(broker.glob("*/*.txnindex"))

    def wrong_producer(e: np.ndarray) -> None:
        e["producer_id"][0] += 1
    _rewrite_entries(txn, index.TXN_ENTRY, wrong_producer)
    assert any(f == "txnindex" and "no abort marker of producer" in t for _, f, _, t in _problems(_verify(broker)))


def test_missing_index(broker: Path) -> None:
    idx = _indexed_segment(_partition(broker), names.INDEX_SUFFIX)
    idx.unlink()
    report = _verify(broker)
    assert (idx.name.replace(".index", ".log"), "index", None, "missing") in _problems(report)
    p = next(p for p in report.partitions if p.dir == str(idx.parent))
    assert p.recovery is not None and p.recovery["recovered_segments"]  # a load rebuilds it


# --------------------------------------------------------------------------------------------
# Damage to the other files


def test_corrupt_snapshot(broker: Path) -> None:
    snap = next(broker.glob("*/*.snapshot"))
    data = bytearray(snap.read_bytes())
    data[-1] ^= 0xFF
    snap.write_bytes(bytes(data))
    assert any(n == snap.name and f == "finding" and "CRC" in t for n, f, _, t in _problems(_verify(broker)))


def test_bad_leader_epoch_checkpoint(broker: Path) -> None:
    part = next(p for p in sorted(broker.iterdir()) if p.is_dir() and
                len(checkpoint.read_leader_epoch_checkpoint(p / checkpoint.LEADER_EPOCH_CHECKPOINT)) >= 2)
    path = part / checkpoint.LEADER_EPOCH_CHECKPOINT
    entries = checkpoint.read_leader_epoch_checkpoint(path)
    path.write_bytes(checkpoint.leader_epoch_checkpoint_bytes(entries[1:]))  # the first epoch dropped
    first_epoch = entries[0][0]
    assert any(n == path.name and f"epoch {first_epoch} " in t for n, _, _, t in _problems(_verify(broker)))
    path.write_bytes(b"0\n2\nnot an entry\n")
    assert any(n == path.name for n, _, _, _ in _problems(_verify(broker)))


def test_bad_partition_metadata(broker: Path) -> None:
    path = _partition(broker) / checkpoint.PARTITION_METADATA
    path.write_bytes(b"version: 0\ntopic_id: not-a-uuid\n")
    assert any(n == checkpoint.PARTITION_METADATA for n, _, _, _ in _problems(_verify(broker)))


def test_verify_takes_no_lock_and_reads_a_locked_dir(broker: Path) -> None:
    """A running broker holds the data dir's lock: verify still runs (a load's dry run would refuse)."""
    fd = os.open(broker / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        report = _verify(broker, workers=2)
        assert report.healthy and report.startup_failure is None
    finally:
        os.close(fd)


def test_startup_failure_is_reported_not_raised(broker: Path) -> None:
    (broker / "not a partition").mkdir()
    report = verify_logs([broker], LoaderConfig(segment_scan_workers_per_data_dir=1))
    assert not report.healthy and report.startup_failure is not None
    assert all(p.recovery is None for p in report.partitions)
    assert any("not a partition" in f.file for f in report.data_dirs[0].findings)


# --------------------------------------------------------------------------------------------
# The command


def test_cli_exit_codes_and_json(broker: Path, clean_broker: Path, tmp_path: Path) -> None:
    ok = cli_json.run("verify", "--json", str(clean_broker))
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    _validate(doc)
    assert doc["healthy"] and doc["summary"]["unhealthy_segments"] == 0
    log = _segments(_partition(broker))[0]
    with open(log, "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xff")
    bad = cli_json.run("verify", str(broker))
    assert bad.returncode == 1
    assert "NOT HEALTHY" in bad.stdout and f"segment {names.offset_from_file_name(log.name)}: invalid" in bad.stdout
    usage = cli_json.run("verify", "--json", str(tmp_path / "nope"))
    assert usage.returncode == 2 and json.loads(usage.stdout)["error"]["kind"] == "usage"


def test_a_data_dir_a_load_takes_offline_is_what_the_verdict_counts(tmp_path: Path) -> None:
    """A data dir with no partition whose recovery-point checkpoint is malformed: the verdict counts the dir (not
    "0 of 0 partitions"), and each finding names its file once."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "meta.properties").write_text("version=0\nbroker.id=0\n")
    (d / checkpoint.RECOVERY_POINT_CHECKPOINT).write_text("garbage\n")
    out = cli_json.run("verify", str(d))
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == "NOT HEALTHY: 1 of 1 data dir(s) have problems (listed above)"
    findings = [line for line in lines if line.startswith(f"{d}: ")]
    assert len(findings) == 2 and all(line.count(str(d / checkpoint.RECOVERY_POINT_CHECKPOINT)) == 1
                                      for line in findings), findings
    assert findings[1] == (f"{d}: a load would take this data dir offline: {d / checkpoint.RECOVERY_POINT_CHECKPOINT}"
                           f" line 1: malformed version line (7 characters)")


def test_audit_of_an_unreadable_log_is_a_row_not_an_exception(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    log = part / names.segment_file_name(0, names.LOG_SUFFIX)
    os.symlink(tmp_path / "gone", log)  # a dangling link: open fails
    audit = audit_segment(AuditTask(str(log), 0))
    assert audit.first_invalid_position == 0 and audit.reason is not None and audit.reason.startswith("unreadable")
    assert not segment_healthy(audit)


def test_txn_index_partial_entry(broker: Path) -> None:
    txn = next(broker.glob("*/*.txnindex"))
    with open(txn, "ab") as f:
        f.write(struct.pack(">h", 0))
    assert any(f == "txnindex" and "partial entry" in t for _, f, _, t in _problems(_verify(broker)))
