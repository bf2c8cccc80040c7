"""Whole partitions loaded in worker processes: each partition's scans and its Phase 2 in one worker.

The process-pool engine (:mod:`mploader.engine.pool`) runs Phase 1 in workers and keeps Phase 2 in the parent,
one partition after another.  On a broker of many small recovered segments Phase 2 is most of the load (85% of
the 1,023-segment set, perf/README.md), and no number of scanning workers shortens it.  Kafka's own answer is
``num.recovery.threads.per.data.dir``: partitions are independent, so several load at once.  This runner does
that with processes, not threads (the GIL): it is a ``partitions=`` runner of :func:`mploader.manager.load_logs`,
as :class:`mploader.spark.SparkPartitions` is for Spark executors, and runs the same
:func:`mploader.recovery.job.load_partition`.  Data flow::

    parent (LogManager: preflight, locks, marker,          worker processes (multiprocessing; forked on
    checkpoints, the result)                               Linux), each with a pipe of its own
    ------------------------------------------------       ----------------------------------------------
    jobs in groups, the costliest partitions first   ──►   per group: load_partition of each job with its
      (COST_PER_SEGMENT: a segment's Phase 2 weighs          own disk (RealDisk, or DryRunDisk for a dry run),
      what scanning ~1 MiB does), ~GROUPS_PER_WORKER         scanning in the worker; then one sync of the
      per worker so that they end together; one group        file systems it wrote (Disk.flush)
      a worker at a time
    remainingSegmentsToRecover{dir, threadNum}       ◄──   as a partition recovers: its segments left (its
      set (threadNum: the worker's number)                   first count, its 0, at most one a 50 ms between)
    as each group completes: its partitions count    ◄──   per job: (LoadedLog, bytes scanned) or the
      as loaded (progress, --resumable's recovery            exception its load raised; the mploader log
      points); its log records are logged here; its          records it made; the scans' and file changes'
      counts added to the load's stats                       counts and seconds (a LoadStats)
    a worker that died (its process's sentinel, no
      answer): a new worker; its group goes to another
      worker, or, if that one dies too, to the parent

What a group returns is durable: the parent hears of a partition only after its worker synced it, so the recovery
points a ``--resumable`` load advances cover durable files (docs/architecture.md, "Durability").  A worker that
dies mid-partition leaves what a killed load leaves; loading that partition again from the same job reaches the
load's outcome (the parent alone writes the data dir's checkpoints and ``mploader-recovered``, so the job the
worker had is still what a rerun would read; what the worker left in the partition's own directory, its
``mploader-journal`` included, is what a killed load leaves there).  Ctrl-C (or any exception while waiting) kills
the workers before the caller goes on to release the data dirs' locks.  The pool is this module's own, not loky's:
a dead worker is known by its process (which one, killed by which signal, while loading which partitions), only its
group is loaded again, and the others go on (a loky pool breaks as a whole); and, its workers forked, it starts no
resource-tracker process (0.08 s of the 240 MB set's 0.56 s with loky, perf/README.md "Whole partitions in
workers").  Log records are made in the worker and logged by the parent, through its own handlers (the worker's
copies of them never write), so that a load's log reads as an inline load's, but for the time each partition took.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import pickle
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mploader.config import LoaderConfig
from mploader.disk import NO_HOOK, MutationHook, open_disk
from mploader.engine import worker_start
from mploader.engine.base import InlineSource
from mploader.engine.plan import DirPlan, PlannedScans, ordered, partition_scans
from mploader.engine.select import POOL_START_SECONDS, AutoPlans, usable_cpus
from mploader.errors import MploaderError
from mploader.format import names
from mploader.recovery.job import PartitionJob, load_partition
from mploader.result import LoadedLog, LoadStats

if TYPE_CHECKING:  # multiprocessing is imported when workers start: a load that starts none does without it
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

log = logging.getLogger(__name__)

Outcome = tuple[LoadedLog, int] | BaseException  # per job: the log and the bytes scanned, or what its load raised
Loaded = Callable[[int, Outcome], None]  # told of each job as it completes: its index in the list, its outcome
# told of a job's segments left to recover as its load goes: its index, the worker's number (0 to workers - 1, Kafka's
# recovery thread's threadNum), the count (Kafka's remainingSegmentsToRecover)
Segments = Callable[[int, int, int], None]

#: a segment weighs this many bytes of ``.log`` in a partition's cost: a small recovered segment's Phase 2
#: (~0.5 ms) is about what scanning 1 MiB takes
COST_PER_SEGMENT = 1 << 20
#: groups per worker: enough that the workers finish together, few enough that a group's round trip and its
#: sync stay small against its partitions' work
GROUPS_PER_WORKER = 4
WORKER_NAME = "mploader-load"  # a worker's process name (the scanning pool's are mploader-scan)
#: a worker tells the parent of a partition's segments left to recover when its recovery starts, when it ends, and
#: in between at most this often (a message a segment cost the parent ~50 us of CPU each: perf/README.md)
SEGMENTS_EVERY_SECONDS = 0.05

# What "auto" weighs (perf/README.md, "Whole partitions in workers"): the inline load's seconds, estimated from
# its plans, in process on 2 vCPUs: a recovered segment ~0.7 ms beyond its bytes (100 partitions of 1,023 small
# segments, 0.73 s), a byte scanned and recovered 1/1.5e9 s (8 partitions of 240 MB of ~1 KB batches, 0.19 s), a
# partition's own steps ~1.3 ms (a clean dir of 300 partitions, 3,067 segments, 0.39 s).  Two forked workers cost a
# load ~13 ms and ~22 ms of CPU (2 partitions of 5 segments: 21 against 8 ms inline); a load of 0.09 s gained
# 18 ms.  From AUTO_MIN_SECONDS on, the gain is a good part of the load and small loads keep the scanning engine.
SEGMENT_SECONDS = 0.0007
BYTES_PER_SECOND = 1.5e9
PARTITION_SECONDS = 0.0013
AUTO_MIN_SECONDS = 0.25


def inline_seconds(auto: AutoPlans, partitions: int) -> float:
    """The inline load's seconds, as estimated from the plans "auto" made and the number of partitions."""
    return _estimate(auto.planned_bytes, auto.planned_tasks, partitions)


def _estimate(planned_bytes: int, planned_tasks: int, partitions: int) -> float:
    return planned_bytes / BYTES_PER_SECOND + planned_tasks * SEGMENT_SECONDS + partitions * PARTITION_SECONDS


def auto_workers(auto: AutoPlans, partitions: int, engine_workers: int, cpus: int | None = None,
                 start: str | None = None) -> int:
    """How many processes "auto" loads whole partitions in (0: none, the scanning engine loads them): where the
    inline load would take :data:`AUTO_MIN_SECONDS` or more (and, for spawned workers, their start on top:
    ``engine.select.POOL_START_SECONDS``), on at least 2 of the usable ``cpus``, when there are as many partitions
    as CPUs or the engine would scan inline anyway (``engine_workers`` 1).  With fewer partitions than CPUs a
    scanning pool may use more of them: it splits big segments, which this cannot."""
    cpus = usable_cpus() if cpus is None else cpus
    n = min(cpus, partitions)
    if n < 2 or (partitions < cpus and engine_workers > 1) or inline_seconds(auto, partitions) < _bar(start):
        return 0
    return n


def surely_workers(plans: Sequence[DirPlan], partitions: int, cpus: int | None = None, start: str | None = None
                   ) -> tuple[int, dict[str, PlannedScans]]:
    """:func:`auto_workers`' answer before the whole plan is made, where it is already certain: with as many
    partitions as CPUs (2 or more) it takes workers exactly when :func:`inline_seconds` reaches the bar, and every
    partition planned only adds to that estimate.  So: the partitions' own term, then the unclean dirs' scans
    partition by partition (a clean dir's are counted only where its bound asks for a pool: not here), up to the
    bar.  The parent's plan is serial and before any worker starts (2,117 segments: 0.1 s on 16 CPUs, 25 us a
    segment here).  Returns the workers (0: not certain, :func:`auto_workers` decides on the whole plan) and the
    dirs planned to their end (for ``engine.select.auto_plans`` to reuse)."""
    cpus = usable_cpus() if cpus is None else cpus
    done: dict[str, PlannedScans] = {}
    if cpus < 2 or partitions < cpus:
        return 0, done
    bar = _bar(start)
    planned_bytes = planned_tasks = 0  # counted as inline_seconds counts them: the same float at the same plans
    for plan in plans:
        if _estimate(planned_bytes, planned_tasks, partitions) >= bar:
            break
        if plan.clean and not plan.scan_all:
            continue
        scans = []
        for sized in partition_scans(plan):
            scans.append(sized)
            planned_bytes += sized[0]
            planned_tasks += len(sized[2])
            if _estimate(planned_bytes, planned_tasks, partitions) >= bar:
                return cpus, done
        done[plan.data_dir] = ordered(scans)
    return (cpus if _estimate(planned_bytes, planned_tasks, partitions) >= bar else 0), done


def _bar(start: str | None) -> float:
    """The inline load's estimated seconds from which "auto" takes partition workers."""
    return AUTO_MIN_SECONDS + (POOL_START_SECONDS["spawn"] if worker_start(start) == "spawn" else 0.0)


class _Collect(logging.Handler):
    """Keeps the records of a group's loads for the parent, made plain (the message formatted, the traceback as
    text) so that any of them pickles."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.msg, record.args, record.exc_info = record.getMessage(), None, None
        except Exception:  # a call with bad arguments: reported as any handler reports it, the load goes on
            self.handleError(record)
            return
        self.records.append(record)


def _portable(error: BaseException) -> BaseException:
    """``error`` as the parent will get it: itself if it survives a pickle round trip, else a RuntimeError that
    says what it was; one that is not mploader's own (a bug, not a verdict on the data) carries the worker's
    traceback as a note."""
    if not isinstance(error, MploaderError):
        error.add_note(f"in process {os.getpid()}, loading partitions:\n" + "".join(traceback.format_exception(error)))
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        portable = RuntimeError(f"{type(error).__name__}: {error}")
        for note in getattr(error, "__notes__", []):
            portable.add_note(note)
        return portable


class LoadsHere:
    """Partitions loaded in this process, one after another on one disk, their scans made here (Phase 1 where Phase
    2 is: no batch table crosses a process) and counted with the disk's file changes: a worker's group, a Spark
    task's rows (:mod:`mploader.spark.phase2`), the groups the parent loads itself."""

    def __init__(self, cfg: LoaderConfig, mutations: MutationHook = NO_HOOK) -> None:
        self.cfg = cfg
        self.disk = open_disk(cfg.dry_run, mutations=mutations)
        self.work = LoadStats()
        self._scans = InlineSource(self.work, threading.Lock())

    def load(self, job: PartitionJob, segments: Callable[[int], None] = lambda n: None) -> Outcome:
        """``job``'s load: its log and the bytes it scanned, or the exception it raised, made portable (the caller
        takes it as the manager takes a loading thread's exception).  ``segments``: its segments left to recover."""
        try:
            loaded, ctx = load_partition(job, self.cfg, self.disk, self._scans, segments)
            return loaded, ctx.bytes_scanned
        except Exception as e:
            return _portable(e)

    def finish(self) -> LoadStats:
        """What the loads scanned and wrote, once the disk is synced (an OSError of the sync is raised: the
        loads' answers must not count as durable)."""
        self.work.write_seconds = self.disk.change_seconds
        self.disk.flush()
        return self.work


# a group's answer: its outcomes, log records, the directories it changed, the error of its sync, what it scanned
# and wrote (LoadStats.add_work)
Group = tuple[list[Outcome], list[logging.LogRecord], list[str], OSError | None, LoadStats]


def load_group(jobs: Sequence[PartitionJob], cfg: LoaderConfig, level: int,
               segments: Callable[[int, int], None] = lambda i, n: None, mutations: MutationHook = NO_HOOK) -> Group:
    """A worker's task: each job's load, in order (:class:`LoadsHere`), synced at the end; the mploader log records
    at ``level`` and above go back with the outcomes instead of to this process's handlers, with the directories
    the disk changed, the error of the sync, if it failed (the group's partitions then fail with it, their dirs
    offline, as an inline load's last sync takes them), and the scans' and the file changes' counts and seconds.
    ``segments``: told of the segments left to recover in job ``i`` (its position in ``jobs``) as its load goes;
    ``mutations``: the disk's hook."""
    logger = logging.getLogger("mploader")
    collect = _Collect()
    saved = logger.level, logger.propagate, logger.handlers
    logger.setLevel(level)
    logger.propagate, logger.handlers = False, [collect]
    try:
        here = LoadsHere(cfg, mutations)
        outcomes = [here.load(job, functools.partial(segments, i)) for i, job in enumerate(jobs)]
        try:
            here.finish()  # durable before the parent hears of them (its --resumable recovery points)
        except OSError as e:
            return outcomes, collect.records, here.disk.changed_dirs(), e, here.work
        return outcomes, collect.records, here.disk.changed_dirs(), None, here.work
    finally:
        logger.setLevel(saved[0])
        logger.propagate, logger.handlers = saved[1], saved[2]


def partition_cost(job: PartitionJob) -> int:
    """What loading ``job``'s partition may cost, in bytes: after an unclean shutdown its ``.log`` bytes and
    :data:`COST_PER_SEGMENT` a segment (0 for a directory that cannot be listed: its load says why); after a clean
    one a segment's worth, the same for every partition, without a look at its files (a clean load reads no
    ``.log`` but where an index is missing: a listing and a ``stat`` of each ``.log`` would cost the parent more,
    28 ms for the 300 partitions of 3,067 segments, than the grouping gains)."""
    if job.clean_shutdown:
        return COST_PER_SEGMENT
    if job.logs is not None:  # as the preflight sized them: no second listing in the parent
        log_bytes, count = job.logs
        return log_bytes + COST_PER_SEGMENT * count
    try:
        with os.scandir(job.dir) as entries:
            logs = [e.stat().st_size for e in entries if e.name.endswith(names.LOG_SUFFIX)]
    except OSError:
        return 0
    return sum(logs) + COST_PER_SEGMENT * len(logs)


def groups_of(costs: Sequence[int], workers: int) -> list[list[int]]:
    """The jobs' indexes in groups, costliest first, each group up to an equal share of the total cost
    (``workers`` x :data:`GROUPS_PER_WORKER` shares): taken in that order by the workers, the big partitions start
    first and the small ones fill in at the end."""
    order = sorted(range(len(costs)), key=lambda i: -costs[i])
    share = sum(costs) / (workers * GROUPS_PER_WORKER)
    groups: list[list[int]] = []
    filled = 0
    for i in order:
        if not groups or (filled + costs[i] > share and groups[-1]):
            groups.append([])
            filled = 0
        groups[-1].append(i)
        filled += costs[i]
    return groups


def _died(process: BaseProcess) -> str:
    """How a worker ended, in words: the signal that killed it, or its exit status."""
    code = process.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


# what a worker sends: (DONE, group, *Group) when a group is loaded; (SEGMENTS, job's position in the group, count)
DONE, SEGMENTS = "done", "segments"


def _serve(conn: Connection, parent_pid: int, forked: bool, mutations: MutationHook) -> None:
    """A worker's loop: a group in, its outcomes and log records out, until the parent says ``None`` or goes."""
    from mploader.engine.worker import init_worker  # the scanning pool's: not imported by a load that starts none

    init_worker(parent_pid, None, forked, WORKER_NAME)
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the parent closed its end
            return
        if task is None:
            return
        group, jobs, cfg, level = task
        conn.send((DONE, group, *load_group(jobs, cfg, level, _Reporter(conn), mutations)))


class _Reporter:
    """A worker's ``segments`` callback: the counts go to the parent over the pipe, each partition's first and its
    0, and between them at most one each :data:`SEGMENTS_EVERY_SECONDS`."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.job = -1
        self.sent = 0.0

    def __call__(self, i: int, n: int) -> None:
        now = time.monotonic()
        if i != self.job or n == 0 or now - self.sent >= SEGMENTS_EVERY_SECONDS:
            self.job, self.sent = i, now
            self.conn.send((SEGMENTS, i, n))


class _Worker:
    """One worker process, its end of the pipe, its number (0 to workers - 1: a worker that takes a dead one's place
    takes its number) and the group it is loading (None: idle)."""

    def __init__(self, start: str, number: int, mutations: MutationHook) -> None:
        self.number = number
        import multiprocessing

        ctx: Any = multiprocessing.get_context(start)  # typeshed's BaseContext has no Process
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, os.getpid(), start == "fork", mutations),
                                   name=WORKER_NAME, daemon=True)
        try:
            self.process.start()
        except BaseException:  # no process (fork's EAGAIN, ENOMEM): nor its pipe
            self.conn.close()
            raise
        finally:
            child.close()
        self.group: int | None = None

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


class ProcessPartitions:
    """A ``partitions=`` runner for :func:`mploader.manager.load_logs`: ``workers`` processes, each loading whole
    partitions (Phase 1 and Phase 2); ``start``: "fork" or "spawn" (:func:`mploader.engine.worker_start`);
    ``mutations``: the hook of every worker's disk (a spawned worker's is a pickled copy)."""

    def __init__(self, workers: int, start: str | None = None, mutations: MutationHook = NO_HOOK) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers
        self.start = worker_start(start)
        self.mutations = mutations
        self.worker_deaths = 0  # workers that died in this runner's loads
        self.loaded_in_parent = 0  # jobs the parent loaded: their group's worker died twice, or none started
        self.changed_dirs: set[str] = set()  # the directories the last call's loads changed (a failure says them)
        self.work = LoadStats()  # what the last call's loads scanned and wrote (PartitionRunner: added to the load's)

    @property
    def description(self) -> str:
        return f"{self.workers} worker process{'es' if self.workers > 1 else ''} ({self.start}ed), whole partitions"

    def __call__(self, jobs: list[PartitionJob], cfg: LoaderConfig, loaded: Loaded | None = None,
                 segments: Segments | None = None) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(jobs)
        self.changed_dirs = set()
        self.work = LoadStats(worker_start=self.start)

        def take(indexes: list[int], answer: Group) -> None:
            outcomes, records, changed, sync_failed, work = answer
            self.changed_dirs.update(changed)
            self.work.add_work(work)
            for record in records:
                logger = logging.getLogger(record.name)
                if logger.isEnabledFor(record.levelno):
                    logger.handle(record)
            if sync_failed is not None:  # its partitions are not durable: each fails with it, its dir offline, as
                outcomes = [sync_failed] * len(indexes)  # an inline load's last sync (an error of the environment)
            for i, outcome in zip(indexes, outcomes, strict=True):
                out[i] = outcome
                if loaded is not None:
                    loaded(i, outcome)

        def told(g: int, worker: int, i: int, n: int) -> None:  # job i of group g has n segments left
            if segments is not None:
                segments(groups[g][i], worker, n)

        level = logging.getLogger("mploader").getEffectiveLevel()
        groups = groups_of([partition_cost(j) for j in jobs], self.workers)
        for g in self._run(jobs, groups, cfg, level, take, told):  # their worker died twice, or none started
            self.loaded_in_parent += len(groups[g])  # loaded here, as worker 0 (no worker is left)
            take(groups[g], load_group([jobs[i] for i in groups[g]], cfg, level,
                                       functools.partial(told, g, 0), self.mutations))
        missing = [jobs[i].dir for i, o in enumerate(out) if o is None]
        if missing:  # a bug of this module: never hand the caller a list out of step with its jobs
            raise RuntimeError(f"no outcome for {len(missing)} partition(s), e.g. {missing[0]}")
        return [o for o in out if o is not None]

    def _run(self, jobs: list[PartitionJob], groups: list[list[int]], cfg: LoaderConfig, level: int,
             take: Callable[[list[int], Group], None], told: Callable[[int, int, int, int], None]) -> list[int]:
        """Every group loaded by the workers, in order, one at a time a worker; a worker that died is replaced
        and its group given to another once; the groups left to the parent (their worker died twice, or no worker
        could be started: a worker that cannot start is not an error while another goes on)."""
        from multiprocessing.connection import wait

        todo = deque(range(len(groups)))
        deaths = [0] * len(groups)
        left: list[int] = []
        workers: list[_Worker] = []

        idle_deaths = 0  # in a row, of workers that never took a group: the workers cannot start at all

        def gone(w: _Worker) -> None:
            """``w`` died: reaped, replaced at the next turn; a group it held is given to another, or the parent."""
            w.kill()
            workers.remove(w)
            self.worker_deaths += 1
            if w.group is None:  # it had answered, or never took a group: nothing lost
                log.warning("partition-loading worker %d %s after its last answer", w.process.pid, _died(w.process))
                return
            g = w.group
            deaths[g] += 1
            self.changed_dirs.update(jobs[i].dir for i in groups[g])  # it may have changed them (a failure's note)
            again = "gives them to another" if deaths[g] < 2 else "loads them itself"
            log.warning("partition-loading worker %d %s while loading %s; the parent %s", w.process.pid,
                        _died(w.process), ", ".join(str(jobs[i].tp) for i in groups[g]), again)
            (todo.appendleft if deaths[g] < 2 else left.append)(g)

        def assign(w: _Worker) -> None:
            """The next group to idle ``w``."""
            nonlocal idle_deaths
            w.group = todo.popleft()
            try:
                w.conn.send((w.group, [jobs[i] for i in groups[w.group]], cfg, level))
            except OSError:  # it died idle: the group was never started
                todo.appendleft(w.group)
                w.group = None
                gone(w)
                idle_deaths += 1
                if idle_deaths > 2 * self.workers:  # none starts: the parent loads what is left
                    left.extend(todo)
                    todo.clear()

        warned = False  # of a worker that could not start (fork: EAGAIN, ENOMEM), once

        def start_workers() -> None:
            """Workers up to the count; a forked one is given its first group as it starts, so that the first do
            not wait for the others' forks (16 took 90 ms on 2 CPUs, the first with multiprocessing's import).  A
            spawned one reads its pipe only once it has imported mploader: a group larger than the pipe's buffer
            would hold the next start until then, so those are given theirs once all are started."""
            nonlocal warned
            while todo and len(workers) < min(self.workers, len(groups)):
                try:
                    number = min(set(range(self.workers)) - {w.number for w in workers})
                    workers.append(_Worker(self.start, number, self.mutations))
                except OSError as e:
                    if not warned:
                        log.warning("cannot start a partition-loading worker (%s); %s", e,
                                    f"going on with {len(workers)}" if workers else "the parent loads the partitions")
                        warned = True
                    if not workers:  # none to go on with: the parent loads what is left, as inline
                        left.extend(todo)
                        todo.clear()
                    return
                if self.start == "fork":
                    assign(workers[-1])

        done = False
        try:
            while todo or any(w.group is not None for w in workers):
                start_workers()
                for w in list(workers):
                    if w.group is None and todo:
                        assign(w)
                busy = [w for w in workers if w.group is not None]
                if not busy:
                    continue
                ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
                for w in busy:
                    answer = None
                    if w.conn in ready:
                        with contextlib.suppress(EOFError, OSError):  # else it died before it answered
                            answer = w.conn.recv()
                    if answer is not None and answer[0] == SEGMENTS:
                        assert w.group is not None
                        told(w.group, w.number, answer[1], answer[2])
                        continue  # what follows (its answer, or its end) is read at the next turn
                    if answer is not None:
                        idle_deaths = 0
                        g, w.group = w.group, None
                        assert g is not None and answer[:2] == (DONE, g)
                        take(groups[g], answer[2:])
                        if w.process.sentinel in ready or not w.process.is_alive():  # answered, then died
                            gone(w)
                    elif w.conn in ready or w.process.sentinel in ready:
                        gone(w)  # died mid-group: what it wrote is what a killed load leaves
            done = True
        finally:  # also on Ctrl-C (a second one too): no worker may still write when the caller releases the locks
            for w in workers:
                if done:  # idle: told to go
                    with contextlib.suppress(OSError):
                        w.conn.send(None)
                elif w.process.is_alive():
                    w.process.kill()  # every worker first, then the joins
            for w in workers:
                w.process.join()
                w.conn.close()
        return left


__all__ = ["AUTO_MIN_SECONDS", "COST_PER_SEGMENT", "GROUPS_PER_WORKER", "LoadsHere", "ProcessPartitions",
           "auto_workers", "groups_of", "inline_seconds", "load_group", "partition_cost", "surely_workers"]
