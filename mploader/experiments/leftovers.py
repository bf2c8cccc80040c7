"""What a killed experiment left behind, found by its name, and its removal (``mploader cleanup``).

An experiment removes every device it made however it ends, as a process can (:mod:`.places`); a ``kill -9``
(or the OOM killer) leaves them.  Everything an experiment makes is named after its process,
``mploader-exp-<pid>``: the scratch directory, mount points and images, the seek-modelled disk's FUSE file
system (its source) and daemon (``--owner <pid>`` on its command line, :mod:`.seek_daemon`), the throttle's
cgroup.  What belongs to a process that is gone (no such pid, or a zombie) is removed, in the order that
lets each step succeed: the file systems on loop devices unmounted, the loop devices detached, the FUSE file
systems unmounted (their daemons then exit), daemons still running ended, then the files, the mount points,
the cgroups and the scratch directories.  What belongs to a live process is never touched, so this is safe
while other experiments run; a pid used again by another process keeps its leftovers until that one ends.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from mploader.experiments.seek_daemon import MODULE, stats_path
from mploader.host import cgroup

OWNED = re.compile(r"mploader-exp-(\d+)")
STOP_WAIT_S = 5.0


@dataclass
class Cleaned:
    removed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "what: why"

    def step(self, what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except (OSError, subprocess.CalledProcessError, psutil.Error) as e:
            self.failed.append(f"{what}: {e}")
        else:
            self.removed.append(what)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def orphaned(text: str) -> bool:
    """``text`` (a path, a mount's source) is named after an experiment that is gone."""
    m = OWNED.search(text)
    return m is not None and _gone(int(m.group(1)))


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, file system type, source) of every mount, in mounting order."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            after = fields.index("-")
            out.append((fields[4].replace("\\040", " "), fields[after + 1], fields[after + 2]))
    return out


def _orphaned_mounts(fuse: bool) -> list[str]:
    found = [point for point, fstype, source in _mounts()
             if fstype.startswith("fuse") == fuse and (orphaned(point) or orphaned(source))]
    return found[::-1]  # the last mounted first


def _orphaned_loops() -> Iterator[tuple[str, str]]:
    """(device, backing file) of the loop devices on an orphaned file."""
    for dev in sorted(Path("/sys/block").glob("loop*")):
        with contextlib.suppress(OSError):
            backing = (dev / "loop" / "backing_file").read_text().strip()
            if orphaned(backing):
                yield f"/dev/{dev.name}", backing


def _orphaned_daemons() -> Iterator[tuple[psutil.Process, str | None]]:
    """The seek-modelled disks' daemons whose experiment is gone, with the image each served."""
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        if MODULE in argv and "--owner" in argv and _gone(int(argv[argv.index("--owner") + 1])):
            yield p, argv[argv.index("--image") + 1] if "--image" in argv else None


def _run(*args: str) -> Callable[[], None]:
    def run() -> None:
        subprocess.run(args, check=True, capture_output=True)
    return run


def _end(p: psutil.Process) -> None:
    try:
        p.terminate()  # libfuse unmounts on SIGTERM
        p.wait(STOP_WAIT_S)
    except psutil.TimeoutExpired:
        p.kill()
        p.wait(STOP_WAIT_S)
    except psutil.NoSuchProcess:
        pass  # it ended with its unmounted file system


def _remove_files(done: Cleaned, files: list[str]) -> None:
    for name in files:
        stats = stats_path(Path(name))  # and its unfinished rewrite, where the daemon died in the middle of one
        for path in (Path(name), stats, stats.with_name(stats.name + ".tmp"), Path(name + ".log")):
            if path.exists() and orphaned(path.name):
                done.step(f"file {path}", path.unlink)


def scratch_base() -> Path:
    """Where an experiment's scratch directory goes unless told (``--work-dir``)."""
    return Path("/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir())


def _remove_dirs(done: Cleaned, points: list[str]) -> None:
    mounted = {point for point, _, _ in _mounts()}
    for point in points:
        if point not in mounted and os.path.isdir(point):
            done.step(f"mount point {point}", functools.partial(os.rmdir, point))
    h = cgroup.hierarchy()
    for group in sorted(Path(h.mount_point).glob("mploader-exp-*")) if h else []:
        if orphaned(group.name):
            done.step(f"cgroup {group}", group.rmdir)
    for scratch in sorted(scratch_base().glob("mploader-exp-*")):
        if scratch.is_dir() and orphaned(scratch.name) and not any(m.startswith(f"{scratch}/") for m in mounted):
            done.step(f"scratch directory {scratch}", functools.partial(shutil.rmtree, scratch))


def remove_leftovers() -> Cleaned:
    """Remove what experiments that are gone left (see the module docstring)."""
    done = Cleaned()
    daemons = list(_orphaned_daemons())  # before their file systems go: a daemon then exits, and its image is named
    points = _orphaned_mounts(fuse=False)
    for point in points:
        done.step(f"mount {point}", _run("umount", point))
    files = []
    for device, backing in _orphaned_loops():
        done.step(f"loop device {device} (on {backing})", _run("losetup", "-d", device))
        files.append(backing)
    fuse_points = _orphaned_mounts(fuse=True)
    for point in fuse_points:
        done.step(f"FUSE mount {point}", _run("umount", point))
    for process, image in daemons:
        done.step(f"disk model daemon {process.pid}", functools.partial(_end, process))
        if image is not None:
            files.append(image)
    _remove_files(done, [f for f in files if not f.endswith("/disk.img")])  # a served file went with its mount
    _remove_dirs(done, points + fuse_points)
    return done


__all__ = ["Cleaned", "orphaned", "remove_leftovers", "scratch_base"]
