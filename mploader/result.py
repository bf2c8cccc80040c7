"""What a load reports: LoadResult, LoadedLog, SegmentInfo, ProducerInfo."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from mploader.format.checkpoint import uuid_text
from mploader.format.names import DirKind, TopicPartition

if TYPE_CHECKING:
    from mploader.scan import SegmentScan


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base_offset: int
    size_bytes: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    """A producer's state after the load (what Kafka's ProducerStateManager holds)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1 when no transaction is open


@dataclass(frozen=True, slots=True)
class Impact:
    """What the load did to one partition's data (the impact report).

    ``log_end_offset_before`` is what the files held (Kafka's ``readNextOffset`` of the highest segment, read
    before the first change, or past it where that segment's recovery cuts valid batches behind a broken entry
    that walk stops at: ``recovery.impact.log_end_past_the_stop``); ``records_removed`` counts the offsets removed
    from the end of the log (in a compacted topic some of them held no record); ``bytes_removed`` the invalid bytes
    truncated plus the ``.log`` bytes of the segments deleted; ``high_watermark`` comes from the data dir's
    ``replication-offset-checkpoint`` (None: unknown); ``lost_below_high_watermark``: the load removed offsets
    below it, i.e. records the cluster had acknowledged.
    """

    log_end_offset_before: int
    log_end_offset_after: int
    records_removed: int
    bytes_removed: int
    segments_deleted: int
    high_watermark: int | None
    lost_below_high_watermark: bool

    @property
    def changed_data(self) -> bool:
        return bool(self.records_removed or self.bytes_removed or self.segments_deleted)

    @property
    def acknowledged_removed(self) -> range:
        """The acknowledged offsets (below the high watermark) the load removed: from the log end after it up to the
        one before it or the high watermark, whichever is lower (not empty exactly when
        ``lost_below_high_watermark``)."""
        hw = self.high_watermark
        return range(self.log_end_offset_after, min(self.log_end_offset_before, hw if hw is not None else -1))

    @property
    def missing_below_high_watermark(self) -> range:
        """The acknowledged offsets on this disk neither before the load nor after it: from the higher of the two
        log ends up to the high watermark (a torn tail that held no complete batch, a segment overwritten before the
        load; offsets below a log start offset the load moved up are not counted).  The cluster's other replicas may
        hold them.  Empty where the high watermark is unknown, as it is for all but a live partition."""
        hw = self.high_watermark
        return range(max(self.log_end_offset_before, self.log_end_offset_after), hw if hw is not None else -1)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class LoadedLog:
    """One partition directory after loading.

    ``recovery_point`` is the value Kafka's next recovery-point checkpoint holds
    (``max(loader's recovery point, local log start)``, docs/loading.md §6.15);
    ``loader_recovery_point`` the loader's own return value before that raise.
    """

    topic_partition: TopicPartition
    dir: str
    data_dir: str
    kind: DirKind
    clean_shutdown: bool
    log_start_offset: int
    recovery_point: int
    loader_recovery_point: int
    log_end_offset: int
    segments: list[SegmentInfo]
    leader_epochs: list[tuple[int, int]] | None  # None when there is no epoch cache (record version < 2)
    producers: Mapping[int, ProducerInfo]  # a load's: recovery.producer_map.ProducerInfos
    recovered_segments: list[int] = field(default_factory=list)  # base offsets, in recovery order
    truncated_bytes: int = 0
    deleted_files: list[str] = field(default_factory=list)  # names inside the partition dir
    # the impact report: the log end offset the files held before the load changed it (None: unchanged or not
    # known), the segments recovery deleted as (base offset, .log bytes), the high watermark (None: unknown)
    log_end_offset_before: int | None = None
    deleted_segments: list[tuple[int, int]] = field(default_factory=list)
    high_watermark: int | None = None
    # index_check other than "kafka": each index file that failed it, {"file", "problem", "action"}
    index_checks: list[dict[str, str]] = field(default_factory=list)
    # a clean load's partition journal (mploader.recovery.journal) is in its directory, to delete at the commit
    journal: bool = False
    # a Spark task's attempt record (mploader.recovery.attempts) is in its directory, for the driver to delete
    attempt_record: bool = False
    topic_id: bytes | None = None  # its partition.metadata's topic id (None: no such file)
    stray_reason: str | None = None  # why the load took it for a stray (LogManager.isStrayKraftReplica) and renamed it

    @property
    def impact(self) -> Impact:
        after = self.log_end_offset
        before = after if self.log_end_offset_before is None else self.log_end_offset_before
        removed = 0 if self.kind is DirKind.DELETE else max(0, before - after)  # a -delete dir reports 0 as its end
        hw = self.high_watermark
        return Impact(
            log_end_offset_before=before, log_end_offset_after=after, records_removed=removed,
            bytes_removed=self.truncated_bytes + sum(size for _, size in self.deleted_segments),
            segments_deleted=len(self.deleted_segments), high_watermark=hw,
            lost_below_high_watermark=removed > 0 and hw is not None and after < hw,
        )

    @property
    def topic(self) -> str:
        return self.topic_partition.topic

    @property
    def partition(self) -> int:
        return self.topic_partition.partition

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "dir": self.dir,
            "kind": self.kind.value,
            "log_start_offset": self.log_start_offset,
            "recovery_point": self.recovery_point,
            "log_end_offset": self.log_end_offset,
            "segments": [{"base_offset": s.base_offset, "size_bytes": s.size_bytes} for s in self.segments],
            "leader_epochs": [list(e) for e in (self.leader_epochs or [])],
            "recovered_segments": list(self.recovered_segments),
            "truncated_bytes": self.truncated_bytes,
            "deleted_files": sorted(self.deleted_files),
            "producers": len(self.producers),
            "impact": self.impact.to_json(),
            "index_checks": list(self.index_checks),
            "topic_id": None if self.topic_id is None else uuid_text(self.topic_id),
            **({} if self.stray_reason is None else {"stray_reason": self.stray_reason}),
        }


@dataclass(slots=True)
class LoadStats:
    partitions: int = 0
    segments_opened: int = 0
    segments_scanned: int = 0
    segments_recovered: int = 0
    bytes_read: int = 0
    bytes_truncated: int = 0
    files_deleted: int = 0
    worker_restarts: int = 0  # Phase 1 tasks retried because their worker died
    inline_fallbacks: int = 0  # ... and scanned in the parent after the retry died too
    pickled_bytes: int = 0  # bytes of Phase 1 descriptors pickled back to the parent
    scans_in_parent: int = 0  # planned scans the parent made: its head of the order, or no worker had started them
    unplanned_scans: int = 0  # whole-segment scans Phase 2 asked for that the engine had not planned (0 expected)
    workers_per_dir: int = 1  # Phase 1's scan workers per data dir (LoaderConfig.segment_scan_workers_per_data_dir)
    # The start method this load's worker processes (the scan pool's, or the partition-loading workers') did use,
    # "fork" or "spawn", as the function mploader.engine.worker_start resolved it from LoaderConfig.worker_start,
    # else MPLOADER_WORKER_START, else the platform; None: none started (inline, or loaded by Spark: loaded_by)
    worker_start: str | None = None
    scan_seconds: float = 0.0  # Phase 1 time spent scanning, summed over threads and workers
    draft_seconds: float = 0.0  # ... of which drafting recovery's index entries, producer order, epochs
    wait_seconds: float = 0.0  # Phase 2 time spent waiting for Phase 1 results
    # Phase 2 time spent changing files (Disk.change_seconds), the final sync apart, summed over this process and
    # whatever loaded the partitions elsewhere (loaded_by: partition-loading workers, Spark tasks)
    write_seconds: float = 0.0
    # "preflight", "plan" (Phase 1 submission), "flush", "total" (wall); "cpu": this process's CPU seconds in the load
    # (its threads, not its workers'), the serial part that more workers do not shorten
    seconds: dict[str, float] = field(default_factory=dict)
    dir_seconds: dict[str, float] = field(default_factory=dict)  # per data dir: until its last partition loaded
    loaded_by: str | None = None  # where the partitions were loaded when not here (e.g. "Spark local[2], 2 tasks")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def add_work(self, other: LoadStats) -> None:
        """Add the scans and the file changes ``other`` counted (a partition-loading worker's group, a Spark task)."""
        self.segments_scanned += other.segments_scanned
        self.scan_seconds += other.scan_seconds
        self.draft_seconds += other.draft_seconds
        self.write_seconds += other.write_seconds

    def add_scan(self, seconds: float, scan: SegmentScan) -> None:
        """Count the Phase 1 time of one scan (the caller holds the engine's lock)."""
        self.scan_seconds += seconds
        if scan.draft is not None:
            self.draft_seconds += scan.draft.seconds


class Background(Protocol):
    """Work a load left running after it returned (``load_logs(..., verify_in_background=True)``:
    :class:`mploader.verify.background.BackgroundVerification`)."""

    @property
    def done(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> Any: ...

    def cancel(self) -> None: ...


@dataclass(slots=True)
class LoadResult:
    logs: dict[TopicPartition, LoadedLog]
    future_logs: dict[TopicPartition, LoadedLog]
    logs_to_delete: list[LoadedLog]
    stray_logs: list[LoadedLog]
    offline_dirs: dict[str, str]
    clean_shutdown: dict[str, bool]
    stats: LoadStats
    warnings: list[str] = field(default_factory=list)  # what an operator must read (e.g. acknowledged data lost)
    background: Background | None = None  # the verification still running after the load (verify_in_background)

    def all_logs(self) -> list[LoadedLog]:
        return [*self.logs.values(), *self.future_logs.values(), *self.logs_to_delete, *self.stray_logs]

    def impact_total(self) -> dict[str, int]:
        """The impact report summed over every partition."""
        impacts = [lg.impact for lg in self.all_logs()]
        return {
            "partitions_changed": sum(i.changed_data for i in impacts),
            "records_removed": sum(i.records_removed for i in impacts),
            "bytes_removed": sum(i.bytes_removed for i in impacts),
            "segments_deleted": sum(i.segments_deleted for i in impacts),
            "partitions_lost_below_high_watermark": sum(i.lost_below_high_watermark for i in impacts),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "logs": [log.to_json() for log in sorted(self.all_logs(), key=lambda lg: (lg.topic, lg.partition, lg.dir))],
            "offline_dirs": dict(self.offline_dirs),
            "clean_shutdown": dict(self.clean_shutdown),
            "impact": self.impact_total(),
            "warnings": list(self.warnings),
            "stats": self.stats.to_json(),
        }
