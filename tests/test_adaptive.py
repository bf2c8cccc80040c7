"""Adaptive workers (mploader.engine.adaptive): the controller against simulated devices (an HDD that seeks when
readers compete, an SSD, tmpfs, a load whose character changes), the gate's real semaphore, and a real load
with "adaptive" that ends exactly as the inline one."""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass

import pytest

import mploader.load_plan as load_plan_mod
from mploader.config import LoaderConfig
from mploader.engine import WORKER_STARTS
from mploader.engine.adaptive import LOKY_RELEASES, AdaptiveController, Gate, Observation, check_loky
from mploader.generate import GeneratorConfig, generate
from mploader.load_plan import auto_pool_min_bytes, usable_cpus, workers_per_dir
from mploader.manager import load_logs

MB = 1e6
INTERVAL = 0.5


@dataclass(frozen=True)
class Device:
    """A simulated data dir: each worker scans at ``cpu`` bytes/s on one of ``cores``; the device reads at most
    ``bandwidth`` bytes/s with one reader, less with more (``seek``: the share lost per extra concurrent
    reader, as a disk head moving between files); ``bandwidth`` None: no device (tmpfs)."""

    cpu: float
    cores: int
    bandwidth: float | None = None
    seek: float = 0.0

    def throughput(self, n: int) -> float:
        compute = min(n, self.cores) * self.cpu
        if self.bandwidth is None:
            return compute
        return min(compute, self.bandwidth / (1 + self.seek * (n - 1)))

    def util(self, n: int) -> float | None:
        if self.bandwidth is None:
            return None
        return min(100.0, 100.0 * self.throughput(n) / (self.bandwidth / (1 + self.seek * (n - 1))))


def simulate(devices: list[Device], controller: AdaptiveController, intervals: int, noise: float = 0.04,
             seed: int = 7) -> tuple[float, list[int]]:
    """Run ``intervals`` intervals (the device of interval i: ``devices[i * len(devices) // intervals]``); returns
    the bytes done and the count in each interval."""
    rng = random.Random(seed)
    done, counts = 0.0, []
    for i in range(intervals):
        dev = devices[i * len(devices) // intervals]
        n = controller.target
        counts.append(n)
        nbytes = dev.throughput(n) * INTERVAL * rng.uniform(1 - noise, 1 + noise)
        util = dev.util(n)
        done += nbytes
        controller.observe(Observation(INTERVAL, int(nbytes), None if util is None else util * rng.uniform(0.97, 1)))
    return done, counts


def best_fixed(dev: Device, cap: int) -> float:
    return max(dev.throughput(n) for n in range(1, cap + 1))


HDD = Device(cpu=400 * MB, cores=8, bandwidth=150 * MB, seek=0.3)  # seed 002: more readers, more seeks
SSD = Device(cpu=400 * MB, cores=4, bandwidth=3000 * MB)  # CPU-bound at 4 workers
TMPFS = Device(cpu=400 * MB, cores=2)


@pytest.mark.parametrize("start", [1, 8])
def test_on_an_hdd_it_settles_on_one_reader(start: int) -> None:
    """The device is saturated by one worker and every extra reader costs seeks: from 1 it never keeps a second
    (the probe loses throughput), from 8 it steps down to 1; either way within 10% of the best fixed count."""
    c = AdaptiveController(cap=8, start=start)
    done, counts = simulate([HDD], c, 120)
    assert counts[-40:].count(1) >= 32  # mostly one reader at the end (probes back up are brief)
    assert done >= 0.9 * best_fixed(HDD, 8) * INTERVAL * 120


@pytest.mark.parametrize("dev,best", [(SSD, 4), (TMPFS, 2)])
def test_when_the_cpus_are_the_limit_it_grows_to_the_cores(dev: Device, best: int) -> None:
    c = AdaptiveController(cap=8, start=1)
    done, counts = simulate([dev], c, 120)
    assert counts[-40:].count(best) >= 32  # probes above the cores give nothing and are undone
    assert max(counts[-40:]) <= best + 1 and min(counts[-40:]) >= best
    assert done >= 0.9 * best_fixed(dev, 8) * INTERVAL * 120


def test_it_follows_a_load_whose_character_changes() -> None:
    """Cold (the HDD decides: one reader) then warm (the page cache holds the rest: the CPUs decide): a probe up
    that failed is tried again after its back-off, and the pool grows once it pays."""
    c = AdaptiveController(cap=8, start=1)
    _, counts = simulate([HDD, SSD], c, 200)
    assert counts[60:100].count(1) >= 32
    assert counts[-30:].count(4) >= 24


def test_noise_alone_does_not_make_it_wander() -> None:
    """A flat device (no gain from any count, never saturated): after the probes it sits still."""
    flat = Device(cpu=100 * MB, cores=1, bandwidth=10_000 * MB)
    c = AdaptiveController(cap=4, start=1)
    _, counts = simulate([flat], c, 200, noise=0.06)
    assert counts[-100:].count(1) >= 90  # the back-off doubles: probes get rarer, not more frequent


def test_without_a_free_core_it_does_not_chase_noise() -> None:
    """A machine whose CPUs the neighbours keep busy: the load gets 0.7 of a core whatever its count, so more
    workers give nothing, and what an interval measures swings by 30%.  With no idle CPU and workers that compute
    (not wait for a device), no probe up is made; the same load waiting on a device (0.1 core used) is probed."""
    rng = random.Random(3)
    c = AdaptiveController(cap=4, start=1)
    for _ in range(100):
        nbytes = int(600 * MB * INTERVAL * rng.uniform(0.7, 1.3))
        c.observe(Observation(INTERVAL, nbytes, None, load_cores=0.7, idle_cores=0.05))
    assert {n for n, _, _ in c.history} == {1}
    waiting = AdaptiveController(cap=4, start=1)
    for _ in range(3):
        waiting.observe(Observation(INTERVAL, int(80 * MB * INTERVAL), 95.0, load_cores=0.1, idle_cores=0.0))
    assert waiting.target == 2


def test_an_interval_straddling_a_change_is_not_counted() -> None:
    c = AdaptiveController(cap=2, start=1)
    assert c.observe(Observation(1.0, 7, 10.0)) == 1  # the first: the workers were starting
    assert c.rates == {}
    assert c.observe(Observation(1.0, 100, 10.0)) == 2  # grows: a probe
    assert c.observe(Observation(1.0, 10_000, 10.0)) == 2  # settling: not judged, whatever it says
    assert 2 not in c.rates
    assert c.observe(Observation(1.0, 105, 10.0)) == 1  # 5% more is no gain: back to 1
    assert c.rates == {1: 100.0, 2: 105.0}


def test_adaptive_means_at_least_two_workers_to_choose_from_where_a_pool_pays() -> None:
    cfg = LoaderConfig(segment_scan_workers_per_data_dir="adaptive")
    enough = math.ceil(auto_pool_min_bytes(max(2, usable_cpus())))
    assert workers_per_dir(cfg, 1) >= 2 and workers_per_dir(cfg, 1, enough) >= 2
    assert workers_per_dir(cfg, 1, enough - 1) == 1  # as "auto": the pool's start would not pay
    with pytest.raises(ValueError):
        LoaderConfig(segment_scan_workers_per_data_dir="sometimes")  # type: ignore[arg-type]


def test_the_gate_gives_out_and_takes_back_real_permits() -> None:
    g = Gate(1)
    closed = threading.Event()
    g.resize(3, closed)
    assert [g.sem.acquire(timeout=0.01) for _ in range(4)] == [True, True, True, False]
    for _ in range(3):
        g.sem.release()
    g.resize(1, closed)  # takes two back
    assert g.permits == 1 and g.sem.acquire(timeout=0.01) and not g.sem.acquire(timeout=0.01)
    g.sem.release()
    old = g.sem
    new = g.semaphore(fresh=True)  # a fresh pool gets a fresh semaphore with the current count
    assert new is not old and new is g.sem and new.acquire(timeout=0.01) and not new.acquire(timeout=0.01)


def test_an_adaptive_load_ends_exactly_as_the_inline_one(tmp_path, monkeypatch) -> None:
    # a small data set, but the adaptive pool all the same
    monkeypatch.setattr(load_plan_mod, "POOL_START_SECONDS", dict.fromkeys(WORKER_STARTS, 0.0))
    monkeypatch.setattr(load_plan_mod, "POOL_TASK_SECONDS", 0)
    out = generate(str(tmp_path / "gen"), GeneratorConfig(data_dirs=1, topics=2, partitions_per_topic=2,
                                                          total_bytes=6_000_000, segment_bytes=512 * 1024, faults=3,
                                                          fault_kinds=("torn_tail", "flipped_byte", "missing_index"),
                                                          seed=5))
    import shutil

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(out.data_dirs[0], a)
    shutil.copytree(out.data_dirs[0], b)
    inline = load_logs([str(a)], LoaderConfig(segment_scan_workers_per_data_dir=1), now_ms=1_800_000_000_000)
    adaptive = load_logs([str(b)], LoaderConfig(segment_scan_workers_per_data_dir="adaptive"),
                         now_ms=1_800_000_000_000)
    assert adaptive.stats.workers_per_dir >= 2 and adaptive.stats.segments_scanned > 0

    def shape(r):  # type: ignore[no-untyped-def]
        return [(lg.topic_partition, lg.log_end_offset, lg.recovery_point, [s.size_bytes for s in lg.segments],
                 lg.truncated_bytes) for lg in sorted(r.all_logs(), key=lambda lg: (lg.topic, lg.partition))]

    assert shape(adaptive) == shape(inline)
    for f in sorted(a.rglob("*")):  # and the files on disk are the same bytes
        g = b / f.relative_to(a)
        assert f.is_dir() or f.read_bytes() == g.read_bytes(), f


def test_the_adaptive_pool_starts_one_worker_and_grows_with_its_count(tmp_path, monkeypatch) -> None:
    """The pool of a dir starts with the first count's workers (each costs ~0.2 s of CPU to start) and gets more
    when the count grows (loky starts them at the next submission; this holds the private attribute it uses)."""
    import psutil

    from mploader.engine.plan import DirPlan
    from mploader.engine.pool import PoolEngine
    from mploader.result import LoadStats
    from tests.test_engine import _partitions_of

    out = generate(str(tmp_path / "gen"), GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=4,
                                                          total_bytes=4_000_000, segment_bytes=256 * 1024, faults=0))
    d = out.data_dirs[0]
    monkeypatch.setattr("mploader.engine.adaptive.MAX_INTERVAL_S", 3600.0)  # the count changes only below
    monkeypatch.setattr("mploader.engine.adaptive.MIN_SCANS", 10**9)

    def workers() -> set[int]:
        return {c.pid for c in psutil.Process().children() if "resource_tracker" not in " ".join(c.cmdline())}

    before = workers()  # (other tests' processes, if any are still about)
    engine = PoolEngine(LoadStats(), 3, [d], None, adaptive=True)
    try:
        engine.prefetch([DirPlan(d, False, _partitions_of(d), {})])
        assert len(workers() - before) == 1
        assert engine.adaptive is not None
        engine.adaptive._apply(d, 3)
        assert engine.adaptive.gates[d].permits == 3
        engine._submit(d, [engine.planned[d][0][1][0]])  # any submission brings the pool to its new size
        assert len(workers() - before) == 3
    finally:
        engine.close()


def test_adaptive_workers_check_the_loky_release() -> None:
    """They grow a pool through loky's private _max_workers: only the releases where that is known to work pass,
    any other is a clear error before a pool starts."""
    check_loky()  # the installed one
    low, high = LOKY_RELEASES
    for version in (f"{low[0]}.{low[1]}.0", f"{high[0]}.{high[1] - 1}.9", f"{low[0]}.{low[1]}.1.dev0"):
        check_loky(version)
    for version in (f"{high[0]}.{high[1]}.0", "3.3.9", "4.0.0", "2.9.0", "unknown"):
        with pytest.raises(RuntimeError, match=f"loky {version} is installed"):
            check_loky(version)
