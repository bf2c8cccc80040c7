"""``verify_logs``: audit every segment of every partition of some data dirs, read-only, on the load's engine.

Data flow::

    parent                                              engine (the load's: inline, or N workers per dir)
    ------                                              ----------------------------------------------
    list each data dir: checkpoints, partition
      directories, their .log files (sizes: the
      progress total and the engine's "auto")
    one thread per data dir: every segment's      ──►  audit_segment (mploader.scan.audit): the whole
      AuditTask, partition by partition, in              .log walked and CRC-checked, offsets, the
      base-offset order                                  .index/.timeindex/.txnindex checked against
                                                  ◄──  its batches; a small SegmentAudit back
    per partition, once its audits are in: the
      checks across segments and files
      (mploader.verify.partition)
    then what a load would do now: a dry run that
      takes no lock (mploader.manager.predict_recovery),
      per partition directory

Nothing is written, no lock is taken: ``verify`` may look at a running broker's dirs (what it reports is then
of the moment it read each file).  The dry run re-reads what recovery would read (after an unclean shutdown,
the segments above the recovery point; nothing else): that is the price of telling Kafka's own outcome
rather than a guess at it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from mploader.config import LoaderConfig
from mploader.engine.base import Engine, EngineFactory
from mploader.errors import InvalidPartitionDirError, StartupFailedError
from mploader.format import checkpoint, names
from mploader.format.names import TopicPartition
from mploader.load_plan import make_engine
from mploader.manager import predict_recovery
from mploader.progress import NO_PROGRESS, Progress, ProgressTracker
from mploader.result import LoadedLog, LoadResult, LoadStats
from mploader.runners import PartitionRunner
from mploader.scan.audit import AuditTask, SegmentAudit
from mploader.verify.partition import UNREADABLE, log_end_offset, partition_findings, reason_of
from mploader.verify.report import DataDirReport, Finding, PartitionReport, VerifyReport

_DIR_CHECKPOINTS = (checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT,
                    checkpoint.REPLICATION_OFFSET_CHECKPOINT, checkpoint.CLEANER_OFFSET_CHECKPOINT)


@dataclass(slots=True)
class _Partition:
    path: str
    tp: TopicPartition
    kind: str
    files: list[str]  # the names in the directory, sorted
    logs: list[tuple[int, str, int]]  # (base offset, .log path, size), by base offset


@dataclass(slots=True)
class _Dir:
    report: DataDirReport
    partitions: list[_Partition]
    offsets: dict[str, dict[TopicPartition, int]]  # checkpoint name -> its offsets (those that parsed)

    @property
    def bytes(self) -> int:
        return sum(size for p in self.partitions for _, _, size in p.logs)


def verify_logs(data_dirs: Sequence[str | os.PathLike[str]], config: LoaderConfig | None = None, *,
                progress: Progress = NO_PROGRESS, now_ms: int | None = None, predict: bool = True,
                engine: EngineFactory | None = None, partitions: PartitionRunner | None = None) -> VerifyReport:
    """Audit ``data_dirs`` (see the module docstring) and, with ``predict``, say what a load would do now.
    ``engine``: the engine of the audits and of the prediction's Phase 1 (default: the config's choice);
    ``partitions``: where the prediction's partitions load (default: the plan's, with that engine).

    Raises ``FileNotFoundError``/``NotADirectoryError`` for a data dir that is not a directory; everything the
    files hold is reported, never raised."""
    cfg = config or LoaderConfig()
    t0 = time.perf_counter()
    dirs = [_list_dir(os.path.abspath(os.fspath(d))) for d in data_dirs]
    tracker = ProgressTracker([progress])
    stats = LoadStats()
    phase1 = engine(stats, progress) if engine is not None else make_engine(
        cfg, [d.report.path for d in dirs], stats, progress=progress,
        scan_bytes=max((d.bytes for d in dirs), default=0))
    report = VerifyReport([d.report for d in dirs], [], workers_per_dir=phase1.workers_per_dir)
    tracker.start({d.report.path: len(d.partitions) for d in dirs})
    with phase1, ThreadPoolExecutor(max(1, len(dirs)), thread_name_prefix="mploader-verify") as threads:
        per_dir = list(threads.map(lambda d: _audit_dir(d, phase1, tracker), dirs))
    report.partitions = [p for reports in per_dir for p in reports]
    report.seconds["audit"] = time.perf_counter() - t0
    if predict:
        t1 = time.perf_counter()
        _predict(report, data_dirs, cfg, now_ms, engine, partitions)
        report.seconds["predict"] = time.perf_counter() - t1
    report.seconds["total"] = time.perf_counter() - t0
    tracker.close()
    return report


def _list_dir(path: str) -> _Dir:
    if not os.path.isdir(path):
        raise (FileNotFoundError if not os.path.exists(path) else NotADirectoryError)(
            2 if not os.path.exists(path) else 20, "not a data directory", path)
    report = DataDirReport(path, os.path.exists(os.path.join(path, checkpoint.CLEAN_SHUTDOWN_MARKER)))
    offsets: dict[str, dict[TopicPartition, int]] = {}
    for name in _DIR_CHECKPOINTS:
        file = os.path.join(path, name)
        if not os.path.exists(file):
            report.checkpoints[name] = "missing"
            continue
        try:
            offsets[name] = checkpoint.read_offset_checkpoint(file)
            report.checkpoints[name] = "ok"
        except UNREADABLE as e:
            report.checkpoints[name] = reason_of(e)
            report.findings.append(Finding(file, None, report.checkpoints[name]))
    partitions = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if not entry.is_dir() or entry.name == names.REMOTE_LOG_INDEX_CACHE:
            continue
        try:
            tp, kind = names.parse_partition_dir(entry.name)
        except InvalidPartitionDirError as e:
            report.findings.append(Finding(entry.path, None, f"{e} (a broker fails to start on it)"))
            continue
        files = sorted(os.listdir(entry.path))
        logs = sorted((names.offset_from_file_name(f), os.path.join(entry.path, f))
                      for f in files if names.is_log_file(f))
        partitions.append(_Partition(entry.path, tp, kind.value, files,
                                     [(base, p, _size(p)) for base, p in logs]))
    return _Dir(report, partitions, offsets)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # the audit says why


def _audit_dir(d: _Dir, engine: Engine, tracker: ProgressTracker) -> list[PartitionReport]:
    path = d.report.path
    tracker.planned(path, {p.path: sum(s for _, _, s in p.logs) for p in d.partitions},
                    sum(len(p.logs) for p in d.partitions))
    tasks = [AuditTask(log_path, base) for p in d.partitions for base, log_path, _ in p.logs]
    audits = engine.audit(path, tasks)
    out = []
    for p in d.partitions:
        segments: list[SegmentAudit] = []
        for _ in p.logs:
            segments.append(next(audits))
            tracker.segments_scanned(path, 1, segments[-1].size_bytes)
        out.append(_partition_report(d, p, segments))
        tracker.partition_loaded(path, os.path.basename(p.path), p.path, out[-1].bytes)
    return out


def _partition_report(d: _Dir, p: _Partition, segments: list[SegmentAudit]) -> PartitionReport:
    def offset(name: str) -> int | None:
        return d.offsets.get(name, {}).get(p.tp)

    log_start = offset(checkpoint.LOG_START_OFFSET_CHECKPOINT)
    return PartitionReport(
        topic=p.tp.topic, partition=p.tp.partition, dir=p.path, data_dir=d.report.path, kind=p.kind,
        log_start_offset=log_start, recovery_point=offset(checkpoint.RECOVERY_POINT_CHECKPOINT),
        high_watermark=offset(checkpoint.REPLICATION_OFFSET_CHECKPOINT), log_end_offset=log_end_offset(segments),
        segments=segments, findings=partition_findings(p.path, p.files, segments, log_start),
    )


# --------------------------------------------------------------------------------------------
# What a load would do now


def _predict(report: VerifyReport, data_dirs: Sequence[str | os.PathLike[str]], cfg: LoaderConfig,
             now_ms: int | None, engine: EngineFactory | None, partitions: PartitionRunner | None) -> None:
    try:
        result = predict_recovery(data_dirs, cfg, now_ms, engine, partitions)
    except StartupFailedError as e:
        report.startup_failure = {"kafka_exception": e.kafka_exception, "path": e.path, "message": str(e)}
        return
    loaded = _by_dir(result)
    for p in report.partitions:
        lg = loaded.get(p.dir)
        if lg is not None:
            p.recovery = recovery_of(lg, p)
    for d in report.data_dirs:
        reason = result.offline_dirs.get(d.path)
        if reason is not None:
            d.findings.append(Finding(d.path, None, f"a load would take this data dir offline: {reason}"))


def _by_dir(result: LoadResult) -> dict[str, LoadedLog]:
    logs = [*result.logs.values(), *result.future_logs.values(), *result.logs_to_delete, *result.stray_logs]
    return {lg.dir: lg for lg in logs}


def recovery_of(lg: LoadedLog, p: PartitionReport) -> dict[str, Any]:
    """A dry run's outcome for one partition directory, next to what the files hold (``p``)."""
    sizes = {s.base_offset: s.size_bytes for s in p.segments}
    truncated = [{"base_offset": s.base_offset, "from_bytes": sizes[s.base_offset], "to_bytes": s.size_bytes}
                 for s in lg.segments if s.base_offset in sizes and s.size_bytes < sizes[s.base_offset]]
    return {
        "clean_shutdown": lg.clean_shutdown,
        "recovered_segments": list(lg.recovered_segments),
        "truncated_segments": truncated,
        "deleted_segments": [base for base, _ in lg.deleted_segments],
        "deleted_files": sorted(lg.deleted_files),
        "log_start_offset": lg.log_start_offset,
        "recovery_point": lg.recovery_point,
        "log_end_offset": lg.log_end_offset,
        "impact": lg.impact.to_json(),
    }


__all__ = ["recovery_of", "verify_logs"]
