"""The parent's side: worker processes loading groups of whole partitions.

::

    parent (ProcessPartitions.run)                          worker processes (serve), a pipe each
    ---------------------------------------------           --------------------------------------------
    jobs in groups, the costliest first (groups.py);  ──►   LoadGroup: each job's load_partition, its scans
      one group a worker at a time                            made in the worker; then one sync (Disk.flush)
    events.segments_left(job, worker number, n)      ◄──    SegmentsLeft, as a partition recovers
    events.loaded(job, outcome) for each; log         ◄──    GroupLoaded: outcomes, log records, dirs changed,
      records replayed here; work counted                     the sync's error, what it scanned and wrote
    a worker that died (its sentinel, no answer):
      a new one; its group to another, or, if that
      one dies too, to the parent

What a group answers is durable: the parent hears of a partition only after its worker synced it, so the recovery
points a ``--resumable`` load advances cover durable files (docs/architecture.md, "Durability").  A worker that
dies mid-partition leaves what a killed load leaves; loading that partition again from the same job reaches the
load's outcome.  Ctrl-C (or any exception while waiting) kills the workers before the caller releases the data
dirs' locks.  The pool is this module's own, not loky's: a dead worker is known by its process, only its group is
loaded again, and the others go on (a loky pool breaks as a whole); forked, its workers need no resource tracker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mploader.config import LoaderConfig
from mploader.disk import NO_HOOK, MutationHook
from mploader.engine import worker_start
from mploader.recovery.job import PartitionJob
from mploader.result import LoadStats
from mploader.runners.base import NO_EVENTS, Outcome, PartitionRunner, RunEvents
from mploader.runners.here import replay
from mploader.runners.processes.groups import groups_of, partition_cost
from mploader.runners.processes.messages import STOP, GroupLoaded, LoadGroup, SegmentsLeft
from mploader.runners.processes.worker import WORKER_NAME, load_group, serve

if TYPE_CHECKING:  # multiprocessing is imported when workers start: a load that starts none does without it
    from multiprocessing.process import BaseProcess

log = logging.getLogger("mploader.runners.processes")


class ProcessPartitions(PartitionRunner):
    """``workers`` processes, each loading whole partitions (Phase 1 and Phase 2); ``start``: "fork" or "spawn"
    (:func:`mploader.engine.worker_start`); ``mutations``: the hook of every worker's disk (a spawned worker's is a
    pickled copy)."""

    def __init__(self, workers: int, start: str | None = None, mutations: MutationHook = NO_HOOK) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers
        self.start = worker_start(start)
        self.mutations = mutations
        self.worker_deaths = 0  # workers that died in this runner's loads
        self.loaded_in_parent = 0  # jobs the parent loaded: their group's worker died twice, or none started
        self._changed: set[str] = set()
        self.work = LoadStats()  # what the last run's loads scanned and wrote

    @property
    def description(self) -> str:
        return f"{self.workers} worker process{'es' if self.workers > 1 else ''} ({self.start}ed), whole partitions"

    @property
    def changed_dirs(self) -> frozenset[str]:
        return frozenset(self._changed)

    def account(self, stats: LoadStats) -> None:
        super().account(stats)
        stats.add_work(self.work)
        stats.worker_start = self.work.worker_start

    def run(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, events: RunEvents = NO_EVENTS) -> list[Outcome]:
        self._changed = set()
        self.work = LoadStats(worker_start=self.start)
        pool = _Pool(self, jobs, cfg, events)
        pool.run()
        for g in pool.left:  # their worker died twice, or none started: loaded here, as worker 0
            self.loaded_in_parent += len(pool.groups[g])
            pool.take(load_group(g, [jobs[i] for i in pool.groups[g]], cfg, pool.level, pool.told(g, 0),
                                 self.mutations))
        return pool.outcomes()


class _Worker:
    """One worker process, its end of the pipe, its number (0 to workers - 1: a worker that takes a dead one's place
    takes its number) and the group it is loading (None: idle)."""

    def __init__(self, start: str, number: int, mutations: MutationHook) -> None:
        self.number = number
        import multiprocessing

        ctx: Any = multiprocessing.get_context(start)  # typeshed's BaseContext has no Process
        self.conn, child = ctx.Pipe()
        self.process: BaseProcess = ctx.Process(target=serve, args=(child, os.getpid(), start == "fork", mutations),
                                                name=WORKER_NAME, daemon=True)
        try:
            self.process.start()
        except BaseException:  # no process (fork's EAGAIN, ENOMEM): nor its pipe
            self.conn.close()
            raise
        finally:
            child.close()
        self.group: int | None = None

    def died(self) -> str:
        """How it ended, in words: the signal that killed it, or its exit status."""
        code = self.process.exitcode
        if code is not None and code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"


class _Pool:
    """One run's state: the groups, the workers, what each group's workers did, what is left to the parent."""

    def __init__(self, runner: ProcessPartitions, jobs: Sequence[PartitionJob], cfg: LoaderConfig,
                 events: RunEvents) -> None:
        self.runner, self.jobs, self.cfg, self.events = runner, jobs, cfg, events
        self.level = logging.getLogger("mploader").getEffectiveLevel()
        self.groups = groups_of([partition_cost(j) for j in jobs], runner.workers)
        self.todo = deque(range(len(self.groups)))
        self.deaths = [0] * len(self.groups)  # per group: its workers that died
        self.left: list[int] = []  # groups the parent loads
        self.workers: list[_Worker] = []
        self.idle_deaths = 0  # in a row, of workers that never took a group: the workers cannot start at all
        self.warned = False  # of a worker that could not start (fork: EAGAIN, ENOMEM), once
        self._out: list[Outcome | None] = [None] * len(jobs)

    def take(self, answer: GroupLoaded) -> None:
        """A group's answer: its outcomes told, its records logged here, its work counted."""
        self.runner._changed.update(answer.changed_dirs)
        self.runner.work.add_work(answer.work)
        replay(answer.records)
        for i, outcome in zip(self.groups[answer.group], answer.final_outcomes(), strict=True):
            self._out[i] = outcome
            self.events.loaded(i, outcome)

    def told(self, group: int, worker: int) -> Callable[[int, int], None]:
        """The ``segments`` callback of ``group``'s jobs loaded by ``worker``."""
        return lambda i, n: self.events.segments_left(self.groups[group][i], worker, n)

    def outcomes(self) -> list[Outcome]:
        missing = [self.jobs[i].dir for i, o in enumerate(self._out) if o is None]
        if missing:  # a bug of this module: never hand the caller a list out of step with its jobs
            raise RuntimeError(f"no outcome for {len(missing)} partition(s), e.g. {missing[0]}")
        return [o for o in self._out if o is not None]

    def run(self) -> None:
        """Every group loaded by the workers, one at a time a worker; on any exit, no worker left running."""
        from multiprocessing.connection import wait

        done = False
        try:
            while self.todo or any(w.group is not None for w in self.workers):
                self.start_workers()
                for w in list(self.workers):
                    if w.group is None and self.todo:
                        self.assign(w)
                busy = [w for w in self.workers if w.group is not None]
                if busy:
                    ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
                    for w in busy:
                        self.hear(w, ready)
            done = True
        finally:  # also on Ctrl-C (a second one too): no worker may still write when the caller releases the locks
            self.stop(done)

    def hear(self, w: _Worker, ready: list[Any]) -> None:
        """What ``w`` said or did since the last turn: a count, its group's answer, or its end."""
        answer: GroupLoaded | SegmentsLeft | None = None
        if w.conn in ready:
            with contextlib.suppress(EOFError, OSError):  # else it died before it answered
                answer = w.conn.recv()
        if isinstance(answer, SegmentsLeft):
            assert w.group is not None
            self.events.segments_left(self.groups[w.group][answer.job], w.number, answer.count)
            return  # what follows (its answer, or its end) is read at the next turn
        if isinstance(answer, GroupLoaded):
            assert answer.group == w.group
            self.idle_deaths = 0
            w.group = None
            self.take(answer)
            if w.process.sentinel in ready or not w.process.is_alive():  # answered, then died
                self.gone(w)
        elif w.conn in ready or w.process.sentinel in ready:
            self.gone(w)  # died mid-group: what it wrote is what a killed load leaves

    def start_workers(self) -> None:
        """Workers up to the count; a forked one is given its first group as it starts, so that the first do not
        wait for the others' forks.  A spawned one reads its pipe only once it has imported mploader: a group
        larger than the pipe's buffer would hold the next start until then, so those are given theirs later."""
        while self.todo and len(self.workers) < min(self.runner.workers, len(self.groups)):
            try:
                number = min(set(range(self.runner.workers)) - {w.number for w in self.workers})
                self.workers.append(_Worker(self.runner.start, number, self.runner.mutations))
            except OSError as e:
                self.cannot_start(e)
                return
            if self.runner.start == "fork":
                self.assign(self.workers[-1])

    def cannot_start(self, error: OSError) -> None:
        if not self.warned:
            log.warning("cannot start a partition-loading worker (%s); %s", error,
                        f"going on with {len(self.workers)}" if self.workers else "the parent loads the partitions")
            self.warned = True
        if not self.workers:  # none to go on with: the parent loads what is left, as inline
            self.left.extend(self.todo)
            self.todo.clear()

    def assign(self, w: _Worker) -> None:
        """The next group to idle ``w``."""
        w.group = self.todo.popleft()
        try:
            w.conn.send(LoadGroup(w.group, [self.jobs[i] for i in self.groups[w.group]], self.cfg, self.level))
        except OSError:  # it died idle: the group was never started
            self.todo.appendleft(w.group)
            w.group = None
            self.gone(w)
            self.idle_deaths += 1
            if self.idle_deaths > 2 * self.runner.workers:  # none starts: the parent loads what is left
                self.left.extend(self.todo)
                self.todo.clear()

    def gone(self, w: _Worker) -> None:
        """``w`` died: reaped, replaced at the next turn; a group it held is given to another, or the parent."""
        if w.process.is_alive():
            w.process.kill()
        w.process.join()
        w.conn.close()
        self.workers.remove(w)
        self.runner.worker_deaths += 1
        if w.group is None:  # it had answered, or never took a group: nothing lost
            log.warning("partition-loading worker %d %s after its last answer", w.process.pid, w.died())
            return
        g = w.group
        self.deaths[g] += 1
        self.runner._changed.update(self.jobs[i].dir for i in self.groups[g])  # it may have changed them
        again = "gives them to another" if self.deaths[g] < 2 else "loads them itself"
        log.warning("partition-loading worker %d %s while loading %s; the parent %s", w.process.pid, w.died(),
                    ", ".join(str(self.jobs[i].tp) for i in self.groups[g]), again)
        (self.todo.appendleft if self.deaths[g] < 2 else self.left.append)(g)

    def stop(self, done: bool) -> None:
        """Idle workers told to go once all is done; otherwise every worker killed first, then the joins."""
        for w in self.workers:
            if done:
                with contextlib.suppress(OSError):
                    w.conn.send(STOP)
            elif w.process.is_alive():
                w.process.kill()
        for w in self.workers:
            w.process.join()
            w.conn.close()


__all__ = ["ProcessPartitions"]
