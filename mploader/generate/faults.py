"""Fault injection: damage a finished partition from a seed, and record the ground truth of each fault."""

from __future__ import annotations

import logging
import mmap
import os
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mploader.format import index, log as logfmt, names, records
from mploader.generate.config import DATA_FAULTS, Fault
from mploader.generate.files import _write_file
from mploader.generate.writer import _PartitionWriter, _SegmentInfo

logger = logging.getLogger(__name__)


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
        inject_kind: Callable[[], Fault | None] = getattr(self, "_" + kind)
        return inject_kind()

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
                              detail=f"bytes {pos}..{seg.size} zeroed (lost pages), file length unchanged")
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
            # smallest .cleaned offset are deleted with the .cleaned files (docs/loading.md §6.1)
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
