"""What a load tells: the impact warnings (acknowledged records lost), LogManager's log lines, the progress
gauges, and a partition's failure taken (an ``OSError`` takes its dir offline, another fails the load)."""

from __future__ import annotations

import logging
import math

from mploader.disk import Disk
from mploader.engine.plan import PlannedScans, file_size
from mploader.errors import (
    environment_failure,
    of_the_environment,
)
from mploader.manager.channel import LogDirFailureChannel
from mploader.manager.dirs import DirState
from mploader.metrics import (
    BYTES_RECOVERED,
    RECOVERY_ETA_SECONDS,
    TOTAL_BYTES_TO_RECOVER,
    MetricsRegistry,
)
from mploader.progress import DirProgress, Progress, ProgressTracker
from mploader.result import Impact, LoadedLog, LoadResult

log = logging.getLogger("mploader.manager")  # LogManager's lines, from every room of the package


def impact_warnings(result: LoadResult) -> list[str]:
    """A WARNING for each partition whose recovery removed records below its high watermark: acknowledged
    data lost (issue 13); and for each whose log ended below it before the load already.  In the order of the
    JSON document's logs."""
    out = []
    for lg in sorted(result.all_logs(), key=lambda lg: (lg.topic, lg.partition, lg.dir)):
        i = lg.impact
        if i.lost_below_high_watermark:
            msg = (f"{lg.dir}: recovery removed acknowledged records of {lg.topic_partition}: the log end offset "
                   f"falls from {i.log_end_offset_before} to {i.log_end_offset_after}, below the high watermark "
                   f"{i.high_watermark} ({len(i.acknowledged_removed)} acknowledged offsets lost; "
                   f"{i.records_removed} offsets, {i.bytes_removed} bytes removed)")
            if i.missing_below_high_watermark:
                msg += f"; {_missing_text(i)}"
        elif i.missing_below_high_watermark:
            msg = f"{lg.dir}: {_missing_text(i)}"
        else:
            continue
        log.warning("%s", msg)
        out.append(msg)
    return out


def _missing_text(i: Impact) -> str:
    missing = i.missing_below_high_watermark
    return (f"{len(missing)} acknowledged offsets ({missing[0]}..{missing[-1]}, below the high watermark "
            f"{i.high_watermark}) were not on this disk before the load, which removed none of them; the other "
            f"replicas may hold them")


def report_plan(progress: ProgressTracker, planned: PlannedScans | None, data_dir: str, disk: Disk) -> None:
    """Tell the progress tracker what the load planned to scan in ``data_dir``, per partition directory
    (nothing where it planned nothing: a clean dir loaded inline is counted as it goes)."""
    if planned is None:
        progress.planned(data_dir, None, None)
        return
    per_partition = {part[0]: sum(file_size(t.path, disk) for t in tasks) for part, tasks in planned}
    progress.planned(data_dir, per_partition, sum(len(tasks) for _, tasks in planned))


class ProgressGauges(Progress):
    """mploader's own gauges, per data dir, from the progress figures: ``totalBytesToRecover`` (where the dir
    was planned), ``bytesRecovered`` and ``recoveryEtaSeconds`` (whole seconds, rounded up; once known).
    Registered at the first figures of a dir, removed when the load ends, like Kafka's."""

    def __init__(self, metrics: MetricsRegistry) -> None:
        self.metrics = metrics
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}

    def update(self, figures: DirProgress) -> None:  # serialised by the tracker
        tags = self.metrics.tags(dir=figures.data_dir)
        eta = figures.eta_seconds
        for name, value in ((TOTAL_BYTES_TO_RECOVER, figures.bytes_total), (BYTES_RECOVERED, figures.bytes_done),
                            (RECOVERY_ETA_SECONDS, None if eta is None else math.ceil(eta))):
            key = (name, tags)
            if value is None or self._values.get(key) == value:
                continue
            if key in self._values:
                self.metrics.set(name, tags, value)
            else:
                self.metrics.register(name, tags, value)
            self._values[key] = value

    def close(self) -> None:
        for name, tags in self._values:
            self.metrics.remove(name, tags)
        self._values.clear()


def log_loading(states: list[DirState], elsewhere: bool = False) -> None:
    """LogManager.loadLogs' INFO lines at the start of each data dir."""
    for s in states:
        log.info("Loading logs from log dir %s%s", s.path,
                 f" ({len(s.partitions)} partitions, loaded elsewhere)" if elsewhere else "")
        if s.clean:
            log.info("Skipping recovery of %d logs from %s since clean shutdown file was found", len(s.partitions),
                     s.path)
        else:
            log.info("Attempting recovery of %d logs from %s since no clean shutdown file was found",
                     len(s.partitions), s.path)


def log_completed(s: DirState, loaded: LoadedLog, done: int, seconds: float | None = None) -> None:
    """LogManager.loadLog's INFO line for a partition loaded (``seconds``: its load's time, where it was timed)."""
    took = "" if seconds is None else f" in {seconds * 1000:.0f} ms"
    log.info("Completed load of Log(dir=%s, topic=%s, partition=%d, logStartOffset=%d, recoveryPoint=%d, "
             "logEndOffset=%d) with %d segments%s (%d/%d completed in %s)", loaded.dir, loaded.topic,
             loaded.partition, loaded.log_start_offset, loaded.recovery_point, loaded.log_end_offset,
             len(loaded.segments), took, done, len(s.partitions), s.path)


def warn_deleted(loaded: LoadedLog) -> None:
    if loaded.deleted_segments:
        log.warning("%s: deleted %d segment(s) after the truncation: base offsets %s (%d bytes of log)", loaded.dir,
                    len(loaded.deleted_segments), [b for b, _ in loaded.deleted_segments],
                    sum(n for _, n in loaded.deleted_segments))


def failed(s: DirState, path: str, error: BaseException, channel: LogDirFailureChannel) -> BaseException | None:
    """A partition's load ended with ``error``: an ``OSError`` takes its data dir offline (named with the
    partition: a write's error has no file name) and is None here; any other is returned, to fail the load."""
    if not isinstance(error, OSError):
        return error
    environment = of_the_environment(error)
    if environment:  # named, with what to fix (a write's error names no file: the partition then)
        error = environment_failure(error, path)
    log.error("%s: %s: %s; the partition is not loaded and %s goes offline", path, type(error).__name__, error,
              s.path)
    channel.add(s.path, f"{path}: {type(error).__name__}: {error}", keep_marker=environment)
    return None
