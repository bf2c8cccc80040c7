"""Sampling a running load at a fixed interval: its devices, the CPUs, its processes' memory, its shared memory.

A :class:`Sampler` thread takes a snapshot every ``interval`` seconds and turns each pair of snapshots into
one :class:`Sample` with the arithmetic of :mod:`mploader.host.iostat` (the figures ``iostat -x`` would
print for that interval).  It watches the process tree of one load: the RSS of its parent and of each worker
(loky's resource trackers are left out), the CPU the tree used (the machine's per-core figures include the
neighbours: on a shared machine only the two together say who was busy), and the shared-memory blocks that
load named after itself in /dev/shm (``mploader-<pid>-...``, :mod:`mploader.engine.cleanup`), by the memory
they really take (blocks are sparse).  It also measures how busy the host was with other work: the CPU other
processes used and the bytes the load's processes read (against what its devices read), :mod:`.host_load`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from mploader.experiments.host_load import OthersCpu, io_accounting
from mploader.host.cgroup import ReadLimits
from mploader.host.iostat import DiskCounters, DiskRates, cpu_busy_percent, disk_counters, disk_rates

SHM_DIR = "/dev/shm"


@dataclass(frozen=True, slots=True)
class Sample:
    """One interval of a run (``t``: seconds from the start of sampling to the end of the interval)."""

    t: float
    disks: dict[str, DiskRates]
    cpu_percent: list[float]  # per core, the whole machine's
    rss_parent: int | None  # bytes; None once the process is gone
    rss_workers: dict[int, int] = field(default_factory=dict)  # pid -> bytes
    shm_bytes: int = 0
    throttle_use: dict[str, float] = field(default_factory=dict)  # device -> percent of its cgroup read limit
    load_cpu_percent: float = 0.0  # the load's own processes (parent and workers), 100 = one core
    others_cpu_percent: float | None = None  # other processes than the experiment's, 100 = one core (host_load)
    load_read_bytes: int | None = None  # bytes the load's processes read in the interval; None: not measurable

    def to_json(self) -> dict[str, Any]:
        return {"t": round(self.t, 3), "disks": {n: _rates_json(r) for n, r in self.disks.items()},
                "cpu_percent": [round(c, 1) for c in self.cpu_percent], "rss_parent": self.rss_parent,
                "rss_workers": {str(p): r for p, r in self.rss_workers.items()}, "shm_bytes": self.shm_bytes,
                "throttle_use": {n: round(u, 1) for n, u in self.throttle_use.items()},
                "load_cpu_percent": round(self.load_cpu_percent, 1),
                "others_cpu_percent": None if self.others_cpu_percent is None else round(self.others_cpu_percent, 1),
                "load_read_bytes": self.load_read_bytes}


def _rates_json(r: DiskRates) -> dict[str, float | None]:
    return {"util_percent": round(r.util_percent, 1), "read_bytes_per_s": round(r.read_bytes_per_s),
            "write_bytes_per_s": round(r.write_bytes_per_s), "read_iops": round(r.read_iops, 1),
            "write_iops": round(r.write_iops, 1),
            "read_request_bytes": None if r.read_request_bytes is None else round(r.read_request_bytes),
            "read_await_ms": None if r.read_await_ms is None else round(r.read_await_ms, 2),
            "queue_depth": round(r.queue_depth, 2)}


def shm_bytes(pid: int) -> int:
    """Memory taken in /dev/shm by the blocks of the load that process ``pid`` runs."""
    prefix = f"mploader-{pid}-"
    total = 0
    try:
        with os.scandir(SHM_DIR) as it:
            for entry in it:
                if entry.name.startswith(prefix):
                    try:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:  # freed meanwhile
                        continue
    except OSError:
        return 0
    return total


@dataclass(frozen=True, slots=True)
class _Look:
    rss_parent: int | None = None
    rss_workers: dict[int, int] = field(default_factory=dict)
    cpu_seconds: float = 0.0  # the tree's, since the last look
    read_bytes: int | None = None  # the tree's, since the last look (None: not measurable)


class _Tree:
    """A process and its workers (children, less loky's and Python's resource trackers): their RSS, the CPU
    time of the whole tree (so that a reader can tell the load's CPU from its neighbours') and the bytes it read
    from devices (each process's last count is kept: a worker that has ended still read what it read)."""

    def __init__(self, pid: int):
        self.pid = pid
        self._trackers: set[int] = set()
        self._seen: set[int] = set()
        self._cpu: dict[int, float] = {}  # pid -> user + system seconds at the last look
        self._reads: dict[int, int] | None = {} if io_accounting() else None  # pid -> read_bytes at the last look
        self._read_total = 0

    def _count_reads(self, proc: psutil.Process) -> None:
        if self._reads is None:
            return
        try:
            self._reads[proc.pid] = proc.io_counters().read_bytes
        except psutil.AccessDenied:  # another user's process: the tree's reads are not measurable
            self._reads = None

    def _reads_since(self) -> int | None:
        if self._reads is None:
            return None
        total = sum(self._reads.values())
        new, self._read_total = total - self._read_total, total
        return new

    def look(self) -> _Look:
        """The parent's RSS, each worker's RSS, CPU seconds and bytes read the tree used since the last look."""
        try:
            parent = psutil.Process(self.pid)
            procs = [parent, *parent.children(recursive=True)]
        except psutil.Error:
            return _Look(read_bytes=self._reads_since())
        own: int | None = None
        workers = {}
        used = 0.0
        for proc in procs:
            try:
                if proc.pid != self.pid and proc.pid not in self._seen:
                    # once per process: reading /proc/PID/cmdline takes the process's mmap lock, which a worker
                    # waiting in a page fault holds (sampling it every interval slowed a throttled load 4x)
                    self._seen.add(proc.pid)
                    if "resource_tracker" in " ".join(proc.cmdline()):
                        self._trackers.add(proc.pid)
                times = proc.cpu_times()
                rss = proc.memory_info().rss
                self._count_reads(proc)
            except psutil.Error:  # ended meanwhile
                continue
            total = times.user + times.system
            used += max(0.0, total - self._cpu.get(proc.pid, 0.0))
            self._cpu[proc.pid] = total
            if proc.pid == self.pid:
                own = rss
            elif proc.pid not in self._trackers:
                workers[proc.pid] = rss
        return _Look(own, workers, used, self._reads_since())


class Sampler:
    """Samples ``devices`` (kernel names), the CPUs and (once :meth:`start` names it) a load's process tree."""

    def __init__(self, devices: Sequence[str], interval: float = 0.2, limits: Mapping[str, ReadLimits] | None = None):
        if interval <= 0:
            raise ValueError("the sampling interval must be > 0")
        self.devices = tuple(devices)
        self.interval = interval
        self.limits = {d: lim for d, lim in (limits or {}).items() if lim.bytes_per_s or lim.iops}
        self.samples: list[Sample] = []
        self._tree: _Tree | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mploader-sampler", daemon=True)
        self._t0 = 0.0
        self._others: OthersCpu | None = None

    def start(self, pid: int | None = None) -> Sampler:
        self._tree = None if pid is None else _Tree(pid)
        self._t0 = time.monotonic()
        try:
            self._others = OthersCpu()
        except OSError:  # no /proc to read: the host's load is not measured
            self._others = None
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        """Stop sampling (after one last, possibly shorter, interval) and return the samples."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.samples

    def _snapshot(self) -> tuple[float, dict[str, DiskCounters], list[Any]]:
        return time.monotonic(), disk_counters(self.devices), psutil.cpu_times(percpu=True)

    def _run(self) -> None:
        before = self._snapshot()
        last = False
        while not last:
            last = self._stop.wait(self.interval)
            after = self._snapshot()
            seconds = after[0] - before[0]
            if seconds <= 0:
                continue
            disks = {n: disk_rates(before[1][n], after[1][n], seconds) for n in after[1] if n in before[1]}
            use = {n: u for n, lim in self.limits.items() if n in disks
                   and (u := lim.use_percent(disks[n].read_bytes_per_s, disks[n].read_iops)) is not None}
            tree = self._tree.look() if self._tree is not None else _Look()
            shm = shm_bytes(self._tree.pid) if self._tree is not None else 0
            others = None if self._others is None else 100.0 * self._others.take() / seconds
            self.samples.append(Sample(after[0] - self._t0, disks, cpu_busy_percent(before[2], after[2]),
                                       tree.rss_parent, tree.rss_workers, shm, use, 100.0 * tree.cpu_seconds / seconds,
                                       others, tree.read_bytes))
            before = after


__all__ = ["Sample", "Sampler", "shm_bytes"]
