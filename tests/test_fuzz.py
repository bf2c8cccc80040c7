"""Hostile input: every parser (tests/fuzz_targets.py) on arbitrary and on mutated bytes raises nothing but the
project's typed errors (:class:`mploader.errors.MploaderError`), stops in time, and allocates memory by the
bytes it is given, never by a length or count field it reads.

* hypothesis, per target: arbitrary bytes, and random mutations of the target's valid inputs (flips, chosen
  integers in length-sized fields, insertions, deletions, zero runs, splices, truncations), each input under a
  time limit;
* every length and count field of the formats set to its largest value in an input of a few bytes: the peak of
  Python's allocations (tracemalloc, numpy's included) stays under 1 MiB, and, in a child process whose address
  space is capped at 256 MiB above what it uses, nothing fails (the codecs' own C and Rust allocations); so do
  control batches of a few KB that decompress to hundreds of MiB (read only as far as Kafka reads them);
* a short run of perf/fuzz.py over every target at once (atheris, coverage-guided, where installed; else the
  seeded mutation loop): no finding.  The long runs and their figures: perf/README.md, "Hostile input: every parser
  fuzzed".
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import logging
import os
import random
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mploader import LoaderConfig, load_logs
from mploader.errors import InvalidRecordError
from mploader.format import checkpoint, compression, legacy, records, snapshot, xerial_snappy
from mploader.format.varint import encode_varint
from mploader.scan import SegmentTask, scan_buffer
from tests import fuzz_targets
from tests.examples import examples
from tests.fuzz_targets import PATH, TARGETS, Target, exercise, mutate, quietly, recrc_legacy, recrc_v2
from tests.kafkadir import V1, B

REPO = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 20  # per input: the slowest target takes milliseconds; a loop that does not end takes forever
SETTINGS = settings(max_examples=examples(60), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Fail the input that runs longer than ``seconds`` (SIGALRM interrupts a Python loop that does not end)."""
    def alarm(signum: int, frame: Any) -> None:
        raise AssertionError(f"an input ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def quiet_loader() -> Iterator[None]:
    """The loader WARNs about every input it recovers; thousands of lines say nothing here."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def only_typed_errors(target: Target, data: bytes) -> None:
    with time_limit(TIME_LIMIT_S):
        exercise(target, data)  # an untyped exception propagates and fails the example


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_the_seeds_are_valid_inputs(name: str) -> None:
    """Each target's seeds parse without error where they should: mutations start from real formats."""
    target = TARGETS[name]
    seeds = target.seeds()
    assert seeds
    for data in seeds:
        assert len(data) <= target.max_size
        target.run(data)  # no error at all, typed or not, except where a seed is meant to fail below
    checks: dict[str, Callable[[bytes], Any]] = {
        "v2_batch": lambda d: records.ensure_valid(d, 0, PATH),
        "legacy_message": lambda d: legacy.ensure_valid(d, 0, PATH),
        "producer_snapshot": lambda d: snapshot.parse_snapshot(d, PATH),
    }
    if name in checks:
        for data in seeds:
            checks[name](data)


@pytest.mark.parametrize("name", sorted(TARGETS))
@SETTINGS
@given(data=st.binary(max_size=600))
def test_arbitrary_bytes_raise_only_typed_errors(name: str, data: bytes) -> None:
    only_typed_errors(TARGETS[name], data)


@pytest.mark.parametrize("name", sorted(TARGETS))
@SETTINGS
@given(rng=st.randoms(use_true_random=False), steps=st.integers(1, 6))
def test_mutated_valid_inputs_raise_only_typed_errors(name: str, rng: random.Random, steps: int) -> None:
    target = TARGETS[name]
    pool = target.seeds()
    data = rng.choice(pool)
    for _ in range(steps):
        data = mutate(rng, data, pool, target.max_size)
    only_typed_errors(target, data)


# ---- length and count fields at their largest -----------------------------------------------------------------

INT32_MAX = 2**31 - 1


def v2_with(payload: bytes, count: int = 1, attributes: int = 0, producer_id: int = -1,
            base_offset: int = 0) -> bytes:
    """A CRC-valid v2 batch with the records section ``payload`` and the given header fields."""
    b = bytearray(B(base_offset)[: records.RECORD_BATCH_OVERHEAD] + payload)
    struct.pack_into(">h", b, records.ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">q", b, 43, producer_id)
    struct.pack_into(">i", b, 57, count)
    return recrc_v2(bytes(b))


def record_prefix(size: int) -> bytes:
    """A record's size varint, then attributes 0 and timestamp and offset deltas 0."""
    return encode_varint(size) + b"\x00" + encode_varint(0) + encode_varint(0)


def lz4_frame_declaring(content_size: int) -> bytes:
    frame = bytearray(compression.compress(compression.LZ4, b"abc"))
    if not frame[4] & 0x08:  # no content size field: add one (FLG bit 3) and recompute the header checksum
        frame[4] |= 0x08
        frame[6:6] = bytes(8)
    frame[6:14] = content_size.to_bytes(8, "little")
    frame[14] = (compression.xxh32(bytes(frame[4:14])) >> 8) & 0xFF
    return bytes(frame)


def zstd_frame_declaring(content_size: int) -> bytes:
    """A zstd frame header with an 8-byte content size, then one raw last block of 3 bytes."""
    return (b"\x28\xb5\x2f\xfd" + bytes([0xC0, 0x00]) + content_size.to_bytes(8, "little")
            + bytes([(3 << 3) | 1, 0, 0]) + b"abc")


def in_scratch(name: str, data: bytes) -> str:
    path = os.path.join(fuzz_targets.scratch(), name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def load_segment(data: bytes) -> None:
    """A whole load (inline) of a partition whose only segment is ``data``."""
    top = tempfile.mkdtemp(prefix="huge-", dir=fuzz_targets.scratch())
    os.makedirs(os.path.join(top, "t-0"))
    with open(os.path.join(top, "t-0", "00000000000000000000.log"), "wb") as f:
        f.write(data)
    load_logs([top], LoaderConfig(segment_scan_workers_per_data_dir=1), 0)


def _scan(data: bytes) -> None:
    scan_buffer(data, SegmentTask(PATH, 0, index_interval=4096), len(data))


def _v2_all(data: bytes) -> None:
    quietly(records.ensure_valid, data, 0, PATH)
    quietly(records.decode_records, data, 0, PATH)
    _scan(data)


def _control(data: bytes) -> None:
    quietly(records.read_end_txn_marker, data, 0, records.read_batch_header(data, 0, PATH), PATH)
    _scan(data)


def _legacy_all(data: bytes) -> None:
    for fn in (legacy.ensure_valid, legacy.inner_offsets, legacy.decode_messages):
        quietly(fn, data, 0, PATH)
    _scan(data)


def _wrapper(inner: bytes) -> bytes:
    return legacy.build_message(5, compression.compress(compression.GZIP, inner), attributes=compression.GZIP)


CONTROL = 0x30  # transactional | control


@functools.cache
def control_bomb(codec: int, mib: int, count: int = 1) -> bytes:
    """A CRC-valid control batch of producer 5 whose records section, compressed, is a COMMIT marker followed by
    ``mib`` MiB of zeros: a few KB that decompress to hundreds of MiB."""
    marker = records.encode_record(records.Record(0, 0, records.CONTROL_KEY.pack(0, 1),
                                                  records.END_TXN_MARKER_VALUE.pack(0, 3)))
    if codec == compression.ZSTD:
        import zstandard

        z = zstandard.ZstdCompressor().compressobj()
        parts = [z.compress(marker), *(z.compress(bytes(1 << 20)) for _ in range(mib)), z.flush()]
    else:
        g = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        parts = [g.compress(marker), *(g.compress(bytes(1 << 20)) for _ in range(mib)), g.flush()]
    return v2_with(b"".join(parts), count, CONTROL | codec, 5)


HUGE: dict[str, Callable[[], Any]] = {
    "v2 batch length INT32_MAX": lambda: _v2_all(B(0)[:8] + struct.pack(">i", INT32_MAX) + B(0)[12:]),
    "v2 batch length INT32_MAX - 12 at the end": lambda: _v2_all(B(0) + B(1)[:8] + struct.pack(">i", INT32_MAX - 12)
                                                                 + B(1)[12:61]),
    "v2 records count INT32_MAX": lambda: _v2_all(v2_with(B(0)[61:], count=INT32_MAX)),
    "v2 records count INT32_MIN": lambda: _v2_all(v2_with(B(0)[61:], count=-(2**31))),
    "record size INT32_MAX": lambda: _v2_all(v2_with(record_prefix(INT32_MAX) + bytes(8))),
    "record key length INT32_MAX": lambda: _v2_all(v2_with(record_prefix(12) + encode_varint(INT32_MAX) + bytes(8))),
    "record value length INT32_MAX": lambda: _v2_all(v2_with(record_prefix(12) + encode_varint(-1)
                                                             + encode_varint(INT32_MAX) + bytes(8))),
    "record header count INT32_MAX": lambda: _v2_all(v2_with(record_prefix(12) + encode_varint(-1) * 2
                                                             + encode_varint(INT32_MAX) + bytes(8))),
    "control records count INT32_MAX": lambda: _control(v2_with(B(0)[61:], INT32_MAX, CONTROL, 5)),
    "control record size INT32_MAX": lambda: _control(v2_with(record_prefix(INT32_MAX) + bytes(8), 1, CONTROL, 5)),
    "control record key length INT32_MAX": lambda: _control(v2_with(record_prefix(12) + encode_varint(INT32_MAX)
                                                                     + bytes(8), 1, CONTROL, 5)),
    "gzip control batch declaring 4 GiB": lambda: _control(v2_with(
        gzip.compress(b"abc", mtime=0)[:-4] + struct.pack("<I", 2**32 - 1), 1, CONTROL | compression.GZIP, 5)),
    "legacy message size INT32_MAX": lambda: _legacy_all(V1(0, b"v", 1)[:8] + struct.pack(">i", INT32_MAX)
                                                          + V1(0, b"v", 1)[12:]),
    "legacy key length INT32_MAX": lambda: _legacy_all(recrc_legacy(V1(0, b"v", 1)[:26] + struct.pack(">i", INT32_MAX)
                                                                    + bytes(8))),
    "legacy value length INT32_MAX": lambda: _legacy_all(recrc_legacy(V1(0, b"v", 1)[:26] + struct.pack(">i", -1)
                                                                      + struct.pack(">i", INT32_MAX) + bytes(8))),
    "wrapper inner size INT32_MAX": lambda: _legacy_all(_wrapper(struct.pack(">qi", 0, INT32_MAX) + bytes(20))),
    "wrapper inner key length INT32_MAX": lambda: _legacy_all(_wrapper(
        V1(0, b"v", 1)[:26] + struct.pack(">i", INT32_MAX) + bytes(8))),
    "xerial chunk length INT32_MAX": lambda: quietly(compression.decompress, compression.SNAPPY,
                                                     xerial_snappy.HEADER + struct.pack(">i", INT32_MAX) + bytes(8)),
    "raw snappy declaring 4 GiB": lambda: quietly(compression.decompress, compression.SNAPPY,
                                                  b"\xff\xff\xff\xff\x0f" + bytes(8)),
    # the fuzzer's find: a 5-byte length whose last byte has its top bit set, which cramjam still reads (~4 GiB)
    "raw snappy whose length does not end in 5 bytes": lambda: quietly(compression.decompress, compression.SNAPPY,
                                                                        bytes.fromhex("fbffffff8e0000")),
    "framed snappy block declaring 1 GiB": lambda: quietly(
        compression.decompress, compression.SNAPPY,
        xerial_snappy.HEADER + struct.pack(">i", 9) + b"\x80\x80\x80\x80\x04" + bytes(4)),
    "lz4 frame declaring 2**62 bytes": lambda: quietly(compression.decompress, compression.LZ4,
                                                       lz4_frame_declaring(2**62)),
    "lz4 frame declaring 1 GiB": lambda: quietly(compression.decompress, compression.LZ4, lz4_frame_declaring(1 << 30)),
    "zstd frame declaring 2**40 bytes": lambda: quietly(compression.decompress, compression.ZSTD,
                                                        zstd_frame_declaring(2**40)),
    "gzip trailer declaring 4 GiB": lambda: quietly(compression.decompress, compression.GZIP,
                                                    gzip.compress(b"abc", mtime=0)[:-4] + b"\xff\xff\xff\xff"),
    "snapshot entry count INT32_MAX": lambda: quietly(snapshot.parse_snapshot,
                                                      struct.pack(">hIi", 1, 0, INT32_MAX) + bytes(46), PATH),
    "offset checkpoint entry count INT32_MAX": lambda: quietly(checkpoint.read_offset_checkpoint, in_scratch(
        "recovery-point-offset-checkpoint", f"0\n{INT32_MAX}\nt 0 1\n".encode())),
    "leader-epoch checkpoint entry count INT32_MAX": lambda: quietly(checkpoint.read_leader_epoch_checkpoint,
                                                                     in_scratch("leader-epoch-checkpoint",
                                                                                f"0\n{INT32_MAX}\n0 0\n".encode())),
    "a zstd control batch of 16 KB decompressing to 512 MiB": lambda: _control(control_bomb(compression.ZSTD, 512)),
    "a gzip control batch of 64 KB decompressing to 64 MiB": lambda: _control(control_bomb(compression.GZIP, 64)),
    "a load of a segment whose batch declares INT32_MAX bytes": lambda: quietly(
        load_segment, B(0) + B(1)[:8] + struct.pack(">i", INT32_MAX) + B(1)[12:]),
    "a load of a control batch whose record count is INT32_MAX": lambda: quietly(
        load_segment, B(0) + v2_with(B(0)[61:], INT32_MAX, CONTROL, 5, base_offset=1)),
}


PEAK = {case: 4 << 20 for case in HUGE if "control batch of" in case}  # the head of a control batch: 1 MiB


@pytest.mark.parametrize("case", sorted(HUGE))
def test_a_huge_length_field_allocates_little(case: str) -> None:
    HUGE[case]()  # warm: imports, caches, the scratch directory
    tracemalloc.start()
    try:
        with time_limit(TIME_LIMIT_S):
            HUGE[case]()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK.get(case, 1 << 20), f"{case}: {peak:,} bytes allocated at the peak"


@pytest.mark.parametrize("codec", [compression.ZSTD, compression.GZIP])
def test_a_compressed_control_batch_is_read_as_far_as_kafka_reads_it(codec: int) -> None:
    """Kafka's RecordIterator reads a control batch's first record and, when the count is 1, one byte more: a
    marker followed by hundreds of MiB of zeros is a valid COMMIT when the batch says it holds 2 records, and
    "records still remaining" (recovery stops after it) when it says 1; read so, without the zeros."""
    mib = 512 if codec == compression.ZSTD else 64
    two = control_bomb(codec, mib, count=2)
    marker = records.read_end_txn_marker(two, 0, records.read_batch_header(two, 0, PATH), PATH)
    assert marker is not None and marker.is_commit and marker.coordinator_epoch == 3
    one = control_bomb(codec, mib)
    with pytest.raises(InvalidRecordError, match="records still remaining"):
        records.read_end_txn_marker(one, 0, records.read_batch_header(one, 0, PATH), PATH)
    scan = scan_buffer(one, SegmentTask(PATH, 0), len(one))
    assert (scan.stop.value, scan.valid_bytes) == ("invalid control record", len(one))


def run_huge_cases_under_a_memory_cap() -> dict[str, str]:
    """Every HUGE case in this process with its address space capped at 256 MiB above what it maps now: an
    allocation by a length field (in Python, numpy, or a codec's C or Rust code) fails here."""
    for fn in HUGE.values():  # imports and caches first
        fn()
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (mapped + (256 << 20), resource.RLIM_INFINITY))
    outcome = {}
    for case, fn in HUGE.items():
        try:
            fn()
            outcome[case] = "ok"
        except BaseException as e:  # noqa: BLE001 - reported to the test in the parent
            outcome[case] = f"{type(e).__name__}: {e}"
    return outcome


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux's /proc")
def test_huge_length_fields_under_an_address_space_cap() -> None:
    code = ("import json, logging; logging.disable(logging.CRITICAL); import tests.test_fuzz as t; "
            "print(json.dumps(t.run_huge_cases_under_a_memory_cap()))")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(outcome) == set(HUGE)
    assert {case: what for case, what in outcome.items() if what != "ok"} == {}


# ---- the fuzzer itself --------------------------------------------------------------------------------------

def test_a_short_fuzz_run_finds_nothing(tmp_path: Path) -> None:
    """perf/fuzz.py over every target at once for a few seconds (atheris where installed, else the seeded
    mutation loop): thousands of inputs, no finding."""
    proc = subprocess.run([sys.executable, str(REPO / "perf" / "fuzz.py"), "--all-in-one", "--seconds", "6",
                           "--timeout", str(TIME_LIMIT_S), "--artifacts", str(tmp_path), "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    result = json.loads(proc.stdout)
    [run] = result["targets"]
    assert run["findings"] == [], run["findings"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run["executions"] > 1000
    assert os.listdir(tmp_path) == []


def test_the_random_engine_reports_an_untyped_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The coverage-blind engine keeps the input of a finding and tells what it was (a target that fails on
    purpose, run in this process)."""
    sys.path.insert(0, str(REPO))
    try:
        import perf.fuzz as driver
    finally:
        sys.path.remove(str(REPO))

    def broken(data: bytes) -> None:
        if len(data) > 3:
            raise KeyError("boom")

    monkeypatch.setitem(TARGETS, "broken", Target("broken", broken, lambda: [b"ab"]))
    args = driver.argparse.Namespace(child="broken", seed=3, artifacts=str(tmp_path), timeout=5, seconds=1,
                                     rss_limit_mb=1 << 20)
    figures = driver._child_random(args, fuzz_targets)
    assert figures["executions"] > 10
    [finding] = figures["findings"]
    assert finding["kind"] == "crash" and "KeyError" in finding["what"]
    assert len(Path(finding["artifact"]).read_bytes()) > 3


def test_snappy_blocks_at_the_largest_real_ratio_still_decompress() -> None:
    """The bound on a raw snappy block's declared length (mploader.format.xerial_snappy.MAX_EXPANSION) refuses
    only what no encoder can write: the most compressible input (zeros, 21.3 bytes per byte) passes, raw and
    framed; one byte more than the bound allows is refused before anything is allocated."""
    import cramjam

    for n in (1, 64, 32768, 1 << 20):
        raw = bytes(cramjam.snappy.compress_raw(bytes(n)))
        assert compression.decompress(compression.SNAPPY, raw) == bytes(n)
        assert compression.decompress(compression.SNAPPY, xerial_snappy.compress(bytes(n))) == bytes(n)
    block = bytes([0xFF, 0x7F]) + bytes(724)  # declares 16383 bytes in 726: more than 22 * 726
    with pytest.raises(compression.CompressedDataError, match="declares 16383 bytes"):
        compression.decompress(compression.SNAPPY, block)
