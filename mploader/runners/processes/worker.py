"""A partition-loading worker: a group of jobs in, their outcomes and log records out."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mploader.config import LoaderConfig
from mploader.disk import NO_HOOK, MutationHook
from mploader.recovery.job import PartitionJob
from mploader.runners.here import PartitionsHere, collected
from mploader.runners.processes.messages import STOP, GroupLoaded, LoadGroup, SegmentsLeft

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

WORKER_NAME = "mploader-load"  # a worker's process name (the scanning pool's are mploader-scan)
#: a worker tells the parent of a partition's segments left to recover when its recovery starts, when it ends, and
#: in between at most this often (each message costs the parent CPU: perf/README.md)
SEGMENTS_EVERY_SECONDS = 0.05


def load_group(group: int, jobs: Sequence[PartitionJob], cfg: LoaderConfig, level: int,
               segments: Callable[[int, int], None] = lambda i, n: None, mutations: MutationHook = NO_HOOK
               ) -> GroupLoaded:
    """Each job's load, in order (:class:`~mploader.runners.here.PartitionsHere`), synced at the end; the mploader
    log records at ``level`` and above go back with the outcomes instead of to this process's handlers.
    ``segments``: told of the segments left to recover in job ``i`` (its position in ``jobs``) as its load goes;
    ``mutations``: the disk's hook."""
    with collected(level) as collect:
        here = PartitionsHere(cfg, mutations)
        outcomes = [here.load(job, functools.partial(segments, i)) for i, job in enumerate(jobs)]
        sync_failed = None
        try:
            here.finish()  # durable before the parent hears of them (its --resumable recovery points)
        except OSError as e:
            sync_failed = e
        return GroupLoaded(group, outcomes, collect.records, here.disk.changed_dirs(), sync_failed, here.work)


def serve(conn: Connection, parent_pid: int, forked: bool, mutations: MutationHook = NO_HOOK) -> None:
    """A worker's loop: a :class:`LoadGroup` in, its :class:`GroupLoaded` out, until the parent says
    :data:`STOP` or goes."""
    from mploader.engine.worker import init_worker  # the scanning pool's: not imported by a load that starts none

    init_worker(parent_pid, None, forked, WORKER_NAME)
    while True:
        try:
            task: LoadGroup | None = conn.recv()
        except EOFError:  # the parent closed its end
            return
        if task is STOP:
            return
        conn.send(load_group(task.group, task.jobs, task.cfg, task.level, _Reporter(conn), mutations))


class _Reporter:
    """A worker's ``segments`` callback: :class:`SegmentsLeft` to the parent, each partition's first and its 0,
    and between them at most one each :data:`SEGMENTS_EVERY_SECONDS`."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.job = -1
        self.sent = 0.0

    def __call__(self, i: int, n: int) -> None:
        now = time.monotonic()
        if i != self.job or n == 0 or now - self.sent >= SEGMENTS_EVERY_SECONDS:
            self.job, self.sent = i, now
            self.conn.send(SegmentsLeft(i, n))


__all__ = ["SEGMENTS_EVERY_SECONDS", "WORKER_NAME", "load_group", "serve"]
