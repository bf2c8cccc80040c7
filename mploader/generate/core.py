"""Writer of realistic Kafka broker data directories, with fault injection and a ground-truth manifest.

Why it exists: mploader must leave exactly what Kafka's own start-up leaves, on anything from a
few kilobytes (tests) to tens of gigabytes (perf).  Real broker data with a known ground truth is
rare, so this module writes what a Kafka 3.x/4.x broker leaves on disk -- several data dirs,
rolled segments with trimmed indexes, idempotent and transactional producers, commit/abort
markers and ``.txnindex`` entries, changing leader epochs, producer snapshots, checkpoints -- ends
it cleanly or uncleanly, injects faults from a seed, and records in ``manifest.jsonl`` where every
batch is and where valid data ends after each fault.

How it stays fast and small: everything streams.  One partition is written at a time, batch by
batch, with ``os.writev``; a batch is a fresh 61-byte header in front of a records section built
once per record count (record offsets and timestamps are deltas, so identical record bytes are
valid in every batch; only the header fields and the CRC change).  Only the current segment's
index entries are held in memory.  The manifest is written line by line as segments close.

Indexes follow Kafka's *recovery* rule (LOADING.md §7.1), so a recovered segment's rebuilt index
equals the generated one: an ``.index`` entry ``(batch lastOffset, batch start position)`` when
more than ``index_interval_bytes`` lie between the last indexed batch and this batch (never for
the batch at position 0), a time entry at the same moments with the running maximum timestamp,
and a final time entry when the segment is rolled or closed.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import mmap
import os
import random
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from crc32c import crc32c

from mploader.format import checkpoint, compression, index, log as logfmt, names, records, snapshot
from mploader.format.index import AbortedTxn
from mploader.format.snapshot import ProducerSnapshotEntry

logger = logging.getLogger(__name__)

MANIFEST_JSON = "manifest.json"
MANIFEST_LINES = "manifest.jsonl"
MANIFEST_FORMAT = "mploader-generate-manifest"
MANIFEST_VERSION = 1

#: The fields of one row of a ``batches`` line of the manifest, in order.
BATCH_FIELDS = (
    "position", "size", "base_offset", "last_offset", "records", "max_timestamp", "leader_epoch",
    "producer_id", "producer_epoch", "base_sequence", "transactional", "control",
)
FAULT_KINDS = (
    "torn_tail", "flipped_byte", "zero_tail", "missing_index", "corrupt_index", "truncated_index",
    "stray_files", "orphaned_index", "corrupt_snapshot",
)
#: Faults in ``.log`` bytes: each one says where valid data now ends in its segment.
DATA_FAULTS = ("torn_tail", "flipped_byte", "zero_tail")

TOPIC_NAMES = (
    "orders", "payments.v1", "user-events", "clickstream_raw", "inventory", "audit.log",
    "sensor-readings", "notifications", "billing_invoices", "search.queries", "shipments", "metrics-1m",
)

_HEAD = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount: the CRC-covered header part
assert _HEAD.size + _TAIL.size == records.RECORD_BATCH_OVERHEAD
_INT32_MAX = 2**31 - 1
_SEQUENCE_MODULUS = 2**31
_IOV_BATCHES = 300  # batches per writev (3 buffers each, below IOV_MAX = 1024)
_FLUSH_BYTES = 4 << 20
_WRITEBACK_BYTES = 32 << 20  # start writeback of a segment's bytes every this many bytes
_MANIFEST_ROWS = 4096  # batch rows per ``batches`` line
_PID_BLOCK = 100_000  # producer ids of one partition come from their own block


# --------------------------------------------------------------------------------------------
# Configuration, results, progress


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

    def replace(self, **changes: Any) -> "GeneratorConfig":
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
    deletes them when a recovery truncated bytes (LOADING.md §6.6)."""

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


class Callback:
    """Progress hook in the style of fsspec's ``Callback``: :meth:`set_size` once with the expected
    number of ``.log`` bytes, then :meth:`relative_update` as bytes are written.  Subclasses
    override :meth:`call`, which runs after every change."""

    def __init__(self) -> None:
        self.size: int | None = None
        self.value = 0

    def set_size(self, size: int) -> None:
        self.size = size
        self.call()

    def relative_update(self, inc: int = 1) -> None:
        self.value += inc
        self.call()

    def absolute_update(self, value: int) -> None:
        self.value = value
        self.call()

    def call(self) -> None:
        """Called after every update; does nothing here."""

    def close(self) -> None:
        """Called once when the work is done."""


# --------------------------------------------------------------------------------------------
# Record sections built once and reused


@dataclass(frozen=True, slots=True)
class _Template:
    """The records section of a batch of ``n`` records (maybe compressed); reused by every batch."""

    n: int
    payload: bytes
    size: int  # whole batch, header included
    ts_span: int  # max record timestamp delta


def _value_pool(rng: random.Random, size: int) -> bytes:
    """JSON-ish text, so that compressed batches compress like real events do."""
    words = ["click", "view", "order", "cart", "user", "session", "item", "price", "EUR", "USD", "ok", "retry",
             "mobile", "web", "eu-west-1", "us-east-2", "true", "false", "null", "checkout", "search", "login"]
    parts: list[str] = []
    n = 0
    while n < size:
        s = (f'{{"id":{rng.randint(1, 10**9)},"type":"{rng.choice(words)}","src":"{rng.choice(words)}",'
             f'"v":{rng.random():.6f},"tags":["{rng.choice(words)}","{rng.choice(words)}"]}}\n')
        parts.append(s)
        n += len(s)
    return "".join(parts).encode()[:size]


def _build_templates(cfg: GeneratorConfig, rng: random.Random) -> tuple[list[_Template], list[float]]:
    """Record sections for a few record counts, and the probability of each."""
    codec = compression.codec_id(cfg.compression)
    rpb = cfg.records_per_batch
    key_len = 8
    probe = len(records.encode_record(records.Record(rpb, rpb, b"k" * key_len, b"v" * 1000, (("trace", b"t" * 8),))))
    per_record = (cfg.batch_bytes - records.RECORD_BATCH_OVERHEAD) // rpb
    value_size = max(0, per_record - (probe - 1000))
    pool = _value_pool(rng, max(4096, 4 * value_size + 4096))
    counts = sorted({rpb, max(1, rpb // 2), max(1, rpb // 4), 1, rng.randint(1, rpb)}, reverse=True)
    templates = []
    for j, n in enumerate(counts):
        recs = []
        for i in range(n):
            start = (i * 7919 + j * 104729) % max(1, len(pool) - value_size)
            headers = (("trace", f"{i:08x}".encode()),) if j % 2 else ()
            recs.append(records.Record(i, i, f"k{(i * 31 + j) % 10**7:07d}".encode(), pool[start:start + value_size],
                                       headers))
        # keep within batch_bytes, like a producer filling batch.size
        encoded: list[bytes] = []
        room = cfg.batch_bytes - records.RECORD_BATCH_OVERHEAD
        for r in recs:
            e = records.encode_record(r)
            if encoded and len(e) > room:
                break
            encoded.append(e)
            room -= len(e)
        n = len(encoded)
        raw = b"".join(encoded)
        payload = compression.compress(codec, raw)
        templates.append(_Template(n, payload, records.RECORD_BATCH_OVERHEAD + len(payload), n - 1))
    # most batches are full; linger.ms sends the rest early
    weights = [0.7] + [0.3 / (len(templates) - 1)] * (len(templates) - 1) if len(templates) > 1 else [1.0]
    return templates, weights


# --------------------------------------------------------------------------------------------
# Manifest


class _Manifest:
    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / MANIFEST_LINES
        self._f = open(self.path, "w", encoding="utf-8", buffering=1 << 20)

    def line(self, obj: dict[str, Any]) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")))
        self._f.write("\n")

    def close(self) -> None:
        self._f.close()


def iter_manifest(out_dir: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The lines of ``manifest.jsonl``, one dict each, streaming (any size)."""
    with open(Path(out_dir) / MANIFEST_LINES, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def read_manifest(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The whole manifest as nested dicts (for small outputs: tests, tools).

    Returns ``manifest.json`` plus ``partitions``: ``{(dir, topic, partition): partition line}``,
    where each partition line gains ``segments`` (segment lines in order, each with ``batches``:
    one dict per batch, keys ``BATCH_FIELDS``) and ``snapshots`` (snapshot lines).
    """
    out_dir = Path(out_dir)
    with open(out_dir / MANIFEST_JSON, encoding="utf-8") as f:
        summary = json.load(f)
    fields = summary.get("batch_fields", list(BATCH_FIELDS))
    partitions: dict[tuple[str, str, int], dict[str, Any]] = {}
    pending_batches: dict[tuple[str, str, int, str], list[dict[str, Any]]] = {}
    pending_segments: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    pending_snapshots: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    data_dirs: list[dict[str, Any]] = []
    for line in iter_manifest(out_dir):
        kind = line["type"]
        if kind == "data_dir":
            data_dirs.append(line)
            continue
        if kind == "fault":
            continue  # manifest.json lists them
        key = (line["dir"], line["topic"], line["partition"])
        if kind == "batches":
            pending_batches.setdefault((*key, line["segment"]), []).extend(dict(zip(fields, r)) for r in line["rows"])
        elif kind == "segment":
            line["batches"] = pending_batches.pop((*key, line["file"]), [])
            pending_segments.setdefault(key, []).append(line)
        elif kind == "snapshot":
            pending_snapshots.setdefault(key, []).append(line)
        elif kind == "partition":
            line["segments"] = pending_segments.pop(key, [])
            line["snapshots"] = pending_snapshots.pop(key, [])
            partitions[key] = line
    summary["partitions"] = partitions
    summary["data_dir_lines"] = data_dirs
    return summary


# --------------------------------------------------------------------------------------------
# One partition


class _ProducerEntry:
    """The broker's producer-state entry (what a snapshot persists, FORMATS.md §12)."""

    __slots__ = ("epoch", "last_seq", "last_offset", "offset_delta", "timestamp", "coordinator_epoch",
                 "txn_first_offset")

    def __init__(self) -> None:
        self.epoch = -1
        self.last_seq = -1
        self.last_offset = -1
        self.offset_delta = 0
        self.timestamp = -1
        self.coordinator_epoch = -1
        self.txn_first_offset = -1


class _Producer:
    """A producer client writing to this partition."""

    __slots__ = ("pid", "epoch", "seq", "txn_left")

    def __init__(self, pid: int, epoch: int) -> None:
        self.pid = pid
        self.epoch = epoch
        self.seq = 0
        self.txn_left = -1  # data batches left in the open transaction; -1: none open; 0: marker due


@dataclass(slots=True)
class _SegmentInfo:
    base: int
    next_offset: int
    size: int
    batches: int
    last_position: int
    last_size: int
    has_txn_index: bool
    index_bytes: int
    time_index_bytes: int
    active: bool


class _PartitionWriter:
    def __init__(self, gen: "_Generator", dir_name: str, dir_path: Path, tp: names.TopicPartition,
                 global_index: int, budget: int, topic_id: bytes) -> None:
        cfg = gen.cfg
        self.gen = gen
        self.cfg = cfg
        self.dir_name = dir_name
        self.tp = tp
        self.path = dir_path / names.partition_dir_name(tp)
        self.budget = budget
        self.topic_id = topic_id
        self.rng = random.Random(f"{cfg.seed}:{tp.topic}:{tp.partition}")
        rng = self.rng
        self.key = {"dir": dir_name, "topic": tp.topic, "partition": tp.partition}
        self.first_base = rng.randint(1, 5_000_000) if rng.random() < cfg.nonzero_start_fraction else 0
        self.next_offset = self.first_base
        self.clock = cfg.start_timestamp_ms + rng.randint(0, 60_000)
        self.leader_epoch = 0 if self.first_base == 0 else rng.randint(1, 30)
        self.leader_epochs: list[tuple[int, int]] = []
        self.coordinator_epoch = rng.randint(0, 10)
        self.written = 0
        self.batches = 0
        self.records = 0
        expected_steps = max(1.0, budget / gen.mean_batch_size)
        self.p_leader_change = min(1.0, cfg.leader_epoch_changes / expected_steps)
        # producers
        self._next_pid = 1000 + global_index * _PID_BLOCK + rng.randint(0, 99)
        self.idempotent = [_Producer(self._new_pid(), 0) for _ in range(cfg.idempotent_producers)]
        self.transactional = [_Producer(self._new_pid(), rng.randint(0, 5)) for _ in range(cfg.transactional_producers)]
        self.entries: dict[int, _ProducerEntry] = {}  # broker's producer map, insertion order
        self.ongoing: dict[int, int] = {}  # pid -> first offset of its open transaction
        self.p_idem = cfg.idempotent_fraction if self.idempotent else 0.0
        self.p_txn = cfg.transactional_fraction if self.transactional else 0.0
        self.last_snapshot_offset = 0
        self.snapshots: list[int] = []
        self.segments: list[_SegmentInfo] = []
        self.codec_attr = compression.codec_id(cfg.compression) & records.ATTR_CODEC_MASK
        # current segment
        self.fd = -1
        self.written_back = 0
        self.seg_base = 0
        self.seg_size = 0
        self.seg_batches = 0
        self.seg_last_pos = 0
        self.seg_last_size = 0
        self.last_indexed = 0
        self.idx_off: list[int] = []
        self.idx_pos: list[int] = []
        self.tidx_ts: list[int] = []
        self.tidx_off: list[int] = []
        self.max_ts = -1
        self.max_ts_off = 0
        self.txn_entries: list[AbortedTxn] = []
        self.iov: list[bytes] = []
        self.iov_bytes = 0
        self.rows: list[list[Any]] = []
        self.max_offset_entries = cfg.max_index_size // 8
        self.max_time_entries = cfg.max_index_size // 12
        self.segment_bytes = cfg.segment_bytes
        self.index_interval_bytes = cfg.index_interval_bytes
        self.last_leader_epoch = -1
        self.tidx_last_ts = -1
        self.index_full = False

    def _new_pid(self) -> int:
        pid = self._next_pid
        self._next_pid += 1 + (self.rng.random() < 0.2) * self.rng.randint(1, 20)
        return pid

    # ---- the partition's life

    def write(self) -> None:
        os.makedirs(self.path)
        if self.first_base > 0:
            # the snapshot taken when the segment before the first one (since deleted by retention) rolled
            self._write_snapshot(self.first_base, [])
        self._open_segment()
        # the hot loop: plain random() calls are several times cheaper than randint/choices
        rand = self.rng.random
        table = self.gen.template_table
        n_table = len(table)
        transactional = self.transactional
        p_txn, p_idem_end, p_leader = self.p_txn, self.p_txn + self.p_idem, self.p_leader_change
        budget = self.budget
        while self.written < budget or self.batches == 0:
            if rand() < p_leader:
                self.leader_epoch += (1, 1, 1, 2, 3)[int(rand() * 5)]
            self.clock += int(rand() * 13)
            r = rand()
            if r < p_txn:
                self._transactional_step(transactional[int(rand() * len(transactional))])
            elif r < p_idem_end:
                self._idempotent_batch(table[int(rand() * n_table)])
            else:
                self._append_data(table[int(rand() * n_table)], records.NO_PRODUCER_ID, -1, records.NO_SEQUENCE,
                                  False)
        self._finish()

    def _idempotent_batch(self, tmpl: _Template) -> None:
        rand = self.rng.random
        i = int(rand() * len(self.idempotent))
        p = self.idempotent[i]
        if rand() < self.cfg.producer_restart_probability:
            p = self.idempotent[i] = _Producer(self._new_pid(), 0)
        seq = p.seq
        p.seq = (seq + tmpl.n) % _SEQUENCE_MODULUS
        self._append_data(tmpl, p.pid, p.epoch, seq, False)

    def _transactional_step(self, p: _Producer) -> None:
        rng = self.rng
        if p.txn_left == 0:
            commit = rng.random() >= self.cfg.abort_fraction
            if rng.random() < 0.05:
                self.coordinator_epoch += 1
            self._append_marker(p, commit)
            p.txn_left = -1
            if rng.random() < self.cfg.epoch_bump_probability:
                p.epoch += 1
                p.seq = 0
            return
        if p.txn_left < 0:
            p.txn_left = rng.randint(1, self.cfg.max_transaction_batches)
        table = self.gen.template_table
        tmpl = table[int(rng.random() * len(table))]
        seq = p.seq
        p.seq = (seq + tmpl.n) % _SEQUENCE_MODULUS
        p.txn_left -= 1
        self._append_data(tmpl, p.pid, p.epoch, seq, True)

    # ---- appending

    def _append_data(self, tmpl: _Template, pid: int, pepoch: int, bseq: int, transactional: bool) -> None:
        base = self.next_offset
        n = tmpl.n
        last = base + n - 1
        base_ts = self.clock
        rand = self.rng.random
        if rand() < 0.1:
            base_ts -= 1 + int(rand() * 40)  # producers' clocks disagree a little
        max_ts = base_ts + tmpl.ts_span
        attrs = self.codec_attr | (records.ATTR_TRANSACTIONAL if transactional else 0)
        tail = _TAIL.pack(attrs, n - 1, base_ts, max_ts, pid, pepoch, bseq, n)
        crc = crc32c(tmpl.payload, crc32c(tail))
        size = tmpl.size
        ple = self.leader_epoch
        head = _HEAD.pack(base, size - records.LOG_OVERHEAD, ple, records.MAGIC_V2, crc)
        self._append(size, base, last, max_ts, ple, (head, tail, tmpl.payload))
        self.rows.append([self.seg_last_pos, size, base, last, n, max_ts, ple, pid, pepoch, bseq, transactional, None])
        self.records += n
        if pid >= 0:
            e = self.entries.get(pid)
            if e is None:
                e = self.entries[pid] = _ProducerEntry()
            e.epoch = pepoch
            e.last_seq = records.last_sequence(bseq, n - 1)
            e.last_offset = last
            e.offset_delta = n - 1
            e.timestamp = max_ts
            if transactional and e.txn_first_offset < 0:
                e.txn_first_offset = base
                self.ongoing[pid] = base

    def _append_marker(self, p: _Producer, commit: bool) -> None:
        offset = self.next_offset
        ts = self.clock
        ple = self.leader_epoch
        batch = records.build_end_txn_marker_batch(
            offset, p.pid, p.epoch, commit, coordinator_epoch=self.coordinator_epoch, timestamp=ts,
            partition_leader_epoch=ple,
        )
        self._append(len(batch), offset, offset, ts, ple, (batch,))
        self.rows.append([self.seg_last_pos, len(batch), offset, offset, 1, ts, ple, p.pid, p.epoch,
                          records.NO_SEQUENCE, True, "COMMIT" if commit else "ABORT"])
        self.records += 1
        e = self.entries.get(p.pid)
        if e is None:
            e = self.entries[p.pid] = _ProducerEntry()
        if p.epoch != e.epoch:  # an epoch change clears the retained batch metadata
            e.last_seq, e.last_offset, e.offset_delta = -1, -1, 0
        e.epoch = p.epoch
        e.coordinator_epoch = self.coordinator_epoch
        e.timestamp = ts
        if e.txn_first_offset >= 0:
            if not commit:
                others = [first for pid, first in self.ongoing.items() if pid != p.pid]
                lso = min(others) if others else offset + 1
                self.txn_entries.append(AbortedTxn(p.pid, e.txn_first_offset, offset, lso))
            del self.ongoing[p.pid]
            e.txn_first_offset = -1

    def _append(self, size: int, base: int, last: int, max_ts: int, ple: int, bufs: tuple[bytes, ...]) -> None:
        # Kafka's LogSegment.shouldRoll: the batch does not fit, an index is full, or the
        # offset would not fit the indexes' int32 relative offsets
        if self.seg_size > 0 and (self.seg_size > self.segment_bytes - size or self.index_full
                                  or last - self.seg_base > _INT32_MAX):
            self._roll()
        if ple > self.last_leader_epoch:
            self.leader_epochs.append((ple, base))
            self.last_leader_epoch = ple
        pos = self.seg_size
        if max_ts > self.max_ts:
            self.max_ts = max_ts
            self.max_ts_off = last
        if pos - self.last_indexed > self.index_interval_bytes:  # LOADING.md §7.1
            self.idx_off.append(last)
            self.idx_pos.append(pos)
            if self.max_ts > self.tidx_last_ts:
                self.tidx_ts.append(self.max_ts)
                self.tidx_off.append(self.max_ts_off)
                self.tidx_last_ts = self.max_ts
            self.last_indexed = pos
            self.index_full = (len(self.idx_off) >= self.max_offset_entries
                               or len(self.tidx_ts) >= self.max_time_entries - 1)
        self.iov.extend(bufs)
        self.iov_bytes += size
        self.seg_size = pos + size
        self.seg_last_pos = pos
        self.seg_last_size = size
        self.seg_batches += 1
        self.next_offset = last + 1
        self.written += size
        self.batches += 1
        if len(self.iov) >= 3 * _IOV_BATCHES or self.iov_bytes >= _FLUSH_BYTES:
            self._flush()
        if len(self.rows) >= _MANIFEST_ROWS:
            self._flush_rows()

    def _flush(self) -> None:
        if self.iov:
            data_len = self.iov_bytes
            done = os.writev(self.fd, self.iov)
            if done != data_len:  # short write (rare): write the rest plainly
                rest = b"".join(self.iov)[done:]
                while rest:
                    rest = rest[os.write(self.fd, rest):]
            self.iov = []
            self.iov_bytes = 0
            self.gen.progress(data_len)
            if self.seg_size - self.written_back >= _WRITEBACK_BYTES:
                _start_writeback(self.fd, self.written_back, self.seg_size - self.written_back)
                self.written_back = self.seg_size

    def _flush_rows(self) -> None:
        if self.rows:
            self.gen.manifest.line({"type": "batches", **self.key,
                                    "segment": names.segment_file_name(self.seg_base, names.LOG_SUFFIX),
                                    "rows": self.rows})
            self.rows = []

    # ---- segments

    def _file(self, base: int, suffix: str) -> Path:
        return self.path / names.segment_file_name(base, suffix)

    def _open_segment(self) -> None:
        self.seg_base = self.next_offset
        self.fd = os.open(self._file(self.seg_base, names.LOG_SUFFIX), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.seg_size = self.seg_batches = self.seg_last_pos = self.seg_last_size = 0
        self.written_back = 0
        self.last_indexed = 0
        self.idx_off, self.idx_pos, self.tidx_ts, self.tidx_off = [], [], [], []
        self.tidx_last_ts = -1
        self.index_full = False
        self.max_ts, self.max_ts_off = -1, self.seg_base
        self.txn_entries = []

    def _close_segment(self, active: bool, trimmed: bool) -> None:
        """Write the segment's indexes and its manifest line.  ``trimmed``: as after a roll or a
        clean close (final time entry, files cut to their entries); otherwise preallocated."""
        self._flush()
        self._flush_rows()
        _start_writeback(self.fd, self.written_back, self.seg_size - self.written_back)
        os.close(self.fd)
        self.fd = -1
        base = self.seg_base
        if trimmed and self.max_ts > self.tidx_last_ts:
            self.tidx_ts.append(self.max_ts)
            self.tidx_off.append(self.max_ts_off)
        cfg = self.cfg
        idx_size = None if trimmed else index.round_down(cfg.max_index_size, index.OFFSET_ENTRY.itemsize)
        tidx_size = None if trimmed else index.round_down(cfg.max_index_size, index.TIME_ENTRY.itemsize)
        idx = index.offset_index_bytes(base, self.idx_off, self.idx_pos)
        tidx = index.time_index_bytes(base, self.tidx_ts, self.tidx_off)
        _write_file(self._file(base, names.INDEX_SUFFIX), idx, idx_size)
        _write_file(self._file(base, names.TIME_INDEX_SUFFIX), tidx, tidx_size)
        if self.txn_entries:
            _write_file(self._file(base, names.TXN_INDEX_SUFFIX), index.txn_index_bytes(self.txn_entries))
        info = _SegmentInfo(base, self.next_offset, self.seg_size, self.seg_batches, self.seg_last_pos,
                            self.seg_last_size, bool(self.txn_entries), idx_size or len(idx),
                            tidx_size or len(tidx), active)
        self.segments.append(info)
        self.gen.manifest.line({
            "type": "segment", **self.key, "file": names.segment_file_name(base, names.LOG_SUFFIX),
            "base_offset": base, "next_offset": self.next_offset, "size": self.seg_size, "batches": self.seg_batches,
            "active": active, "max_timestamp": self.max_ts,
            "offset_index": [[o, p] for o, p in zip(self.idx_off, self.idx_pos)],
            "time_index": [[t, o] for t, o in zip(self.tidx_ts, self.tidx_off)],
            "txn_index": [[t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset]
                          for t in self.txn_entries],
            "index_file_bytes": info.index_bytes, "time_index_file_bytes": info.time_index_bytes,
        })
        self.gen.segments += 1

    def _roll(self) -> None:
        self._close_segment(active=False, trimmed=True)
        self._take_snapshot(self.next_offset)
        self._open_segment()

    def _take_snapshot(self, offset: int) -> None:
        """ProducerStateManager.takeSnapshot: only when the map end moved past the last snapshot."""
        if offset <= self.last_snapshot_offset:
            return
        order = snapshot.java_hashmap_order(self.entries)
        entries = []
        for pid in order:
            e = self.entries[pid]
            entries.append(ProducerSnapshotEntry(pid, e.epoch, e.last_seq, e.last_offset, e.offset_delta,
                                                 e.timestamp, e.coordinator_epoch, e.txn_first_offset))
        self._write_snapshot(offset, entries)

    def _write_snapshot(self, offset: int, entries: list[ProducerSnapshotEntry]) -> None:
        name = names.segment_file_name(offset, names.SNAPSHOT_SUFFIX)
        _write_file(self.path / name, snapshot.snapshot_bytes(entries))
        self.last_snapshot_offset = offset
        self.snapshots.append(offset)
        self.gen.manifest.line({"type": "snapshot", **self.key, "file": name, "offset": offset,
                                "producers": [list(dataclasses.astuple(e)) for e in entries]})

    # ---- the end: clean or unclean

    def _finish(self) -> None:
        cfg = self.cfg
        rng = self.rng
        clean = cfg.clean_shutdown
        self._close_segment(active=True, trimmed=clean)
        leo = self.next_offset
        if clean:
            self._take_snapshot(leo)
            high_watermark = leo
        else:
            high_watermark = max(self.first_base, leo - rng.randint(0, min(50, leo - self.first_base)))
        # DeleteRecords: a log start offset inside the first segment (never past the high watermark)
        log_start = self.first_base
        first = self.segments[0]
        hi = min(first.next_offset - 1, high_watermark)
        if rng.random() < cfg.delete_records_fraction and hi > first.base:
            log_start = rng.randint(first.base + 1, hi)
        # recovery point: what the last flush reached, behind the log end after a crash
        if clean:
            recovery_point = leo
        else:
            r = rng.random()
            bases = [s.base for s in self.segments]
            if r < 0.65:
                recovery_point = bases[-1]  # flushed when the active segment was rolled in
            elif r < 0.85:
                recovery_point = rng.choice(bases)  # flushes lagging behind
            else:
                recovery_point = rng.randint(self.first_base, leo - 1)  # flush.messages / flush.ms
            recovery_point = max(recovery_point, log_start)
        epochs = _truncate_epochs_from_start(self.leader_epochs, log_start)
        _write_file(self.path / checkpoint.LEADER_EPOCH_CHECKPOINT, checkpoint.leader_epoch_checkpoint_bytes(epochs))
        _write_file(self.path / checkpoint.PARTITION_METADATA, checkpoint.partition_metadata_bytes(self.topic_id))
        self.gen.manifest.line({
            "type": "partition", **self.key, "path": os.path.relpath(self.path, self.gen.out_dir),
            "topic_id": base64.urlsafe_b64encode(self.topic_id).rstrip(b"=").decode(),
            "first_segment_base": self.first_base, "log_start_offset": log_start, "log_end_offset": leo,
            "recovery_point": recovery_point, "high_watermark": high_watermark,
            "leader_epoch_checkpoint": [list(e) for e in epochs],
            "leader_epochs_in_log": [list(e) for e in self.leader_epochs],
            "segment_count": len(self.segments), "log_bytes": self.written, "batch_count": self.batches,
            "record_count": self.records, "snapshot_offsets": self.snapshots,
            "ongoing_transactions": [[pid, first] for pid, first in self.ongoing.items()],
            "producer_ids": list(self.entries),
        })
        self.gen.partition_done(self, log_start, recovery_point, high_watermark)


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Have the kernel start writing these bytes to disk now, without waiting for them.

    Left alone, dirty pages of an output smaller than the dirty-page limits reach the disk only
    at the next sync, after all the CPU work: generation then costs CPU time *plus* disk time.
    POSIX_FADV_DONTNEED starts asynchronous writeback of the range on Linux (and drops pages
    that are already clean), so the disk works while we build the next batches.
    """
    if length > 0 and hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def _truncate_epochs_from_start(entries: list[tuple[int, int]], start: int) -> list[tuple[int, int]]:
    """LeaderEpochFileCache.truncateFromStart: entries starting at or before ``start`` go; the
    latest of them comes back starting at ``start``."""
    removed = [e for e in entries if e[1] <= start]
    kept = [e for e in entries if e[1] > start]
    if removed:
        kept.insert(0, (removed[-1][0], start))
    return kept


def _write_file(path: Path, data: bytes, file_size: int | None = None) -> None:
    """Write ``data``; with ``file_size`` extend the file to that size with a zero (sparse) tail,
    as RandomAccessFile.setLength does for a preallocated index."""
    with open(path, "wb") as f:
        f.write(data)
        if file_size is not None and file_size > len(data):
            f.truncate(file_size)


# --------------------------------------------------------------------------------------------
# Faults


class _FaultInjector:
    """Damages a finished partition; every fault returns the ground truth of what it did."""

    def __init__(self, rng: random.Random, pw: _PartitionWriter) -> None:
        self.rng = rng
        self.pw = pw
        self.data_faulted: set[int] = set()  # segment bases with a data fault already

    def fault(self, kind: str, **kw: Any) -> Fault:
        pw = self.pw
        return Fault(kind, pw.dir_name, pw.tp.topic, pw.tp.partition, **kw)

    def _seg_path(self, seg: _SegmentInfo, suffix: str) -> Path:
        return self.pw.path / names.segment_file_name(seg.base, suffix)

    def _batch_at(self, seg: _SegmentInfo, k: int) -> tuple[int, int]:
        """Position and size of batch ``k`` of a segment (walks the headers of that one file)."""
        path = self._seg_path(seg, names.LOG_SUFFIX)
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for i, (pos, size, _magic) in enumerate(logfmt.iter_entries(mm, 0, seg.size)):
                if i == k:
                    return pos, size
        raise AssertionError(f"{path} has no batch {k}")

    def inject(self, kind: str) -> Fault | None:
        if kind in DATA_FAULTS:
            return self._data_fault(kind)
        return getattr(self, "_" + kind)()

    def _data_fault(self, kind: str) -> Fault | None:
        rng = self.rng
        segs = self.pw.segments
        active = segs[-1]
        free = [s for s in segs if s.base not in self.data_faulted]
        if not free:
            logger.info("no segment of %s-%d left for a %s fault", self.pw.tp.topic, self.pw.tp.partition, kind)
            return None
        if kind in ("torn_tail", "zero_tail") and active.base in self.data_faulted:
            kind = "flipped_byte"  # the tail is taken: damage another segment instead
        seg = active if kind != "flipped_byte" else rng.choice(free)
        self.data_faulted.add(seg.base)
        path = self._seg_path(seg, names.LOG_SUFFIX)
        file = path.name
        if kind == "torn_tail":
            pos, size = seg.last_position, seg.last_size
            keep = rng.randint(1, size - 1)
            os.truncate(path, pos + keep)
            return self.fault(kind, file=file, segment_base=seg.base, batch=seg.batches - 1, position=pos + keep,
                              valid_end=pos, detail=f"last batch cut after {keep} of its {size} bytes")
        if kind == "zero_tail":
            if rng.random() < 0.5:
                n = rng.randint(1, 8192)
                with open(path, "ab") as f:
                    f.write(bytes(n))
                return self.fault(kind, file=file, segment_base=seg.base, position=seg.size, valid_end=seg.size,
                                  detail=f"{n} zero bytes appended after the last batch")
            k = rng.randrange(seg.batches)
            pos, _size = self._batch_at(seg, k)
            with open(path, "r+b") as f:
                f.seek(pos)
                f.write(bytes(seg.size - pos))
            return self.fault(kind, file=file, segment_base=seg.base, batch=k, position=pos, valid_end=pos,
                              detail=f"bytes {pos}..{seg.size} zeroed (lost pages), file length kept")
        k = rng.randrange(seg.batches)
        pos, size = self._batch_at(seg, k)
        at = pos + rng.randrange(records.ATTRIBUTES_OFFSET, size)  # inside the CRC-covered range
        mask = rng.randint(1, 255)
        with open(path, "r+b") as f:
            f.seek(at)
            b = f.read(1)[0]
            f.seek(at)
            f.write(bytes([b ^ mask]))
        return self.fault("flipped_byte", file=file, segment_base=seg.base, batch=k, position=at, valid_end=pos,
                          detail=f"byte {at} xor {mask:#04x} (batch {k} at {pos}, {size} bytes)")

    def _existing(self, *suffixes: str) -> list[tuple[_SegmentInfo, str, Path]]:
        out = []
        for seg in self.pw.segments:
            for sfx in suffixes:
                path = self._seg_path(seg, sfx)
                if path.exists():
                    out.append((seg, sfx, path))
        return out

    def _missing_index(self) -> Fault | None:
        rng = self.rng
        suffix = names.INDEX_SUFFIX if rng.random() < 0.7 else names.TIME_INDEX_SUFFIX
        candidates = self._existing(suffix) or self._existing(names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX)
        if not candidates:
            return None
        seg, suffix, path = rng.choice(candidates)
        path.unlink()
        return self.fault("missing_index", file=path.name, segment_base=seg.base, files=(path.name,),
                          detail=f"{suffix} removed")

    def _corrupt_index(self) -> Fault | None:
        rng = self.rng
        with_txn = self._existing(names.TXN_INDEX_SUFFIX)
        if with_txn and rng.random() < 0.5:
            seg, _sfx, path = rng.choice(with_txn)
            entries = os.path.getsize(path) // index.TXN_ENTRY.itemsize
            i = rng.randrange(entries)
            bad = seg.base - 1 - rng.randint(0, 1000)
            at = i * index.TXN_ENTRY.itemsize + 18  # lastOffset
            with open(path, "r+b") as f:
                f.seek(at)
                f.write(struct.pack(">q", bad))
            return self.fault("corrupt_index", file=path.name, segment_base=seg.base, position=at,
                              detail=f"aborted txn entry {i}: lastOffset set to {bad}, below the base offset")
        suffix = names.INDEX_SUFFIX if rng.random() < 0.6 else names.TIME_INDEX_SUFFIX
        candidates = self._existing(suffix) or self._existing(names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX)
        if not candidates:
            return None
        seg, suffix, path = rng.choice(candidates)
        length = os.path.getsize(path)
        entry = 8 if suffix == names.INDEX_SUFFIX else 12
        garbage = rng.randbytes(entry * rng.randint(1, 4))
        at = index.round_down(rng.randint(0, length - len(garbage)), entry) if length >= len(garbage) else 0
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(garbage)
        return self.fault("corrupt_index", file=path.name, segment_base=seg.base, position=at,
                          detail=f"{len(garbage)} random bytes written at byte {at} of a {length}-byte {suffix}")

    def _truncated_index(self) -> Fault | None:
        rng = self.rng
        candidates = [c for c in self._existing(names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX)
                      if os.path.getsize(c[2]) > 1]
        if not candidates:
            return self._missing_index()
        seg, suffix, path = rng.choice(candidates)
        length = os.path.getsize(path)
        entry = 8 if suffix == names.INDEX_SUFFIX else 12
        if seg.active and not self.pw.cfg.clean_shutdown and length > 4096:
            # a preallocated file: cut it inside its written entries
            used = len(self.pw.idx_off) * 8 if suffix == names.INDEX_SUFFIX else len(self.pw.tidx_ts) * 12
            new = max(1, used - rng.randint(1, entry - 1))
        else:
            new = length - rng.randint(1, min(length, entry * 2) - 1)
        os.truncate(path, new)
        return self.fault("truncated_index", file=path.name, segment_base=seg.base, position=new,
                          detail=f"{suffix} cut from {length} to {new} bytes")

    def _stray_files(self) -> Fault:
        rng = self.rng
        pw = self.pw
        first = pw.segments[0]
        variant = rng.randrange(3)
        created: list[str] = []

        def make(name: str, data: bytes) -> None:
            _write_file(pw.path / name, data)
            created.append(name)

        if variant == 0:
            # leftovers of a segment deletion (retention, or replaced by the cleaner) never finished
            old = first.base - rng.randint(1, min(10_000, first.base)) if first.base > 0 else first.base
            for sfx in (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.SNAPSHOT_SUFFIX):
                make(names.segment_file_name(old, sfx) + names.DELETED_SUFFIX, rng.randbytes(rng.randint(0, 200)))
            detail = "*.deleted files of an older segment (Kafka deletes them at load)"
        elif variant == 1:
            # a log-cleaner pass interrupted while writing its output
            seg = rng.choice(pw.segments)
            for sfx in (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX):
                make(names.segment_file_name(seg.base, sfx) + names.CLEANED_SUFFIX, rng.randbytes(rng.randint(0, 300)))
            detail = "*.cleaned files (Kafka deletes them at load)"
        else:
            # interrupted before the .cleaned -> .swap renames finished: swap files at offsets >= the
            # smallest .cleaned offset are deleted with the .cleaned files (LOADING.md §6.1)
            seg = rng.choice(pw.segments)
            make(names.segment_file_name(seg.base, names.LOG_SUFFIX) + names.CLEANED_SUFFIX, rng.randbytes(100))
            make(names.segment_file_name(seg.base, names.INDEX_SUFFIX) + names.SWAP_SUFFIX, rng.randbytes(16))
            make(names.segment_file_name(seg.base, names.LOG_SUFFIX) + names.SWAP_SUFFIX, rng.randbytes(150))
            detail = ".cleaned and .swap files at the same offset (Kafka deletes all of them at load)"
        return self.fault("stray_files", file=created[0], files=tuple(created), detail=detail)

    def _orphaned_index(self) -> Fault:
        rng = self.rng
        pw = self.pw
        bases = {s.base for s in pw.segments}
        off = pw.next_offset + rng.randint(1, 1000) if rng.random() < 0.5 else pw.segments[-1].base + 1
        while off in bases:
            off += 1
        src = rng.choice(pw.segments)
        created = []
        for sfx in (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX)[: rng.randint(1, 3)]:
            name = names.segment_file_name(off, sfx)
            source = self._seg_path(src, sfx)  # an earlier fault may have removed it: then the orphan is empty
            data = source.read_bytes()[:4096] if sfx != names.TXN_INDEX_SUFFIX and source.exists() else b""
            _write_file(pw.path / name, data)
            created.append(name)
        return self.fault("orphaned_index", file=created[0], segment_base=None, files=tuple(created),
                          detail=f"index files for offset {off}, which has no .log (Kafka deletes them at load)")

    def _corrupt_snapshot(self) -> Fault | None:
        rng = self.rng
        pw = self.pw
        if not pw.snapshots:
            return self._stray_files()
        off = rng.choice(pw.snapshots)
        path = pw.path / names.segment_file_name(off, names.SNAPSHOT_SUFFIX)
        length = os.path.getsize(path)
        at = rng.randrange(length)
        with open(path, "r+b") as f:
            f.seek(at)
            b = f.read(1)[0]
            f.seek(at)
            f.write(bytes([b ^ rng.randint(1, 255)]))
        return self.fault("corrupt_snapshot", file=path.name, position=at,
                          detail=f"byte {at} of {length} flipped (bad version or CRC: Kafka deletes the file)")


# --------------------------------------------------------------------------------------------
# The whole broker


class _Generator:
    def __init__(self, out_dir: Path, cfg: GeneratorConfig, callback: Callback) -> None:
        self.out_dir = out_dir
        self.cfg = cfg
        self.callback = callback
        self.rng = random.Random(f"{cfg.seed}:broker")
        self.templates, weights = _build_templates(cfg, random.Random(f"{cfg.seed}:records"))
        # draw a template with one random(): a table holding each template in proportion to its weight
        self.template_table = [t for t, w in zip(self.templates, weights) for _ in range(round(w * 1000))]
        self.mean_batch_size = sum(t.size for t in self.template_table) / len(self.template_table)
        self.manifest = _Manifest(out_dir)
        self.segments = 0
        self.batches = 0
        self.records = 0
        self.log_bytes = 0
        self.faults: list[Fault] = []
        self.dir_names = [f"data-{i}" for i in range(cfg.data_dirs)]
        self.dir_offsets: dict[str, dict[str, dict[names.TopicPartition, int]]] = {
            d: {"recovery": {}, "log_start": {}, "replication": {}} for d in self.dir_names
        }
        self.fault_rng = random.Random(f"{cfg.seed}:faults")

    def progress(self, n: int) -> None:
        self.callback.relative_update(n)

    def partition_done(self, pw: _PartitionWriter, log_start: int, recovery_point: int, high_watermark: int) -> None:
        offsets = self.dir_offsets[pw.dir_name]
        offsets["recovery"][pw.tp] = recovery_point
        offsets["replication"][pw.tp] = high_watermark
        if log_start > pw.first_base:  # LogManager writes only log start offsets above the first base
            offsets["log_start"][pw.tp] = log_start
        self.batches += pw.batches
        self.records += pw.records
        self.log_bytes += pw.written

    def run(self) -> None:
        cfg = self.cfg
        rng = self.rng
        topics = [TOPIC_NAMES[i] if i < len(TOPIC_NAMES) else f"topic-{i}" for i in range(cfg.topics)]
        topic_ids = {t: _nonzero_uuid(rng) for t in topics}
        cluster_id = _b64(_nonzero_uuid(rng))
        tps = [names.TopicPartition(t, p) for t in topics for p in range(cfg.partitions_per_topic)]
        weights = [rng.uniform(0.5, 1.5) for _ in tps]
        total_w = sum(weights)
        budgets = [int(cfg.total_bytes * w / total_w) for w in weights]
        # faults: which partition gets which, decided up front from their own random stream
        planned: dict[int, list[str]] = {}
        for _ in range(cfg.faults):
            planned.setdefault(self.fault_rng.randrange(len(tps)), []).append(self.fault_rng.choice(cfg.fault_kinds))
        self.callback.set_size(sum(budgets))
        self.topics = topics
        for i, d in enumerate(self.dir_names):
            path = self.out_dir / d
            os.makedirs(path)
            dir_id = _b64(_nonzero_uuid(rng))
            _write_file(path / "meta.properties", _meta_properties(cfg, cluster_id, dir_id))
            self.manifest.line({"type": "data_dir", "dir": d, "cluster_id": cluster_id, "directory_id": dir_id,
                                "node_id": cfg.node_id, "clean_shutdown": cfg.clean_shutdown})
        for gi, tp in enumerate(tps):
            d = self.dir_names[gi % cfg.data_dirs]  # LogManager spreads new partitions over the dirs
            pw = _PartitionWriter(self, d, self.out_dir / d, tp, gi, budgets[gi], topic_ids[tp.topic])
            pw.write()
            if gi in planned:
                injector = _FaultInjector(self.fault_rng, pw)
                for kind in planned[gi]:
                    f = injector.inject(kind)
                    if f is not None:
                        self.faults.append(f)
                        self.manifest.line({"type": "fault", **f.to_dict()})
                        logger.info("injected %s into %s/%s: %s", f.kind, d, tp, f.detail)
        for d in self.dir_names:
            path = self.out_dir / d
            offsets = self.dir_offsets[d]
            _write_file(path / checkpoint.RECOVERY_POINT_CHECKPOINT,
                        checkpoint.offset_checkpoint_bytes(offsets["recovery"]))
            _write_file(path / checkpoint.LOG_START_OFFSET_CHECKPOINT,
                        checkpoint.offset_checkpoint_bytes(offsets["log_start"]))
            _write_file(path / checkpoint.REPLICATION_OFFSET_CHECKPOINT,
                        checkpoint.offset_checkpoint_bytes(offsets["replication"]))
            if cfg.clean_shutdown:
                _write_file(path / checkpoint.CLEAN_SHUTDOWN_MARKER,
                            checkpoint.clean_shutdown_marker_bytes(cfg.broker_epoch))
        self.manifest.close()


def _nonzero_uuid(rng: random.Random) -> bytes:
    while True:
        b = rng.randbytes(16)
        if b != bytes(16):
            return b


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


def _meta_properties(cfg: GeneratorConfig, cluster_id: str, dir_id: str) -> bytes:
    when = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(cfg.start_timestamp_ms / 1000))
    return (f"#\n#{when}\nnode.id={cfg.node_id}\ndirectory.id={dir_id}\nversion=1\n"
            f"cluster.id={cluster_id}\n").encode("utf-8")


def _is_generator_output(out_dir: Path) -> bool:
    try:
        with open(out_dir / MANIFEST_JSON, encoding="utf-8") as f:
            return json.load(f).get("format") == MANIFEST_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def generate(out_dir: str | os.PathLike[str], config: GeneratorConfig | None = None, *,
             callback: Callback | None = None, overwrite: bool = False) -> GenerateSummary:
    """Write a broker's data dirs under ``out_dir`` (``data-0``, ``data-1``, ...), with
    ``manifest.json`` and ``manifest.jsonl`` beside them.

    ``out_dir`` must be absent or empty; with ``overwrite=True`` an earlier output of this
    function (recognised by its ``manifest.json``) is removed first.
    """
    cfg = config or GeneratorConfig()
    callback = callback or Callback()
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{out} exists and is not empty")
        if not _is_generator_output(out):
            raise FileExistsError(f"{out} is not empty and holds no {MANIFEST_JSON} of mploader generate; "
                                  "refusing to delete it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    header = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "complete": False, "config": cfg.to_dict()}
    _write_file(out / MANIFEST_JSON, json.dumps(header, indent=1).encode())
    logger.info("generating %d partitions (%d bytes, %s shutdown) into %s", cfg.partitions, cfg.total_bytes,
                "clean" if cfg.clean_shutdown else "unclean", out)
    gen = _Generator(out, cfg, callback)
    try:
        gen.run()
    finally:
        callback.close()
    elapsed = time.perf_counter() - started
    summary = GenerateSummary(
        out_dir=str(out), data_dirs=tuple(str(out / d) for d in gen.dir_names), topics=tuple(gen.topics),
        partitions=cfg.partitions, segments=gen.segments, batches=gen.batches, records=gen.records,
        log_bytes=gen.log_bytes, clean_shutdown=cfg.clean_shutdown, faults=tuple(gen.faults), seed=cfg.seed,
        elapsed_s=elapsed, manifest=str(out / MANIFEST_JSON),
    )
    doc = {
        **header, "complete": True, "manifest_lines": MANIFEST_LINES, "batch_fields": list(BATCH_FIELDS),
        "data_dirs": list(gen.dir_names), "topics": list(gen.topics), "clean_shutdown": cfg.clean_shutdown,
        "totals": {"partitions": cfg.partitions, "segments": gen.segments, "batches": gen.batches,
                   "records": gen.records, "log_bytes": gen.log_bytes},
        "faults": [f.to_dict() for f in gen.faults],
    }
    _write_file(out / MANIFEST_JSON, json.dumps(doc, indent=1).encode())
    logger.info("generated %d segments, %d batches, %d bytes in %.1f s", gen.segments, gen.batches,
                gen.log_bytes, elapsed)
    return summary


__all__ = [
    "BATCH_FIELDS", "Callback", "DATA_FAULTS", "FAULT_KINDS", "Fault", "GenerateSummary", "GeneratorConfig",
    "MANIFEST_JSON", "MANIFEST_LINES", "generate", "iter_manifest", "read_manifest",
]
