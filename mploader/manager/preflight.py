"""Before the first write: everything that fails Kafka's start-up and can be known without recovering, and what
the environment keeps a load from (docs/architecture.md, "Fail before the first write"; docs/loading.md §18)."""

from __future__ import annotations

import logging
import os

from mploader.config import LoaderConfig
from mploader.disk import Disk, environment
from mploader.engine.select import usable_cpus
from mploader.errors import (
    StartupFailedError,
)
from mploader.format import checkpoint
from mploader.format.names import DirKind, TopicPartition
from mploader.manager.dirs import (
    CREATED_CHECKPOINTS,
    LOCK_FILE,
    DirState,
    can_create,
    check_dir,
    read_dir,
)
from mploader.recovery import preflight as partition_preflight
from mploader.scan.plan import CleanScans

log = logging.getLogger("mploader.manager")  # LogManager's lines, from every room of the package


def preflight(states: list[DirState], cfg: LoaderConfig, disk: Disk, offline: dict[str, str],
               keep_listings: bool = True, check_writes: bool = True) -> None:
    """Everything that fails Kafka's start-up and can be known without recovering, for every data dir, before
    the load writes anything: a held lock, a bad directory name, a partition directory that is a link, no
    usable data dir, then what the loader would refuse in each partition (:mod:`mploader.recovery.preflight`)
    and the same partition in two directories.  Raises the first certain StartupFailedError; reads only
    (an existing ``.lock`` is locked here: that changes no byte).  A data dir whose files the environment keeps
    a load from (:mod:`mploader.disk.environment`; ``check_writes``: also what it may not write) goes offline."""
    n = cfg.num_segment_loading_threads_per_data_dir
    workers = n if isinstance(n, int) else usable_cpus()
    if (problem := environment.open_files_problem(len(states), cfg.num_recovery_threads_per_data_dir,
                                                  workers)) is not None:
        raise problem
    for s in states:
        try:
            inspect_dir(s, disk, cfg.dry_run)
        except OSError as e:  # not a directory, not readable, refused: offline, and nothing was written there
            _refuse(s, e, offline)
    _halt_without_usable_dirs(states, offline)
    loading = [(path, tp, kind) for s in states if s.listed and s.predicted_offline is None
               for path, tp, kind in s.partitions]
    if cfg.persist_recovery_points:
        _refuse_names_checkpoints_cannot_carry(loading)
    kept = 0  # names of the listings left to the loader (preflight.KEPT_NAMES)
    # per clean data dir (an unclean load plans its scans exactly), what a clean load may scan, per partition sized
    sized: dict[str, list[CleanScans]] = {s.path: [] for s in states if s.clean}
    state_of = {path: s for s in states for path, _, _ in s.partitions}
    for path, tp, kind in loading:
        keep = keep_listings and kept < partition_preflight.KEPT_NAMES
        s = state_of[path]
        if s.path in offline:
            continue
        # the environment's check lists the partition through the disk: the listing the checks below use
        try:
            writes_from = (environment.changed_from(disk.list_files(path), s.clean, s.recovery_points.get(tp, 0))
                           if check_writes else None)
            problem = environment.partition_problem(disk, path, writes_from)
        except OSError:  # not listable: the loader meets that itself (an IOException: the dir goes offline)
            problem = None
        if problem is not None:
            disk.release(path)
            _refuse(s, problem, offline)
            continue
        failure = partition_preflight.startup_failure(disk, path, kind, cfg.for_topic(tp.topic), keep_listing=keep,
                                                      clean_scans=sized.get(s.path),
                                                      sized_logs=None if s.clean else s.sized_logs)
        if keep:
            try:
                kept += len(disk.list_files(path))  # the preflight's listing, from the disk's cache
            except OSError:  # not listable: the loader meets that itself
                pass
        if failure is not None and partition_preflight.will_not_fail_with_io_error(path):
            raise failure
    _halt_without_usable_dirs(states, offline)
    loading = [(path, tp, kind) for path, tp, kind in loading if state_of[path].path not in offline]
    for s in states:  # a clean dir whose every partition was sized: what "auto" may weigh instead of planning it
        if s.clean and s.listed and s.predicted_offline is None and len(sized[s.path]) == len(s.partitions):
            s.clean_scans = CleanScans.total(sized[s.path])
    copies: dict[tuple[bool, TopicPartition], list[str]] = {}
    for path, tp, kind in loading:  # LogManager.loadLog: a second directory for a tp (both loaded)
        if kind in (DirKind.LIVE, DirKind.FUTURE):
            copies.setdefault((kind is DirKind.FUTURE, tp), []).append(path)
    for (_, tp), paths in copies.items():
        loaded = [p for p in paths if len(paths) > 1 and partition_preflight.will_not_fail_with_io_error(p)]
        if len(loaded) > 1:
            raise StartupFailedError(loaded[1], "IllegalStateException",
                                     f"duplicate log directories for {tp}: {loaded[0]} and {loaded[1]}")


def _refuse_names_checkpoints_cannot_carry(loading: list[tuple[str, TopicPartition, DirKind]]) -> None:
    """A recovery-point checkpoint line is ``topic partition offset`` in UTF-8: a topic with whitespace or bytes
    that are not UTF-8 (Kafka's name parser takes both; Kafka itself creates no such topic) would write a
    checkpoint the next load rejects (the dir offline) or could not be written at all."""
    for path, tp, _ in loading:
        if any(c.isspace() for c in tp.topic) or not _utf8(tp.topic):
            raise StartupFailedError(path, "KafkaException", "a partition directory whose topic holds whitespace or "
                                     "bytes that are not UTF-8 cannot be named in a checkpoint (--resumable): "
                                     "rename it or move it out of the data dir, or load without --resumable")


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a listing's undecodable bytes come back as lone surrogates
        return False
    return True


def _refuse(state: DirState, error: OSError, offline: dict[str, str]) -> None:
    """The data dir goes offline before the load writes anything in it (and nothing will be)."""
    offline[state.path] = state.offline_reason = f"{type(error).__name__}: {error}"
    state.partitions = []
    log.error("%s: %s; the data dir goes offline and nothing in it is changed", state.path, error)


def _halt_without_usable_dirs(states: list[DirState], offline: dict[str, str]) -> None:
    """LogManager.createAndValidateLogDirs' Exit.halt(1), foreseen: no data dir left to load."""
    if all(s.path in offline or s.predicted_offline is not None for s in states):
        reasons = "; ".join(f"{s.path}: {offline.get(s.path) or s.predicted_offline}" for s in states)
        raise StartupFailedError(None, "KafkaException (Exit.halt)",
                                 f"no usable data directory among those given ({reasons})")


def inspect_dir(state: DirState, disk: Disk, dry_run: bool) -> None:
    """The read-only half of :func:`prepare_dir`: LogManager's checks of one data dir, its lock when the
    ``.lock`` file exists, and, unless a write to come is foreseen to fail, the checkpoints and the listing."""
    d = state.path
    if not os.path.exists(d):
        state.missing = True  # created by create_and_lock (a new, empty data dir)
        if dry_run:
            state.predicted_offline = "FileNotFoundError: data directory does not exist (dry run: not created)"
        elif not can_create(d):
            state.predicted_offline = f"PermissionError: cannot create the data directory {d}"
        return
    check_dir(d)
    if (problem := environment.data_dir_problem(d)) is not None:  # before the lock and checkpoints are opened
        raise problem
    lock_path = os.path.join(d, LOCK_FILE)
    writes = False
    if os.path.lexists(lock_path):
        state.lock_fd = disk.lock(lock_path)  # LogManager.lockLogDirs; the file is there: nothing is written
        state.locked = True
    else:
        writes = True
    writes = writes or any(not os.path.lexists(os.path.join(d, name)) for name in CREATED_CHECKPOINTS)
    marker = os.path.join(d, checkpoint.CLEAN_SHUTDOWN_MARKER)
    state.clean = os.path.exists(marker)  # File.exists: follows links (a dangling one counts as absent)
    marker_dir = state.clean and os.path.isdir(marker) and not os.path.islink(marker)
    if marker_dir and os.listdir(marker):
        state.predicted_offline = f"OSError: [Errno 39] the clean-shutdown marker is a non-empty directory: {marker}"
        return
    writes = writes or state.clean
    if writes and not dry_run and not os.access(d, os.W_OK | os.X_OK):
        state.predicted_offline = f"PermissionError: the data directory is not writable: {d}"
        return
    try:
        read_dir(state, disk, skip=checkpoint.CLEAN_SHUTDOWN_MARKER if marker_dir else None)
    except OSError as e:  # the listing: offline, after the writes Kafka makes first (prepare_dir lists again)
        state.predicted_offline = f"{type(e).__name__}: {e}"
