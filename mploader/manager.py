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

import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from mploader.config import LoaderConfig
from mploader.disk import Disk, open_disk
from mploader.engine.base import Engine
from mploader.engine.plan import DirPlan
from mploader.engine.select import make_engine
from mploader.errors import (
    CheckpointNumberFormatError,
    InvalidPartitionDirError,
    MalformedCheckpointError,
    StartupFailedError,
)
from mploader.format import checkpoint, names
from mploader.format.names import DirKind, TopicPartition
from mploader.metrics import REMAINING_LOGS_TO_RECOVER, REMAINING_SEGMENTS_TO_RECOVER, MetricsRegistry
from mploader.progress import Progress
from mploader.recovery.loader import LogLoader, PartitionContext
from mploader.result import LoadedLog, LoadResult, LoadStats

log = logging.getLogger(__name__)

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


def load_logs(
    data_dirs: Sequence[str | os.PathLike[str]],
    config: LoaderConfig | None = None,
    now_ms: int | None = None,
    *,
    metrics: MetricsRegistry | None = None,
    progress: Progress | None = None,
) -> LoadResult:
    """Load every partition of ``data_dirs`` as a Kafka 4.x broker does at start-up.

    Returns a :class:`LoadResult`; raises :class:`StartupFailedError` where Kafka's
    broker would fail to start.  ``now_ms`` is the wall clock used for producer
    expiry (default: the real clock).
    """
    cfg = config or LoaderConfig()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    metrics = metrics or MetricsRegistry()
    t0 = time.perf_counter()
    stats = LoadStats()
    disk = open_disk(cfg.dry_run)
    dirs = _validate_dirs(data_dirs)
    offline: dict[str, str] = {}
    states: list[_DirState] = []
    try:
        for d in dirs:
            state = _DirState(d)
            states.append(state)
            try:
                _prepare_dir(state, disk)
            except OSError as e:
                offline[d] = f"{type(e).__name__}: {e}"
                state.offline_reason = offline[d]
        result = _load_prepared(states, dirs, cfg, disk, now, metrics, progress, offline, stats, t0)
        t_flush = time.perf_counter()
        disk.flush()  # the producer snapshots written without an fsync each (docs/architecture.md, "Durability")
        stats.seconds["flush"] = time.perf_counter() - t_flush
        stats.seconds["total"] = time.perf_counter() - t0
        return result
    finally:
        for s in states:
            if s.lock_fd is not None:
                os.close(s.lock_fd)  # releases the lock


def _load_prepared(states: list[_DirState], dirs: list[str], cfg: LoaderConfig, disk: Disk, now: int,
                   metrics: MetricsRegistry, progress: Progress | None, offline: dict[str, str], stats: LoadStats,
                   t0: float) -> LoadResult:
    live = [s for s in states if s.offline_reason is None or s.partitions]
    if not any(d not in offline for d in dirs):  # LogManager.createAndValidateLogDirs: Exit.halt(1)
        reasons = "; ".join(f"{d}: {offline[d]}" for d in dirs)
        raise StartupFailedError(None, "KafkaException (Exit.halt)",
                                 f"no usable data directory among those given ({reasons})")
    engine = make_engine(cfg, [_dir_plan(s, cfg) for s in live], stats, metrics, progress)
    stats.workers_per_dir = engine.workers_per_dir
    interrupted = False
    try:
        loaded = _load_all(live, cfg, disk, now, metrics, engine, stats, offline, progress)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        engine.close(kill=interrupted)
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
    stats.seconds["total"] = time.perf_counter() - t0
    return result


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


def _prepare_dir(state: _DirState, disk: Disk) -> None:
    """Constructor checks, marker, checkpoints and the partition listing of one data dir."""
    d = state.path
    if not os.path.exists(d):
        disk.make_data_dir(d)
    if not os.path.isdir(d):
        raise NotADirectoryError(20, "data directory is not a directory", d)
    if not os.access(d, os.R_OK | os.X_OK):
        raise PermissionError(13, "data directory is not readable", d)
    state.lock_fd = disk.lock(os.path.join(d, LOCK_FILE))  # LogManager.lockLogDirs
    for name in (checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT):
        p = os.path.join(d, name)
        if not disk.exists(p) and not os.path.lexists(p):
            disk.write(p, b"")
    marker = os.path.join(d, checkpoint.CLEAN_SHUTDOWN_MARKER)
    state.clean = os.path.exists(marker)  # File.exists: follows links (a dangling one counts as absent)
    if state.clean:  # deleted before any partition loads (KAFKA-10471)
        if os.path.isdir(marker) and not os.path.islink(marker):
            disk.remove_empty_dir(marker)  # Files.deleteIfExists: a non-empty directory is an IOException
        else:
            disk.delete(marker)
    state.recovery_points = _read_checkpoint(state, checkpoint.RECOVERY_POINT_CHECKPOINT)
    state.log_starts = _read_checkpoint(state, checkpoint.LOG_START_OFFSET_CHECKPOINT)
    for entry in sorted(os.scandir(d), key=lambda e: e.name):
        if not entry.is_dir() or entry.name == names.REMOTE_LOG_INDEX_CACHE:
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
        state.partitions.append((entry.path, tp, kind))


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


def _dir_plan(s: _DirState, cfg: LoaderConfig) -> DirPlan:
    return DirPlan(s.path, s.clean, s.partitions, s.recovery_points,
                   lambda topic: cfg.for_topic(topic).index_interval_bytes)


def _load_all(states: list[_DirState], cfg: LoaderConfig, disk: Disk, now: int, metrics: MetricsRegistry,
              engine: Engine, stats: LoadStats, offline: dict[str, str], progress: Progress | None) -> list[LoadedLog]:
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
    t_prefetch = time.perf_counter()
    order = engine.prefetch([_dir_plan(s, cfg) for s in states])
    for s in states:  # Phase 2 takes partitions in the order Phase 1 was started on them
        s.partitions = order.get(s.path, s.partitions)
    stats.seconds["plan"] = time.perf_counter() - t_prefetch
    cancel = threading.Event()
    try:
        for s in states:
            prefix = f"log-recovery-{s.path}"
            pool = ThreadPoolExecutor(max_workers=cfg.num_recovery_threads_per_data_dir, thread_name_prefix=prefix)
            futures = []
            for path, tp, kind in s.partitions:
                futures.append(pool.submit(_load_one, s, path, tp, kind, cfg, disk, now, metrics, engine, lock,
                                           remaining, progress, t_prefetch, cancel))
            pools.append((s, pool, futures))
        try:
            wait([f for _, _, futures in pools for f in futures])
        except KeyboardInterrupt:  # Ctrl-C: loading threads stop at their next segment, queued partitions never start
            cancel.set()
            for _, pool, _ in pools:
                pool.shutdown(wait=False, cancel_futures=True)
            engine.close(kill=True)  # the workers go now: a thread waiting for one of their scans stops at once
            for _, pool, _ in pools:  # the caller releases the dirs' locks next: no loading thread may still write
                pool.shutdown(wait=True)
            raise
        first_fatal: BaseException | None = None
        for s, pool, futures in pools:
            for fut in futures:
                error = fut.exception()
                if isinstance(error, OSError):
                    offline.setdefault(s.path, f"{type(error).__name__}: {error}")
                elif error is not None:  # Kafka waits for every job, then rethrows
                    first_fatal = first_fatal or error
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


def _load_one(s: _DirState, path: str, tp: TopicPartition, kind: DirKind, cfg: LoaderConfig, disk: Disk, now: int,
              metrics: MetricsRegistry, engine: Engine, lock: threading.Lock, remaining: dict[str, int],
              progress: Progress | None, started: float, cancel: threading.Event) -> LoadedLog | None:
    thread_num = threading.current_thread().name.rsplit("_", 1)[-1]
    seg_tags = metrics.tags(dir=s.path, threadNum=thread_num)
    try:
        ctx = PartitionContext(
            disk=disk, data_dir=s.path, dir=path, tp=tp, kind=kind, cfg=cfg.for_topic(tp.topic),
            clean_shutdown=s.clean, recovery_point_checkpoint=s.recovery_points.get(tp, 0),
            log_start_checkpoint=s.log_starts.get(tp, 0), now_ms=now, scans=engine.source(s.path),
            set_remaining_segments=lambda n: metrics.set(REMAINING_SEGMENTS_TO_RECOVER, seg_tags, n),
            cancelled=cancel,
        )
        loaded = LogLoader(ctx).load()
        with lock:
            engine.stats.bytes_read += ctx.bytes_scanned
        return loaded
    finally:
        with lock:
            remaining[s.path] -= 1
            metrics.set(REMAINING_LOGS_TO_RECOVER, metrics.tags(dir=s.path), remaining[s.path])
            engine.stats.dir_seconds[s.path] = time.perf_counter() - started
        if progress is not None:
            progress.partition_done(s.path, str(tp))
