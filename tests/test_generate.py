"""The generator writes what a Kafka broker leaves, and its manifest tells the truth.

Everything is read back from the files, with mploader.format and independently with
kafka-python; the rules (index entries, producer state, leader epochs, aborted transactions)
are re-derived here from the batches themselves, not taken from the generator.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from mploader import cli
from mploader.cli.units import parse_size
from mploader.errors import CorruptSnapshotError
from mploader.format import checkpoint, index, log as logfmt, names, records, snapshot
from mploader.generate import (
    DATA_FAULTS,
    FAULT_KINDS,
    Callback,
    GeneratorConfig,
    generate,
    iter_manifest,
    read_manifest,
)
from tests.log_readout import read_log

SMALL = GeneratorConfig(
    data_dirs=2, topics=2, partitions_per_topic=3, total_bytes=1_200_000, segment_bytes=64 * 1024,
    batch_bytes=4096, records_per_batch=8, index_interval_bytes=4096, transactional_fraction=0.4,
    idempotent_fraction=0.4, abort_fraction=0.4, max_transaction_batches=3, leader_epoch_changes=4,
    producer_restart_probability=0.02, delete_records_fraction=0.5, faults=0, seed=11,
)
OFFSET_INDEX_PREALLOCATED = 10485760
TIME_INDEX_PREALLOCATED = 10485756


@pytest.fixture(scope="module")
def unclean(tmp_path_factory):
    out = tmp_path_factory.mktemp("unclean") / "broker"
    generate(out, SMALL)
    return out, read_manifest(out)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "broker"
    generate(out, SMALL.replace(clean_shutdown=True, compression="gzip", seed=12))
    return out, read_manifest(out)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    out = tmp_path_factory.mktemp("faulty") / "broker"
    summary = generate(out, SMALL.replace(faults=30, seed=5, topics=3))
    return out, read_manifest(out), summary


def partition_path(out: Path, p: dict) -> Path:
    return out / p["dir"] / names.partition_dir_name(names.TopicPartition(p["topic"], p["partition"]))


def seg_file(out: Path, p: dict, base: int, suffix: str) -> Path:
    return partition_path(out, p) / names.segment_file_name(base, suffix)


def read_batches(data: bytes) -> list[tuple[int, records.BatchHeader]]:
    """(position, header) of every entry; each must be a CRC-valid v2 batch."""
    out = []
    for pos, size, magic in logfmt.iter_entries(data):
        assert magic == records.MAGIC_V2
        h = records.ensure_valid(data, pos)
        assert h.size == size
        out.append((pos, h))
    return out


def row_of(pos: int, h: records.BatchHeader, data: bytes) -> dict:
    control = None
    if h.is_control:
        control = records.read_end_txn_marker(data, pos, h).type.name
    return {
        "position": pos, "size": h.size, "base_offset": h.base_offset, "last_offset": h.last_offset,
        "records": h.records_count, "max_timestamp": h.max_timestamp, "leader_epoch": h.partition_leader_epoch,
        "producer_id": h.producer_id, "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence,
        "transactional": h.is_transactional, "control": control,
    }


def expected_indexes(batches: list[tuple[int, records.BatchHeader]], interval: int, final_time_entry: bool):
    """docs/loading.md §7.1, written again here."""
    offsets, times = [], []
    max_ts, max_ts_off = -1, None
    last_indexed = 0
    for pos, h in batches:
        if h.max_timestamp > max_ts:
            max_ts, max_ts_off = h.max_timestamp, h.last_offset
        if pos - last_indexed > interval:
            offsets.append((h.last_offset, pos))
            if max_ts > (times[-1][0] if times else -1):
                times.append((max_ts, max_ts_off))
            last_indexed = pos
    if final_time_entry and max_ts > (times[-1][0] if times else -1):
        times.append((max_ts, max_ts_off))
    return offsets, times


def all_partitions(m: dict):
    return list(m["partitions"].values())


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["unclean", "clean"])
def test_batches_are_valid_and_match_the_manifest(which, request):
    out, m = request.getfixturevalue(which)
    assert m["complete"] and m["totals"]["partitions"] == 6
    assert len(all_partitions(m)) == 6
    total_batches = 0
    for p in all_partitions(m):
        segs = p["segments"]
        assert segs and segs[0]["base_offset"] == p["first_segment_base"]
        assert [s["active"] for s in segs] == [False] * (len(segs) - 1) + [True]
        expected_next = p["first_segment_base"]
        for s in segs:
            assert s["base_offset"] == expected_next
            data = seg_file(out, p, s["base_offset"], ".log").read_bytes()
            assert len(data) == s["size"] <= SMALL.segment_bytes
            batches = read_batches(data)
            assert [row_of(pos, h, data) for pos, h in batches] == s["batches"]
            for _pos, h in batches:
                assert h.base_offset == expected_next  # offsets are dense
                expected_next = h.last_offset + 1
            assert s["next_offset"] == expected_next
            total_batches += len(batches)
        assert p["log_end_offset"] == expected_next
    assert total_batches == m["totals"]["batches"]
    # the mix is realistic: plain, idempotent and transactional batches, both markers
    rows = [b for p in all_partitions(m) for s in p["segments"] for b in s["batches"]]
    assert any(b["producer_id"] < 0 for b in rows)
    assert any(b["producer_id"] >= 0 and not b["transactional"] for b in rows)
    assert {b["control"] for b in rows} == {None, "COMMIT", "ABORT"}
    assert len({b["records"] for b in rows}) > 2


@pytest.mark.parametrize("which", ["unclean", "clean"])
def test_kafka_python_reads_a_sample_of_batches(which, request):
    out, m = request.getfixturevalue(which)
    rows = [(p, s, b) for p in all_partitions(m) for s in p["segments"] for b in s["batches"]]
    rng = random.Random(1)
    sample = rng.sample(rows, 60) + [r for r in rows if r[2]["control"]][:10]
    for p, s, b in sample:
        data = seg_file(out, p, s["base_offset"], ".log").read_bytes()
        batch = DefaultRecordBatch(bytearray(data[b["position"]: b["position"] + b["size"]]))
        assert batch.validate_crc()
        assert batch.base_offset == b["base_offset"]
        assert batch.leader_epoch == b["leader_epoch"]
        assert batch.producer_id == b["producer_id"] and batch.producer_epoch == b["producer_epoch"]
        assert batch.base_sequence == b["base_sequence"]
        assert batch.is_transactional == b["transactional"]
        assert batch.is_control_batch == (b["control"] is not None)
        assert batch.compression_type == (1 if which == "clean" and not b["control"] else 0)
        recs = list(batch)
        assert len(recs) == b["records"]
        assert [r.offset for r in recs] == list(range(b["base_offset"], b["last_offset"] + 1))
        assert max(r.timestamp for r in recs) == b["max_timestamp"]
        if not b["control"]:
            assert all(r.value for r in recs)


@pytest.mark.parametrize("which", ["unclean", "clean"])
def test_indexes_follow_the_recovery_rule(which, request):
    out, m = request.getfixturevalue(which)
    is_clean = which == "clean"
    saw_skipped_batch = False
    for p in all_partitions(m):
        for s in p["segments"]:
            base = s["base_offset"]
            data = seg_file(out, p, base, ".log").read_bytes()
            batches = read_batches(data)
            trimmed = is_clean or not s["active"]
            offs, times = expected_indexes(batches, SMALL.index_interval_bytes, final_time_entry=trimmed)
            saw_skipped_batch |= 1 < len(batches) and len(offs) < len(batches) - 1
            assert all(pos != 0 for _, pos in offs)
            idx_raw = seg_file(out, p, base, ".index").read_bytes()
            tidx_raw = seg_file(out, p, base, ".timeindex").read_bytes()
            if trimmed:
                assert len(idx_raw) == 8 * len(offs) and len(tidx_raw) == 12 * len(times)
            else:  # the active segment of a crashed broker: preallocated, entries then zeros
                assert (len(idx_raw), len(tidx_raw)) == (OFFSET_INDEX_PREALLOCATED, TIME_INDEX_PREALLOCATED)
                assert not idx_raw[8 * len(offs):].strip(b"\0") and not tidx_raw[12 * len(times):].strip(b"\0")
            idx = index.entries_from_bytes(idx_raw, index.OFFSET_ENTRY)[: len(offs)]
            tidx = index.entries_from_bytes(tidx_raw, index.TIME_ENTRY)[: len(times)]
            assert [(base + int(r), int(q)) for r, q in zip(idx["relative_offset"], idx["position"])] == offs
            assert [(int(t), base + int(r)) for t, r in zip(tidx["timestamp"], tidx["relative_offset"])] == times
            assert s["offset_index"] == [list(e) for e in offs]
            assert s["time_index"] == [list(e) for e in times]
    assert saw_skipped_batch  # small batches below the interval are not indexed


@pytest.mark.parametrize("which", ["unclean", "clean"])
def test_leader_epoch_checkpoint_lists_the_first_batch_of_each_epoch(which, request):
    out, m = request.getfixturevalue(which)
    changed = 0
    for p in all_partitions(m):
        firsts: list[tuple[int, int]] = []
        for s in p["segments"]:
            for b in s["batches"]:
                if not firsts or b["leader_epoch"] > firsts[-1][0]:
                    firsts.append((b["leader_epoch"], b["base_offset"]))
                assert b["leader_epoch"] >= firsts[-1][0]  # epochs never go back
        # truncateFromStart(log start offset)
        ls = p["log_start_offset"]
        before = [e for e in firsts if e[1] <= ls]
        expected = [(before[-1][0], ls)] + [e for e in firsts if e[1] > ls]
        got = checkpoint.read_leader_epoch_checkpoint(partition_path(out, p) / "leader-epoch-checkpoint")
        assert got == expected
        changed += len(firsts) > 1
    assert changed >= 3


class _Entry:
    def __init__(self):
        self.epoch, self.last_seq, self.last_offset, self.offset_delta = -1, -1, -1, 0
        self.timestamp, self.coordinator_epoch, self.txn_first = -1, -1, -1

    def as_tuple(self, pid):
        return snapshot.ProducerSnapshotEntry(pid, self.epoch, self.last_seq, self.last_offset, self.offset_delta,
                                              self.timestamp, self.coordinator_epoch, self.txn_first)


def replay(out: Path, p: dict):
    """Producer state (docs/loading.md §8) and aborted transactions, re-derived from the .log files.

    Yields ("segment_end", segment, entries, aborted_in_segment) after each segment."""
    entries: dict[int, _Entry] = {}
    for s in p["segments"]:
        data = seg_file(out, p, s["base_offset"], ".log").read_bytes()
        aborted = []
        for pos, h in read_batches(data):
            if not h.has_producer_id:
                continue
            e = entries.setdefault(h.producer_id, _Entry())
            if h.is_control:
                marker = records.read_end_txn_marker(data, pos, h)
                if h.producer_epoch != e.epoch:
                    e.last_seq, e.last_offset, e.offset_delta = -1, -1, 0
                e.epoch = h.producer_epoch
                e.coordinator_epoch = marker.coordinator_epoch
                e.timestamp = marker.timestamp
                if e.txn_first >= 0 and not marker.is_commit:
                    others = [x.txn_first for pid, x in entries.items() if pid != h.producer_id and x.txn_first >= 0]
                    lso = min(others) if others else h.base_offset + 1
                    aborted.append(index.AbortedTxn(h.producer_id, e.txn_first, h.base_offset, lso))
                e.txn_first = -1
            else:
                e.epoch = h.producer_epoch
                e.last_seq, e.last_offset = h.last_sequence, h.last_offset
                e.offset_delta, e.timestamp = h.last_offset_delta, h.max_timestamp
                if h.is_transactional and e.txn_first < 0:
                    e.txn_first = h.base_offset
        yield s, entries, aborted


@pytest.mark.parametrize("which", ["unclean", "clean"])
def test_txn_index_holds_the_aborted_transactions(which, request):
    out, m = request.getfixturevalue(which)
    n = 0
    for p in all_partitions(m):
        for s, _entries, aborted in replay(out, p):
            path = seg_file(out, p, s["base_offset"], ".txnindex")
            if not aborted:
                assert not path.exists()
                continue
            got = index.read_txn_index(path)
            assert [index.AbortedTxn(*(int(x) for x in e.tolist()[1:])) for e in got] == aborted
            assert (got["version"] == 0).all()
            assert s["txn_index"] == [[a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset]
                                      for a in aborted]
            n += len(aborted)
    assert n >= 5
    # some LSO is held back by another producer's open transaction
    rows = [a for p in all_partitions(m) for s in p["segments"] for a in s["txn_index"]]
    assert any(a[3] < a[2] + 1 for a in rows)


@pytest.mark.parametrize("which", ["unclean", "clean"])
def test_snapshots_hold_the_producer_state_at_each_roll(which, request):
    out, m = request.getfixturevalue(which)
    checked = 0
    for p in all_partitions(m):
        expected_files = {}
        if p["first_segment_base"] > 0:
            expected_files[p["first_segment_base"]] = []
        segs = p["segments"]
        for s, entries, _ in replay(out, p):
            if not s["active"] or which == "clean":
                order = snapshot.java_hashmap_order(entries)  # first-seen order, HashMap iteration
                expected_files[s["next_offset"]] = [entries[pid].as_tuple(pid) for pid in order]
        files = sorted(f.name for f in partition_path(out, p).iterdir() if f.name.endswith(".snapshot"))
        assert files == sorted(names.segment_file_name(o, ".snapshot") for o in expected_files)
        for off, expected in expected_files.items():
            got = snapshot.read_snapshot(partition_path(out, p) / names.segment_file_name(off, ".snapshot"))
            assert got == expected
            checked += 1
        assert p["snapshot_offsets"] == sorted(expected_files)
        assert segs[-1]["base_offset"] in expected_files or len(segs) == 1
    assert checked >= 10


@pytest.mark.parametrize("which", ["unclean", "clean"])
def test_checkpoints_metadata_and_the_ending(which, request):
    out, m = request.getfixturevalue(which)
    is_clean = which == "clean"
    for d in m["data_dirs"]:
        dpath = out / d
        parts = {names.TopicPartition(p["topic"], p["partition"]): p for p in all_partitions(m) if p["dir"] == d}
        rp = checkpoint.read_offset_checkpoint(dpath / "recovery-point-offset-checkpoint")
        ls = checkpoint.read_offset_checkpoint(dpath / "log-start-offset-checkpoint")
        hw = checkpoint.read_offset_checkpoint(dpath / "replication-offset-checkpoint")
        assert rp == {tp: p["recovery_point"] for tp, p in parts.items()}
        assert hw == {tp: p["high_watermark"] for tp, p in parts.items()}
        assert ls == {tp: p["log_start_offset"] for tp, p in parts.items()
                      if p["log_start_offset"] > p["first_segment_base"]}
        meta = (dpath / "meta.properties").read_text()
        assert "node.id=1\n" in meta and "version=1\n" in meta and "cluster.id=" in meta
        marker = dpath / ".kafka_cleanshutdown"
        assert marker.exists() == is_clean
        if is_clean:
            assert marker.read_bytes() == b'{"version":0,"brokerEpoch":7}'
        for p in parts.values():
            assert p["log_start_offset"] <= p["high_watermark"] <= p["log_end_offset"]
            assert p["log_start_offset"] <= p["recovery_point"] <= p["log_end_offset"]
            if is_clean:
                assert p["recovery_point"] == p["high_watermark"] == p["log_end_offset"]
            topic_id = checkpoint.read_partition_metadata(partition_path(out, p) / "partition.metadata")
            assert len(topic_id) == 16 and topic_id != bytes(16)
    if not is_clean:
        points = [p["recovery_point"] < p["log_end_offset"] for p in all_partitions(m)]
        assert any(points)
    assert any(ls for ls in (p["log_start_offset"] > p["first_segment_base"] for p in all_partitions(m)))
    assert any(p["first_segment_base"] > 0 for p in all_partitions(m))
    assert any(p["ongoing_transactions"] for p in all_partitions(m))


def test_faults_land_where_the_manifest_says(faulty):
    out, m, summary = faulty
    faults = m["faults"]
    assert len(faults) == len(summary.faults) >= 25
    assert {f["kind"] for f in faults} == set(FAULT_KINDS)
    by_key = {(p["dir"], p["topic"], p["partition"]): p for p in all_partitions(m)}
    faulted_logs = set()
    for f in faults:
        p = by_key[(f["dir"], f["topic"], f["partition"])]
        ppath = partition_path(out, p)
        path = ppath / f["file"]
        kind = f["kind"]
        if kind in DATA_FAULTS:
            faulted_logs.add(path)
            seg = next(s for s in p["segments"] if s["base_offset"] == f["segment_base"])
            data = path.read_bytes()
            readout = read_log(data)
            assert readout.valid_bytes == f["valid_end"], f
            assert readout.stop_reason != "end" or kind == "zero_tail", f
            kept = [b for b in seg["batches"] if b["position"] < f["valid_end"]]
            assert [(e.position, e.size, e.base_offset, e.last_offset) for e in readout.entries] == \
                [(b["position"], b["size"], b["base_offset"], b["last_offset"]) for b in kept]
            if kind in ("torn_tail", "zero_tail"):
                assert seg["active"]
            if kind == "torn_tail":
                assert len(data) == f["position"] and f["valid_end"] == seg["batches"][-1]["position"]
        elif kind == "missing_index":
            assert not path.exists()
            assert (ppath / names.segment_file_name(f["segment_base"], ".log")).exists()
        elif kind == "truncated_index":
            assert path.stat().st_size == f["position"]
        elif kind == "corrupt_index":
            if path.suffix == ".txnindex":
                entries = index.read_txn_index(path)
                assert index.txn_index_problem(str(path), f["segment_base"], entries) is not None
            else:
                assert path.exists()
        elif kind in ("stray_files", "orphaned_index"):
            assert f["files"] and all((ppath / n).exists() for n in f["files"])
            if kind == "orphaned_index":
                prefix = f["files"][0].split(".")[0]
                assert not (ppath / f"{prefix}.log").exists()
            else:
                assert all(n.endswith((".deleted", ".cleaned", ".swap")) for n in f["files"])
        elif kind == "corrupt_snapshot":
            with pytest.raises(CorruptSnapshotError):
                snapshot.read_snapshot(path)
    # every other segment is untouched and fully valid
    for p in all_partitions(m):
        for s in p["segments"]:
            path = seg_file(out, p, s["base_offset"], ".log")
            if path not in faulted_logs:
                data = path.read_bytes()
                assert len(data) == s["size"] and len(read_batches(data)) == len(s["batches"])


@pytest.mark.parametrize("changes", [
    dict(segment_bytes=4096, batch_bytes=4096, index_interval_bytes=0),  # one batch per segment at most
    dict(max_index_size=64, index_interval_bytes=0, batch_bytes=600, records_per_batch=3),  # indexes fill up
    dict(data_dirs=1, topics=1, partitions_per_topic=1, records_per_batch=1, compression="gzip"),
    dict(total_bytes=0, clean_shutdown=True),  # one batch per partition
    dict(idempotent_fraction=0.0, transactional_fraction=1.0, idempotent_producers=0),
])
def test_edge_configs_still_write_what_kafka_would(tmp_path, changes):
    cfg = SMALL.replace(**{"total_bytes": 150_000, **changes})
    generate(tmp_path / "b", cfg)
    m = read_manifest(tmp_path / "b")
    max_offset_entries, max_time_entries = cfg.max_index_size // 8, cfg.max_index_size // 12
    for p in all_partitions(m):
        assert p["batch_count"] >= 1
        for s in p["segments"]:
            data = seg_file(tmp_path / "b", p, s["base_offset"], ".log").read_bytes()
            batches = read_batches(data)
            assert [row_of(pos, h, data) for pos, h in batches] == s["batches"]
            assert len(data) <= cfg.segment_bytes or len(batches) == 1
            trimmed = cfg.clean_shutdown or not s["active"]
            offs, times = expected_indexes(batches, cfg.index_interval_bytes, final_time_entry=trimmed)
            assert s["offset_index"] == [list(e) for e in offs] and s["time_index"] == [list(e) for e in times]
            assert len(offs) <= max_offset_entries and len(times) <= max_time_entries
        list(replay(tmp_path / "b", p))  # producer state replays without surprises


def test_same_seed_same_bytes(tmp_path):
    cfg = SMALL.replace(total_bytes=200_000, faults=6, topics=1, max_index_size=4096)

    def digest(root: Path) -> dict[str, str]:
        out = {}
        for f in sorted(root.rglob("*")):
            if f.is_file():
                out[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()
        return out

    generate(tmp_path / "a", cfg)
    generate(tmp_path / "b", cfg)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    generate(tmp_path / "c", cfg.replace(seed=cfg.seed + 1))
    assert digest(tmp_path / "a") != digest(tmp_path / "c")


def test_manifest_streams_in_chunks(tmp_path):
    """A partition of more batches than one manifest line holds (4096 rows) is written in several lines, the full
    ones of exactly 4096, and read back whole."""
    cfg = SMALL.replace(total_bytes=450_000, topics=1, partitions_per_topic=1, data_dirs=1, segment_bytes=1 << 20,
                        batch_bytes=69, records_per_batch=1)  # ~5,900 batches in one segment
    generate(tmp_path / "b", cfg)
    lines = list(iter_manifest(tmp_path / "b"))
    rows = [len(x["rows"]) for x in lines if x["type"] == "batches"]
    assert len(rows) >= 2 and max(rows) == 4096 and sum(rows) > 4096
    m = read_manifest(tmp_path / "b")
    for p in all_partitions(m):
        for s in p["segments"]:
            data = seg_file(tmp_path / "b", p, s["base_offset"], ".log").read_bytes()
            assert [row_of(pos, h, data) for pos, h in read_batches(data)] == s["batches"]


def test_progress_callback_sees_every_byte(tmp_path):
    class Recorder(Callback):
        def __init__(self):
            super().__init__()
            self.calls = 0
            self.closed = False

        def call(self):
            self.calls += 1

        def close(self):
            self.closed = True

    cb = Recorder()
    s = generate(tmp_path / "b", SMALL.replace(total_bytes=300_000), callback=cb)
    assert cb.size == pytest.approx(300_000, rel=0.01) and cb.value == s.log_bytes and cb.closed and cb.calls > 2


def test_refuses_foreign_non_empty_dirs(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "precious").write_text("keep me")
    with pytest.raises(FileExistsError):
        generate(tmp_path / "x", SMALL, overwrite=True)
    assert [p.name for p in (tmp_path / "x").iterdir()] == ["precious"]  # nothing written there, nothing removed
    assert (tmp_path / "x" / "precious").read_text() == "keep me"
    cfg = SMALL.replace(total_bytes=50_000)
    generate(tmp_path / "y", cfg)
    with pytest.raises(FileExistsError):
        generate(tmp_path / "y", cfg)
    generate(tmp_path / "y", cfg, overwrite=True)


@pytest.mark.parametrize("bad", [
    dict(data_dirs=0), dict(segment_bytes=1000, batch_bytes=4096), dict(idempotent_fraction=0.8),
    dict(compression="brotli"), dict(fault_kinds=("nope",)), dict(records_per_batch=0),
])
def test_config_validation(bad):
    with pytest.raises(ValueError):
        SMALL.replace(**bad)


def test_cli_generate(tmp_path, capsys):
    out = tmp_path / "b"
    args = ["generate", str(out), "--dirs", "3", "--topics", "2", "--partitions", "2", "--size", "300kB",
            "--segment-bytes", "32KiB", "--batch-bytes", "2KiB", "--records-per-batch", "4", "--faults", "3",
            "--seed", "9", "--clean", "--json", "--no-progress"]
    assert cli.main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["partitions"] == 4 and len(doc["data_dirs"]) == 3 and doc["clean_shutdown"] is True
    assert len(doc["faults"]) == 3
    assert all((out / f"data-{i}" / ".kafka_cleanshutdown").exists() for i in range(3))
    m = json.loads((out / "manifest.json").read_text())
    assert m["config"]["segment_bytes"] == 32768 and m["config"]["seed"] == 9
    # text summary
    assert cli.main(["generate", str(out), "--size", "100kB", "--overwrite", "--faults", "1", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "unclean shutdown" in text and "faults       1" in text
    # usage errors exit with 2
    for bad in (["generate", str(out), "--size", "lots"], ["generate", str(out)], ["frobnicate"], [],
                ["generate", str(tmp_path / "c"), "--compression", "brotli"],
                ["generate", str(tmp_path / "c"), "--batch-bytes", "1MB"]):
        assert cli.main(bad) == 2, bad
    capsys.readouterr()


def test_parse_size():
    assert parse_size("10GB") == 10_000_000_000
    assert parse_size("256KiB") == 262144
    assert parse_size("1.5MB") == 1_500_000
    assert parse_size("4096") == 4096
    assert parse_size("2gib") == 2 * 2**30
