"""pytest-benchmark cases for Phase 1 and Phase 2 (disabled by default: ``scripts/test`` runs each once as a
test; ``scripts/test tests/test_benchmarks.py --benchmark-enable`` times them).  The figures that matter,
with the machine's own ceilings measured beside them, come from perf/engine.py (perf/README.md)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from mploader import LoaderConfig, TopicPartition, load_logs
from mploader.format import records
from mploader.scan import SegmentTask, scan_segment

BATCHES = 20_000


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One segment of ~1 KiB idempotent batches, as written by a producer."""
    one = bytearray(records.build_batch(0, records.simple_records([b"v" * 900]), producer_id=9,
                                        producer_epoch=0, base_sequence=0, partition_leader_epoch=0))
    out = bytearray()
    for i in range(BATCHES):
        struct.pack_into(">q", one, 0, i)  # the base offset is outside the CRC
        out += one
    path = tmp_path_factory.mktemp("bench") / "00000000000000000000.log"
    path.write_bytes(out)
    return path


def bare_walk(data: bytes) -> int:
    mv, p, n = memoryview(data), 0, 0
    up = struct.Struct(">qiibI").unpack_from
    while p < len(data) - 17:
        _, size, _, _, crc = up(data, p)
        assert crc32c(mv[p + 21 : p + size + 12]) == crc
        p += size + 12
        n += 1
    return n


def test_bench_bare_walk(benchmark, segment: Path) -> None:  # type: ignore[no-untyped-def]
    data = segment.read_bytes()
    assert benchmark(bare_walk, data) == BATCHES


def test_bench_phase1_scan(benchmark, segment: Path) -> None:  # type: ignore[no-untyped-def]
    scan = benchmark(scan_segment, SegmentTask(str(segment), 0))
    assert len(scan.batches) == BATCHES and scan.valid_bytes == segment.stat().st_size


def test_bench_unclean_load(benchmark, segment: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    part = tmp_path / "d" / "t-0"
    part.mkdir(parents=True)
    (part / segment.name).write_bytes(segment.read_bytes())

    def load() -> int:  # no marker and no checkpoint: every byte is recovered, each time
        return load_logs([str(tmp_path / "d")], LoaderConfig()).logs[TopicPartition("t", 0)].log_end_offset

    assert benchmark(load) == BATCHES
