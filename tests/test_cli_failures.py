"""Every failure of the command ends with a message and, with ``--json``, an error document (mploader.cli.failures).

Real processes and real signals: SIGTERM stops ``mploader load`` mid-load as Ctrl-C does (exit 143, a message, a
rerun reaches the undisturbed load's files) and ``mploader verify``; a full /dev/shm (a tiny tmpfs in a private
mount namespace) after a successful load makes ``--verify-after``'s check fail, reported as such (exit 3, the
load's document); an error of the environment or a bug reaching the top-level handler ends in one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mploader.generate import GeneratorConfig, generate
from tests import cli_json
from tests.fingerprint import changed, tree_state

# 4 partitions of 12 MB in 1 MB segments; without its recovery-point checkpoint a load recovers every segment
BROKER = GeneratorConfig(data_dirs=1, topics=2, partitions_per_topic=2, total_bytes=12_000_000,
                         segment_bytes=1 << 20, faults=0, seed=3)
SLOW_RATE = "2MB"  # --max-read-rate: the load takes ~6 s, time enough to be stopped mid-way
PARTITIONS = 4
ENV = dict(os.environ, PYTHONPATH=str(cli_json.ROOT))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data dir as generated: a load recovers the last segments and leaves the others to --verify-after."""
    return Path(generate(str(tmp_path_factory.mktemp("failures") / "b"), BROKER).data_dirs[0])


@pytest.fixture(scope="module")
def broker(generated: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Without its recovery-point checkpoint: a load recovers every segment (a long load)."""
    d = _copy(generated, tmp_path_factory.mktemp("everything"))
    (d / "recovery-point-offset-checkpoint").unlink()
    return d


@pytest.fixture(scope="module")
def undisturbed(broker: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The files and the --json document of one undisturbed load of ``broker``."""
    d = _copy(broker, tmp_path_factory.mktemp("undisturbed"))
    out = cli_json.run("load", "--json", str(d))
    assert out.returncode == 0, out.stderr
    return tree_state(d), json.loads(out.stdout)


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest / src.name)
    return dest / src.name


def _started(argv: list[str], started: str) -> subprocess.Popen[str]:
    """``argv`` running, once its stderr has shown a line with ``started``."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    assert proc.stderr is not None
    for line in proc.stderr:
        if started in line:
            return proc
    proc.wait()
    raise AssertionError(f"{started!r} never showed; exit {proc.returncode}")


def _terminated(proc: subprocess.Popen[str]) -> tuple[str, str, float]:
    """SIGTERM to ``proc``; its stdout, the rest of its stderr, and the seconds it took to exit."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out, err, time.monotonic() - t0


def _outcome(doc: dict[str, Any]) -> dict[tuple[str, int], Any]:
    """What a load's document says of the state it leaves, not of what this run did to reach it
    (tests/crash_points.py's final_outcome, from the --json document)."""
    kept = ("kind", "log_start_offset", "recovery_point", "log_end_offset", "segments", "leader_epochs", "producers")
    return {(lg["topic"], lg["partition"]): {k: lg[k] for k in kept} for lg in doc["logs"]}


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_sigterm_stops_a_load_like_ctrl_c_and_a_rerun_completes_it(
        broker: Path, undisturbed: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path, as_json: bool) -> None:
    d = _copy(broker, tmp_path)
    argv = [sys.executable, "-m", "mploader", "-v", "load", "--max-read-rate", SLOW_RATE, str(d)]
    proc = _started(argv + (["--json"] if as_json else []), "(2/")  # a partition's third segment is recovered
    out, err, took = _terminated(proc)
    assert proc.returncode == 143, err
    assert took < 5, f"stopped in {took:.1f} s"  # at the next safe point, not at the end of the load
    assert err.count("Completed load of Log") < PARTITIONS  # it was stopped mid-load
    if as_json:
        error = cli_json.validate(json.loads(out))["error"]
        assert error["kind"] == "interrupted" and error["exit_code"] == 143
        message = error["message"]
    else:
        assert out == ""
        message = err.strip().splitlines()[-1]
        assert message.startswith("mploader load: ")
    assert "stopped by SIGTERM" in message and "load again to finish the recovery" in message
    files, doc = undisturbed
    assert changed(files, tree_state(d))  # (else the rerun below proves nothing)

    rerun = cli_json.run("load", "--json", str(d))
    assert rerun.returncode == 0, rerun.stderr
    assert changed(files, tree_state(d)) == []
    assert _outcome(json.loads(rerun.stdout)) == _outcome(doc)


SLOW_AUDITS = """
import sys, time
import mploader.engine.base as base
_audit = base.audit_segment
def slow(task):  # 0.1 s a segment: the verify lasts seconds
    print("audit started", file=sys.stderr, flush=True)
    time.sleep(0.1)
    return _audit(task)
base.audit_segment = slow
sys.argv = ["mploader", *sys.argv[1:]]
from mploader.cli.main import command
command()
"""


def test_sigterm_stops_verify_with_its_message_and_document(broker: Path, tmp_path: Path) -> None:
    d = _copy(broker, tmp_path)
    before = tree_state(d)
    proc = _started([sys.executable, "-c", SLOW_AUDITS, "verify", "--workers", "1", "--json", str(d)],
                    "audit started")
    out, err, _ = _terminated(proc)
    assert proc.returncode == 143, err
    error = cli_json.validate(json.loads(out))["error"]
    assert error["kind"] == "interrupted" and error["exit_code"] == 143
    assert error["message"] == "stopped by SIGTERM; verify changes nothing: run it again"
    assert changed(before, tree_state(d)) == []


def test_sigterm_during_verify_after_keeps_the_loads_document(generated: Path, tmp_path: Path) -> None:
    d = _copy(generated, tmp_path)
    proc = _started([sys.executable, "-c", SLOW_AUDITS, "load", "--verify-after", "--workers", "1", "--json", str(d)],
                    "audit started")
    out, err, took = _terminated(proc)
    assert proc.returncode == 143, err
    assert took < 5, f"stopped in {took:.1f} s"
    doc = cli_json.validate(json.loads(out))
    assert len(doc["logs"]) == PARTITIONS and "verification" not in doc  # the load's result stands
    problem = doc["verification_error"]
    assert problem["kind"] == "interrupted" and problem["exit_code"] == 143
    assert "the load finished and its result stands" in problem["message"]
    assert "stopped by SIGTERM" in problem["message"]


# --------------------------------------------------------------------------------------------
# A full /dev/shm after the load: --verify-after's check cannot start its workers


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /dev/shm"],
                           capture_output=True)
    return probe.returncode == 0


needs_unshare = pytest.mark.skipif(not _can_unshare(), reason="needs root and `unshare -m` (a private mount "
                                                                "namespace for a tiny /dev/shm)")


def _with_full_shm(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``mploader ARGS`` with a full 64 KiB /dev/shm of its own (a private mount namespace)."""
    command = " ".join(["exec", sys.executable, "-m", "mploader", *args])
    script = ("mount -t tmpfs -o size=64k tmpfs /dev/shm || exit 99; "
              "dd if=/dev/zero of=/dev/shm/fill bs=4k 2>/dev/null; " + command)
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=ENV,
                          timeout=60)


@needs_unshare
def test_a_full_dev_shm_after_the_load_is_reported_with_the_loads_document(generated: Path, tmp_path: Path) -> None:
    plain = _copy(generated, tmp_path / "plain")
    expected = json.loads(cli_json.run("load", "--json", str(plain)).stdout)
    d = _copy(generated, tmp_path / "shm")
    out = _with_full_shm(["load", "--verify-after", "--workers", "2", "--json", str(d)])
    assert out.returncode == 3, out.stderr
    doc = cli_json.validate(json.loads(out.stdout))
    assert _outcome(doc) == _outcome(expected) and changed(tree_state(plain), tree_state(d)) == []  # the load went well
    assert "verification" not in doc
    problem = doc["verification_error"]
    assert problem["kind"] == "io_error" and problem["exit_code"] == 3
    assert "the load finished and its result stands" in problem["message"]
    assert "/dev/shm is full" in problem["message"] and "mploader verify --workers 1" in problem["message"]


@needs_unshare
def test_a_full_dev_shm_after_the_load_in_text(generated: Path, tmp_path: Path) -> None:
    d = _copy(generated, tmp_path)
    out = _with_full_shm(["load", "--verify-after", "--workers", "2", str(d)])
    assert out.returncode == 3, out.stderr
    assert f"{d}: loaded" in out.stdout and "total: 4 partitions" in out.stdout  # the summary, as always
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("mploader load: the load finished and its result stands (above), but the check after "
                           "it (--verify-after) did not complete: No space left on device (/dev/shm is full")
    assert "Traceback" not in out.stderr


# --------------------------------------------------------------------------------------------
# What reaches the top-level handler: one line, an exit code, the document


def _command(argv: list[str], before: str) -> subprocess.CompletedProcess[str]:
    """The command's process with ``before`` run first (an error put where the load would be)."""
    code = f"import sys\n{before}\nsys.argv = ['mploader', *{argv!r}]\nfrom mploader.cli.main import command\ncommand()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60)


def _raising(error: str) -> str:
    return ("import errno, os\nimport mploader.cli.load as load\n"
            f"def failing(*a, **k):\n    raise {error}\nload.load_logs = failing")


@pytest.mark.parametrize(("error", "kind", "words"), [
    ("OSError(errno.EMFILE, os.strerror(errno.EMFILE), '/data/orders-0/00000000000000000000.index')", "io_error",
     "Too many open files: /data/orders-0/00000000000000000000.index (this process may open only"),
    ("MemoryError()", "out_of_memory", "out of memory: run it where more memory is free"),
    ("RuntimeError('a bug')", "internal_error", "internal error (RuntimeError: a bug): a bug in mploader"),
], ids=["emfile", "memory", "bug"])
def test_an_error_nothing_else_names_ends_in_one_line_and_a_document(
        tmp_path: Path, error: str, kind: str, words: str) -> None:
    (tmp_path / "meta.properties").write_text("version=0\nbroker.id=0\n")  # a data dir (an empty dir is refused)
    d = str(tmp_path)  # (the load is replaced by the error: a data dir with no partition will do)
    text = _command(["load", d], _raising(error))
    assert text.returncode == 1
    last = text.stderr.strip().splitlines()[-1]
    assert last.startswith(f"mploader load: {words}") and last.endswith("load again to finish the recovery")
    assert ("Traceback" in text.stderr) == (kind == "internal_error")  # a bug's traceback, for its report
    js = _command(["load", "--json", d], _raising(error))
    assert js.returncode == 1
    problem = cli_json.validate(json.loads(js.stdout))["error"]
    assert problem["kind"] == kind and problem["exit_code"] == 1 and problem["message"] == last[len("mploader load: "):]
    if kind == "io_error":
        assert problem["path"] == "/data/orders-0/00000000000000000000.index"


@needs_unshare
def test_a_full_disk_under_generate_says_what_to_do(tmp_path: Path) -> None:
    """A real ENOSPC, on a 64 KiB tmpfs of its own: no traceback, the output named, --json's error document."""
    out_dir = tmp_path / "tiny"
    out_dir.mkdir()
    script = (f"mount -t tmpfs -o size=64k tmpfs {out_dir} || exit 99; exec {sys.executable} -m mploader generate "
              f"{out_dir}/b --dirs 1 --topics 1 --partitions 1 --size 1MB --no-progress --json")
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 1, out.stderr
    problem = cli_json.validate(json.loads(out.stdout))["error"]
    assert problem["kind"] == "io_error" and problem["message"].startswith("No space left on device")
    assert f"{out_dir}/b holds an incomplete broker" in problem["message"] and "--overwrite" in problem["message"]
    assert "Traceback" not in out.stderr
