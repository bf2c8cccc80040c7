"""``mploader dump FILE``: each file kind of a generated broker shown as Kafka reads it; a ``.log``'s batches are the
scan's own (mploader.scan.walk), a mid-batch position and a flipped byte are said so; special files are refused
without hanging; nothing is written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mploader.cli.main import main
from mploader.format import checkpoint, compression, index, legacy, names, snapshot
from mploader.generate import GeneratorConfig, generate
from mploader.scan.walk import SegmentTask, Stop, scan_segment
from tests.fingerprint import changed, tree_state

ROOT = Path(__file__).resolve().parents[1]

BROKER = GeneratorConfig(
    data_dirs=1, topics=1, partitions_per_topic=1, total_bytes=400_000, segment_bytes=96 * 1024, batch_bytes=4096,
    records_per_batch=8, compression="gzip", transactional_fraction=0.4, idempotent_fraction=0.4, abort_fraction=0.5,
    leader_epoch_changes=2, faults=0, seed=5,
)


@pytest.fixture(scope="module")
def partition(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dump") / "broker"
    generate(out, BROKER)
    (part,) = [p for p in (out / "data-0").iterdir() if p.is_dir()]
    return part


def _segments(part: Path, suffix: str = ".log") -> list[Path]:
    return sorted(part.glob(f"*{suffix}"))


def dump(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["dump", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def dump_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = dump(capsys, *args, "--json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    assert (doc["schema"], doc["command"]) == (1, "dump")
    return doc


def test_log_batches_are_the_walks(partition: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_state(partition)
    for seg in _segments(partition):
        scan = scan_segment(SegmentTask(str(seg), names.offset_from_file_name(seg.name)))
        doc = dump_json(capsys, seg, "--count", "all")
        batches = doc["batches"]
        assert [b["position"] for b in batches] == scan.batches["position"].tolist()
        assert [b["base_offset"] for b in batches] == scan.batches["base_offset"].tolist()
        assert [b["last_offset"] for b in batches] == scan.batches["last_offset"].tolist()
        assert [b["size"] for b in batches] == scan.batches["size"].tolist()
        assert [b["partition_leader_epoch"] for b in batches] == scan.batches["partition_leader_epoch"].tolist()
        assert [b["producer_id"] for b in batches] == scan.batches["producer_id"].tolist()
        assert all(b["crc_valid"] for b in batches)
        assert doc["walk"]["stop"] == scan.stop.value == Stop.END.value
        assert doc["walk"]["stops_at"] == scan.valid_bytes == seg.stat().st_size
        assert doc["batches_not_shown"] == 0
        assert doc["base_offset"] == names.offset_from_file_name(seg.name)
    code, out, _ = dump(capsys, _segments(partition)[0])
    assert code == 0
    first = scan_segment(SegmentTask(str(_segments(partition)[0]), 0)).batches
    assert f"baseOffset: {first['base_offset'][0]} lastOffset: {first['last_offset'][0]}" in out
    assert "isValid: true" in out and "to the end of the file" in out
    assert not changed(before, tree_state(partition))


def test_count_caps_the_list_with_a_note(partition: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seg = _segments(partition)[0]
    doc = dump_json(capsys, seg, "--count", "2")
    assert len(doc["batches"]) == 2 and doc["batches_not_shown"] == doc["batches_valid"] - 2 > 0
    code, out, _ = dump(capsys, seg, "--count", "2")
    assert code == 0 and f"... {doc['batches_not_shown']} more valid batches not shown" in out


def test_mid_batch_position(partition: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seg = _segments(partition)[0]
    rows = scan_segment(SegmentTask(str(seg), 0)).batches
    second, third = int(rows["position"][1]), int(rows["position"][2])
    doc = dump_json(capsys, seg, "--position", str(second + 5))
    where = doc["position_check"]
    assert where["batch_start"] is False
    assert where["inside_batch_at"] == second and where["next_batch_start"] == third
    assert where["inside_batch_offsets"] == [int(rows["base_offset"][1]), int(rows["last_offset"][1])]
    assert where["walk_from_position"]["stops_at"] == second + 5  # no valid batch starts mid-batch
    assert doc["start"] == third and doc["batches"][0]["position"] == third
    code, out, _ = dump(capsys, seg, "--position", str(second + 5))
    assert code == 0
    assert f"byte {second + 5} is not a batch start: it lies inside the batch at byte {second}" in out
    assert f"the next batch starts at byte {third}" in out
    # a batch start is taken as it is
    doc = dump_json(capsys, seg, "--position", str(third))
    assert doc["position_check"] == {"batch_start": True} and doc["batches"][0]["position"] == third


def test_flipped_byte_shows_the_invalid_batch(partition: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    seg = shutil.copy(_segments(partition)[0], tmp_path / _segments(partition)[0].name)
    rows = scan_segment(SegmentTask(str(seg), 0)).batches
    bad, after = int(rows["position"][3]), int(rows["position"][4])
    data = bytearray(Path(seg).read_bytes())
    data[bad + 70] ^= 0xFF
    Path(seg).write_bytes(bytes(data))
    scan = scan_segment(SegmentTask(str(seg), 0))
    assert scan.stop is Stop.CRC and scan.valid_bytes == bad
    doc = dump_json(capsys, seg)
    assert len(doc["batches"]) == 3 and doc["batches_valid"] == 3
    walk = doc["walk"]
    assert (walk["stop"], walk["stops_at"], walk["detail"]) == ("crc mismatch", bad, scan.stop_detail)
    entry = walk["entry"]
    assert entry["position"] == bad and entry["crc_valid"] is False and entry["crc_computed"] != entry["crc"]
    assert walk["next_entry"] == after and walk["invalid_bytes"] == len(data) - bad
    code, out, _ = dump(capsys, seg)
    assert code == 0
    assert f"the walk stops at byte {bad} of {len(data)} (crc mismatch: record batch CRC mismatch)" in out
    assert "isValid: false (computed 0x" in out and f"--position {after}" in out
    # from the next entry on, the batches are valid again
    doc = dump_json(capsys, seg, "--position", str(after))
    assert doc["position_check"]["batch_start"] is True and doc["walk"]["stop"] == "end"


def test_torn_tail(partition: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _segments(partition)[0]
    seg = tmp_path / src.name
    data = src.read_bytes()
    seg.write_bytes(data[:-10])
    last = int(scan_segment(SegmentTask(str(src), 0)).batches["position"][-1])
    doc = dump_json(capsys, seg)
    assert (doc["walk"]["stop"], doc["walk"]["stops_at"]) == ("incomplete", last)
    assert doc["walk"]["entry"]["position"] == last
    doc = dump_json(capsys, seg, "--position", str(last))  # where the framing stops is an entry start
    assert doc["position_check"]["batch_start"] is True and doc["batches"] == []


def test_deep_decompresses(partition: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seg = _segments(partition)[0]
    doc = dump_json(capsys, seg, "--deep", "--count", "all")
    gzipped = [b for b in doc["batches"] if b["attributes"]["compression"] == "gzip"]
    assert gzipped, "the generator wrote no compressed batch"
    for b in doc["batches"]:
        assert b["records_error"] is None
        assert len(b["records"]) == b["count"]
        assert [r["offset"] for r in b["records"]][-1] == b["last_offset"]
        assert max(r["timestamp"] for r in b["records"]) <= b["max_timestamp"]
        for r in b["records"]:
            for field in ("key", "value"):
                shown = r[field]
                assert shown is None or len(shown.get("text", "")) <= 24 and len(shown.get("hex", "")) <= 48
    markers = [b for b in doc["batches"] if b["attributes"]["control"]]
    if markers:
        assert markers[0]["records"][0]["control"]["type"] in ("ABORT", "COMMIT")
    code, out, _ = dump(capsys, seg, "--deep", "--count", "1")
    assert code == 0 and "| offset: " in out and "keySize: " in out


def test_legacy_and_empty_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seg = tmp_path / "00000000000000000000.log"
    data = legacy.build_message(0, b"hello", key=b"k", magic=0) + legacy.build_message(1, b"\x00\x01", magic=1,
                                                                                          timestamp=5)
    wrapper_at = len(data)
    data += legacy.build_wrapper([(2, b"x", 6), (3, b"y", 7)], codec=compression.GZIP)
    seg.write_bytes(data)
    doc = dump_json(capsys, seg, "--deep")
    assert [(b["position"], b["magic"], b["last_offset"]) for b in doc["batches"]] == \
        [(0, 0, 0), (doc["batches"][1]["position"], 1, 1), (wrapper_at, 1, 3)]
    assert doc["batches"][2]["base_offset"] is None and doc["batches"][2]["attributes"]["compression"] == "gzip"
    assert [r["offset"] for r in doc["batches"][2]["records"]] == [2, 3]
    assert doc["batches"][0]["records"][0]["key"] == {"text": "k", "truncated": False}
    assert doc["batches"][1]["records"][0]["value"] == {"hex": "0001", "truncated": False}
    assert doc["walk"]["stop"] == "end"
    empty = tmp_path / "00000000000000000005.log"
    empty.write_bytes(b"")
    doc = dump_json(capsys, empty)
    assert doc["batches"] == [] and doc["walk"]["stops_at"] == 0 and doc["walk"]["stop"] == "end"


def test_offset_and_time_index(partition: Path, capsys: pytest.CaptureFixture[str]) -> None:
    last = _segments(partition, ".index")[-1]  # the active segment's: preallocated after an unclean shutdown
    base = names.offset_from_file_name(last.name)
    entries = index.entries_from_bytes(last.read_bytes(), index.OFFSET_ENTRY)
    written = index.written_entries(entries)
    doc = dump_json(capsys, last, "--count", "all")
    assert doc["slots"] == len(entries) and doc["entries_written"] == len(written)
    assert doc["zero_slots_at_end"] == len(entries) - len(written) > 0
    assert [e["offset"] for e in doc["entries"]] == (written["relative_offset"].astype(np.int64) + base).tolist()
    assert [e["position"] for e in doc["entries"]] == written["position"].tolist()
    code, out, _ = dump(capsys, last)
    assert code == 0
    assert f"{len(entries) - len(written)} zero (preallocated) slot(s) at the end" in out
    assert len(out.splitlines()) < len(written) + 10  # the zero slots are not printed one by one
    tindex = last.with_suffix(".timeindex")
    doc = dump_json(capsys, tindex)
    t = index.written_entries(index.entries_from_bytes(tindex.read_bytes(), index.TIME_ENTRY))
    assert [e["timestamp"] for e in doc["entries"]] == t["timestamp"].tolist()
    assert doc["out_of_order"] is None


def test_txn_index(partition: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [p for p in _segments(partition, ".txnindex") if p.stat().st_size]
    if not files:
        pytest.skip("no aborted transaction in this broker")
    doc = dump_json(capsys, files[0])
    want = index.read_txn_index(files[0])
    assert [(e["producer_id"], e["first_offset"], e["last_offset"], e["last_stable_offset"]) for e in doc["entries"]] \
        == [tuple(int(x) for x in row) for row in want[["producer_id", "first_offset", "last_offset",
                                                         "last_stable_offset"]].tolist()]


def test_snapshot(partition: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = _segments(partition, ".snapshot")[-1]
    producers = snapshot.read_snapshot(snap)
    doc = dump_json(capsys, snap)
    assert doc["version"] == 1 and doc["crc_valid"] is True and doc["valid"] is True
    assert doc["count"] == len(producers)
    assert [(p["producer_id"], p["epoch"], p["last_sequence"], p["last_offset"], p["timestamp"],
             p["coordinator_epoch"], p["current_txn_first_offset"]) for p in doc["producers"]] == \
        [(p.producer_id, p.epoch, p.last_sequence, p.last_offset, p.timestamp, p.coordinator_epoch,
          p.current_txn_first_offset) for p in producers]
    # a corrupt one is shown, with Kafka's verdict
    bad = tmp_path / snap.name
    data = bytearray(snap.read_bytes())
    data[-1] ^= 1
    bad.write_bytes(bytes(data))
    doc = dump_json(capsys, bad)
    assert doc["crc_valid"] is False and doc["valid"] is False and "CRC mismatch" in doc["problem"]
    assert len(doc["producers"]) == len(producers)
    code, out, _ = dump(capsys, bad)
    assert code == 0 and "isValid: false" in out and "CORRUPT" in out


def test_checkpoints(partition: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = partition.parent
    doc = dump_json(capsys, data_dir / checkpoint.RECOVERY_POINT_CHECKPOINT)
    want = checkpoint.read_offset_checkpoint(data_dir / checkpoint.RECOVERY_POINT_CHECKPOINT)
    assert {(e["topic"], e["partition"]): e["offset"] for e in doc["entries"]} == \
        {(tp.topic, tp.partition): o for tp, o in want.items()}
    doc = dump_json(capsys, partition / checkpoint.LEADER_EPOCH_CHECKPOINT)
    assert [(e["epoch"], e["start_offset"]) for e in doc["entries"]] == \
        checkpoint.read_leader_epoch_checkpoint(partition / checkpoint.LEADER_EPOCH_CHECKPOINT)
    doc = dump_json(capsys, partition / checkpoint.PARTITION_METADATA)
    assert checkpoint.parse_topic_id(doc["topic_id"]) == \
        checkpoint.read_partition_metadata(partition / checkpoint.PARTITION_METADATA)
    code, out, _ = dump(capsys, partition / checkpoint.LEADER_EPOCH_CHECKPOINT)
    assert code == 0 and "epoch: " in out and "startOffset: " in out
    malformed = tmp_path / checkpoint.LEADER_EPOCH_CHECKPOINT
    malformed.write_text("0\n2\n1 0\n")
    doc = dump_json(capsys, malformed)
    assert doc["valid"] is False and "expected 2 entries" in doc["problem"] and doc["lines"] == ["0", "2", "1 0"]


def test_usage_errors(partition: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("x")
    assert dump(capsys, other)[0] == 2
    seg = _segments(partition)[0]
    assert dump(capsys, seg, "--position", str(seg.stat().st_size + 1))[0] == 2
    assert dump(capsys, seg, "--position", "-1")[0] == 2
    assert dump(capsys, seg, "--count", "0")[0] == 2
    assert dump(capsys, _segments(partition, ".index")[0], "--position", "8")[0] == 2
    code, out, _ = dump(capsys, other, "--json")
    assert code == 2 and json.loads(out)["error"]["kind"] == "usage"
    assert dump(capsys, tmp_path / "00000000000000000000.log")[0] == 1  # missing


def test_links_and_special_files_refused(partition: Path, tmp_path: Path) -> None:
    """In a fresh process, with a timeout: a FIFO is refused at once (not read, which would block)."""
    fifo = tmp_path / "00000000000000000000.log"
    os.mkfifo(fifo)
    link = tmp_path / checkpoint.LEADER_EPOCH_CHECKPOINT
    link.symlink_to(partition / checkpoint.LEADER_EPOCH_CHECKPOINT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for path, what in ((fifo, "FIFO"), (link, "symbolic link")):
        for extra in ((), ("--json",)):
            out = subprocess.run([sys.executable, "-m", "mploader", "dump", str(path), *extra], capture_output=True,
                                 text=True, env=env, timeout=60)
            assert out.returncode == 1
            if extra:
                error = json.loads(out.stdout)["error"]
                assert error["kind"] == "io_error" and what in error["message"] and error["path"] == str(path)
            else:
                assert what in out.stderr and str(path) in out.stderr
    assert fifo.exists() and link.is_symlink()


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump", "--help"]) == 0
    out = capsys.readouterr().out
    assert "exit status:" in out and "usage error" in out and "--position" in out
