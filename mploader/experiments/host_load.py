"""How busy the host was with other work while a run ran, and when that makes the run untrustworthy.

Two figures, taken by the :class:`~mploader.experiments.sampler.Sampler` every interval:

* **other processes' CPU**: the machine's busy time (every core's, ``/proc/stat``: user, system, interrupts and
  the hypervisor's *steal*, which is other tenants' work too) less the CPU of this experiment's own processes
  (the experiment, the run's process tree, the seek-modelled disks' daemons: every descendant of the
  experiment's process, with the CPU of the children they have reaped) and of the kernel's threads (they work
  for whoever asked, the run's loop device included, and cannot be told apart).  A process that starts and ends
  between two samples is still counted: it is in the machine's busy time and in no one's of ours;
* **other processes' reads of the run's devices**: what the devices the run's data dirs sit on read (their
  ``/proc/diskstats``) less what the run's own processes read (``/proc/PID/io`` ``read_bytes``, counted when
  a read is sent to the device, by the process that caused it).  Writes are left out: write-back and the file
  system's journal are written by kernel threads for whoever dirtied the pages.  Not measurable (None) without
  a block device (tmpfs) or without the kernel's per-process I/O accounting.  The devices an experiment makes
  (loop devices on a private mount) are read by no one else; a seek-modelled disk's image lives on the
  machine's disk, where others' reads make the daemon's image reads slower than the model: its ``late``
  requests, in the report.

A run is flagged "busy host" (:func:`busy_reasons`) when the others' CPU averaged more than
:data:`BUSY_CPU_PERCENT` of one core over the run, or their reads of its devices came to more than
:data:`BUSY_READ_SHARE` of what the devices read (and more than :data:`BUSY_READ_BYTES`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

BUSY_CPU_PERCENT = 25.0  # other processes' CPU, mean over a run, in percent of one core
BUSY_READ_SHARE = 0.10  # other processes' reads of the run's devices, as a share of what the devices read ...
BUSY_READ_BYTES = 1_000_000  # ... and in bytes (a few blocks of someone's metadata are not a busy host)

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PF_KTHREAD = 0x00200000  # /proc/PID/stat's flags: a kernel thread
_NOT_BUSY = ("idle", "iowait", "guest", "guest_nice")  # guest time is already inside user time


@dataclass(frozen=True, slots=True)
class ProcTimes:
    """One process's line of ``/proc/PID/stat``, in seconds."""

    ppid: int
    own: float  # user + system
    reaped: float  # the children it waited for: their user + system (cutime + cstime)
    kernel: bool


def parse_stat(text: str) -> ProcTimes:
    """``/proc/PID/stat``'s fields after the command name (which may hold spaces and parentheses)."""
    fields = text[text.rindex(")") + 2:].split()
    ticks = [int(f) for f in fields[11:15]]  # utime, stime, cutime, cstime
    return ProcTimes(int(fields[1]), (ticks[0] + ticks[1]) / CLOCK_TICKS, (ticks[2] + ticks[3]) / CLOCK_TICKS,
                     bool(int(fields[6]) & PF_KTHREAD))


def process_table() -> dict[int, ProcTimes]:
    """Every process now (one that ends while it is read is left out)."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    table[int(name)] = parse_stat(f.read())
            except (OSError, ValueError, IndexError):
                continue
    return table


def descendants(table: dict[int, ProcTimes], root: int) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, p in table.items():
        children.setdefault(p.ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def busy_seconds() -> float:
    """The machine's CPU seconds spent busy so far, all cores."""
    t = psutil.cpu_times()
    return float(sum(getattr(t, f) for f in t._fields if f not in _NOT_BUSY))


class OthersCpu:
    """The CPU seconds other processes used between two calls of :meth:`take` (see the module docstring);
    ``root``: the experiment's process, whose descendants are ours."""

    def __init__(self, root: int | None = None):
        self.root = os.getpid() if root is None else root
        self._last = self._snapshot()

    def _snapshot(self) -> tuple[float, float, dict[int, float]]:
        table = process_table()
        ours = sum(table[p].own + table[p].reaped for p in descendants(table, self.root))
        return busy_seconds(), ours, {pid: p.own for pid, p in table.items() if p.kernel}

    def take(self) -> float:
        (busy0, ours0, kernel0), (busy1, ours1, kernel1) = self._last, self._snapshot()
        self._last = (busy1, ours1, kernel1)
        kernel = sum(t - kernel0.get(pid, 0.0) for pid, t in kernel1.items())
        return busy1 - busy0 - (ours1 - ours0) - kernel  # unclamped: a run's mean of these is unbiased


def io_accounting() -> bool:
    """Whether the kernel counts each process's reads (``/proc/PID/io``)."""
    return os.path.exists("/proc/self/io")


def busy_reasons(others_cpu_percent: float | None, others_reads: int | None, device_reads: int) -> list[str]:
    """Why a run's host was too busy to trust it (empty: it was not), from the run's means and sums."""
    out = []
    if others_cpu_percent is not None and others_cpu_percent > BUSY_CPU_PERCENT:
        out.append(f"other processes used {others_cpu_percent:.0f}% of a core (threshold {BUSY_CPU_PERCENT:.0f}%)")
    if others_reads is not None and others_reads > max(BUSY_READ_BYTES, BUSY_READ_SHARE * device_reads):
        out.append(f"other processes read {others_reads / 1e6:.1f} MB of the run's devices "
                   f"({100 * others_reads / max(1, device_reads):.0f}% of their reads; threshold "
                   f"{100 * BUSY_READ_SHARE:.0f}%)")
    return out


__all__ = ["BUSY_CPU_PERCENT", "BUSY_READ_BYTES", "BUSY_READ_SHARE", "OthersCpu", "ProcTimes", "busy_reasons",
           "busy_seconds", "descendants", "io_accounting", "parse_stat", "process_table"]
