"""What ``mploader verify`` reports: per data dir, per partition, per segment (docs/verify-output.md).

The JSON document (:meth:`VerifyReport.to_json`) is versioned by :data:`SCHEMA_VERSION` and described by
``docs/mploader-verify.schema.json``; fields are added, never renamed, within a version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mploader.scan.audit import MISSING, OK, SegmentAudit

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Finding:
    """Something wrong in a file that is not one segment's ``.log`` or index (those are in the
    :class:`SegmentAudit`): a checkpoint, a snapshot, ``partition.metadata``, offsets across segments."""

    file: str  # the file's path
    position: int | None  # the byte it concerns, when one does
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "position": self.position, "reason": self.reason}


def segment_healthy(audit: SegmentAudit) -> bool:
    """Every byte of the ``.log`` valid and its indexes right; a missing ``.txnindex`` is normal (Kafka makes
    one only for aborted transactions), a missing offset or time index only in a segment without batches."""
    if audit.first_invalid_position is not None:
        return False
    missing_ok = audit.batches == 0
    return all(v == OK or (v == MISSING and missing_ok) for v in (audit.index, audit.timeindex)) and \
        audit.txnindex in (OK, MISSING)


@dataclass(slots=True)
class PartitionReport:
    topic: str
    partition: int
    dir: str  # the partition directory
    data_dir: str
    kind: str  # "live", "delete", "future", "stray" (the directory name's suffix)
    log_start_offset: int | None  # from log-start-offset-checkpoint (None: not there)
    recovery_point: int | None  # from recovery-point-offset-checkpoint (None: not there)
    high_watermark: int | None  # from replication-offset-checkpoint (None: not there)
    log_end_offset: int  # after the last valid batch of the last segment (its base offset if it has none)
    segments: list[SegmentAudit] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    # what a load would do now (a dry run's outcome for this directory; None: a load does not load it, or the
    # start-up would fail before, VerifyReport.startup_failure)
    recovery: dict[str, Any] | None = None

    @property
    def healthy(self) -> bool:
        return not self.findings and all(segment_healthy(s) for s in self.segments)

    @property
    def bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "partition": self.partition, "dir": self.dir, "data_dir": self.data_dir,
            "kind": self.kind, "healthy": self.healthy, "log_start_offset": self.log_start_offset,
            "recovery_point": self.recovery_point, "high_watermark": self.high_watermark,
            "log_end_offset": self.log_end_offset, "segments": [s.to_json() for s in self.segments],
            "findings": [f.to_json() for f in self.findings], "recovery": self.recovery,
        }


@dataclass(slots=True)
class DataDirReport:
    path: str
    clean_shutdown: bool  # the clean-shutdown marker is there
    checkpoints: dict[str, str] = field(default_factory=dict)  # file name -> "ok", "missing" or what is wrong
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "clean_shutdown": self.clean_shutdown, "checkpoints": dict(self.checkpoints),
                "findings": [f.to_json() for f in self.findings]}


@dataclass(slots=True)
class VerifyReport:
    data_dirs: list[DataDirReport]
    partitions: list[PartitionReport]
    # where a broker would fail to start on these dirs now (a dry run's StartupFailedError), else None
    startup_failure: dict[str, Any] | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # "audit", "predict", "total"
    workers_per_dir: int = 1
    tool_version: str = ""

    @property
    def healthy(self) -> bool:
        return self.startup_failure is None and not any(d.findings for d in self.data_dirs) and \
            all(p.healthy for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        segments = sum(len(p.segments) for p in self.partitions)
        return {
            "schema": SCHEMA_VERSION,
            "tool": {"name": "mploader", "version": self.tool_version},
            "healthy": self.healthy,
            "summary": {
                "data_dirs": len(self.data_dirs), "partitions": len(self.partitions), "segments": segments,
                "bytes": self.bytes, "unhealthy_partitions": sum(not p.healthy for p in self.partitions),
                "unhealthy_segments": sum(not segment_healthy(s) for p in self.partitions for s in p.segments),
            },
            "startup_failure": self.startup_failure,
            "data_dirs": [d.to_json() for d in self.data_dirs],
            "partitions": [p.to_json() for p in self.partitions],
            "stats": {"seconds": dict(self.seconds), "workers_per_dir": self.workers_per_dir},
        }


__all__ = ["SCHEMA_VERSION", "DataDirReport", "Finding", "PartitionReport", "VerifyReport", "segment_healthy"]
