"""Adaptive workers (``segment_scan_workers_per_data_dir="adaptive"``): as many scans at once per data
dir as pay, from the measured throughput and the utilisation of the dir's device.

Seed 002's lesson: after an unclean shutdown a broker's HDDs sat at ~90% utilisation, and more recovery
threads made the restart slower (1h16m with one, 1h36m with two): concurrent readers turn a sequential read
into seeks.  On an SSD or a warm page cache the opposite holds: every core scanning pays.  No fixed count is
right for both, so the pool measures:

* :class:`AdaptiveController` (pure: observations in, a count out) probes one worker at a time.  While the
  device is saturated (``util_high``, 90%) it first steps down, and keeps the lower count as long as the
  throughput stays within ``gain`` (10%) of the best seen: fewer readers for the same bytes.  Otherwise it
  steps up, and keeps the higher count only if the throughput rose by more than ``gain`` (a saturated device
  gets this probe too, after the one down: under an IOPS cap more readers read more, their requests being
  larger).  A probe up needs room for one more worker: idle CPU, or workers that wait for the device rather
  than compute (on a machine whose CPUs the neighbours keep busy, a worker more only splits the load's share,
  and the probe would measure their noise).  A probe is judged on the first whole interval after it (not on
  the one that straddles the change, nor on the first, which holds the workers' start); a kept one goes on in
  its direction, a failed one is undone and not tried again for a while (4 intervals, doubling up to 32), so
  the controller follows a load whose character changes (the page cache warming, another tenant) without
  oscillating;
* :class:`Gate` holds the count: a semaphore shared with the dir's workers (loky's context) lets only
  ``target`` of them scan at once, so a change takes effect at the next scan; the pool is started with the
  first count's workers and grows to the highest count reached (:class:`Adaptive`), never shrinks (a worker
  beyond the count waits at the gate: stopping one would cost a restart if the count grew again);
* :class:`DirMonitor` is the thread that measures each interval (at least ``MIN_INTERVAL_S`` and
  ``MIN_SCANS`` finished scans, at most ``MAX_INTERVAL_S``): the bytes the dir's workers scanned
  (:class:`ScanMeter`) and the device's busy share (:class:`DeviceLoad`: iostat's %util, or
  for a device a cgroup throttles, the share of the limit the reads use, since a throttled device's own
  %util stays low while its readers wait: :mod:`mploader.host.cgroup`).

Each change is logged at INFO (``adaptive workers: /data: 2 -> 1 ...``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from mploader.host.cgroup import ReadLimits, read_limits
from mploader.host.devices import storage_of
from mploader.host.iostat import DiskCounters, disk_counters, disk_rates

log = logging.getLogger(__name__)

UTIL_HIGH = 90.0  # percent: the device is saturated
GAIN = 0.10  # a step must change the throughput by more than this share to count
FIRST_BACKOFF = 4  # intervals before a failed probe is tried again (doubling)
MAX_BACKOFF = 32
IDLE_CORES_FOR_ONE_MORE = 0.5  # a probe up needs this much idle CPU ...
COMPUTING_SHARE = 0.7  # ... unless the load uses less than this many cores per worker (its workers wait for IO)
MIN_INTERVAL_S = 0.25
MIN_SCANS = 3
MAX_INTERVAL_S = 2.0
TICK_S = 0.05


@dataclass(frozen=True, slots=True)
class Observation:
    """One interval of a data dir's load."""

    seconds: float
    bytes_done: int  # bytes of scans finished in the interval
    util_percent: float | None  # how busy the device was (None: no device to watch, e.g. tmpfs)
    load_cores: float | None = None  # CPU the load's own processes used, in cores (None: unknown)
    idle_cores: float | None = None  # CPU nobody on the machine used, in cores (None: unknown)


class AdaptiveController:
    """The worker count of one data dir, from :class:`Observation` s (see the module docstring)."""

    def __init__(self, cap: int, start: int = 1, util_high: float = UTIL_HIGH, gain: float = GAIN):
        if cap < 1:
            raise ValueError("the adaptive pool needs at least one worker")
        self.cap = cap
        self.target = max(1, min(cap, start))
        self.util_high = util_high
        self.gain = gain
        self.rates: dict[int, float] = {}  # bytes/s measured at each count (the latest, smoothed)
        self.history: list[tuple[int, float, float | None]] = []  # (count, bytes/s, util) per observation
        self._probe_from: int | None = None  # the count a probe left (to compare with, and to return to)
        self._settling = True  # the first interval holds the workers' start: not the count's figure either
        self._blocked: dict[int, int] = {}  # count -> the observation from which it may be probed again
        self._backoff: dict[int, int] = {}
        self._seen = 0

    def observe(self, obs: Observation) -> int:
        """Account one interval; returns the count for the next one."""
        self._seen += 1
        if obs.seconds <= 0:
            return self.target
        rate = obs.bytes_done / obs.seconds
        self.history.append((self.target, rate, obs.util_percent))
        if self._settling:  # the interval straddled the last change: it belongs to neither count
            self._settling = False
            return self.target
        old = self.rates.get(self.target)
        self.rates[self.target] = rate if old is None or self._probe_from is not None else (old + rate) / 2
        saturated = obs.util_percent is not None and obs.util_percent >= self.util_high
        if self._probe_from is not None:
            return self._judge(saturated, self._room(obs))
        if saturated and self.target > 1 and self._allowed(self.target - 1):
            return self._move(self.target - 1, probe=True)
        if self.target < self.cap and self._allowed(self.target + 1) and self._room(obs):
            # a saturated device may still give more to more readers (an IOPS limit: their requests are larger),
            # so the probe up is tried there too, once the probe down is not (kept only for a real gain)
            return self._move(self.target + 1, probe=True)
        return self.target

    def _room(self, obs: Observation) -> bool:
        """Whether another worker would get a core: there is idle CPU, or the workers are not computing (they
        wait for the device).  On a machine whose CPUs others keep busy, a worker more only shares the load's
        time slices, and what the probe measures is the neighbours' noise (seen: +44% once, -25% the next)."""
        if obs.idle_cores is None or obs.load_cores is None:
            return True
        return obs.idle_cores >= IDLE_CORES_FOR_ONE_MORE or obs.load_cores < COMPUTING_SHARE * self.target

    def _judge(self, saturated: bool, room: bool) -> int:
        base, here = self._probe_from, self.target
        assert base is not None
        self._probe_from = None
        if here > base:  # more workers: worth it only for a real gain
            pays = self.rates[here] > self.rates[base] * (1 + self.gain)
        else:  # fewer workers on a saturated device: worth it if the throughput stays near the best seen
            pays = self.rates[here] >= max(self.rates.values()) * (1 - self.gain)
        if pays:  # and on in the same direction while it pays (down: while the device stays saturated)
            self._backoff.pop(here, None)
            step = 1 if here > base else -1
            if 1 <= here + step <= self.cap and self._allowed(here + step) and (room if step > 0 else saturated):
                return self._move(here + step, probe=True)
            return self.target
        self._backoff[here] = min(MAX_BACKOFF, 2 * self._backoff.get(here, FIRST_BACKOFF // 2))
        self._blocked[here] = self._seen + self._backoff[here]
        return self._move(base, probe=False)

    def _allowed(self, count: int) -> bool:
        return self._seen >= self._blocked.get(count, 0)

    def _move(self, count: int, probe: bool) -> int:
        self._probe_from = self.target if probe else None
        self.target = count
        self._settling = True
        return count


def _semaphore(permits: int) -> Any:
    from loky.backend.context import get_context  # loky's context: its workers can inherit the semaphore

    return get_context("loky").Semaphore(permits)


class Gate:
    """How many of a dir's workers may scan at once: a semaphore they share, resized from the parent."""

    def __init__(self, permits: int):
        self.permits = permits
        self.sem = _semaphore(permits)

    def semaphore(self, fresh: bool = False) -> Any:
        """The semaphore to hand a pool's workers; ``fresh``: a new one (a worker that died may have taken a
        permit with it)."""
        if fresh:
            self.sem = _semaphore(self.permits)
        return self.sem

    def resize(self, target: int, closed: threading.Event) -> None:
        """Give out or take back permits until ``target`` are out (taking one back waits for a scan to end)."""
        while self.permits < target:
            self.sem.release()
            self.permits += 1
        while self.permits > target and not closed.is_set():
            if self.sem.acquire(timeout=0.1):
                self.permits -= 1


class ScanMeter:
    """The bytes a dir's workers have scanned, counted as each scan ends (a future's done callback).  Not what
    Phase 2 has taken: the workers run ahead of it, and Phase 2 takes their scans in bursts (measured that way,
    one count's intervals read 33, then 250 MB/s from a device capped at 150)."""

    def __init__(self) -> None:
        self.bytes: dict[str, int] = {}
        self.scans: dict[str, int] = {}
        self._lock = threading.Lock()

    def scanned(self, data_dir: str, nbytes: int) -> None:
        with self._lock:
            self.bytes[data_dir] = self.bytes.get(data_dir, 0) + nbytes
            self.scans[data_dir] = self.scans.get(data_dir, 0) + 1

    def take(self, data_dir: str) -> int:
        """The bytes since the last take; the scans' count starts again too (it only says when an interval has
        enough of them: :meth:`peek_scans`)."""
        with self._lock:
            self.scans.pop(data_dir, None)
            return self.bytes.pop(data_dir, 0)

    def peek_scans(self, data_dir: str) -> int:
        with self._lock:
            return self.scans.get(data_dir, 0)


class DeviceLoad:
    """How busy a data dir's device is between two calls (None where it has none)."""

    def __init__(self, data_dir: str):
        self.device: str | None = None
        self.limits = ReadLimits()
        try:
            dev = storage_of(data_dir).device
            if dev is not None:
                self.device = dev.name
                self.limits = read_limits(dev.major_minor)
        except OSError as e:
            log.debug("adaptive workers: cannot watch the device of %s: %s", data_dir, e)
        self._last = self._counters()

    def _counters(self) -> tuple[float, DiskCounters | None]:
        now = time.monotonic()
        if self.device is None:
            return now, None
        return now, disk_counters([self.device]).get(self.device)

    def util(self) -> float | None:
        (t0, before), (t1, after) = self._last, self._counters()
        self._last = (t1, after)
        if before is None or after is None or t1 <= t0:
            return None
        r = disk_rates(before, after, t1 - t0)
        use = self.limits.use_percent(r.read_bytes_per_s, r.read_iops)
        return r.util_percent if use is None else max(r.util_percent, use)


class CpuLoad:
    """The CPU this process and its children used, and what nobody used, between two calls (in cores)."""

    def __init__(self) -> None:
        self._last = self._now()

    @staticmethod
    def _now() -> tuple[float, float, float]:
        me = psutil.Process()
        used = sum(t.user + t.system for t in [me.cpu_times(), *_children_times(me)])
        machine = psutil.cpu_times()
        return time.monotonic(), used, machine.idle + getattr(machine, "iowait", 0.0)

    def cores(self) -> tuple[float | None, float | None]:
        (t0, used0, idle0), (t1, used1, idle1) = self._last, self._now()
        self._last = (t1, used1, idle1)
        if t1 <= t0:
            return None, None
        return max(0.0, used1 - used0) / (t1 - t0), max(0.0, idle1 - idle0) / (t1 - t0)


def _children_times(proc: psutil.Process) -> list[Any]:
    out = []
    for child in proc.children(recursive=True):
        try:
            out.append(child.cpu_times())
        except psutil.Error:  # ended meanwhile
            continue
    return out


class DirMonitor:
    """The thread that measures one data dir and applies its controller's count to its gate."""

    def __init__(self, data_dir: str, controller: AdaptiveController, apply: Callable[[int], None],
                 meter: ScanMeter, closed: threading.Event):
        self.data_dir = data_dir
        self.controller = controller
        self.apply = apply  # puts a new count into effect
        self.meter = meter
        self.closed = closed
        self._thread = threading.Thread(target=self._run, name=f"mploader-adaptive-{data_dir}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        device = DeviceLoad(self.data_dir)
        cpu = CpuLoad()
        started = time.monotonic()
        self.meter.take(self.data_dir)
        while not self.closed.wait(TICK_S):
            elapsed = time.monotonic() - started
            enough = elapsed >= MIN_INTERVAL_S and self.meter.peek_scans(self.data_dir) >= MIN_SCANS
            if not enough and elapsed < MAX_INTERVAL_S:
                continue
            nbytes = self.meter.take(self.data_dir)
            before = self.controller.target
            load_cores, idle_cores = cpu.cores()
            target = self.controller.observe(Observation(elapsed, nbytes, device.util(), load_cores, idle_cores))
            started = time.monotonic()
            if target != before:
                rates = ", ".join(f"{n}: {r / 1e6:.0f} MB/s" for n, r in sorted(self.controller.rates.items()))
                log.info("adaptive workers: %s: %d -> %d (throughput by count: %s; device busy %s)", self.data_dir,
                         before, target, rates, _percent(self.controller.history[-1][2]))
                self.apply(target)


def _percent(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.0f}%"


# the loky releases, [from, below), whose ProcessPoolExecutor.submit starts processes up to its private _max_workers
LOKY_RELEASES = ((3, 4), (3, 8))


def check_loky(version: str | None = None) -> None:
    """Raise RuntimeError unless ``version`` (the installed loky's if not given) is one of :data:`LOKY_RELEASES`:
    adaptive workers grow a pool through a private attribute (:func:`grow_pool`)."""
    if version is None:
        import loky

        version = str(loky.__version__)
    try:
        major_minor = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        major_minor = ()
    low, high = LOKY_RELEASES
    if not low <= major_minor < high:
        raise RuntimeError(
            f"adaptive workers need loky {low[0]}.{low[1]} up to {high[0]}.{high[1] - 1} (they grow a pool through its "
            f"private _max_workers); loky {version} is installed: install one of those, or give a number of workers")


def grow_pool(pool: Any, workers: int) -> None:
    """Let loky's ``pool`` have up to ``workers`` processes: it starts the missing ones at its next submission.
    loky has no public way to say so (check_loky: the releases where this one works)."""
    pool._max_workers = workers


class Adaptive:
    """What a pool needs for adaptive workers: per data dir a gate, a monitor and the workers started so far (a
    dir's pool starts with as many as the first count and grows when the count does: each worker costs ~0.2 s of
    CPU to start), and the meter of the scans."""

    def __init__(self, cap: int, data_dirs: list[str], closed: threading.Event, start: int = 1):
        check_loky()
        self.cap = cap
        self.start_count = max(1, min(cap, start))
        self.closed = closed
        self.gates = {d: Gate(self.start_count) for d in data_dirs}
        self.started = dict.fromkeys(data_dirs, self.start_count)  # the processes a dir's pool may have
        self.meter = ScanMeter()
        self._pools: dict[str, Any] = {}
        self._monitors: dict[str, DirMonitor] = {}
        self._lock = threading.Lock()

    def adopt(self, data_dir: str, pool: Any) -> None:
        """``pool``, a new loky executor of ``data_dir`` not started yet, starts the workers the count needs so far
        and grows with it."""
        with self._lock:
            self._pools[data_dir] = pool
            grow_pool(pool, self.started[data_dir])

    def _apply(self, data_dir: str, count: int) -> None:
        with self._lock:
            if count > self.started[data_dir]:
                self.started[data_dir] = count
                pool = self._pools.get(data_dir)
                if pool is not None:
                    grow_pool(pool, count)
        self.gates[data_dir].resize(count, self.closed)

    def begin(self, data_dir: str) -> None:
        """Start watching ``data_dir`` (its scans are about to start)."""
        if data_dir not in self._monitors:
            controller = AdaptiveController(self.cap, self.start_count)
            self._monitors[data_dir] = m = DirMonitor(data_dir, controller, lambda n: self._apply(data_dir, n),
                                                      self.meter, self.closed)
            m.start()


__all__ = ["LOKY_RELEASES", "Adaptive", "AdaptiveController", "DeviceLoad", "DirMonitor", "Gate", "Observation",
           "ScanMeter", "check_loky", "grow_pool"]
