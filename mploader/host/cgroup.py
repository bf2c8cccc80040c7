"""Block IO limits that a cgroup puts on a process: cgroup v1 ``blkio.throttle`` and cgroup v2 ``io.max``.

The kernel's block throttle delays a cgroup's requests before they reach the device's driver, so the
device's own %util stays low while the readers wait (:mod:`mploader.host.iostat`).  Whoever judges how busy
a throttled device is must compare the reads with the limit instead: :func:`read_limits` finds the limit
that applies (the smallest along the cgroup's ancestors, as the throttle enforces every level).

:func:`hierarchy` says where a throttle can be set on this machine (the experiments make one).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mploader.host.devices import mounts, read_text

V1_READ_BPS = "blkio.throttle.read_bps_device"
V1_READ_IOPS = "blkio.throttle.read_iops_device"
V2_IO_MAX = "io.max"


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """A cgroup hierarchy with a block throttle: its mount point and version."""

    mount_point: str
    version: int  # 1: the blkio controller; 2: the unified hierarchy with the io controller


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """Read limits on one device (None: none set)."""

    bytes_per_s: int | None = None
    iops: int | None = None

    def use_percent(self, read_bytes_per_s: float, read_iops: float) -> float | None:
        """How much of the limit the reads use, in percent (the larger of the two shares); None: no limit."""
        shares = [100.0 * rate / limit for rate, limit in ((read_bytes_per_s, self.bytes_per_s),
                                                           (read_iops, self.iops)) if limit]
        return max(shares) if shares else None


def hierarchy() -> Hierarchy | None:
    """Where a block throttle can be set: cgroup v2 when its root offers the io controller, else cgroup v1's
    blkio hierarchy; None when neither is mounted."""
    table = mounts()
    for m in table:
        if m.fstype == "cgroup2":
            controllers = read_text(os.path.join(m.mount_point, "cgroup.controllers")) or ""
            if "io" in controllers.split():
                return Hierarchy(m.mount_point, 2)
    for m in table:
        if m.fstype == "cgroup" and "blkio" in m.options.split(","):
            return Hierarchy(m.mount_point, 1)
    return None


def parse_v1_limits(text: str, major_minor: str) -> int | None:
    """The value for ``major_minor`` in a ``blkio.throttle.*_device`` file ("MAJ:MIN VALUE" lines)."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == major_minor:
            return int(fields[1])
    return None


def parse_io_max(text: str, major_minor: str) -> ReadLimits:
    """``rbps`` and ``riops`` for ``major_minor`` in an ``io.max`` file ("MAJ:MIN rbps=N wbps=max ..." lines)."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == major_minor:
            keys = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
            bps, iops = keys.get("rbps", "max"), keys.get("riops", "max")
            return ReadLimits(None if bps == "max" else int(bps), None if iops == "max" else int(iops))
    return ReadLimits()


def _cgroup_paths(pid: int | str) -> dict[str, str]:
    """Controller (or "" for the unified hierarchy) -> the process's cgroup path."""
    out = {}
    for line in (read_text(f"/proc/{pid}/cgroup") or "").splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _smallest(values: list[int | None]) -> int | None:
    known = [v for v in values if v]
    return min(known) if known else None


def read_limits(major_minor: str, pid: int | str = "self") -> ReadLimits:
    """The read limits on device ``major_minor`` that apply to process ``pid``: the smallest set on its
    cgroup or any ancestor, in the hierarchy :func:`hierarchy` names."""
    h = hierarchy()
    if h is None:
        return ReadLimits()
    path = _cgroup_paths(pid).get("blkio" if h.version == 1 else "", "/")
    levels = []
    while True:
        levels.append(os.path.join(h.mount_point, path.lstrip("/")))
        if path in ("", "/"):
            break
        path = os.path.dirname(path)
    if h.version == 2:
        found = [parse_io_max(read_text(os.path.join(d, V2_IO_MAX)) or "", major_minor) for d in levels]
        return ReadLimits(_smallest([f.bytes_per_s for f in found]), _smallest([f.iops for f in found]))
    return ReadLimits(
        _smallest([parse_v1_limits(read_text(os.path.join(d, V1_READ_BPS)) or "", major_minor) for d in levels]),
        _smallest([parse_v1_limits(read_text(os.path.join(d, V1_READ_IOPS)) or "", major_minor) for d in levels]))


__all__ = ["Hierarchy", "ReadLimits", "V1_READ_BPS", "V1_READ_IOPS", "V2_IO_MAX", "hierarchy", "parse_io_max",
           "parse_v1_limits", "read_limits"]
