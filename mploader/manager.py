"""All data dirs: Kafka's LogManager start-up (docs/loading.md §2-§4) around the per-partition loader.

Per data dir, in the order given: the clean-shutdown marker is detected and
deleted before anything loads, the two checkpoints are read (with Kafka's
three error classes), partition directories are listed and parsed (a bad
name fails the whole start-up, as in Kafka), and partitions are loaded by
``num_recovery_threads_per_data_dir`` threads.  An ``OSError`` inside a
partition takes only that partition out and the dir offline once all its
partitions finished; a :class:`StartupFailedError` fails the whole load.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol

from mploader.config import LoaderConfig
from mploader.disk import Disk, environment, open_disk
from mploader.engine.base import Engine, EngineFactory
from mploader.engine.plan import DirPlan, PlannedScans, file_size
from mploader.engine.select import AutoPlans, auto_plans, make_engine, usable_cpus, workers_per_dir
from mploader.errors import (
    CheckpointNumberFormatError,
    InvalidPartitionDirError,
    MalformedCheckpointError,
    StartupFailedError,
    environment_failure,
    of_the_environment,
)
from mploader.format import checkpoint, names
from mploader.format.names import DirKind, TopicPartition
from mploader.metrics import (
    BYTES_RECOVERED,
    RECOVERY_ETA_SECONDS,
    REMAINING_LOGS_TO_RECOVER,
    REMAINING_SEGMENTS_TO_RECOVER,
    TOTAL_BYTES_TO_RECOVER,
    MetricsRegistry,
    Tags,
)
from mploader.partition_pool import ProcessPartitions, auto_workers, surely_workers
from mploader.progress import DirProgress, Progress, ProgressTracker
from mploader.recovery import journal, preflight as partition_preflight
from mploader.recovery.job import PartitionJob, load_partition
from mploader.recovery.loader import PartitionContext
from mploader.recovery.resume import Recovered, RecoveryPointWriter, forget as forget_recovered, read_recovered
from mploader.recovery.segment import Segment, resize_indexes
from mploader.result import Impact, LoadedLog, LoadResult, LoadStats
from mploader.scan.plan import CleanScans

log = logging.getLogger(__name__)

# per job of a PartitionRunner: what load_partition returned (the log and the bytes it scanned) or what it raised
PartitionOutcome = tuple[LoadedLog, int] | BaseException


class PartitionRunner(Protocol):
    """Loads partition jobs elsewhere (Spark executors: mploader.spark.SparkPartitions; worker processes:
    mploader.partition_pool.ProcessPartitions) and returns each job's outcome, in the jobs' order.  A runner that
    takes a keyword ``loaded`` is told there of each job as it completes (its index, its outcome), in the caller's
    thread: the load counts it as loaded then (progress, --resumable's recovery points) rather than when all are
    done.  One that takes a keyword ``segments`` is told there of a job's segments left to recover as its load goes
    (its index, the number of the worker loading it, the count: Kafka's remainingSegmentsToRecover of that worker,
    as of a recovery thread).  A runner that knows which directories its loads changed says so in ``changed_dirs``
    (a failure's note names them); one that counts its loads' scans and file changes, in ``work`` (a LoadStats: its
    ``segments_scanned``, ``scan_seconds``, ``draft_seconds``, ``write_seconds`` and ``worker_start`` go into the
    load's stats)."""

    def __call__(self, jobs: list[PartitionJob], cfg: LoaderConfig, /) -> list[PartitionOutcome]: ...

LOCK_FILE = ".lock"  # LogManager.LockFileName


@dataclass(slots=True)
class _DirState:
    path: str
    clean: bool = False
    recovery_points: dict[TopicPartition, int] = field(default_factory=dict)
    log_starts: dict[TopicPartition, int] = field(default_factory=dict)
    offline_reason: str | None = None
    partitions: list[tuple[str, TopicPartition, DirKind]] = field(default_factory=list)
    lock_fd: int | None = None
    locked: bool = False
    # what the preflight (read-only) found, for the writes that follow it (see _inspect_dir)
    missing: bool = False  # the data dir does not exist: created by the writes
    listed: bool = False  # the partition listing is done (and checked)
    predicted_offline: str | None = None  # a write the preflight foresees failing (an IOException: offline)
    high_watermarks: dict[TopicPartition, int] | None = None  # replication-offset-checkpoint (None: unknown)
    marker_to_delete: str | None = None  # the clean-shutdown marker, deleted when the load is done (_commit_clean_dirs)
    loaded: list[LoadedLog] = field(default_factory=list)  # the partitions loaded so far
    resume: RecoveryPointWriter | None = None  # persist_recovery_points: the dir's recovery points, advanced
    recovered: dict[TopicPartition, Recovered] = field(default_factory=dict)  # what a killed --resumable load left
    keep_marker: bool = False  # an error of the environment took the dir offline: the marker stays (_commit_clean_dirs)
    clean_scans: CleanScans | None = None  # what a clean load of it may scan, as the preflight sized it (None: unsized)
    # an unclean dir's partitions: their .log files' bytes and number, as the preflight sized them (PartitionJob.logs)
    sized_logs: dict[str, tuple[int, int]] = field(default_factory=dict)


def load_logs(
    data_dirs: Sequence[str | os.PathLike[str]],
    config: LoaderConfig | None = None,
    now_ms: int | None = None,
    *,
    metrics: MetricsRegistry | None = None,
    progress: Progress | None = None,
    engine: EngineFactory | None = None,
    partitions: PartitionRunner | None = None,
) -> LoadResult:
    """Load every partition of ``data_dirs`` as a Kafka 4.x broker does at start-up.

    Returns a :class:`LoadResult`; raises :class:`StartupFailedError` where Kafka's
    broker would fail to start.  ``now_ms`` is the wall clock used for producer
    expiry (default: the real clock).  ``engine`` makes the engine Phase 1 runs on (default: the
    config's choice, :func:`mploader.engine.select.make_engine`; e.g. :class:`mploader.spark.SparkEngine`).
    ``partitions`` loads the partitions elsewhere, each a :class:`~mploader.recovery.job.PartitionJob` run
    with :func:`~mploader.recovery.job.load_partition` (e.g. on Spark executors, :mod:`mploader.spark.phase2`):
    the data dirs' start-up (preflight, locks, marker, checkpoints) and the result stay here.
    """
    cfg = config or LoaderConfig()
    return _load_logs(data_dirs, cfg, now_ms, metrics, progress, open_disk(cfg.dry_run), engine, partitions)


def predict_recovery(data_dirs: Sequence[str | os.PathLike[str]], config: LoaderConfig | None = None,
                     now_ms: int | None = None, engine: EngineFactory | None = None) -> LoadResult:
    """What a load would do now: a dry run (``config.dry_run`` is implied) that does not look at the data
    dirs' locks, so that ``mploader verify`` can tell it for the dirs of a running broker too (where the files
    may change under it: the prediction is then of the moment it read them)."""
    cfg = dataclasses.replace(config or LoaderConfig(), dry_run=True)
    return _load_logs(data_dirs, cfg, now_ms, None, None, open_disk(True, check_lock=False), engine,
                      check_writes=False)


def _load_logs(data_dirs: Sequence[str | os.PathLike[str]], cfg: LoaderConfig, now_ms: int | None,
               metrics: MetricsRegistry | None, progress: Progress | None, disk: Disk,
               engine: EngineFactory | None = None, partitions: PartitionRunner | None = None,
               check_writes: bool = True) -> LoadResult:
    now = int(time.time() * 1000) if now_ms is None else now_ms
    # the figures (bytes to recover, rate, ETA) are kept only for someone who reads them
    gauges = _ProgressGauges(metrics) if metrics is not None else None
    sinks = [sink for sink in (progress, gauges) if sink is not None]
    tracker = ProgressTracker(sinks) if sinks else None
    metrics = metrics or MetricsRegistry()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    stats = LoadStats()
    dirs = _validate_dirs(data_dirs)
    offline: dict[str, str] = {}
    states: list[_DirState] = [_DirState(d) for d in dirs]
    try:
        # reads only: a start-up failure it finds changes no byte.  Partitions loaded elsewhere (``partitions``) are
        # changed by another process's disk: this one keeps no listing of theirs, which its changes would not keep true
        _preflight(states, cfg, disk, offline, keep_listings=partitions is None, check_writes=check_writes)
        stats.seconds["preflight"] = time.perf_counter() - t0
        log.debug("preflight of %d data dirs, %d partitions: nothing that fails start-up before recovery (%.1f ms)",
                  len(states), sum(len(s.partitions) for s in states), stats.seconds["preflight"] * 1000)
        try:
            for state in states:  # LogManager's constructor: create, lock (createAndValidateLogDirs, lockLogDirs)
                _create_and_lock(state, disk, offline)
            for state in states:  # the checkpoint files, the marker; the listing if the preflight could not
                _prepare_dir(state, disk, offline)
            result = _load_prepared(states, dirs, cfg, disk, now, metrics, tracker, offline, stats, engine,
                                    partitions)
        except StartupFailedError as e:
            _commit_clean_dirs(states, cfg, disk, offline)  # a failed start leaves what Kafka's leaves: no marker
            if not cfg.dry_run:
                _note_written(e, disk)
            raise
        t_flush = time.perf_counter()
        _flush(states, disk, offline)
        _commit_clean_dirs(states, cfg, disk, offline)
        for s in states:  # what a killed --resumable load recorded is of no more use (recovery.resume)
            if s.path not in offline:
                forget_recovered(disk, s.path)
        stats.seconds["flush"] = time.perf_counter() - t_flush
        stats.seconds["total"] = time.perf_counter() - t0
        # this process's CPU, all its threads, none of its workers': the serial part no worker count removes
        stats.seconds["cpu"] = time.process_time() - cpu0
        stats.write_seconds += disk.change_seconds  # the parent's own, beside a runner's workers'
        return result
    finally:
        for s in states:
            if s.lock_fd is not None:
                os.close(s.lock_fd)  # releases the lock


def _load_prepared(states: list[_DirState], dirs: list[str], cfg: LoaderConfig, disk: Disk, now: int,
                   metrics: MetricsRegistry, progress: ProgressTracker | None, offline: dict[str, str],
                   stats: LoadStats, factory: EngineFactory | None = None,
                   runner: PartitionRunner | None = None) -> LoadResult:
    live = [s for s in states if s.offline_reason is None or s.partitions]
    if not any(d not in offline for d in dirs):  # LogManager.createAndValidateLogDirs: Exit.halt(1)
        reasons = "; ".join(f"{d}: {offline[d]}" for d in dirs)
        raise StartupFailedError(None, "KafkaException (Exit.halt)",
                                 f"no usable data directory among those given ({reasons})")
    for s in states:  # a dir with nothing to load whose checkpoint could not be read is still reported offline
        if s.offline_reason is not None and not s.partitions:
            offline.setdefault(s.path, s.offline_reason)
    if cfg.persist_recovery_points:  # a dir whose checkpoint could not be read is left to Kafka (resume.py)
        for s in live:
            if s.offline_reason is None and s.path not in offline:
                s.resume = RecoveryPointWriter(disk, s.path, s.recovery_points)
                s.recovered = read_recovered(disk, s.path)
    try:
        planned: dict[str, PlannedScans] | None = None
        auto = None
        plans = [_dir_plan(s, cfg, disk) for s in live]
        if runner is None and factory is None:
            n, auto = _auto_partition_workers(cfg, live, plans, progress is None)
            if n:
                runner, planned = ProcessPartitions(n, cfg.worker_start), auto.planned
                for s in live:  # the workers change them: listings kept by this disk would no longer be true
                    for path, _, _ in s.partitions:
                        disk.release(path)
        if runner is not None:
            loaded = _run_elsewhere(live, cfg, now, runner, stats, offline, disk, metrics, progress, planned)
        else:
            engine = (make_engine(cfg, plans, stats, metrics, progress, auto=auto)
                      if factory is None else factory(stats, progress))
            stats.workers_per_dir, stats.worker_start = engine.workers_per_dir, engine.start
            interrupted = False
            try:
                loaded = _load_all(live, cfg, disk, now, metrics, engine, stats, offline, progress)
            except KeyboardInterrupt:
                interrupted = True
                raise
            finally:
                engine.close(kill=interrupted)
    finally:  # also after a failure or Ctrl-C: the partitions that finished are not recovered again
        _write_recovery_points(live, offline)
    result = LoadResult({}, {}, [], [], offline, {s.path: s.clean for s in states}, stats)
    for lg in loaded:
        if lg.kind is DirKind.DELETE:
            result.logs_to_delete.append(lg)
        elif lg.kind is DirKind.STRAY:
            result.stray_logs.append(lg)
        else:
            target = result.future_logs if lg.kind is DirKind.FUTURE else result.logs
            if lg.topic_partition in target:
                raise StartupFailedError(lg.dir, "IllegalStateException",
                                         f"duplicate log directories for {lg.topic_partition}: "
                                         f"{target[lg.topic_partition].dir} and {lg.dir}")
            target[lg.topic_partition] = lg
    stats.partitions = len(loaded)
    stats.segments_opened = sum(len(lg.segments) for lg in loaded)
    stats.segments_recovered = sum(len(lg.recovered_segments) for lg in loaded)
    stats.bytes_truncated = sum(lg.truncated_bytes for lg in loaded)
    stats.files_deleted = sum(len(lg.deleted_files) for lg in loaded)
    result.warnings.extend(_impact_warnings(result))
    return result


def _auto_partition_workers(cfg: LoaderConfig, live: list[_DirState], plans: list[DirPlan], unwatched: bool
                            ) -> tuple[int, AutoPlans]:
    """``--workers auto``: how many processes load whole partitions (0: the scanning engine's load), as
    :func:`mploader.partition_pool.auto_workers` weighs it, and the plans "auto" made (``auto_plans``); never under a
    read budget (the scanning engine keeps it) nor with an explicit count or "adaptive".  ``unwatched``: no one
    reads the load's progress, which would show the planned bytes: the choice may be made before the whole plan
    (``partition_pool.surely_workers``), the plans then left to the workers."""
    if cfg.num_segment_loading_threads_per_data_dir != "auto" or cfg.max_read_bytes_per_sec is not None:
        return 0, auto_plans(cfg, plans)
    partitions = sum(len(s.partitions) for s in live)
    done: dict[str, PlannedScans] = {}
    if unwatched:
        n, done = surely_workers(plans, partitions, start=cfg.worker_start)
        if n:
            return n, AutoPlans()
    auto = auto_plans(cfg, plans, done)
    engine_workers = workers_per_dir(cfg, len(live), auto.scan_bytes, auto.scan_tasks, auto.scanning)
    return auto_workers(auto, partitions, engine_workers, start=cfg.worker_start), auto


def _impact_warnings(result: LoadResult) -> list[str]:
    """A WARNING for each partition whose recovery removed records below its high watermark: acknowledged
    data lost (issue 13); and for each whose log ended below it before the load already.  In the order of the
    JSON document's logs."""
    out = []
    for lg in sorted(result.all_logs(), key=lambda lg: (lg.topic, lg.partition, lg.dir)):
        i = lg.impact
        if i.lost_below_high_watermark:
            msg = (f"{lg.dir}: recovery removed acknowledged records of {lg.topic_partition}: the log end offset "
                   f"falls from {i.log_end_offset_before} to {i.log_end_offset_after}, below the high watermark "
                   f"{i.high_watermark} ({len(i.acknowledged_removed)} acknowledged offsets lost; "
                   f"{i.records_removed} offsets, {i.bytes_removed} bytes removed)")
            if i.missing_below_high_watermark:
                msg += f"; {_missing_text(i)}"
        elif i.missing_below_high_watermark:
            msg = f"{lg.dir}: {_missing_text(i)}"
        else:
            continue
        log.warning("%s", msg)
        out.append(msg)
    return out


def _missing_text(i: Impact) -> str:
    missing = i.missing_below_high_watermark
    return (f"{len(missing)} acknowledged offsets ({missing[0]}..{missing[-1]}, below the high watermark "
            f"{i.high_watermark}) were not on this disk before the load, which removed none of them; the other "
            f"replicas may hold them")


def _validate_dirs(data_dirs: Sequence[str | os.PathLike[str]]) -> list[str]:
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


# --------------------------------------------------------------------------------------------
# Before the first write: the preflight (docs/architecture.md, "Fail before the first write")


def _preflight(states: list[_DirState], cfg: LoaderConfig, disk: Disk, offline: dict[str, str],
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
            _inspect_dir(s, disk, cfg.dry_run)
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


def _refuse(state: _DirState, error: OSError, offline: dict[str, str]) -> None:
    """The data dir goes offline before the load writes anything in it (and nothing will be)."""
    offline[state.path] = state.offline_reason = f"{type(error).__name__}: {error}"
    state.partitions = []
    log.error("%s: %s; the data dir goes offline and nothing in it is changed", state.path, error)


def _halt_without_usable_dirs(states: list[_DirState], offline: dict[str, str]) -> None:
    """LogManager.createAndValidateLogDirs' Exit.halt(1), foreseen: no data dir left to load."""
    if all(s.path in offline or s.predicted_offline is not None for s in states):
        reasons = "; ".join(f"{s.path}: {offline.get(s.path) or s.predicted_offline}" for s in states)
        raise StartupFailedError(None, "KafkaException (Exit.halt)",
                                 f"no usable data directory among those given ({reasons})")


def _inspect_dir(state: _DirState, disk: Disk, dry_run: bool) -> None:
    """The read-only half of :func:`_prepare_dir`: LogManager's checks of one data dir, its lock when the
    ``.lock`` file exists, and, unless a write to come is foreseen to fail, the checkpoints and the listing."""
    d = state.path
    if not os.path.exists(d):
        state.missing = True  # created by _create_and_lock (a new, empty data dir)
        if dry_run:
            state.predicted_offline = "FileNotFoundError: data directory does not exist (dry run: not created)"
        elif not _can_create(d):
            state.predicted_offline = f"PermissionError: cannot create the data directory {d}"
        return
    _check_dir(d)
    if (problem := environment.data_dir_problem(d)) is not None:  # before the lock and checkpoints are opened
        raise problem
    lock_path = os.path.join(d, LOCK_FILE)
    writes = False
    if os.path.lexists(lock_path):
        state.lock_fd = disk.lock(lock_path)  # LogManager.lockLogDirs; the file is there: nothing is written
        state.locked = True
    else:
        writes = True
    writes = writes or any(not os.path.lexists(os.path.join(d, name)) for name in _CREATED_CHECKPOINTS)
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
        _read_dir(state, skip=checkpoint.CLEAN_SHUTDOWN_MARKER if marker_dir else None)
    except OSError as e:  # the listing: offline, after the writes Kafka makes first (_prepare_dir lists again)
        state.predicted_offline = f"{type(e).__name__}: {e}"


_CREATED_CHECKPOINTS = (checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT)


def _check_dir(d: str) -> None:
    if not os.path.isdir(d):
        raise NotADirectoryError(20, "data directory is not a directory", d)
    if not os.access(d, os.R_OK | os.X_OK):
        raise PermissionError(13, "data directory is not readable", d)


def _can_create(d: str) -> bool:
    """Whether ``os.makedirs(d)`` can succeed: the nearest existing ancestor is a writable directory."""
    parent = os.path.dirname(d)
    while parent and not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    return bool(parent) and os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK)


def _read_dir(state: _DirState, skip: str | None = None) -> None:
    """The checkpoints, the high watermarks and the checked partition listing of one data dir (reads only).
    ``skip``: an empty marker directory that the writes remove before Kafka lists the dir."""
    d = state.path
    state.recovery_points = _read_checkpoint(state, checkpoint.RECOVERY_POINT_CHECKPOINT)
    state.log_starts = _read_checkpoint(state, checkpoint.LOG_START_OFFSET_CHECKPOINT)
    state.high_watermarks = _read_high_watermarks(d)
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


def _read_high_watermarks(d: str) -> dict[TopicPartition, int] | None:
    """``replication-offset-checkpoint`` (the ReplicaManager's, not read by loadLogs): for the impact report."""
    path = os.path.join(d, checkpoint.REPLICATION_OFFSET_CHECKPOINT)
    if not os.path.isfile(path):
        return None
    try:
        return checkpoint.read_offset_checkpoint(path)
    except (OSError, ValueError) as e:
        log.warning("%s: %s; the high watermarks of this data dir are unknown", path, e)
        return None


# --------------------------------------------------------------------------------------------
# The writes of LogManager's start-up (after the preflight)


def _create_and_lock(state: _DirState, disk: Disk, offline: dict[str, str]) -> None:
    """createAndValidateLogDirs and lockLogDirs: a missing data dir is created, a missing ``.lock`` too."""
    d = state.path
    if d in offline:
        return
    try:
        if state.missing:
            disk.make_data_dir(d)
            _check_dir(d)
        if not state.locked:
            state.lock_fd = disk.lock(os.path.join(d, LOCK_FILE))
            state.locked = True
    except OSError as e:
        offline[d] = state.offline_reason = f"{type(e).__name__}: {e}"


def _prepare_dir(state: _DirState, disk: Disk, offline: dict[str, str]) -> None:
    """The empty checkpoint files (constructing Kafka's checkpoint objects creates them), an empty marker
    directory (Kafka deletes the marker before any partition loads, KAFKA-10471; a marker file is deleted when
    the load is done: :func:`_commit_clean_dirs`), and the listing where the preflight did not list."""
    d = state.path
    if d in offline:
        return
    try:
        for name in _CREATED_CHECKPOINTS:
            p = os.path.join(d, name)
            if not disk.exists(p) and not os.path.lexists(p):
                disk.write(p, b"")
        marker = os.path.join(d, checkpoint.CLEAN_SHUTDOWN_MARKER)
        if state.clean:
            if os.path.isdir(marker) and not os.path.islink(marker):
                disk.remove_empty_dir(marker)  # Files.deleteIfExists: a non-empty directory is an IOException
            else:
                state.marker_to_delete = marker
        if not state.listed or state.predicted_offline is not None:
            _read_dir(state)
    except OSError as e:
        offline[d] = state.offline_reason = f"{type(e).__name__}: {e}"
        state.partitions = []


def _flush(states: list[_DirState], disk: Disk, offline: dict[str, str]) -> None:
    """The producer snapshots written without an fsync each, made durable (docs/architecture.md, "Durability").
    A sync that fails (an error of the environment: EIO, ENOSPC) leaves what was written maybe not durable: every
    dir still loading goes offline, its marker kept, so that a load after the fix does it all again."""
    try:
        disk.flush()
    except OSError as e:
        failure = environment_failure(e)
        for s in states:
            if s.path not in offline:
                offline[s.path] = f"{type(failure).__name__}: {failure}"
                s.keep_marker = True
        log.error("the load's writes could not be made durable: %s; every data dir goes offline", failure)


def _commit_clean_dirs(states: list[_DirState], cfg: LoaderConfig, disk: Disk, offline: dict[str, str]) -> None:
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
    environment does not (``keep_marker``): the load after the fix is a clean load again, whose outcome is the one
    an undisturbed load would have had (docs/loading.md §18).  A marker that cannot be deleted takes its dir
    offline, as in Kafka."""
    for s in states:
        if s.marker_to_delete is None or s.keep_marker:
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
            offline.setdefault(s.path, f"{type(e).__name__}: {e}")
        s.marker_to_delete = None


def _note_written(error: StartupFailedError, disk: Disk) -> None:
    """Say on a start-up failure found mid-load which directories the load had changed before it: as
    ``error.written_dirs`` (sorted) and in a note (``add_note``) for people."""
    written = disk.changed_dirs()
    vars(error)["written_dirs"] = written
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
    value = vars(error).get("written_dirs")
    return list(value) if isinstance(value, list) else None


def _read_checkpoint(state: _DirState, name: str) -> dict[TopicPartition, int]:
    path = os.path.join(state.path, name)
    try:
        return checkpoint.read_offset_checkpoint(path) if os.path.exists(path) else {}
    except MalformedCheckpointError as e:
        log.warning("%s; using an empty map and reporting %s offline", e, state.path)
        state.offline_reason = state.offline_reason or str(e)
        return {}
    except CheckpointNumberFormatError as e:
        log.warning("%s; using an empty map", e)
        return {}
    except OSError as e:
        log.warning("could not read %s: %s; using an empty map and reporting %s offline", path, e, state.path)
        state.offline_reason = state.offline_reason or f"{path}: {e}"
        return {}


def _dir_plan(s: _DirState, cfg: LoaderConfig, disk: Disk) -> DirPlan:
    return DirPlan(s.path, s.clean, s.partitions, s.recovery_points,
                   lambda topic: cfg.for_topic(topic).index_interval_bytes,
                   lambda topic: cfg.for_topic(topic).max_index_size, scan_all=cfg.index_check == "full",
                   clean_scans=s.clean_scans, disk=disk)


def _load_all(states: list[_DirState], cfg: LoaderConfig, disk: Disk, now: int, metrics: MetricsRegistry,
              engine: Engine, stats: LoadStats, offline: dict[str, str],
              progress: ProgressTracker | None) -> list[LoadedLog]:
    loaded: list[LoadedLog] = []
    lock = threading.Lock()
    pools: list[tuple[_DirState, ThreadPoolExecutor, list[Future[LoadedLog | None]]]] = []
    remaining: dict[str, int] = {}
    registered: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    for s in states:
        tags = metrics.tags(dir=s.path)
        remaining[s.path] = len(s.partitions)
        metrics.register(REMAINING_LOGS_TO_RECOVER, tags, len(s.partitions))
        registered.append((REMAINING_LOGS_TO_RECOVER, tags))
        for i in range(cfg.num_recovery_threads_per_data_dir):
            t = metrics.tags(dir=s.path, threadNum=i)
            metrics.register(REMAINING_SEGMENTS_TO_RECOVER, t, None)
            registered.append((REMAINING_SEGMENTS_TO_RECOVER, t))
    if progress is not None:
        progress.start({s.path: len(s.partitions) for s in states})
    _log_loading(states)
    t_prefetch = time.perf_counter()
    order = engine.prefetch([_dir_plan(s, cfg, disk) for s in states])
    for s in states:  # Phase 2 takes partitions in the order Phase 1 was started on them
        s.partitions = order.get(s.path, s.partitions)
    stats.seconds["plan"] = time.perf_counter() - t_prefetch
    if progress is not None:
        for s in states:
            _report_plan(progress, engine.planned.get(s.path), s.path, disk)
    cancel = threading.Event()
    try:
        try:
            for s in states:
                prefix = f"log-recovery-{s.path}"
                pool = ThreadPoolExecutor(max_workers=cfg.num_recovery_threads_per_data_dir,
                                          thread_name_prefix=prefix)
                futures: list[Future[LoadedLog | None]] = []
                pools.append((s, pool, futures))  # before its first thread starts: an interrupt from here on stops it
                for path, tp, kind in s.partitions:
                    futures.append(pool.submit(_load_one, s, path, tp, kind, cfg, disk, now, metrics, engine, lock,
                                               remaining, progress, t_prefetch, cancel))
            wait([f for _, _, futures in pools for f in futures])
        except KeyboardInterrupt:  # Ctrl-C, also while the partitions are being submitted (a thread may have started):
            # loading threads stop at their next segment, queued partitions never start
            cancel.set()
            for _, pool, _ in pools:
                pool.shutdown(wait=False, cancel_futures=True)
            engine.close(kill=True)  # the workers go now: a thread waiting for one of their scans stops at once
            for _, pool, _ in pools:  # the caller releases the dirs' locks next: no loading thread may still write
                pool.shutdown(wait=True)
            raise
        first_fatal: BaseException | None = None
        for s, pool, futures in pools:
            for (path, _, _), fut in zip(s.partitions, futures):
                error = fut.exception()
                if error is not None:  # Kafka waits for every job, then rethrows
                    failure = _failed(s, path, error, offline)  # each: a later OSError still takes its dir offline
                    first_fatal = first_fatal or failure
                elif (lg := fut.result()) is not None:
                    loaded.append(lg)
            pool.shutdown()
            if s.offline_reason is not None:
                offline.setdefault(s.path, s.offline_reason)
        if first_fatal is not None:
            raise first_fatal
    finally:
        for name, tags in registered:
            metrics.remove(name, tags)
        if progress is not None:
            progress.close()
    return loaded


def _write_recovery_points(states: list[_DirState], offline: dict[str, str]) -> None:
    """persist_recovery_points: the entries of the partitions loaded since the last write, written now in the
    dirs still online; the writers end."""
    for s in states:
        if s.resume is not None:
            s.resume.close(write=s.path not in offline)


def _report_plan(progress: ProgressTracker, planned: PlannedScans | None, data_dir: str, disk: Disk) -> None:
    """Tell the progress tracker what the load planned to scan in ``data_dir``, per partition directory
    (nothing where it planned nothing: a clean dir loaded inline is counted as it goes)."""
    if planned is None:
        progress.planned(data_dir, None, None)
        return
    per_partition = {part[0]: sum(file_size(t.path, disk) for t in tasks) for part, tasks in planned}
    progress.planned(data_dir, per_partition, sum(len(tasks) for _, tasks in planned))


class _ProgressGauges(Progress):
    """mploader's own gauges, per data dir, from the progress figures: ``totalBytesToRecover`` (where the dir
    was planned), ``bytesRecovered`` and ``recoveryEtaSeconds`` (whole seconds, rounded up; once known).
    Registered at the first figures of a dir, removed when the load ends, like Kafka's."""

    def __init__(self, metrics: MetricsRegistry) -> None:
        self.metrics = metrics
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}

    def update(self, figures: DirProgress) -> None:  # serialised by the tracker
        tags = self.metrics.tags(dir=figures.data_dir)
        eta = figures.eta_seconds
        for name, value in ((TOTAL_BYTES_TO_RECOVER, figures.bytes_total), (BYTES_RECOVERED, figures.bytes_done),
                            (RECOVERY_ETA_SECONDS, None if eta is None else math.ceil(eta))):
            key = (name, tags)
            if value is None or self._values.get(key) == value:
                continue
            if key in self._values:
                self.metrics.set(name, tags, value)
            else:
                self.metrics.register(name, tags, value)
            self._values[key] = value

    def close(self) -> None:
        for name, tags in self._values:
            self.metrics.remove(name, tags)
        self._values.clear()


def _job(s: _DirState, path: str, tp: TopicPartition, kind: DirKind, now: int) -> PartitionJob:
    return PartitionJob(s.path, path, tp, kind, s.clean, s.recovery_points.get(tp, 0), s.log_starts.get(tp, 0),
                        None if s.high_watermarks is None else s.high_watermarks.get(tp), now,
                        s.recovered.get(tp) if kind in (DirKind.LIVE, DirKind.FUTURE) else None,
                        s.sized_logs.get(path))


def _log_loading(states: list[_DirState], elsewhere: bool = False) -> None:
    """LogManager.loadLogs' INFO lines at the start of each data dir."""
    for s in states:
        log.info("Loading logs from log dir %s%s", s.path,
                 f" ({len(s.partitions)} partitions, loaded elsewhere)" if elsewhere else "")
        if s.clean:
            log.info("Skipping recovery of %d logs from %s since clean shutdown file was found", len(s.partitions),
                     s.path)
        else:
            log.info("Attempting recovery of %d logs from %s since no clean shutdown file was found",
                     len(s.partitions), s.path)


def _log_completed(s: _DirState, loaded: LoadedLog, done: int, seconds: float | None = None) -> None:
    """LogManager.loadLog's INFO line for a partition loaded (``seconds``: its load's time, where it was timed)."""
    took = "" if seconds is None else f" in {seconds * 1000:.0f} ms"
    log.info("Completed load of Log(dir=%s, topic=%s, partition=%d, logStartOffset=%d, recoveryPoint=%d, "
             "logEndOffset=%d) with %d segments%s (%d/%d completed in %s)", loaded.dir, loaded.topic,
             loaded.partition, loaded.log_start_offset, loaded.recovery_point, loaded.log_end_offset,
             len(loaded.segments), took, done, len(s.partitions), s.path)


def _warn_deleted(loaded: LoadedLog) -> None:
    if loaded.deleted_segments:
        log.warning("%s: deleted %d segment(s) after the truncation: base offsets %s (%d bytes of log)", loaded.dir,
                    len(loaded.deleted_segments), [b for b, _ in loaded.deleted_segments],
                    sum(n for _, n in loaded.deleted_segments))


def _failed(s: _DirState, path: str, error: BaseException, offline: dict[str, str]) -> BaseException | None:
    """A partition's load ended with ``error``: an ``OSError`` takes its data dir offline (named with the
    partition: a write's error has no file name) and is None here; any other is returned, to fail the load."""
    if not isinstance(error, OSError):
        return error
    if of_the_environment(error):  # named, with what to fix (a write's error names no file: the partition then)
        error = environment_failure(error, path)
        s.keep_marker = True
    log.error("%s: %s: %s; the partition is not loaded and %s goes offline", path, type(error).__name__, error,
              s.path)
    offline.setdefault(s.path, f"{path}: {type(error).__name__}: {error}")
    return None


def _run_elsewhere(states: list[_DirState], cfg: LoaderConfig, now: int, runner: PartitionRunner, stats: LoadStats,
                   offline: dict[str, str], disk: Disk, metrics: MetricsRegistry, progress: ProgressTracker | None,
                   planned: dict[str, PlannedScans] | None = None) -> list[LoadedLog]:
    """Every partition of ``states`` loaded by ``runner``; each outcome is taken as ``_load_all`` takes its
    threads' results (an ``OSError`` takes the dir offline, another exception fails the load once all ran), as
    the runner tells of it or, for those it did not, when it returns."""
    jobs = [(s, _job(s, path, tp, kind, now)) for s in states for path, tp, kind in s.partitions]
    remaining = {s.path: len(s.partitions) for s in states}
    _log_loading(states, elsewhere=True)
    for s in states:
        metrics.register(REMAINING_LOGS_TO_RECOVER, metrics.tags(dir=s.path), len(s.partitions))
    if progress is not None:
        progress.start(dict(remaining))
        for s in states:  # what "auto" planned (an unclean dir's scans), else nothing: counted as they go
            _report_plan(progress, (planned or {}).get(s.path), s.path, disk)
    t0 = time.perf_counter()
    stats.loaded_by = str(getattr(runner, "description", None) or "another process")
    loaded: dict[int, LoadedLog] = {}
    errors: dict[int, BaseException] = {}
    taken: set[int] = set()

    def take(i: int, outcome: PartitionOutcome) -> None:
        if i in taken:
            return
        taken.add(i)
        s, job = jobs[i]
        scanned, recovered = None, 0
        if isinstance(outcome, BaseException):
            errors[i] = outcome  # taken in the jobs' order once all are done, as _load_all takes its threads'
        else:
            lg, scanned = outcome
            recovered = len(lg.recovered_segments)
            _warn_deleted(lg)
            stats.bytes_read += scanned
            loaded[i] = lg
            s.loaded.append(lg)
            if s.resume is not None:
                s.resume.loaded(lg)
        remaining[s.path] -= 1
        metrics.set(REMAINING_LOGS_TO_RECOVER, metrics.tags(dir=s.path), remaining[s.path])
        stats.dir_seconds[s.path] = time.perf_counter() - t0
        if not isinstance(outcome, BaseException):
            _log_completed(s, lg, len(s.partitions) - remaining[s.path])
        if progress is not None:
            if scanned:  # its scans, known only as a whole: the rate and bytes shown grow a partition at a time
                progress.segments_scanned(s.path, recovered, scanned)
            progress.partition_loaded(s.path, str(job.tp), job.dir, scanned)

    segment_gauges: dict[tuple[str, int], Tags] = {}  # (dir, worker) -> its remainingSegmentsToRecover, once told

    def segments(i: int, worker: int, n: int) -> None:
        path = jobs[i][0].path
        tags = segment_gauges.get((path, worker))
        if tags is None:
            tags = segment_gauges[(path, worker)] = metrics.tags(dir=path, threadNum=worker)
            metrics.register(REMAINING_SEGMENTS_TO_RECOVER, tags, None)
        metrics.set(REMAINING_SEGMENTS_TO_RECOVER, tags, n)

    try:
        batch = [job for _, job in jobs]
        takes = _parameters(runner)  # PartitionRunner's optional keywords: those it takes
        keywords = {k: v for k, v in (("loaded", take), ("segments", segments)) if k in takes}
        outcomes = runner(batch, cfg, **keywords)
        for i, outcome in enumerate(outcomes):
            take(i, outcome)
        work = getattr(runner, "work", None)
        if isinstance(work, LoadStats):
            stats.add_work(work)
            stats.worker_start = work.worker_start
    finally:  # what the runner's processes changed, for a failure's note (_note_written)
        disk.changed_elsewhere(getattr(runner, "changed_dirs", ()))
        for s in states:
            metrics.remove(REMAINING_LOGS_TO_RECOVER, metrics.tags(dir=s.path))
        for tags in segment_gauges.values():
            metrics.remove(REMAINING_SEGMENTS_TO_RECOVER, tags)
        if progress is not None:
            progress.close()
    fatal = [f for i in sorted(errors) if (f := _failed(jobs[i][0], jobs[i][1].dir, errors[i], offline)) is not None]
    for s in states:
        if s.offline_reason is not None:
            offline.setdefault(s.path, s.offline_reason)
    if fatal:  # the first in the jobs' order, as _load_all raises the first of its partitions'
        raise fatal[0]
    return [loaded[i] for i in sorted(loaded)]


def _parameters(runner: object) -> set[str]:
    """The names ``runner`` takes (none known: an empty set)."""
    try:
        return set(inspect.signature(runner).parameters)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return set()


def _load_one(s: _DirState, path: str, tp: TopicPartition, kind: DirKind, cfg: LoaderConfig, disk: Disk, now: int,
              metrics: MetricsRegistry, engine: Engine, lock: threading.Lock, remaining: dict[str, int],
              progress: ProgressTracker | None, started: float, cancel: threading.Event) -> LoadedLog | None:
    thread_num = threading.current_thread().name.rsplit("_", 1)[-1]
    seg_tags = metrics.tags(dir=s.path, threadNum=thread_num)
    ctx: PartitionContext | None = None
    try:
        t_start = time.perf_counter()
        loaded, ctx = load_partition(_job(s, path, tp, kind, now), cfg, disk, engine.source(s.path),
                                     lambda n: metrics.set(REMAINING_SEGMENTS_TO_RECOVER, seg_tags, n), cancel)
        _warn_deleted(loaded)
        if s.resume is not None:
            s.resume.loaded(loaded)
        with lock:
            s.loaded.append(loaded)
            engine.stats.bytes_read += ctx.bytes_scanned
            done = len(s.partitions) - remaining[s.path] + 1
        _log_completed(s, loaded, done, time.perf_counter() - t_start)
        return loaded
    finally:
        with lock:
            remaining[s.path] -= 1
            metrics.set(REMAINING_LOGS_TO_RECOVER, metrics.tags(dir=s.path), remaining[s.path])
            engine.stats.dir_seconds[s.path] = time.perf_counter() - started
        if progress is not None:
            progress.partition_loaded(s.path, str(tp), path, None if ctx is None else ctx.bytes_scanned)
