"""KIP-263's lazy start done safely: ``load_logs(..., verify_in_background=True)`` and ``mploader load
--verify-after``.  The load's outcome is the plain load's; the background audits exactly the segments the load
did not read, finds what ``verify`` finds there, can be watched, waited for and cancelled, and leaves no process
or shared memory behind, also when its caller exits early."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

import mploader
from mploader import LoaderConfig
from mploader.errors import LoadInterrupted
from mploader.generate import GeneratorConfig, generate
from mploader.scan.audit import AuditTask
from mploader.verify import background as background_module, verify_logs
from mploader.verify.background import BackgroundVerification, SegmentRef, inactive_segments, newest_first
from tests import cli_json
from tests.crashy_worker import scan_workers
from tests.fingerprint import tree_state

SMALL = GeneratorConfig(
    data_dirs=1, topics=2, partitions_per_topic=2, total_bytes=800_000, segment_bytes=64 * 1024, batch_bytes=4096,
    records_per_batch=8, faults=0, seed=5,
)
NOW = 1_800_000_000_000


@pytest.fixture(scope="module")
def unclean_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verify-after") / "b"
    generate(out, SMALL)
    return out / "data-0"


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest / src.name)
    return dest / src.name


def _flip_below_recovery_point(d: Path) -> tuple[Path, int]:
    """A flipped byte in the first segment of the first partition (below any recovery point: unread)."""
    part = sorted(p for p in d.iterdir() if p.is_dir())[0]
    log = sorted(part.glob("*.log"))[0]
    with open(log, "r+b") as f:
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 0xFF]))
    return log, 200


@pytest.mark.parametrize("workers", [1, 2])
def test_background_audits_what_the_load_left_unread(unclean_source: Path, tmp_path: Path, workers: int) -> None:
    plain = mploader.load_logs([_copy(unclean_source, tmp_path / "plain")], LoaderConfig(), now_ms=NOW)
    d = _copy(unclean_source, tmp_path / "lazy")
    log, _ = _flip_below_recovery_point(d)
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=workers)
    result = mploader.load_logs([d], cfg, now_ms=NOW, verify_in_background=True)
    assert result.background is not None
    after_load = tree_state(d)
    report = result.background.wait(timeout=120)
    assert report is not None and result.background.done
    assert tree_state(d) == after_load  # found, never acted on
    # the load's own outcome is the plain load's (the flipped byte is below the recovery point: Kafka never reads it)
    def outcome(r: mploader.LoadResult) -> dict[str, object]:
        return {os.path.basename(lg.dir): {k: v for k, v in lg.to_json().items() if k != "dir"} for lg in r.all_logs()}
    assert outcome(result) == outcome(plain)
    audited = {s.path for p in report.partitions for s in p.segments}
    assert audited == {s.path for s in inactive_segments(result)}
    recovered = {os.path.join(lg.dir, f"{b:020d}.log") for lg in result.all_logs() for b in lg.recovered_segments}
    assert not audited & recovered
    # what it finds is what mploader verify finds in those segments
    full = {s.path: s for p in verify_logs([d], cfg, predict=False).partitions for s in p.segments}
    for p in report.partitions:
        for s in p.segments:
            assert s.to_json() == full[s.path].to_json()
    assert not report.healthy
    bad = [s for p in report.partitions for s in p.segments if s.first_invalid_position is not None]
    assert [s.path for s in bad] == [str(log)]


def test_the_callers_order_decides_what_is_audited_and_when(unclean_source: Path, tmp_path: Path) -> None:
    """The order function's list is what the background audits, in that order (here: the oldest segment of each
    partition only, and the partitions backwards); the default puts the most recently written .log first."""
    d = _copy(unclean_source, tmp_path)
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=1)
    result = mploader.load_logs([d], cfg, now_ms=NOW)
    everything = inactive_segments(result)
    assert len({s.log.dir for s in everything}) > 1 and len(everything) > len({s.log.dir for s in everything})
    audited: list[str] = []

    def oldest_of_each_backwards(segs: list[SegmentRef]) -> list[SegmentRef]:
        firsts = {s.log.dir: s for s in sorted(segs, key=lambda s: s.base_offset, reverse=True)}
        return sorted(firsts.values(), key=lambda s: s.log.dir, reverse=True)

    chosen = oldest_of_each_backwards(everything)
    real_audit = background_module.AuditTask

    def recorded(path: str, base_offset: int) -> AuditTask:  # the tasks in the order they are made
        audited.append(path)
        return real_audit(path, base_offset)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(background_module, "AuditTask", recorded)
        bg = BackgroundVerification(result, cfg, order=oldest_of_each_backwards)
        report = bg.wait(60)
    assert report is not None and bg.segments_total == len(chosen)
    assert audited == [s.path for s in chosen]
    assert sorted(s.path for p in report.partitions for s in p.segments) == sorted(s.path for s in chosen)
    assert bg.figures and bg.figures[0].segments_done == len(chosen)
    oldest = min(everything, key=lambda s: (os.stat(s.path).st_mtime_ns, s.path))
    os.utime(oldest.path, ns=(time.time_ns(), time.time_ns() + 10**9))  # now the most recently written
    assert newest_first(inactive_segments(result))[0].path == oldest.path != newest_first(everything)[0].path


def test_cancel_stops_it_and_leaves_nothing(unclean_source: Path, tmp_path: Path) -> None:
    d = _copy(unclean_source, tmp_path)
    result = mploader.load_logs([d], LoaderConfig(segment_scan_workers_per_data_dir=2), now_ms=NOW,
                                verify_in_background=True)
    assert result.background is not None
    result.background.cancel()
    assert result.background.done
    with pytest.raises(LoadInterrupted):
        result.background.wait(10)
    deadline = time.monotonic() + 10
    while scan_workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not scan_workers()
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"mploader-{os.getpid()}-")]


def test_a_caller_that_exits_early_leaves_no_process_or_shared_memory(unclean_source: Path, tmp_path: Path) -> None:
    d = _copy(unclean_source, tmp_path)
    script = textwrap.dedent(f"""
        import os, mploader
        r = mploader.load_logs([{str(d)!r}], mploader.LoaderConfig(segment_scan_workers_per_data_dir=2),
                               verify_in_background=True)
        print(os.getpid(), flush=True)
    """)  # exits at once: the background is still starting or auditing
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(cli_json.ROOT)))
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 10
    left = [p for p in psutil.process_iter(["ppid", "cmdline"]) if p.info["ppid"] == pid]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if p.is_running()]
    assert not left
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"mploader-{pid}-")]
    assert "Traceback" not in out.stderr


def test_cli_verify_after_prints_both_timings_and_json(unclean_source: Path, tmp_path: Path) -> None:
    d = _copy(unclean_source, tmp_path / "a")
    _flip_below_recovery_point(d)
    text = cli_json.run("load", "--verify-after", "--workers", "1", str(d))
    assert text.returncode == 1, text.stderr  # the load went well; the verification found a problem
    assert "verified after the load:" in text.stdout and "the load took" in text.stdout
    assert "invalid from byte" in text.stdout
    d2 = _copy(unclean_source, tmp_path / "b")
    js = cli_json.run("load", "--verify-after", "--json", str(d2))
    assert js.returncode == 0, js.stderr
    doc = json.loads(js.stdout)
    verification = doc["verification"]
    assert verification["healthy"] and verification["seconds"]["load"] > 0
    cli_json.validate({**{k: v for k, v in verification.items() if k != "seconds"}, "command": "verify"})
