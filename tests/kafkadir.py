"""Builders for partition directories in docs/scenarios.md notation (section 0).

``B(o)``, ``P(o, pid, seq)``, ``T(o, n, pid, seq)``, ``N(o, n)``, ``M(o, pid, commit)``,
``V1(o, v, ts)``, ``V0(o, v)`` return batch bytes; :class:`PartitionBuilder` writes
segments, "consistent" index files (an independent, test-side implementation of
the docs/loading.md §7.1 rule, so tests do not check mploader against itself),
snapshots, checkpoints and the marker.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from mploader.format import legacy, records
from mploader.format.snapshot import ProducerSnapshotEntry, snapshot_bytes
from tests.crashy_worker import result_digest
from tests.fingerprint import tree_state

T0 = 1_700_000_000_000
NOW = T0 + 1_000_000
X = 10_485_760  # segment.index.bytes default
I = 4096  # noqa: E741 - index.interval.bytes default, named I as in docs/scenarios.md's notation


def B(o: int, ts: int | None = None, ple: int = 0, value: bytes = b"test") -> bytes:
    t = T0 + o if ts is None else ts
    return records.build_batch(o, [records.Record(0, 0, None, value)], partition_leader_epoch=ple,
                               base_timestamp=t, max_timestamp=t)


def P(o: int, pid: int, seq: int, ple: int = 0, epoch: int = 0, ts: int | None = None) -> bytes:
    t = T0 + o if ts is None else ts
    return records.build_batch(o, [records.Record(0, 0, None, b"test")], partition_leader_epoch=ple,
                               base_timestamp=t, max_timestamp=t, producer_id=pid, producer_epoch=epoch,
                               base_sequence=seq)


def T(o: int, n: int, pid: int, seq: int, ple: int = 0, epoch: int = 0) -> bytes:
    recs = [records.Record(i, 0, None, str(seq + i).encode()) for i in range(n)]
    return records.build_batch(o, recs, partition_leader_epoch=ple, base_timestamp=T0 + o, max_timestamp=T0 + o,
                               transactional=True, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def N(o: int, n: int, ple: int = 0) -> bytes:
    recs = [records.Record(i, 0, None, str(i).encode()) for i in range(n)]
    return records.build_batch(o, recs, partition_leader_epoch=ple, base_timestamp=T0 + o, max_timestamp=T0 + o)


def M(o: int, pid: int, commit: bool, coord: int = 0, ts: int | None = None, ple: int = 0, epoch: int = 0) -> bytes:
    return records.build_end_txn_marker_batch(o, pid, epoch, commit, coordinator_epoch=coord,
                                              timestamp=T0 + o if ts is None else ts, partition_leader_epoch=ple)


def V1(o: int, v: bytes, ts: int) -> bytes:
    return legacy.build_message(o, v, magic=1, timestamp=ts)


def V0(o: int, v: bytes) -> bytes:
    return legacy.build_message(o, v, magic=0)


def name(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


@dataclass
class BatchFacts:
    position: int
    size: int
    last_offset: int
    max_timestamp: int


def batch_facts(data: bytes) -> list[BatchFacts]:
    """Shallow facts of back-to-back batches (v2 or legacy), for the test-side index rule."""
    out = []
    p = 0
    while p + 17 <= len(data):
        off, size = struct.unpack_from(">qi", data, p)
        magic = data[p + 16]
        if magic >= 2:
            h = records.read_batch_header(data, p)
            out.append(BatchFacts(p, 12 + size, h.last_offset, h.max_timestamp))
        else:
            ts = struct.unpack_from(">q", data, p + 18)[0] if magic == 1 else -1
            out.append(BatchFacts(p, 12 + size, off, ts))
        p += 12 + size
    return out


def expected_indexes(base: int, data: bytes, interval: int = I) -> tuple[bytes, bytes]:
    """Offset and time index bytes per docs/loading.md §7.1 (trimmed)."""
    oi = bytearray()
    ti = bytearray()
    last_ts_entry = -1
    max_ts, max_ts_off = -1, base
    valid = last_indexed = 0
    for b in batch_facts(data):
        if b.max_timestamp > max_ts:
            max_ts, max_ts_off = b.max_timestamp, b.last_offset
        if valid - last_indexed > interval:
            oi += struct.pack(">ii", b.last_offset - base, valid)
            if max_ts > last_ts_entry:
                ti += struct.pack(">qi", max_ts, max_ts_off - base)
                last_ts_entry = max_ts
            last_indexed = valid
        valid += b.size
    if max_ts > last_ts_entry:
        ti += struct.pack(">qi", max_ts, max_ts_off - base)
    return bytes(oi), bytes(ti)


def empty_snapshot() -> bytes:
    return snapshot_bytes([])


def snapshot_of(entries: list[ProducerSnapshotEntry]) -> bytes:
    return snapshot_bytes(entries)


def checkpoint_text(entries: list[tuple[str, int, int]]) -> str:
    return f"0\n{len(entries)}\n" + "".join(f"{t} {p} {o}\n" for t, p, o in entries)


@dataclass
class PartitionBuilder:
    """Writes one partition directory ``data_dir/<topic>-<partition>``."""

    data_dir: Path
    topic: str = "t"
    partition: int = 0
    dirname: str | None = None
    interval: int = I
    segments: dict[int, bytes] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.data_dir / (self.dirname or f"{self.topic}-{self.partition}")

    def file(self, base: int, suffix: str) -> Path:
        return self.path / name(base, suffix)

    def segment(self, base: int, *batches: bytes, indexes: bool = True) -> PartitionBuilder:
        self.path.mkdir(parents=True, exist_ok=True)
        data = b"".join(batches)
        self.segments[base] = data
        self.file(base, ".log").write_bytes(data)
        if indexes:
            oi, ti = expected_indexes(base, data, self.interval)
            self.file(base, ".index").write_bytes(oi)
            self.file(base, ".timeindex").write_bytes(ti)
        return self

    def write(self, filename: str, data: bytes | str) -> PartitionBuilder:
        self.path.mkdir(parents=True, exist_ok=True)
        p = self.path / filename
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        return self

    def snapshot(self, offset: int, entries: list[ProducerSnapshotEntry] | None = None) -> PartitionBuilder:
        return self.write(name(offset, ".snapshot"), snapshot_bytes(entries or []))

    def epochs(self, *entries: tuple[int, int]) -> PartitionBuilder:
        return self.write("leader-epoch-checkpoint",
                          f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries))

    def std3(self) -> PartitionBuilder:
        """STD3: S(0): B(0..9), S(10): B(10..19), S(20): B(20..29); snapshots 10, 20, 30; epochs (0, 0)."""
        for base in (0, 10, 20):
            self.segment(base, *(B(o) for o in range(base, base + 10)))
        for off in (10, 20, 30):
            self.snapshot(off)
        return self.epochs((0, 0))

    def read(self, filename: str) -> bytes:
        return (self.path / filename).read_bytes()

    def files(self) -> set[str]:
        return set(os.listdir(self.path))


def data_dir(tmp_path: Path, name_: str = "d1", *, clean: bool, marker: bytes = b'{"version":0,"brokerEpoch":0}',
             rp: list[tuple[str, int, int]] | None = None, lso: list[tuple[str, int, int]] | None = None) -> Path:
    """A data dir with (or without) the marker and with the given checkpoint entries (None = no file)."""
    d = tmp_path / name_
    d.mkdir(parents=True, exist_ok=True)
    if clean:
        (d / ".kafka_cleanshutdown").write_bytes(marker)
    if rp is not None:
        (d / "recovery-point-offset-checkpoint").write_text(checkpoint_text(rp))
    if lso is not None:
        (d / "log-start-offset-checkpoint").write_text(checkpoint_text(lso))
    return d


# ------------------------------------------------------------------------------------------------
# Helpers for the scenario tests (appended; generally useful for any test that loads a data dir)

OFFSET_INDEX_FULL = X - X % 8  # 10485760: a preallocated / resized active .index
TIME_INDEX_FULL = X - X % 12  # 10485756: a preallocated / resized active .timeindex
INT64_MAX = 2**63 - 1


def load(dirs, *, now_ms: int = NOW, metrics=None, dry_run_first: bool = True, **config):
    """``load_logs`` on the given data dirs with the scenario defaults (``I``, ``X``) unless overridden.

    Unless ``dry_run_first=False`` (or the load is itself a dry run), the same load runs first as a dry
    run, which must change no byte under the data dirs and report exactly what the real load then
    reports (or fail start-up the same way).  Skipped when a data dir is missing: a real load creates
    it, a dry run reports it offline."""
    from mploader import LoaderConfig, StartupFailedError, load_logs

    config.setdefault("index_interval_bytes", I)
    config.setdefault("max_index_size", X)
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    paths = [str(d) for d in dirs]
    dry = None
    check_dry = dry_run_first and not config.get("dry_run") and all(os.path.isdir(p) for p in paths)
    if check_dry:
        before = {p: tree_state(p) for p in paths}
        try:
            dry = load_logs(paths, LoaderConfig(**{**config, "dry_run": True}), now_ms=now_ms)
        except StartupFailedError as e:
            dry = e
        assert {p: tree_state(p) for p in paths} == before, "the dry run changed bytes under the data dirs"
    try:
        real = load_logs(paths, LoaderConfig(**config), now_ms=now_ms, metrics=metrics)
    except StartupFailedError as e:
        if check_dry:
            assert isinstance(dry, StartupFailedError), f"the real load failed start-up ({e}), the dry run did not"
            assert (dry.kafka_exception, dry.path) == (e.kafka_exception, e.path), (dry, e)
        raise
    if check_dry:
        assert not isinstance(dry, BaseException), f"the dry run failed start-up ({dry}), the real load did not"
        dry_digest, real_digest = result_digest(dry, "/"), result_digest(real, "/")
        for digest in (dry_digest, real_digest):  # a dry run scans the files it wrote itself (e.g. the segments
            digest["stats"].pop("unplanned_scans")  # of a split) in the parent: they never reach the engine
        diff = {key: (dry_digest.get(key), real_digest.get(key)) for key in dry_digest.keys() | real_digest.keys()
                if dry_digest.get(key) != real_digest.get(key)}
        assert not diff, f"the dry run reported another outcome (dry, real): {diff}"
    return real


def same_path(a, b) -> bool:
    return os.path.realpath(os.fspath(a)) == os.path.realpath(os.fspath(b))


def dir_entry(mapping: dict, d, default=KeyError):
    """``mapping[d]`` for a dict keyed by data-dir path strings, comparing real paths."""
    for k, v in mapping.items():
        if same_path(k, d):
            return v
    if default is KeyError:
        raise KeyError(f"{d} not in {sorted(mapping)}")
    return default


def dir_in(mapping: dict, d) -> bool:
    return any(same_path(k, d) for k in mapping)


def assert_gone(directory, filename: str) -> None:
    """Kafka 'deletes' a file by renaming it to ``<name>.deleted`` and removing it after
    ``file.delete.delay.ms``: accept the file being absent, whether or not ``<name>.deleted`` exists."""
    p = Path(directory) / filename
    assert not p.exists(), f"{p} should have been deleted (or renamed to {filename}.deleted)"


def assert_segment_gone(directory, base: int, suffixes=(".log", ".index", ".timeindex", ".txnindex")) -> None:
    for sfx in suffixes:
        assert_gone(directory, name(base, sfx))


def snapshot_offsets(directory) -> set[int]:
    """Offsets of the live ``*.snapshot`` files (``*.snapshot.deleted`` excluded)."""
    return {int(f.split(".")[0]) for f in os.listdir(directory) if f.endswith(".snapshot")}


def append_bytes(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def overwrite_bytes(path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def flip_bit(path, pos: int, mask: int = 0x01) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ mask]))


def oi_bytes(base: int, *entries: tuple[int, int]) -> bytes:
    """Offset-index entries ``(absolute offset, position)`` as bytes (docs/formats.md §8)."""
    return b"".join(struct.pack(">ii", o - base, p) for o, p in entries)


def ti_bytes(base: int, *entries: tuple[int, int]) -> bytes:
    """Time-index entries ``(timestamp, absolute offset)`` as bytes (docs/formats.md §9)."""
    return b"".join(struct.pack(">qi", t, o - base) for t, o in entries)


def txn_entry(pid: int, first: int, last: int, lso: int, version: int = 0) -> bytes:
    """One 34-byte ``.txnindex`` entry (docs/formats.md §11)."""
    return struct.pack(">hqqqq", version, pid, first, last, lso)


def assert_file(path, prefix: bytes, size: int | None = None) -> None:
    """The file is ``prefix`` followed by zeros up to ``size`` bytes (``size=None``: exactly ``prefix``)."""
    data = Path(path).read_bytes()
    size = len(prefix) if size is None else size
    assert len(data) == size, f"{path}: {len(data)} bytes, expected {size}"
    assert data[: len(prefix)] == prefix, f"{path}: unexpected leading bytes"
    assert data.count(0, len(prefix)) == size - len(prefix), f"{path}: tail after {len(prefix)} bytes is not zero"


def tree_bytes(root) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) under ``root``, by relative path."""
    root = Path(root)
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = Path(p).read_bytes()
    return out


def parse_offset_checkpoint_text(text: str) -> dict[tuple[str, int], int]:
    """Test-side reader of a well-formed offset checkpoint (docs/formats.md §13), for comparing as sets."""
    lines = text.splitlines()
    if not lines:
        return {}
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2, text
    out = {}
    for line in lines[2:]:
        t, p, o = line.split()
        out[(t, int(p))] = int(o)
    return out


def segment_layout(log) -> list[tuple[int, int]]:
    """``[(base_offset, size_bytes)]`` of a LoadedLog's segments."""
    return [(s.base_offset, s.size_bytes) for s in log.segments]


def std3_batches(base: int) -> bytes:
    return b"".join(B(o) for o in range(base, base + 10))
