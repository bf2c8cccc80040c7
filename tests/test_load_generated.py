"""Generated data dirs with injected faults, checked against the generator's manifest (truncation point,
log end offset, rebuilt index bytes).

``mploader generate`` writes broker data dirs, injects faults and writes a manifest with the ground truth
(every batch's position, offsets, producer fields; every segment's index entries; every snapshot's
producers; where valid data ends after each data fault).  Each test here generates a small broker,
loads it with mploader, and compares the outcome with an outcome computed *independently* from the
manifest and the files as they were before the load, by a test-side model of docs/loading.md §6-§10 (the
``Model`` class below: which segments are recovered and when, where each is truncated, which later
segments go, the log end offset as ``readNextOffset`` computes it from the index and the raw bytes,
the §7.1 index rebuild, the aborted-transaction index, the producer-state snapshots Kafka reads,
deletes and writes, the leader-epoch cache).  Nothing of mploader's loader is called to compute an
expectation; only the generator and its manifest are used.

The model restates the spec, so a disagreement is either an mploader bug, a generator/manifest bug
or a model bug: the model cross-checks itself against the manifest where both describe the same thing
(index entries of untouched segments, ``valid_end`` of data faults against a CRC walk of the damaged
file, snapshot contents against the manifest's snapshot lines, aborted transactions of untouched
segments against the manifest's ``txn_index``).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from crc32c import crc32c

from mploader import LoaderConfig, StartupFailedError, TopicPartition, load_logs
from mploader.generate import DATA_FAULTS, FAULT_KINDS, GeneratorConfig, generate, read_manifest
from tests.kafkadir import expected_indexes, parse_offset_checkpoint_text

GEN = GeneratorConfig(
    data_dirs=2, topics=2, partitions_per_topic=3, total_bytes=360_000, segment_bytes=20 * 1024,
    batch_bytes=2048, records_per_batch=4, index_interval_bytes=1024, transactional_fraction=0.4,
    idempotent_fraction=0.4, abort_fraction=0.4, max_transaction_batches=3, leader_epoch_changes=4,
    producer_restart_probability=0.02, delete_records_fraction=0.3, faults=6,
)
NOW = GEN.start_timestamp_ms + 3_600_000  # an hour later: no producer is close to expiring
EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms


def full_sizes(cfg: GeneratorConfig) -> tuple[int, int]:
    """The active segment's .index and .timeindex sizes after a load (§6.9): 10485760 and 10485756 by default."""
    return cfg.max_index_size // 8 * 8, cfg.max_index_size // 12 * 12

INT64_MAX = 2**63 - 1
BIG = b"<a preallocated index, not read>"  # stands for a file larger than BIG_FILE
BIG_FILE = 1 << 20  # files larger than this (preallocated indexes) are not read before the load

# ------------------------------------------------------------------------------------------------
# Raw bytes, read the way Kafka reads them (docs/formats.md §4, §5, §8, §9, §11, §12)


class Fatal(Exception):
    """The model says Kafka's start-up fails; ``args[0]`` is Kafka's exception name."""


class Undetermined(Exception):
    """The model cannot tell what Kafka does here (a garbage index position inside a batch, a damaged batch
    read for producer state); the tests require that this does not happen with their seeds."""


def name(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


def walk(data: bytes, start: int, end: int):
    """FileLogInputStream over ``data[start:end]``: yields ``(position, size, last_offset)``; raises
    Fatal on a size field below 14 (CorruptRecordException outside recovery)."""
    p = start
    while p + 17 < end:
        size = struct.unpack_from(">i", data, p + 8)[0]
        if size < 14:
            raise Fatal("CorruptRecordException")
        if p + 12 + size > end:
            return
        base = struct.unpack_from(">q", data, p)[0]
        last = base + struct.unpack_from(">i", data, p + 23)[0] if data[p + 16] >= 2 else base
        yield p, 12 + size, last
        p += 12 + size


def crc_valid_end(data: bytes) -> int:
    """Where LogSegment.recover stops (§7.3) on v2 data: the end of the CRC-valid prefix."""
    p = 0
    while p + 17 < len(data):
        size = struct.unpack_from(">i", data, p + 8)[0]
        if size < 14 or p + 12 + size > len(data):
            break
        if data[p + 16] < 2 or 12 + size < 61:
            break
        crc = struct.unpack_from(">I", data, p + 17)[0]
        if crc32c(data[p + 21 : p + 12 + size]) != crc:
            break
        p += 12 + size
    return p


def index_entries(data: bytes | None) -> list[tuple[int, int]]:
    """Offset-index slots as Kafka counts them (every whole 8 bytes), relative offset and position."""
    if not data:
        return []
    return list(struct.iter_unpack(">ii", data[: len(data) // 8 * 8]))


def largest_lower_bound(keys: list[int], target: int) -> int:
    """AbstractIndex.largestLowerBoundSlotFor, with the warm section of the last 8 KiB searched first."""
    n = len(keys)
    if n == 0:
        return -1

    def search(lo: int, hi: int) -> int:
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if keys[mid] > target:
                hi = mid - 1
            elif keys[mid] < target:
                lo = mid
            else:
                return mid
        return lo

    hot = max(0, n - 1 - 8192 // 8)
    if keys[hot] < target:
        return search(hot, n - 1)
    if keys[0] > target:
        return -1
    return search(0, hot)


def marker_coordinator_epoch(data: bytes, pos: int) -> int:
    """The coordinator epoch of the end-transaction marker record of the control batch at ``pos``."""
    end = len(data)
    p = pos + 61
    _length, p = read_varint(data, p, end, 5)
    p += 1  # attributes
    _ts, p = read_varint(data, p, end, 10)
    _od, p = read_varint(data, p, end, 5)
    key_len, p = read_varint(data, p, end, 5)
    p += key_len
    _value_len, p = read_varint(data, p, end, 5)
    return struct.unpack_from(">hi", data, p)[1]


# producerId, epoch, lastSequence, lastOffset, offsetDelta, timestamp, coordinatorEpoch, currentTxnFirstOffset
SNAP_ENTRY = struct.Struct(">qhiqiqiq")


class InvalidRecord(Exception):
    pass


def read_varint(data: bytes, q: int, end: int, max_bytes: int) -> tuple[int, int]:
    """ByteUtils.readVarint/readVarlong: zigzag; too many bytes or the end of the buffer is an error."""
    value = shift = 0
    for _ in range(max_bytes):
        if q >= end:
            raise InvalidRecord("buffer underflow")
        b = data[q]
        q += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), q
    raise InvalidRecord("varint too long")


def parse_marker(data: bytes, p: int, size: int, attrs: int, base_ts: int, max_ts: int) -> tuple[str, int, int]:
    """The end-transaction marker in the first record of the control batch at ``p`` as
    ProducerAppendInfo.append reads it (docs/formats.md §6): (type, coordinator epoch, record timestamp).
    Raises Fatal where Kafka's reading throws (outside recovery nothing catches it)."""
    end, q = p + size, p + 61
    count = struct.unpack_from(">i", data, p + 57)[0]
    if count == 0 or attrs & 0x07:
        raise Undetermined(f"empty or compressed control batch at {p}")
    try:
        if count < 0:
            raise InvalidRecord("negative record count")
        length, q = read_varint(data, q, end, 5)
        if end - q < length:
            raise InvalidRecord("record size")
        start = q
        q += 1  # attributes
        ts_delta, q = read_varint(data, q, end, 10)
        _od, q = read_varint(data, q, end, 5)
        parts = []
        for _ in range(2):  # key, value
            n, q = read_varint(data, q, end, 5)
            if n >= 0 and q + n > end:
                raise InvalidRecord("length beyond the buffer")
            parts.append(data[q : q + n] if n >= 0 else None)
            q += max(n, 0)
        headers, q = read_varint(data, q, end, 5)
        if headers < 0 or headers > end - q:
            raise InvalidRecord("header count")
        for _ in range(headers):
            n, q = read_varint(data, q, end, 5)
            if n < 0 or q + n > end:
                raise InvalidRecord("header key")
            q += n
            n, q = read_varint(data, q, end, 5)
            if n >= 0 and q + n > end:
                raise InvalidRecord("header value")
            q += max(n, 0)
        if q - start != length or (count == 1 and q != end):
            raise InvalidRecord("record size")
        key, value = parts
        if key is None or value is None:
            raise Fatal("NullPointerException")
        if len(key) < 4 or struct.unpack_from(">h", key)[0] < 0:
            raise InvalidRecord("control record key")
        kind = struct.unpack_from(">h", key, 2)[0]
        if kind not in (0, 1):
            raise Fatal("IllegalArgumentException")
        if len(value) < 6 or struct.unpack_from(">h", value)[0] < 0:
            raise InvalidRecord("marker value")
    except InvalidRecord:
        raise Fatal("InvalidRecordException") from None
    timestamp = max_ts if attrs & 0x08 else base_ts + ts_delta
    return ("COMMIT" if kind == 1 else "ABORT"), struct.unpack_from(">i", value, 2)[0], timestamp


def raw_row(data: bytes, p: int) -> dict:
    """The fields of the v2 batch at ``p`` as Kafka reads them without a CRC check (loadProducersFromRecords
    reads damaged batches of segments it does not recover), in the manifest's row layout."""
    base, _size, ple, _magic, _crc, attrs, delta, first_ts, max_ts, pid, pepoch, bseq, count = struct.unpack_from(
        ">qiibIhiqqqhii", data, p)
    row = {"position": p, "size": 12 + _size, "base_offset": base, "last_offset": base + delta, "records": count,
           "max_timestamp": max_ts, "leader_epoch": ple, "producer_id": pid, "producer_epoch": pepoch,
           "base_sequence": bseq, "transactional": bool(attrs & 0x10), "control": None}
    if attrs & 0x20 and pid >= 0:
        row["control"], row["coordinator_epoch"], row["record_timestamp"] = parse_marker(
            data, p, 12 + _size, attrs, first_ts, max_ts)
    return row


def parse_snapshot(data: bytes) -> dict[int, tuple] | None:
    """A producer snapshot's entries by producer id, or None when Kafka finds it corrupt (docs/formats.md §12)."""
    if len(data) < 10 or struct.unpack_from(">h", data, 0)[0] != 1:
        return None
    if struct.unpack_from(">I", data, 2)[0] != crc32c(data[6:]):
        return None
    n = struct.unpack_from(">i", data, 6)[0]
    if n < 0 or len(data) != 10 + SNAP_ENTRY.size * n:
        return None
    out = {}
    for i in range(n):
        e = SNAP_ENTRY.unpack_from(data, 10 + SNAP_ENTRY.size * i)
        out[e[0]] = e[1:]
    return out


def parse_epoch_checkpoint(data: bytes) -> list[tuple[int, int]]:
    """leader-epoch-checkpoint (docs/formats.md §14), loaded with LeaderEpochFileCache's assign rule (§9)."""
    lines = data.decode().split("\n")
    assert lines[0] == "0" and int(lines[1]) == len([x for x in lines[2:] if x])
    entries: list[tuple[int, int]] = []
    for line in lines[2:]:
        if not line:
            continue
        epoch, start = map(int, line.split())
        if entries and entries[-1][0] == epoch and start >= entries[-1][1]:
            continue
        while entries and (entries[-1][0] >= epoch or entries[-1][1] >= start):
            entries.pop()
        entries.append((epoch, start))
    return entries


def txn_entries_bytes(entries: list[tuple[int, int, int, int]]) -> bytes:
    return b"".join(struct.pack(">hqqqq", 0, *e) for e in entries)


def rebuilt_indexes(base: int, rows: list[dict], interval: int) -> tuple[bytes, bytes, list, list]:
    """docs/loading.md §7.1 over manifest rows: trimmed .index and .timeindex bytes, and their entries."""
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    max_ts, max_ts_off = -1, base
    last_indexed = 0
    for r in rows:
        if r["max_timestamp"] > max_ts:
            max_ts, max_ts_off = r["max_timestamp"], r["last_offset"]
        if r["position"] - last_indexed > interval:
            offsets.append((r["last_offset"], r["position"]))
            if max_ts > (times[-1][0] if times else -1):
                times.append((max_ts, max_ts_off))
            last_indexed = r["position"]
    if max_ts > (times[-1][0] if times else -1):
        times.append((max_ts, max_ts_off))
    oi = b"".join(struct.pack(">ii", o - base, p) for o, p in offsets)
    ti = b"".join(struct.pack(">qi", t, o - base) for t, o in times)
    return oi, ti, offsets, times


def last_sequence(base_sequence: int, delta: int) -> int:
    """DefaultRecordBatch.lastSequence (int32 wrap-around; -1 stays -1)."""
    if base_sequence == -1:
        return -1
    if base_sequence > 2**31 - 1 - delta:
        return delta - (2**31 - 1 - base_sequence) - 1
    return base_sequence + delta


# ------------------------------------------------------------------------------------------------
# The model of one partition's load


@dataclass
class MSeg:
    base: int
    rows: list[dict]  # the manifest's rows for this segment (as generated)
    data: bytes  # the .log bytes as the model's Kafka sees them now
    index: bytes | None  # None: no file
    tindex: bytes | None
    txn: bytes | None
    manifest_txn: list | None = None  # the generator's aborted transactions of this segment
    by_pos: dict[int, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_pos = {r["position"]: r for r in self.rows}


@dataclass
class Snap:
    producers: dict[int, tuple] | None  # None: corrupt
    written: bool  # True: written by the load (its content is checked), False: the generator's file


class PSM:
    """ProducerStateManager (docs/loading.md §8): producers, map end offset, snapshot files it knows of."""

    def __init__(self, model: Model) -> None:
        self.m = model
        self.snaps: set[int] = set(model.snaps)  # lists the snapshot files on disk
        self.producers: dict[int, list] = {}
        self.map_end = 0
        self.last_snap = 0

    def take_snapshot(self) -> None:
        if self.map_end > self.last_snap:
            assert self.map_end not in self.m.snaps, "a snapshot written over an existing file"
            self.m.snaps[self.map_end] = Snap({p: tuple(e) for p, e in self.producers.items()}, True)
            self.snaps.add(self.map_end)
            self.last_snap = self.map_end

    def delete(self, off: int) -> None:
        self.snaps.discard(off)
        self.m.snaps.pop(off, None)

    def truncate_and_reload(self, log_start: int, log_end: int) -> None:
        for off in sorted(self.snaps):
            if off > log_end or off <= log_start:
                self.delete(off)
        if log_end != self.map_end:
            self.producers = {}
            while self.snaps:
                off = max(self.snaps)
                snap = self.m.snaps[off]
                if snap.producers is None:  # corrupt: deleted, try the next older one
                    self.m.corrupt_snapshots_read.append(off)
                    self.delete(off)
                    continue
                for pid, e in snap.producers.items():
                    if e[6] < 0 and self.m.now_ms - e[4] >= EXPIRATION_MS:
                        continue  # expired
                    self.producers[pid] = list(e)
                self.map_end = self.last_snap = off
                return
            self.map_end = self.last_snap = log_start
            self.m.loads_from_log_start.append(log_start)
        else:
            self.map_end = max(self.map_end, log_start)
            self.last_snap = max(self.snaps) if self.snaps else log_start

    def apply(self, r: dict, seg: MSeg) -> tuple[int, int, int, bool] | None:
        """§8.1/§8.2 for one batch (origin REPLICATION); returns a completed transaction."""
        pid = r["producer_id"]
        if pid < 0:
            return None
        e = self.producers.get(pid)
        if e is None:
            # epoch, lastSeq, lastOffset, offsetDelta, timestamp, coordinatorEpoch, txnFirstOffset
            e = self.producers[pid] = [-1, -1, -1, 0, -1, -1, -1]
        if e[0] != r["producer_epoch"]:
            e[0] = r["producer_epoch"]
            e[1], e[2], e[3] = -1, -1, 0
        if r["control"] is None:
            if e[6] >= 0 and not r["transactional"]:
                raise Fatal("InvalidTxnStateException")
            e[1] = last_sequence(r["base_sequence"], r["last_offset"] - r["base_offset"])
            e[2] = r["last_offset"]
            e[3] = r["last_offset"] - r["base_offset"]
            e[4] = r["max_timestamp"]
            if r["transactional"] and e[6] < 0:
                e[6] = r["base_offset"]
            return None
        completed = (pid, e[6], r["base_offset"], r["control"] == "ABORT") if e[6] >= 0 else None
        e[5] = r.get("coordinator_epoch", self.m.coordinator_epochs.get((seg.base, r["position"])))
        e[4] = r.get("record_timestamp", r["max_timestamp"])  # the marker record's timestamp
        e[6] = -1
        return completed

    def lso_for(self, pid: int, last: int) -> int:
        others = [e[6] for p, e in self.producers.items() if p != pid and e[6] >= 0]
        return min(others) if others else last + 1


class Model:
    """LogLoader.load for one generated partition (docs/loading.md §6), on the files as they were before the
    load.  Attributes after :meth:`run`: the expected outcome."""

    def __init__(self, part: dict, faults: list[dict], before: dict[str, bytes | int], *, clean: bool,
                 rp_ckpt: int, lso_ckpt: int, interval: int, now_ms: int = NOW) -> None:
        self.part = part
        self.now_ms = now_ms
        self.faults = faults
        self.before = before
        self.clean = clean
        self.rp_ckpt = rp_ckpt
        self.lso_ckpt = lso_ckpt
        self.interval = interval
        self.files = set(before)  # names on disk
        self.removed: set[str] = set()  # names the load removes (besides snapshots)
        self.recovered: list[int] = []
        self.truncated = 0
        self.corrupt_snapshots_read: list[int] = []
        self.loads_from_log_start: list[int] = []
        self.txn_cross_checked = 0
        self.damaged_batches_read = 0
        self.coordinator_epochs: dict[tuple[int, int], int] = {}
        self.segs: dict[int, MSeg] = {}
        for s in part["segments"]:
            base = s["base_offset"]
            logname = name(base, ".log")
            if logname not in before:
                continue
            data = before[logname]
            for r in s["batches"]:
                if r["control"] is not None and r["position"] + r["size"] <= len(data):
                    epoch = marker_coordinator_epoch(data, r["position"])
                    self.coordinator_epochs[(base, r["position"])] = epoch

            def get(sfx: str, base: int = base) -> bytes | None:
                v = before.get(name(base, sfx))
                return BIG if isinstance(v, int) else v

            self.segs[base] = MSeg(base, s["batches"], data, get(".index"), get(".timeindex"),
                                   get(".txnindex"), [tuple(e) for e in s["txn_index"]])
        # snapshots on disk before the load: contents parsed here (the generator's, or corrupt)
        self.snaps: dict[int, Snap] = {}
        for fname, data in before.items():
            if fname.endswith(".snapshot"):
                self.snaps[int(fname.split(".")[0])] = Snap(parse_snapshot(data), False)
        self.epochs = parse_epoch_checkpoint(before["leader-epoch-checkpoint"])

    # ---- helpers

    def sorted_segs(self) -> list[MSeg]:
        return [self.segs[b] for b in sorted(self.segs)]

    @staticmethod
    def values(segs: list[MSeg], start: int, end: int) -> list[MSeg]:
        """LogSegments.values(from, to) (§10.4)."""
        if start == end:
            return []
        if end < start:
            raise Fatal("IllegalArgumentException")
        floor = [s.base for s in segs if s.base <= start]
        lo = floor[-1] if floor else None
        return [s for s in segs if (lo is None or s.base >= lo) and s.base < end]

    def translate(self, seg: MSeg, target: int) -> tuple[int, int] | None:
        """LogSegment.translateOffset (§10.2): (position, lastOffset) of the first batch whose lastOffset is
        at least ``target``."""
        if seg.index is BIG:
            raise Undetermined(f"lookup in the untrimmed index of segment {seg.base}")
        entries = index_entries(seg.index)
        slot = largest_lower_bound([seg.base + rel for rel, _ in entries], target)
        pos = max(entries[slot][1], 0) if slot >= 0 else 0
        if pos < len(seg.data) and pos not in seg.by_pos and not any(
                p == pos for p, _, _ in walk(seg.data, 0, len(seg.data))):
            raise Undetermined(f"index position {pos} of segment {seg.base} is inside a batch")
        for p, _size, last in walk(seg.data, pos, len(seg.data)):
            if last >= target:
                return p, last
        return None

    def read_next_offset(self, seg: MSeg) -> int:
        """LogSegment.readNextOffset (§10.1)."""
        if seg.index is BIG:
            raise Undetermined(f"lookup in the untrimmed index of segment {seg.base}")
        entries = index_entries(seg.index)
        last_offset = seg.base + entries[-1][0] if entries else seg.base
        hit = self.translate(seg, last_offset)
        if hit is None:
            return seg.base
        batches = list(walk(seg.data, hit[0], len(seg.data)))
        return batches[-1][2] + 1 if batches else seg.base

    def read_rows(self, seg: MSeg, start_offset: int, max_pos: int) -> list[dict]:
        """LogSegment.read(start, MAX, maxPosition) for loadProducersFromRecords: the manifest rows of the
        batches it reads."""
        hit = self.translate(seg, start_offset)
        if hit is None:
            return []
        if max_pos < hit[0]:
            raise Fatal("IllegalArgumentException")
        rows = []
        for p, size, _last in walk(seg.data, hit[0], max_pos):
            r = seg.by_pos.get(p)
            if r is None or r["size"] != size:
                raise Undetermined(f"batch at {p} of segment {seg.base} is not in the manifest")
            if crc_valid_end(seg.data[p : p + size]) != size:
                # a damaged batch of a segment that is not recovered: Kafka uses whatever its header says
                self.damaged_batches_read += 1
                r = raw_row(seg.data, p)
            rows.append(r)
        return rows

    # ---- §6.14 rebuildProducerState

    def rebuild(self, psm: PSM, segs: list[MSeg], log_start: int, last_offset: int,
                reload_clean: bool) -> None:
        to_snap = [s.base for s in segs[-2:]] + [last_offset]
        if not psm.snaps and reload_clean:
            for o in to_snap:
                psm.map_end = o
                psm.take_snapshot()
            return
        empty_before = not psm.producers and psm.map_end >= last_offset
        psm.truncate_and_reload(log_start, last_offset)
        if last_offset > psm.map_end and not empty_before:
            floor = [s for s in segs if s.base <= last_offset]
            seg_of_last = floor[-1] if floor else None
            for seg in self.values(segs, psm.map_end, last_offset):
                start = max(seg.base, psm.map_end, log_start)
                psm.map_end = start
                if seg.base in to_snap:
                    psm.take_snapshot()
                max_pos = len(seg.data)
                if seg is seg_of_last:
                    hit = self.translate(seg, last_offset)
                    max_pos = hit[0] if hit is not None else max_pos
                for r in self.read_rows(seg, start, max_pos):
                    done = psm.apply(r, seg)
                    # completed transactions only move to "unreplicated"; no txn index on this path
                    del done
        psm.map_end = last_offset
        psm.take_snapshot()

    # ---- §7 LogSegment.recover and §6.5 recoverSegment

    def recover(self, seg: MSeg, psm: PSM) -> int:
        valid = crc_valid_end(seg.data)
        kept = [r for r in seg.rows if r["position"] + r["size"] <= valid]
        assert sum(r["size"] for r in kept) == valid, f"segment {seg.base}: {valid} is not a batch boundary"
        oi, ti, _, _ = rebuilt_indexes(seg.base, kept, self.interval)
        # two test-side implementations of the rule agree (manifest rows here, raw bytes in kafkadir)
        assert (oi, ti) == expected_indexes(seg.base, seg.data[:valid], self.interval)
        aborted = []
        for r in kept:
            if self.epochs == [] or r["leader_epoch"] > self.epochs[-1][0]:
                self.assign_epoch(r["leader_epoch"], r["base_offset"])
            done = psm.apply(r, seg)
            if done is not None:
                pid, first, last, is_abort = done
                if is_abort:
                    aborted.append((pid, first, last, psm.lso_for(pid, last)))
            psm.map_end = r["last_offset"] + 1
        truncated = len(seg.data) - valid
        if len(kept) == len(seg.rows) and not self.truncated and not self.loads_from_log_start:
            # the producer state is the generator's: so must be the aborted transactions
            assert aborted == seg.manifest_txn, f"segment {seg.base}: {aborted} != {seg.manifest_txn}"
            self.txn_cross_checked += 1
        seg.data = seg.data[:valid]
        seg.index, seg.tindex = oi, ti
        if seg.txn is not None or aborted:
            seg.txn = txn_entries_bytes(aborted)
        return truncated

    def recover_segment(self, seg: MSeg, segs_in_map: list[MSeg]) -> int:
        psm = PSM(self)
        self.rebuild(psm, segs_in_map, self.lso_ckpt, seg.base, reload_clean=False)
        t = self.recover(seg, psm)
        psm.take_snapshot()
        if seg.base not in self.recovered:
            self.recovered.append(seg.base)
        self.truncated += t
        return t

    def assign_epoch(self, epoch: int, start: int) -> None:
        if self.epochs and self.epochs[-1][0] == epoch and start >= self.epochs[-1][1]:
            return
        while self.epochs and (self.epochs[-1][0] >= epoch or self.epochs[-1][1] >= start):
            self.epochs.pop()
        self.epochs.append((epoch, start))

    def delete_segment(self, seg: MSeg) -> None:
        del self.segs[seg.base]
        for sfx in (".log", ".index", ".timeindex", ".txnindex"):
            if name(seg.base, sfx) in self.files:
                self.files.discard(name(seg.base, sfx))
                self.removed.add(name(seg.base, sfx))
        if seg.base in self.main.snaps:  # removeAndMarkSnapshotForDeletion: only snapshots the main PSM lists
            self.main.delete(seg.base)

    def complete_swaps(self, swaps: list[str]) -> None:
        """§6.2: the range [min swap base, max swap next offset) is replaced by the swap segments."""
        if not swaps:
            return
        min_swap, max_swap = INT64_MAX, -(2**63)
        for f in swaps:
            if f.endswith(".log.swap"):
                base = int(f.split(".")[0])
                index = self.before.get(name(base, ".index.swap"))
                if not isinstance(index, bytes):
                    raise Undetermined("a swap segment without its .index.swap")
                rows = self.segs[base].rows if base in self.segs else []
                swap = MSeg(base, rows, self.before[f], index, None, None)
                min_swap, max_swap = min(min_swap, base), max(max_swap, self.read_next_offset(swap))
        for f in sorted(self.files):
            if f.endswith(".swap") or not f[:1].isdigit():
                continue
            off = int(f.split(".")[0])
            if min_swap <= off < max_swap:
                self.files.discard(f)
                self.removed.add(f)
                if f.endswith(".snapshot"):
                    self.snaps.pop(off, None)
                elif f.endswith(".log"):
                    del self.segs[off]
        renamed = {}
        for f in sorted(self.files):
            if f.endswith(".swap"):
                self.files.discard(f)
                self.files.add(f[: -len(".swap")])
                renamed[f[: -len(".swap")]] = self.before[f]
        manifest_rows = {s["base_offset"]: s["batches"] for s in self.part["segments"]}
        for final, data in renamed.items():
            base, sfx = int(final.split(".")[0]), "." + final.split(".", 1)[1]
            if sfx == ".log":
                self.segs[base] = MSeg(base, manifest_rows.get(base, []), data, None, None, None)
        for final, data in renamed.items():
            base, sfx = int(final.split(".")[0]), "." + final.split(".", 1)[1]
            attr = {".index": "index", ".timeindex": "tindex", ".txnindex": "txn"}.get(sfx)
            if attr and base in self.segs:
                setattr(self.segs[base], attr, data)
        for seg in self.segs.values():  # index files deleted in the replaced range and not swapped in
            seg.index = seg.index if name(seg.base, ".index") in self.files else None
            seg.tindex = seg.tindex if name(seg.base, ".timeindex") in self.files else None
            seg.txn = seg.txn if name(seg.base, ".txnindex") in self.files else None

    # ---- §6 LogLoader.load

    def run(self) -> None:
        self.main = PSM(self)  # UnifiedLog.apply lists the snapshots before the loader runs
        # §6.1 temp files
        min_cleaned = INT64_MAX
        swaps = []
        for f in sorted(self.files):
            if f.endswith(".deleted") and not f.endswith(".checkpoint.deleted"):
                self.files.discard(f)
                self.removed.add(f)
            elif f.endswith(".cleaned"):
                min_cleaned = min(min_cleaned, int(f.split(".")[0]))
            elif f.endswith(".swap"):
                swaps.append(f)
        valid_swaps = []
        for f in swaps:
            if int(f.split(".")[0]) >= min_cleaned:
                self.files.discard(f)
                self.removed.add(f)
            else:
                valid_swaps.append(f)
        for f in sorted(self.files):
            if f.endswith(".cleaned"):
                self.files.discard(f)
                self.removed.add(f)
        self.complete_swaps(valid_swaps)
        # §6.3 loadSegmentFiles
        for f in sorted(self.files):
            is_index = f.endswith((".index", ".timeindex", ".txnindex"))
            if is_index and name(int(f.split(".")[0]), ".log") not in self.files:
                self.files.discard(f)
                self.removed.add(f)
        loaded: list[MSeg] = []
        for seg in self.sorted_segs():
            if name(seg.base, ".index") not in self.files:
                self.recover_segment(seg, list(loaded))
                self.files.update({name(seg.base, ".index"), name(seg.base, ".timeindex")})
            else:
                if name(seg.base, ".timeindex") not in self.files:
                    seg.tindex = b""
                    self.files.add(name(seg.base, ".timeindex"))
                txn = list(struct.iter_unpack(">hqqqq", (seg.txn or b"")[: len(seg.txn or b"") // 34 * 34]))
                if any(e[3] < seg.base for e in txn):  # TransactionIndex.sanityCheck
                    self.recover_segment(seg, list(loaded))
            if seg.txn is not None:
                self.files.add(name(seg.base, ".txnindex"))
            loaded.append(seg)
        # §6.6 recoverLog
        if not self.clean:
            unflushed = self.values(self.sorted_segs(), self.rp_ckpt, INT64_MAX)
            for i, seg in enumerate(unflushed):
                t = self.recover_segment(seg, self.sorted_segs())
                if seg.txn is not None:
                    self.files.add(name(seg.base, ".txnindex"))
                if t > 0:
                    for later in unflushed[i + 1 :]:
                        self.delete_segment(later)
                    break
        # §6.7
        leo: int | None = self.read_next_offset(self.sorted_segs()[-1])
        if leo < self.lso_ckpt:
            for seg in self.sorted_segs():
                self.delete_segment(seg)
            self.epochs = []  # clearAndFlush
            for off in list(self.main.snaps):  # truncateFullyAndStartAt: the snapshots the main PSM knows of
                self.main.delete(off)
            self.main.producers, self.main.last_snap, self.main.map_end = {}, 0, self.lso_ckpt
            leo = None
        if not self.segs:
            self.segs[self.lso_ckpt] = MSeg(self.lso_ckpt, [], b"", None, None, None)
            self.files.add(name(self.lso_ckpt, ".log"))
        if self.clean and leo is not None:
            new_rp = next_offset = leo
        else:
            next_offset = leo if leo is not None else self.read_next_offset(self.sorted_segs()[-1])
            new_rp = min(self.rp_ckpt, next_offset)
        # §6.9 resizeIndexes of the active segment (entries kept, zero tail)
        # (the index objects keep their entry count: lookups below still see only the entries)
        last = self.sorted_segs()[-1]
        last.index, last.tindex = last.index or b"", last.tindex or b""
        self.files.update({name(last.base, ".index"), name(last.base, ".timeindex")})
        # §6.11 leader epochs: truncateFromEnd(LEO), then truncateFromStart(the log-start checkpoint value)
        self.epochs = [e for e in self.epochs if e[1] < next_offset]
        removed = [e for e in self.epochs if e[1] <= self.lso_ckpt]
        if removed:
            self.epochs = [(removed[-1][0], self.lso_ckpt)] + self.epochs[len(removed):]
        first_base = min(self.segs)
        new_log_start = max(self.lso_ckpt, first_base)
        # §6.13 removeStraySnapshots
        bases = sorted(self.segs)
        stray = None
        for off in sorted(self.snaps):
            if off not in self.segs:
                if stray is not None:
                    self.snaps.pop(stray)
                stray = off
        if stray is not None and stray < max(bases):
            self.snaps.pop(stray)
        self.main.snaps = set(self.snaps)
        # §6.14
        self.rebuild(self.main, self.sorted_segs(), new_log_start, next_offset, reload_clean=self.clean)
        self.leo = next_offset
        self.log_start = new_log_start
        self.loader_recovery_point = new_rp
        self.recovery_point = max(new_rp, new_log_start)
        self.producers = {p: tuple(e) for p, e in self.main.producers.items()}


# ------------------------------------------------------------------------------------------------
# Running a generated broker through mploader and the model


@dataclass
class Broker:
    out: Path
    manifest: dict
    cfg: GeneratorConfig
    before: dict[tuple[str, str, int], dict[str, bytes | int]]  # partition -> file name -> bytes (or size)
    now_ms: int = NOW


def snapshot_files(directory: Path) -> dict[str, bytes | int]:
    out: dict[str, bytes | int] = {}
    for f in os.listdir(directory):
        p = directory / f
        size = p.stat().st_size
        out[f] = size if size > BIG_FILE else p.read_bytes()
    return out


def partition_dir(out: Path, key: tuple[str, str, int]) -> Path:
    return out / key[0] / f"{key[1]}-{key[2]}"


def make_broker(tmp_path: Path, cfg: GeneratorConfig, damage=None) -> Broker:
    out = tmp_path / "broker"
    generate(out, cfg)
    m = read_manifest(out)
    if damage is not None:
        damage(out, m)
    before = {key: snapshot_files(partition_dir(out, key)) for key in m["partitions"]}
    return Broker(out, m, cfg, before)


def log_start_checkpoint(part: dict) -> int:
    """What the generator wrote to log-start-offset-checkpoint for a partition (0: no entry)."""
    return part["log_start_offset"] if part["log_start_offset"] > part["first_segment_base"] else 0


def faults_of(m: dict, key: tuple[str, str, int]) -> list[dict]:
    return [f for f in m["faults"] if (f["dir"], f["topic"], f["partition"]) == key]


def model_for(b: Broker, key: tuple[str, str, int]) -> Model:
    part = b.manifest["partitions"][key]
    d = b.out / key[0]
    rp = parse_offset_checkpoint_text((d / "recovery-point-offset-checkpoint").read_text())
    ls = parse_offset_checkpoint_text((d / "log-start-offset-checkpoint").read_text())
    tp = (key[1], key[2])
    assert rp[tp] == part["recovery_point"]
    assert ls.get(tp, 0) == log_start_checkpoint(part)
    model = Model(part, faults_of(b.manifest, key), b.before[key], clean=b.cfg.clean_shutdown, rp_ckpt=rp[tp],
                  lso_ckpt=ls.get(tp, 0), interval=b.cfg.index_interval_bytes, now_ms=b.now_ms)
    check_manifest_against_files(model, part)
    return model


def check_manifest_against_files(model: Model, part: dict) -> None:
    """The manifest's claims the model builds on, checked against the damaged files before the load."""
    data_faults = {f["segment_base"]: f for f in model.faults if f["kind"] in DATA_FAULTS}
    for s in part["segments"]:
        seg = model.segs[s["base_offset"]]
        valid = crc_valid_end(seg.data)
        f = data_faults.get(seg.base)
        assert valid == (f["valid_end"] if f else s["size"]), (seg.base, f)
        kept = [r for r in seg.rows if r["position"] + r["size"] <= valid]
        _, _, offsets, times = rebuilt_indexes(seg.base, kept, model.interval)
        if f is None and (not s["active"] or model.clean):  # rolled or cleanly closed: trimmed indexes
            assert [list(e) for e in offsets] == s["offset_index"]
            assert [list(e) for e in times] == s["time_index"]
    gen_snaps = {s["offset"]: {e[0]: tuple(e[1:]) for e in s["producers"]} for s in part["snapshots"]}
    corrupted = {int(f["file"].split(".")[0]) for f in model.faults if f["kind"] == "corrupt_snapshot"}
    for off, snap in model.snaps.items():
        if off in corrupted:
            assert snap.producers is None, f"snapshot {off} should be corrupt"
        else:
            assert snap.producers == gen_snaps[off]


def run_load(b: Broker):
    config = LoaderConfig(index_interval_bytes=b.cfg.index_interval_bytes,
                          max_index_size=b.cfg.max_index_size)
    return load_logs([str(b.out / d) for d in b.manifest["data_dirs"]], config, now_ms=b.now_ms)


def assert_file(path: Path, prefix: bytes, size: int, where: str) -> None:
    """The file is ``prefix`` followed by zeros, ``size`` bytes in all."""
    assert path.stat().st_size == size, f"{where}: {path.name}: {path.stat().st_size} bytes, not {size}"
    with open(path, "rb") as f:
        assert f.read(len(prefix)) == prefix, f"{where}: {path.name}: entries differ"
        # read only the data extents of the tail: a 10 MB preallocated index is mostly a hole
        pos = len(prefix)
        while pos < size:
            try:
                start = os.lseek(f.fileno(), pos, os.SEEK_DATA)
            except OSError:
                break  # nothing but a hole up to the end
            end = min(os.lseek(f.fileno(), start, os.SEEK_HOLE), size)
            f.seek(start)
            chunk = f.read(end - start)
            assert chunk.count(0) == len(chunk), f"{where}: {path.name}: the tail is not zero"
            pos = end


def producer_tuples(log) -> dict[int, tuple]:
    """The loaded producers in snapshot-entry order of fields (without the producer id)."""
    return {pid: (p.epoch, p.last_sequence, p.last_offset, p.offset_delta, p.last_timestamp,
                  p.coordinator_epoch, p.current_txn_first_offset) for pid, p in log.producers.items()}


def check_partition(b: Broker, key: tuple[str, str, int], model: Model, log) -> None:
    where = f"{key} {[(f['kind'], f['file']) for f in model.faults]}"
    path = partition_dir(b.out, key)
    assert log.log_end_offset == model.leo, where
    assert log.log_start_offset == model.log_start, where
    assert log.recovery_point == model.recovery_point, where
    assert log.loader_recovery_point == model.loader_recovery_point, where
    segs = model.sorted_segs()
    layout = [(s.base_offset, s.size_bytes) for s in log.segments]
    assert layout == [(s.base, len(s.data)) for s in segs], where
    assert log.recovered_segments == model.recovered, where
    assert log.truncated_bytes == model.truncated, where
    assert log.leader_epochs == model.epochs, where
    # the files: which exist, and every byte of the segment files
    on_disk = set(os.listdir(path))
    snap_names = {name(o, ".snapshot") for o in model.snaps}
    expected = {f for f in model.files if not f.endswith(".snapshot")} | snap_names
    assert on_disk == expected, f"{where}: extra {on_disk - expected}, missing {expected - on_disk}"
    for seg in segs:
        assert (path / name(seg.base, ".log")).read_bytes() == seg.data, (where, seg.base)
        if seg is segs[-1]:  # the active segment's indexes were resized: entries, then zeros (§6.9)
            full_index, full_time_index = full_sizes(b.cfg)
            assert_file(path / name(seg.base, ".index"), seg.index, full_index, where)
            assert_file(path / name(seg.base, ".timeindex"), seg.tindex, full_time_index, where)
        else:
            assert_file(path / name(seg.base, ".index"), seg.index, len(seg.index), where)
            assert_file(path / name(seg.base, ".timeindex"), seg.tindex, len(seg.tindex), where)
        if seg.txn is not None:
            assert (path / name(seg.base, ".txnindex")).read_bytes() == seg.txn, (where, seg.base)
    # snapshots: the generator's files untouched, the load's files hold the producer state at their offset
    for off, snap in model.snaps.items():
        data = (path / name(off, ".snapshot")).read_bytes()
        if not snap.written:
            assert data == b.before[key][name(off, ".snapshot")], (where, off)
        else:
            assert parse_snapshot(data) == snap.producers, (where, off)
    # leader-epoch-checkpoint as Kafka leaves it
    text = f"0\n{len(model.epochs)}\n" + "".join(f"{e} {o}\n" for e, o in model.epochs)
    assert (path / "leader-epoch-checkpoint").read_text() == text, where
    # producers
    assert producer_tuples(log) == model.producers, where
    # what the load reports it deleted (snapshot deletions aside)
    assert {f for f in log.deleted_files if not f.endswith(".snapshot")} == \
        {f for f in model.removed if not f.endswith(".snapshot")}, where


@dataclass
class Outcome:
    models: dict  # partition key -> Model after run()
    result: object  # the LoadResult, None when the load was expected to fail (and did)


def load_and_check(b: Broker) -> Outcome:
    """Model every partition, load, compare.  When the model says Kafka's start-up fails, the load must
    fail with one of the predicted exceptions, raised for one of the partitions predicted to fail."""
    models: dict = {}
    undetermined: dict = {}
    fatal: dict[tuple[str, str, int], str] = {}
    for key in b.manifest["partitions"]:
        try:
            m = model_for(b, key)
            m.run()
            models[key] = m
        except Fatal as e:
            fatal[key] = e.args[0]
        except Undetermined as e:
            undetermined[key] = str(e)
    assert not undetermined, f"the model cannot predict these partitions (use another seed): {undetermined}"
    if fatal:
        with pytest.raises(StartupFailedError) as info:
            run_load(b)
        err = info.value
        assert any(Path(err.path).parent == partition_dir(b.out, key) and err.kafka_exception == exc
                   for key, exc in fatal.items()), (str(err), fatal)
        return Outcome(models, None)
    result = run_load(b)
    assert result.offline_dirs == {}
    for d in b.manifest["data_dirs"]:
        assert not (b.out / d / ".kafka_cleanshutdown").exists()
    assert set(result.logs) == {TopicPartition(k[1], k[2]) for k in b.manifest["partitions"]}
    for key, m in models.items():
        check_partition(b, key, m, result.logs[TopicPartition(key[1], key[2])])
    return Outcome(models, result)


# ------------------------------------------------------------------------------------------------
# Expectations read straight off the manifest (no model), for the simple cases


def floor_base(part: dict, offset: int) -> int:
    bases = [s["base_offset"] for s in part["segments"]]
    below = [b for b in bases if b <= offset]
    return below[-1] if below else bases[0]


def direct_checks(b: Broker, out: Outcome) -> set[str]:
    """Expectations read straight off the manifest for the simple cases (one fault in the partition), without
    the model; returns the names of the situations that were checked."""
    seen: set[str] = set()
    clean = b.cfg.clean_shutdown
    for key, part in b.manifest["partitions"].items():
        faults = faults_of(b.manifest, key)
        log = out.result.logs[TopicPartition(key[1], key[2])]
        path = partition_dir(b.out, key)
        before = b.before[key]
        segs = {s["base_offset"]: s for s in part["segments"]}
        bases = sorted(segs)
        last = segs[bases[-1]]
        layout = [(s.base_offset, s.size_bytes) for s in log.segments]
        if faults and all(f["kind"] in DATA_FAULTS for f in faults):
            # one data fault per segment at most; the first damaged segment recoverLog reads is cut at its
            # valid_end, every later segment goes; damaged segments it does not read keep every byte
            by_base = {f["segment_base"]: f for f in faults}
            rp_floor = floor_base(part, part["recovery_point"])
            cut = None if clean else next((x for x in bases if x >= rp_floor and x in by_base), None)
            for base, f in by_base.items():
                if cut is not None and base > cut:
                    assert not (path / f["file"]).exists(), key
                    seen.add("later damaged segment deleted")
                elif base == cut:
                    assert log.recovered_segments[-1] == base, key
                    assert layout[-1] == (base, f["valid_end"]), key
                    assert log.truncated_bytes == len(before[f["file"]]) - f["valid_end"], key
                    kept = [r for r in segs[base]["batches"] if r["position"] + r["size"] <= f["valid_end"]]
                    assert log.log_end_offset == (kept[-1]["last_offset"] + 1 if kept else base), key
                    for later in bases[bases.index(base) + 1 :]:
                        assert not (path / name(later, ".log")).exists(), key
                        seen.add("later segments deleted")
                    seen.add("truncated at valid_end")
                else:  # a segment Kafka does not read: not one byte changes
                    assert (path / f["file"]).read_bytes() == before[f["file"]], key
                    assert base not in log.recovered_segments, key
                    seen.add("unread damaged segment untouched")
            if cut is None:
                assert log.truncated_bytes == 0 and [x for x, _ in layout] == bases, key
                active_fault = by_base.get(bases[-1])
                if active_fault is None:
                    assert log.log_end_offset == part["log_end_offset"], key
                elif active_fault["kind"] == "torn_tail":
                    # readNextOffset skips the torn batch; if the index's last entry is that very batch,
                    # translateOffset finds no batch and the log ends at the segment's base offset
                    torn = last["batches"][-1]
                    indexed = last["offset_index"][-1][0] if last["offset_index"] else None
                    at_base = indexed == torn["last_offset"]
                    expect = last["base_offset"] if at_base else torn["base_offset"]
                    assert log.log_end_offset == expect, key
                    seen.add("clean torn tail: LEO = " + ("segment base" if at_base else "torn batch base"))
            continue
        if len(faults) != 1:
            continue
        (f,) = faults
        if f["kind"] == "missing_index" and f["file"].endswith(".index"):
            # recovered while the segment files are loaded; rebuilt as the generator wrote it (recovery rule)
            base = f["segment_base"]
            assert base in log.recovered_segments, key
            idx = b"".join(struct.pack(">ii", o - base, p_) for o, p_ in segs[base]["offset_index"])
            size = full_sizes(b.cfg)[0] if base == bases[-1] else len(idx)
            assert_file(path / f["file"], idx, size, str(key))
            seen.add("missing .index rebuilt")
        elif f["kind"] == "missing_index":  # a .timeindex: created empty, not rebuilt, unless recovered
            base = f["segment_base"]
            if base not in log.recovered_segments:
                assert_file(path / f["file"], b"", full_sizes(b.cfg)[1] if base == bases[-1] else 0, str(key))
                seen.add("missing .timeindex created empty")
            elif base != bases[-1]:
                tidx = b"".join(struct.pack(">qi", t, o - base) for t, o in segs[base]["time_index"])
                assert_file(path / f["file"], tidx, len(tidx), str(key))
                seen.add("missing .timeindex rebuilt")
        elif f["kind"] in ("corrupt_index", "truncated_index"):
            base = f["segment_base"]
            if f["file"].endswith(".txnindex"):
                assert base in log.recovered_segments, key
                seen.add("corrupt .txnindex recovers the segment")
            elif base not in log.recovered_segments and base != bases[-1]:
                assert (path / f["file"]).read_bytes() == before[f["file"]], key
                seen.add("unread damaged index untouched")
        elif f["kind"] in ("stray_files", "orphaned_index"):
            for name_ in f["files"]:
                assert not (path / name_).exists() and name_ in log.deleted_files, key
            assert [b_ for b_, _ in layout][: len(bases) - 1] == bases[:-1], key
            seen.add(f["kind"] + " removed")
            if ".swap" in "".join(f["files"]):
                seen.add("swap files at or above the lowest .cleaned offset removed")
        elif f["kind"] == "corrupt_snapshot":
            off = int(f["file"].split(".")[0])
            log_start = max(log_start_checkpoint(part), part["first_segment_base"])
            read_at = part["log_end_offset"] if clean else floor_base(part, part["recovery_point"])
            if off <= log_start:  # rebuildProducerState deletes snapshots at or below the log start
                assert not (path / f["file"]).exists(), key
                seen.add("corrupt snapshot at the log start deleted")
            elif off == read_at:
                # the first snapshot Kafka loads: corrupt, so deleted, an older one loaded, and the state
                # at this offset written again
                data = (path / f["file"]).read_bytes()
                assert data != before[f["file"]] and parse_snapshot(data) is not None, key
                if clean:
                    final = {s["offset"]: s for s in part["snapshots"]}[off]
                    assert parse_snapshot(data) == {e[0]: tuple(e[1:]) for e in final["producers"]}, key
                    assert producer_tuples(log) == parse_snapshot(data), key
                seen.add("corrupt snapshot read, replaced")
            elif off > read_at:  # unclean: truncateAndReload drops snapshots past the recovered segment
                assert not (path / f["file"]).exists(), key
                seen.add("corrupt snapshot past the recovery point deleted unread")
            else:  # a snapshot no producer-state rebuild reaches: not one byte changes
                assert (path / f["file"]).read_bytes() == before[f["file"]], key
                seen.add("unread corrupt snapshot untouched")
    return seen


# ------------------------------------------------------------------------------------------------
# The tests

SEEDS = (1, 2, 3)


@pytest.mark.parametrize("clean", [False, True], ids=["unclean", "clean"])
@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_one_fault_kind(tmp_path, kind, clean):
    """Several faults of one kind per broker: every partition matches the model, and the simple cases
    match what the manifest alone says."""
    seed = 10 + FAULT_KINDS.index(kind)
    b = make_broker(tmp_path, GEN.replace(fault_kinds=(kind,), clean_shutdown=clean, seed=seed))
    assert b.manifest["faults"], "no fault was injected"
    out = load_and_check(b)
    if kind == "zero_tail" and clean:
        # a zeroed tail in an unrecovered active segment: readNextOffset meets a size field of 0 and
        # Kafka's start-up fails (CorruptRecordException outside recovery, docs/loading.md §10.1, §13)
        assert out.result is None
        return
    assert out.result is not None
    seen = direct_checks(b, out)
    assert seen, "no partition had a single fault to check directly"
    if kind in DATA_FAULTS and not clean:
        assert any(m.truncated for m in out.models.values())


@pytest.mark.parametrize("kind", [k for k in FAULT_KINDS if k in DATA_FAULTS or k.endswith("_index")])
def test_the_log_end_as_found_is_what_the_files_held(tmp_path, kind):
    """The impact report's "before" of every partition the load changed is readNextOffset of its highest segment
    (or the walk it falls back to) on the files as generated, whether the load read it off a scan or walked."""
    from mploader.disk.real import RealDisk
    from mploader.recovery.impact import log_end_as_found

    b = make_broker(tmp_path, GEN.replace(fault_kinds=(kind,), seed=20 + FAULT_KINDS.index(kind)))
    as_found = {TopicPartition(k[1], k[2]): log_end_as_found(RealDisk(), str(partition_dir(b.out, k)))
                for k in b.manifest["partitions"]}
    result = run_load(b)
    befores = {tp: lg.log_end_offset_before for tp, lg in result.logs.items()}
    assert befores == as_found


@pytest.mark.parametrize("clean", [False, True], ids=["unclean", "clean"])
@pytest.mark.parametrize("seed", SEEDS)
def test_mixed_faults(tmp_path, seed, clean):
    """Faults of every kind (a clean ending without zeroed tails, which make Kafka's start-up fail)."""
    kinds = FAULT_KINDS if not clean else tuple(k for k in FAULT_KINDS if k != "zero_tail")
    b = make_broker(tmp_path, GEN.replace(fault_kinds=kinds, faults=10, clean_shutdown=clean, seed=seed))
    out = load_and_check(b)
    assert out.result is not None
    direct_checks(b, out)
    if not clean:  # recovered segments whose aborted transactions the manifest lists as well
        assert sum(m.txn_cross_checked for m in out.models.values()) > 0


# ------------------------------------------------------------------------------------------------
# Targeted damage on top of a generated broker: the model still decides, and the point of each test is
# asserted from the manifest as well


def add_fault(m: dict, key: tuple[str, str, int], kind: str, file: str, **kw) -> None:
    m["faults"].append({"kind": kind, "dir": key[0], "topic": key[1], "partition": key[2], "file": file,
                        "segment_base": kw.get("segment_base"), "batch": kw.get("batch"),
                        "position": kw.get("position"), "valid_end": kw.get("valid_end"), "detail": "test",
                        "files": kw.get("files", [])})


def set_recovery_point(out: Path, m: dict, key: tuple[str, str, int], rp: int) -> None:
    m["partitions"][key]["recovery_point"] = rp
    d = out / key[0]
    entries = parse_offset_checkpoint_text((d / "recovery-point-offset-checkpoint").read_text())
    entries[(key[1], key[2])] = rp
    (d / "recovery-point-offset-checkpoint").write_text(
        f"0\n{len(entries)}\n" + "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(entries.items())))


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x5A
    path.write_bytes(bytes(data))


def test_truncation_while_loading_segment_files_keeps_later_segments(tmp_path):
    """docs/loading.md §6.3/§16a: a damaged segment without its .index is recovered (and truncated) while the
    segment files are loaded; that truncation does not delete the later segments, and recoverLog's second
    recovery finds nothing left to cut -- the log keeps an offset gap.  The same damage with the .index
    present and the segment in recoverLog's range deletes every later segment."""
    plan: dict[tuple[str, str, int], tuple[str, dict, dict]] = {}
    variants = ["no index, recovered twice", "no index, below the recovery point", "index, recovered",
                "index, below the recovery point"]

    def damage(out: Path, m: dict) -> None:
        candidates = [(k, p) for k, p in m["partitions"].items() if len(p["segments"]) >= 3]
        for (key, part), variant in zip(candidates, variants * 2):
            seg = part["segments"][1]
            row = seg["batches"][len(seg["batches"]) // 2]
            path = partition_dir(out, key)
            flip(path / seg["file"], row["position"] + 40)  # inside the CRC-covered header
            add_fault(m, key, "flipped_byte", seg["file"], segment_base=seg["base_offset"],
                      position=row["position"] + 40, valid_end=row["position"])
            if variant.startswith("no index"):
                (path / name(seg["base_offset"], ".index")).unlink()
                add_fault(m, key, "missing_index", name(seg["base_offset"], ".index"),
                          segment_base=seg["base_offset"])
            rp = seg["base_offset"] if variant.endswith("twice") or variant.endswith(", recovered") \
                else part["segments"][-1]["base_offset"]
            set_recovery_point(out, m, key, max(rp, part["log_start_offset"]))
            plan[key] = (variant, seg, row)

    b = make_broker(tmp_path, GEN.replace(faults=0, seed=7, total_bytes=480_000), damage)
    assert {v for v, _, _ in plan.values()} == set(variants)
    out = load_and_check(b)
    assert out.result is not None
    for key, (variant, seg, row) in plan.items():
        part = b.manifest["partitions"][key]
        log = out.result.logs[TopicPartition(key[1], key[2])]
        bases = [s["base_offset"] for s in part["segments"]]
        later = bases[2:]
        layout = [(s.base_offset, s.size_bytes) for s in log.segments]
        if variant.startswith("no index"):
            assert layout[1] == (seg["base_offset"], row["position"])
            assert [x for x, _ in layout] == bases  # later segments kept: an offset gap after the cut
            assert log.log_end_offset == part["log_end_offset"]
            assert log.truncated_bytes == seg["size"] - row["position"]
            if variant.endswith("twice"):
                assert log.recovered_segments[:1] == [seg["base_offset"]]
                assert set(later) <= set(log.recovered_segments)
            else:
                assert log.recovered_segments == [seg["base_offset"], bases[-1]]
        elif variant == "index, recovered":
            assert layout == [(bases[0], part["segments"][0]["size"]), (seg["base_offset"], row["position"])]
            assert log.log_end_offset == row["base_offset"]
            assert log.recovered_segments == [seg["base_offset"]]
        else:
            assert [x for x, _ in layout] == bases and log.truncated_bytes == 0
            assert seg["base_offset"] not in log.recovered_segments
            assert (partition_dir(b.out, key) / seg["file"]).read_bytes() == b.before[key][seg["file"]]


@pytest.mark.parametrize("clean", [False, True], ids=["unclean", "clean"])
def test_corrupt_snapshot_is_deleted_when_loaded_and_an_older_one_used(tmp_path, clean):
    """docs/loading.md §8.5: the first snapshot a producer-state rebuild loads is the latest at or below its
    target (the LEO after a clean shutdown, the base of the first recovered segment after a crash); a
    corrupt one is deleted and the next older one loaded, then the batches after it are read.  A corrupt
    snapshot no rebuild reaches stays as it is."""
    targets: dict[tuple[str, str, int], tuple[int, int | None]] = {}

    def damage(out: Path, m: dict) -> None:
        for key, part in m["partitions"].items():
            offsets = sorted(s["offset"] for s in part["snapshots"])
            log_start = max(part["log_start_offset"], part["first_segment_base"])
            if clean:
                read_at = part["log_end_offset"]
            else:
                floor = floor_base(part, part["recovery_point"])
                read_at = max([o for o in offsets if o <= floor], default=None)
            if read_at is None or read_at <= log_start:
                continue
            # a second corrupt snapshot, with a valid one between it and the first: the fallback stops there
            unread = [o for o in offsets if log_start < o < read_at]
            other = unread[0] if len(unread) >= 2 else None
            for off in (read_at, other):
                if off is not None:
                    flip(partition_dir(out, key) / name(off, ".snapshot"), 4)  # inside the CRC
                    add_fault(m, key, "corrupt_snapshot", name(off, ".snapshot"))
            targets[key] = (read_at, other)

    cfg = GEN.replace(faults=0, seed=21, clean_shutdown=clean, total_bytes=480_000)
    b = make_broker(tmp_path, cfg, damage)
    assert len(targets) >= 3
    out = load_and_check(b)
    assert out.result is not None
    untouched = 0
    for key, (read_at, other) in targets.items():
        model = out.models[key]
        path = partition_dir(b.out, key)
        assert model.corrupt_snapshots_read[:1] == [read_at]
        snap = path / name(read_at, ".snapshot")
        assert not snap.exists() or snap.read_bytes() != b.before[key][snap.name]
        if snap.exists():
            assert parse_snapshot(snap.read_bytes()) is not None
        if other is not None:
            assert (path / name(other, ".snapshot")).read_bytes() == b.before[key][name(other, ".snapshot")]
            untouched += 1
        if clean:  # the producers are those the generator's snapshot at the LEO held
            final = {s["offset"]: s for s in b.manifest["partitions"][key]["snapshots"]}[read_at]
            log = out.result.logs[TopicPartition(key[1], key[2])]
            assert producer_tuples(log) == {e[0]: tuple(e[1:]) for e in final["producers"]}
    assert untouched >= 1


def test_interrupted_swap_is_completed(tmp_path):
    """docs/loading.md §6.2: a complete set of .swap files replaces the range [its base, its next offset): the
    old segment's files and the producer snapshot in that range are deleted, the .swap files renamed."""
    swapped: dict[tuple[str, str, int], int] = {}

    def damage(out: Path, m: dict) -> None:
        for key, part in m["partitions"].items():
            if len(part["segments"]) < 3:
                continue
            base = part["segments"][1]["base_offset"]
            path = partition_dir(out, key)
            for sfx in (".log", ".index", ".timeindex", ".txnindex"):
                if (path / name(base, sfx)).exists():
                    (path / (name(base, sfx) + ".swap")).write_bytes((path / name(base, sfx)).read_bytes())
            swapped[key] = base

    b = make_broker(tmp_path, GEN.replace(faults=0, seed=3, total_bytes=480_000, clean_shutdown=True), damage)
    assert swapped
    out = load_and_check(b)
    assert out.result is not None
    for key, base in swapped.items():
        path = partition_dir(b.out, key)
        log = out.result.logs[TopicPartition(key[1], key[2])]
        assert not [f for f in os.listdir(path) if f.endswith(".swap")]
        assert not (path / name(base, ".snapshot")).exists()  # in the replaced range
        assert (path / name(base, ".log")).read_bytes() == b.before[key][name(base, ".log")]
        assert base in [s.base_offset for s in log.segments]
        assert name(base, ".log") in log.deleted_files


@pytest.mark.parametrize("interval", ["zero", "one batch"])
def test_index_interval_boundaries(tmp_path, interval):
    """§7.1: an index entry needs strictly more than index.interval.bytes since the last indexed batch, and
    the batch at position 0 never gets one.  With the interval equal to the usual batch size, consecutive
    full batches are exactly one interval apart: only every second one is indexed."""
    cfg = GEN.replace(fault_kinds=("torn_tail", "flipped_byte", "missing_index"), seed=31)
    if interval == "zero":
        cfg = cfg.replace(index_interval_bytes=0)
    else:
        probe = make_broker(tmp_path / "probe", cfg.replace(faults=0))
        parts = probe.manifest["partitions"].values()
        sizes = [r["size"] for p in parts for s in p["segments"] for r in s["batches"]]
        cfg = cfg.replace(index_interval_bytes=max(set(sizes), key=sizes.count))
    b = make_broker(tmp_path, cfg)
    out = load_and_check(b)
    assert out.result is not None
    assert any(m.recovered for m in out.models.values())
    exact_distance = 0
    for p in b.manifest["partitions"].values():
        for s in p["segments"]:
            rows = s["batches"]
            indexed = [0] + [e[1] for e in s["offset_index"]]
            if interval == "zero":
                assert indexed[1:] == [r["position"] for r in rows[1:]]
            exact_distance += sum(1 for r in rows if r["position"] - cfg.index_interval_bytes in indexed)
    assert interval == "zero" or exact_distance > 10  # batches exactly one interval after an indexed one


def test_corrupt_snapshot_deleted_on_load_and_not_written_again(tmp_path):
    """§8.5/§6.14: the recovery of segment k loads the latest snapshot at or below its base; when the one at
    its base is missing and the one before is corrupt, that one is deleted and the state is rebuilt from
    an older snapshot; rebuildProducerState writes snapshots only at the last two segment bases and at its
    target, so the corrupt snapshot's offset stays without a file."""
    chosen: dict[tuple[str, str, int], tuple[int, int]] = {}

    def damage(out: Path, m: dict) -> None:
        for key, part in m["partitions"].items():
            bases = [s["base_offset"] for s in part["segments"]]
            snaps = {s["offset"] for s in part["snapshots"]}
            if len(bases) < 4 or bases[1] not in snaps or bases[2] not in snaps:
                continue
            if part["log_start_offset"] >= bases[1]:
                continue
            path = partition_dir(out, key)
            (path / name(bases[2], ".snapshot")).unlink()
            flip(path / name(bases[1], ".snapshot"), 7)
            add_fault(m, key, "corrupt_snapshot", name(bases[1], ".snapshot"))
            set_recovery_point(out, m, key, bases[2])
            chosen[key] = (bases[1], bases[2])

    b = make_broker(tmp_path, GEN.replace(faults=0, seed=5, total_bytes=700_000), damage)
    assert chosen
    out = load_and_check(b)
    assert out.result is not None
    for key, (corrupt, recovered) in chosen.items():
        path = partition_dir(b.out, key)
        assert out.models[key].corrupt_snapshots_read == [corrupt]
        assert not (path / name(corrupt, ".snapshot")).exists()
        assert recovered in out.result.logs[TopicPartition(key[1], key[2])].recovered_segments


def test_leader_epoch_checkpoint_behind_delete_records(tmp_path):
    """§6.11: truncateFromStart(log-start checkpoint) drops the epochs that start at or before the log start
    and moves the last of them to the log start; a checkpoint written before DeleteRecords still lists
    them."""
    touched = []

    def damage(out: Path, m: dict) -> None:
        for key, part in m["partitions"].items():
            if part["log_start_offset"] > part["first_segment_base"] and \
                    part["leader_epochs_in_log"] != part["leader_epoch_checkpoint"]:
                epochs = part["leader_epochs_in_log"]
                (partition_dir(out, key) / "leader-epoch-checkpoint").write_text(
                    f"0\n{len(epochs)}\n" + "".join(f"{e} {o}\n" for e, o in epochs))
                touched.append(key)

    cfg = GEN.replace(faults=0, seed=4, delete_records_fraction=1.0, leader_epoch_changes=12,
                      clean_shutdown=True)
    b = make_broker(tmp_path, cfg, damage)
    assert touched
    out = load_and_check(b)
    for key in touched:
        part = b.manifest["partitions"][key]
        log = out.result.logs[TopicPartition(key[1], key[2])]
        assert log.leader_epochs == [tuple(e) for e in part["leader_epoch_checkpoint"]]
        assert log.leader_epochs[0][1] == part["log_start_offset"]


def test_truncation_below_the_log_start_deletes_every_segment(tmp_path):
    """§6.7: when recovery cuts the log below the log-start checkpoint, every segment goes, the epoch cache
    is cleared and an empty segment starts at the log start offset."""
    chosen: dict[tuple[str, str, int], int] = {}

    def damage(out: Path, m: dict) -> None:
        for key, part in m["partitions"].items():
            first = part["segments"][0]
            below = [r for r in first["batches"] if r["last_offset"] < part["log_start_offset"]]
            if part["log_start_offset"] <= part["first_segment_base"] or not below:
                continue
            row = below[0]
            flip(partition_dir(out, key) / first["file"], row["position"] + 30)
            add_fault(m, key, "flipped_byte", first["file"], segment_base=first["base_offset"],
                      position=row["position"] + 30, valid_end=row["position"])
            set_recovery_point(out, m, key, part["log_start_offset"])
            chosen[key] = part["log_start_offset"]

    b = make_broker(tmp_path, GEN.replace(faults=0, seed=8, delete_records_fraction=1.0), damage)
    assert chosen
    out = load_and_check(b)
    assert out.result is not None
    for key, log_start in chosen.items():
        log = out.result.logs[TopicPartition(key[1], key[2])]
        assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(log_start, 0)]
        assert log.log_end_offset == log.log_start_offset == log_start
        assert log.leader_epochs == [] and log.producers == {}
        path = partition_dir(b.out, key)
        assert (path / "leader-epoch-checkpoint").read_text() == "0\n0\n"
        assert not [f for f in os.listdir(path) if f.endswith(".snapshot")]



@pytest.mark.parametrize("clean", [False, True], ids=["unclean", "clean"])
def test_producers_expire_when_loaded_a_day_later(tmp_path, clean):
    """§8.5: a producer without an open transaction whose last timestamp is producer.id.expiration.ms old is
    dropped when a snapshot is loaded (and only then: producers read from the log are kept)."""
    b = make_broker(tmp_path, GEN.replace(seed=17, clean_shutdown=clean, fault_kinds=("flipped_byte", "torn_tail")))
    b.now_ms = GEN.start_timestamp_ms + EXPIRATION_MS + 3_600_000
    out = load_and_check(b)
    assert out.result is not None
    dropped = direct = 0
    for key, part in b.manifest["partitions"].items():
        log = out.result.logs[TopicPartition(key[1], key[2])]
        dropped += len(part["producer_ids"]) - len(log.producers)
        if clean and log.log_end_offset == part["log_end_offset"]:
            # the snapshot at the LEO is loaded and nothing read after it: only open transactions stay
            final = {s["offset"]: s for s in part["snapshots"]}[part["log_end_offset"]]
            assert producer_tuples(log) == {e[0]: tuple(e[1:]) for e in final["producers"] if e[7] >= 0}
            direct += 1
    assert dropped > 0 and (direct > 0 or not clean)


def test_producer_state_read_from_a_damaged_batch_uses_its_header(tmp_path):
    """§6.14/§8.4: loadProducersFromRecords does not check CRCs.  After a clean shutdown without the snapshot
    at the LEO, the active segment is read from the snapshot at its base, and a batch whose maxTimestamp
    was damaged gives its producer that timestamp (the segment itself is not recovered, not one byte
    changes)."""
    damaged: dict[tuple[str, str, int], tuple[int, int]] = {}

    def damage(out: Path, m: dict) -> None:
        for key, part in m["partitions"].items():
            active = part["segments"][-1]
            if len(part["segments"]) < 2 or active["base_offset"] not in part["snapshot_offsets"]:
                continue
            rows = [r for s in part["segments"] for r in s["batches"]]
            last_of = {r["producer_id"]: r for r in rows}
            mine = [r for r in active["batches"] if r["producer_id"] >= 0 and r["control"] is None
                    and last_of[r["producer_id"]] is r]
            if not mine:
                continue
            row = mine[-1]
            path = partition_dir(out, key)
            flip(path / active["file"], row["position"] + 42)  # the low byte of maxTimestamp
            add_fault(m, key, "flipped_byte", active["file"], segment_base=active["base_offset"],
                      position=row["position"] + 42, valid_end=row["position"])
            (path / name(part["log_end_offset"], ".snapshot")).unlink()
            damaged[key] = (row["producer_id"], row["max_timestamp"] ^ 0x5A)

    b = make_broker(tmp_path, GEN.replace(faults=0, seed=6, clean_shutdown=True), damage)
    assert damaged
    out = load_and_check(b)
    assert out.result is not None
    for key, (pid, ts) in damaged.items():
        log = out.result.logs[TopicPartition(key[1], key[2])]
        assert out.models[key].damaged_batches_read == 1
        assert log.producers[pid].last_timestamp == ts
        assert not log.recovered_segments and log.truncated_bytes == 0


# ------------------------------------------------------------------------------------------------
# Disagreements this file found, fixed; kept as regression tests


def test_garbage_active_index_lookup_after_resize(tmp_path):
    """A clean shutdown of orders-2 (two segments); the active segment's .index has random bytes in its first
    slots; the first segment has no .index, so its load-time recovery deletes every later snapshot (the
    LEO's too) and writes one at the active segment's base.  The final rebuildProducerState then reads the
    active segment from translateOffset(its base): Kafka looks it up in the index's 8 entries (a garbage
    slot: a position past the end, nothing is read), mploader in the 1310720 slots of the resized file (a
    zero slot: position 0, every batch is read), so the producers and the snapshot at the LEO differ."""
    cfg = GEN.replace(fault_kinds=tuple(k for k in FAULT_KINDS if k != "zero_tail"), faults=8, clean_shutdown=True,
                      seed=4, index_interval_bytes=4096, segment_bytes=48 * 1024, total_bytes=600_000)
    b = make_broker(tmp_path, cfg)
    load_and_check(b)


def test_generator_orphaned_index_after_missing_index(tmp_path):
    """An orphaned_index fault after a missing_index fault of the same partition (its source file gone)."""
    summary = generate(tmp_path / "broker", GeneratorConfig(
        data_dirs=1, topics=1, partitions_per_topic=1, total_bytes=200_000, segment_bytes=20_000, batch_bytes=2048,
        faults=2, fault_kinds=("missing_index", "orphaned_index"), seed=90))
    assert sorted(f.kind for f in summary.faults) == ["missing_index", "orphaned_index"]
    orphan = next(f for f in summary.faults if f.kind == "orphaned_index")
    part = Path(summary.data_dirs[0]) / f"{orphan.topic}-{orphan.partition}"
    assert all((part / name).exists() for name in orphan.files)
