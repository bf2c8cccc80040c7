"""Whole-segment damage on generated brokers, checked against kafka-python's reader (code nobody here wrote).

Each case copies a generated broker (unclean shutdown, transactions, aborts, leader-epoch changes, the generator's
own faults), removes its recovery-point checkpoint so that recovery reads every segment, damages one to three
``.log`` files (random bit flips, truncations, splices of another segment's bytes, runs of zeros, a huge,
negative or off-by-one length field at a batch boundary, random garbage, a duplicated batch) and loads it.
The load must return or raise a typed error (a :class:`~mploader.errors.StartupFailedError` where Kafka's
broker would not start), and then, per partition, with kafka-python reading the files before and after:

* **never keeps a batch whose CRC fails**: every file left is whole batches that kafka-python reads and
  CRC-checks as valid;
* **never keeps anything after the first invalid batch**: every batch left is one of the batches before the
  partition's first invalid one (a CRC or size failure, in segment order);
* **never drops a valid batch before the first invalid one**: every batch before it is still there, in
  order, except from the segment where offsets first stop increasing (Kafka's ``LogLoader.recoverLog``
  truncates such a segment to its base offset on an ``InvalidOffsetException``, valid batches included) and
  except when what is left ends below the partition's log start offset (then Kafka deletes every segment);
* a second load keeps every segment byte and removes nothing, and a third changes no byte at all.  (Not the
  second: like Kafka's, it may still rewrite metadata on such input.  A segment cut to its base offset after
  an ``InvalidOffsetException`` keeps its index's old entries behind the index's position (``truncateTo`` only
  moves it), which the next recovery's ``trimToValidSize`` drops; and a leader epoch below the checkpoint's
  latest is not assigned until the first load's truncation has removed the later epochs.)
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka.record.memory_records import MemoryRecords

from mploader import LoaderConfig, load_logs
from mploader.errors import MploaderError
from mploader.format import checkpoint, names
from mploader.generate import FAULT_KINDS, GeneratorConfig, generate
from tests.examples import examples
from tests.fingerprint import tree_state

BROKERS = {
    "plain": GeneratorConfig(data_dirs=1, topics=2, partitions_per_topic=2, total_bytes=240_000,
                             segment_bytes=10_000, batch_bytes=900, records_per_batch=4, transactional_fraction=0.4,
                             abort_fraction=0.5, leader_epoch_changes=3, faults=3, fault_kinds=FAULT_KINDS, seed=31),
    "gzip": GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=3, total_bytes=120_000,
                            segment_bytes=6_000, batch_bytes=700, records_per_batch=6, compression="gzip",
                            transactional_fraction=0.3, faults=2, seed=32),
}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile_brokers")
    out = {}
    for name, config in BROKERS.items():
        generate(root / name, config)
        out[name] = root / name
    return out


@pytest.fixture(autouse=True)
def quiet_loader() -> Iterator[None]:
    logging.disable(logging.WARNING)  # every damaged segment is a WARNING of the loader
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


# ---- kafka-python's view of a partition ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Batch:
    segment: int  # index of its segment in base-offset order
    position: int
    data: bytes
    base_offset: int
    last_offset: int


def read_file(data: bytes, segment: int) -> tuple[list[Batch], bool]:
    """The batches of one ``.log`` that kafka-python reads and CRC-checks as valid, up to the first one it does
    not; and whether the whole file was valid batches."""
    out: list[Batch] = []
    records = MemoryRecords(data)
    pos = 0
    while pos < len(data):
        try:
            batch = records.next_batch()
            if batch is None or not batch.validate_crc():
                return out, False
            size = batch.size_in_bytes if batch.magic >= 2 else len(batch._buffer)
            last = batch.last_offset if batch.magic >= 2 else batch.base_offset
            out.append(Batch(segment, pos, bytes(data[pos : pos + size]), batch.base_offset, last))
        except Exception:  # noqa: BLE001 - whatever kafka-python cannot read is the end of the valid data
            return out, False
        pos += size
    return out, True


def segment_files(partition: Path) -> list[tuple[int, bytes]]:
    logs = [p for p in partition.iterdir() if p.name.endswith(names.LOG_SUFFIX)]
    return sorted((names.offset_from_file_name(p.name), p.read_bytes()) for p in logs)


@dataclass(frozen=True, slots=True)
class Expectation:
    valid: list[Batch]  # the batches before the partition's first invalid one
    must_keep: int  # how many of them (a prefix) a load must keep


def expect(partition: Path) -> Expectation:
    valid: list[Batch] = []
    anomaly_segment: int | None = None
    prev_last: int | None = None
    for k, (base, data) in enumerate(segment_files(partition)):
        batches, whole = read_file(data, k)
        for b in batches:
            if anomaly_segment is None and (b.base_offset > b.last_offset or b.base_offset < base
                                            or b.last_offset - base > 2**31 - 1
                                            or (prev_last is not None and b.base_offset <= prev_last)):
                anomaly_segment = k
            prev_last = b.last_offset
        valid += batches
        if not whole:
            break
    keep = len(valid) if anomaly_segment is None else sum(b.segment < anomaly_segment for b in valid)
    if keep and valid[keep - 1].last_offset + 1 < log_start_offset(partition):
        keep = 0  # a log end offset below the log start offset: Kafka deletes every segment (LogLoader.load)
    return Expectation(valid, keep)


def log_start_offset(partition: Path) -> int:
    tp, _ = names.parse_partition_dir(partition.name)
    path = partition.parent / checkpoint.LOG_START_OFFSET_CHECKPOINT
    return checkpoint.read_offset_checkpoint(path).get(tp, 0) if path.exists() else 0


def check_partition(partition: Path, expected: Expectation) -> None:
    kept: list[bytes] = []
    for k, (_, data) in enumerate(segment_files(partition)):
        batches, whole = read_file(data, k)
        assert whole, f"{partition}: segment {k} keeps bytes kafka-python does not read as valid batches"
        kept += [b.data for b in batches]
    valid = [b.data for b in expected.valid]
    assert kept[: expected.must_keep] == valid[: expected.must_keep], \
        f"{partition}: a valid batch before the first invalid one was dropped"
    allowed = set(valid)
    assert all(b in allowed for b in kept), f"{partition}: a batch from after the first invalid one was kept"


# ---- damage -------------------------------------------------------------------------------------------------

def boundaries(data: bytes) -> list[int]:
    """Positions of the entries kafka-python's framing sees (valid or not), for damage at a batch start."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        out.append(pos)
        size = struct.unpack_from(">i", data, pos + 8)[0]
        if size < 14:
            break
        pos += 12 + size
    return out or [0]


def damage(rng: random.Random, data: bytes, others: list[bytes]) -> tuple[bytes, str]:
    b = bytearray(data)
    kind = rng.choice(["flip", "truncate", "splice", "zeros", "length", "garbage", "duplicate"])
    at = rng.randrange(len(b) + 1)
    if kind == "flip" and b:
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del b[at:]
    elif kind == "splice" and others:
        other = rng.choice(others)
        start = rng.choice(boundaries(other)) if rng.random() < 0.7 else rng.randrange(len(other) + 1)
        piece = other[start : start + rng.randint(1, 3000)]
        at = rng.choice(boundaries(data)) if rng.random() < 0.7 else at
        b[at : at + (len(piece) if rng.random() < 0.5 else 0)] = piece
    elif kind == "zeros":
        n = rng.choice([rng.randint(1, 64), rng.randint(1, 4096), len(b)])
        b[at : at + n] = bytes(len(b[at : at + n]))
    elif kind == "length":
        at = rng.choice(boundaries(data))
        if at + 12 <= len(b):
            old = struct.unpack_from(">i", b, at + 8)[0]
            new = rng.choice([2**31 - 1, 2**31 - 13, -1, -(2**31), 0, 13, 48, old + 1, old - 1,
                              rng.randrange(2**31)])
            struct.pack_into(">i", b, at + 8, new)
    elif kind == "garbage":
        n = rng.randint(1, 200)
        b[at : at + n] = rng.randbytes(n)
    elif kind == "duplicate":
        starts = boundaries(data)
        i = rng.randrange(len(starts))
        end = starts[i + 1] if i + 1 < len(starts) else len(data)
        b[end:end] = data[starts[i] : end]
    return bytes(b), kind


def damaged_copy(source: Path, dest: Path, rng: random.Random) -> list[str]:
    shutil.copytree(source, dest)
    for cp in dest.glob("*/recovery-point-offset-checkpoint"):
        cp.unlink()  # recovery point 0: every segment is recovered, so every one is checked
    logs = sorted(dest.glob("*/*/*.log"))
    pool = [p.read_bytes() for p in logs]
    done = []
    for path in rng.sample(logs, rng.randint(1, min(3, len(logs)))):
        data, kind = damage(rng, path.read_bytes(), pool)
        path.write_bytes(data)
        done.append(f"{kind} {path.parent.name}/{path.name}")
    return done


def partitions(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("data-*/*") if p.is_dir())


def load_damaged(brokers: dict[str, Path], tmp_path: Path, seed: int, workers: int) -> None:
    rng = random.Random(seed)
    name = rng.choice(sorted(brokers))
    root = Path(tempfile.mkdtemp(prefix=f"case-{seed}-", dir=tmp_path))
    shutil.rmtree(root)
    what = damaged_copy(brokers[name], root, rng)
    expected = {p: expect(p) for p in partitions(root)}
    dirs = sorted(str(d) for d in root.glob("data-*"))
    config = LoaderConfig(segment_scan_workers_per_data_dir=workers)
    try:
        load_logs(dirs, config, now_ms=0)
    except MploaderError:
        return  # a typed error (a broker that would not start): nothing else to check
    for p in partitions(root):
        try:
            check_partition(p, expected[p])
        except AssertionError as e:
            raise AssertionError(f"broker {name}, seed {seed}, damage {what}: {e}") from None
    first = tree_state(root)
    second = load_logs(dirs, config, now_ms=0)
    after_second = tree_state(root)
    logs = {k: v for k, v in first.items() if k.endswith(names.LOG_SUFFIX)}
    assert logs == {k: v for k, v in after_second.items() if k.endswith(names.LOG_SUFFIX)}, \
        f"broker {name}, seed {seed}, damage {what}: a second load changed a segment"
    assert not any(lg.truncated_bytes or lg.deleted_files for lg in second.logs.values())
    load_logs(dirs, config, now_ms=0)
    assert tree_state(root) == after_second, f"broker {name}, seed {seed}, damage {what}: a third load changed files"


@settings(max_examples=examples(60), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow,
                                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_damaged_segments_inline(brokers: dict[str, Path], tmp_path: Path, seed: int) -> None:
    load_damaged(brokers, tmp_path, seed, workers=1)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_damaged_segments_with_a_pool(brokers: dict[str, Path], tmp_path: Path, seed: int) -> None:
    """The same through the process pool (Phase 1 in 2 workers, tables through shared memory)."""
    load_damaged(brokers, tmp_path, seed, workers=2)


def test_the_oracle_sees_damage(brokers: dict[str, Path], tmp_path: Path) -> None:
    """The checks are not empty: across the seeds, partitions lose batches to the damage and the bounds bite."""
    cut = dropped = 0
    for seed in range(30):
        rng = random.Random(seed)
        name = rng.choice(sorted(brokers))
        root = tmp_path / f"probe-{seed}"
        damaged_copy(brokers[name], root, rng)
        for p in partitions(root):
            e = expect(p)
            total = sum(len(read_file(d, k)[0]) for k, (_, d) in enumerate(segment_files(p)))
            cut += len(e.valid) < total
            dropped += e.must_keep < len(e.valid)
        shutil.rmtree(root)
    assert cut >= 10
    assert dropped >= 1
    assert os.listdir(tmp_path) == []
