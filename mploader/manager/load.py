"""The load itself: ``load_logs`` and ``predict_recovery``: the data dirs' start-up, one :class:`LoadPlan`, the
partitions loaded by one :class:`~mploader.runners.PartitionRunner` (loading threads here, worker processes,
Spark tasks), each outcome taken once, the result."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mploader.broker_config.meta import MetaProperties, read_meta_properties
from mploader.config import LoaderConfig
from mploader.disk import NO_HOOK, Disk, MutationHook, open_disk
from mploader.engine.base import EngineFactory
from mploader.engine.plan import DirPlan, PlannedScans
from mploader.errors import StartupFailedError
from mploader.format.names import DirKind, TopicPartition
from mploader.load_plan import LoadPlan, plan_load
from mploader.manager.channel import LogDirFailureChannel
from mploader.manager.dirs import (
    DirState,
    commit_clean_dirs,
    create_and_lock,
    flush,
    note_written,
    prepare_dir,
    remove_attempt_records,
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
from mploader.manager.strays import NO_STRAYS, StrayLogs, settle_stray
from mploader.metrics import (
    REMAINING_LOGS_TO_RECOVER,
    REMAINING_SEGMENTS_TO_RECOVER,
    MetricsRegistry,
    Tags,
)
from mploader.progress import Progress, ProgressTracker
from mploader.recovery.job import PartitionJob, planned_data
from mploader.recovery.resume import RecoveryPointWriter, forget as forget_recovered, read_recovered
from mploader.result import LoadedLog, LoadResult, LoadStats
from mploader.runners import LoadingThreads, Outcome, PartitionRunner, RunEvents

log = logging.getLogger("mploader.manager")  # LogManager's lines, from every room of the package


@dataclass(frozen=True, slots=True)
class _Load:
    """What one load runs with, from start to end: its config and collaborators, and what it keeps as it goes."""

    cfg: LoaderConfig
    disk: Disk
    now: int  # the wall clock of producer expiry
    metrics: MetricsRegistry
    progress: ProgressTracker
    stats: LoadStats
    channel: LogDirFailureChannel = field(default_factory=LogDirFailureChannel)
    strays: StrayLogs = NO_STRAYS
    mutations: MutationHook = NO_HOOK  # the hook of the disks the plan's partition workers open
    engine: EngineFactory | None = None  # Phase 1's engine, given (else the plan's)
    partitions: PartitionRunner | None = None  # where the partitions load, given (else the plan's)


def load_logs(
    data_dirs: Sequence[str | os.PathLike[str]],
    config: LoaderConfig | None = None,
    now_ms: int | None = None,
    *,
    metrics: MetricsRegistry | None = None,
    progress: Progress | None = None,
    engine: EngineFactory | None = None,
    partitions: PartitionRunner | None = None,
    strays: StrayLogs = NO_STRAYS,
    mutations: MutationHook = NO_HOOK,
) -> LoadResult:
    """Load every partition of ``data_dirs`` as a Kafka 4.x broker does at start-up.

    Returns a :class:`LoadResult`; raises :class:`StartupFailedError` where Kafka's
    broker would fail to start.  ``now_ms`` is the wall clock used for producer
    expiry (default: the real clock).  ``engine`` makes the engine Phase 1 runs on (default: the
    config's choice, :func:`mploader.load_plan.make_engine`; e.g. :class:`mploader.spark.engine.SparkEngine`).
    ``partitions`` is where the partitions load (:class:`mploader.runners.PartitionRunner`: e.g. worker processes,
    :class:`mploader.runners.ProcessPartitions`, or Spark executors, :class:`mploader.spark.phase2.SparkPartitions`;
    default: :func:`mploader.load_plan.plan_load`'s choice): the data dirs' start-up (preflight, locks, marker,
    checkpoints) and the result stay here.  ``strays`` says which loaded logs are strays, renamed as Kafka renames
    them (:mod:`mploader.manager.strays`: a KRaft broker's, from its metadata image; default none).
    ``mutations`` is told of every change before it is made (:mod:`mploader.disk.mutations`: the kill-point
    tests), in the worker processes of :class:`~mploader.runners.ProcessPartitions` too when the plan starts them
    (a runner given as ``partitions`` is given its own).
    """
    cfg = config or LoaderConfig()
    load = _Load(cfg, open_disk(cfg.dry_run, mutations=mutations), _now(now_ms), metrics or MetricsRegistry(),
                 _tracker(progress, metrics), LoadStats(), strays=strays, mutations=mutations, engine=engine,
                 partitions=partitions)
    return _load_logs(data_dirs, load)


def predict_recovery(data_dirs: Sequence[str | os.PathLike[str]], config: LoaderConfig | None = None,
                     now_ms: int | None = None, engine: EngineFactory | None = None,
                     partitions: PartitionRunner | None = None) -> LoadResult:
    """What a load would do now: a dry run (``config.dry_run`` is implied) that does not look at the data
    dirs' locks, so that ``mploader verify`` can tell it for the dirs of a running broker too (where the files
    may change under it: the prediction is then of the moment it read them).  ``engine`` and ``partitions``: as
    :func:`load_logs`'s."""
    cfg = dataclasses.replace(config or LoaderConfig(), dry_run=True)
    load = _Load(cfg, open_disk(True, check_lock=False), _now(now_ms), MetricsRegistry(), _tracker(None, None),
                 LoadStats(), engine=engine, partitions=partitions)
    return _load_logs(data_dirs, load, check_writes=False)


def _now(now_ms: int | None) -> int:
    return int(time.time() * 1000) if now_ms is None else now_ms


def _tracker(progress: Progress | None, metrics: MetricsRegistry | None) -> ProgressTracker:
    """The load's progress: the caller's, and the recovery gauges where someone reads the metrics."""
    return ProgressTracker([sink for sink in (progress, None if metrics is None else ProgressGauges(metrics))
                            if sink is not None])


def _load_logs(data_dirs: Sequence[str | os.PathLike[str]], load: _Load, check_writes: bool = True) -> LoadResult:
    cfg, disk, stats, channel = load.cfg, load.disk, load.stats, load.channel
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    dirs = validate_dirs(data_dirs)
    states: list[DirState] = [DirState(d) for d in dirs]
    try:
        # reads only: a start-up failure it finds changes no byte.  Partitions loaded elsewhere (``partitions``) are
        # changed by another process's disk: this one keeps no listing of theirs, which its changes would not keep true
        preflight(states, cfg, disk, channel, keep_listings=load.partitions is None, check_writes=check_writes)
        stats.seconds["preflight"] = time.perf_counter() - t0
        log.debug("preflight of %d data dirs, %d partitions: nothing that fails start-up before recovery (%.1f ms)",
                  len(states), sum(len(s.partitions) for s in states), stats.seconds["preflight"] * 1000)
        try:
            for state in states:  # LogManager's constructor: create, lock (createAndValidateLogDirs, lockLogDirs)
                create_and_lock(state, disk, channel)
            for state in states:  # the checkpoint files, the marker; the listing if the preflight could not
                prepare_dir(state, disk, channel)
            result = _load_prepared(states, dirs, load)
        except StartupFailedError as e:
            commit_clean_dirs(states, cfg, disk, channel)  # a failed start leaves what Kafka's leaves: no marker
            if not cfg.dry_run:
                note_written(e, disk)
            remove_attempt_records(states, disk, channel)  # after the note: they are no change of the load's
            raise
        _commit(states, load)
        stats.seconds["total"] = time.perf_counter() - t0
        # this process's CPU, all its threads, none of its workers': the serial part no worker count removes
        stats.seconds["cpu"] = time.process_time() - cpu0
        stats.write_seconds += disk.change_seconds  # the parent's own, beside a runner's workers'
        result.offline_dirs = channel.offline_dirs  # with those the flush and the commit took offline
        return result
    finally:
        for s in states:
            if s.lock_fd is not None:
                os.close(s.lock_fd)  # releases the lock


def _commit(states: list[DirState], load: _Load) -> None:
    """The loads' writes made durable, then the markers deleted (the commit), then the Spark tasks' attempt records
    and what a killed --resumable load recorded forgotten (of no more use: recovery.attempts, recovery.resume)."""
    t0 = time.perf_counter()
    flush(states, load.disk, load.channel)
    commit_clean_dirs(states, load.cfg, load.disk, load.channel)
    remove_attempt_records(states, load.disk, load.channel)
    for s in states:
        if s.path not in load.channel:
            forget_recovered(load.disk, s.path)
    load.stats.seconds["flush"] = time.perf_counter() - t0


def _load_prepared(states: list[DirState], dirs: list[str], load: _Load) -> LoadResult:
    cfg, disk = load.cfg, load.disk
    live = _live_dirs(states, dirs, load.channel)
    if cfg.persist_recovery_points:  # a dir whose checkpoint could not be read is left to Kafka (resume.py)
        for s in live:
            if not load.channel.goes_offline(s.path):
                s.resume = RecoveryPointWriter(disk, s.path, s.recovery_points)
                s.recovered = read_recovered(disk, s.path)
    try:
        plans = [_dir_plan(s, cfg, disk) for s in live]
        plan = LoadPlan()
        if load.partitions is None and load.engine is None:
            plan = plan_load(cfg, plans, watched=load.progress.watched)
            if plan.partition_workers:
                for s in live:  # the workers change them: listings kept by this disk would no longer be true
                    for path, _, _ in s.partitions:
                        disk.release(path)
        with _runner(load, plan, [p.data_dir for p in plans]) as runner:
            loaded = _run(live, plans, load, runner, plan.planned)
    finally:  # also after a failure or Ctrl-C: the partitions that finished are not recovered again
        write_recovery_points(live, load.channel)
    return _result(states, loaded, load.channel, load.stats)


def _runner(load: _Load, plan: LoadPlan, data_dirs: list[str]) -> PartitionRunner:
    """Where the partitions load: the runner given, else the plan's (loading threads with the engine given, or the
    plan's)."""
    if load.partitions is not None:
        return load.partitions
    if load.engine is not None:
        return LoadingThreads(load.engine(load.stats, load.progress), load.disk,
                              load.cfg.num_recovery_threads_per_data_dir)
    return plan.runner(load.cfg, load.disk, data_dirs, load.stats, load.metrics, load.progress, load.mutations)


def _live_dirs(states: list[DirState], dirs: list[str], channel: LogDirFailureChannel) -> list[DirState]:
    """The dirs with partitions to load; LogManager.createAndValidateLogDirs' Exit.halt(1) where none is usable."""
    if all(d in channel for d in dirs):
        reasons = "; ".join(f"{d}: {channel.reason(d)}" for d in dirs)
        raise StartupFailedError(None, "KafkaException (Exit.halt)",
                                 f"no usable data directory among those given ({reasons})")
    for s in states:  # a dir with nothing to load whose checkpoint could not be read is still reported offline
        if not s.partitions:
            channel.settle(s.path)
    return [s for s in states if not channel.goes_offline(s.path) or s.partitions]


def _result(states: list[DirState], loaded: list[LoadedLog], channel: LogDirFailureChannel, stats: LoadStats
            ) -> LoadResult:
    """LoadResult of the logs loaded: each in its place (live, future, to delete, stray), a second live (or future)
    directory of a partition failing the start as in LogManager.loadLog; the stats' totals; the impact warnings."""
    result = LoadResult({}, {}, [], [], channel.offline_dirs, {s.path: s.clean for s in states}, stats)
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


def _dir_plan(s: DirState, cfg: LoaderConfig, disk: Disk) -> DirPlan:
    return DirPlan(s.path, s.clean, s.partitions, s.recovery_points,
                   lambda topic: cfg.for_topic(topic).index_interval_bytes,
                   lambda topic: cfg.for_topic(topic).max_index_size, scan_all=cfg.index_check == "full",
                   clean_scans=s.clean_scans, disk=disk)


def _run(states: list[DirState], plans: list[DirPlan], load: _Load, runner: PartitionRunner,
         planned: Mapping[str, PlannedScans]) -> list[LoadedLog]:
    """Every partition of ``states`` loaded by ``runner``, each outcome taken once (:class:`_Outcomes`) as the
    runner tells of it or, for those it did not, when it returns: an ``OSError`` takes the dir offline, another
    exception fails the load once all ran (Kafka waits for every job, then rethrows the first)."""
    progress, stats = load.progress, load.stats
    gauges = _Gauges(load.metrics, states, runner.gauges_per_dir)
    progress.start({s.path: len(s.partitions) for s in states})
    log_loading(states, elsewhere=runner.elsewhere)
    t0 = time.perf_counter()
    order = runner.order(plans)
    for s in states:  # loaded in the order their Phase 1 was started
        s.partitions = order.get(s.path, s.partitions)
    stats.seconds["plan"] = time.perf_counter() - t0
    planned = {**planned, **runner.planned}
    for s in states:  # what was planned (an unclean dir's scans), else nothing: counted as they go
        report_plan(progress, planned.get(s.path), s.path, load.disk)
    identities = {s.path: read_meta_properties(s.path) for s in states} if runner.needs_planned_data else None
    jobs = [(s, _job(s, path, tp, kind, load.now, identities)) for s in states for path, tp, kind in s.partitions]
    outcomes = _Outcomes(jobs, load, gauges, runner.reports_scans, t0)
    try:
        for i, outcome in enumerate(runner.run([job for _, job in jobs], load.cfg, outcomes)):
            outcomes.loaded(i, outcome)  # those the runner did not tell of
        runner.account(stats)
    finally:  # what the runner's processes changed, for a failure's note (note_written)
        load.disk.changed_elsewhere(runner.changed_dirs)
        gauges.remove()
        progress.close()
    fatal = [f for i in sorted(outcomes.errors)
             if (f := failed(jobs[i][0], jobs[i][1].dir, outcomes.errors[i], load.channel)) is not None]
    for s in states:
        load.channel.settle(s.path)
    if fatal:  # the first in the jobs' order
        raise fatal[0]
    return [outcomes.logs[i] for i in sorted(outcomes.logs)]


def _job(s: DirState, path: str, tp: TopicPartition, kind: DirKind, now: int,
         identities: dict[str, MetaProperties | None] | None) -> PartitionJob:
    """``identities``: the data dirs' ``meta.properties``, for a runner that needs what this host found (None: it
    does not)."""
    return PartitionJob(s.path, path, tp, kind, s.clean, s.recovery_points.get(tp, 0), s.log_starts.get(tp, 0),
                        None if s.high_watermarks is None else s.high_watermarks.get(tp), now,
                        s.recovered.get(tp) if kind in (DirKind.LIVE, DirKind.FUTURE) else None,
                        s.sized_logs.get(path), None if identities is None else planned_data(identities[s.path], path))


class _Gauges:
    """Kafka's remainingLogsToRecover per dir and remainingSegmentsToRecover per dir and thread, registered as
    LogManager.loadLogs registers them (``per_dir`` threads a dir from the start, others as first told of) and
    removed when the load ends."""

    def __init__(self, metrics: MetricsRegistry, states: list[DirState], per_dir: int) -> None:
        self.metrics = metrics
        self.remaining = {s.path: len(s.partitions) for s in states}
        self._segments: dict[tuple[str, int], Tags] = {}
        for s in states:
            metrics.register(REMAINING_LOGS_TO_RECOVER, metrics.tags(dir=s.path), len(s.partitions))
            for worker in range(per_dir):
                self._segment_tags(s.path, worker)

    def _segment_tags(self, path: str, worker: int) -> Tags:
        tags = self._segments.get((path, worker))
        if tags is None:
            tags = self._segments[(path, worker)] = self.metrics.tags(dir=path, threadNum=worker)
            self.metrics.register(REMAINING_SEGMENTS_TO_RECOVER, tags, None)
        return tags

    def one_loaded(self, path: str) -> None:
        """A partition of ``path`` done (the caller serialises)."""
        self.remaining[path] -= 1
        self.metrics.set(REMAINING_LOGS_TO_RECOVER, self.metrics.tags(dir=path), self.remaining[path])

    def segments_left(self, path: str, worker: int, count: int) -> None:
        self.metrics.set(REMAINING_SEGMENTS_TO_RECOVER, self._segment_tags(path, worker), count)

    def remove(self) -> None:
        for path in self.remaining:
            self.metrics.remove(REMAINING_LOGS_TO_RECOVER, self.metrics.tags(dir=path))
        for tags in self._segments.values():
            self.metrics.remove(REMAINING_SEGMENTS_TO_RECOVER, tags)


class _Outcomes(RunEvents):
    """The manager's side of a run: each job's outcome taken once, from whichever thread the runner tells it in
    (the log, its counts, the gauges, the progress, --resumable's recovery points), its error kept for the end."""

    def __init__(self, jobs: list[tuple[DirState, PartitionJob]], load: _Load, gauges: _Gauges, scans_reported: bool,
                 t0: float) -> None:
        self.jobs, self.gauges = jobs, gauges
        self.stats, self.progress, self.strays, self.disk = load.stats, load.progress, load.strays, load.disk
        self.scans_reported = scans_reported  # the runner's scans reached the progress as they went
        self.t0 = t0
        self.logs: dict[int, LoadedLog] = {}
        self.errors: dict[int, BaseException] = {}
        self._taken: set[int] = set()
        self._completed: dict[str, int] = {}  # per dir, the jobs done (LogManager's numLogsLoaded)
        self._lock = threading.Lock()

    def loaded(self, index: int, outcome: Outcome, seconds: float | None = None) -> None:
        """As LogManager.loadLogs' job ends: a stray renamed, its INFO line, then the dir's remaining logs one fewer."""
        s, job = self.jobs[index]
        if not isinstance(outcome, BaseException):
            try:
                outcome = (settle_stray(outcome[0], self.strays, self.disk), outcome[1])
            except OSError as e:  # LocalLog.renameDir's IOException: the dir goes offline
                outcome = e
        with self._lock:
            if index in self._taken:
                return
            self._taken.add(index)
            self._completed[s.path] = done = self._completed.get(s.path, 0) + 1
            if isinstance(outcome, BaseException):
                self.errors[index] = outcome
            else:
                self.logs[index] = outcome[0]
                s.loaded.append(outcome[0])
                self.stats.bytes_read += outcome[1]
        scanned = None if isinstance(outcome, BaseException) else outcome[1]
        if not isinstance(outcome, BaseException):
            lg = outcome[0]
            warn_deleted(lg)
            if s.resume is not None:
                s.resume.loaded(lg)
            log_completed(s, lg, done, seconds)
            if scanned and not self.scans_reported:  # known only as a whole: progress grows a partition at a time
                self.progress.segments_scanned(s.path, len(lg.recovered_segments), scanned)
        with self._lock:
            self.gauges.one_loaded(s.path)
            self.stats.dir_seconds[s.path] = time.perf_counter() - self.t0
        self.progress.partition_loaded(s.path, str(job.tp), job.dir, scanned)

    def segments_left(self, index: int, worker: int, count: int) -> None:
        with self._lock:
            self.gauges.segments_left(self.jobs[index][0].path, worker, count)
