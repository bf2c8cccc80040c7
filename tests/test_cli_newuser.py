"""A new user's findings, each held by a test of the real command (``python -m mploader`` in a subprocess, no mocks):

1. a wrong path is refused by every command that takes data dirs (exit 2, the data dir meant named, nothing written);
2. a load or dry run that loses acknowledged records exits 4, with structured warnings in ``--json``; usage errors
   exit 2 across commands; every command's ``--help`` has its own exit-code table;
3. the summary says what happened: who scanned, a torn tail cut without a record, files deleted, plurals;
4. ``--topic`` / ``--partition`` for ``load --dry-run`` and ``verify`` (refused on a real load).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests import cli_json
from tests.fingerprint import tree_state
from tests.kafkadir import NOW, B, PartitionBuilder, checkpoint_text, data_dir, flip_bit, name, oi_bytes


def _lossy_broker(tmp_path: Path) -> Path:
    """orders-3: segments 0, 10, 20 of ten 72-byte batches, a flipped byte in batch 14, high watermark 25: a load
    cuts the log end from 30 to 14 and loses the acknowledged offsets 14..24; payments-0: a healthy partition."""
    d = data_dir(tmp_path, clean=False)
    (d / "meta.properties").write_text("version=1\nnode.id=1\n")
    pb = PartitionBuilder(d, "orders", 3).std3()
    flip_bit(pb.file(10, ".log"), 72 * 4 + 40)
    PartitionBuilder(d, "payments", 0).segment(0, *(B(o) for o in range(5))).epochs((0, 0))
    (d / "replication-offset-checkpoint").write_text(checkpoint_text([("orders", 3, 25), ("payments", 0, 5)]))
    return d


def _torn_tail_broker(tmp_path: Path) -> Path:
    """orders-0: batches 0..4, the last one torn (30 of its 72 bytes) and the last .index entry pointing at it:
    Kafka's readNextOffset of the segment reads the base offset, 0, before the load, the log end offset after the
    cut is 4: no record removed, only 30 torn bytes."""
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d, "orders", 0).segment(0, *(B(o) for o in range(5)))
    pb.file(0, ".index").write_bytes(oi_bytes(0, (4, 288)))
    with open(pb.file(0, ".log"), "r+b") as f:
        f.truncate(288 + 30)
    (d / "replication-offset-checkpoint").write_text(checkpoint_text([("orders", 0, 4)]))
    return d


def _usage_error(out: subprocess.CompletedProcess[str], *words: str) -> dict[str, object]:
    assert out.returncode == 2, (out.stdout, out.stderr)
    error = json.loads(out.stdout)["error"]
    assert error["kind"] == "usage" and error["exit_code"] == 2, error
    for w in words:
        assert w in error["message"], (w, error["message"])
    return error


# --------------------------------------------------------------------------------------------
# 1. Wrong paths refused, nothing written


def test_a_partition_directory_is_refused_by_load_verify_and_spark_naming_its_data_dir(tmp_path: Path) -> None:
    d = _lossy_broker(tmp_path)
    part = d / "orders-3"  # its segment 10 has a CRC error: verify must not call it healthy
    before = tree_state(d)
    out_dir = tmp_path / "spark-out"
    for command in (["load"], ["load", "--dry-run"], ["verify"], ["spark", "verify", "--out", str(out_dir)],
                    ["spark", "load", "--out", str(out_dir)]):
        out = cli_json.run(*command, "--json", str(part))
        _usage_error(out, "is a partition directory", f"did you mean {d}?")
    text = cli_json.run("verify", str(part))
    assert text.returncode == 2 and "HEALTHY" not in text.stdout and f"did you mean {d}?" in text.stderr
    text = cli_json.run("load", str(part))
    assert text.returncode == 2 and "0 partitions" not in text.stdout and "loaded" not in text.stdout
    assert tree_state(d) == before  # no .lock, no checkpoint in the partition directory
    assert not {".lock", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint"} & set(os.listdir(part))
    assert not out_dir.exists()


def test_a_partition_directory_an_earlier_load_wrote_into_is_still_refused(tmp_path: Path) -> None:
    """What the old command left in a partition directory (.lock, two checkpoints) does not make it a data dir."""
    d = _lossy_broker(tmp_path)
    part = d / "orders-3"
    for f in (".lock", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
        (part / f).write_text("" if f == ".lock" else checkpoint_text([]))
    _usage_error(cli_json.run("load", "--json", "--dry-run", str(part)), "is a partition directory", str(d))


def test_spark_without_a_directory_is_refused_before_spark_starts(tmp_path: Path) -> None:
    for sub in ("verify", "load"):
        out = cli_json.run("spark", sub, "--json", "--out", str(tmp_path / "o"))
        _usage_error(out, "no data dir given")
        text = cli_json.run("spark", sub, "--out", str(tmp_path / "o"))
        assert text.returncode == 2 and "HEALTHY" not in text.stdout and text.stdout == ""
    assert not (tmp_path / "o").exists()


def test_a_file_given_for_a_data_dir_is_a_usage_error_for_every_command(tmp_path: Path) -> None:
    f = tmp_path / "manifest.json"
    f.write_text("{}")
    for command in (["load"], ["load", "--dry-run"], ["verify"], ["spark", "verify", "--out", str(tmp_path / "o")]):
        _usage_error(cli_json.run(*command, "--json", str(f)), "not a directory", str(f))
    assert f.read_text() == "{}" and sorted(os.listdir(tmp_path)) == ["manifest.json"]


def test_an_empty_or_unrelated_directory_is_refused_unless_create_missing_takes_it_for_a_new_data_dir(
        tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    unrelated = tmp_path / "notes"
    unrelated.mkdir()
    (unrelated / "todo.txt").write_text("buy milk\n")
    for d in (empty, unrelated):
        for command in (["load"], ["load", "--dry-run"], ["verify"]):
            _usage_error(cli_json.run(*command, "--json", str(d)), "not a Kafka data dir", str(d))
        text = cli_json.run("verify", str(d))
        assert text.returncode == 2 and "HEALTHY" not in text.stdout
    assert os.listdir(empty) == [] and os.listdir(unrelated) == ["todo.txt"]
    error = _usage_error(cli_json.run("load", "--json", str(empty)), "is empty")
    assert "--create-missing" in str(error["message"])
    _usage_error(cli_json.run("load", "--json", "--create-missing", str(unrelated)), "holds no partition directory")
    # a brand-new data dir: the flag that lets a load create one lets it take an empty one; the summary says why
    new = cli_json.run("load", "--create-missing", str(empty))
    assert new.returncode == 0, new.stderr
    assert f"{empty}: loaded, but it holds no partition: a new, empty data dir" in new.stdout
    doc = json.loads(cli_json.run("load", "--json", "--create-missing", str(empty)).stdout)
    assert [w["kind"] for w in doc["structured_warnings"]] == ["no_partitions"]


def test_a_data_dir_with_no_partition_is_healthy_only_with_the_reason(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "meta.properties").write_text("version=1\nnode.id=1\n")
    out = cli_json.run("verify", "--no-progress", str(d))
    assert out.returncode == 0, out.stderr
    assert "HEALTHY, with nothing to check: the data dir(s) hold no partition directory" in out.stdout


# --------------------------------------------------------------------------------------------
# 2. Loss visible to scripts; exit codes


def test_a_lossy_dry_run_and_load_exit_4_with_structured_warnings(tmp_path: Path) -> None:
    d = _lossy_broker(tmp_path)
    for args in (["--dry-run"], []):
        out = cli_json.run("load", "--json", "--now-ms", str(NOW), *args, str(d))  # validated by the schema
        assert out.returncode == 4, out.stderr
        doc = json.loads(out.stdout)
        lost = [w for w in doc["structured_warnings"] if w["kind"] == "acknowledged_records_lost"]
        assert lost == [{"kind": "acknowledged_records_lost", "topic": "orders", "partition": 3,
                         "dir": str(d / "orders-3"), "data_dir": str(d), "log_kind": "live", "first_offset": 14,
                         "last_offset": 24, "offsets": 11, "high_watermark": 25, "log_end_offset_before": 30,
                         "log_end_offset_after": 14}]
        removed = [w for w in doc["structured_warnings"] if w["kind"] == "records_removed"]
        assert [(w["topic"], w["partition"], w["first_offset"], w["last_offset"], w["offsets"]) for w in removed] == \
            [("orders", 3, 14, 29, 16)]
    again = cli_json.run("load", "--now-ms", str(NOW), str(d))  # nothing left to lose
    assert again.returncode == 0, again.stderr


def test_exit_4_is_documented_in_the_help_and_every_command_has_its_own_table() -> None:
    for args in (["load"], ["spark"], ["spark", "load"]):
        out = cli_json.run(*args, "--help")
        assert out.returncode == 0 and out.stdout.count("exit status:") == 1, args
        assert "  4    " in out.stdout and "ACKNOWLEDGED RECORDS LOST" in out.stdout, args
    for args in (["verify"], ["spark", "verify"], ["sweep"], ["experiment"], []):
        out = cli_json.run(*args, "--help")
        assert out.returncode == 0 and out.stdout.count("exit status:") == 1, args
    assert "generate: written" not in cli_json.run("spark", "--help").stdout
    assert "generate: written" not in cli_json.run("load", "--help").stdout
    assert "4    load, load --dry-run, spark load" in cli_json.run("--help").stdout


def test_the_readme_exit_code_table_has_4() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "| 4 | acknowledged records lost" in readme and "mploader/cli/dirs.py" in readme


# --------------------------------------------------------------------------------------------
# 3. Summaries that say what happened


def test_a_torn_tail_that_held_no_batch_is_not_data_removed_nor_offsets_gained(tmp_path: Path) -> None:
    d = _torn_tail_broker(tmp_path)
    doc = json.loads(cli_json.run("load", "--json", "--dry-run", str(d)).stdout)
    impact = doc["logs"][0]["impact"]
    assert (impact["log_end_offset_before"], impact["log_end_offset_after"], impact["records_removed"]) == (0, 4, 0)
    [cut] = [w for w in doc["structured_warnings"] if w["kind"] == "invalid_bytes_cut"]
    assert (cut["bytes"], cut["log_end_offset_after"]) == (30, 4)
    for args in (["--dry-run"], []):
        out = cli_json.run("load", *args, str(d))
        assert out.returncode == 0, out.stderr
        assert "0 -> 4" not in out.stdout and "data removed" not in out.stdout and "data would be" not in out.stdout
        assert "orders-0: log end offset 4; no record removed: 30 B of invalid bytes cut from its end (a torn tail, " \
               "no complete batch: never a record)" in out.stdout
        assert "impact: no record " in out.stdout
    again = cli_json.run("load", str(d))  # cut already
    assert again.returncode == 0 and "invalid bytes" not in again.stdout


def test_the_real_load_names_the_files_it_deleted_and_plurals_are_right(tmp_path: Path) -> None:
    d = _lossy_broker(tmp_path)
    out = cli_json.run("load", "--now-ms", str(NOW), str(d))
    assert out.returncode == 4, out.stderr
    assert "  files deleted:\n    orders-3: " + name(20, ".index") in out.stdout
    assert "1 segment deleted" in out.stdout and "1 partition lost ACKNOWLEDGED records" in out.stdout
    for wrong in ("1 segments", "1 files", "1 partitions", "(s)"):
        assert wrong not in out.stdout, (wrong, out.stdout)


def test_who_scanned_is_what_the_stats_say(tmp_path: Path) -> None:
    d = _lossy_broker(tmp_path)
    out = cli_json.run("load", "--json", "--dry-run", "--workers", "2", "--now-ms", str(NOW), str(d))
    stats = json.loads(out.stdout)["stats"]
    text = cli_json.run("load", "--dry-run", "--workers", "2", "--now-ms", str(NOW), str(d)).stdout
    total = next(line for line in text.splitlines() if line.startswith("total: "))
    assert "with 2 worker processes" not in total
    if stats["scans_in_parent"] >= stats["segments_scanned"]:  # a small broker: the parent reaches every scan first
        assert "in this process, all" in total and "scanned none" in total, total
    else:
        assert "by 2 worker processes per data dir" in total, total


def test_more_workers_than_cpus_is_warned_about(tmp_path: Path) -> None:
    from mploader.host.cpus import usable_cpus

    d = _lossy_broker(tmp_path)
    n = usable_cpus() + 1
    out = cli_json.run("load", "--json", "--dry-run", "--workers", str(n), "--now-ms", str(NOW), str(d))
    [w] = [w for w in json.loads(out.stdout)["structured_warnings"] if w["kind"] == "workers_exceed_cpus"]
    assert (w["option"], w["workers"], w["cpus"]) == ("--workers", n, usable_cpus())
    text = cli_json.run("load", "--dry-run", "--workers", str(n), "--now-ms", str(NOW), str(d))
    assert f"on {usable_cpus()} usable CPU" in text.stderr


# --------------------------------------------------------------------------------------------
# 4. --topic and --partition


def test_topic_and_partition_filter_a_dry_run_and_verify_and_are_refused_on_a_real_load(tmp_path: Path) -> None:
    d = _lossy_broker(tmp_path)
    before = tree_state(d)
    doc = json.loads(cli_json.run("load", "--json", "--dry-run", "--topic", "payments", "--now-ms", str(NOW),
                                  str(d)).stdout)
    assert [(lg["topic"], lg["partition"]) for lg in doc["logs"]] == [("payments", 0)]
    assert doc["filter"] == {"topics": ["payments"], "partitions": [], "partitions_loaded": 2}
    only = cli_json.run("load", "--dry-run", "--topic", "payments", "--now-ms", str(NOW), str(d))
    assert only.returncode == 0 and "orders-3" not in only.stdout and "filtered" in only.stdout  # its loss not shown
    lossy = cli_json.run("load", "--dry-run", "--topic", "orders", "--partition", "3", "--now-ms", str(NOW), str(d))
    assert lossy.returncode == 4 and "orders-3: log end offset 30 -> 14" in lossy.stdout
    verify = cli_json.run("verify", "--json", "--no-progress", "--partition", "0", str(d))
    assert verify.returncode == 0, verify.stderr  # orders-3's CRC error is not in payments-0
    assert [p["topic"] for p in json.loads(verify.stdout)["partitions"]] == ["payments"]
    assert cli_json.run("verify", "--no-progress", "--topic", "orders", str(d)).returncode == 1
    _usage_error(cli_json.run("load", "--json", "--dry-run", "--topic", "ordres", str(d)), "matches --topic ordres",
                 "orders, payments")
    _usage_error(cli_json.run("verify", "--json", "--partition", "7", str(d)), "matches --partition 7")
    _usage_error(cli_json.run("load", "--json", "--topic", "orders", str(d)), "add --dry-run")
    assert tree_state(d) == before


@pytest.mark.parametrize("flag", ["--topic", "--partition"])
def test_a_filter_on_a_real_load_changes_nothing(tmp_path: Path, flag: str) -> None:
    d = _lossy_broker(tmp_path)
    before = tree_state(d)
    out = cli_json.run("load", flag, "orders" if flag == "--topic" else "3", str(d))
    assert out.returncode == 2 and "a real load recovers every partition" in out.stderr
    assert tree_state(d) == before
