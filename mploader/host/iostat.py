"""The figures of ``iostat -x`` and of per-core CPU use, as pure functions of two counter snapshots.

The kernel keeps cumulative counters per block device (``/proc/diskstats``, read by
``psutil.disk_io_counters(perdisk=True)``); a rate is the difference of two snapshots over the time between
them.  :func:`disk_rates` computes what ``iostat -x`` prints, the way sysstat computes it:

=====================  =========================================================================
``util_percent``       %util: the share of the interval the device had at least one request in
                       flight (``busy_time``, the kernel's ``io_ticks``), capped at 100
``read_bytes_per_s``   rkB/s (here in bytes)
``read_iops``          r/s; ``write_iops`` w/s
``read_request_bytes`` rareq-sz: bytes per completed read (None: no read completed)
``read_await_ms``      r_await: milliseconds per completed read, queueing included
``queue_depth``        aqu-sz: the mean number of requests in flight, i.e. the time requests spent in
                       the device (``read_time + write_time``) per unit of time; the kernel's own
                       weighted counter also holds discards and flushes, which psutil does not expose
=====================  =========================================================================

%util says how often the device was busy, not how close it is to its limit: a device that serves many
requests at once (an SSD, a RAID) can show 100% with room to spare, which is why the adaptive workers also
watch throughput.  A device throttled by a cgroup (``blkio.throttle``, ``io.max``) holds the waiting
requests above the driver, so its %util stays low while readers wait: see :mod:`mploader.host.cgroup`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psutil


@dataclass(frozen=True, slots=True)
class DiskCounters:
    """One device's cumulative counters (psutil's ``sdiskio`` on Linux; times in milliseconds)."""

    read_count: int
    write_count: int
    read_bytes: int
    write_bytes: int
    read_time_ms: int
    write_time_ms: int
    busy_time_ms: int

    @classmethod
    def of(cls, c: Any) -> DiskCounters:
        """From a psutil ``sdiskio``."""
        return cls(c.read_count, c.write_count, c.read_bytes, c.write_bytes, c.read_time, c.write_time,
                   getattr(c, "busy_time", 0))


@dataclass(frozen=True, slots=True)
class DiskRates:
    """What ``iostat -x`` shows for one device over one interval (see the module docstring)."""

    seconds: float
    util_percent: float
    read_bytes_per_s: float
    write_bytes_per_s: float
    read_iops: float
    write_iops: float
    read_request_bytes: float | None
    read_await_ms: float | None
    queue_depth: float


def disk_rates(before: DiskCounters, after: DiskCounters, seconds: float) -> DiskRates:
    """The rates between two snapshots taken ``seconds`` apart.  A counter that went backwards (the device
    was removed and came back) counts as no change."""
    if seconds <= 0:
        raise ValueError("the snapshots must be taken at different times")

    def delta(name: str) -> int:
        return max(0, int(getattr(after, name)) - int(getattr(before, name)))

    reads = delta("read_count")
    read_bytes = delta("read_bytes")
    ms = seconds * 1000.0
    return DiskRates(
        seconds=seconds,
        util_percent=min(100.0, 100.0 * delta("busy_time_ms") / ms),
        read_bytes_per_s=read_bytes / seconds,
        write_bytes_per_s=delta("write_bytes") / seconds,
        read_iops=reads / seconds,
        write_iops=delta("write_count") / seconds,
        read_request_bytes=read_bytes / reads if reads else None,
        read_await_ms=delta("read_time_ms") / reads if reads else None,
        queue_depth=(delta("read_time_ms") + delta("write_time_ms")) / ms,
    )


def disk_counters(names: Iterable[str]) -> dict[str, DiskCounters]:
    """The counters of the named devices now (those the kernel does not list are left out)."""
    wanted = set(names)
    if not wanted:
        return {}
    every = psutil.disk_io_counters(perdisk=True, nowrap=True) or {}
    return {name: DiskCounters.of(c) for name, c in every.items() if name in wanted}


# psutil's cputimes fields that are already inside user and nice (the kernel counts guest time twice)
_GUEST = ("guest", "guest_nice")
_IDLE = ("idle", "iowait")


def cpu_busy_percent(before: Sequence[Any], after: Sequence[Any]) -> list[float]:
    """Per core, the share of the interval spent not idle, from two ``psutil.cpu_times(percpu=True)``
    snapshots (as psutil's own ``cpu_percent``: iowait counts as idle, guest time is in user time)."""
    out = []
    for b, a in zip(before, after):
        fields = [f for f in a._fields if f not in _GUEST]
        total = sum(max(0.0, getattr(a, f) - getattr(b, f)) for f in fields)
        idle = sum(max(0.0, getattr(a, f) - getattr(b, f)) for f in _IDLE if f in fields)
        out.append(100.0 * (total - idle) / total if total > 0 else 0.0)
    return out


__all__ = ["DiskCounters", "DiskRates", "cpu_busy_percent", "disk_counters", "disk_rates"]
