"""Partitions loaded in this process, one after another on one disk: a partition worker's group, a Spark task's
rows (:mod:`mploader.spark.phase2`), the groups a process pool's parent loads itself."""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import threading
import traceback
from collections.abc import Callable, Iterator

from mploader.config import LoaderConfig
from mploader.disk import NO_HOOK, MutationHook, open_disk
from mploader.engine.base import InlineSource
from mploader.errors import MploaderError
from mploader.recovery.job import PartitionJob, load_partition
from mploader.result import LoadStats
from mploader.runners.base import Outcome


class PartitionsHere:
    """Loads jobs in this process, their scans made here (Phase 1 where Phase 2 is: no batch table crosses a
    process) and counted with the disk's file changes in :attr:`work`; ``mutations``: the disk's hook; ``run``: the
    Spark job they belong to, whose attempt records their loads keep (:mod:`mploader.recovery.attempts`)."""

    def __init__(self, cfg: LoaderConfig, mutations: MutationHook = NO_HOOK, run: str | None = None) -> None:
        self.cfg = cfg
        self.run = run
        self.disk = open_disk(cfg.dry_run, mutations=mutations)
        self.work = LoadStats()
        self._scans = InlineSource(self.work, threading.Lock())

    def load(self, job: PartitionJob, segments: Callable[[int], None] = lambda n: None) -> Outcome:
        """``job``'s load: its log and the bytes it scanned, or the exception it raised, made portable (the caller
        takes it as the manager takes a loading thread's exception).  ``segments``: its segments left to recover."""
        try:
            loaded, ctx = load_partition(job, self.cfg, self.disk, self._scans, segments, run=self.run)
            return loaded, ctx.bytes_scanned
        except Exception as e:
            return portable(e)

    def finish(self) -> LoadStats:
        """What the loads scanned and wrote, once the disk is synced (an OSError of the sync is raised: the
        loads' answers must not count as durable)."""
        self.work.write_seconds = self.disk.change_seconds
        self.disk.flush()
        return self.work


class CollectRecords(logging.Handler):
    """Keeps the log records of loads made elsewhere for the process that reports them, made plain (the message
    formatted, the traceback as text) so that any of them pickles."""

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

    def take(self) -> list[logging.LogRecord]:
        """The records kept so far, no longer kept (a Spark task's, load by load)."""
        taken, self.records = self.records, []
        return taken


@contextlib.contextmanager
def collected(level: int) -> Iterator[CollectRecords]:
    """While open, the mploader log records at ``level`` and above are kept (for another process to log) instead
    of going to this process's handlers; the loggers are as they were after."""
    logger = logging.getLogger("mploader")
    collect = CollectRecords()
    saved = logger.level, logger.propagate, logger.handlers
    logger.setLevel(level)
    logger.propagate, logger.handlers = False, [collect]
    try:
        yield collect
    finally:  # a reused worker, or a caller in the parent, gets its loggers back
        logger.setLevel(saved[0])
        logger.propagate, logger.handlers = saved[1], saved[2]


def replay(records: list[logging.LogRecord]) -> None:
    """Log records made elsewhere through this process's own handlers, as if made here."""
    for record in records:
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)


def portable(error: BaseException) -> BaseException:
    """``error`` as another process will get it: itself if it survives a pickle round trip, else a RuntimeError
    that says what it was; one that is not mploader's own (a bug, not a verdict on the data) carries this process's
    traceback as a note."""
    if not isinstance(error, MploaderError):
        error.add_note(f"in process {os.getpid()}, loading partitions:\n" + "".join(traceback.format_exception(error)))
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        made = RuntimeError(f"{type(error).__name__}: {error}")
        for note in getattr(error, "__notes__", []):
            made.add_note(note)
        return made


__all__ = ["CollectRecords", "PartitionsHere", "collected", "portable", "replay"]
