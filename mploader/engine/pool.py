"""The process-pool engine: N loky workers per data dir scan segments ahead of Phase 2.

Data flow of the process-pool engine::

    parent (Phase 2 threads)                        worker processes (N per data dir, loky; forked
                                                    from the parent on Linux: mploader.engine.worker_start)
    ------------------------                        ---------------------------------------
    prefetch(): plan the scans Phase 2 will ask
      for (recovery range of unclean partitions,
      segments without .index), biggest first,
      big segments cut into chunks at confirmed
      offset-index positions; a read-ahead thread
      asks the disk for them in that order
      (mploader.engine.readahead)
    per call submitted (a chunk, or small whole ──►  for each of its chunks: scan the .log range, read
      segments together: GROUP_BYTES), a block        or mapped (CRC, headers, control markers), write
      in /dev/shm per chunk, sized for the worst      the batch table into its block (pwritev)
      case (sparse: a file no one maps,          ◄──  return a small descriptor per chunk (stop, valid
      mploader.engine.block)                           bytes, row count): nothing per batch is pickled
    scan(dir, task) (Phase 2 asks): wait for the future,
      read the rows out (preadv), unlink the block, stitch
      chunks, submit the next ones (at most 2 calls per
      worker not yet collected); a crashed worker's
      task is retried on a fresh pool, then scanned
      here; a task never prefetched or not yet
      submitted, or a stale file, is scanned here

The parent creates and unlinks every block; workers only write into them.

A parent killed outright (``kill -9``, the OOM killer) leaves nothing running and, after the next pool load's
start, nothing in /dev/shm: each worker exits when its parent dies (``PR_SET_PDEATHSIG``, see
:func:`mploader.engine.worker.exit_with_parent`), loky's resource tracker then sees its pipe close and exits
too; the blocks are named after the load (``mploader-<pid>-<start>-<load>-<seq>``) and every
pool load first removes those of dead loads and their loky semaphores
(:func:`mploader.engine.cleanup.remove_orphaned_blocks`).
Phase 2's results never depend on whether or where a scan ran.

Failures.  A worker that died (killed, crashed, out of memory: loky's ``BrokenProcessPool``, caught as its base
``concurrent.futures.BrokenExecutor`` so that loky is imported only when a load starts its first pool, or a
``MemoryError`` raised in it) has its task retried once on a fresh pool, then scanned in the parent:
the load neither hangs nor fails because of it (``stats.worker_restarts``, ``stats.inline_fallbacks``).
An ``OSError`` of the file comes back as :class:`~mploader.engine.worker.ReadFailed` and is raised
again, as an inline scan would raise it.  Any other exception raised by the scan code is a bug: it is
raised in the parent as it is, with the worker's traceback as its ``__cause__`` (loky's
``_RemoteTraceback``), and not retried.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import pickle
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import BrokenExecutor, CancelledError, Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mploader.engine import ONE_BLAS_THREAD, worker_start
from mploader.engine.base import Engine
from mploader.engine.block import Block
from mploader.engine.chunks import (
    MIN_ENTRY_BYTES,
    FileStat,
    TaskKey,
    chunk_tasks,
    file_stat,
    plan_cuts,
    stitch_whole,
    task_key,
)
from mploader.engine.cleanup import claim, load_prefix, release, remove_orphaned_blocks
from mploader.engine.plan import DirPlan, Partition, PlannedScans
from mploader.engine.throttle import wait_turn
from mploader.engine.worker import (
    SLOT_BYTES,
    Grown,
    NoSpace,
    ReadFailed,
    WorkerResult,
    arrays_from_block,
    init_worker,
    scan_many,
    worker_scan,
)
from mploader.errors import LoadInterrupted
from mploader.metrics import REMAINING_SEGMENTS_TO_LOAD, MetricsRegistry
from mploader.progress import NO_PROGRESS, Progress
from mploader.result import LoadStats
from mploader.scan import SegmentScan, SegmentTask, Stop, scan_segment
from mploader.scan.audit import AuditTask, SegmentAudit, audit_segment

if TYPE_CHECKING:
    from loky import ProcessPoolExecutor

    from mploader.engine.adaptive import Adaptive

log = logging.getLogger(__name__)

PARENT_HEAD_BYTES = 256 * 1024 * 1024  # see PoolEngine.parent_head_bytes
# Small whole segments go to a worker several to a call (scan_many), in Phase 2's order, up to these: a loky call and
# its result cost the parent ~0.6 ms of CPU (its queues' threads, their wake-ups), more than scanning a 100 KB segment
# (perf/README.md, "Small segments handed over together").  A batch takes one slot of the window below.
GROUP_BYTES = 8 * 1024 * 1024
GROUP_TASKS = 32
# Calls (a chunk, or a batch of small whole segments) submitted and not yet collected, per worker of a data dir: one
# running, one queued behind it. This bounds the shared memory in flight (see PoolEngine): blocks are created as
# chunks are submitted.
IN_FLIGHT_PER_WORKER = 2


def pickled_size(obj: object) -> int:
    return len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


@dataclass(slots=True)
class _Batch:
    """The chunks one worker call scans (:data:`GROUP_BYTES`): one slot of the dir's window until the last is
    collected."""

    left: int


@dataclass(slots=True)
class _Chunk:
    task: SegmentTask
    block: Block | None  # None: /dev/shm had no room for it (the parent scans the chunk)
    future: Future[list[WorkerResult]]  # its batch's call: the results of all its chunks, in order
    index: int  # this chunk's result in it
    batch: _Batch
    executor: ProcessPoolExecutor
    retried: bool = False
    not_before: float = 0.0  # its turn in the dir's read budget (time.monotonic; mploader.engine.throttle)


@dataclass(slots=True)
class _Pending:
    stat: FileStat  # at planning time
    todo: list[SegmentTask]  # its chunks not yet submitted, in order
    chunks: list[_Chunk] = field(default_factory=list)  # those submitted, in order (before every todo one)


class PoolEngine(Engine):
    """Phase 1 in N loky worker processes per data dir.

    Shared memory in flight is bounded: a data dir has at most ``IN_FLIGHT_PER_WORKER * workers`` calls
    submitted and not yet collected (or the chunks of one cut segment, if more: a segment once started is
    submitted whole), each one chunk or a batch of small whole segments of at most ``GROUP_BYTES`` in all, each
    chunk with one block, and a block takes memory only for the rows its worker writes (80 bytes of table and 56 of
    draft per batch, and 20 bytes of rebuilt indexes per indexed batch: about 13% of the chunk's bytes for ~1 KB
    batches, at most 156/26 of them for 26-byte legacy entries).  Chunks are at most the dir's piece size
    (:func:`mploader.engine.chunks.piece_bytes`).  When /dev/shm cannot hold a worker's rows, its write fails with
    ``ENOSPC`` (:class:`mploader.engine.block.Block`) and the parent scans that chunk itself: a small /dev/shm
    makes a load slower, never wrong.

    A read budget (:mod:`mploader.engine.throttle`) books each chunk's turn at submission and its worker waits for
    it; adaptive workers (:mod:`mploader.engine.adaptive`) start with the controller's first count and grow with it
    up to ``workers`` (loky starts the rest at the next submission), and a semaphore shared with them lets only
    the controller's count scan at once.
    """

    # the parent scans the first segments of Phase 2's order itself, up to this many bytes, instead of submitting
    # them: its scans start at once while loky starts the workers (perf/README.md, "The parent's head of the order")
    parent_head_bytes = PARENT_HEAD_BYTES

    def __init__(self, stats: LoadStats, workers: int, data_dirs: Sequence[str], metrics: MetricsRegistry | None,
                 progress: Progress | None = NO_PROGRESS, chunk_bytes: int | None = None,
                 read_ahead_bytes: int | str = "auto", adaptive: bool = False, start: str | None = None, *,
                 max_read_bytes_per_sec: int | None = None, planned: Mapping[str, PlannedScans] | None = None,
                 disk_order: bool | None = None):
        super().__init__(stats, progress, read_ahead_bytes, max_read_bytes_per_sec=max_read_bytes_per_sec,
                         planned=planned, disk_order=disk_order)
        self.workers_per_dir = workers
        self.metrics = metrics
        self.chunk_bytes = chunk_bytes  # None: piece_bytes() of each dir; a number: cut at that size
        self.start = worker_start(start)  # how its workers start: "fork" or "spawn" (mploader.engine.worker_start)
        self._executors: dict[str, ProcessPoolExecutor] = {}
        self._pending: dict[TaskKey, _Pending] = {}
        self._queue: dict[str, deque[_Pending]] = {d: deque() for d in data_dirs}  # with chunks to submit
        self._in_flight = dict.fromkeys(data_dirs, 0)  # chunks submitted and not yet freed
        self._submitting = {d: threading.Lock() for d in data_dirs}  # one top-up at a time per data dir
        self._parent_scans: set[TaskKey] = set()  # tasks the parent keeps (parent_head_bytes)
        self._remaining: dict[str, int] = {}
        # "adaptive": the workers started are a cap; a gate per dir lets as many scan as pay (engine.adaptive)
        self.adaptive: Adaptive | None = None
        if adaptive:  # imported only then (it brings the host's device probes)
            from mploader.engine.adaptive import Adaptive

            self.adaptive = Adaptive(workers, list(data_dirs), self._closed)
        self._blocks: dict[str, Block] = {}
        # blocks are named after the load (mploader.engine.cleanup): what a killed load leaves, the next removes
        try:
            remove_orphaned_blocks()
        except (OSError, ValueError) as e:  # never a reason to fail this load
            log.warning("could not look for shared memory left by killed loads: %s", e)
        self._name = load_prefix()
        self._seq = itertools.count()
        self._marker = claim(self._name)  # the load's owner marker, locked while it runs
        self._gauges: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        for d in data_dirs:
            if metrics is not None:
                for i in range(workers):
                    tags = metrics.tags(dir=d, threadNum=i)
                    metrics.register(REMAINING_SEGMENTS_TO_LOAD, tags, 0)
                    self._gauges.append((REMAINING_SEGMENTS_TO_LOAD, tags))

    # ---- pools and blocks ----------------------------------------------------------------------

    def _executor(self, data_dir: str, fresh: bool = False) -> ProcessPoolExecutor:
        ex = self._executors.get(data_dir)
        if ex is None or fresh:
            if ex is not None:  # a broken pool: its workers are gone; join its manager so it cleans up
                ex.shutdown(wait=True, kill_workers=True)
            gate = None if self.adaptive is None else self.adaptive.gates[data_dir].semaphore(fresh=ex is not None)
            import multiprocessing

            from loky import ProcessPoolExecutor

            forked = self.start == "fork"
            ex = ProcessPoolExecutor(max_workers=self.workers_per_dir, env=ONE_BLAS_THREAD, initializer=init_worker,
                                     initargs=(os.getpid(), gate, forked),
                                     context=multiprocessing.get_context("fork") if forked else None)
            if self.adaptive is not None:  # started with the workers the count needs so far (engine.adaptive)
                self.adaptive.adopt(data_dir, ex)
            self._executors[data_dir] = ex
            if self._closed.is_set():  # closed meanwhile (another thread: a cancel): close() may not have seen it
                ex.shutdown(wait=True, kill_workers=True)
                raise LoadInterrupted("the engine was closed")
        return ex

    def _new_block(self, nbytes_range: int) -> tuple[Block, int]:
        capacity = nbytes_range // MIN_ENTRY_BYTES + 1
        block = Block.create(f"{self._name}-{next(self._seq)}", max(1, capacity * SLOT_BYTES))
        self._blocks[block.name] = block  # sparse in /dev/shm: only the rows written take memory
        return block, capacity

    def _free(self, block: Block | None) -> None:
        if block is None:
            return
        with self.lock:
            owned = self._blocks.pop(block.name, None) is not None
        if owned:
            block.unlink()

    def _submit(self, data_dir: str, tasks: Sequence[SegmentTask],
                broken: ProcessPoolExecutor | None = None) -> list[_Chunk]:
        """Hand ``tasks`` (one chunk, or a batch of small whole segments) to a worker in one call, a block each."""
        ends = [t.end if t.end is not None else os.path.getsize(t.path) for t in tasks]
        budget = self.budget(data_dir)
        # each chunk's turn in the read budget: its worker waits for it
        turns = [0.0 if budget is None else budget.reserve(end - t.start) for t, end in zip(tasks, ends)]
        batch = _Batch(len(tasks))
        items: list[tuple[SegmentTask, str, int, float]] = []
        blocks: list[Block | None] = []
        with self.lock:
            for t, end, not_before in zip(tasks, ends, turns):
                try:
                    block, capacity = self._new_block(max(0, end - t.start))
                except OSError as e:  # /dev/shm full: the parent scans the chunk (never the segment's I/O error,
                    log.info("%s: no shared memory for %s (%s); the parent will scan it", data_dir, t.path, e)
                    blocks.append(None)  # which recovery would answer by truncating)
                    continue
                blocks.append(block)
                items.append((t, block.name, capacity, not_before))
            # a pool whose worker died is broken for every task: replace it once
            ex = self._executor(data_dir, fresh=broken is not None and self._executors.get(data_dir) is broken)
            if items:
                try:
                    fut = ex.submit(scan_many, worker_scan, items)
                except BrokenExecutor:  # the replacement broke too (another task's worker died)
                    ex = self._executor(data_dir, fresh=True)
                    fut = ex.submit(scan_many, worker_scan, items)
        chunks: list[_Chunk] = []
        at = 0  # the chunk's result in the call's
        handed = 0  # the bytes of the chunks the call scans
        for t, end, not_before, held in zip(tasks, ends, turns, blocks):
            if held is None:
                done: Future[list[WorkerResult]] = Future()
                done.set_result([NoSpace(os.getpid(), 0)])
                self._read_ahead_done(data_dir, t)
                chunks.append(_Chunk(t, None, done, 0, batch, ex, not_before=not_before))
                continue
            chunks.append(_Chunk(t, held, fut, at, batch, ex, not_before=not_before))
            at += 1
            handed += end - t.start
        if items:
            read_ahead = self._read_ahead.get(data_dir)
            if read_ahead is not None:  # the call is done (or the parent takes its tasks): not ahead any more
                fut.add_done_callback(lambda _f: read_ahead.done(handed))
            if self.adaptive is not None:  # what the adaptive pool measures: the bytes its workers scan, a chunk a
                # call (an adaptive load's calls are never batches: _groupable)
                meter = self.adaptive.meter
                fut.add_done_callback(lambda f: None if f.cancelled() or f.exception()
                                      else meter.scanned(data_dir, handed))
        return chunks

    # ---- prefetch ------------------------------------------------------------------------------------

    def prefetch(self, dirs: Sequence[DirPlan]) -> dict[str, list[Partition]]:
        order: dict[str, list[Partition]] = {}
        for plan in dirs:
            if (plan.clean and not plan.scan_all and plan.clean_scans is not None and plan.clean_scans.unindexed == 0
                    and plan.data_dir not in self.planned):
                # every segment has its .index: not planned, as the inline engine plans no clean dir (the plan lists
                # every partition again and reads each .txnindex: 40 ms for 3,067 segments and 390 .txnindex files).
                # A .txnindex fails its sanity check rarely: a segment recovered for it is scanned by the parent
                order[plan.data_dir] = list(plan.partitions)
                self._update_gauges(plan.data_dir)
                continue
            planned = self.plan(plan)  # in Phase 2's order: the biggest partitions first, or the disk's
            gated = self.one_reader(plan)
            if gated:
                planned = self.in_disk_order(plan.data_dir, planned)
            order[plan.data_dir] = [part for part, _ in planned]
            budget = self.budget(plan.data_dir)
            # with a budget every scan is in pieces of it, at its turn: none whole in the parent
            head, cut = plan_cuts((t for _, ts in planned for t in ts), self.workers_per_dir, self.chunk_bytes,
                                  max_piece=None if budget is None else budget.piece_bytes,
                                  head_bytes=self.parent_head_bytes if budget is None else 0)
            if self.adaptive is not None:
                self.adaptive.begin(plan.data_dir)
            self._parent_scans.update(task_key(task) for task, _ in head)  # scan() scans them
            ranges = [(task.path, 0, st[0]) for task, st in head]
            ranges += [(task.path, a, b) for task, _, cuts in cut for a, b in zip(cuts, cuts[1:])]
            # in the order the parent and the workers take them; gated, each chunk is submitted once read
            self.start_read_ahead(plan.data_dir, ranges, gated,
                                  functools.partial(self._top_up, plan.data_dir) if gated else None)
            if gated:  # nothing is read yet: the workers start while the first ranges are
                with self.lock:
                    self._executor(plan.data_dir)
            with self.lock:
                self._remaining[plan.data_dir] = len(cut)
                for task, st, cuts in cut:
                    pend = _Pending(st, chunk_tasks(task, cuts))
                    self._pending[task_key(task)] = pend
                    self._queue[plan.data_dir].append(pend)
            self._top_up(plan.data_dir)
            self._update_gauges(plan.data_dir)
        return order

    def _top_up(self, data_dir: str) -> None:
        """Submit the dir's next chunks, in Phase 2's order, until its window is full."""
        with self._submitting[data_dir]:
            while not self._closed.is_set():
                with self.lock:
                    queue = self._queue[data_dir]
                    while queue and not queue[0].todo:
                        queue.popleft()
                    if not queue:
                        return
                    pend = queue[0]
                    # a segment cut into chunks goes to the workers whole, or its chunks would be scanned
                    # one after the other in the parent
                    if self._in_flight[data_dir] >= IN_FLIGHT_PER_WORKER * self.workers_per_dir and not pend.chunks:
                        return
                    if not self._read(data_dir, pend):  # a gated read-ahead calls again once it is
                        return
                    self._in_flight[data_dir] += 1
                    batch = [pend]
                    if self._groupable(pend):  # small whole segments after it join its call
                        size = pend.stat[0]
                        for other in itertools.islice(queue, 1, None):
                            if (len(batch) >= GROUP_TASKS or not self._groupable(other)
                                    or size + other.stat[0] > GROUP_BYTES or not self._read(data_dir, other)):
                                break
                            batch.append(other)
                            size += other.stat[0]
                # scan() takes a pending task under this dir's submitting lock: pend stays in the queue's hands
                for p, chunk in zip(batch, self._submit(data_dir, [p.todo[0] for p in batch])):
                    p.chunks.append(chunk)
                    del p.todo[0]

    def _read(self, data_dir: str, pend: _Pending) -> bool:
        """Whether ``pend``'s next chunk may go to a worker: read, where the dir's read-ahead is gated."""
        read_ahead = self._read_ahead.get(data_dir)
        return read_ahead is None or read_ahead.ready(pend.todo[0].path, pend.todo[0].start)

    def _groupable(self, pend: _Pending) -> bool:
        """A small whole segment not started, in a load without a read budget or adaptive workers (each chunk of
        those waits for its own turn)."""
        return (len(pend.todo) == 1 and not pend.chunks and pend.stat[0] <= GROUP_BYTES
                and self.max_read_bytes_per_sec is None and self.adaptive is None)

    def _update_gauges(self, data_dir: str) -> None:
        if self.metrics is None:
            return
        for i in range(self.workers_per_dir):
            self.metrics.set(REMAINING_SEGMENTS_TO_LOAD, self.metrics.tags(dir=data_dir, threadNum=i),
                             self._remaining.get(data_dir, 0))

    # ---- collecting ------------------------------------------------------------------------------------

    def scan(self, data_dir: str, task: SegmentTask) -> SegmentScan:
        with self._submitting[data_dir]:  # not while a top-up submits one of this task's chunks
            with self.lock:
                pend = self._pending.pop(task_key(task), None)
                # the head of the order: the parent's own scan
                if pend is None and task_key(task) in self._parent_scans:
                    self._parent_scans.discard(task_key(task))
                    self.stats.scans_in_parent += 1
                if pend is not None:  # this thread's now: what is not submitted yet, the parent scans
                    todo, pend.todo = pend.todo, []
        if pend is None:
            return self.inline_source(data_dir).scan(task)
        t0 = time.perf_counter()
        try:
            fresh = file_stat(task.path) == pend.stat
            if fresh:
                parts = [self._chunk_result(data_dir, c) for c in pend.chunks]
                for t in todo:  # Phase 2 got here first: no worker has them
                    self._wait_read(data_dir, t)
                    self._read_ahead_done(data_dir, t)
                    if (budget := self.budget(data_dir)) is not None:
                        budget.wait((t.end if t.end is not None else pend.stat[0]) - t.start, self._closed)
                    parts.append(self._scan_in_parent(t))
            else:  # the file changed since planning (e.g. a swap was completed): the chunks are of no use
                for c in pend.chunks:
                    c.future.cancel()
        finally:
            for c in pend.chunks:
                self._free(c.block)
            with self.lock:
                for c in pend.chunks:
                    c.batch.left -= 1
                    if c.batch.left == 0:  # a batch leaves the window with its last chunk
                        self._in_flight[data_dir] -= 1
        with self.lock:
            self._remaining[data_dir] -= 1
            self.stats.wait_seconds += time.perf_counter() - t0
        self._top_up(data_dir)
        self._update_gauges(data_dir)
        if not fresh:
            return self.inline_source(data_dir).scan(task)
        scan, rescan_seconds = stitch_whole(task, parts)
        with self.lock:
            self.stats.scan_seconds += rescan_seconds
            self.stats.segments_scanned += 1
        self.progress.segments_scanned(data_dir, 1, scan.bytes_read)
        return scan

    def _chunk_result(self, data_dir: str, chunk: _Chunk) -> SegmentScan:
        if self._closed.is_set():
            raise LoadInterrupted("the load was interrupted")
        if not chunk.retried and chunk.future.cancel():  # no worker has it yet: the parent scans it, not waits
            return self._scan_in_parent(chunk.task, not_before=chunk.not_before)
        try:
            result = chunk.future.result()[chunk.index]
        except (BrokenExecutor, CancelledError) as e:
            if self._closed.is_set():
                raise LoadInterrupted("the load was interrupted") from None
            return self._after_crash(data_dir, chunk, e)
        except MemoryError as e:  # the worker ran out of memory: a resource, like a dead worker, not a bug
            return self._after_crash(data_dir, chunk, e)
        # any other exception is the scan code's own: it propagates, loky's worker traceback as its __cause__
        with self.lock:
            self.stats.pickled_bytes += pickled_size(result)
        if isinstance(result, ReadFailed):
            raise OSError(result.errno, result.strerror, result.filename)
        if isinstance(result, Grown):  # the file grew after its block was sized (scan() rescans a changed file)
            return self._rescan(chunk)
        if isinstance(result, NoSpace):  # /dev/shm is full: the parent scans it into its own memory
            log.info("%s: the block could not take the %d bytes of rows of %s (worker %d: %s); scanning it in the "
                     "parent", data_dir, result.nbytes, chunk.task.path, result.pid, result.error or "no block")
            return self._rescan(chunk)
        assert chunk.block is not None  # a worker scanned it into its block
        try:
            table, drafted = arrays_from_block(chunk.block, result.rows, result.draft)
        except (OSError, EOFError) as e:  # the block's (no descriptor left, unlinked by a close), never the file's
            if self._closed.is_set():
                raise LoadInterrupted("the load was interrupted") from None
            log.warning("%s: could not read back the rows of %s (%s); scanning it in the parent", data_dir,
                        chunk.task.path, e)
            return self._rescan(chunk)
        t = chunk.task
        scan = SegmentScan(t.path, t.base_offset, t.start, result.end, result.valid_bytes, Stop(result.stop),
                           result.stop_detail, table, result.fatal, result.fatal_exception,
                           bytes_read=result.end - t.start, draft=drafted)
        with self.lock:
            self.stats.add_scan(result.seconds, scan)
        return scan

    def _rescan(self, chunk: _Chunk) -> SegmentScan:
        """The parent's scan of a chunk its worker's block could not bring back; the block goes first (a write that
        failed half-way holds pages in /dev/shm that other workers need)."""
        self._free(chunk.block)
        return self._scan_in_parent(chunk.task, not_before=chunk.not_before)

    def _wait_read(self, data_dir: str, task: SegmentTask) -> None:
        """Wait until the dir's gated read-ahead has read ``task``'s range (at once where none is gated)."""
        read_ahead = self._read_ahead.get(data_dir)
        if read_ahead is not None:
            read_ahead.wait_read(task.path, task.start)

    def _read_ahead_done(self, data_dir: str, task: SegmentTask) -> None:
        """``task``'s range is not ahead of the scans any more (the read-ahead may move on)."""
        read_ahead = self._read_ahead.get(data_dir)
        if read_ahead is not None:
            end = task.end if task.end is not None else os.path.getsize(task.path)
            read_ahead.done(end - task.start)

    # ---- verify's audits ----------------------------------------------------------------------------

    def audit(self, data_dir: str, tasks: Sequence[AuditTask]) -> Iterator[SegmentAudit]:
        """In the dir's workers, at most ``IN_FLIGHT_PER_WORKER`` per worker ahead of the caller; an audit
        comes back pickled (a few hundred bytes: no shared memory).  A worker that died has its task audited
        here instead (read-only: doing it twice is harmless)."""
        ahead: deque[tuple[AuditTask, Future[SegmentAudit]]] = deque()
        for task in tasks:
            ahead.append((task, self._submit_audit(data_dir, task)))
            if len(ahead) >= IN_FLIGHT_PER_WORKER * self.workers_per_dir:
                yield self._audit_result(data_dir, *ahead.popleft())
        while ahead:
            yield self._audit_result(data_dir, *ahead.popleft())

    def _submit_audit(self, data_dir: str, task: AuditTask) -> Future[SegmentAudit]:
        if self._closed.is_set():
            raise LoadInterrupted("the engine was closed")
        try:
            future: Future[SegmentAudit] = self._executor(data_dir).submit(audit_segment, task)
        except BrokenExecutor:  # a worker died under an earlier task: a fresh pool for the next ones
            future = self._executor(data_dir, fresh=True).submit(audit_segment, task)
        return future

    def _audit_result(self, data_dir: str, task: AuditTask, future: Future[SegmentAudit]) -> SegmentAudit:
        from loky.process_executor import ShutdownExecutorError  # imported already: the future is a pool's

        try:
            return future.result()
        except (BrokenExecutor, MemoryError, CancelledError, ShutdownExecutorError) as e:
            if self._closed.is_set():  # closed under it (a cancel): not a worker that died
                raise LoadInterrupted("the engine was closed") from e
            log.warning("%s: a worker died while auditing %s (%s: %s); auditing it in the parent", data_dir,
                        task.path, type(e).__name__, e)
            with self.lock:
                self.stats.inline_fallbacks += 1
            return audit_segment(task)

    def _scan_in_parent(self, task: SegmentTask, fallback: bool = False, not_before: float = 0.0) -> SegmentScan:
        """Scan ``task`` here; counted as a scan the parent took over, or (``fallback``) as the last resort
        after a retry died too.  ``not_before``: the chunk's turn in the dir's read budget (``time.monotonic()``),
        booked when it was submitted; a worker that did not read it leaves the parent to wait for it."""
        wait_turn(not_before - time.monotonic(), self._closed)
        t0 = time.perf_counter()
        scan = scan_segment(task)
        with self.lock:
            if fallback:
                self.stats.inline_fallbacks += 1
            else:
                self.stats.scans_in_parent += 1
            self.stats.add_scan(time.perf_counter() - t0, scan)
        return scan

    def _after_crash(self, data_dir: str, chunk: _Chunk, error: BaseException) -> SegmentScan:
        with self.lock:
            self.stats.worker_restarts += 1
        if not chunk.retried:
            log.warning("%s: a Phase 1 worker died or failed while scanning %s (%s: %s); retrying on a fresh "
                        "worker", data_dir, chunk.task.path, type(error).__name__, error)
            # replace the pool only if it broke: a healthy one still runs other tasks
            broken = chunk.executor if isinstance(error, BrokenExecutor) else None
            (retry,) = self._submit(data_dir, [chunk.task], broken=broken)
            retry.retried = True
            try:
                return self._chunk_result(data_dir, retry)
            finally:
                self._free(retry.block)
        log.warning("%s: the retry of %s failed too (%s: %s); scanning it in the parent", data_dir,
                    chunk.task.path, type(error).__name__, error)
        return self._scan_in_parent(chunk.task, fallback=True, not_before=chunk.not_before)

    def close(self, kill: bool = False) -> None:
        if self._closed.is_set():  # closed already (a Ctrl-C closes it before the loading threads end)
            return
        try:
            super().close(kill)  # the read-ahead first: nothing more to read for this load
            for pend in list(self._pending.values()):
                for c in pend.chunks:
                    c.future.cancel()
            for ex in self._executors.values():
                # join the pool's manager thread even when killing (Ctrl-C): it releases the pool's semaphores
                ex.shutdown(wait=True, kill_workers=kill)
            self._pending.clear()
            for block in list(self._blocks.values()):
                self._free(block)
        finally:
            if self._marker is not None:  # last: the load's pools and blocks are gone
                release(self._name, self._marker)
                self._marker = None
        if self.metrics is not None:
            for name, tags in self._gauges:
                self.metrics.remove(name, tags)


__all__ = ["PARENT_HEAD_BYTES", "PoolEngine", "worker_scan"]
