"""Issue 13, items 6 and 7: progress with bytes to recover, percentage, rate and ETA (``Progress.update``, the
terminal display), and the load's gauges served for Prometheus while it runs (``mploader.prometheus``,
``mploader load --metrics-port``).  Real loads of generated or built data dirs, real HTTP over loopback."""

from __future__ import annotations

import json
import logging
import math
import os
import pty
import re
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mploader import LoaderConfig, MetricsRegistry, load_logs
from mploader.cli import main
from mploader.generate import GeneratorConfig, generate
from mploader.metrics import BYTES_RECOVERED, RECOVERY_ETA_SECONDS, TOTAL_BYTES_TO_RECOVER
from mploader.progress import DirProgress, Progress
from mploader.prometheus import MetricsServer
from tests.kafkadir import NOW, PartitionBuilder, data_dir

REPO = Path(__file__).resolve().parents[1]


def _broker(root: Path, *, dirs: int = 2, partitions: int = 3, clean: bool = False) -> list[str]:
    cfg = GeneratorConfig(data_dirs=dirs, topics=2, partitions_per_topic=partitions, total_bytes=1_500_000,
                          segment_bytes=64 * 1024, faults=0, clean_shutdown=clean, seed=3)
    generate(root, cfg)
    return [str(root / f"data-{i}") for i in range(dirs)]


class _Recorder(Progress):
    """Every raw event and every update, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.lock = threading.Lock()

    def start(self, partitions_per_dir: dict[str, int]) -> None:
        with self.lock:
            self.events.append(("start", dict(partitions_per_dir)))

    def partition_done(self, data_dir: str, partition: str) -> None:
        with self.lock:
            self.events.append(("partition_done", data_dir))

    def update(self, figures: DirProgress) -> None:
        with self.lock:
            self.events.append(("update", figures))

    def close(self) -> None:
        with self.lock:
            self.events.append(("close", None))

    def updates(self, d: str) -> list[DirProgress]:
        return [f for k, f in self.events if k == "update" and isinstance(f, DirProgress) and f.data_dir == d]


@pytest.mark.parametrize("workers", [1, 2])
def test_update_gives_bytes_to_recover_percentage_rate_and_eta_per_data_dir(tmp_path: Path, workers: int) -> None:
    dirs = _broker(tmp_path / "b")
    rec = _Recorder()
    result = load_logs(dirs, LoaderConfig(segment_scan_workers_per_data_dir=workers), progress=rec)
    kinds = [k for k, _ in rec.events]
    assert kinds[0] == "start" and kinds[-1] == "close"
    total_planned = 0
    for d in dirs:
        ups = rec.updates(d)
        partitions = sum(1 for lg in result.all_logs() if lg.data_dir == d)
        first = ups[0]
        # the plan's totals arrive before the dir's first partition is done: no "0/48" without a total
        assert first.planned and first.bytes_total and first.bytes_done == 0 and first.partitions_done == 0
        assert first.segments_total and first.eta_seconds is None and first.partitions_total == partitions
        assert rec.events.index(("update", first)) < rec.events.index(("partition_done", d))
        assert all(u.bytes_total == first.bytes_total for u in ups)  # fault-free data: the plan holds
        done = [u.bytes_done for u in ups]
        assert done == sorted(done)  # never goes back
        middle = [u for u in ups if 0 < u.bytes_done < first.bytes_total]
        assert middle, "the bytes move between the first and the last update"
        for u in middle:
            assert u.rate_bytes_per_second is not None and u.rate_bytes_per_second > 0
            assert u.eta_seconds is not None and u.eta_seconds > 0
            assert 0 < u.percent < 100 and u.percent == pytest.approx(100 * u.bytes_done / first.bytes_total)
        last = ups[-1]
        assert last.finished and last.partitions_done == partitions and last.bytes_done == last.bytes_total
        assert last.percent == 100 and last.eta_seconds == 0
        assert last.segments_done == last.segments_total
        json.dumps(last.to_json())
        total_planned += first.bytes_total
    # every planned byte was read once (fault-free data), and nothing else was
    assert total_planned == result.stats.bytes_read and result.stats.unplanned_scans == 0


def test_bytes_the_plan_held_but_recovery_did_not_read_count_as_done(tmp_path: Path) -> None:
    """A corrupt batch in S(0) of t-0: recovery truncates there and deletes S(10) and S(20) unread; the dir's
    bytes done jump to what t-0's plan held when t-0 is done, so the bar ends at 100%, not short of it."""
    d = data_dir(tmp_path, clean=False)
    a = PartitionBuilder(d, topic="a").std3()
    b = PartitionBuilder(d, topic="b").std3()
    log0 = bytearray(a.read("00000000000000000000.log"))
    log0[72 * 5 + 65] ^= 0x01  # the CRC-covered part of the sixth batch
    a.write("00000000000000000000.log", bytes(log0))
    rec = _Recorder()
    result = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=1), now_ms=NOW,
                       progress=rec)
    assert result.logs[next(tp for tp in result.logs if tp.topic == "a")].log_end_offset == 5
    ups = rec.updates(str(d))
    size_a, size_b = sum(map(len, a.segments.values())), sum(map(len, b.segments.values()))
    assert ups[0].bytes_total == size_a + size_b
    after_a = [u for u in ups if u.partitions_done == 1][0]
    assert after_a.bytes_done == size_a  # read: 72 * 5 bytes of S(0); held by the plan: all three segments
    assert result.stats.bytes_read < size_a + size_b
    assert ups[-1].bytes_done == ups[-1].bytes_total and ups[-1].percent == 100


def test_a_clean_dir_loaded_inline_counts_by_partitions(tmp_path: Path) -> None:
    dirs = _broker(tmp_path / "b", dirs=1, clean=True)
    rec = _Recorder()
    load_logs(dirs, LoaderConfig(segment_scan_workers_per_data_dir=1), progress=rec)
    ups = rec.updates(dirs[0])
    assert ups[0].planned and ups[0].bytes_total is None and ups[0].percent == 0
    assert [u.partitions_done for u in ups[1:]] == list(range(1, 7))
    assert ups[3].percent == pytest.approx(100 * 3 / 6) and ups[3].eta_seconds is not None
    assert ups[-1].finished and ups[-1].percent == 100


def test_a_progress_without_update_still_gets_its_events(tmp_path: Path) -> None:
    """An older callback object that has only some of the methods (duck-typed, not a subclass)."""
    dirs = _broker(tmp_path / "b", dirs=1)

    class Old:
        def __init__(self) -> None:
            self.done: list[str] = []
            self.nbytes = 0

        def partition_done(self, data_dir: str, partition: str) -> None:
            self.done.append(partition)

        def segments_scanned(self, data_dir: str, segments: int, nbytes: int) -> None:
            self.nbytes += nbytes

    old = Old()
    result = load_logs(dirs, LoaderConfig(segment_scan_workers_per_data_dir=1), progress=old)  # type: ignore[arg-type]
    assert len(old.done) == 6 and old.nbytes == result.stats.bytes_read > 0


def test_the_metrics_registry_gets_bytes_and_eta_gauges_while_the_load_runs(tmp_path: Path) -> None:
    dirs = _broker(tmp_path / "b")
    metrics = MetricsRegistry()
    result = load_logs(dirs, LoaderConfig(segment_scan_workers_per_data_dir=1), metrics=metrics)
    for d in dirs:
        total = metrics.values_of(TOTAL_BYTES_TO_RECOVER, dir=d)
        done = metrics.values_of(BYTES_RECOVERED, dir=d)
        assert len(set(total)) == 1 and done == sorted(v for v in done if v is not None) and done[-1] == total[0]
        assert metrics.values_of(RECOVERY_ETA_SECONDS, dir=d)[-1] == 0
    assert sum(metrics.values_of(TOTAL_BYTES_TO_RECOVER, dir=d)[0] or 0 for d in dirs) == result.stats.bytes_read
    assert not any(name in (TOTAL_BYTES_TO_RECOVER, BYTES_RECOVERED, RECOVERY_ETA_SECONDS)
                   for name, _ in metrics.current())  # removed when the load ends, like Kafka's gauges


# ------------------------------------------------------------------------------------------------
# Prometheus, over loopback, during a real load


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a loopback URL of this test
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _port_is_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


class _PauseAt(_Recorder):
    """Holds the load (its only recovery thread) in the ``n``-th partition_done until the test says go."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.reached = threading.Event()
        self.go = threading.Event()
        self.at_pause: DirProgress | None = None

    def partition_done(self, data_dir: str, partition: str) -> None:
        super().partition_done(data_dir, partition)
        if sum(1 for k, _ in self.events if k == "partition_done") == self.n:
            self.at_pause = self.updates(data_dir)[-1]  # the figures as they are while the load is held
            self.reached.set()
            assert self.go.wait(60)


def test_a_scrape_during_a_load_sees_kafkas_gauges_bytes_and_eta_and_the_port_closes_after(tmp_path: Path) -> None:
    (d,) = _broker(tmp_path / "b", dirs=1)
    registry = MetricsRegistry()
    pause = _PauseAt(2)
    out: dict[str, object] = {}
    with MetricsServer(registry, port=0) as server:
        port = server.port
        assert server.url == f"http://127.0.0.1:{port}/metrics"

        def run() -> None:
            try:
                out["result"] = load_logs([d], LoaderConfig(segment_scan_workers_per_data_dir=1),
                                          metrics=registry, progress=pause)
            except BaseException as e:  # noqa: BLE001 - reported by the test thread
                out["error"] = e
            finally:
                pause.reached.set()

        loader = threading.Thread(target=run)
        loader.start()
        try:
            assert pause.reached.wait(60) and "error" not in out
            scraped = _scrape(server.url)
        finally:
            pause.go.set()
            loader.join(60)
        assert "error" not in out, out.get("error")
        after = _scrape(server.url)  # the load ended: its gauges are gone, the endpoint still answers
    assert _port_is_closed(port)

    partitions = len(out["result"].all_logs())  # type: ignore[attr-defined]
    assert partitions == 6
    tags = (("dir", d),)
    # the second partition is done and the load is held there: 4 logs still to load
    assert scraped[("remainingLogsToRecover", tags)] == partitions - 2
    # the recovery thread finished its partition: no segment left to recover in it
    assert scraped[("remainingSegmentsToRecover", (("dir", d), ("threadNum", "0")))] == 0
    figures = pause.at_pause  # the same figures through the callback
    assert figures is not None
    assert figures.partitions_done == 1  # partition_done comes before the figures that count it
    assert scraped[("totalBytesToRecover", tags)] == figures.bytes_total == out["result"].stats.bytes_read  # type: ignore[attr-defined]
    assert 0 < scraped[("bytesRecovered", tags)] == figures.bytes_done < figures.bytes_total  # type: ignore[operator]
    assert figures.eta_seconds is not None  # bytes done, the dir not finished: the pace so far, whole seconds up
    assert scraped[("recoveryEtaSeconds", tags)] == math.ceil(figures.eta_seconds) >= 1
    assert not any(name in ("remainingLogsToRecover", "bytesRecovered") for name, _ in after)


def test_mploader_load_metrics_port_serves_during_the_load_and_closes_after(tmp_path: Path) -> None:
    """The command: ``--metrics-port 0`` serves on a free port (logged at INFO); the load is held in its second
    partition's "Completed load" INFO line (a logging handler, as an operator's log shipper would be) while the
    test scrapes."""
    (d,) = _broker(tmp_path / "b", dirs=1)
    seen: dict[str, object] = {}
    reached, go = threading.Event(), threading.Event()

    class Hold(logging.Handler):
        completed = 0

        def emit(self, record: logging.LogRecord) -> None:
            msg = str(record.msg)
            if msg.startswith("serving the load's metrics on"):
                seen["url"] = record.args[0] if isinstance(record.args, tuple) else None
            elif msg.startswith("Completed load of Log"):
                Hold.completed += 1
                if Hold.completed == 2:
                    reached.set()
                    go.wait(60)

    handler = Hold(logging.INFO)
    logger = logging.getLogger("mploader")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    codes: list[int] = []
    try:
        cli = threading.Thread(target=lambda: codes.append(main(
            ["load", "--json", "--workers", "1", "--metrics-port", "0", d])))
        cli.start()
        try:
            assert reached.wait(60)
            scraped = _scrape(str(seen["url"]))
        finally:
            go.set()
            cli.join(60)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert codes == [0]
    url = str(seen["url"])
    assert url.startswith("http://127.0.0.1:")
    assert _port_is_closed(int(url.rsplit(":", 1)[1].split("/")[0]))
    # the second partition logged its completion and is not counted yet: 6 - 1 still to load
    assert scraped[("remainingLogsToRecover", (("dir", d),))] == 5
    assert scraped[("totalBytesToRecover", (("dir", d),))] > scraped[("bytesRecovered", (("dir", d),))] > 0
    assert ("remainingSegmentsToRecover", (("dir", d), ("threadNum", "0"))) in scraped


def test_mploader_load_refuses_a_metrics_port_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dirs = _broker(tmp_path / "b", dirs=1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["load", "--json", "--metrics-port", str(port), *dirs]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"]["kind"] == "usage" and f"port {port}" in doc["error"]["message"]
    assert not os.path.exists(os.path.join(dirs[0], ".lock"))  # refused before the load took the dir


# ------------------------------------------------------------------------------------------------
# The terminal display


def _run_on_a_terminal(args: list[str]) -> tuple[int, str, str]:
    """``python -m mploader ARGS`` with stderr on a pseudo-terminal (stdout piped); what each received."""
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120", TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-m", "mploader", *args], stdout=subprocess.PIPE, stderr=slave,
                            env=env, text=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    stdout, _ = proc.communicate(timeout=120)
    terminal = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))
    return proc.returncode, stdout, terminal


def test_the_command_draws_bars_with_bytes_rate_and_eta_on_a_terminal_only(tmp_path: Path) -> None:
    dirs = _broker(tmp_path / "b")
    code, stdout, terminal = _run_on_a_terminal(["load", "--workers", "2", *dirs])
    assert code == 0 and "total: 6 partitions" in stdout and "━" not in stdout
    lines = terminal.replace("\r", "\n").splitlines()
    for d in dirs:
        final = [line for line in lines if f"{os.path.basename(d)} " in line and "logs 3/3" in line]
        assert final, terminal
        assert re.search(r"100% [0-9.]+ [kM]B/[0-9.]+ [kM]B +[0-9.]+ [kMG]B/s +done [0-9.]+s +logs 3/3", final[-1])
    assert any(re.search(r"^total .*100% .*logs 6/6", line) for line in lines), terminal
    assert "planning" in terminal  # the rows exist from the start
    # piped stderr, or --json, or --no-progress: no bars
    for extra in (["--json"], ["--no-progress"]):
        code, stdout, terminal = _run_on_a_terminal(["load", *extra, *dirs])
        assert code == 0 and "━" not in terminal and "logs " not in terminal, terminal
    piped = subprocess.run([sys.executable, "-m", "mploader", "load", *dirs], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert piped.returncode == 0 and piped.stderr == ""
