"""One partition directory's load as a self-contained job: what Phase 2 needs from its data dir's start-up.

The manager (Kafka's LogManager) reads each data dir once: its clean-shutdown marker, its checkpoints, its
listing.  A :class:`PartitionJob` carries the part of that one partition needs, so that the partition can be
loaded anywhere the files are: in one of the manager's loading threads, or in a Spark task on an executor
(:mod:`mploader.spark.phase2`).  :func:`load_partition` is the load itself, the same code in both places.  A job
loaded on another host carries what the driver found (:class:`PlannedData`), which the task checks before it reads
or writes a byte (:mod:`mploader.spark.identity`): a host that sees other data at the paths must not load it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from mploader.broker_config.meta import MetaProperties
from mploader.config import LoaderConfig
from mploader.disk.base import Disk
from mploader.format.names import DirKind, TopicPartition
from mploader.recovery.loader import LogLoader, PartitionContext
from mploader.recovery.resume import Recovered
from mploader.result import LoadedLog
from mploader.scan import ScanSource

ListedFile = tuple[str, int, int, int]  # a file of a partition directory: name, size, mtime_ns, inode


@dataclass(frozen=True, slots=True)
class PlannedData:
    """What the driver found of a partition's data before the job left it: its data dir's ``meta.properties``
    identity and the partition directory's files (:func:`listed_files`; None: not listable there)."""

    identity: MetaProperties | None  # None: no meta.properties Kafka would read
    files: tuple[ListedFile, ...] | None


def listed_files(directory: str) -> tuple[ListedFile, ...]:
    """The regular files of ``directory`` (links followed, as ``File.isFile``), by name, with their size, mtime and
    inode: a file with the same three is the same file, unchanged.  OSError: the directory cannot be listed."""
    out: list[ListedFile] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            try:
                if entry.is_file():
                    st = entry.stat()
                    out.append((entry.name, st.st_size, st.st_mtime_ns, st.st_ino))
            except FileNotFoundError:  # gone since the listing: not there
                continue
    return tuple(sorted(out))


def planned_data(identity: MetaProperties | None, directory: str) -> PlannedData:
    """``directory``'s files as found now, with its data dir's ``identity``."""
    try:
        return PlannedData(identity, listed_files(directory))
    except OSError:  # the load meets it where it runs (an IOException: the data dir goes offline)
        return PlannedData(identity, None)


@dataclass(frozen=True, slots=True)
class PartitionJob:
    data_dir: str
    dir: str  # the partition directory
    tp: TopicPartition
    kind: DirKind
    clean_shutdown: bool  # the data dir's marker was there
    recovery_point: int  # its recovery-point-offset-checkpoint entry (0 if none)
    log_start: int  # its log-start-offset-checkpoint entry (0 if none)
    high_watermark: int | None  # its replication-offset-checkpoint entry (a live log's; None: unknown)
    now_ms: int
    recovered: Recovered | None = None  # --resumable: what a killed load recorded of it (recovery.resume)
    # its .log files' bytes and number as the preflight sized them (None: not sized), for the runners' cost
    logs: tuple[int, int] | None = None
    # what the driver found, for a runner on other hosts to check (PartitionRunner.needs_planned_data; None: unchecked)
    planned: PlannedData | None = None


def load_partition(job: PartitionJob, cfg: LoaderConfig, disk: Disk, scans: ScanSource,
                   set_remaining_segments: Callable[[int], None] = lambda n: None,
                   cancelled: threading.Event | None = None, run: str | None = None
                   ) -> tuple[LoadedLog, PartitionContext]:
    """``LogLoader.load`` of ``job``'s directory, its scans asked of ``scans`` (a data dir's engine, or scans made
    where it loads: ``runners.PartitionsHere``), with the impact report's fields filled in; the context says what
    the load read and did (``bytes_scanned``, ``deleted_segments``).  ``run``: the Spark job loading it, whose
    attempt record the load keeps (:mod:`mploader.recovery.attempts`; None: every record is stale)."""
    ctx = PartitionContext(
        disk=disk, data_dir=job.data_dir, dir=job.dir, tp=job.tp, kind=job.kind, cfg=cfg.for_topic(job.tp.topic),
        clean_shutdown=job.clean_shutdown, recovery_point_checkpoint=job.recovery_point,
        log_start_checkpoint=job.log_start, now_ms=job.now_ms, scans=scans,
        set_remaining_segments=set_remaining_segments, cancelled=cancelled or threading.Event(),
        index_check=cfg.index_check, resumed_from=job.recovered, attempt_run=run,
    )
    loaded = LogLoader(ctx).load()
    loaded.log_end_offset_before = ctx.log_end_offset_before
    loaded.deleted_segments = list(ctx.deleted_segments)
    if job.kind is DirKind.LIVE:
        loaded.high_watermark = job.high_watermark
    return loaded, ctx


__all__ = ["ListedFile", "PartitionJob", "PlannedData", "listed_files", "load_partition", "planned_data"]
