"""What the generator is asked for and what it reports: :class:`GeneratorConfig`, :class:`Fault`,
:class:`GenerateSummary`, and the fault kinds they name."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mploader.format import compression, index, log as logfmt, records

FAULT_KINDS = (
    "torn_tail", "flipped_byte", "zero_tail", "missing_index", "corrupt_index", "truncated_index",
    "stray_files", "orphaned_index", "corrupt_snapshot",
)
#: Faults in ``.log`` bytes: each one says where valid data now ends in its segment.
DATA_FAULTS = ("torn_tail", "flipped_byte", "zero_tail")


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    """What to generate.  Sizes are bytes; Kafka's config names are given where one applies."""

    data_dirs: int = 2  # log.dirs entries
    topics: int = 4
    partitions_per_topic: int = 12
    total_bytes: int = 60_000_000  # .log bytes over all partitions (whole batches, so approximate)
    segment_bytes: int = 256 * 1024  # log.segment.bytes
    index_interval_bytes: int = 4096  # log.index.interval.bytes
    max_index_size: int = index.DEFAULT_MAX_INDEX_SIZE  # log.index.size.max.bytes (segment.index.bytes)
    batch_bytes: int = 16 * 1024  # producer batch.size: the size of a full batch
    records_per_batch: int = 16  # records in a full batch (smaller batches happen too, as with linger.ms)
    compression: str = "none"  # compression.type of the producers: none, gzip, or an installed codec
    idempotent_fraction: float = 0.5  # share of steps taken by idempotent producers
    transactional_fraction: float = 0.3  # share of steps taken by transactional producers
    idempotent_producers: int = 3  # idempotent producers per partition at any time
    transactional_producers: int = 2  # transactional producers per partition
    abort_fraction: float = 0.3  # share of transactions ended by an ABORT marker
    max_transaction_batches: int = 6  # data batches per transaction: 1..N
    producer_restart_probability: float = 0.002  # per idempotent batch: producer restarts, new producer id
    epoch_bump_probability: float = 0.1  # per transaction end: the producer's epoch is bumped
    leader_epoch_changes: float = 3.0  # mean number of leader elections per partition
    nonzero_start_fraction: float = 0.5  # partitions whose older segments retention already deleted
    delete_records_fraction: float = 0.1  # partitions with a log start offset inside the first segment
    clean_shutdown: bool = False  # clean: marker, trimmed indexes, snapshot at the LEO
    faults: int = 4  # number of faults injected
    fault_kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 0
    start_timestamp_ms: int = 1_730_000_000_000  # CreateTime of the first batches
    node_id: int = 1  # node.id in meta.properties
    broker_epoch: int | None = 7  # in .kafka_cleanshutdown (None: the empty marker of Kafka <= 3.6)

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ValueError(what)

        need(self.data_dirs >= 1, "data_dirs must be >= 1")
        need(self.topics >= 1, "topics must be >= 1")
        need(self.partitions_per_topic >= 1, "partitions_per_topic must be >= 1")
        need(self.total_bytes >= 0, "total_bytes must be >= 0")
        need(self.records_per_batch >= 1, "records_per_batch must be >= 1")
        need(self.batch_bytes >= records.RECORD_BATCH_OVERHEAD + 8,
             f"batch_bytes must be >= {records.RECORD_BATCH_OVERHEAD + 8}")
        need(self.segment_bytes >= self.batch_bytes,
             "segment_bytes must be >= batch_bytes (Kafka refuses batches larger than a segment)")
        need(self.segment_bytes <= logfmt.MAX_SEGMENT_BYTES, "segment_bytes must fit in an int32")
        need(self.index_interval_bytes >= 0, "index_interval_bytes must be >= 0")
        need(self.max_index_size >= 64, "max_index_size must be >= 64")
        for name in ("idempotent_fraction", "transactional_fraction", "abort_fraction",
                     "producer_restart_probability", "epoch_bump_probability", "nonzero_start_fraction",
                     "delete_records_fraction"):
            v = getattr(self, name)
            need(0.0 <= v <= 1.0, f"{name} must be in [0, 1]")
        need(self.idempotent_fraction + self.transactional_fraction <= 1.0,
             "idempotent_fraction + transactional_fraction must be <= 1")
        need(self.idempotent_producers >= 0 and self.transactional_producers >= 0, "producer counts must be >= 0")
        need(self.max_transaction_batches >= 1, "max_transaction_batches must be >= 1")
        need(self.leader_epoch_changes >= 0, "leader_epoch_changes must be >= 0")
        need(self.faults >= 0, "faults must be >= 0")
        unknown = set(self.fault_kinds) - set(FAULT_KINDS)
        need(not unknown, f"unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}")
        need(bool(self.fault_kinds) or self.faults == 0, "fault_kinds is empty but faults > 0")
        compression.codec_id(self.compression)  # raises UnsupportedCodecError (a ValueError)

    @property
    def partitions(self) -> int:
        return self.topics * self.partitions_per_topic

    def replace(self, **changes: Any) -> GeneratorConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fault_kinds"] = list(self.fault_kinds)
        return d


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault.

    ``valid_end`` (data faults only): the byte position in ``file`` where the valid prefix of the
    segment now ends, i.e. where a CRC walk of it stops and where Kafka truncates it *if* it
    recovers that segment (unclean shutdown and the segment at or past the recovery point's
    segment, or a missing ``.index``).  Later segments of the partition are untouched here; Kafka
    deletes them when a recovery truncated bytes (docs/loading.md §6.6)."""

    kind: str
    dir: str  # data dir name, relative to the output directory
    topic: str
    partition: int
    file: str  # the affected file, relative to the partition directory
    segment_base: int | None = None
    batch: int | None = None  # index of the batch in the segment
    position: int | None = None  # byte position of the damage in ``file``
    valid_end: int | None = None
    detail: str = ""
    files: tuple[str, ...] = ()  # files created or removed by the fault

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["files"] = list(self.files)
        return d


@dataclass(frozen=True, slots=True)
class GenerateSummary:
    out_dir: str
    data_dirs: tuple[str, ...]  # absolute paths
    topics: tuple[str, ...]
    partitions: int
    segments: int
    batches: int
    records: int
    log_bytes: int  # bytes written to .log files (before faults)
    clean_shutdown: bool
    faults: tuple[Fault, ...]
    seed: int
    elapsed_s: float
    manifest: str  # path of manifest.json

    @property
    def bytes_per_s(self) -> float:
        return self.log_bytes / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["data_dirs"] = list(self.data_dirs)
        d["topics"] = list(self.topics)
        d["faults"] = [f.to_dict() for f in self.faults]
        d["bytes_per_s"] = self.bytes_per_s
        return d


__all__ = ["DATA_FAULTS", "FAULT_KINDS", "Fault", "GenerateSummary", "GeneratorConfig"]
