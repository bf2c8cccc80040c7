"""Before the first write: everything that fails Kafka's start-up and can be known without recovering, and what
the environment keeps a load from (docs/architecture.md, "Fail before the first write"; docs/loading.md §18)."""

from __future__ import annotations

import logging
import os

from mploader.config import LoaderConfig
from mploader.disk import Disk, environment
from mploader.errors import (
    StartupFailedError,
)
from mploader.format import checkpoint
from mploader.format.names import DirKind, TopicPartition
from mploader.host.cpus import usable_cpus
from mploader.manager.channel import LogDirFailureChannel
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


def preflight(states: list[DirState], cfg: LoaderConfig, disk: Disk, channel: LogDirFailureChannel,
              keep_listings: bool = True, check_writes: bool = True) -> None:
    """Everything that fails Kafka's start-up and can be known without recovering, for every data dir, before
    the load writes anything: a held lock, a bad directory name, a partition directory that is a link, no
    usable data dir, then what the loader would refuse in each partition (:mod:`mploader.recovery.preflight`)
    and the same partition in two directories.  Raises the first certain StartupFailedError; reads only
    (an existing ``.lock`` is locked here: that changes no byte).  A data dir whose files the environment keeps
    a load from (:mod:`mploader.disk.environment`; ``check_writes``: also what it may not write) goes offline."""
    n = cfg.segment_scan_workers_per_data_dir
    workers = n if isinstance(n, int) else usable_cpus()
    if (problem := environment.open_files_problem(len(states), cfg.num_recovery_threads_per_data_dir,
                                                  workers)) is not None:
        raise problem
    for s in states:
        try:
            inspect_dir(s, disk, cfg.dry_run, channel)
        except OSError as e:  # not a directory, not readable, refused: offline, and nothing was written there
            _refuse(s, e, channel)
    _halt_without_usable_dirs(states, channel)
    loading = [(s, path, tp, kind) for s in states if s.listed and channel.foreseen(s.path) is None
               for path, tp, kind in s.partitions]
    if cfg.persist_recovery_points:
        _refuse_names_checkpoints_cannot_carry([(path, tp, kind) for _, path, tp, kind in loading])
    _PartitionChecks(cfg, disk, channel, states, keep_listings, check_writes).run(loading)
    _halt_without_usable_dirs(states, channel)
    _refuse_duplicates([(path, tp, kind) for s, path, tp, kind in loading if s.path not in channel])


class _PartitionChecks:
    """Each partition of the dirs still loading: what the environment keeps its load from (its dir then goes
    offline), then what its load would refuse (:func:`mploader.recovery.preflight.startup_failure`: raised where
    certain); per clean dir, what a clean load may scan, sized as it goes."""

    def __init__(self, cfg: LoaderConfig, disk: Disk, channel: LogDirFailureChannel, states: list[DirState],
                 keep_listings: bool, check_writes: bool) -> None:
        self.cfg, self.disk, self.channel = cfg, disk, channel
        self.states = states
        self.keep_listings = keep_listings  # the listings may stay cached, up to LISTING_CACHE_NAMES names
        self.check_writes = check_writes
        self.cached_names = 0  # names of the listings left to the loader (preflight.LISTING_CACHE_NAMES)
        # per clean data dir (an unclean load plans its scans exactly), what a clean load may scan, per partition
        self.sized: dict[str, list[CleanScans]] = {s.path: [] for s in states if s.clean}

    def run(self, loading: list[tuple[DirState, str, TopicPartition, DirKind]]) -> None:
        for s, path, tp, kind in loading:
            if s.path not in self.channel:
                self.check(s, path, tp, kind)
        for s in self.states:  # a clean dir whose every partition was sized: what "auto" may weigh instead of a plan
            if (s.clean and s.listed and self.channel.foreseen(s.path) is None
                    and len(self.sized[s.path]) == len(s.partitions)):
                s.clean_scans = CleanScans.total(self.sized[s.path])

    def check(self, s: DirState, path: str, tp: TopicPartition, kind: DirKind) -> None:
        problem = self.environment_problem(s, path, tp)
        if problem is not None:
            self.disk.release(path)
            _refuse(s, problem, self.channel)
            return
        keep = self.keep_listings and self.cached_names < partition_preflight.LISTING_CACHE_NAMES
        failure = partition_preflight.startup_failure(self.disk, path, kind, self.cfg.for_topic(tp.topic),
                                                      cache_listing=keep, clean_scans=self.sized.get(s.path),
                                                      sized_logs=None if s.clean else s.sized_logs)
        if keep:
            try:
                self.cached_names += len(self.disk.list_files(path))  # the preflight's listing, from the disk's cache
            except OSError:  # not listable: the loader meets that itself
                pass
        if failure is not None and partition_preflight.will_not_fail_with_io_error(path):
            raise failure

    def environment_problem(self, s: DirState, path: str, tp: TopicPartition) -> OSError | None:
        """What the environment keeps this partition's load from; it lists the partition through the disk: the
        listing the checks after it use."""
        try:
            writes_from = (environment.changed_from(self.disk.list_files(path), s.clean, s.recovery_points.get(tp, 0))
                           if self.check_writes else None)
            return environment.partition_problem(self.disk, path, writes_from)
        except OSError:  # not listable: the loader meets that itself (an IOException: the dir goes offline)
            return None


def _refuse_duplicates(loading: list[tuple[str, TopicPartition, DirKind]]) -> None:
    """LogManager.loadLog: a second directory for a partition (both loaded) fails the start."""
    copies: dict[tuple[bool, TopicPartition], list[str]] = {}
    for path, tp, kind in loading:
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


def _refuse(state: DirState, error: OSError, channel: LogDirFailureChannel) -> None:
    """The data dir goes offline before the load writes anything in it (and nothing will be)."""
    channel.add(state.path, f"{type(error).__name__}: {error}")
    state.partitions = []
    log.error("%s: %s; the data dir goes offline and nothing in it is changed", state.path, error)


def _halt_without_usable_dirs(states: list[DirState], channel: LogDirFailureChannel) -> None:
    """LogManager.createAndValidateLogDirs' Exit.halt(1), foreseen: no data dir left to load."""
    if all(s.path in channel or channel.foreseen(s.path) is not None for s in states):
        reasons = "; ".join(f"{s.path}: {channel.reason(s.path) or channel.foreseen(s.path)}" for s in states)
        raise StartupFailedError(None, "KafkaException (Exit.halt)",
                                 f"no usable data directory among those given ({reasons})")


def inspect_dir(state: DirState, disk: Disk, dry_run: bool, channel: LogDirFailureChannel) -> None:
    """The read-only half of :func:`prepare_dir`: LogManager's checks of one data dir, its lock when the
    ``.lock`` file exists, and, unless a write to come is foreseen to fail, the checkpoints and the listing."""
    d = state.path
    if not os.path.exists(d):
        state.missing = True  # created by create_and_lock (a new, empty data dir)
        if dry_run:
            channel.foresee(d, "FileNotFoundError: data directory does not exist (dry run: not created)")
        elif not can_create(d):
            channel.foresee(d, f"PermissionError: cannot create the data directory {d}")
        return
    check_dir(d)
    if (problem := environment.data_dir_problem(d)) is not None:  # before the lock and checkpoints are opened
        raise problem
    writes = not _lock_if_there(state, disk)
    writes = writes or any(not os.path.lexists(os.path.join(d, name)) for name in CREATED_CHECKPOINTS)
    marker = os.path.join(d, checkpoint.CLEAN_SHUTDOWN_MARKER)
    state.clean = os.path.exists(marker)  # File.exists: follows links (a dangling one counts as absent)
    marker_dir = state.clean and os.path.isdir(marker) and not os.path.islink(marker)
    if (why := _write_foreseen_to_fail(d, marker if marker_dir else None, writes or state.clean, dry_run)):
        channel.foresee(d, why)
        return
    try:
        read_dir(state, disk, channel, skip=checkpoint.CLEAN_SHUTDOWN_MARKER if marker_dir else None)
    except OSError as e:  # the listing: offline, after the writes Kafka makes first (prepare_dir lists again)
        channel.foresee(d, f"{type(e).__name__}: {e}")


def _lock_if_there(state: DirState, disk: Disk) -> bool:
    """LogManager.lockLogDirs where the ``.lock`` file is there (nothing is written); whether it was."""
    lock_path = os.path.join(state.path, LOCK_FILE)
    if not os.path.lexists(lock_path):
        return False
    state.lock_fd = disk.lock(lock_path)
    state.locked = True
    return True


def _write_foreseen_to_fail(d: str, marker_dir: str | None, writes: bool, dry_run: bool) -> str | None:
    """Why a write LogManager's start-up makes in ``d`` will fail (None: none foreseen): deleting a marker that is
    a non-empty directory, or any write (``writes``) in a dir not writable."""
    if marker_dir is not None and os.listdir(marker_dir):
        return f"OSError: [Errno 39] the clean-shutdown marker is a non-empty directory: {marker_dir}"
    if writes and not dry_run and not os.access(d, os.W_OK | os.X_OK):
        return f"PermissionError: the data directory is not writable: {d}"
    return None
