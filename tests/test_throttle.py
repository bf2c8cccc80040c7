"""The IO budget (mploader.engine.throttle, LoaderConfig.max_read_bytes_per_sec): the turns' arithmetic, the
paced scan's result, and real loads held to the budget within 10% (inline and with worker processes)."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from mploader.config import LoaderConfig
from mploader.engine.throttle import ReadBudget, paced_scan
from mploader.errors import LoadInterrupted
from mploader.experiments.run import make_unclean
from mploader.generate import GeneratorConfig, generate
from mploader.manager import load_logs
from mploader.scan import SegmentTask, scan_segment

MB = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_turns_follow_each_other_at_the_rate_and_at_most_a_quarter_second_is_banked() -> None:
    clock = Clock()
    b = ReadBudget(10 * MB, clock)
    assert [b.reserve(5 * MB), b.reserve(5 * MB), b.reserve(10 * MB)] == [100.0, 100.5, 101.0]  # none banked yet
    clock.now = 110.0  # idle for 8 s: a quarter second of reads at once, not 8 s of them
    assert b.reserve(10 * MB) == 109.75 and b.reserve(MB) == 110.75 and b.reserve(1) == 110.85
    clock.now = 110.95  # a scan that asks late (0.1 s after its turn at 110.85) loses nothing: it is caught up
    assert b.reserve(MB) == pytest.approx(110.8500001)
    assert ReadBudget(40 * MB).piece_bytes == 10 * MB and ReadBudget(1000).piece_bytes == 1 << 20
    with pytest.raises(ValueError):
        ReadBudget(0)


def test_waiting_for_a_turn_stops_when_the_load_is_interrupted() -> None:
    b = ReadBudget(1 * MB)
    b.reserve(50 * MB)  # the next turn is 50 s away
    cancelled = threading.Event()
    threading.Timer(0.05, cancelled.set).start()
    t0 = time.monotonic()
    with pytest.raises(LoadInterrupted):
        b.wait(MB, cancelled)
    assert time.monotonic() - t0 < 5


def test_closing_the_inline_engine_stops_a_scan_waiting_for_its_turn(broker: Path) -> None:
    """A Ctrl-C closes the engine: a loading thread waiting for its turn stops at once (the manager waits for
    its loading threads; an uninterruptible sleep there held a Ctrl-C for the length of the wait)."""
    from mploader.engine.inline import InlineEngine
    from mploader.result import LoadStats

    engine = InlineEngine(LoadStats(), max_read_bytes_per_sec=MB)
    engine.budget(str(broker)).reserve(50 * MB)  # the next turn is 50 s away
    log = max(broker.rglob("*.log"), key=lambda p: p.stat().st_size)
    threading.Timer(0.05, engine.close).start()
    t0 = time.monotonic()
    with pytest.raises(LoadInterrupted):
        engine.scan(str(broker), SegmentTask(str(log), int(log.name[:20])))
    assert time.monotonic() - t0 < 5


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 MB of ~16 KiB batches in 2 MiB segments, unclean with every recovery point 0 (all of it is scanned)."""
    out = tmp_path_factory.mktemp("budget")
    summary = generate(str(out / "gen"), GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=3,
                                                         total_bytes=12 * MB, segment_bytes=2 << 20, faults=0, seed=3))
    d = Path(summary.data_dirs[0])
    make_unclean([d])
    return d


def test_a_paced_scan_is_the_scan(broker: Path) -> None:
    log = max(broker.rglob("*.log"), key=lambda p: p.stat().st_size)
    task = SegmentTask(str(log), int(log.name[:20]), index_interval=4096)
    paced = paced_scan(task, ReadBudget(4 * MB))  # pieces of 1 MiB: the 2 MiB segment in 2 or 3
    whole = scan_segment(task)
    assert (paced.end, paced.valid_bytes, paced.stop) == (whole.end, whole.valid_bytes, whole.stop)
    assert paced.batches.tobytes() == whole.batches.tobytes()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_real_load_is_held_to_its_budget(broker: Path, tmp_path: Path, workers: int) -> None:
    """4 MB/s over ~12 MB: about 3 s (against ~0.3 s of a pool's start and shutdown).  The rate is the bytes
    scanned over the load_logs call (preflight, pool start-up and Phase 2 included) less its final syncfs of what
    recovery wrote (not reads; on a shared disk it took up to 0.4 s), within 10% of the budget."""
    d = tmp_path / "d"
    shutil.copytree(broker, d)
    rate = 4 * MB
    result = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=workers,
                                              max_read_bytes_per_sec=rate))
    seconds = result.stats.seconds["total"] - result.stats.seconds["flush"]
    scanned = result.stats.bytes_read
    assert scanned >= 11 * MB
    assert 0.9 * rate <= scanned / seconds <= 1.1 * rate, (scanned, seconds)


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LoaderConfig(max_read_bytes_per_sec=0)
