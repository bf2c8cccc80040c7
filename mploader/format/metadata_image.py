"""A KRaft broker's metadata image, read from its metadata log dir ``__cluster_metadata-0`` (docs/formats.md §17).

What a broker's ``MetadataLoader`` builds at start-up, restricted to what a log loader needs: topics (name, id),
their partitions' assignments (replicas, directories, leader, ISR...), configs (topic and broker) and feature
levels. Read-only: nothing in the dir is written, renamed or deleted.

* The latest snapshot ``<20-digit offset>-<10-digit epoch>.checkpoint`` (``Snapshots.parse``; ``.part`` and
  ``.deleted`` ones are not snapshots, as ``KafkaMetadataLog.recoverSnapshots`` keeps them) is replayed as
  ``MetadataLoader.handleLoadSnapshot`` does, into an empty image;
* then the records of the ``.log`` segments from the snapshot's offset on (``KafkaRaftClient``: a new listener
  gets the latest snapshot, then the log after it), through ``MetadataBatchLoader``'s metadata transactions:
  the records between a BeginTransactionRecord and an AbortTransactionRecord are dropped, those of a
  transaction still open at the log's end are not applied.

A broker applies the log only up to the high watermark, which is not on disk: this reads to the log's end.
Control batches (leader changes, snapshot header and footer, KRaft voters) hold no metadata and are skipped.
Kafka's rules at trunk of 2024-10-25 (4.0.0-SNAPSHOT).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mploader.errors import CorruptRecordError, InvalidFileNameError, InvalidRecordError, MetadataRecordError
from mploader.format import log, metadata_records as mr, names, records
from mploader.format.files import read_file

SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SNAPSHOT_SUFFIX = ".checkpoint.part"
OFFSET_WIDTH, EPOCH_WIDTH = 20, 10  # Snapshots.OFFSET_WIDTH, EPOCH_WIDTH
TOPIC, BROKER = 2, 4  # ConfigResource.Type ids
CONFIG_RESOURCE_TYPES = frozenset({0, 2, 4, 8, 16, 32})  # ConfigResource.Type; forId gives UNKNOWN (0) for others
METADATA_VERSION = "metadata.version"
MIGRATING = bytes(16)  # DirectoryId.MIGRATING: the replica's directory is not known (before KIP-858)
_JAVA_NUMBER = re.compile(r"[+-]?\d+")  # what Long.parseLong and Integer.parseInt take


@dataclass(frozen=True, slots=True)
class PartitionImage:
    """One partition's registration (Kafka's ``PartitionRegistration``)."""

    replicas: tuple[int, ...]
    directories: tuple[bytes, ...]  # one per replica: all MIGRATING when the metadata carries none
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader: int
    leader_recovery_state: int  # 0 RECOVERED, 1 RECOVERING
    leader_epoch: int
    partition_epoch: int
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: bytes
    partitions: Mapping[int, PartitionImage]


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The image, with where it came from and what was not decoded."""

    topics_by_id: Mapping[bytes, TopicImage]
    configs: Mapping[tuple[int, str], Mapping[str, str]]  # (ConfigResource type id, resource name) -> key -> value
    features: Mapping[str, int]  # finalized feature levels, metadata.version among them
    snapshot: tuple[int, int] | None  # the (end offset, epoch) of the snapshot read
    next_offset: int  # past the last record read
    skipped: Mapping[int, int] = field(default_factory=dict)  # api key -> records not decoded (unknown keys too)
    pending_transaction: int = 0  # records of a metadata transaction left open at the log's end, not applied
    log_stopped_at: tuple[str, int, str] | None = None  # (file, byte position, why): an invalid tail not read

    @property
    def topics(self) -> dict[str, TopicImage]:
        return {t.name: t for t in self.topics_by_id.values()}

    @property
    def topic_configs(self) -> dict[str, dict[str, str]]:
        """Topic name -> the topic's configs as Kafka's strings (ConfigRecord, resource type TOPIC)."""
        return {name: dict(c) for (kind, name), c in self.configs.items() if kind == TOPIC}

    @property
    def broker_configs(self) -> dict[str, dict[str, str]]:
        """Broker id as text, or "" for the cluster-wide default -> configs (resource type BROKER)."""
        return {name: dict(c) for (kind, name), c in self.configs.items() if kind == BROKER}

    def partition(self, topic_id: bytes, partition: int) -> PartitionImage | None:
        """TopicsImage.getPartition."""
        topic = self.topics_by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition)


def stray_reason(image: MetadataImage, broker_id: int, partition: int, topic_id: bytes | None) -> str | None:
    """Why Kafka's ``LogManager.isStrayKraftReplica`` takes a log for stray (None: it does not). ``topic_id`` is the
    log's ``partition.metadata`` id, None when the file has none: stray too (Kafka: most likely nothing was ever
    appended). The topic's name plays no part: the partition is looked up by id."""
    if topic_id is None:
        return "the log has no topic id"
    registration = image.partition(topic_id, partition)
    if registration is None:
        return "its topic id does not exist in the metadata image"
    if broker_id not in registration.replicas:
        return f"the replica assignment {list(registration.replicas)} does not contain broker {broker_id}"
    return None


def is_stray_kraft_replica(image: MetadataImage, broker_id: int, partition: int, topic_id: bytes | None) -> bool:
    """Kafka's ``LogManager.isStrayKraftReplica(brokerId, topicsImage, log)``: see :func:`stray_reason`."""
    return stray_reason(image, broker_id, partition, topic_id) is not None


# --------------------------------------------------------------------------------------------
# Files of the dir


def parse_snapshot_name(name: str) -> tuple[int, int, bool] | None:
    """``Snapshots.parse``: (end offset, epoch, usable) of a ``*.checkpoint[.part|.deleted]`` name, None for another
    file; usable is False for ``.part`` and ``.deleted``. A name Kafka cannot parse fails its start-up."""
    usable = name.endswith(SNAPSHOT_SUFFIX)
    if not (usable or name.endswith((PARTIAL_SNAPSHOT_SUFFIX, names.CHECKPOINT_DELETED_SUFFIX))):
        return None
    offset, sep, epoch = name[:OFFSET_WIDTH], name[OFFSET_WIDTH:OFFSET_WIDTH + 1], name[OFFSET_WIDTH + 1:][:EPOCH_WIDTH]
    if not (sep and _JAVA_NUMBER.fullmatch(offset) and _JAVA_NUMBER.fullmatch(epoch)):
        raise InvalidFileNameError(name, "a KRaft snapshot name must be <20-digit offset>-<10-digit epoch>.checkpoint")
    return int(offset), int(epoch), usable


def latest_snapshot(metadata_log_dir: str | os.PathLike[str]) -> tuple[int, int] | None:
    """The (end offset, epoch) of the latest usable snapshot, the greatest by offset then epoch."""
    found = (parse_snapshot_name(p.name) for p in Path(metadata_log_dir).iterdir())
    return max(((o, e) for o, e, usable in filter(None, found) if usable), default=None)


def snapshot_path(metadata_log_dir: str | os.PathLike[str], snapshot: tuple[int, int]) -> Path:
    return Path(metadata_log_dir) / f"{snapshot[0]:0{OFFSET_WIDTH}d}-{snapshot[1]:0{EPOCH_WIDTH}d}{SNAPSHOT_SUFFIX}"


def segment_paths(metadata_log_dir: str | os.PathLike[str]) -> list[Path]:
    """The ``.log`` segments by base offset."""
    logs = [p for p in Path(metadata_log_dir).iterdir() if names.is_log_file(p.name)]
    return sorted(logs, key=lambda p: names.offset_from_file_name(p.name))


@dataclass(frozen=True, slots=True)
class LocatedRecord:
    """A decoded record and where it is: its file, its batch's byte position, its offset."""

    record: mr.MetadataRecord
    path: str
    position: int
    offset: int

    def error(self, reason: str) -> MetadataRecordError:
        return MetadataRecordError(self.path, self.position, f"{type(self.record).__name__} at offset "
                                                             f"{self.offset}: {reason}")


def _batch_records(data: bytes, pos: int, path: str, first_offset: int) -> Iterator[LocatedRecord]:
    header = records.read_batch_header(data, pos, path)
    if header.is_control:
        return
    try:
        batch = records.decode_records(data, pos, path)
    except InvalidRecordError as e:
        raise MetadataRecordError(path, pos, e.reason) from e
    for rec in batch:
        offset = header.base_offset + rec.offset_delta
        if offset >= first_offset:
            yield LocatedRecord(mr.decode_or_raise(rec.value, path, pos, offset), path, pos, offset)


def _before(data: bytes, pos: int, size: int, magic: int, first_offset: int) -> bool:
    """Whether the entry at ``pos`` is a v2 batch whose records all lie below ``first_offset``."""
    if magic != records.MAGIC_V2 or size < records.RECORD_BATCH_OVERHEAD:
        return False
    return records.read_batch_header(data, pos).last_offset < first_offset


class InvalidTail(Exception):
    """A batch that fails Kafka's checks where the log may end: :func:`read_batches` stops there."""

    def __init__(self, error: CorruptRecordError) -> None:
        super().__init__(str(error))
        self.error = error


def read_batches(path: Path, first_offset: int = 0, *, tail_may_be_invalid: bool = False) -> Iterator[LocatedRecord]:
    """The metadata records of a record-batch file from ``first_offset`` on. A batch that fails Kafka's checks (size,
    CRC, magic) is a :class:`MetadataRecordError`, unless ``tail_may_be_invalid``: then it ends the file, as recovery
    would cut it there, and :class:`InvalidTail` follows the valid records."""
    data = read_file(path)
    where = os.fspath(path)
    try:
        for pos, size, magic in log.iter_entries(data, 0, None, where):
            if _before(data, pos, size, magic, first_offset):
                continue  # Kafka's reader starts at first_offset: it neither reads nor checks what is below
            if magic != records.MAGIC_V2:
                raise CorruptRecordError(where, pos, f"magic {magic} in a metadata log (only v2 batches are written)")
            records.ensure_valid(data, pos, where)
            yield from _batch_records(data, pos, where, first_offset)
    except CorruptRecordError as e:
        if tail_may_be_invalid:
            raise InvalidTail(e) from e
        raise MetadataRecordError(where, e.position, e.reason) from e


# --------------------------------------------------------------------------------------------
# Replay (MetadataDelta.replay, TopicsDelta, TopicDelta, PartitionRegistration, ConfigurationsDelta, FeaturesDelta)


def _registration(r: mr.PartitionRecord) -> PartitionImage:
    """PartitionRegistration(PartitionRecord)."""
    return PartitionImage(r.replicas, _directories(r.directories, len(r.replicas)), r.isr, r.removing_replicas,
                          r.adding_replicas, r.leader, r.leader_recovery_state, r.leader_epoch, r.partition_epoch,
                          r.eligible_leader_replicas or (), r.last_known_elr or ())


def _directories(directories: tuple[bytes, ...], replicas: int) -> tuple[bytes, ...]:
    """PartitionRegistration.defaultToMigrating: no directory known (none, or all MIGRATING) is MIGRATING for each."""
    if all(d == MIGRATING for d in directories):
        return (MIGRATING,) * replicas
    return directories


def _merge(p: PartitionImage, r: mr.PartitionChangeRecord) -> PartitionImage:
    """PartitionRegistration.merge(PartitionChangeRecord): what the record leaves None keeps its value; a new
    leader bumps the leader epoch; every change bumps the partition epoch."""
    replicas = p.replicas if r.replicas is None else r.replicas
    new_leader = r.leader != mr.NO_LEADER_CHANGE
    lrs = p.leader_recovery_state if r.leader_recovery_state == mr.NO_RECOVERY_STATE_CHANGE else r.leader_recovery_state
    return PartitionImage(
        replicas, _directories(p.directories if r.directories is None else r.directories, len(replicas)),
        p.isr if r.isr is None else r.isr,
        p.removing_replicas if r.removing_replicas is None else r.removing_replicas,
        p.adding_replicas if r.adding_replicas is None else r.adding_replicas,
        r.leader if new_leader else p.leader, lrs, p.leader_epoch + new_leader, p.partition_epoch + 1,
        p.elr if r.eligible_leader_replicas is None else r.eligible_leader_replicas,
        p.last_known_elr if r.last_known_elr is None else r.last_known_elr)


def _check_directories(replicas: tuple[int, ...] | None, directories: tuple[bytes, ...] | None,
                       at: LocatedRecord) -> None:
    """PartitionRegistration.checkDirectories (InvalidReplicaDirectoriesException) and its constructor's check."""
    if replicas is not None and directories and len(directories) != len(replicas):
        raise at.error(f"{len(directories)} directories for {len(replicas)} replicas")


def _check_registration(p: PartitionImage, at: LocatedRecord) -> PartitionImage:
    """The checks of PartitionRegistration's constructor and LeaderRecoveryState.of."""
    _check_directories(p.replicas, p.directories, at)
    if p.leader_recovery_state not in (0, 1):
        raise at.error(f"Value {p.leader_recovery_state} is not a valid leader recovery state")
    return p


class _Builder:
    """The image being built, mutable (MetadataDelta over an empty image)."""

    def __init__(self) -> None:
        self.topics: dict[bytes, tuple[str, dict[int, PartitionImage]]] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.features: dict[str, int] = {}
        self.skipped: dict[int, int] = {}

    def replay(self, at: LocatedRecord) -> None:
        r = at.record
        if isinstance(r, mr.TopicRecord):
            self.topics[r.topic_id] = (r.name, {})  # TopicsDelta.replay(TopicRecord): a new topic, no partitions
        elif isinstance(r, (mr.PartitionRecord, mr.PartitionChangeRecord)):
            self._replay_partition(r, at)
        elif isinstance(r, mr.RemoveTopicRecord):
            if r.topic_id not in self.topics:
                raise at.error("Unable to delete topic: no such topic found")
            name, _ = self.topics.pop(r.topic_id)
            self.configs.pop((TOPIC, name), None)  # ConfigurationsDelta.replay(RemoveTopicRecord, name)
        elif isinstance(r, mr.ConfigRecord):
            self._replay_config(r)
        elif isinstance(r, mr.FeatureLevelRecord):
            if r.feature_level == 0 and r.name != METADATA_VERSION:
                self.features.pop(r.name, None)  # FeaturesDelta: level 0 removes a feature
            else:
                self.features[r.name] = r.feature_level
        elif isinstance(r, mr.SkippedRecord):
            self.skipped[r.api_key] = self.skipped.get(r.api_key, 0) + 1
        else:
            raise at.error("a metadata transaction record where MetadataDelta.replay takes none")

    def _replay_partition(self, r: mr.PartitionRecord | mr.PartitionChangeRecord, at: LocatedRecord) -> None:
        topic = self.topics.get(r.topic_id)
        if topic is None:
            raise at.error(f"topic id {r.topic_id.hex()} is not in the image")
        partitions = topic[1]
        _check_directories(r.replicas, r.directories, at)
        if isinstance(r, mr.PartitionRecord):
            partitions[r.partition_id] = _check_registration(_registration(r), at)
            return
        if r.partition_id not in partitions:
            raise at.error(f"Unable to find partition {r.partition_id}")
        partitions[r.partition_id] = _check_registration(_merge(partitions[r.partition_id], r), at)

    def _replay_config(self, r: mr.ConfigRecord) -> None:
        """ConfigurationsDelta.replay: a null value removes the key; a resource left with none leaves the image."""
        kind = r.resource_type if r.resource_type in CONFIG_RESOURCE_TYPES else 0
        data = self.configs.setdefault((kind, r.resource_name), {})
        if r.value is None:
            data.pop(r.name, None)
        else:
            data[r.name] = r.value
        if not data:
            del self.configs[(kind, r.resource_name)]


class _Transactions:
    """MetadataBatchLoader's metadata transactions (KIP-868): records inside one are held until it ends."""

    def __init__(self, builder: _Builder) -> None:
        self.builder = builder
        self.pending: list[LocatedRecord] | None = None  # None: no transaction open

    def replay(self, at: LocatedRecord) -> None:
        r = at.record
        if isinstance(r, mr.BeginTransactionRecord):
            if self.pending is not None:
                raise at.error("Encountered BeginTransactionRecord while already in a transaction")
            self.pending = []
        elif isinstance(r, (mr.EndTransactionRecord, mr.AbortTransactionRecord)):
            if self.pending is None:
                raise at.error(f"Encountered {type(r).__name__} without having seen a BeginTransactionRecord")
            if isinstance(r, mr.EndTransactionRecord):
                for held in self.pending:
                    self.builder.replay(held)
            self.pending = None
        elif self.pending is not None:
            self.pending.append(at)
        else:
            self.builder.replay(at)


def read_metadata_image(metadata_log_dir: str | os.PathLike[str]) -> MetadataImage:
    """The image a broker loads from ``metadata_log_dir`` (``__cluster_metadata-0``): the latest snapshot, then the
    log after it. Malformed data is a :class:`MetadataRecordError` naming the file, the batch position and the
    record offset; an invalid batch in the last segment ends the log there (recovery would truncate it)."""
    builder = _Builder()
    snapshot = latest_snapshot(metadata_log_dir)
    next_offset = 0
    if snapshot is not None:
        for at in read_batches(snapshot_path(metadata_log_dir, snapshot)):
            builder.replay(at)
        next_offset = snapshot[0]
    transactions = _Transactions(builder)
    stopped, next_offset = _replay_log(metadata_log_dir, next_offset, transactions)
    return MetadataImage(
        {tid: TopicImage(name, tid, parts) for tid, (name, parts) in builder.topics.items()}, builder.configs,
        builder.features, snapshot, next_offset, builder.skipped, len(transactions.pending or ()), stopped)


def _replay_log(metadata_log_dir: str | os.PathLike[str], first_offset: int,
                transactions: _Transactions) -> tuple[tuple[str, int, str] | None, int]:
    """Replay the segments' records from ``first_offset``; (where an invalid tail stopped it, the next offset)."""
    segments = segment_paths(metadata_log_dir)
    next_offset = first_offset
    for i, path in enumerate(segments):
        if i == 0 and names.offset_from_file_name(path.name) > first_offset:
            raise MetadataRecordError(path, 0, f"the log starts past offset {first_offset}, where the "
                                               f"{'snapshot ends' if first_offset else 'metadata begins'}")
        try:
            for at in read_batches(path, first_offset, tail_may_be_invalid=i == len(segments) - 1):
                transactions.replay(at)
                next_offset = at.offset + 1
        except InvalidTail as tail:
            e = tail.error
            return (e.path or os.fspath(path), e.position or 0, e.reason), next_offset
    return None, next_offset
