"""Which block devices hold a path, read from ``/proc/self/mountinfo`` and ``/sys``.

A data dir's reads reach a disk through layers: the file system's device (``/dev/vda1``, a partition), the
disk it is part of (``vda``); or a loop device (``loop0``) whose reads become reads of its backing file, which
lives on another file system and so on another device; or a device-mapper / md device over several disks.
:func:`storage_of` follows all of them and returns the chain, top first, so that a sampler can watch both the
device the file system sees (what ``iostat`` reports for it) and the disks at the bottom (what is really busy).
A file system with no block device (tmpfs, ramfs; major number 0) has an empty chain.

Why the flags are reported as they are: ``queue/rotational`` is what the driver says, and virtual disks
often say 1 (this project's VM does); :meth:`BlockDevice.describe` repeats the flag without calling the
device an HDD.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

SYS_DEV_BLOCK = "/sys/dev/block"
MEMORY_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs"})


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of ``/proc/self/mountinfo``."""

    mount_point: str
    major_minor: str  # "254:0"; major 0 for file systems without a block device
    fstype: str
    source: str
    options: str = ""  # the super block's options (a cgroup v1 mount names its controllers there)


@dataclass(frozen=True, slots=True)
class BlockDevice:
    """A device in the chain under a path, with what ``/sys`` says about it."""

    name: str  # the kernel's name, as in /proc/diskstats and psutil.disk_io_counters(perdisk=True)
    major_minor: str
    kind: str  # "partition", "loop", "dm", "md" or "disk"
    rotational: bool | None  # queue/rotational (a partition: its disk's)
    scheduler: str | None  # the active I/O scheduler, e.g. "mq-deadline"; "none"
    model: str | None  # device/model, else the driver (e.g. "virtio_blk")
    backing_file: str | None = None  # a loop device's file

    def describe(self) -> str:
        flag = {True: "rotational=1", False: "rotational=0", None: "rotational flag unknown"}[self.rotational]
        parts = [f"{self.name} ({self.kind}, {self.major_minor})", self.model or "model unknown", flag,
                 f"scheduler {self.scheduler or 'unknown'}"]
        if self.backing_file:
            parts.append(f"backed by {self.backing_file}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Storage:
    """Where a path's bytes live: its mount and the block devices under it, top first."""

    path: str
    mount: Mount
    devices: tuple[BlockDevice, ...]

    @property
    def in_memory(self) -> bool:
        """tmpfs and the like: no disk at all."""
        return self.mount.fstype in MEMORY_FILE_SYSTEMS

    @property
    def device(self) -> BlockDevice | None:
        """The device the file system sits on (what ``iostat`` shows for it), if any."""
        return self.devices[0] if self.devices else None

    @property
    def disks(self) -> tuple[BlockDevice, ...]:
        """The devices at the bottom of the chain: the disks that do the reading."""
        return tuple(d for d in self.devices if d.kind == "disk")

    def sampled(self) -> tuple[str, ...]:
        """Names to watch: the file system's device, then the disks under it (each once)."""
        names = [d.name for d in (*self.devices[:1], *self.disks)]
        return tuple(dict.fromkeys(names))

    def describe(self) -> str:
        head = f"{self.path}: {self.mount.fstype} on {self.mount.mount_point} ({self.mount.source})"
        if not self.devices:
            return head + (", in memory: no block device" if self.in_memory else ", no block device")
        return head + "; " + " -> ".join(d.describe() for d in self.devices)


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (``\\040``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit() and i + 4 <= len(field):
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of ``/proc/<pid>/mountinfo``, in its order (a later mount on a point hides earlier ones)."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        found.append(Mount(_unescape(fields[4]), fields[2], fields[sep + 1], _unescape(fields[sep + 2]),
                           fields[sep + 3] if len(fields) > sep + 3 else ""))
    return found


def mounts() -> list[Mount]:
    """This process's mounts."""
    with open("/proc/self/mountinfo") as f:
        return parse_mountinfo(f.read())


def mount_of(path: str, table: list[Mount] | None = None) -> Mount:
    """The mount that holds ``path`` (symbolic links resolved): the last one of the longest mount point."""
    real = os.path.realpath(path)
    best: Mount | None = None
    for m in mounts() if table is None else table:
        mp = m.mount_point.rstrip("/") or "/"
        inside = real == mp or real.startswith(mp + "/") or mp == "/"
        if inside and (best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/")):
            best = m
    if best is None:
        raise FileNotFoundError(f"no mount holds {real} (is /proc mounted?)")
    return best


def read_text(path: str) -> str | None:
    """A /proc, /sys or cgroup file's text, stripped; None where it is absent or unreadable (a kernel without
    the attribute, a device gone meanwhile, no cgroup file): the callers take that as "unknown" or "no limit"
    rather than fail."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _attributes(queue_dir: str) -> tuple[bool | None, str | None, str | None]:
    """rotational, scheduler and model of the disk whose /sys directory is ``queue_dir``."""
    rot = read_text(os.path.join(queue_dir, "queue", "rotational"))
    sched = read_text(os.path.join(queue_dir, "queue", "scheduler"))
    if sched and "[" in sched:
        sched = sched[sched.index("[") + 1:sched.index("]")]
    model = read_text(os.path.join(queue_dir, "device", "model"))
    if not model:
        driver = os.path.join(queue_dir, "device", "driver")
        model = os.path.basename(os.path.realpath(driver)) if os.path.exists(driver) else None
    return (None if rot is None else rot == "1"), sched, model


def _chain(major_minor: str, seen: set[str]) -> list[BlockDevice]:
    """The device ``major_minor`` and everything under it (depth first, each device once)."""
    if major_minor in seen:
        return []
    seen.add(major_minor)
    sys_dir = os.path.realpath(os.path.join(SYS_DEV_BLOCK, major_minor))
    if not os.path.isdir(sys_dir):
        return []
    name = os.path.basename(sys_dir)
    if os.path.exists(os.path.join(sys_dir, "partition")):
        disk_dir = os.path.dirname(sys_dir)
        rot, sched, model = _attributes(disk_dir)
        out = [BlockDevice(name, major_minor, "partition", rot, sched, model)]
        disk_dev = read_text(os.path.join(disk_dir, "dev"))
        return out + (_chain(disk_dev, seen) if disk_dev else [])
    rot, sched, model = _attributes(sys_dir)
    backing = read_text(os.path.join(sys_dir, "loop", "backing_file"))
    if backing is not None:
        out = [BlockDevice(name, major_minor, "loop", rot, sched, model, backing)]
        if backing.endswith(" (deleted)"):
            return out
        try:
            below = _storage_devices(backing, seen)
        except OSError:
            below = []
        return out + below
    try:
        slaves = sorted(os.listdir(os.path.join(sys_dir, "slaves")))
    except OSError:
        slaves = []
    kind = "dm" if name.startswith("dm-") else "md" if name.startswith("md") else "disk"
    out = [BlockDevice(name, major_minor, kind if slaves else "disk", rot, sched, model)]
    for slave in slaves:
        dev = read_text(os.path.join(sys_dir, "slaves", slave, "dev"))
        if dev:
            out += _chain(dev, seen)
    return out


def _device_number(mount: Mount) -> str | None:
    """The block device behind a mount: its own number, or (btrfs and others that report an anonymous
    major 0) the device its source names; None for tmpfs, overlay, nfs and the like."""
    if mount.major_minor.split(":")[0] != "0":
        return mount.major_minor
    try:
        st = os.stat(mount.source)
    except OSError:
        return None
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" if stat.S_ISBLK(st.st_mode) else None


def _storage_devices(path: str, seen: set[str]) -> list[BlockDevice]:
    number = _device_number(mount_of(path))
    return [] if number is None else _chain(number, seen)


@dataclass(frozen=True, slots=True)
class Queue:
    """What the block layer says of the device a file system sits on (its disk's queue, for a partition)."""

    disk: str  # the kernel's name of the device whose queue it is (a partition's disk)
    rotational: bool | None  # queue/rotational
    read_ahead_bytes: int | None  # queue/read_ahead_kb: the kernel's read-ahead of a file on it (the bdi's ra_pages)
    max_request_bytes: int | None  # queue/max_sectors_kb: the largest request it is sent (the bdi's io_pages)


def queue_of(path: str) -> Queue | None:
    """The queue of the block device holding ``path``'s file system (its ``st_dev``), without reading the mount
    table; None where that is no block device in /sys (tmpfs, btrfs's anonymous device, a network file system)."""
    st = os.stat(path)
    sys_dir = os.path.realpath(os.path.join(SYS_DEV_BLOCK, f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"))
    if os.path.exists(os.path.join(sys_dir, "partition")):  # a partition's reads go through its disk's queue
        sys_dir = os.path.dirname(sys_dir)
    queue = os.path.join(sys_dir, "queue")
    if not os.path.isdir(queue):
        return None

    def kib(name: str) -> int | None:
        text = read_text(os.path.join(queue, name))
        return int(text) * 1024 if text and text.isdigit() else None

    rot = read_text(os.path.join(queue, "rotational"))
    return Queue(os.path.basename(sys_dir), None if rot is None else rot == "1", kib("read_ahead_kb"),
                 kib("max_sectors_kb"))


def storage_of(path: str) -> Storage:
    """Where ``path`` lives: its mount and the chain of block devices under it (see the module docstring)."""
    return Storage(os.path.realpath(path), mount_of(path), tuple(_storage_devices(path, set())))


__all__ = ["BlockDevice", "Mount", "Queue", "Storage", "mount_of", "mounts", "parse_mountinfo", "queue_of", "read_text",
           "storage_of"]
