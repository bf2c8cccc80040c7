"""A KRaft broker's metadata image (mploader.format.metadata_image): generated metadata log dirs, the three real
ones of the corpus (read from the ``real_corpus`` copy), and Kafka's own classes on those three (the
``metadata-oracle`` that tests/java/metadata_oracle.sh builds; skipped when it is not built)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from mploader.errors import InvalidFileNameError, MetadataRecordError
from mploader.format import checkpoint, log, metadata_records as mr, names
from mploader.format.metadata_image import (
    MIGRATING,
    LocatedRecord,
    MetadataImage,
    PartitionImage,
    TopicImage,
    is_stray_kraft_replica,
    latest_snapshot,
    read_batches,
    read_metadata_image,
    segment_paths,
    snapshot_path,
    stray_reason,
)
from tests.examples import examples
from tests.metadata_writer import encode, kafka_uuid, write_log, write_snapshot

T1, T2 = b"\x01" * 16, b"\x02" * 16
DIR_A, DIR_B = b"\x0a" * 16, b"\x0b" * 16
FEATURE = encode(mr.FeatureLevelRecord("metadata.version", 21))


def topic(name: str, tid: bytes) -> bytes:
    return encode(mr.TopicRecord(name, tid))


def partition(tid: bytes, p: int, replicas: tuple[int, ...], dirs: tuple[bytes, ...] = ()) -> bytes:
    return encode(mr.PartitionRecord(p, tid, replicas, replicas, (), (), replicas[0], 0, 0, directories=dirs), 1)


def config(name: str, key: str, value: str | None, kind: int = 2) -> bytes:
    return encode(mr.ConfigRecord(kind, name, key, value))


BEGIN, END, ABORT = encode(mr.BeginTransactionRecord("t")), encode(mr.EndTransactionRecord()), \
    encode(mr.AbortTransactionRecord())


# --------------------------------------------------------------------------------------------
# Generated dirs


def test_snapshot_then_the_log_after_it(tmp_path: Path) -> None:
    """The latest snapshot holds the state to its offset; the log's records before it are not replayed again."""
    write_snapshot(tmp_path, 3, 1, [topic("old", T2)])  # an older snapshot, not read
    write_snapshot(tmp_path, 4, 2, [FEATURE, topic("a", T1), partition(T1, 0, (1, 2)), config("a", "k", "v")])
    write_log(tmp_path, [[FEATURE, topic("a", T1), partition(T1, 0, (7,))],  # 0-2: before the snapshot
                         [config("a", "k", "v"), partition(T1, 1, (2, 3), (DIR_A, DIR_B))]])  # 3: before, 4: after
    image = read_metadata_image(tmp_path)
    assert image.snapshot == (4, 2) and latest_snapshot(tmp_path) == (4, 2) and image.next_offset == 5
    assert set(image.topics) == {"a"} and image.topics["a"].topic_id == T1
    parts = image.topics["a"].partitions
    assert parts[0].replicas == (1, 2) and parts[0].directories == (MIGRATING, MIGRATING)
    assert parts[1].directories == (DIR_A, DIR_B)
    assert image.topic_configs == {"a": {"k": "v"}} and image.features == {"metadata.version": 21}


def test_batches_below_the_snapshot_are_not_read(tmp_path: Path) -> None:
    """Kafka's reader starts at the snapshot's offset: a damaged batch below it is never checked."""
    write_snapshot(tmp_path, 1, 1, [topic("a", T1)])
    path = write_log(tmp_path, [[topic("a", T1)], [config("a", "k", "v")]])
    corrupt(path, entry_positions(path)[1] - 1)
    assert read_metadata_image(tmp_path).topic_configs == {"a": {"k": "v"}}


def test_partition_changes_merge_like_kafka(tmp_path: Path) -> None:
    change = mr.PartitionChangeRecord(0, T1, isr=(2,), leader=2, replicas=(2, 3), directories=(DIR_B, DIR_A))
    same_leader = mr.PartitionChangeRecord(0, T1, removing_replicas=(3,), leader_recovery_state=1)
    write_log(tmp_path, [[topic("a", T1), partition(T1, 0, (1, 2), (DIR_A, DIR_B))],
                         [encode(change, 1)], [encode(same_leader, 2)]])
    p = read_metadata_image(tmp_path).partition(T1, 0)
    assert p == PartitionImage((2, 3), (DIR_B, DIR_A), (2,), (3,), (), 2, 1, leader_epoch=1, partition_epoch=2)


def test_configs_removed_by_null_and_with_their_topic(tmp_path: Path) -> None:
    write_log(tmp_path, [[topic("a", T1), topic("b", T2), config("a", "x", "1"), config("b", "y", "2")],
                         [config("a", "x", None), config("", "min.insync.replicas", "2", kind=4),
                          config("1", "log.retention.ms", "5", kind=4), config("l", "k", "v", kind=99)],
                         [encode(mr.RemoveTopicRecord(T2))]])
    image = read_metadata_image(tmp_path)
    assert image.topic_configs == {} and set(image.topics) == {"a"}
    assert image.broker_configs == {"": {"min.insync.replicas": "2"}, "1": {"log.retention.ms": "5"}}
    assert image.configs[(0, "l")] == {"k": "v"}  # ConfigResource.Type.forId: an unknown id is UNKNOWN (0)


def test_metadata_transactions(tmp_path: Path) -> None:
    """MetadataBatchLoader: an aborted transaction's records are dropped, an ended one's applied, an open one's
    held back at the log's end."""
    write_log(tmp_path, [[BEGIN, topic("aborted", T2)], [ABORT],
                         [BEGIN, topic("a", T1)], [partition(T1, 0, (1,)), END],
                         [BEGIN, config("a", "k", "v")]])
    image = read_metadata_image(tmp_path)
    assert set(image.topics) == {"a"} and image.topic_configs == {} and image.pending_transaction == 1


def test_unknown_and_unneeded_records_are_counted(tmp_path: Path) -> None:
    write_log(tmp_path, [[bytes([1, 20, 0, 0]), bytes([1, 20, 0, 0]), bytes([1, 99, 4]) + b"??", topic("a", T1)]])
    assert read_metadata_image(tmp_path).skipped == {20: 2, 99: 1}


def corrupt(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def entry_positions(path: Path) -> list[int]:
    return [pos for pos, _, _ in log.iter_entries(path.read_bytes())]


def test_an_invalid_tail_ends_the_log_an_invalid_batch_before_it_is_refused(tmp_path: Path) -> None:
    first = write_log(tmp_path, [[topic("a", T1)], [topic("b", T2)]])
    tail = write_log(tmp_path, [[config("a", "k", "v")], [config("b", "k", "v")]], base_offset=2)
    corrupt(tail, len(tail.read_bytes()) - 1)
    image = read_metadata_image(tmp_path)
    assert image.topic_configs == {"a": {"k": "v"}} and image.next_offset == 3
    assert image.log_stopped_at is not None and image.log_stopped_at[:2] == (str(tail), entry_positions(tail)[1])
    assert "CRC mismatch" in image.log_stopped_at[2]
    corrupt(first, entry_positions(first)[1] - 1)
    with pytest.raises(MetadataRecordError, match=rf"^{re.escape(str(first))} at byte 0: record batch CRC mismatch"):
        read_metadata_image(tmp_path)


def test_a_size_field_below_the_minimum_is_a_tail_or_an_error(tmp_path: Path) -> None:
    """Zeros after the last batch (a preallocated or torn tail): the log ends there; in an earlier segment, refused."""
    first = write_log(tmp_path, [[topic("a", T1)]])
    end = len(first.read_bytes())
    first.write_bytes(first.read_bytes() + bytes(20))
    image = read_metadata_image(tmp_path)
    assert set(image.topics) == {"a"} and image.log_stopped_at == (str(first), end, "record size 0 is less than "
                                                                   "the minimum record overhead (14)")
    write_log(tmp_path, [[topic("b", T2)]], base_offset=1)
    with pytest.raises(MetadataRecordError, match=rf"^{re.escape(str(first))} at byte {end}: record size 0"):
        read_metadata_image(tmp_path)


def test_malformed_records_name_file_batch_and_offset(tmp_path: Path) -> None:
    path = write_log(tmp_path, [[topic("a", T1)], [partition(T2, 0, (1,)), topic("b", T2)]])
    with pytest.raises(MetadataRecordError, match=rf"^{re.escape(str(path))} at byte {entry_positions(path)[1]}: "
                                                  r"PartitionRecord at offset 1: topic id 0202.* is not in the image"):
        read_metadata_image(tmp_path)
    write_log(tmp_path, [[topic("a", T1), encode(mr.TopicRecord("b", T2)) + b"\0"]])
    with pytest.raises(MetadataRecordError, match=r"at byte 0: metadata record at offset 1: Found 1 byte"):
        read_metadata_image(tmp_path)


def test_a_log_that_starts_past_the_snapshot_is_refused(tmp_path: Path) -> None:
    write_snapshot(tmp_path, 5, 1, [topic("a", T1)])
    write_log(tmp_path, [[topic("b", T2)]], base_offset=9)
    with pytest.raises(MetadataRecordError, match="the log starts past offset 5, where the snapshot ends"):
        read_metadata_image(tmp_path)


def test_snapshot_names_as_kafka_parses_them(tmp_path: Path) -> None:
    write_snapshot(tmp_path, 7, 3, [topic("a", T1)])
    (tmp_path / "00000000000000000009-0000000003.checkpoint.part").write_bytes(b"")
    (tmp_path / "00000000000000000008-0000000003.checkpoint.deleted").write_bytes(b"")
    assert latest_snapshot(tmp_path) == (7, 3) and snapshot_path(tmp_path, (7, 3)).exists()
    (tmp_path / "bootstrap.checkpoint").write_bytes(b"")  # never in the metadata log dir: Kafka cannot parse it
    with pytest.raises(InvalidFileNameError, match="bootstrap.checkpoint"):
        latest_snapshot(tmp_path)


# --------------------------------------------------------------------------------------------
# LogManager.isStrayKraftReplica


images = st.dictionaries(
    st.binary(min_size=16, max_size=16),
    st.dictionaries(st.integers(0, 4), st.lists(st.integers(0, 5), max_size=3, unique=True).map(tuple), max_size=4),
    max_size=4)


def image_of(assignments: dict[bytes, dict[int, tuple[int, ...]]]) -> MetadataImage:
    topics = {tid: TopicImage(tid.hex(), tid, {p: PartitionImage(r, (MIGRATING,) * len(r), r, (), (), -1, 0, 0, 0)
                                              for p, r in parts.items()}) for tid, parts in assignments.items()}
    return MetadataImage(topics, {}, {}, None, 0)


@settings(max_examples=examples(300))
@given(images, st.integers(0, 5), st.integers(0, 4), st.none() | st.binary(min_size=16, max_size=16), st.data())
def test_stray_exactly_when_kafka_says(assignments: dict[bytes, dict[int, tuple[int, ...]]], broker: int, p: int,
                                       tid: bytes | None, data: st.DataObject) -> None:
    if tid is not None and assignments and data.draw(st.booleans()):
        tid = data.draw(st.sampled_from(sorted(assignments)))  # often a topic of the image
    replicas = assignments.get(tid, {}).get(p) if tid is not None else None
    image = image_of(assignments)
    assert is_stray_kraft_replica(image, broker, p, tid) == (replicas is None or broker not in replicas)
    reason = stray_reason(image, broker, p, tid)
    if tid is None:
        assert reason == "the log has no topic id"
    elif replicas is None:
        assert reason == "its topic id does not exist in the metadata image"


# --------------------------------------------------------------------------------------------
# The real metadata logs


REAL = {  # dir -> (snapshot, topic -> (id, partitions), topic configs, broker configs, metadata.version)
    "Niloufar1171__LDI-POC": (None, {
        "Retry.TestTopicPatient": ("_g4of-T3Rq-jr09kDxtjFA", 1), "TestTopicPatient": ("B3_HiNPgSQ6oxG9ZZ6ED5A", 1),
        "__consumer_offsets": ("gSnfpEbtQfSDpxM2lhEn9A", 50),
        "batch2.work.notification.SHR_PROD.persistence": ("306J_pu4Tiybgh3rvq-3HQ", 1),
        "subscription.matching.SHR_PROD.persistence": ("shr_LbhQRi20mLSqvU22rA", 1)}, {}, 19),
    "nomanazeem__Kafka-java/kafka-logs": (None, {
        "__consumer_offsets": ("FPCMpfzhTqatNggLgXnlSg", 50), "demo-topic": ("S2kwl2mvSCasFtxUPkayPw", 3)},
        {"": {"min.insync.replicas": "1"}}, 29),
    "ronem123__rupia-transaction-service/kafka-logs": ((1734780, 1), {
        "__consumer_offsets": ("dqK7-AskTSux4so_l6jJXg", 50), "topic_transactions": ("3aJOBeUFT2i-2s4EZqlyqQ", 1)},
        {"": {"min.insync.replicas": "1"}}, 27),
}
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}


@pytest.fixture(scope="module")
def real_images(real_corpus: Path) -> dict[str, tuple[Path, MetadataImage]]:
    found = sorted(real_corpus.rglob(f"{names.CLUSTER_METADATA_TOPIC}-0"))
    assert [str(d.parent.relative_to(real_corpus)) for d in found] == sorted(REAL)
    return {str(d.parent.relative_to(real_corpus)): (d, read_metadata_image(d)) for d in found}


def test_real_metadata_logs(real_images: dict[str, tuple[Path, MetadataImage]]) -> None:
    for where, (snapshot, topics, brokers, level) in REAL.items():
        _, image = real_images[where]
        assert image.snapshot == snapshot, where
        assert {n: (kafka_uuid(t.topic_id), len(t.partitions)) for n, t in image.topics.items()} == topics, where
        assert image.topic_configs == {"__consumer_offsets": OFFSETS_TOPIC_CONFIGS}, where
        assert image.broker_configs == brokers and image.features["metadata.version"] == level, where
        assert image.log_stopped_at is None and image.pending_transaction == 0, where


def test_the_partition_dirs_beside_them_are_not_stray(real_images: dict[str, tuple[Path, MetadataImage]]) -> None:
    """Every partition dir of the three data dirs holds its topic's id in partition.metadata and is assigned to the
    broker (node.id) in a directory that is the data dir's directory.id; a replica of broker 2 would be stray."""
    checked = 0
    for metadata_dir, image in real_images.values():
        data_dir = metadata_dir.parent
        props = dict(line.split("=", 1) for line in (data_dir / "meta.properties").read_text().split("\n")
                     if "=" in line and not line.startswith("#"))
        broker, dir_id = int(props["node.id"]), props["directory.id"]
        for d in sorted(p for p in data_dir.iterdir() if (p / "partition.metadata").exists() and p != metadata_dir):
            tp, _ = names.parse_partition_dir(d.name)
            tid = checkpoint.read_partition_metadata(d / "partition.metadata")
            assert stray_reason(image, broker, tp.partition, tid) is None, d
            assert image.topics[tp.topic].topic_id == tid, d
            assert [kafka_uuid(x) for x in image.partition(tid, tp.partition).directories] == [dir_id], d  # type: ignore[union-attr]
            assert is_stray_kraft_replica(image, broker + 1, tp.partition, tid), d
            checked += 1
    assert checked == 1 + 1 + 49 + 2 + 50 + 3 + 50 + 1  # Niloufar lacks __consumer_offsets-14


# --------------------------------------------------------------------------------------------
# Kafka's own classes (tests/java/metadata_oracle.sh; never in CI)


def oracle() -> Path:
    home = Path(os.environ.get("KAFKA_ORACLE_HOME") or Path.home() / ".cache" / "kafka-oracle")
    launcher = home / "metadata-oracle"
    if not os.access(launcher, os.X_OK):
        pytest.skip("the metadata oracle is not built (tests/java/metadata_oracle.sh, on the Kafka oracle's build)")
    return launcher


def kafka(mode: str, metadata_dir: Path) -> str:
    return subprocess.run([str(oracle()), mode, str(metadata_dir)], capture_output=True, text=True, timeout=300,
                          check=True).stdout


def as_kafka_json(image: MetadataImage) -> dict[str, Any]:
    """The image as KafkaMetadataImage.java prints Kafka's."""
    def part(p: int, r: PartitionImage) -> dict[str, Any]:
        return {"partition": p, "replicas": list(r.replicas), "isr": list(r.isr),
                "removing_replicas": list(r.removing_replicas), "adding_replicas": list(r.adding_replicas),
                "directories": [kafka_uuid(d) for d in r.directories], "leader": r.leader,
                "leader_recovery_state": r.leader_recovery_state, "leader_epoch": r.leader_epoch,
                "partition_epoch": r.partition_epoch, "elr": list(r.elr), "last_known_elr": list(r.last_known_elr)}
    return {
        "snapshot": None if image.snapshot is None else "{}-{}".format(*image.snapshot),
        "topics": [{"name": t.name, "id": kafka_uuid(t.topic_id),
                    "partitions": [part(p, t.partitions[p]) for p in sorted(t.partitions)]}
                   for t in sorted(image.topics_by_id.values(), key=lambda t: t.name)],
        "configs": [{"type": kind, "name": name, "data": dict(image.configs[(kind, name)])}
                    for kind, name in sorted(image.configs)],
        "features": {k: v for k, v in sorted(image.features.items()) if k != "metadata.version"},
        "metadata_version_read": image.features["metadata.version"],
    }


def test_the_images_kafka_builds(real_images: dict[str, tuple[Path, MetadataImage]]) -> None:
    for where, (metadata_dir, image) in real_images.items():
        theirs = json.loads(kafka("image", metadata_dir))
        del theirs["metadata_version"]  # the level this Kafka replayed (its latest where it read a newer one)
        assert as_kafka_json(image) == theirs, where


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def kafka_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return kafka_uuid(value)
    if isinstance(value, tuple):
        return [kafka_value(v) for v in value]
    return value


def compare_record(ours: LocatedRecord, theirs: dict[str, Any], where: str) -> None:
    r = ours.record
    if isinstance(r, mr.SkippedRecord):
        assert (r.api_key, r.version) == (theirs["api_key"], theirs["version"]), where
        return
    assert theirs["api_key"] == {s.record: k for k, s in mr.SCHEMAS.items()}[type(r)], where
    for f in dataclasses.fields(r):
        value = kafka_value(getattr(r, f.name))
        expected = theirs["data"].get(camel(f.name), kafka_value(f.default))  # Kafka's JSON leaves defaults out
        assert value == expected, (where, f.name)


def test_every_record_as_kafka_decodes_it(real_images: dict[str, tuple[Path, MetadataImage]]) -> None:
    """MetadataRecordSerde's records, in Kafka's JSON (the generated MetadataJsonConverters), one by one."""
    for where, (metadata_dir, image) in real_images.items():
        theirs = [json.loads(line) for line in kafka("records", metadata_dir).splitlines()]
        ours = [] if image.snapshot is None else list(read_batches(snapshot_path(metadata_dir, image.snapshot)))
        in_snapshot = len(ours)
        for path in segment_paths(metadata_dir):
            ours += read_batches(path, image.snapshot[0] if image.snapshot else 0)
        assert len(ours) == len(theirs) and sum(t["source"] == "snapshot" for t in theirs) == in_snapshot, where
        for i, (mine, kafkas) in enumerate(zip(ours, theirs, strict=True)):
            if kafkas["source"] == "log":
                assert mine.offset == kafkas["offset"], (where, i)
            compare_record(mine, kafkas, f"{where} record {i}")
