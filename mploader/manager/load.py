"""The load itself: ``load_logs`` and ``predict_recovery``, the partitions loaded inline (loading threads and a
scanning engine) or by a :class:`PartitionRunner` elsewhere (worker processes, Spark tasks)."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Protocol

from mploader.config import LoaderConfig
from mploader.disk import NO_HOOK, Disk, MutationHook, open_disk
from mploader.engine.base import Engine, EngineFactory
from mploader.engine.plan import DirPlan, PlannedScans
from mploader.engine.select import AutoPlans, auto_plans, make_engine, workers_per_dir
from mploader.errors import (
    StartupFailedError,
)
from mploader.format.names import DirKind, TopicPartition
from mploader.manager.dirs import (
    DirState,
    commit_clean_dirs,
    create_and_lock,
    flush,
    note_written,
    prepare_dir,
    validate_dirs,
    write_recovery_points,
)
from mploader.manager.preflight import preflight
from mploader.manager.report import (
    ProgressGauges,
    failed,
    impact_warnings,
    log_completed,
    log_loading,
    report_plan,
    warn_deleted,
)
from mploader.metrics import (
    REMAINING_LOGS_TO_RECOVER,
    REMAINING_SEGMENTS_TO_RECOVER,
    MetricsRegistry,
    Tags,
)
from mploader.partition_pool import ProcessPartitions, auto_workers, surely_workers
from mploader.progress import Progress, ProgressTracker
from mploader.recovery.job import PartitionJob, load_partition
from mploader.recovery.loader import PartitionContext
from mploader.recovery.resume import RecoveryPointWriter, forget as forget_recovered, read_recovered
from mploader.result import LoadedLog, LoadResult, LoadStats

log = logging.getLogger("mploader.manager")  # LogManager's lines, from every room of the package


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


def load_logs(
    data_dirs: Sequence[str | os.PathLike[str]],
    config: LoaderConfig | None = None,
    now_ms: int | None = None,
    *,
    metrics: MetricsRegistry | None = None,
    progress: Progress | None = None,
    engine: EngineFactory | None = None,
    partitions: PartitionRunner | None = None,
    mutations: MutationHook = NO_HOOK,
) -> LoadResult:
    """Load every partition of ``data_dirs`` as a Kafka 4.x broker does at start-up.

    Returns a :class:`LoadResult`; raises :class:`StartupFailedError` where Kafka's
    broker would fail to start.  ``now_ms`` is the wall clock used for producer
    expiry (default: the real clock).  ``engine`` makes the engine Phase 1 runs on (default: the
    config's choice, :func:`mploader.engine.select.make_engine`; e.g. :class:`mploader.spark.SparkEngine`).
    ``partitions`` loads the partitions elsewhere, each a :class:`~mploader.recovery.job.PartitionJob` run
    with :func:`~mploader.recovery.job.load_partition` (e.g. on Spark executors, :mod:`mploader.spark.phase2`):
    the data dirs' start-up (preflight, locks, marker, checkpoints) and the result stay here.  ``mutations`` is told of
    every change before it is made (:mod:`mploader.disk.mutations`: the kill-point tests), in the worker processes of
    :class:`~mploader.partition_pool.ProcessPartitions` too when the load starts them (a runner given as
    ``partitions`` is given its own).
    """
    cfg = config or LoaderConfig()
    return _load_logs(data_dirs, cfg, now_ms, metrics, progress, open_disk(cfg.dry_run, mutations=mutations), engine,
                      partitions, mutations=mutations)


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
               check_writes: bool = True, mutations: MutationHook = NO_HOOK) -> LoadResult:
    now = int(time.time() * 1000) if now_ms is None else now_ms
    # the figures (bytes to recover, rate, ETA) are kept only for someone who reads them
    gauges = ProgressGauges(metrics) if metrics is not None else None
    sinks = [sink for sink in (progress, gauges) if sink is not None]
    tracker = ProgressTracker(sinks) if sinks else None
    metrics = metrics or MetricsRegistry()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    stats = LoadStats()
    dirs = validate_dirs(data_dirs)
    offline: dict[str, str] = {}
    states: list[DirState] = [DirState(d) for d in dirs]
    try:
        # reads only: a start-up failure it finds changes no byte.  Partitions loaded elsewhere (``partitions``) are
        # changed by another process's disk: this one keeps no listing of theirs, which its changes would not keep true
        preflight(states, cfg, disk, offline, keep_listings=partitions is None, check_writes=check_writes)
        stats.seconds["preflight"] = time.perf_counter() - t0
        log.debug("preflight of %d data dirs, %d partitions: nothing that fails start-up before recovery (%.1f ms)",
                  len(states), sum(len(s.partitions) for s in states), stats.seconds["preflight"] * 1000)
        try:
            for state in states:  # LogManager's constructor: create, lock (createAndValidateLogDirs, lockLogDirs)
                create_and_lock(state, disk, offline)
            for state in states:  # the checkpoint files, the marker; the listing if the preflight could not
                prepare_dir(state, disk, offline)
            result = _load_prepared(states, dirs, cfg, disk, now, metrics, tracker, offline, stats, engine,
                                    partitions, mutations)
        except StartupFailedError as e:
            commit_clean_dirs(states, cfg, disk, offline)  # a failed start leaves what Kafka's leaves: no marker
            if not cfg.dry_run:
                note_written(e, disk)
            raise
        t_flush = time.perf_counter()
        flush(states, disk, offline)
        commit_clean_dirs(states, cfg, disk, offline)
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


def _load_prepared(states: list[DirState], dirs: list[str], cfg: LoaderConfig, disk: Disk, now: int,
                   metrics: MetricsRegistry, progress: ProgressTracker | None, offline: dict[str, str],
                   stats: LoadStats, factory: EngineFactory | None = None,
                   runner: PartitionRunner | None = None, mutations: MutationHook = NO_HOOK) -> LoadResult:
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
                runner, planned = ProcessPartitions(n, cfg.worker_start, mutations), auto.planned
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
        write_recovery_points(live, offline)
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
    result.warnings.extend(impact_warnings(result))
    return result


def _auto_partition_workers(cfg: LoaderConfig, live: list[DirState], plans: list[DirPlan], unwatched: bool
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


def _dir_plan(s: DirState, cfg: LoaderConfig, disk: Disk) -> DirPlan:
    return DirPlan(s.path, s.clean, s.partitions, s.recovery_points,
                   lambda topic: cfg.for_topic(topic).index_interval_bytes,
                   lambda topic: cfg.for_topic(topic).max_index_size, scan_all=cfg.index_check == "full",
                   clean_scans=s.clean_scans, disk=disk)


def _load_all(states: list[DirState], cfg: LoaderConfig, disk: Disk, now: int, metrics: MetricsRegistry,
              engine: Engine, stats: LoadStats, offline: dict[str, str],
              progress: ProgressTracker | None) -> list[LoadedLog]:
    loaded: list[LoadedLog] = []
    lock = threading.Lock()
    pools: list[tuple[DirState, ThreadPoolExecutor, list[Future[LoadedLog | None]]]] = []
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
    log_loading(states)
    t_prefetch = time.perf_counter()
    order = engine.prefetch([_dir_plan(s, cfg, disk) for s in states])
    for s in states:  # Phase 2 takes partitions in the order Phase 1 was started on them
        s.partitions = order.get(s.path, s.partitions)
    stats.seconds["plan"] = time.perf_counter() - t_prefetch
    if progress is not None:
        for s in states:
            report_plan(progress, engine.planned.get(s.path), s.path, disk)
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
                    failure = failed(s, path, error, offline)  # each: a later OSError still takes its dir offline
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


def _job(s: DirState, path: str, tp: TopicPartition, kind: DirKind, now: int) -> PartitionJob:
    return PartitionJob(s.path, path, tp, kind, s.clean, s.recovery_points.get(tp, 0), s.log_starts.get(tp, 0),
                        None if s.high_watermarks is None else s.high_watermarks.get(tp), now,
                        s.recovered.get(tp) if kind in (DirKind.LIVE, DirKind.FUTURE) else None,
                        s.sized_logs.get(path))


def _run_elsewhere(states: list[DirState], cfg: LoaderConfig, now: int, runner: PartitionRunner, stats: LoadStats,
                   offline: dict[str, str], disk: Disk, metrics: MetricsRegistry, progress: ProgressTracker | None,
                   planned: dict[str, PlannedScans] | None = None) -> list[LoadedLog]:
    """Every partition of ``states`` loaded by ``runner``; each outcome is taken as ``_load_all`` takes its
    threads' results (an ``OSError`` takes the dir offline, another exception fails the load once all ran), as
    the runner tells of it or, for those it did not, when it returns."""
    jobs = [(s, _job(s, path, tp, kind, now)) for s in states for path, tp, kind in s.partitions]
    remaining = {s.path: len(s.partitions) for s in states}
    log_loading(states, elsewhere=True)
    for s in states:
        metrics.register(REMAINING_LOGS_TO_RECOVER, metrics.tags(dir=s.path), len(s.partitions))
    if progress is not None:
        progress.start(dict(remaining))
        for s in states:  # what "auto" planned (an unclean dir's scans), else nothing: counted as they go
            report_plan(progress, (planned or {}).get(s.path), s.path, disk)
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
            warn_deleted(lg)
            stats.bytes_read += scanned
            loaded[i] = lg
            s.loaded.append(lg)
            if s.resume is not None:
                s.resume.loaded(lg)
        remaining[s.path] -= 1
        metrics.set(REMAINING_LOGS_TO_RECOVER, metrics.tags(dir=s.path), remaining[s.path])
        stats.dir_seconds[s.path] = time.perf_counter() - t0
        if not isinstance(outcome, BaseException):
            log_completed(s, lg, len(s.partitions) - remaining[s.path])
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
    finally:  # what the runner's processes changed, for a failure's note (note_written)
        disk.changed_elsewhere(getattr(runner, "changed_dirs", ()))
        for s in states:
            metrics.remove(REMAINING_LOGS_TO_RECOVER, metrics.tags(dir=s.path))
        for tags in segment_gauges.values():
            metrics.remove(REMAINING_SEGMENTS_TO_RECOVER, tags)
        if progress is not None:
            progress.close()
    fatal = [f for i in sorted(errors) if (f := failed(jobs[i][0], jobs[i][1].dir, errors[i], offline)) is not None]
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


def _load_one(s: DirState, path: str, tp: TopicPartition, kind: DirKind, cfg: LoaderConfig, disk: Disk, now: int,
              metrics: MetricsRegistry, engine: Engine, lock: threading.Lock, remaining: dict[str, int],
              progress: ProgressTracker | None, started: float, cancel: threading.Event) -> LoadedLog | None:
    thread_num = threading.current_thread().name.rsplit("_", 1)[-1]
    seg_tags = metrics.tags(dir=s.path, threadNum=thread_num)
    ctx: PartitionContext | None = None
    try:
        t_start = time.perf_counter()
        loaded, ctx = load_partition(_job(s, path, tp, kind, now), cfg, disk, engine.source(s.path),
                                     lambda n: metrics.set(REMAINING_SEGMENTS_TO_RECOVER, seg_tags, n), cancel)
        warn_deleted(loaded)
        if s.resume is not None:
            s.resume.loaded(loaded)
        with lock:
            s.loaded.append(loaded)
            engine.stats.bytes_read += ctx.bytes_scanned
            done = len(s.partitions) - remaining[s.path] + 1
        log_completed(s, loaded, done, time.perf_counter() - t_start)
        return loaded
    finally:
        with lock:
            remaining[s.path] -= 1
            metrics.set(REMAINING_LOGS_TO_RECOVER, metrics.tags(dir=s.path), remaining[s.path])
            engine.stats.dir_seconds[s.path] = time.perf_counter() - started
        if progress is not None:
            progress.partition_loaded(s.path, str(tp), path, None if ctx is None else ctx.bytes_scanned)
