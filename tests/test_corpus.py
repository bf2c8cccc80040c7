"""The format layer against real Kafka data directories nobody on the team wrote.

Expected values come from the corpus documentation (``ANALYSIS.json``: an independent
kafka-python pass over every ``.log``; ``PREALLOCATED.tsv`` / ``MISSING.tsv``: which index
files were preallocated or lost), from kafka-python read here side by side with mploader,
and from byte-exact round trips (parse a real file, serialise it again, compare the bytes).
Everything is read from a private materialised copy (``real_corpus`` fixture).
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from mploader.format import checkpoint, compression, index, legacy, log, names, records, snapshot
from mploader.format.log import EntrySummary
from tests.log_readout import read_log

OFFSET_CHECKPOINTS = (checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT,
                      checkpoint.REPLICATION_OFFSET_CHECKPOINT, checkpoint.CLEANER_OFFSET_CHECKPOINT)


def _check(errors: list[str]) -> None:
    assert not errors, f"{len(errors)} mismatches:\n" + "\n".join(errors[:40])


@dataclass
class Segment:
    repo: str
    rel: str  # path relative to the repo folder, as ANALYSIS.json names it
    path: Path
    data: bytes
    doc: dict[str, Any]
    readout: log.LogReadout


@pytest.fixture(scope="module")
def segments(real_corpus: Path, real_corpus_analysis: dict[str, Any]) -> list[Segment]:
    """Every ``.log`` (and the base64 copy) ANALYSIS.json documents, read with mploader."""
    out: list[Segment] = []
    for repo, doc in sorted(real_corpus_analysis.items()):
        for rel, stats in sorted(doc["logs"].items()):
            path = real_corpus / repo / rel
            data = path.read_bytes()
            if rel.endswith(".b64"):
                data = base64.b64decode(data)
            out.append(Segment(repo, rel, path, data, stats, read_log(data, str(path))))
    return out


def test_corpus_is_documented(segments: list[Segment], real_corpus: Path) -> None:
    """ANALYSIS.json covers every .log of the materialised corpus (so the tests below see them all)."""
    documented = {s.path for s in segments}
    on_disk = set(real_corpus.rglob("*.log"))
    assert on_disk <= documented
    assert len(segments) == 464  # README: 463 .log segments + 1 base64 copy
    assert sum(s.doc["batches"] for s in segments) == 76_277  # README total (includes the .b64 copy)


def test_every_segment_frames_like_the_documentation(segments: list[Segment]) -> None:
    """Batch count, offsets, magic, CRC validity, epochs, producers and record counts per segment."""
    errors: list[str] = []
    for s in segments:
        d, r, where = s.doc, s.readout, f"{s.repo}/{s.rel}"
        es = r.entries
        crc_bad = sum(1 for e in es if not e.valid)
        got: dict[str, Any] = {
            "size": len(s.data),
            "valid_bytes": r.valid_bytes,
            "batches": len(es),
            "nboundaries": len(es),
            "crc_bad": crc_bad,
            "magic": {str(k): v for k, v in Counter(e.magic for e in es).items()},
            "first_offset": es[0].base_offset if es else None,
            "last_offset": max(e.last_offset for e in es) if es else None,
        }
        if es:
            got["max_ts"] = max(e.max_timestamp for e in es)
            epochs: list[list[int]] = []
            for e in es:
                if e.magic >= 2 and (not epochs or epochs[-1][0] != e.partition_leader_epoch):
                    epochs.append([e.partition_leader_epoch, e.base_offset])
            got["epochs"] = epochs
        headers = [records.read_batch_header(s.data, e.position) for e in es if e.magic >= 2]
        if headers:
            got["records"] = sum(h.records_count for h in headers)
            got["txn"] = sum(h.is_transactional for h in headers)
            got["control"] = sum(h.is_control for h in headers)
            got["idempotent"] = sum(h.has_producer_id for h in headers)
            got["pids"] = sorted([h.producer_id, h.producer_epoch] for h in {
                (h.producer_id, h.producer_epoch): h for h in headers if h.has_producer_id}.values())
            got["codec"] = {compression.CODEC_NAMES[k]: v for k, v in Counter(h.compression for h in headers).items()}
            got["ts_type"] = {str(k): v for k, v in Counter(int(h.is_log_append_time) for h in headers).items()}
        for key, value in got.items():
            if d.get(key) != value:
                errors.append(f"{where}: {key} documented {d.get(key)!r}, mploader {value!r}")
        if r.stop_reason != "end" or r.valid_bytes != len(s.data):
            errors.append(f"{where}: read_log stopped ({r.stop_reason}) at {r.valid_bytes} of {len(s.data)}")
    _check(errors)


def test_legacy_segments_have_shallow_v1_entries(segments: list[Segment]) -> None:
    """xpxwo100 (Kafka 0.10.1) is message format v1: one uncompressed message per entry, CreateTime."""
    legacy_segments = [s for s in segments if s.readout.entries and s.readout.entries[0].magic < 2]
    assert {s.repo for s in legacy_segments} == {"xpxwo100__bullShit"}
    for s in legacy_segments:
        for e in s.readout.entries:
            entry = legacy.ensure_valid(s.data, e.position, str(s.path))
            assert entry.magic == 1 and entry.compression == compression.NONE
            assert legacy.inner_offsets(s.data, e.position) == [entry.offset]
            assert e.partition_leader_epoch == -1 and e.max_timestamp == entry.timestamp


def _records_of(data: bytes, e: EntrySummary) -> list[tuple[Any, ...]]:
    """(offset, timestamp, key, value, headers) of every record, decoded by mploader."""
    if e.magic < 2:
        return [(m.offset, m.timestamp, m.key, m.value, ()) for m in legacy.decode_messages(data, e.position)]
    h = records.read_batch_header(data, e.position)
    out = []
    for r in records.decode_records(data, e.position):
        ts = h.max_timestamp if h.is_log_append_time else h.base_timestamp + r.timestamp_delta
        out.append((h.base_offset + r.offset_delta, ts, r.key, r.value, r.headers))
    return out


def _kp_records(batch: Any) -> list[tuple[Any, ...]]:
    out = []
    for r in batch:
        ts = r.timestamp if r.timestamp is not None else -1
        out.append((r.offset, ts, r.key, r.value, tuple(tuple(x) for x in r.headers)))
    return out


# Record-level comparison costs ~10 us per record on each side.  Segments holding more records
# than this (the 20 ~1 MB dipendrasaini segments: 500k of the corpus' 575k records, all from one
# producer) get it for every RECORD_STRIDE-th batch only; their headers, CRCs and record counts
# are still checked for every batch.
RECORD_SAMPLING_THRESHOLD = 20_000
RECORD_STRIDE = 5


def _crosscheck(data: bytes, readout: log.LogReadout, where: str, errors: list[str],
                doc: dict[str, Any] | None = None) -> int:
    """Compare every batch (header fields, CRC verdict, records) with kafka-python.

    With ``doc`` (the segment's ANALYSIS.json entry) also check the record count and the
    smallest timestamp (ANALYSIS ignores -1) computed from the decoded records.
    """
    stride = RECORD_STRIDE if doc is not None and doc["records"] > RECORD_SAMPLING_THRESHOLD else 1
    nrecords = 0
    min_ts: int | None = None
    kp = list(MemoryRecords(data))
    if len(kp) != len(readout.entries):
        errors.append(f"{where}: kafka-python sees {len(kp)} batches, mploader {len(readout.entries)}")
        return 0
    for i, (e, b) in enumerate(zip(readout.entries, kp)):
        at = f"{where}@{e.position}"
        if (b.magic, b.size_in_bytes, b.validate_crc()) != (e.magic, e.size, e.valid):
            errors.append(f"{at}: magic/size/crc kafka-python {(b.magic, b.size_in_bytes, b.validate_crc())} "
                          f"mploader {(e.magic, e.size, e.valid)}")
            continue
        if isinstance(b, DefaultRecordBatch):
            h = records.read_batch_header(data, e.position)
            theirs = (b.base_offset, b.leader_epoch, b.crc, b.attributes, b.last_offset_delta, b.first_timestamp,
                      b.max_timestamp, b.producer_id, b.producer_epoch, b.base_sequence, b.records_count,
                      b.last_sequence, b.is_transactional, b.is_control_batch, b.compression_type)
            ours = (h.base_offset, h.partition_leader_epoch, h.crc, h.attributes, h.last_offset_delta,
                    h.base_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence,
                    h.records_count, h.last_sequence, h.is_transactional, h.is_control, h.compression)
            if theirs != ours:
                errors.append(f"{at}: header kafka-python {theirs} mploader {ours}")
            if (e.base_offset, e.last_offset, e.max_timestamp) != (b.base_offset, b.last_offset, b.max_timestamp):
                errors.append(f"{at}: summary {e} disagrees with kafka-python")
        else:
            if b.base_offset != e.last_offset or b.timestamp_type != (0 if e.magic else None):
                errors.append(f"{at}: legacy offset/timestamp type differ: {b.base_offset} vs {e.last_offset}")
        if i % stride:
            nrecords += b.records_count if isinstance(b, DefaultRecordBatch) else 1
            continue
        theirs_r, ours_r = _kp_records(b), _records_of(data, e)
        if theirs_r != ours_r:
            errors.append(f"{at}: records differ, e.g. kafka-python {theirs_r[:1]} mploader {ours_r[:1]}")
        nrecords += len(ours_r)
        batch_min = min((r[1] for r in ours_r if r[1] >= 0), default=None)
        if batch_min is not None and (min_ts is None or batch_min < min_ts):
            min_ts = batch_min
    if doc is not None and nrecords != doc["records"]:
        errors.append(f"{where}: {nrecords} records, documented {doc['records']}")
    if doc is not None and stride == 1 and min_ts != doc["min_ts"]:
        errors.append(f"{where}: min timestamp {min_ts}, documented {doc['min_ts']}")
    return len(kp)


def test_every_batch_and_record_agrees_with_kafka_python(segments: list[Segment]) -> None:
    """Every batch (and its records) against kafka-python; record counts and min timestamps against ANALYSIS."""
    errors: list[str] = []
    nbatches = 0
    for s in segments:
        if not s.data:
            continue
        nbatches += _crosscheck(s.data, s.readout, f"{s.repo}/{s.rel}", errors, s.doc)
    _check(errors)
    assert nbatches == sum(s.doc["batches"] for s in segments)


def test_kraft_control_records(segments: list[Segment]) -> None:
    """The two documented KRaft LeaderChange control batches have no producer id; reading them as
    transaction markers is what Kafka refuses (type 2 is not ABORT/COMMIT)."""
    found = []
    for s in segments:
        for e in s.readout.entries:
            if e.magic < 2:
                continue
            h = records.read_batch_header(s.data, e.position)
            if h.is_control:
                key = records.decode_records(s.data, e.position)[0].key
                assert key is not None
                found.append((s.repo, records.CONTROL_KEY.unpack(key[:4])[1], h.has_producer_id))
    assert sorted(found) == [("Niloufar1171__LDI-POC", 2, False), ("nomanazeem__Kafka-java", 2, False)]


def test_kraft_snapshot_files_agree_with_kafka_python(real_corpus: Path) -> None:
    """KRaft ``NNN-EEE.checkpoint`` and ``bootstrap.checkpoint`` files are record batches too."""
    errors: list[str] = []
    files = [p for p in sorted(real_corpus.rglob("*.checkpoint"))]
    assert len(files) >= 125  # README: 125 KRaft snapshots in ronem123, plus bootstrap.checkpoint files
    nbatches = 0
    for p in files:
        data = p.read_bytes()
        r = read_log(data, str(p))
        if r.valid_bytes != len(data) or not all(e.valid for e in r.entries):
            errors.append(f"{p}: valid prefix {r.valid_bytes} of {len(data)}")
        nbatches += _crosscheck(data, r, str(p), errors)
    _check(errors)
    assert nbatches >= 3 * 125


def test_base64_copy_is_the_segment(real_corpus: Path) -> None:
    folder = real_corpus / "thanhliemtu__codecrafters-kafka-go"
    assert base64.b64decode((folder / "cluster_metadata.log.b64").read_bytes()) == \
        (folder / "00000000000000000000.log").read_bytes()


# --------------------------------------------------------------------------------------------
# Index files


def _tsv_rows(source: Path, name: str) -> Iterator[tuple[Path, list[str]]]:
    for table in sorted(source.rglob(name)):
        for line in table.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                fields = line.split("\t")
                yield table.parent.relative_to(source) / fields[0], fields[1:]


def _preallocated(source: Path) -> dict[Path, tuple[bool, int]]:
    """Preallocated index files (relative path) -> (does Kafka's sanity check reject it?, prefix bytes).

    From the documentation only: a preallocated (untrimmed) ``.timeindex`` whose prefix is not
    all zero is judged on its never-written last slot (timestamp 0 < first timestamp): corrupt
    (docs/formats.md §9-§10, docs/loading.md §16b).  Preallocated ``.index`` files always pass (last slot
    decodes to the base offset), as do all-zero ones.  Past the prefix the file is all zeros.
    """
    out = {}
    for rel, (size, _blob, *prefix) in _tsv_rows(source, "PREALLOCATED.tsv"):
        prefix_len = len(prefix[0]) // 2 if prefix else 0
        nonzero = bool(prefix and prefix[0].strip("0"))
        out[rel] = (rel.suffix == ".timeindex" and nonzero and int(size) == 10485756, prefix_len)
    return out


def test_index_files_sanity_checks_say_what_kafka_says(real_corpus: Path, real_corpus_source: Path,
                                                       segments: list[Segment]) -> None:
    preallocated = _preallocated(real_corpus_source)
    missing_logs = {rel for rel, _ in _tsv_rows(real_corpus_source, "MISSING.tsv") if rel.suffix == ".log"}
    documented = {s.path.with_suffix(""): s for s in segments}
    errors: list[str] = []
    seen = Counter()
    for path in sorted(real_corpus.rglob("*")):
        if path.suffix not in (".index", ".timeindex", ".txnindex") or not path.is_file():
            continue
        rel = path.relative_to(real_corpus)
        base = names.offset_from_file_name(path.name)
        length = path.stat().st_size
        seg = documented.get(path.with_suffix(""))
        if seg is None:  # an index whose .log the snapshot lost (MISSING.tsv)
            assert rel.with_suffix(".log") in missing_logs, rel
            continue
        expect_corrupt, prefix_len = preallocated.get(rel, (False, None))
        if path.suffix == ".txnindex":
            problem = index.txn_index_problem(str(path), base, index.read_txn_index(path, base))
            expect_corrupt = False
        else:
            dtype = index.OFFSET_ENTRY if path.suffix == ".index" else index.TIME_ENTRY
            entries = index.map_entries(path, dtype, random_access=True)
            if len(entries) != length // dtype.itemsize:  # Kafka: entries = floor(length / entry size)
                errors.append(f"{rel}: {len(entries)} entries for {length} bytes")
            check = index.offset_index_problem if path.suffix == ".index" else index.time_index_problem
            problem = check(str(path), base, length, entries)
            documented_idx = seg.doc.get("indexes", {}).get(path.suffix[1:])
            if documented_idx is not None and \
                    (documented_idx["size"], documented_idx["entries"]) != (length, len(entries)):
                errors.append(f"{rel}: size/entries {(length, len(entries))}, documented {documented_idx}")
            # content checks on the written entries only: Kafka itself counts every slot
            written = entries if prefix_len is None else entries[: -(-prefix_len // dtype.itemsize)]
            _check_index_content(path, base, written, seg, errors)
        seen[(path.suffix, rel in preallocated, problem is not None)] += 1
        if (problem is not None) != expect_corrupt:
            kafka_says = "corrupt" if expect_corrupt else "ok"
            errors.append(f"{rel}: sanity check says {problem}, Kafka would say {kafka_says}")
    _check(errors)
    # the corpus exercises both verdicts on preallocated files, and trimmed files of both kinds
    assert seen[(".timeindex", True, True)] > 0 and seen[(".timeindex", True, False)] > 0
    assert seen[(".index", True, False)] > 0 and seen[(".index", False, False)] > 0
    assert seen[(".timeindex", False, False)] > 0 and not seen[(".index", True, True)]


def _check_index_content(path: Path, base: int, entries: np.ndarray, seg: Segment, errors: list[str]) -> None:
    """Real entries point where Kafka's index rules say they may (any append path, README)."""
    if not len(entries):
        return
    es = seg.readout.entries
    leo = max(e.last_offset for e in es) + 1 if es else base
    offsets = base + entries["relative_offset"].astype(np.int64)
    if path.suffix == ".index":
        by_position = {e.position: e for e in es}
        for off, pos in zip(offsets.tolist(), entries["position"].tolist()):
            batch = by_position.get(pos)
            if batch is None or not batch.last_offset <= off < leo:
                errors.append(f"{path}: entry ({off}, {pos}) does not point at a batch start it covers")
                return
        if np.any(np.diff(offsets) <= 0):
            errors.append(f"{path}: offsets not strictly increasing")
    else:
        if np.any(np.diff(entries["timestamp"].astype(np.int64)) <= 0) or np.any(np.diff(offsets) < 0):
            errors.append(f"{path}: time index not monotonic")
        if offsets.min() < base or offsets.max() >= leo:
            errors.append(f"{path}: time index offsets outside [{base}, {leo})")
        if int(entries["timestamp"][-1]) > max(e.max_timestamp for e in es):
            errors.append(f"{path}: time index timestamp above the segment's max timestamp")


# --------------------------------------------------------------------------------------------
# Checkpoints, leader-epoch checkpoints, partition.metadata, snapshots, clean-shutdown markers


@pytest.fixture(scope="module")
def log_end_offsets(segments: list[Segment]) -> dict[Path, int]:
    """Partition directory -> its log end offset (next offset after the last batch, or the base)."""
    leo: dict[Path, int] = {}
    for s in segments:
        if s.rel.endswith(".b64"):
            continue
        es = s.readout.entries
        seg_end = es[-1].last_offset + 1 if es else names.offset_from_file_name(s.path.name)
        leo[s.path.parent] = max(leo.get(s.path.parent, seg_end), seg_end)
    return leo


def test_offset_checkpoints(real_corpus: Path, log_end_offsets: dict[Path, int]) -> None:
    errors: list[str] = []
    kinds = Counter()
    for path in sorted(real_corpus.rglob("*")):
        if path.name not in OFFSET_CHECKPOINTS:
            continue
        offsets = checkpoint.read_offset_checkpoint(path)
        raw = path.read_bytes()
        kinds[(path.name, bool(offsets))] += 1
        if raw == b"":
            assert offsets == {}
        elif checkpoint.offset_checkpoint_bytes(offsets) != raw:  # no duplicates: the file order survives
            errors.append(f"{path}: does not round-trip byte-exact")
        if path.name == checkpoint.CLEANER_OFFSET_CHECKPOINT:
            continue
        for tp, offset in offsets.items():
            leo = log_end_offsets.get(path.parent / names.partition_dir_name(tp))
            if leo is not None and not 0 <= offset <= leo:
                errors.append(f"{path}: {tp} at {offset} beyond its log end {leo}")
    _check(errors)
    assert kinds[(checkpoint.RECOVERY_POINT_CHECKPOINT, True)] >= 13  # one per data dir
    assert kinds[(checkpoint.CLEANER_OFFSET_CHECKPOINT, True)] >= 1  # DonaldY's compacted offsets


def test_williamjie_recovery_point_is_zero(real_corpus: Path) -> None:
    """README: data/test-0 has recovery point 0 while its high watermark is 2032."""
    data = real_corpus / "williamjie__kafakainfo" / "data"
    tp = names.TopicPartition("test", 0)
    assert checkpoint.read_offset_checkpoint(data / checkpoint.RECOVERY_POINT_CHECKPOINT)[tp] == 0
    assert checkpoint.read_offset_checkpoint(data / checkpoint.REPLICATION_OFFSET_CHECKPOINT)[tp] == 2032


def test_leader_epoch_checkpoints(real_corpus: Path, segments: list[Segment]) -> None:
    first_batch_epoch = {}  # (partition dir, base offset) -> leader epoch of the batch starting there
    for s in segments:
        for e in s.readout.entries:
            if e.magic >= 2:
                first_batch_epoch[(s.path.parent, e.base_offset)] = e.partition_leader_epoch
    errors: list[str] = []
    n_files = n_checked = 0
    for path in sorted(real_corpus.rglob(checkpoint.LEADER_EPOCH_CHECKPOINT)):
        n_files += 1
        entries = checkpoint.read_leader_epoch_checkpoint(path)
        raw = path.read_bytes()
        if raw and checkpoint.leader_epoch_checkpoint_bytes(entries) != raw:
            errors.append(f"{path}: does not round-trip byte-exact")
        epochs = [e for e, _ in entries]
        starts = [o for _, o in entries]
        if epochs != sorted(set(epochs)) or starts != sorted(starts) or any(x < 0 for x in epochs + starts):
            errors.append(f"{path}: entries {entries} not ascending")
        for epoch, start in entries:
            actual = first_batch_epoch.get((path.parent, start))
            if actual is not None:
                n_checked += 1
                if actual != epoch:
                    errors.append(f"{path}: epoch {epoch} starts at {start}, but that batch has epoch {actual}")
    _check(errors)
    assert n_files > 300 and n_checked > 20


def test_partition_metadata(real_corpus: Path) -> None:
    errors: list[str] = []
    n = 0
    for path in sorted(real_corpus.rglob(checkpoint.PARTITION_METADATA)):
        n += 1
        topic_id = checkpoint.read_partition_metadata(path)
        assert len(topic_id) == 16 and topic_id != bytes(16)
        if checkpoint.partition_metadata_bytes(topic_id) != path.read_bytes():
            errors.append(f"{path}: does not round-trip byte-exact")
    _check(errors)
    assert n > 100


def test_producer_snapshots(real_corpus: Path, log_end_offsets: dict[Path, int]) -> None:
    errors: list[str] = []
    n_entries = 0
    paths = sorted(real_corpus.rglob("*.snapshot"))
    for path in paths:
        raw = path.read_bytes()
        entries = snapshot.read_snapshot(path)
        n_entries += len(entries)
        if snapshot.snapshot_bytes(entries) != raw:
            errors.append(f"{path}: does not round-trip byte-exact")
        pids = [e.producer_id for e in entries]
        # HashMap order: with at most one producer per bucket the order is fixed by the buckets alone
        if snapshot.java_hashmap_order(sorted(pids)) != pids:
            errors.append(f"{path}: entries {pids} not in Java HashMap order")
        leo = log_end_offsets.get(path.parent)
        if leo is not None and names.offset_from_file_name(path.name) > leo:
            errors.append(f"{path}: snapshot offset beyond the log end {leo}")
    _check(errors)
    # README: only DonaldY myTopic-0's snapshot (148 bytes = 3 entries) has producers (docs/scenarios.md #73)
    assert len(paths) >= 9 and n_entries == 3
    donald = snapshot.read_snapshot(
        real_corpus / "DonaldY__kafka-2.7.1/kafka-logs/myTopic-0/00000000000000000038.snapshot")
    assert [e.producer_id for e in donald] == [4001, 4002, 4003]
    assert all(e.coordinator_epoch == -1 and e.current_txn_first_offset == -1 for e in donald)


def test_clean_shutdown_markers(real_corpus: Path) -> None:
    markers = sorted(real_corpus.rglob(checkpoint.CLEAN_SHUTDOWN_MARKER))
    found = {}
    for path in markers:
        epoch = checkpoint.read_broker_epoch(path)
        assert checkpoint.clean_shutdown_marker_bytes(epoch) == path.read_bytes()
        found[path.relative_to(real_corpus).parts[0]] = epoch
    assert found == {"VolodymyrZee__kafka": None, "SharaWeil__kafka-0.11.0": None,
                     "ronem123__rupia-transaction-service": 11, "nomanazeem__Kafka-java": 12}


def test_partition_dir_names(real_corpus: Path, real_corpus_analysis: dict[str, Any]) -> None:
    """Every directory holding a .log parses as a live topic-partition and renders back to its name."""
    n = 0
    for doc in real_corpus_analysis.values():
        for rel in doc["logs"]:
            if not rel.endswith(".log") or "/" not in rel:
                continue  # the CodeCrafters fixtures are lone files
            dirname = Path(rel).parent.name
            tp, kind = names.parse_partition_dir(dirname)
            assert kind is names.DirKind.LIVE and names.partition_dir_name(tp) == dirname
            n += 1
    assert n > 400
