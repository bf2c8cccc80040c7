"""What the environment lets a load do, found before its first write (docs/loading.md, "Errors of the environment").

Kafka opens whatever stands at a name it reads or writes: a FIFO blocks its start for ever, a device is written
into, a link leads out of the data dir, a hard link shares a cut with a file elsewhere, and a file it may not write
fails a recovery, which ``recoverLog`` takes for corruption (it cuts valid data).  mploader refuses all of these
from ``lstat`` alone, before a byte is read or written in the data dir: the dir goes offline (as Kafka's
``LogDirFailureChannel`` takes it), with a message naming the file and what to fix.  Every open is also safe on
its own (:func:`mploader.format.files.open_regular`): this is the check that comes first, so that a dry run
predicts it and a load writes nothing before it.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import stat

from mploader.disk.base import Disk
from mploader.errors import EnvironmentFailure, hard_linked
from mploader.format import checkpoint
from mploader.format.files import special_file

# the files of a data dir that a load reads or writes by name (Kafka's checkpoints, its lock and broker identity,
# mploader's own record), and their temporary files: a link there would lead a read or a write out of the dir
DATA_DIR_FILES = frozenset(name + tmp for name in (
    checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT,
    checkpoint.REPLICATION_OFFSET_CHECKPOINT, ".lock", "meta.properties", "mploader-recovered") for tmp in ("", ".tmp"))
# names a load writes in a partition directory: a directory standing there fails the write (EISDIR)
_WRITTEN_NAME = re.compile(r"\d+\.(?:log|index|timeindex|txnindex|snapshot)(?:\.\w+)*|(?:leader-epoch-checkpoint|"
                           r"partition\.metadata)(?:\.tmp)?|mploader-journal|mploader-attempt")


def data_dir_problem(directory: str) -> EnvironmentFailure | None:
    """The first entry of the data dir itself that no load may touch: a special file, or a link at a name a load
    reads or writes (partition directories are the listing's to check)."""
    with os.scandir(directory) as entries:
        for e in entries:
            if e.is_symlink():
                if e.name in DATA_DIR_FILES:
                    return special_file(e.path, stat.S_IFLNK)
            elif not e.is_dir(follow_symlinks=False) and not e.is_file(follow_symlinks=False):
                return special_file(e.path, e.stat(follow_symlinks=False).st_mode)
    return None


def partition_problem(disk: Disk, directory: str, writes_from: int | None) -> EnvironmentFailure | None:
    """The first entry of a partition directory that stops its load: a special file, a directory where a load
    writes a file, and, among the files the load may change (``writes_from``: :func:`changed_from`; None: it
    changes none, as ``verify``), one with another name (a hard link) or one this process may not write
    (permissions, an immutable or read-only file: ``access`` says so even to root), or the directory itself not
    writable.  It lists the directory through ``disk`` (the listing the preflight's other checks and the loader
    use).  Links to files are the partition preflight's (a start-up failure, as before)."""
    if writes_from is not None and not os.access(directory, os.W_OK | os.X_OK):
        return _not_writable(directory)
    files = disk.list_files(directory)
    for name, mode in sorted(disk.other_entries(directory).items()):
        if not stat.S_ISDIR(mode) or _WRITTEN_NAME.fullmatch(name):
            return special_file(os.path.join(directory, name), mode)
    if writes_from is None:
        return None
    links = disk.symlinks(directory)
    for name in _may_change(files, writes_from):
        if name in links:
            continue
        path = os.path.join(directory, name)
        if (links_to_it := os.lstat(path).st_nlink) > 1:
            return hard_linked(path, links_to_it)
        if not os.access(path, os.W_OK):
            return _not_writable(path)
    return None


def changed_from(files: list[str], clean: bool, recovery_point: int) -> int:
    """The lowest base offset whose segment a load may change: a clean load grows the highest segment's indexes
    only; an unclean one recovers from the segment holding the recovery point (docs/loading.md §6.6)."""
    bases = [int(name[:-4]) for name in files if name.endswith(".log") and name[:-4].isdigit()]
    if not bases:
        return 0
    if clean:
        return max(bases)
    return max((b for b in bases if b <= recovery_point), default=min(bases))


def _may_change(files: list[str], writes_from: int) -> list[str]:
    """The files a load may write in place (open, write, cut): those of the segments from ``writes_from`` on, the
    snapshots from there on, and the files of a segment a load-time recovery rewrites (no ``.index``).  A file a
    load replaces by a rename (a checkpoint) or deletes (a stray snapshot, ``.deleted``) needs no check of its own:
    the directory's write permission is checked, and removing a name changes no other name's file.  Rarer changes
    (a segment whose corrupt ``.txnindex`` a load recovers, a split of an old segment) meet the same refusal when
    they open the file (``disk.real``).  String sets, not a parse of every name: a clean broker's partition holds
    thousands of names, and a clean load changes the files of one segment."""
    logs = {name[:-4] for name in files if name.endswith(".log")}
    indexed = {name[:-6] for name in files if name.endswith(".index")}
    chosen = {p for p in logs if p.isdigit() and int(p) >= writes_from} | (logs - indexed)
    return [name for name in files
            if (prefix := name.partition(".")[0]) in chosen
            or (name.endswith(".snapshot") and prefix.isdigit() and int(prefix) >= writes_from)]


def open_files_problem(data_dirs: int, recovery_threads: int, workers: int) -> EnvironmentFailure | None:
    """The limit on open files against what a load holds open at once: beside what the process has open, a few of
    its own, per data dir one per loading thread (the file it changes) and one per four worker processes (the
    pool's pipes and blocks): at most one above the lowest limit loads passed under (perf/README.md, "Limits: open
    files, memory, a full disk").  EMFILE in the middle of a load stops its partition with nothing cut
    (docs/loading.md §18); this says so before the first write."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        open_now = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own
    except OSError:
        return None
    needed = open_now + 3 + data_dirs * (recovery_threads + -(-workers // 4))
    if needed <= soft:
        return None
    return EnvironmentFailure(None, errno.EMFILE, f"this load may hold {needed} files open at once ({open_now} are "
                              f"open already; {data_dirs} data dirs, {recovery_threads} loading threads and "
                              f"{workers} worker processes each), and this process may open {soft}",
                              f"raise the limit (ulimit -n {max(needed, 1024)}, systemd's LimitNOFILE) or load "
                              f"with fewer threads and workers")


def _not_writable(path: str) -> EnvironmentFailure:
    err = errno.EACCES if os.geteuid() != 0 else errno.EPERM  # root: an immutable file or a read-only mount
    return EnvironmentFailure(path, err, "this process may not change it", _FIX_WRITABLE)


_FIX_WRITABLE = ("load as its owner, or make it writable (chmod u+w, chown), clear an immutable or append-only "
                 "attribute (lsattr; chattr -i -a), or remount the file system read-write (mploader verify looks "
                 "without writing)")


__all__ = ["DATA_DIR_FILES", "changed_from", "data_dir_problem", "open_files_problem", "partition_problem"]
