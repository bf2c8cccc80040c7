"""The device classes an experiment runs on, each made and removed by a context manager.

* :func:`own_disk`: a directory on the machine's own disk, described by what its flags say (a virtual disk
  often reports ``rotational=1``: the label repeats the flag and does not call it an HDD);
* :func:`throttled_loop`: an HDD-like device made with the kernel's block throttle: a sparse file, a loop
  device over it with direct I/O (``losetup --direct-io=on``: its reads reach the file's disk instead of
  being served from a second page cache), ext4 on it, mounted, and a cgroup whose reads of the loop device
  are capped in bytes/s and IOPS (cgroup v2 ``io.max``, else v1 ``blkio.throttle.read_bps_device`` /
  ``read_iops_device``).  Runs join the cgroup before they read (:mod:`.child`).  It is a real device under
  real limits: every page fault, read-ahead and metadata read of a load waits for the throttle;
* :func:`seek_loop`: a seek-modelled device: a disk image served through a model of a 7200 rpm disk's head
  (or of an SSD's channels) by a FUSE daemon (:mod:`.seek_daemon`), a loop device with direct I/O on it, ext4
  on that; unlike the throttle, two readers far apart cost the modelled HDD its seeks;
* :func:`tmpfs`: a private tmpfs (or a directory in /dev/shm without root): no disk at all, the upper bound.

Every loop device, mount, cgroup and file made here is removed when the ``with`` block ends, also on an
error or a Ctrl-C (``KeyboardInterrupt``), in the reverse order of making; a step that fails to undo is
retried briefly, then reported, and the others still run.  What a ``kill -9`` of the experiment leaves is
named after it (``mploader-exp-<pid>``), and ``mploader cleanup`` removes it once that process is gone
(:mod:`.leftovers`).
"""

from __future__ import annotations

import contextlib
import ctypes.util
import functools
import importlib.util
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from mploader.experiments.disk_model import HDD_7200, SSD_LIKE, DiskProfile, describe
from mploader.experiments.run import Place
from mploader.experiments.seek_daemon import read_figures, served_image
from mploader.host import cgroup
from mploader.host.cgroup import ReadLimits
from mploader.host.devices import Storage, storage_of

log = logging.getLogger(__name__)

THROTTLED_LABEL = "throttled loop device (HDD-like limits)"
HDD_LIKE = ReadLimits(150_000_000, 150)  # the throttled device's default read limits
TMPFS_LABEL = "tmpfs (no disk: the upper bound)"
SEEK_LABELS = {"hdd": "seek-modelled HDD (7200 rpm, one head)", "ssd": "seek-modelled SSD-like (4 channels)"}
DISK_READ_AHEAD_KB = 128
UNDO_TRIES = 50
UNDO_WAIT_S = 0.1


class PlaceUnavailable(Exception):
    """This machine cannot make the device class (no root, no loop devices, no throttle controller)."""


def name_prefix() -> str:
    return f"mploader-exp-{os.getpid()}"


def own_disk_label(storage: Storage) -> str:
    device = storage.device
    if device is None:
        return f"the machine's own storage ({storage.mount.fstype}, no block device)"
    flag = {True: "reports rotational=1", False: "reports rotational=0", None: "no rotational flag"}[device.rotational]
    return f"the machine's own disk ({device.name}, {device.model or 'model unknown'}, {flag})"


@contextlib.contextmanager
def own_disk(work_dir: Path) -> Iterator[Place]:
    d = Path(tempfile.mkdtemp(prefix=f"{name_prefix()}-disk-", dir=work_dir))
    try:
        storage = storage_of(str(d))
        label = own_disk_label(storage)
        yield Place(label, d, storage, profile=f"disk: {label}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _command(*args: str) -> str:
    try:
        done = subprocess.run(args, check=True, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise PlaceUnavailable(f"{args[0]} is not installed") from e
    except subprocess.CalledProcessError as e:
        raise OSError(f"{' '.join(args)} failed ({e.returncode}): {e.stderr.strip()}") from None
    return done.stdout.strip()


def _busy_retried(step: Callable[[], None]) -> None:
    """Run a step, retrying briefly while the kernel says busy (a process still leaving the cgroup, a mount still
    in use for a moment, something on the machine holding a loop device for a moment after its file system was
    unmounted: mkfs refused one once, "apparently in use by the system", and took it a moment later); the last
    error is raised."""
    for attempt in range(UNDO_TRIES):
        try:
            step()
            return
        except OSError:
            if attempt == UNDO_TRIES - 1:
                raise
            time.sleep(UNDO_WAIT_S)


def _undo(what: str, step: Callable[[], None]) -> None:
    """Run an undo step, retried while busy; a step that keeps failing is logged, never raised over the first
    error."""
    try:
        _busy_retried(step)
    except OSError as e:
        log.error("could not remove %s: %s", what, e)


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise PlaceUnavailable(f"{what} needs root (losetup, mount and cgroups)")


def _cgroup_dir(stack: contextlib.ExitStack, limits: ReadLimits, major_minor: str) -> str:
    """A cgroup capping reads of ``major_minor``; returns its ``cgroup.procs`` path."""
    h = cgroup.hierarchy()
    if h is None:
        raise PlaceUnavailable("no block IO throttle: neither cgroup v2's io controller nor cgroup v1's blkio")
    d = os.path.join(h.mount_point, name_prefix())
    os.mkdir(d)

    def remove() -> None:
        procs = os.path.join(d, "cgroup.procs")
        with open(procs) as f:
            left = [p for p in f.read().split() if p]
        for pid in left:  # our runs' processes, still leaving: to the parent cgroup, or rmdir says busy
            with contextlib.suppress(OSError), open(os.path.join(h.mount_point, "cgroup.procs"), "w") as f:
                f.write(pid)
        os.rmdir(d)

    stack.callback(_undo, f"cgroup {d}", remove)
    if h.version == 2:
        with contextlib.suppress(OSError), open(os.path.join(h.mount_point, "cgroup.subtree_control"), "w") as f:
            f.write("+io")
        values = [f"rbps={limits.bytes_per_s}" if limits.bytes_per_s else "",
                  f"riops={limits.iops}" if limits.iops else ""]
        _write(os.path.join(d, cgroup.V2_IO_MAX), f"{major_minor} {' '.join(v for v in values if v)}")
    else:
        if limits.bytes_per_s:
            _write(os.path.join(d, cgroup.V1_READ_BPS), f"{major_minor} {limits.bytes_per_s}")
        if limits.iops:
            _write(os.path.join(d, cgroup.V1_READ_IOPS), f"{major_minor} {limits.iops}")
    return os.path.join(d, "cgroup.procs")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text + "\n")


def _loop_file_system(stack: contextlib.ExitStack, backing: Path, kind: str,
                      work_dir: Path) -> tuple[str, Path, Callable[[], None]]:
    """A loop device with direct I/O on ``backing``, ext4 on it, mounted (removed when ``stack`` closes);
    returns the loop device, the mount point and the ``renew`` that makes the file system afresh."""
    loop = _command("losetup", "--find", "--show", "--direct-io=on", str(backing))
    stack.callback(_undo, f"loop device {loop}", lambda: _detach(loop))
    mount_point = Path(tempfile.mkdtemp(prefix=f"{name_prefix()}-{kind}-", dir=work_dir))
    stack.callback(_undo, f"mount point {mount_point}", lambda: os.rmdir(mount_point))
    stack.callback(_undo, f"mount {mount_point}", lambda: _unmount(mount_point))

    def renew() -> None:
        """A fresh file system for each run: copies written into the space earlier runs freed came out
        fragmented on a small device, and a run then took twice as long (measured: 7 s, then 17 s)."""
        _unmount(mount_point)
        _busy_retried(lambda: _mkfs(loop))
        _command("mount", "-o", "noatime", loop, str(mount_point))

    renew()
    return loop, mount_point, renew


def _mkfs(device: str) -> None:
    _command("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", device)


def _sparse_image(stack: contextlib.ExitStack, work_dir: Path, kind: str, size_bytes: int) -> Path:
    """A new sparse file of ``size_bytes`` in ``work_dir`` (a name of its own: a broker of two data dirs has two
    devices of one class), removed when ``stack`` closes."""
    fd, name = tempfile.mkstemp(prefix=f"{name_prefix()}-{kind}-", suffix=".img", dir=work_dir)
    image = Path(name)
    stack.callback(_undo, f"backing file {image}", lambda: image.unlink(missing_ok=True))
    with os.fdopen(fd, "wb") as f:
        f.truncate(size_bytes)  # sparse: takes disk space only as the copies are written
    return image


@contextlib.contextmanager
def throttled_loop(work_dir: Path, size_bytes: int, limits: ReadLimits) -> Iterator[Place]:
    """A file system on a throttled loop device (see the module docstring); removed on leaving."""
    _need_root("the throttled loop device")
    if not (limits.bytes_per_s or limits.iops):
        raise ValueError("a throttled device needs a bytes/s or an IOPS limit")
    with contextlib.ExitStack() as stack:
        image = _sparse_image(stack, work_dir, "throttled", size_bytes)
        loop, mount_point, renew = _loop_file_system(stack, image, "throttled", work_dir)
        storage = storage_of(str(mount_point))
        if storage.device is None:
            raise OSError(f"{mount_point} shows no block device after mounting {loop}")
        procs = _cgroup_dir(stack, limits, storage.device.major_minor)
        yield Place(THROTTLED_LABEL, mount_point, storage, procs, limits, renew,
                    profile=f"throttled: reads capped at {(limits.bytes_per_s or 0) / 1e6:.0f} MB/s and "
                            f"{limits.iops or 'unlimited'} IOPS, no head")


def fuse_problem() -> str | None:
    """Why this machine cannot serve a seek-modelled disk, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if importlib.util.find_spec("mfusepy") is None:
        return "mfusepy is not installed (pip install 'mploader[experiments]')"
    if not (ctypes.util.find_library("fuse3") or ctypes.util.find_library("fuse")):
        return "no libfuse (e.g. apt-get install libfuse3-3)"
    return None


def _queue_like_a_disk(stack: contextlib.ExitStack, name: str, rotational: bool) -> None:
    """The loop device's queue set as a SATA disk's: its rotational flag, 128 KiB of read-ahead (the kernel's
    default for a disk that reports no optimal I/O size; a loop device's own, 2560 KiB here, hid most of the
    cost of two readers taking turns at the head) and the mq-deadline scheduler for a disk with a head, none
    for the SSD-like one.  The loop device keeps its queue's settings after it is detached: they are put back
    on leaving, for whatever uses the device next."""
    queue = f"/sys/block/{name}/queue"
    wanted = {"rotational": "1" if rotational else "0", "read_ahead_kb": str(DISK_READ_AHEAD_KB),
              "scheduler": "mq-deadline" if rotational else "none"}
    for setting, value in wanted.items():
        path = f"{queue}/{setting}"
        if setting != "rotational":  # the kernel sets that one afresh when a loop device is attached
            before = _current(Path(path).read_text())
            stack.callback(_undo, f"{path} back to {before}", functools.partial(_write, path, before))
        with contextlib.suppress(OSError):  # a kernel built without mq-deadline keeps its scheduler
            _write(path, value)


def _current(text: str) -> str:
    """A sysfs setting's value; of a scheduler list such as "none [mq-deadline] bfq", the chosen one."""
    chosen = [w[1:-1] for w in text.split() if w.startswith("[")]
    return chosen[0] if chosen else text.strip()


@contextlib.contextmanager
def seek_loop(work_dir: Path, size_bytes: int, profile: DiskProfile) -> Iterator[Place]:
    """A file system on a seek-modelled device (:mod:`.seek_daemon`): a sparse image served by the disk model's
    FUSE daemon, a loop device with direct I/O on the served file, ext4 on it, ``rotational`` set as the
    profile says; removed on leaving, the daemon ended."""
    _need_root(f"the {profile.name}-seek device")
    if (why := fuse_problem()) is not None:
        raise PlaceUnavailable(f"the {profile.name}-seek device needs FUSE: {why}")
    with contextlib.ExitStack() as stack:
        image = _sparse_image(stack, work_dir, profile.name, size_bytes)
        served_dir = Path(tempfile.mkdtemp(prefix=f"{name_prefix()}-{profile.name}-model-", dir=work_dir))
        stack.callback(_undo, f"mount point {served_dir}", lambda: os.rmdir(served_dir))
        served = stack.enter_context(served_image(image, profile.name, served_dir, os.getpid()))
        loop, mount_point, renew = _loop_file_system(stack, served, f"{profile.name}-seek", work_dir)
        _queue_like_a_disk(stack, os.path.basename(loop), rotational=profile.rpm is not None)
        storage = storage_of(str(mount_point))
        yield Place(SEEK_LABELS[profile.name], mount_point, storage, renew=renew, figures=lambda: read_figures(image),
                    profile=f"{profile.name}-seek: {describe(profile)}")


def _detach(loop: str) -> None:
    _command("losetup", "-d", loop)


def _unmount(mount_point: Path) -> None:
    if os.path.ismount(mount_point):
        _command("umount", str(mount_point))


@contextlib.contextmanager
def tmpfs(work_dir: Path, size_bytes: int) -> Iterator[Place]:
    """A private tmpfs mount (root), else a directory in /dev/shm; removed on leaving."""
    with contextlib.ExitStack() as stack:
        if os.geteuid() == 0:
            mount_point = Path(tempfile.mkdtemp(prefix=f"{name_prefix()}-tmpfs-", dir=work_dir))
            stack.callback(_undo, f"mount point {mount_point}", lambda: os.rmdir(mount_point))
            _command("mount", "-t", "tmpfs", "-o", f"size={size_bytes}", name_prefix(), str(mount_point))
            stack.callback(_undo, f"mount {mount_point}", lambda: _unmount(mount_point))
        else:
            mount_point = Path(tempfile.mkdtemp(prefix=f"{name_prefix()}-tmpfs-", dir="/dev/shm"))
            stack.callback(shutil.rmtree, mount_point, True)
        yield Place(TMPFS_LABEL, mount_point, storage_of(str(mount_point)), profile="tmpfs: in memory, no disk")


DEVICE_CLASSES = ("disk", "throttled", "hdd-seek", "ssd-seek", "tmpfs")
SEEK_PROFILES = {"hdd-seek": HDD_7200, "ssd-seek": SSD_LIKE}


def make_place(device: str, work_dir: Path, size_bytes: int,
               limits: ReadLimits) -> contextlib.AbstractContextManager[Place]:
    """The device class by name: "disk" (the work dir's own), "throttled" (``size_bytes``, ``limits``),
    "hdd-seek" or "ssd-seek" (``size_bytes``: the modelled disk's image) or "tmpfs"."""
    if device == "disk":
        return own_disk(work_dir)
    if device == "throttled":
        return throttled_loop(work_dir, size_bytes, limits)
    if device in SEEK_PROFILES:
        return seek_loop(work_dir, size_bytes, SEEK_PROFILES[device])
    if device == "tmpfs":
        return tmpfs(work_dir, size_bytes)
    raise ValueError(f"unknown device class {device!r}; known: {', '.join(DEVICE_CLASSES)}")


__all__ = ["DEVICE_CLASSES", "SEEK_LABELS", "SEEK_PROFILES", "PlaceUnavailable", "THROTTLED_LABEL", "TMPFS_LABEL",
           "fuse_problem", "make_place", "name_prefix", "own_disk", "own_disk_label", "seek_loop", "throttled_loop",
           "tmpfs"]
