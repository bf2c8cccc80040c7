"""A data dir's life in a load: its state, its checks and listing, the writes of LogManager's start-up (create,
lock, the empty checkpoints, the marker), the final flush and commit (the marker goes last: docs/crash-safety.md),
the recovery points of ``--resumable``."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from mploader.config import LoaderConfig
from mploader.disk import Disk
from mploader.errors import (
    CheckpointNumberFormatError,
    InvalidPartitionDirError,
    MalformedCheckpointError,
    StartupFailedError,
    environment_failure,
)
from mploader.format import checkpoint, names
from mploader.format.names import DirKind, TopicPartition
from mploader.manager.channel import LogDirFailureChannel
from mploader.recovery import attempts, journal
from mploader.recovery.resume import Recovered, RecoveryPointWriter
from mploader.recovery.segment import Segment, resize_indexes
from mploader.result import LoadedLog
from mploader.scan.plan import CleanScans

log = logging.getLogger("mploader.manager")  # LogManager's lines, from every room of the package


LOCK_FILE = ".lock"  # LogManager.LockFileName


@dataclass(slots=True)
class DirState:
    path: str
    clean: bool = False
    recovery_points: dict[TopicPartition, int] = field(default_factory=dict)
    log_starts: dict[TopicPartition, int] = field(default_factory=dict)
    partitions: list[tuple[str, TopicPartition, DirKind]] = field(default_factory=list)
    lock_fd: int | None = None
    locked: bool = False
    # what the preflight (read-only) found, for the writes that follow it (see inspect_dir)
    missing: bool = False  # the data dir does not exist: created by the writes
    listed: bool = False  # the partition listing is done (and checked)
    high_watermarks: dict[TopicPartition, int] | None = None  # replication-offset-checkpoint (None: unknown)
    marker_to_delete: str | None = None  # the clean-shutdown marker, deleted when the load is done (commit_clean_dirs)
    loaded: list[LoadedLog] = field(default_factory=list)  # the partitions loaded so far
    resume: RecoveryPointWriter | None = None  # persist_recovery_points: the dir's recovery points, advanced
    recovered: dict[TopicPartition, Recovered] = field(default_factory=dict)  # what a killed --resumable load left
    clean_scans: CleanScans | None = None  # what a clean load of it may scan, as the preflight sized it (None: unsized)
    # an unclean dir's partitions: their .log files' bytes and number, as the preflight sized them (PartitionJob.logs)
    sized_logs: dict[str, tuple[int, int]] = field(default_factory=dict)


def validate_dirs(data_dirs: Sequence[str | os.PathLike[str]]) -> list[str]:
    seen: dict[str, str] = {}
    out: list[str] = []
    for d in data_dirs:
        path = os.path.abspath(os.fspath(d))
        canonical = os.path.realpath(path)
        if canonical in seen:
            raise StartupFailedError(path, "KafkaException",
                                     f"duplicate log directory: {seen[canonical]} and {path} are the same directory")
        seen[canonical] = path
        out.append(path)
    return out


CREATED_CHECKPOINTS = (checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT)


def check_dir(d: str) -> None:
    if not os.path.isdir(d):
        raise NotADirectoryError(20, "data directory is not a directory", d)
    if not os.access(d, os.R_OK | os.X_OK):
        raise PermissionError(13, "data directory is not readable", d)


def can_create(d: str) -> bool:
    """Whether ``os.makedirs(d)`` can succeed: the nearest existing ancestor is a writable directory."""
    parent = os.path.dirname(d)
    while parent and not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    return bool(parent) and os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK)


def read_dir(state: DirState, disk: Disk, channel: LogDirFailureChannel, skip: str | None = None) -> None:
    """The checkpoints, the high watermarks and the checked partition listing of one data dir (reads only, the
    files through ``disk``).  ``skip``: an empty marker directory that the writes remove before Kafka lists the dir."""
    d = state.path
    state.recovery_points = _read_checkpoint(state, disk, checkpoint.RECOVERY_POINT_CHECKPOINT, channel)
    state.log_starts = _read_checkpoint(state, disk, checkpoint.LOG_START_OFFSET_CHECKPOINT, channel)
    state.high_watermarks = _read_high_watermarks(disk, d)
    partitions: list[tuple[str, TopicPartition, DirKind]] = []
    for entry in sorted(os.scandir(d), key=lambda e: e.name):
        if not entry.is_dir() or entry.name in (names.REMOTE_LOG_INDEX_CACHE, skip):
            continue
        try:
            tp, kind = names.parse_partition_dir(entry.name)
        except InvalidPartitionDirError as e:
            raise StartupFailedError(entry.path, "KafkaException", str(e)) from e
        if tp.topic == names.CLUSTER_METADATA_TOPIC:
            continue
        if entry.is_symlink():
            raise StartupFailedError(entry.path, "KafkaException",
                                     "partition directory is a symbolic link; mploader does not follow links out "
                                     "of a data dir: move the directory itself into the data dir")
        partitions.append((entry.path, tp, kind))
    state.partitions = partitions
    state.listed = True


def _read_high_watermarks(disk: Disk, d: str) -> dict[TopicPartition, int] | None:
    """``replication-offset-checkpoint`` (the ReplicaManager's, not read by loadLogs): for the impact report."""
    path = os.path.join(d, checkpoint.REPLICATION_OFFSET_CHECKPOINT)
    if not disk.exists(path):
        return None
    try:
        return checkpoint.parse_offset_checkpoint(disk.read(path), path)
    except (OSError, ValueError) as e:
        log.warning("%s: %s; the high watermarks of this data dir are unknown", path, e)
        return None


def create_and_lock(state: DirState, disk: Disk, channel: LogDirFailureChannel) -> None:
    """createAndValidateLogDirs and lockLogDirs: a missing data dir is created, a missing ``.lock`` too."""
    d = state.path
    if d in channel:
        return
    try:
        if state.missing:
            disk.make_data_dir(d)
            check_dir(d)
        if not state.locked:
            state.lock_fd = disk.lock(os.path.join(d, LOCK_FILE))
            state.locked = True
    except OSError as e:  # offline: nothing of it loads
        channel.add(d, f"{type(e).__name__}: {e}")
        state.partitions = []


def prepare_dir(state: DirState, disk: Disk, channel: LogDirFailureChannel) -> None:
    """The empty checkpoint files (constructing Kafka's checkpoint objects creates them), an empty marker
    directory (Kafka deletes the marker before any partition loads, KAFKA-10471; a marker file is deleted when
    the load is done: :func:`commit_clean_dirs`), and the listing where the preflight did not list."""
    d = state.path
    if d in channel:
        return
    try:
        for name in CREATED_CHECKPOINTS:
            p = os.path.join(d, name)
            if not disk.exists(p) and not os.path.lexists(p):
                disk.write(p, b"")
        marker = os.path.join(d, checkpoint.CLEAN_SHUTDOWN_MARKER)
        if state.clean:
            if os.path.isdir(marker) and not os.path.islink(marker):
                disk.remove_empty_dir(marker)  # Files.deleteIfExists: a non-empty directory is an IOException
            else:
                state.marker_to_delete = marker
        if not state.listed or channel.foreseen(d) is not None:
            read_dir(state, disk, channel)
    except OSError as e:
        channel.add(d, f"{type(e).__name__}: {e}")
        state.partitions = []


def flush(states: list[DirState], disk: Disk, channel: LogDirFailureChannel) -> None:
    """The producer snapshots written without an fsync each, made durable (docs/architecture.md, "Durability").
    A sync that fails (an error of the environment: EIO, ENOSPC) leaves what was written maybe not durable: every
    dir still loading goes offline, its marker kept, so that a load after the fix does it all again."""
    try:
        disk.flush()
    except OSError as e:
        failure = environment_failure(e)
        for s in states:
            if s.path not in channel:
                channel.add(s.path, f"{type(failure).__name__}: {failure}", keep_marker=True)
        log.error("the load's writes could not be made durable: %s; every data dir goes offline", failure)


def commit_clean_dirs(states: list[DirState], cfg: LoaderConfig, disk: Disk, channel: LogDirFailureChannel) -> None:
    """Delete the clean-shutdown markers, last, then grow the active indexes of those dirs' partitions.

    Kafka deletes a dir's marker when it reads it, before loading (KAFKA-10471), so a broker killed during a
    clean start recovers on its next start what it had no need to.  mploader keeps the marker until every
    partition is loaded and flushed: a load killed before this point leaves it, and the rerun loads the dir as
    clean again, as the uninterrupted load did (docs/crash-safety.md).  The deletion commits the load: a
    later start is an unclean one, which recovers every active segment (rebuilt, then grown); so the growth of
    the active indexes (``AbstractIndex.resize``, which Kafka makes during the partition's load and which
    changes the log end offset a clean reload reads through a damaged index) comes after it, and so does the
    removal of the partitions' journals (:mod:`mploader.recovery.journal`).  A failed start-up commits too
    (Kafka's outcome), and so does a dir taken offline by what its bytes say; one taken offline by an error of the
    environment does not (:meth:`LogDirFailureChannel.keeps_marker`): the load after the fix is a clean load
    again, whose outcome is the one an undisturbed load would have had (docs/loading.md §18).  A marker that
    cannot be deleted takes its dir offline, as in Kafka."""
    for s in states:
        if s.marker_to_delete is None or channel.keeps_marker(s.path):
            continue
        try:
            disk.delete(s.marker_to_delete)
            for lg in s.loaded:
                if lg.journal:
                    journal.remove(disk, lg.dir)
                if lg.kind is not DirKind.DELETE:
                    active = Segment(lg.dir, lg.segments[-1].base_offset)
                    resize_indexes(disk, active, cfg.for_topic(lg.topic).max_index_size)
        except OSError as e:
            channel.add(s.path, f"{type(e).__name__}: {e}")
        s.marker_to_delete = None


def remove_attempt_records(states: list[DirState], disk: Disk, channel: LogDirFailureChannel) -> None:
    """Delete the attempt records the Spark tasks of this load wrote or kept (:mod:`mploader.recovery.attempts`):
    the job's outcomes are in, no retry of its tasks follows.  Only where a partition has one
    (``LoadedLog.attempt_record``), so that a load costs no look-up in every partition directory; not in a dir gone
    offline.  One that cannot be deleted stays (a WARN line): the next load meets it as stale and deletes it."""
    for s in states:
        if s.path in channel:
            continue
        for lg in s.loaded:
            if not lg.attempt_record:
                continue
            try:
                attempts.remove(disk, lg.dir)
                lg.attempt_record = False
            except OSError as e:
                log.warning("%s: %s could not be deleted (%s: %s); the next load deletes it", lg.dir,
                            attempts.ATTEMPT, type(e).__name__, e)


def note_written(error: StartupFailedError, disk: Disk) -> None:
    """Say on a start-up failure found mid-load which directories the load had changed before it: as
    ``error.written_dirs`` (sorted) and in a note (``add_note``) for people."""
    written = disk.changed_dirs()
    error.written_dirs = written
    if written:
        shown = ", ".join(written[:10]) + (f" and {len(written) - 10} more" if len(written) > 10 else "")
        error.add_note(f"found during recovery, after the load had changed files in {len(written)} "
                       f"director{'y' if len(written) == 1 else 'ies'}: {shown} (what was written is what Kafka "
                       f"itself writes before it fails; a load after the fix recovers the rest)")
    else:
        error.add_note("found during recovery, before the load had changed any file")


def written_dirs(error: BaseException) -> list[str] | None:
    """The directories a failed load had changed before the failure (None: not known, e.g. a dry run, or a
    failure found before the first write, which changed nothing)."""
    if isinstance(error, StartupFailedError) and error.written_dirs is not None:
        return list(error.written_dirs)
    return None


def _read_checkpoint(state: DirState, disk: Disk, name: str, channel: LogDirFailureChannel
                     ) -> dict[TopicPartition, int]:
    path = os.path.join(state.path, name)
    try:
        return checkpoint.parse_offset_checkpoint(disk.read(path), path)
    except FileNotFoundError:  # none yet (Kafka's checkpoint object creates it empty)
        return {}
    except MalformedCheckpointError as e:
        log.warning("%s; using an empty map and reporting %s offline", e, state.path)
        channel.add_after_load(state.path, str(e))
        return {}
    except CheckpointNumberFormatError as e:
        log.warning("%s; using an empty map", e)
        return {}
    except OSError as e:
        log.warning("could not read %s: %s; using an empty map and reporting %s offline", path, e, state.path)
        channel.add_after_load(state.path, f"{path}: {e}")
        return {}


def write_recovery_points(states: list[DirState], channel: LogDirFailureChannel) -> None:
    """persist_recovery_points: the entries of the partitions loaded since the last write, written now in the
    dirs still online; the writers end."""
    for s in states:
        if s.resume is not None:
            s.resume.close(write=s.path not in channel)
