"""Kafka's own shape: ``num.recovery.threads.per.data.dir`` loading threads a data dir, in this process, each
partition's whole-segment scans taken from a Phase 1 engine (:mod:`mploader.engine`)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from mploader.config import LoaderConfig
from mploader.disk import Disk
from mploader.engine.base import Engine
from mploader.engine.plan import DirPlan, Partition, PlannedScans
from mploader.recovery.job import PartitionJob, load_partition
from mploader.result import LoadStats
from mploader.runners.base import NO_EVENTS, Outcome, PartitionRunner, RunEvents


class LoadingThreads(PartitionRunner):
    """``threads_per_dir`` threads a data dir (Kafka's ``log-recovery-<dir>`` pool), loading on ``disk`` with
    ``engine``'s scans; the runner owns the engine and closes it."""

    reports_scans = True  # the engine's scans reach the load's progress as they complete
    elsewhere = False

    def __init__(self, engine: Engine, disk: Disk, threads_per_dir: int) -> None:
        self.engine = engine
        self.disk = disk
        self.threads_per_dir = threads_per_dir
        self.gauges_per_dir = threads_per_dir

    @property
    def description(self) -> str:
        return f"{self.threads_per_dir} loading thread(s) a data dir in this process"

    @property
    def planned(self) -> Mapping[str, PlannedScans]:
        return self.engine.planned

    def order(self, plans: Sequence[DirPlan]) -> Mapping[str, list[Partition]]:
        return self.engine.prefetch(plans)

    def account(self, stats: LoadStats) -> None:
        """The engine counted its scans in the load's stats as they went (it was built with them)."""
        stats.workers_per_dir, stats.worker_start = self.engine.workers_per_dir, self.engine.start

    def close(self, kill: bool = False) -> None:
        self.engine.close(kill=kill)

    def run(self, jobs: Sequence[PartitionJob], cfg: LoaderConfig, events: RunEvents = NO_EVENTS) -> list[Outcome]:
        cancel = threading.Event()  # set on Ctrl-C: loading threads stop at their next segment
        pools: list[ThreadPoolExecutor] = []
        futures: list[Future[Outcome]] = []
        by_dir = _by_dir(jobs)
        try:
            for data_dir, indexes in by_dir.items():
                numbers = _ThreadNumbers()
                pool = ThreadPoolExecutor(max_workers=self.threads_per_dir,
                                          thread_name_prefix=f"log-recovery-{data_dir}", initializer=numbers.take)
                pools.append(pool)  # before its first thread starts: an interrupt from here on stops it
                futures += [pool.submit(self._load, i, jobs[i], cfg, events, cancel, numbers) for i in indexes]
            wait(futures)
        except KeyboardInterrupt:  # also while the partitions are being submitted (a thread may have started)
            cancel.set()
            for pool in pools:
                pool.shutdown(wait=False, cancel_futures=True)
            self.engine.close(kill=True)  # a thread waiting for a worker's scan stops at once
            for pool in pools:  # the caller releases the dirs' locks next: no loading thread may still write
                pool.shutdown(wait=True)
            raise
        for pool in pools:
            pool.shutdown()
        order = [i for indexes in by_dir.values() for i in indexes]
        outcomes: list[Outcome | None] = [None] * len(jobs)
        for i, future in zip(order, futures, strict=True):
            outcomes[i] = future.result()
        return [o for o in outcomes if o is not None]

    def _load(self, i: int, job: PartitionJob, cfg: LoaderConfig, events: RunEvents, cancel: threading.Event,
              numbers: _ThreadNumbers) -> Outcome:
        worker = numbers.mine()
        t0 = time.perf_counter()
        outcome: Outcome
        try:
            loaded, ctx = load_partition(job, cfg, self.disk, self.engine.source(job.data_dir),
                                         lambda n: events.segments_left(i, worker, n), cancel)
            outcome = (loaded, ctx.bytes_scanned)
        except BaseException as e:  # taken as Kafka takes a recovery thread's failure: once all are done
            outcome = e
        events.loaded(i, outcome, time.perf_counter() - t0)
        return outcome


class _ThreadNumbers:
    """A pool's threads numbered 0, 1, ... as they start (Kafka's recovery threads' ``threadNum``)."""

    def __init__(self) -> None:
        self._next = itertools.count()
        self._local = threading.local()

    def take(self) -> None:
        self._local.number = next(self._next)

    def mine(self) -> int:
        number: int = self._local.number
        return number


def _by_dir(jobs: Sequence[PartitionJob]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        out.setdefault(job.data_dir, []).append(i)
    return out


__all__ = ["LoadingThreads"]
