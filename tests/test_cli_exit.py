"""The command's process ends without the interpreter's teardown (``mploader.cli.main.command``), having done what
a normal exit does for everyone else: exit code, every byte of stdout through a pipe, atexit functions, threads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mploader.generate import GeneratorConfig, generate


def _command(tmp_path: Path, argv: list[str], before: str = "") -> subprocess.CompletedProcess[str]:
    code = f"import sys\n{before}\nsys.argv = ['mploader', *{argv!r}]\nfrom mploader.cli.main import command\ncommand()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_a_load_document_arrives_whole_through_a_pipe_with_exit_code_0(tmp_path: Path) -> None:
    out = generate(str(tmp_path / "gen"), GeneratorConfig(data_dirs=1, topics=12, partitions_per_topic=10,
                                                          total_bytes=600_000, segment_bytes=8192, batch_bytes=512,
                                                          faults=0, seed=3))
    done = _command(tmp_path, ["load", "--json", "--no-progress", out.data_dirs[0]])
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) > 65536  # more than a pipe holds: written while the parent reads
    doc = json.loads(done.stdout)
    assert len(doc["logs"]) == 120
    # laid out for a person two levels down (cli.output.document_text): one line per log
    lines = done.stdout.splitlines()
    assert lines[0] == "{" and ' "logs": [' in lines and lines[-1] == "}"
    per_log = [line for line in lines if line.startswith('  {"topic": ')]
    assert len(per_log) == 120 and all(json.loads(line.rstrip(",")) in doc["logs"] for line in per_log)


def test_the_layout_is_json_of_any_value() -> None:
    from mploader.cli.output import document_text

    docs = [{"a": {"b": {"c": [1, {"d": None}]}}, "e": [], "f": {}, "g": [[], [1.5, "x\"y"]], "h": "\u00e9"},
            [], {}, [{"k": float("inf")}], "text", 3]
    for doc in docs:
        assert json.loads(document_text(doc)) == doc
    int_keys = {"int keys": {1: "one", 2: [True]}}  # converted as json converts them
    assert json.loads(document_text(int_keys)) == json.loads(json.dumps(int_keys))


def test_exit_codes_atexit_functions_and_non_daemon_threads(tmp_path: Path) -> None:
    marker = tmp_path / "thread-done"
    before = ("import atexit, threading, time\n"
              "atexit.register(print, 'atexit ran', flush=False)\n"
              f"threading.Thread(target=lambda: (time.sleep(0.3), open({str(marker)!r}, 'w').close())).start()")
    usage = _command(tmp_path, ["load", "--no-such-option"], before)
    assert usage.returncode == 2
    assert usage.stdout.splitlines()[-1] == "atexit ran"  # printed into stdout's buffer, flushed by command()
    assert marker.exists()  # the thread was waited for
    (tmp_path / "broker" / "lost+found").mkdir(parents=True)  # Kafka fails start-up on it
    failed = _command(tmp_path, ["load", "--no-progress", str(tmp_path / "broker")], before)
    assert failed.returncode == 1 and "lost+found" in failed.stderr
    assert failed.stdout.splitlines()[-1] == "atexit ran"
