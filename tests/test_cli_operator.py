"""What an operator sees (issue 13): the impact report, refusing a mistyped path, JSON for machines (validated
against docs/mploader-output.schema.json), exit codes, and logs like a broker's."""

from __future__ import annotations

import json
from pathlib import Path

from mploader import LoaderConfig, TopicPartition, load_logs
from mploader.cli.exit_codes import ALL_EXIT_CODES_HELP, EXIT_CODES_HELP, VERIFY_EXIT_CODES_HELP
from mploader.result import Impact
from tests import cli_json
from tests.fingerprint import tree_state
from tests.kafkadir import NOW, B, PartitionBuilder, checkpoint_text, data_dir, flip_bit, name


def _lossy_broker(tmp_path: Path, hw: int | None = 25) -> tuple[Path, PartitionBuilder]:
    """Segments 0, 10, 20 of ten 72-byte batches; a flipped byte in batch 14: recovery truncates segment 10
    after offset 13 (432 bytes) and deletes segment 20 (720 bytes): the log end offset falls from 30 to 14."""
    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d, "orders", 3).std3()
    flip_bit(pb.file(10, ".log"), 72 * 4 + 40)
    PartitionBuilder(d, "quiet", 0).segment(0, *(B(o) for o in range(5)))  # recovered, nothing removed
    if hw is not None:
        (d / "replication-offset-checkpoint").write_text(checkpoint_text([("orders", 3, hw), ("quiet", 0, 5)]))
    return d, pb


EXPECTED_IMPACT = {"log_end_offset_before": 30, "log_end_offset_after": 14, "records_removed": 16,
                   "bytes_removed": 432 + 720, "segments_deleted": 1, "high_watermark": 25,
                   "lost_below_high_watermark": True}


def test_the_impact_report_in_json_for_a_dry_run_and_the_load(tmp_path: Path) -> None:
    d, _ = _lossy_broker(tmp_path)
    before = tree_state(d)
    dry = cli_json.run("load", "--json", "--dry-run", "--now-ms", str(NOW), str(d))
    assert dry.returncode == 4, dry.stderr  # acknowledged records would be lost (was 0 before exit code 4)
    assert tree_state(d) == before
    real = cli_json.run("load", "--json", "--now-ms", str(NOW), str(d))
    assert real.returncode == 4, real.stderr
    for out, dry_run in ((dry, True), (real, False)):
        doc = json.loads(out.stdout)
        assert doc["schema"] == 1 and doc["dry_run"] is dry_run and doc["tool"]["name"] == "mploader"
        logs = {(lg["topic"], lg["partition"]): lg for lg in doc["logs"]}
        assert logs[("orders", 3)]["impact"] == EXPECTED_IMPACT
        assert logs[("quiet", 0)]["impact"] == {
            "log_end_offset_before": 5, "log_end_offset_after": 5, "records_removed": 0, "bytes_removed": 0,
            "segments_deleted": 0, "high_watermark": 5, "lost_below_high_watermark": False}
        assert doc["impact"] == {"partitions_changed": 1, "records_removed": 16, "bytes_removed": 1152,
                                 "segments_deleted": 1, "partitions_lost_below_high_watermark": 1}
        lost = [w for w in doc["warnings"] if "acknowledged" in w]
        assert len(lost) == 1 and "orders-3" in lost[0] and "from 30 to 14" in lost[0] and "25" in lost[0]
        deleted = logs[("orders", 3)]["deleted_files"]
        assert deleted == sorted(deleted) and name(20, ".log") in deleted  # deterministic order
        assert doc["warnings"] == sorted(doc["warnings"])


def test_the_impact_report_in_the_text_summary_and_a_warning_on_stderr(tmp_path: Path) -> None:
    d, _ = _lossy_broker(tmp_path)
    out = cli_json.run("load", "--dry-run", "--now-ms", str(NOW), str(d))
    assert out.returncode == 4, out.stderr  # acknowledged records would be lost
    assert "orders-3: log end offset 30 -> 14; 16 offsets, 1.2 kB removed, 1 segment deleted" in out.stdout
    assert "high watermark 25: 11 ACKNOWLEDGED offsets LOST (14..24)" in out.stdout
    assert "1 partition would lose ACKNOWLEDGED records" in out.stdout
    assert "WARN" in out.stderr and "orders-3" in out.stderr and "below the high watermark 25" in out.stderr
    # the dry run names the files the load would delete (segment 20's), the load names those it deleted
    doc = json.loads(cli_json.run("load", "--json", "--dry-run", "--now-ms", str(NOW), str(d)).stdout)
    deleted = next(lg for lg in doc["logs"] if lg["topic"] == "orders")["deleted_files"]
    assert name(20, ".log") in deleted
    assert f"  files that would be deleted:\n    orders-3: {', '.join(sorted(deleted))}\n" in out.stdout
    real = cli_json.run("load", "--now-ms", str(NOW), str(d))
    assert real.returncode == 4 and "files that would be deleted" not in real.stdout
    assert f"  files deleted:\n    orders-3: {', '.join(sorted(deleted))}\n" in real.stdout


def test_the_dry_runs_list_of_deletes_tells_a_future_dir_from_the_live_one(tmp_path: Path) -> None:
    d, _ = _lossy_broker(tmp_path, hw=None)
    future = PartitionBuilder(d, "orders", 3, dirname=f"orders-3.{'0' * 32}-future").std3()
    flip_bit(future.file(0, ".log"), 72 * 7 + 40)  # truncated after offset 6: segments 10 and 20 deleted
    out = cli_json.run("load", "--dry-run", "--now-ms", str(NOW), str(d))
    assert out.returncode == 0, out.stderr  # no high watermark: nothing known to be acknowledged
    listed = out.stdout.split("  files that would be deleted:\n", 1)[1].splitlines()
    assert listed[0].startswith(f"    orders-3: {name(20, '.index')}")
    assert listed[1].startswith(f"    orders-3 (future): {name(10, '.index')}")


def test_a_log_that_ended_below_its_high_watermark_before_the_load_is_warned_about(tmp_path: Path) -> None:
    """Nothing removed, yet offsets 5..7 below the high watermark 8 were not on the disk: no loss by the load
    (the JSON impact says none), but the operator is told, in a warning and in the summary's line."""
    d = data_dir(tmp_path, clean=False)
    PartitionBuilder(d, "quiet", 0).segment(0, *(B(o) for o in range(5)))
    PartitionBuilder(d, "orders", 3).segment(0, *(B(o) for o in range(5)))
    (d / "replication-offset-checkpoint").write_text(checkpoint_text([("orders", 3, 8), ("quiet", 0, 5)]))
    (d / "orders-3" / name(0, ".log")).open("ab").write(b"\0" * 30)  # a torn tail: removed, no offset in it
    out = cli_json.run("load", "--no-progress", "--now-ms", str(NOW), str(d))
    assert out.returncode == 0, out.stderr
    assert "high watermark 8: 3 acknowledged offsets (5..7) were not on this disk before the load" in out.stdout
    [warning] = [line for line in out.stderr.splitlines() if "high watermark" in line]
    assert "orders-3: 3 acknowledged offsets (5..7, below the high watermark 8) were not on this disk" in warning
    again = cli_json.run("load", "--no-progress", "--now-ms", str(NOW), str(d)).stdout  # nothing removed now
    assert "acknowledged offsets not on this disk, nothing removed, in 1 partition:\n    orders-3: " in again
    doc = json.loads(cli_json.run("load", "--json", "--now-ms", str(NOW), str(d)).stdout)
    orders = next(lg for lg in doc["logs"] if lg["topic"] == "orders")
    assert orders["impact"]["lost_below_high_watermark"] is False and orders["impact"]["records_removed"] == 0
    assert [w for w in doc["warnings"] if "high watermark" in w] == [warning.split("WARN ")[1].split(" (mploader")[0]]


def test_acknowledged_offsets_are_told_apart_from_those_never_on_the_disk() -> None:
    """Of the offsets below the high watermark and not on the disk after a load, those the load removed (up to the
    log end before it) and those that were not there before it either (above it; below a log start the load moved
    up, none)."""
    def impact(before: int, after: int, hw: int) -> Impact:
        removed = max(0, before - after)
        return Impact(before, after, removed, 0, 0, hw, removed > 0 and after < hw)

    cases = {(30, 14, 25): (range(14, 25), range(0)), (706, 600, 707): (range(600, 706), range(706, 707)),
             (706, 706, 707): (range(0), range(706, 707)), (5, 10, 12): (range(0), range(10, 12)),
             (30, 30, 25): (range(0), range(0))}
    for (before, after, hw), (removed, missing) in cases.items():
        i = impact(before, after, hw)
        assert (list(i.acknowledged_removed), list(i.missing_below_high_watermark)) == (list(removed), list(missing))
        assert bool(i.acknowledged_removed) == i.lost_below_high_watermark, (before, after, hw)
    unknown = Impact(30, 14, 16, 0, 0, None, False)  # no high watermark: neither
    assert not unknown.acknowledged_removed and not unknown.missing_below_high_watermark


def test_an_unknown_high_watermark_is_null_and_warns_of_nothing(tmp_path: Path) -> None:
    d, _ = _lossy_broker(tmp_path, hw=None)
    result = load_logs([str(d)], LoaderConfig(dry_run=True), now_ms=NOW)
    impact = result.logs[TopicPartition("orders", 3)].impact
    assert impact.high_watermark is None and not impact.lost_below_high_watermark
    assert (impact.log_end_offset_before, impact.log_end_offset_after, impact.records_removed) == (30, 14, 16)
    assert result.warnings == []


def test_a_missing_data_dir_is_refused_unless_create_missing(tmp_path: Path) -> None:
    typo = tmp_path / "kafak"
    out = cli_json.run("load", str(typo))
    assert out.returncode == 2 and "no such data directory" in out.stderr and "--create-missing" in out.stderr
    assert not typo.exists()
    out = cli_json.run("load", "--json", str(typo))
    assert out.returncode == 2 and json.loads(out.stdout)["error"]["kind"] == "usage"
    assert not typo.exists()
    out = cli_json.run("load", "--json", "--create-missing", str(typo))
    assert out.returncode == 0, out.stderr
    assert typo.is_dir()
    warnings = json.loads(out.stdout)["warnings"]
    assert any("holds no partition directory" in w for w in warnings), warnings


def test_a_partition_directory_given_as_a_data_dir_is_refused(tmp_path: Path) -> None:
    """It was a warning, then "0 partitions" and exit 0 (and .lock and checkpoints written into it): now a usage
    error naming the data dir (tests/test_cli_newuser.py has the rest)."""
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d, "orders", 0).segment(0, B(0))
    out = cli_json.run("load", "--json", "--dry-run", str(pb.path))
    assert out.returncode == 2, out.stderr
    error = json.loads(out.stdout)["error"]
    assert error["kind"] == "usage" and "is a partition directory" in error["message"] and str(d) in error["message"]


def test_the_parent_of_data_dirs_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """Given for a data dir, the folder that holds data dirs would have each taken for a partition directory
    ("data-0": topic "data", partition 0) and a segment written into it: load and verify refuse it."""
    parent = tmp_path / "broker"
    d0 = data_dir(parent, "data-0", clean=True)
    d1 = data_dir(parent, "data-1", clean=False, rp=[])
    PartitionBuilder(d0, "orders", 0).segment(0, B(0))
    # what a load run on the folder by mistake leaves there: it does not make the folder a data dir
    (parent / "recovery-point-offset-checkpoint").write_text(checkpoint_text([]))
    before = tree_state(parent)
    out_dir = str(tmp_path / "spark-out")
    for command in (["load"], ["load", "--dry-run"], ["verify"], ["spark", "verify", "--out", out_dir],
                    ["spark", "load", "--out", out_dir]):
        out = cli_json.run(*command, "--json", str(parent))
        assert out.returncode == 2, (command, out.stderr)
        error = json.loads(out.stdout)["error"]
        assert error["kind"] == "usage" and str(d0) in error["message"] and str(d1) in error["message"]
    assert tree_state(parent) == before and not (tmp_path / "spark-out").exists()
    out = cli_json.run("load", "--json", str(d0), str(d1))  # the data dirs themselves load
    assert out.returncode == 0, out.stderr
    assert [lg["partition"] for lg in json.loads(out.stdout)["logs"]] == [0]


def test_a_failed_start_up_prints_a_json_error_document_with_exit_code_1(tmp_path: Path) -> None:
    d, _ = _lossy_broker(tmp_path)
    (d / "lost+found").mkdir()
    before = tree_state(d)
    out = cli_json.run("load", "--json", str(d))
    assert out.returncode == 1
    error = json.loads(out.stdout)["error"]
    assert error["kind"] == "startup_failed" and error["kafka_exception"] == "KafkaException"
    assert error["path"] == str(d / "lost+found") and error["exit_code"] == 1
    assert "nothing was changed" in error["message"]
    assert tree_state(d) == before
    text = cli_json.run("load", str(d))
    assert text.returncode == 1 and "lost+found" in text.stderr and text.stdout == ""


def test_usage_errors_with_json_print_a_json_error_document(tmp_path: Path) -> None:
    out = cli_json.run("load", "--json", "--workers", "0", str(tmp_path))
    assert out.returncode == 2
    assert json.loads(out.stdout)["error"]["kind"] == "usage"
    out = cli_json.run("load", "--workers", "0", str(tmp_path))  # without --json: argparse's message
    assert out.returncode == 2 and out.stdout == "" and "--workers must be >= 1" in out.stderr
    out = cli_json.run("load", "--workers", "many", str(tmp_path))  # every word it takes is named
    assert out.returncode == 2 and "a number >= 1 or 'auto' or 'adaptive', not 'many'" in out.stderr
    out = cli_json.run("verify", "--json", str(tmp_path / "nope"), str(tmp_path))
    assert out.returncode == 2 and json.loads(out.stdout)["error"]["message"] == \
        f"no such data directory: {tmp_path / 'nope'}"


def test_a_wrong_worker_start_in_the_environment_is_a_usage_error_before_any_work(tmp_path: Path) -> None:
    """MPLOADER_WORKER_START is read when a pool starts, in the middle of a load: the command checks it first,
    and says what is wrong and what to do, not a traceback from the engine."""
    d, _ = _lossy_broker(tmp_path)
    before = tree_state(d)
    env = {"MPLOADER_WORKER_START": "vfork"}
    out = cli_json.run("load", "--json", "--workers", "2", str(d), env=env)
    assert out.returncode == 2
    error = json.loads(out.stdout)["error"]
    assert error["kind"] == "usage" and "MPLOADER_WORKER_START='vfork'" in error["message"]
    out = cli_json.run("load", "--workers", "2", str(d), env=env)
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert "expected one of fork, spawn (unset it" in out.stderr
    out = cli_json.run("cleanup", env=env)  # a command without --json: the same message on stderr
    assert out.returncode == 2 and "MPLOADER_WORKER_START" in out.stderr and "Traceback" not in out.stderr
    assert tree_state(d) == before


def test_an_offline_dir_gives_a_valid_document_and_exit_code_1(tmp_path: Path) -> None:
    d = data_dir(tmp_path, clean=True)
    PartitionBuilder(d).segment(0, B(0))
    (d / "recovery-point-offset-checkpoint").write_text("0\n2\nt 0 1\n")  # count says 2: IOException class
    out = cli_json.run("load", "--json", "--dry-run", str(d))
    assert out.returncode == 1
    assert list(json.loads(out.stdout)["offline_dirs"]) == [str(d)]
    text = cli_json.run("load", "--dry-run", str(d)).stdout  # the operator is told what it means and what to do
    assert f"{d}: OFFLINE: " in text and "a broker takes this dir offline" in text and "then load again" in text


def test_exit_codes_are_in_the_help() -> None:
    """Each command's --help ends with its own exit-code table, whole and once."""
    for args, table in ((["--help"], ALL_EXIT_CODES_HELP), (["load", "--help"], EXIT_CODES_HELP),
                        (["verify", "--help"], VERIFY_EXIT_CODES_HELP)):
        out = cli_json.run(*args)
        assert out.returncode == 0 and out.stdout.rstrip().endswith(table.rstrip()), args
        assert out.stdout.count("exit status:") == 1, args
    assert "every partition healthy" in cli_json.run("verify", "--help").stdout


def test_verbosity_before_and_after_the_sub_command(tmp_path: Path) -> None:
    d, _ = _lossy_broker(tmp_path)
    quiet = cli_json.run("load", "--dry-run", str(d))
    assert "INFO" not in quiet.stderr and "WARN" in quiet.stderr
    for args in (["-v", "load"], ["load", "-v"]):
        out = cli_json.run(*args, "--dry-run", str(d))
        assert out.returncode == 4, out.stderr  # the lossy broker: acknowledged records would be lost
        assert "INFO Completed load of Log(dir=" in out.stderr and "DEBUG" not in out.stderr, args
        assert "Attempting recovery of 2 logs from" in out.stderr
    for args in (["-vv", "load"], ["-v", "load", "-v"]):
        out = cli_json.run(*args, "--dry-run", str(d))
        assert " DEBUG " in out.stderr, args


def test_a_rebuilt_index_is_a_warning(tmp_path: Path) -> None:
    d = data_dir(tmp_path, clean=True)
    pb = PartitionBuilder(d).segment(0, *(B(o) for o in range(3)))
    pb.file(0, ".index").unlink()
    out = cli_json.run("load", "--dry-run", str(d))
    assert out.returncode == 0 and "WARN" in out.stderr and "rebuilding its index files" in out.stderr
    assert "segment 0: its offset index (.index) is missing;" in out.stderr  # which of the two reasons it is


def test_the_public_api_is_what_dir_shows_and_progress_is_in_it() -> None:
    import mploader
    import mploader.manager  # noqa: F401 - a subpackage imported: still not part of dir(mploader)

    assert dir(mploader) == sorted(mploader.__all__)
    assert {"Progress", "Impact", "load_logs", "LoaderConfig", "__version__"} <= set(dir(mploader))
    assert mploader.Progress is __import__("mploader.progress", fromlist=["Progress"]).Progress


def test_cleanup_removes_what_a_dead_load_left(capsys) -> None:
    """``mploader cleanup`` removes a dead load's blocks from /dev/shm and says which; a live one's stay."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from mploader.cli import main
    from mploader.engine.cleanup import process_start

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # a pid that has exited (and was reaped)
    me = os.getpid()
    left = Path(f"/dev/shm/mploader-{dead}-123-1-0")
    live = Path(f"/dev/shm/mploader-{me}-{process_start(me)}-424242-0")
    for p in (left, live):
        p.write_bytes(b"x")
    try:
        assert main(["cleanup"]) == 0
        out = capsys.readouterr().out
        assert not left.exists() and left.name in out
        assert live.exists() and live.name not in out
    finally:
        for p in (left, live):
            p.unlink(missing_ok=True)


def _warnings(stderr: str) -> tuple[list[str], list[str]]:
    """The WARN lines of the load's changes (its recovery's and its manager's loggers), and the others."""
    warns = [line for line in stderr.splitlines() if " WARN " in line]
    changes = [line for line in warns if line.endswith(("(mploader.manager)", "(mploader.recovery.loader)"))]
    return changes, [line for line in warns if line not in changes]


def test_a_dry_runs_warnings_say_nothing_was_done(tmp_path: Path) -> None:
    """The loader logs a truncation in the past tense whether or not it is a dry run: a dry run marks them, verify's
    load (a dry run) too; the command's own advice (an empty data dir) is true as it stands and is not marked."""
    d, _ = _lossy_broker(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    dry = cli_json.run("load", "--dry-run", "--create-missing", "--now-ms", str(NOW), str(d), str(empty))
    changes, others = _warnings(dry.stderr)
    assert len(changes) == 3 and all(" WARN (dry run, not done) " in line for line in changes), dry.stderr
    assert len(others) == 1 and "holds no partition directory" in others[0] and "dry run" not in others[0]
    verify = cli_json.run("verify", "-v", "--no-progress", "--now-ms", str(NOW), str(d))
    changes, _ = _warnings(verify.stderr)
    assert any("truncated 432 invalid bytes at the end of segment 10, from byte 288 of 00000000000000000010.log"
               in line for line in changes), verify.stderr
    assert all(" WARN (dry run, not done) " in line for line in changes), verify.stderr
    real = cli_json.run("load", "--now-ms", str(NOW), str(d))
    assert real.returncode == 4 and " WARN " in real.stderr and "dry run" not in real.stderr


def test_workers_and_recovery_threads_beside_partition_workers_are_warned_about(tmp_path: Path) -> None:
    d = data_dir(tmp_path, clean=False)
    PartitionBuilder(d, "orders", 0).segment(0, B(0))
    out = cli_json.run("load", "--json", "--workers", "2", "--recovery-threads", "4", "--partition-workers", "2",
                       str(d))
    assert out.returncode == 0, out.stderr
    warnings = json.loads(out.stdout)["warnings"]
    assert any(w.startswith("--workers 2 is not used with --partition-workers") for w in warnings), warnings
    assert any(w.startswith("--recovery-threads 4 is not used with --partition-workers") for w in warnings), warnings
    out = cli_json.run("load", "--json", "--partition-workers", "2", str(d))
    assert not [w for w in json.loads(out.stdout)["warnings"] if "--workers" in w or "--recovery-threads" in w]
    out = cli_json.run("load", "--json", "--recovery-threads", "4", str(d))  # used where Phase 2 is in this process
    assert not [w for w in json.loads(out.stdout)["warnings"] if "--recovery-threads" in w]
