"""``mploader experiment hdd-vs-ssd`` as a performance engineer reads it: every point repeated, its median, min and
max in the report and in the data beside each figure (computed from the real runs); a run on a busy host flagged,
or refused with ``--refuse-busy``; Kafka's own loader beside mploader's, loading the same; a broker of two data
dirs on two seek-modelled devices (root, FUSE).  The host's own load (other processes' CPU) is measured from
/proc, so the pure pieces are tested here too."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mploader.cli.exit_codes import EXIT_BUSY
from mploader.cli.main import main
from mploader.experiments.findings import agreement, findings
from mploader.experiments.host_load import (
    BUSY_CPU_PERCENT,
    BUSY_READ_BYTES,
    ProcTimes,
    busy_reasons,
    descendants,
    parse_stat,
)
from mploader.experiments.kafka import find_oracle
from mploader.experiments.places import fuse_problem
from mploader.experiments.points import points
from mploader.experiments.run import RunResult, RunSpec
from tests.test_experiments import NOTHING, REPO, _ours
from tests.test_host import root_only

ORACLE = find_oracle()
TINY = ["--size", "3MB", "--segment-bytes", "256KiB", "--partitions", "8", "--restarts", "unclean",
        "--cache-method", "fadvise", "--interval", "0.05"]


# ---- the pure pieces -----------------------------------------------------------------------------------------


def test_a_stat_line_is_read_past_a_command_name_with_spaces_and_parentheses() -> None:
    line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 1 0 0 0 250 150 30 20 20 0 1 0 100 0 0"
    p = parse_stat(line)
    ticks = os.sysconf("SC_CLK_TCK")
    assert (p.ppid, p.own, p.reaped, p.kernel) == (17, 400 / ticks, 50 / ticks, False)
    kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 1 2 0 0 20 0 1 0 3 0 0"
    assert parse_stat(kthread).kernel
    with open("/proc/self/stat") as f:
        me = parse_stat(f.read())
    assert me.ppid == os.getppid() and not me.kernel


def test_the_experiments_processes_are_its_descendants_only() -> None:
    table = {1: ProcTimes(0, 0, 0, False), 10: ProcTimes(1, 0, 0, False), 11: ProcTimes(10, 0, 0, False),
             12: ProcTimes(11, 0, 0, False), 20: ProcTimes(1, 0, 0, False)}
    assert descendants(table, 10) == {10, 11, 12}
    assert descendants(table, 99) == set()


def test_a_run_is_busy_above_the_thresholds_only() -> None:
    assert busy_reasons(None, None, 0) == []
    assert busy_reasons(BUSY_CPU_PERCENT - 1, 0, 10**9) == []
    cpu, = busy_reasons(BUSY_CPU_PERCENT + 1, None, 0)
    assert "other processes used" in cpu
    assert busy_reasons(0.0, BUSY_READ_BYTES - 1, 0) == []  # a few blocks are not a busy host
    assert busy_reasons(0.0, 5 * BUSY_READ_BYTES, 100 * BUSY_READ_BYTES) == []  # 5% of the device's reads
    reads, = busy_reasons(0.0, 20 * BUSY_READ_BYTES, 100 * BUSY_READ_BYTES)
    assert "20% of their reads" in reads


def _run(run_id: int, choice: dict[str, Any], seconds: float, leo: int = 100) -> RunResult:
    spec = RunSpec(choice.get("workers"), choice.get("threads", 1), loader=choice.get("loader", "mploader"))
    loaded = {"t-0": {"kind": "current", "log_start_offset": 0, "log_end_offset": leo, "recovery_point": 0,
                      "segments": [[0, 1000]], "epochs": [[0, 0]]}}
    return RunResult(run_id, "hdd", spec, "drop_caches", seconds, seconds + 1, 10**8, 3, 1, "loop0", None,
                     loaded=loaded)


def test_points_are_the_median_of_their_rounds_and_the_findings_compare_kafka() -> None:
    one, two, k1, k2 = {"workers": 1}, {"workers": 2}, {"loader": "kafka", "threads": 1}, \
        {"loader": "kafka", "threads": 2}
    runs = [_run(1, one, 4.0), _run(2, two, 2.0), _run(3, k1, 6.0), _run(4, k2, 5.0),
            _run(5, one, 3.0), _run(6, two, 9.0), _run(7, k1, 6.5), _run(8, k2, 4.0),
            _run(9, one, 5.0), _run(10, two, 2.2), _run(11, k1, 7.0), _run(12, k2, 4.5)]
    pts = points(runs)
    assert [(p.spec.choice, len(p.runs)) for p in pts] == [("N=1", 3), ("N=2", 3), ("Kafka, 1 thread", 3),
                                                           ("Kafka, 2 threads", 3)]
    spread = pts[1].spread(lambda r: r.seconds)
    assert spread is not None and (spread.median, spread.low, spread.high) == (2.2, 2.0, 9.0)  # not the 9 s outlier
    mine, kafka = findings(runs)
    assert "fastest 2.20 s" in mine and "with 2 worker(s)" in mine
    assert "Kafka's LogLoader 6.50 s with 1, 4.50 s with 2 recovery thread(s) (fastest with 2)" in kafka
    assert "mploader's fastest, N=2: 2.20 s, 0.49x the time of Kafka's fastest" in kafka
    same, = agreement(runs)
    assert "all 12 runs loaded the same as run 3 (Kafka, 1 thread)" in same
    odd = agreement([*runs, _run(13, one, 3.0, leo=99)])
    assert "1 of 13 runs differ" in odd[0] and "t-0 log_end_offset: run 3 (Kafka, 1 thread) 100 / run 13" in odd[1]


# ---- the command, on tmpfs -----------------------------------------------------------------------------------


def _report(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "hdd-vs-ssd.json").read_text()))


def _figure_data(out: Path, title_part: str) -> dict[str, Any]:
    for data in sorted(out.glob("hdd-vs-ssd-*.json")):
        doc = json.loads(data.read_text())
        if title_part in doc["title"]:
            assert data.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            return dict(doc)
    raise AssertionError(f"no figure titled with {title_part!r} in {out}")


def test_every_point_is_repeated_its_median_and_range_from_the_real_runs(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["experiment", "hdd-vs-ssd", "--quick", "--devices", "tmpfs", *TINY, "--data-dirs", "1",
                 "--workers", "1,adaptive", "--partition-workers", "auto", "--kafka-threads", "", "--repeat", "3",
                 "--work-dir", str(tmp_path), "--out", str(out), "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    doc = _report(out)
    assert doc["repeat"] == 3
    runs = {r["run"]: r for r in doc["runs"]}
    assert len(runs) == 9 and len(printed["points"]) == 3
    assert [p["choice"] for p in doc["points"]] == ["N=1", "adaptive", "P=auto"]
    for p in doc["points"]:
        seconds = [runs[i]["seconds"] for i in p["runs"]]
        assert p["rounds"] == 3 and len(seconds) == 3
        assert {runs[i]["choice"] for i in p["runs"]} == {p["choice"]}
        assert p["seconds"] == {"median": round(statistics.median(seconds), 3), "min": min(seconds),
                                "max": max(seconds)}
        assert p["process_seconds"]["min"] <= p["process_seconds"]["median"] <= p["process_seconds"]["max"]
    # the figure draws what the report says: each point's median and bar, in the data written beside it
    fig = _figure_data(out, "unclean restart, 1 data dir")
    assert "3.0 MB of .log" in fig["subtitle"] and "CPUs" in fig["subtitle"] and "tmpfs" in fig["subtitle"]
    assert fig["x"] == ["N=1", "adaptive", "P=auto"]
    drawn = {pt["x"]: pt for s in fig["panels"][0]["series"] for pt in s["points"]}
    for p in doc["points"]:
        assert {k: drawn[p["choice"]][k] for k in ("median", "min", "max")} == p["seconds"]
        assert drawn[p["choice"]]["rounds"] == 3 and drawn[p["choice"]]["runs"] == p["runs"]
    counts = _figure_data(out, "adaptive worker counts")  # the adaptive runs' counts over time (none may change)
    assert all(line["steps"][0][0] == 0.0 for line in counts["lines"])
    assert all("worker_counts" in r and "others_cpu_mean" in r for r in doc["runs"])
    md = (out / "hdd-vs-ssd.md").read_text()
    assert "run 3 time(s)" in md and "median" in md and f"{BUSY_CPU_PERCENT:.0f}% of a core" in md
    assert "## The adaptive runs' worker counts" in md and "## Points (median [min-max]" in md
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("mploader-exp-")]


@pytest.fixture
def burners() -> Iterator[None]:
    """A process per CPU spinning, outside the experiment's process tree (the experiment runs as a process of its
    own in these tests): other processes' CPU for the whole run, whatever else the machine does."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _command(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mploader", "experiment", "hdd-vs-ssd", "--devices", "tmpfs", *TINY,
                           "--data-dirs", "1", "--workers", "1", "--partition-workers", "", "--kafka-threads", "",
                           "--repeat", "1", "--work-dir", str(tmp_path), *extra], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.usefixtures("burners")
def test_a_run_on_a_busy_host_is_flagged_or_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _command(tmp_path, "--out", str(out))
    assert done.returncode == 0, done.stderr
    run, = _report(out)["runs"]
    assert run["busy_host"] and run["others_cpu_mean"] > BUSY_CPU_PERCENT
    assert "other processes used" in run["busy_host_reasons"][0]
    point, = _report(out)["points"]
    assert point["busy_host_runs"] == [run["run"]]
    fig = _figure_data(out, "unclean restart, 1 data dir")
    assert all(pt["busy"] for s in fig["panels"][0]["series"] for pt in s["points"])  # drawn hollow
    assert "BUSY HOST" in done.stderr
    assert "run 1 (tmpfs" in (out / "hdd-vs-ssd.md").read_text().split("## Busy host")[1]

    refused = tmp_path / "refused"
    stopped = _command(tmp_path, "--out", str(refused), "--refuse-busy")
    assert stopped.returncode == EXIT_BUSY, stopped.stderr
    assert "busy with other work" in stopped.stderr and "other processes used" in stopped.stderr
    assert not refused.exists()  # nothing reported
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("mploader-exp-")]


@pytest.mark.skipif(ORACLE is None, reason="no Kafka oracle (KAFKA_ORACLE or ~/.cache/kafka-oracle/oracle)")
def test_kafkas_loader_runs_beside_mploader_and_loads_the_same(tmp_path: Path) -> None:
    """Kafka's LogLoader with 1, 2 and 4 recovery threads, on a broker of one and of two data dirs, each run on a
    fresh copy of the unclean data: every run of either loader loads what Kafka's first run loaded."""
    out = tmp_path / "out"
    code = main(["experiment", "hdd-vs-ssd", "--devices", "tmpfs", *TINY, "--data-dirs", "1,2", "--workers", "1",
                 "--partition-workers", "auto", "--kafka-threads", "1,2,4", "--repeat", "1", "--oracle", str(ORACLE),
                 "--work-dir", str(tmp_path), "--out", str(out)])
    assert code == 0
    doc = _report(out)
    for dirs in (1, 2):
        mine = [r for r in doc["runs"] if r["data_dirs"] == dirs]
        kafka = [r for r in mine if r["loader"] == "kafka"]
        assert sorted(r["recovery_threads"] for r in kafka) == [1, 2, 4]
        assert {r["choice"] for r in mine} == {"N=1", "P=auto", "Kafka, 1 thread", "Kafka, 2 threads",
                                               "Kafka, 4 threads"}
        ends = {json.dumps(r["log_end_offsets"], sort_keys=True) for r in mine}
        assert len(ends) == 1 and len(json.loads(ends.pop())) == 8  # every run, either loader: the same offsets
    assert [line for line in doc["agreement"] if "loaded the same as" in line and "(Kafka, 1 thread)" in line] \
        and not [line for line in doc["agreement"] if "MISMATCH" in line]
    assert any(line.startswith("Kafka's loader: ") for line in doc["notes"])
    fig = _figure_data(out, "unclean restart, 2 data dirs")
    assert fig["x"] == ["N=1", "P=auto", "Kafka, 1 thread", "Kafka, 2 threads", "Kafka, 4 threads"]


def test_without_the_oracle_kafkas_runs_are_left_out_with_a_note(tmp_path: Path) -> None:
    """No $KAFKA_ORACLE, and a home without ~/.cache/kafka-oracle: the report says why Kafka did not run."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_ORACLE"}
    done = subprocess.run([sys.executable, "-m", "mploader", "experiment", "hdd-vs-ssd", "--devices", "tmpfs", *TINY,
                           "--data-dirs", "1", "--workers", "1", "--partition-workers", "", "--repeat", "1",
                           "--work-dir", str(tmp_path), "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**env, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    doc = _report(out)
    assert [r["loader"] for r in doc["runs"]] == ["mploader"]
    assert any("Kafka's loader not run: no oracle" in n for n in doc["notes"])
    assert main(["experiment", "hdd-vs-ssd", "--oracle", str(tmp_path / "none"), "--out", str(out)]) == 2


# ---- two data dirs, each on a seek-modelled device (root, FUSE) ------------------------------------------------


@root_only
@pytest.mark.skipif(fuse_problem() is not None, reason=f"no FUSE here: {fuse_problem()}")
def test_two_data_dirs_go_on_two_seek_modelled_devices(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(["experiment", "hdd-vs-ssd", "--devices", "ssd-seek", *TINY, "--data-dirs", "2", "--workers", "1",
                 "--partition-workers", "", "--kafka-threads", "", "--repeat", "1", "--work-dir", str(tmp_path),
                 "--out", str(out)])
    assert code == 0
    run, = _report(out)["runs"]
    devices = run["devices"].split()
    assert len(devices) == 2 and len(set(devices)) == 2 and all(d.startswith("loop") for d in devices)
    assert any("the disk model served" in n and "late" in n for n in _report(out)["notes"])
    assert _ours(tmp_path) == NOTHING
