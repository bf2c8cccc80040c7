"""One partition's life: its segments, indexes, producer snapshots and checkpoints, streamed to disk.

How it stays fast and small: one partition is written at a time, batch by batch, with
``os.writev``; a batch is a fresh 61-byte header in front of a records section built once per
record count (:mod:`mploader.generate.templates`; only the header fields and the CRC change).
Only the current segment's index entries are held in memory.  The manifest is written line by
line as segments close.

Indexes follow Kafka's *recovery* rule (docs/loading.md §7.1), so a recovered segment's rebuilt index
equals the generated one: an ``.index`` entry ``(batch lastOffset, batch start position)`` when
more than ``index_interval_bytes`` lie between the last indexed batch and this batch (never for
the batch at position 0), a time entry at the same moments with the running maximum timestamp,
and a final time entry when the segment is rolled or closed.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import random
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mploader.format import checkpoint, compression, index, names, records, snapshot
from mploader.format.crc import crc32c
from mploader.format.index import AbortedTxn
from mploader.format.snapshot import ProducerSnapshotEntry
from mploader.generate.config import GeneratorConfig
from mploader.generate.files import _start_writeback, _write_file
from mploader.generate.manifest import _Manifest
from mploader.generate.templates import _Template

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


class _Owner(Protocol):
    """What a partition writer uses of the broker being generated (``generator._Generator``); a
    protocol, so that this module does not import the generator that imports it."""

    cfg: GeneratorConfig
    out_dir: Path
    template_table: list[_Template]
    mean_batch_size: float
    manifest: _Manifest
    segments: int  # segments closed so far, over all partitions

    def progress(self, n: int) -> None: ...

    def partition_done(self, pw: _PartitionWriter, log_start: int, recovery_point: int,
                       high_watermark: int) -> None: ...


class _ProducerEntry:
    """The broker's producer-state entry (what a snapshot persists, docs/formats.md §12)."""

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
    def __init__(self, gen: _Owner, dir_name: str, dir_path: Path, tp: names.TopicPartition,
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
        if pos - self.last_indexed > self.index_interval_bytes:  # docs/loading.md §7.1
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


def _truncate_epochs_from_start(entries: list[tuple[int, int]], start: int) -> list[tuple[int, int]]:
    """LeaderEpochFileCache.truncateFromStart: entries starting at or before ``start`` go; the
    latest of them comes back starting at ``start``."""
    removed = [e for e in entries if e[1] <= start]
    remaining = [e for e in entries if e[1] > start]
    if removed:
        remaining.insert(0, (removed[-1][0], start))
    return remaining
