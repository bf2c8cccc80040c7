"""Every parser of mploader as a fuzz target: a function of arbitrary bytes that may only return or raise one of
the project's typed errors (:class:`mploader.errors.MploaderError`).

One table, three users: tests/test_fuzz.py (hypothesis, and a short run of the fuzzer), perf/fuzz.py (the long
runs: atheris, coverage-guided, or the coverage-blind seeded mutation loop below where atheris is not installed).

A target gets the bytes as they would lie on disk, and a second time "fixed up" where a checksum or a size field
would stop the parser before its interesting part (a v2 batch's CRC-32C and length, a legacy message's CRC-32, a
snapshot's CRC): a random mutation almost never keeps a CRC right, so without that the record, control-record,
wrapper and snapshot-entry parsers behind the checks would hardly be reached.  Targets that need files (the
checkpoints, the audit, a whole partition's load) write them into one scratch directory per process.

``mutate`` is the seeded random mutation of the coverage-blind loop (flips, byte sets, chosen integers in
length-sized fields, insertions, deletions, zero runs, duplications, splices of another seed, truncations).
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import os
import random
import shutil
import struct
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c

import mploader.scan.compiled as compiled_walk
from mploader import LoaderConfig, load_logs
from mploader.errors import MploaderError
from mploader.format import checkpoint, compression, index, legacy, log, names, records, snapshot, xerial_snappy
from mploader.scan import SegmentScan, SegmentTask, scan_buffer
from mploader.scan.audit import AuditTask, audit_segment
from tests.kafkadir import T0, V0, V1, B, M, N, P, T

PATH = "/fuzz/t-0/00000000000000000000.log"
ALLOWED: tuple[type[BaseException], ...] = (MploaderError,)


def quietly(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or None when it raised one of the project's typed errors (anything else propagates)."""
    try:
        return fn(*args)
    except ALLOWED:
        return None


# ---- fix-ups: make the checks in front of a parser pass ---------------------------------------------------

def recrc_v2(data: bytes) -> bytes:
    """``data`` as one v2 batch whose length field and CRC-32C are right (unchanged when under 61 bytes)."""
    if len(data) < records.RECORD_BATCH_OVERHEAD:
        return data
    b = bytearray(data)
    struct.pack_into(">i", b, 8, len(b) - records.LOG_OVERHEAD)
    struct.pack_into(">I", b, records.CRC_OFFSET, crc32c(bytes(b[records.ATTRIBUTES_OFFSET:])))
    return bytes(b)


def recrc_legacy(data: bytes) -> bytes:
    """``data`` as one legacy message whose size field and CRC-32 are right (unchanged when under 26 bytes)."""
    if len(data) < 26:
        return data
    b = bytearray(data)
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">I", b, 12, zlib.crc32(bytes(b[16:])))
    return bytes(b)


def recrc_snapshot(data: bytes) -> bytes:
    if len(data) < snapshot.HEADER.size:
        return data
    b = bytearray(data)
    struct.pack_into(">I", b, 2, crc32c(bytes(b[6:])))
    return bytes(b)


# ---- the scratch directory of the file targets -------------------------------------------------------------

_scratch: str | None = None


def scratch() -> str:
    """A directory removed at exit; on a tmpfs where there is one (ext4 flushes a rewritten file at close).  Inside
    ``FUZZ_SCRATCH`` when that is set: libFuzzer ends a process without running Python's exit handlers, so the
    fuzzer's parent (perf/fuzz.py) gives its children a directory it removes itself."""
    global _scratch
    if _scratch is None:
        parent = os.environ.get("FUZZ_SCRATCH") or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
        _scratch = tempfile.mkdtemp(prefix="fuzz-scratch-", dir=parent)
        atexit.register(shutil.rmtree, _scratch, True)
    return _scratch


def _file(name: str, data: bytes) -> str:
    path = os.path.join(scratch(), name)
    with open(path, "wb") as f:
        f.write(data)
    return path


# ---- the targets -------------------------------------------------------------------------------------------

def v2_batch(data: bytes) -> None:
    for buf in (data, recrc_v2(data)):
        header = quietly(records.read_batch_header, buf, 0, PATH)
        quietly(records.ensure_valid, buf, 0, PATH)
        quietly(records.decode_records, buf, 0, PATH)
        if header is not None and header.is_control:
            quietly(records.read_end_txn_marker, buf, 0, header, PATH)


_CONTROL_HEADER = records.build_end_txn_marker_batch(0, 5, 0, True)[: records.RECORD_BATCH_OVERHEAD]


def control_record(data: bytes) -> None:
    """``data[2:]`` as the records section of a CRC-valid control batch of producer 5; ``data[0]`` picks the
    codec (its low 3 bits, unknown ids 5-7 included), ``data[1]`` the record count (-1..2); the walk reads it
    too (its own marker fast path, then the general reader)."""
    if len(data) < 2:
        return
    b = bytearray(_CONTROL_HEADER + data[2:])
    struct.pack_into(">h", b, records.ATTRIBUTES_OFFSET, 0x30 | (data[0] & 0x7))
    struct.pack_into(">i", b, 57, data[1] % 4 - 1)
    batch = recrc_v2(bytes(b))
    header = records.read_batch_header(batch, 0, PATH)
    quietly(records.read_end_txn_marker, batch, 0, header, PATH)
    scan_buffer(batch, SegmentTask(PATH, 0), len(batch))


def legacy_message(data: bytes) -> None:
    for buf in (data, recrc_legacy(data)):
        quietly(legacy.read_entry, buf, 0, PATH)
        quietly(legacy.ensure_valid, buf, 0, PATH)
        quietly(legacy.inner_offsets, buf, 0, PATH)
        quietly(legacy.decode_messages, buf, 0, PATH)


_WRAPPER_CODECS = (compression.GZIP, compression.SNAPPY, compression.LZ4)


def legacy_wrapper(data: bytes) -> None:
    """A CRC-valid compressed wrapper: ``data[0]`` picks the magic (0/1) and codec; its value is ``data[1:]``
    compressed (the inner message set is fuzzed) and, a second time, ``data[1:]`` itself (the codec is)."""
    if not data:
        return
    magic, codec = data[0] & 1, _WRAPPER_CODECS[(data[0] >> 1) % len(_WRAPPER_CODECS)]
    for value in (quietly(compression.compress, codec, data[1:]), data[1:]):
        if value is None:
            continue
        wrapper = legacy.build_message(1 << (data[0] >> 3), value, magic=magic, timestamp=7, attributes=codec)
        quietly(legacy.inner_offsets, wrapper, 0, PATH)
        quietly(legacy.decode_messages, wrapper, 0, PATH)


def decompress(data: bytes) -> None:
    """``data[1:]`` decompressed with codec ``data[0] % 8`` (ids 5-7 unknown), and a magic-0 LZ4 frame fixed."""
    if not data:
        return
    quietly(compression.decompress, data[0] % 8, data[1:])
    compression.lz4_frame_of_magic_0(data[1:])


def snappy_framing(data: bytes) -> None:
    """snappy-java's stream framing (mploader.format.xerial_snappy) through the codec table."""
    quietly(compression.decompress, compression.SNAPPY, data)


def log_framing(data: bytes) -> None:
    try:
        for pos, size, magic in log.iter_entries(data, 0, len(data), PATH):
            log.summarize(data, pos, size, magic)
    except ALLOWED:
        pass


def _walk_task(data: bytes) -> tuple[bytes, SegmentTask]:
    flags = data[0] if data else 0
    body = data[2:]
    start = (data[1] * len(body)) // 256 if len(data) > 1 and flags & 0x8 else 0
    return body, SegmentTask(PATH, 0, start, check_crc=not flags & 1, parse_markers=not flags & 2,
                             index_interval=(None, 0, 128, 4096)[(flags >> 2) & 3] if not flags & 0x10 else 4096)


def _scan_digest(outcome: SegmentScan) -> Any:
    fields = dataclasses.asdict(outcome) | {"batches": outcome.batches.tobytes(), "draft": None}
    draft = outcome.draft
    if draft is not None:
        fields["draft"] = [draft.interval] + [a.tobytes() for a in (draft.index, draft.producer_rows,
                                                                      draft.epoch_rows)]
    return fields


BUILT_WALK = compiled_walk.load(environ={})  # the extension, checked, whatever MPLOADER_PURE_PYTHON says


def walk_differential(data: bytes) -> None:
    """The walk on ``data[2:]`` (task flags from ``data[:2]``): the Python walk and, where it is built, the
    compiled one (mploader/scan/_walk.c) must give the same scan."""
    body, task = _walk_task(data)
    reference = scan_buffer(body, task, len(body), None)
    if BUILT_WALK is not None:
        compiled = scan_buffer(body, task, len(body), BUILT_WALK)
        assert _scan_digest(compiled) == _scan_digest(reference), "the compiled walk differs from the Python one"


def index_files(data: bytes) -> None:
    """``data[1:]`` as an .index, a .timeindex (Kafka's sanity checks, the written entries of a preallocated
    file) and a .txnindex (its reader and sanity check), with base offset ``data[0]``."""
    if not data:
        return
    base, body = data[0], data[1:]
    for dtype, check in ((index.OFFSET_ENTRY, index.offset_index_problem), (index.TIME_ENTRY,
                                                                              index.time_index_problem)):
        entries = index.entries_from_bytes(body, dtype)
        check(PATH, base, len(body), entries)
        index.written_entries(entries)
    entries = quietly(index.parse_txn_index, body, PATH, base)
    if entries is not None:
        index.txn_index_problem(PATH, base, entries)
    quietly(index.txn_index_corrupt, body, PATH, base)


def audit(data: bytes) -> None:
    """verify's audit of one segment (mploader.scan.audit.audit_segment): ``data`` cut into the .log, .index,
    .timeindex and .txnindex by three 2-byte lengths at its start (0xFFFF: the file is missing)."""
    if len(data) < 6:
        return
    lengths = struct.unpack_from(">HHH", data)
    rest = data[6:]
    base = 100
    part = os.path.join(scratch(), "audit-0")
    os.makedirs(part, exist_ok=True)
    for suffix, n in zip((".index", ".timeindex", ".txnindex"), lengths):
        path = os.path.join(part, names.segment_file_name(base, suffix))
        if n == 0xFFFF:
            if os.path.exists(path):
                os.remove(path)
            continue
        with open(path, "wb") as f:
            f.write(rest[:n])
        rest = rest[n:]
    log_path = os.path.join(part, names.segment_file_name(base, ".log"))
    with open(log_path, "wb") as f:
        f.write(rest)
    audit_segment(AuditTask(log_path, base))


_TEXT_FILES: tuple[tuple[str, Callable[[str], Any]], ...] = (
    ("recovery-point-offset-checkpoint", checkpoint.read_offset_checkpoint),
    ("leader-epoch-checkpoint", checkpoint.read_leader_epoch_checkpoint),
    ("partition.metadata", checkpoint.read_partition_metadata),
    (".kafka_cleanshutdown", checkpoint.read_broker_epoch),
)


def text_file(data: bytes) -> None:
    """``data[1:]`` as the text file picked by ``data[0]``: an offset checkpoint, a leader-epoch checkpoint,
    ``partition.metadata`` or the clean-shutdown marker."""
    if not data:
        return
    name, reader = _TEXT_FILES[data[0] % len(_TEXT_FILES)]
    quietly(reader, _file(name, data[1:]))


def producer_snapshot(data: bytes) -> None:
    for buf in (data, recrc_snapshot(data)):
        quietly(snapshot.parse_snapshot, buf, PATH)


def file_names(data: bytes) -> None:
    """A file or directory name as Python lists it (undecodable bytes as surrogates)."""
    name = data.decode("utf-8", "surrogateescape")
    quietly(names.offset_from_file_name, name)
    quietly(names.parse_partition_dir, name)
    names.is_log_file(name)
    names.is_index_file(name)


_LOADS = itertools.count()


def partition_load(data: bytes) -> None:
    """A whole load (inline, unclean) of a partition whose only segment is ``data[1:]``, with an index of
    that segment when ``data[0]`` is odd: the kept ``.log`` must be a prefix of the bytes given."""
    if not data:
        return
    top = os.path.join(scratch(), f"load-{next(_LOADS)}")
    part = os.path.join(top, "t-0")
    os.makedirs(part)
    try:
        log_path = os.path.join(part, names.segment_file_name(0, ".log"))
        with open(log_path, "wb") as f:
            f.write(data[1:])
        if data[0] & 1:
            with open(os.path.join(part, names.segment_file_name(0, ".index")), "wb"):
                pass
        if quietly(load_logs, [top], LoaderConfig(segment_scan_workers_per_data_dir=1), 0) is None:
            return
        if os.path.exists(log_path):
            with open(log_path, "rb") as f:
                kept = f.read()
            assert data[1:].startswith(kept), "the load kept bytes that were not in the segment"
    finally:
        shutil.rmtree(top, ignore_errors=True)


# ---- seeds -------------------------------------------------------------------------------------------------

def _seeds_v2() -> list[bytes]:
    gz = records.build_batch(9, records.simple_records([b"a" * 30, b"b"]), codec=compression.GZIP)
    hdr = records.build_batch(3, [records.Record(0, 5, b"k", b"v", (("h", b"x"), ("n", None)))])
    return [B(0), P(1, 7, 3), T(2, 3, 8, 0), N(4, 5), M(5, 8, True), M(6, 8, False, coord=3), gz, hdr]


def _seeds_legacy() -> list[bytes]:
    out = [V0(0, b"value"), V1(1, b"value", 5)]
    for codec in _WRAPPER_CODECS:
        for magic in (0, 1):
            if compression.CODEC_NAMES[codec] in compression.available_codecs():
                out.append(legacy.build_wrapper([(10, b"a", 1), (11, None, 2), (12, b"ccc", 3)], codec=codec,
                                                magic=magic))
    return out


def _seeds_control() -> list[bytes]:
    out = []
    for codec in (compression.NONE, compression.GZIP, compression.SNAPPY):
        batch = records.build_end_txn_marker_batch(0, 5, 0, codec == compression.GZIP, codec=codec,
                                                   coordinator_epoch=codec)
        out.append(bytes([codec, 2]) + batch[records.RECORD_BATCH_OVERHEAD:])
    return out


def _seeds_codecs() -> list[bytes]:
    payload = b"".join(B(o) for o in range(4)) + bytes(300)
    out = []
    for codec in compression.CODEC_NAMES:
        if compression.CODEC_NAMES[codec] in compression.available_codecs():
            out.append(bytes([codec]) + compression.compress(codec, payload))
    return out


def _seeds_snappy() -> list[bytes]:
    big = bytes(range(256)) * 300  # two chunks of 32 KiB
    one = xerial_snappy.compress(b"hello " * 20)
    return [one, xerial_snappy.compress(big), one + one, xerial_snappy.HEADER]


def _seeds_log() -> list[bytes]:
    return [b"".join(B(o) for o in range(3)), B(0) + M(1, 4, True) + P(2, 4, 0), V0(0, b"x") + V1(1, b"y", 3)]


def _seeds_walk() -> list[bytes]:
    return [bytes([flags, 0]) + s for flags in (0, 1, 0x10) for s in _seeds_log()]


def _seeds_index() -> list[bytes]:
    oi = index.offset_index_bytes(0, [1, 5, 9], [0, 72, 144])
    ti = index.time_index_bytes(0, [10, 20, 30], [1, 5, 9])
    txn = index.txn_index_bytes([(5, 0, 9, 9), (6, 3, 12, 12)])
    return [b"\x00" + oi, b"\x00" + oi + bytes(16), b"\x01" + ti, b"\x00" + txn]


def _seeds_audit() -> list[bytes]:
    logb = b"".join(B(100 + o) for o in range(3)) + M(103, 5, False)
    oi = index.offset_index_bytes(100, [100, 102], [0, 144])
    ti = index.time_index_bytes(100, [T0 + 100, T0 + 102], [100, 102])
    txn = index.txn_index_bytes([(5, 103, 103, 103)])
    return [struct.pack(">HHH", len(oi), len(ti), len(txn)) + oi + ti + txn + logb,
            struct.pack(">HHH", 0xFFFF, 0xFFFF, 0xFFFF) + logb]


def _seeds_text() -> list[bytes]:
    return [b"\x00" + b"0\n2\nt 0 5\nu 3 9\n", b"\x01" + b"0\n2\n0 0\n3 150\n",
            b"\x02" + checkpoint.partition_metadata_bytes(bytes(range(1, 17))),
            b"\x03" + checkpoint.clean_shutdown_marker_bytes(7)]


def _seeds_snapshot() -> list[bytes]:
    entry = snapshot.ProducerSnapshotEntry(5, 1, 9, 100, 3, 1000, -1, -1)
    return [snapshot.snapshot_bytes([]), snapshot.snapshot_bytes([entry, dataclasses.replace(entry, producer_id=6)])]


def _seeds_names() -> list[bytes]:
    return [b"00000000000000000042.log", b"00000000000000000042.index.swap", b"topic-3",
            b"t-1.0123456789abcdef0123456789abcdef-delete", b"a-1.b-future", b"__cluster_metadata-0"]


def _seeds_load() -> list[bytes]:
    segment = b"".join(B(o) for o in range(3)) + P(3, 9, 0) + T(4, 2, 10, 0) + M(6, 10, True) + B(7)
    return [b"\x00" + segment, b"\x01" + segment, b"\x00" + segment[:-5]]


@dataclass(frozen=True, slots=True)
class Target:
    """One fuzz target: ``run(data)`` may only return or raise ``ALLOWED``; ``seeds()`` are valid inputs."""

    name: str
    run: Callable[[bytes], None]
    seeds: Callable[[], list[bytes]]
    max_size: int = 4096  # the inputs worth trying are about this long


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("v2_batch", v2_batch, _seeds_v2),
    Target("control_record", control_record, _seeds_control, 512),
    Target("legacy_message", legacy_message, _seeds_legacy),
    Target("legacy_wrapper", legacy_wrapper, lambda: [b"\x03" + V1(0, b"a", 1) + V1(1, b"b", 2)]),
    Target("decompress", decompress, _seeds_codecs),
    Target("snappy_framing", snappy_framing, _seeds_snappy, 70_000),
    Target("log_framing", log_framing, _seeds_log),
    Target("walk", walk_differential, _seeds_walk),
    Target("index_files", index_files, _seeds_index),
    Target("audit", audit, _seeds_audit),
    Target("text_files", text_file, _seeds_text, 512),
    Target("producer_snapshot", producer_snapshot, _seeds_snapshot, 1024),
    Target("file_names", file_names, _seeds_names, 300),
    Target("partition_load", partition_load, _seeds_load),
)}


# ---- the coverage-blind mutation -----------------------------------------------------------------------------

INTERESTING = (0, 1, -1, 13, 14, 48, 49, 61, 0x7F, 0x80, 0xFF, 2**15 - 1, -(2**15), 2**31 - 13, 2**31 - 1,
               -(2**31), 2**32 - 1, 2**63 - 1, -(2**63))


def mutate(rng: random.Random, data: bytes, pool: list[bytes], max_size: int) -> bytes:
    """One to four random edits of ``data`` (``pool``: other inputs to splice from)."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(10)
        at = rng.randrange(len(b) + 1)
        if op == 0 and b:  # flip a bit
            b[min(at, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and b:  # set a byte
            b[min(at, len(b) - 1)] = rng.randrange(256)
        elif op == 2:  # a chosen integer, big-endian, as a length, count or offset field would hold it
            width = rng.choice((1, 2, 4, 8))
            value = rng.choice(INTERESTING) + rng.randint(-2, 2)
            b[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "big")
        elif op == 3:  # insert random bytes
            b[at:at] = rng.randbytes(rng.randint(1, 16))
        elif op == 4:  # delete a range
            del b[at : at + rng.randint(1, 64)]
        elif op == 5:  # a run of zeros (a preallocated tail, a hole)
            n = rng.randint(1, 256)
            b[at : at + n] = bytes(len(b[at : at + n]))
        elif op == 6 and b:  # duplicate a range
            n = rng.randint(1, 128)
            b[at:at] = b[max(0, at - n) : at]
        elif op == 7 and pool:  # splice in a piece of another input
            other = rng.choice(pool)
            i = rng.randrange(len(other) + 1)
            b[at:] = other[i:] if rng.random() < 0.5 else other[i:] + b[at:]
        elif op == 8:  # truncate
            del b[at:]
        elif op == 9:  # random bytes at the end
            b += rng.randbytes(rng.randint(1, 64))
    return bytes(b[:max_size])


def exercise(target: Target, data: bytes) -> None:
    """Run ``target`` on ``data``; anything but a return or a typed error propagates (a finding)."""
    try:
        target.run(data)
    except ALLOWED:
        pass


__all__ = ["ALLOWED", "PATH", "TARGETS", "Target", "exercise", "mutate"]
