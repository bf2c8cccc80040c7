"""The compiled walk (mploader/scan/_walk.c) against the Python walk, its reference.

``scan_buffer``'s fast loop over plain v2 batches has a compiled twin (``mploader.scan._walk.walk_v2``), which
also takes the control batches the general path accepts without a record parser (no producer id, or a
canonical COMMIT/ABORT record); ``scan_buffer``'s ``compiled`` argument picks one (``mploader.scan.compiled.WALK``
unless told).  Both walks run here in one
process on the same bytes and must give the same whole ``SegmentScan`` (every stop reason, position,
batch-table row and field, the recovery draft, the fatal message, or the same exception), over:

* valid sequences of the test builders' batches (B, P, T, N, M, V0, V1, compressed, large, control
  batches without producer id or with records Kafka rejects, markers of any timestamp delta and time
  type), from byte 0 and from other starts, to the end or to a cut (hypothesis, 1,000 examples);
* the same with random mutations: bit flips, byte sets, truncations, insertions, zeroed ranges, and
  chosen values in a batch's size, magic, attributes and CRC fields (1,500 examples; neither walk may raise
  anything but a typed error on them; tests/test_fuzz.py's coverage-guided runs fuzz both too), and every stop of
  the fast loop written out (crafted entries whose CRC-32C matches, so that only the field under test
  can stop the loop);
* the generator's brokers with every ``.log`` fault, read as bytes and through ``scan_segment``'s mmap;
* the real Kafka corpus (skipped where absent);

with CRC checks on and off, and with the compiled walk's CRC-32C on the CPU's instruction and on the
portable tables.  The CRC itself is checked against the crc32c package (and, built alone, against a
bit-by-bit CRC, in an AArch64 build under qemu where a cross compiler is installed);
``MPLOADER_PURE_PYTHON=1`` selects the Python walk (in a fresh interpreter), a build of another ``_walk.c`` is refused,
and the walk's own test files (test_scan.py, test_walk_size_field.py) pass with the walk this process does not use.
The extension is loaded here whatever ``MPLOADER_PURE_PYTHON`` says, so that both walks are compared in either pass of
scripts/test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import mmap
import os
import platform
import random
import shutil
import struct
import subprocess
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings, strategies as st

import mploader.scan.compiled as compiled_walk
import mploader.scan.draft as draft
import mploader.scan.walk as walk
from mploader.errors import MploaderError
from mploader.format import compression, records
from mploader.generate import FAULT_KINDS, GeneratorConfig, generate
from mploader.scan import SegmentScan, SegmentTask, scan_buffer, scan_segment
from mploader.scan.table import BATCH_TABLE, BatchColumns
from tests.examples import examples
from tests.kafkadir import T0, V0, V1, B, M, N, P, T

compiled: Any = compiled_walk.load(environ={})  # the extension, checked, even where MPLOADER_PURE_PYTHON=1
needs_compiled = pytest.mark.skipif(compiled is None, reason="mploader.scan._walk is not built (no C compiler)")
REPO = Path(__file__).resolve().parents[1]
PATH = "/data/t-0/00000000000000000000.log"


# ---- the two walks ----------------------------------------------------------------------------------

class Counting:
    """The compiled walk, counting walk_v2 calls, so a test can see the compiled loop ran."""

    def __init__(self) -> None:
        self.calls = 0

    def walk_v2(self, buf: Any, start: int, end: int, check: bool, markers: bool) -> tuple[int, bytearray]:
        self.calls += 1
        result: tuple[int, bytearray] = compiled.walk_v2(buf, start, end, check, markers)
        return result

    def index_draft(self, table: np.ndarray, base_offset: int, interval: int) -> bytearray:
        rows: bytearray = compiled.index_draft(table, base_offset, interval)
        return rows


@contextlib.contextmanager
def portable(portable_crc: bool) -> Iterator[None]:
    """Within the block, the compiled walk's CRC-32C is its portable tables' (or the CPU's instruction)."""
    was_portable = compiled.use_portable_crc(portable_crc)
    try:
        yield
    finally:
        compiled.use_portable_crc(was_portable)


def digest(outcome: SegmentScan | BaseException) -> Any:
    """Everything a scan says (the draft's timing aside), or the exception's type and message."""
    if isinstance(outcome, BaseException):
        return type(outcome), str(outcome)
    d = {f.name: getattr(outcome, f.name) for f in dataclasses.fields(outcome)}
    table = d.pop("batches")
    d["batches"] = (table.dtype.descr, table.shape, table.tobytes())
    draft = d.pop("draft")
    if draft is not None:
        d["draft"] = (draft.interval, *((a.dtype.descr, a.tobytes())
                                        for a in (draft.index, draft.producer_rows, draft.epoch_rows)))
    return d


def run(fn: Any, *args: Any) -> SegmentScan | BaseException:
    try:
        result: SegmentScan = fn(*args)
        return result
    except Exception as e:  # noqa: BLE001 - the walks must fail alike, so the failure is the outcome
        return e


def both(fn: Any, *args: Any, portable_crc: bool = False) -> tuple[SegmentScan | BaseException, int]:
    """The outcome of ``fn(*args)`` with the Python walk, checked equal to the compiled walk's; returns it
    with the number of compiled-loop calls."""
    reference = run(fn, *args, None)
    fast = Counting()
    with portable(portable_crc):
        got = run(fn, *args, fast)
    assert digest(got) == digest(reference)
    if currently_in_test_context():  # what the examples covered (--hypothesis-show-statistics)
        event(f"outcome: {reference.stop.value if isinstance(reference, SegmentScan) else type(reference).__name__}"
              + (", fatal" if isinstance(reference, SegmentScan) and reference.fatal else ""))
        event(f"compiled walk calls: {min(fast.calls, 3)}{'+' if fast.calls > 3 else ''}")
    return reference, fast.calls


def both_buffer(data: bytes | memoryview | mmap.mmap, task: SegmentTask, end: int,
                portable_crc: bool = False) -> tuple[SegmentScan | BaseException, int]:
    return both(scan_buffer, data, task, end, portable_crc=portable_crc)


# ---- batches ----------------------------------------------------------------------------------------

def control_without_producer(o: int) -> bytes:
    """A control batch with no producer id: the general path keeps it without parsing a marker."""
    return records.build_batch(o, [records.Record(0, 0, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 3))],
                               control=True)


def odd_control_batch(o: int, key: bytes | None, pid: int) -> bytes:
    """A control batch with a producer id whose record Kafka rejects: a key too short or of a negative
    version (InvalidRecordException: recovery stops after it), a null key or an unknown type (start-up fails)."""
    return records.build_batch(o, [records.Record(0, 0, key, struct.pack(">hi", 0, 1))], control=True,
                               transactional=True, producer_id=pid, producer_epoch=0)


def any_marker(o: int, pid: int, commit: bool, coord: int, ts: int, ts_delta: int, log_append: bool) -> bytes:
    """A COMMIT/ABORT marker with any record timestamp delta (1- or 2-byte varint) and time type, its base
    timestamp up to Long.MAX_VALUE (Kafka's long addition wraps)."""
    ctype = records.ControlRecordType.COMMIT if commit else records.ControlRecordType.ABORT
    rec = records.Record(0, ts_delta, struct.pack(">hh", 0, int(ctype)), struct.pack(">hi", 0, coord))
    return records.build_batch(o, [rec], control=True, transactional=True, producer_id=pid, producer_epoch=0,
                               base_timestamp=ts, max_timestamp=ts, log_append_time=log_append)


def gzip_batch(o: int, n: int) -> bytes:
    recs = [records.Record(i, 0, None, b"z" * (i + 1)) for i in range(n)]
    return records.build_batch(o, recs, codec=compression.GZIP, base_timestamp=o, producer_id=5, producer_epoch=0,
                               base_sequence=o % 1000)


def odd_header_batch(o: int, ple: int, ts: int, log_append: bool) -> bytes:
    """A plain batch with unusual header values: negative leader epoch, log-append time, odd timestamps."""
    return records.build_batch(o, [records.Record(0, 0, b"k", b"v" * 40)], partition_leader_epoch=ple,
                               base_timestamp=ts, max_timestamp=ts + 3, log_append_time=log_append)


offsets = st.integers(0, 2**40)
pids = st.integers(0, 2**40)
entry = st.one_of(
    st.builds(lambda o, v: B(o, value=v), offsets, st.binary(max_size=2500)),
    st.builds(lambda o, v: B(o, value=bytes(v)), offsets, st.integers(3 * 65536 - 70, 3 * 65536 + 700)),  # long CRC
    st.builds(P, offsets, pids, st.integers(0, 2**31 - 1)),
    st.builds(T, offsets, st.integers(1, 5), pids, st.integers(0, 1000)),
    st.builds(N, offsets, st.integers(1, 8)),
    st.builds(M, offsets, pids, st.booleans(), st.integers(-5, 2**31 - 1)),
    st.builds(V0, offsets, st.binary(max_size=300)),
    st.builds(V1, offsets, st.binary(max_size=300), st.integers(-1, 2**42)),
    st.builds(control_without_producer, offsets),
    st.builds(odd_control_batch, offsets, st.sampled_from([None, b"ab", struct.pack(">hh", -1, 1),
                                                           struct.pack(">hh", 0, 5)]), pids),
    st.builds(any_marker, offsets, st.integers(-1, 2**40), st.booleans(), st.integers(-(2**31), 2**31 - 1),
              st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(2**63 - 70, 2**63 - 1)),
              st.integers(-100, 100), st.booleans()),
    st.builds(gzip_batch, offsets, st.integers(1, 6)),
    st.builds(odd_header_batch, offsets, st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**62),
              st.booleans()),
)
# mostly plain v2 batches, the fast loop's input, with the rest mixed in
entries = st.lists(st.one_of(st.builds(lambda o: B(o), offsets), entry), max_size=25)


def entry_starts(parts: list[bytes]) -> list[int]:
    starts, p = [], 0
    for part in parts:
        starts.append(p)
        p += len(part)
    return starts


@st.composite
def tasks(draw: st.DrawFn, data: bytes, starts: list[int]) -> tuple[SegmentTask, int]:
    """A scan of ``data``: from byte 0, an entry or any byte; to the end, a cut, or (rarely) past it."""
    n = len(data)
    start = draw(st.one_of(st.just(0), st.sampled_from(starts or [0]), st.integers(0, n + 30)))
    end = draw(st.one_of(st.just(n), st.integers(min(start, n), n), st.integers(0, n)))
    if draw(st.sampled_from([False] * 19 + [True])):  # past the buffer: the Python loop's, whichever walk is given
        end = n + draw(st.integers(1, 40))
    return SegmentTask(PATH, 1000, start, end, parse_markers=draw(st.booleans()), check_crc=draw(st.booleans()),
                       index_interval=draw(st.sampled_from([None, 0, 100, 4096]))), end


# ---- mutations ----------------------------------------------------------------------------------------

FIELDS = {  # batch-header fields the fast loop reads, with the values that matter to it
    "size": (">i", [-(2**31), -1, 0, 13, 14, 48, 49, 50, 2**31 - 13, 2**31 - 12, 2**31 - 1]),
    "magic": (">b", [-128, -1, 0, 1, 2, 3, 127]),
    "attributes": (">h", [0, 0x20, 0x10, 0x30, -1, -32768, 0x7FFF, 0x7FDF]),
    "crc": (">I", [0, 0xFFFFFFFF]),
}
FIELD_AT = {"size": 8, "magic": 16, "attributes": 21, "crc": 17}

mutation = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(0, 7)),
    st.tuples(st.just("set"), st.floats(0, 1), st.integers(0, 255)),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.binary(min_size=1, max_size=80)),
    st.tuples(st.just("zero"), st.floats(0, 1), st.integers(1, 300)),
    st.tuples(st.just("field"), st.integers(0, 30), st.sampled_from(sorted(FIELDS)), st.integers(0, 100),
              st.integers(-3, 3)),
)


def mutate(data: bytes, starts: list[int], ops: list[tuple[Any, ...]]) -> bytes:
    b = bytearray(data)
    for op in ops:
        at = min(int(op[1] * len(b)), max(len(b) - 1, 0)) if op[0] != "field" else 0
        if op[0] == "flip" and b:
            b[at] ^= 1 << op[2]
        elif op[0] == "set" and b:
            b[at] = op[2]
        elif op[0] == "truncate":
            del b[at:]
        elif op[0] == "insert":
            b[at:at] = op[2]
        elif op[0] == "zero":
            b[at : at + op[2]] = bytes(len(b[at : at + op[2]]))
        elif op[0] == "field" and starts:
            _, k, name, pick, delta = op
            fmt, values = FIELDS[name]
            pos = starts[k % len(starts)] + FIELD_AT[name]
            if pos + struct.calcsize(fmt) > len(b):
                continue
            if name == "size" and pick % 3 == 0:  # one off the real size
                value = struct.unpack_from(fmt, b, pos)[0] + delta
            else:
                value = values[pick % len(values)]
            lo, hi = {">i": (-(2**31), 2**31 - 1), ">b": (-128, 127), ">h": (-32768, 32767),
                      ">I": (0, 2**32 - 1)}[fmt]
            struct.pack_into(fmt, b, pos, min(max(value, lo), hi))
    return bytes(b)


# ---- the differential properties ---------------------------------------------------------------------

@needs_compiled
@settings(max_examples=examples(1000), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(parts=entries, data=st.data())
def test_valid_batch_sequences_scan_alike(parts: list[bytes], data: st.DataObject) -> None:
    buf = b"".join(parts)
    starts = entry_starts(parts)
    task, end = data.draw(tasks(buf, starts))
    view = data.draw(st.sampled_from(["bytes", "memoryview"]))
    both_buffer(buf if view == "bytes" else memoryview(buf), task, end)
    if task.start == 0 and end == len(buf):  # and the whole of it, checked, in the plain way
        outcome, calls = both_buffer(buf, SegmentTask(PATH, 0), len(buf))
        assert isinstance(outcome, SegmentScan) and calls >= 1
        assert outcome.valid_bytes == len(buf) or outcome.fatal or outcome.stop == walk.Stop.INVALID_RECORD


@needs_compiled
@settings(max_examples=examples(1500), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(parts=entries, ops=st.lists(mutation, min_size=1, max_size=4), portable=st.booleans(), data=st.data())
def test_mutated_segments_scan_alike(parts: list[bytes], ops: list[tuple[Any, ...]], portable: bool,
                                     data: st.DataObject) -> None:
    starts = entry_starts(parts)
    buf = mutate(b"".join(parts), starts, ops)
    task, end = data.draw(tasks(buf, starts))
    ranged, _ = both_buffer(buf, task, end, portable_crc=portable)
    whole, _ = both_buffer(buf, SegmentTask(PATH, 0, check_crc=task.check_crc), len(buf), portable_crc=portable)
    for outcome in (whole, ranged) if end <= len(buf) else (whole,):  # a range past the buffer: the caller's bug
        assert isinstance(outcome, (SegmentScan, MploaderError)), outcome  # hostile bytes: only typed errors


def last_entry_both(buf: bytes, start: int, end: int) -> Any:
    """``format.log.last_entry`` by the compiled loop and by the Python one (iter_entries): the same position, or
    the same CorruptRecordError (position and message)."""
    from mploader.errors import CorruptRecordError
    from mploader.format import log

    outcomes = []
    for walk_to_last in (functools.partial(log.last_entry_compiled, compiled.last_entry), log.last_entry_in_python):
        try:
            outcomes.append(walk_to_last(buf, start, end, PATH))
        except CorruptRecordError as e:
            outcomes.append((e.position, str(e)))
    assert outcomes[0] == outcomes[1]
    return outcomes[0]


@needs_compiled
@settings(max_examples=examples(1000), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(parts=entries, ops=st.lists(mutation, min_size=0, max_size=4), data=st.data())
def test_the_last_entry_walk_finds_alike(parts: list[bytes], ops: list[tuple[Any, ...]], data: st.DataObject) -> None:
    """readNextOffset's walk to the last entry (size fields only), compiled and in Python, on valid and mutated
    segments, from an entry's start or any byte, to the end or a cut."""
    starts = entry_starts(parts)
    buf = mutate(b"".join(parts), starts, ops) if ops else b"".join(parts)
    starts = [s for s in starts if s <= len(buf)]
    anywhere = st.integers(0, len(buf))
    start = data.draw(st.one_of(st.sampled_from(starts), st.sampled_from(starts), anywhere) if starts else anywhere)
    end = data.draw(st.one_of(st.just(len(buf)), st.just(len(buf)), st.integers(start, len(buf))))
    found = last_entry_both(buf, start, end)
    event("corrupt size" if isinstance(found, tuple) else "none" if found is None else "found")


@needs_compiled
def test_the_last_entry_walk_at_its_edges() -> None:
    def entry(size: int, body: int | None = None) -> bytes:
        return struct.pack(">qi", 0, size) + bytes(size if body is None else body)

    assert last_entry_both(b"", 0, 0) is None
    assert last_entry_both(entry(14), 0, 26) == 0  # the smallest entry, exactly filling the range
    assert last_entry_both(entry(14) + entry(20), 0, 26 + 32) == 26
    assert last_entry_both(entry(14) + entry(20), 0, 26 + 31) == 0  # a torn last entry ends the walk
    assert last_entry_both(entry(14) + bytes(17), 0, 26 + 17) == 0  # 17 bytes left: too few for a header
    assert last_entry_both(entry(14) + entry(13, 20), 0, 26 + 32)[0] == 26  # a size below 14: corrupt
    assert last_entry_both(entry(14) + entry(-1, 20), 0, 26 + 32)[0] == 26
    assert last_entry_both(entry(2**31 - 1, 10), 0, 22) is None  # a huge size does not wrap around
    with pytest.raises(ValueError):
        compiled.last_entry(b"x" * 10, 0, 11)


@settings(max_examples=examples(1500), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(parts=entries, ops=st.lists(mutation, min_size=0, max_size=3), data=st.data())
def test_a_scan_stands_for_the_last_entry_walk_only_where_it_proves_it(parts: list[bytes], ops: list[tuple[Any, ...]],
                                                                       data: st.DataObject) -> None:
    """``recovery.segment._proven_last_entry``: where a scan spares readNextOffset its walk, the walk (in Python,
    whichever walk scanned) ends on the entry the scan names; on valid and mutated segments, for a scan of the whole
    file or of less (a start, a cut, no CRC check), from an entry's start or any byte.  Either walk scans."""
    from mploader.errors import CorruptRecordError
    from mploader.format import log
    from mploader.recovery.segment import _proven_last_entry

    starts = entry_starts(parts)
    buf = mutate(b"".join(parts), starts, ops) if ops else b"".join(parts)
    starts = [p for p in starts if p <= len(buf)]
    anywhere = st.integers(0, len(buf))
    start = data.draw(st.one_of(st.sampled_from(starts), anywhere) if starts else anywhere)
    task = data.draw(st.sampled_from([SegmentTask(PATH, 0), SegmentTask(PATH, 0, check_crc=False),
                                      SegmentTask(PATH, 0, start=min(start, len(buf)))]))
    end = data.draw(st.sampled_from([len(buf), max(0, len(buf) - 1)]))
    scan = scan_buffer(buf, task, end)
    proven = _proven_last_entry(scan, start, len(buf))
    try:
        walked: Any = log.last_entry_in_python(buf, start, len(buf), PATH)  # the reference walk
    except CorruptRecordError as e:
        walked = e
    event("proven" if proven is not None else "walked")
    if proven is not None:
        assert proven == walked, (proven, walked)
        assert task.start == 0 and end == len(buf) and scan.stop is walk.Stop.END


def test_a_scan_proves_the_walk_of_valid_batches_from_any_entry() -> None:
    """The case it is for: a whole segment of valid batches, walked from its start (an unclean shutdown's
    preallocated index) or from an indexed batch: the scan names the last entry, and the walk is spared."""
    from mploader.recovery.segment import _proven_last_entry

    parts = [B(o) for o in range(6)] + [N(6, 3), T(9, 2, 7, 0), B(11)]
    buf = b"".join(parts)
    scan = scan_buffer(buf, SegmentTask(PATH, 0), len(buf))
    for start in entry_starts(parts):
        assert _proven_last_entry(scan, start, len(buf)) == entry_starts(parts)[-1]
    assert _proven_last_entry(scan, 5, len(buf)) is None  # not an entry's start
    assert _proven_last_entry(scan, 0, len(buf) + 1) is None  # another length of file
    torn = scan_buffer(buf + bytes(10), SegmentTask(PATH, 0), len(buf) + 10)  # too few bytes left for a header
    assert torn.stop is walk.Stop.INCOMPLETE and _proven_last_entry(torn, 0, len(buf) + 10) is None


def crafted(size: int, magic: int = 2, attributes: int = 0, body: int = 0) -> bytes:
    """An entry with the given size, magic and attributes fields and a CRC-32C that matches the bytes the
    size covers (from byte 21), so that no other check than the one under test can stop the fast loop.
    ``body``: how many bytes follow the 17-byte prefix when the size does not say (below 0, or huge)."""
    total = size + 12 if 23 <= size + 12 <= 100_000 else 17 + body
    e = bytearray(max(total, 23))
    struct.pack_into(">qiib", e, 0, 5, size, 0, magic)
    struct.pack_into(">h", e, 21, attributes)
    for i in range(23, len(e)):
        e[i] = (i * 7) & 0xFF
    struct.pack_into(">I", e, 17, crc32c(bytes(e[21:total])) if total > 21 else 0)
    return bytes(e[:total] if total >= 17 else e)


@needs_compiled
def test_every_stop_of_the_fast_loop_hands_over_alike() -> None:
    """Each reason the fast loop stops, right after plain batches, at the end of the buffer or before more
    batches, with and without CRC checks: the compiled loop stops at the same byte and the Python general
    path takes it from there."""
    first = B(0, value=b"x" * 900)
    good = first + B(1, value=b"y" * 100)
    cases = {
        "end": b"",
        "legacy v1": V1(5, b"v" * 60, 7),
        "legacy v0": V0(5, b"v" * 60),
        "marker": M(5, 9, True),  # taken by the compiled loop, parsed by the general path in Python
        "control without producer": control_without_producer(5),
        "marker with a header": records.build_batch(5, [records.Record(0, 0, struct.pack(">hh", 0, 1),
                                                                       struct.pack(">hi", 0, 3), (("h", b"v"),))],
                                                    control=True, producer_id=9, producer_epoch=0),
        "marker, gzip": records.build_end_txn_marker_batch(5, 9, 0, True, codec=compression.GZIP),
        "leader-change control record": odd_control_batch(5, struct.pack(">hh", 0, 2), 9),
        "control key of version -1": odd_control_batch(5, struct.pack(">hh", -1, 1), 9),
        "control bit, valid crc": crafted(70, attributes=0x20),
        "attributes -1, valid crc": crafted(70, attributes=-1),
        "attributes 0x7FDF, valid crc": crafted(70, attributes=0x7FDF),  # every bit but control: accepted
        "size 48, valid crc": crafted(48),
        "size 14, valid crc": crafted(14),
        "size 49, valid crc": crafted(49),  # the smallest batch the fast loop takes
        "size < 14": crafted(5, body=20),
        "size INT32_MAX": crafted(2**31 - 1, body=60),
        "size INT32_MAX - 12": crafted(2**31 - 13, body=60),
        "size -1": crafted(-1, body=60),
        "size INT32_MIN": crafted(-(2**31), body=60),
        "one byte past the end": B(5)[:-1],
        "crc": B(5)[:30] + bytes([B(5)[30] ^ 4]) + B(5)[31:],
        "61 bytes left": B(5)[:61],
        "24 bytes left": B(5)[:24],
        "23 bytes left": B(5)[:23],
        "18 bytes left": B(5)[:18],
        "17 bytes left": B(5)[:17],
    }
    for magic in (-128, -1, 0, 1, 3, 127):  # a CRC-32C that matches, but only magic >= 2 is a v2 batch
        cases[f"magic {magic}, valid crc"] = crafted(70, magic=magic)
    for name, bad in cases.items():
        for tail in (b"", B(2)):  # the entry at the end of the buffer (header reads past it fail), or not
            buf = good + bad + tail
            for check in (True, False):
                for start in (0, len(first)):
                    outcome, calls = both_buffer(buf, SegmentTask(PATH, 0, start, check_crc=check), len(buf))
                    assert calls >= 1, name
                for end in range(len(good) - 2, len(good) + len(bad) + 2):  # every cut around the entry
                    both_buffer(buf, SegmentTask(PATH, 0, 0, end, check_crc=check), end)


@needs_compiled
def test_compiled_walk_arguments() -> None:
    b = B(0) + B(1)
    p, rows = compiled.walk_v2(b, 0, len(b), True, True)
    assert p == len(b) and np.frombuffer(rows, BATCH_TABLE)["position"].tolist() == [0, len(B(0))]
    assert np.frombuffer(rows, BATCH_TABLE).tobytes() == walk.batch_table(b, [0, len(B(0))], array("q")).tobytes()
    p, rows = compiled.walk_v2(bytearray(b), len(B(0)), len(b), False, True)
    assert p == len(b) and np.frombuffer(rows, BATCH_TABLE)["position"].tolist() == [len(B(0))]
    assert compiled.walk_v2(b, 0, 0, True, True) == (0, bytearray())
    assert compiled.walk_v2(b, 5, 3, True, True) == (5, bytearray())  # start past end: nothing to walk
    assert (compiled.ROW_FIELDS, compiled.ROW_BYTES) == (compiled_walk.ROW_FIELDS, BATCH_TABLE.itemsize)
    for start, end in ((-1, len(b)), (0, len(b) + 1)):
        with pytest.raises(ValueError):
            compiled.walk_v2(b, start, end, True, True)
    with pytest.raises(TypeError):
        compiled.walk_v2("text", 0, 1, True, True)
    with pytest.raises(TypeError):
        compiled.walk_v2(b, 0, len(b), True)

    class Untestable:  # its truth test raises: the walk raises that, and does not test the next flag with it set
        def __bool__(self) -> bool:
            raise ZeroDivisionError("no truth")

    class Truthy:  # a truth test that runs Python code (True's does not)
        def __bool__(self) -> bool:
            return True

    for flags in ((Untestable(), Truthy()), (Truthy(), Untestable())):
        with pytest.raises(ZeroDivisionError, match="no truth") as e:
            compiled.walk_v2(b, 0, len(b), *flags)
        assert e.value.__cause__ is None and e.value.__context__ is None
    # a range past the buffer or a negative start never reaches it: the Python loop walks those
    for start, end in ((0, len(b) + 10), (-5, len(b))):
        _, calls = both_buffer(b, SegmentTask(PATH, 0, start, end), end)
        assert calls == 0


@needs_compiled
def test_markers_stay_in_the_compiled_loop() -> None:
    """A transactional run (data batches, a COMMIT, an ABORT, a control batch without producer id) is one compiled
    call, with the markers in the table as the record parser reads them; a marker the loop does not parse stops it
    there, and Python parses that one."""
    top = 2**63 - 1
    run_ = [T(0, 2, 7, 0), M(2, 7, True, coord=5), T(3, 1, 8, 0), M(4, 8, False, coord=-2, ts=11),
            control_without_producer(5), B(6), any_marker(7, 7, True, 9, top, 3, False),
            any_marker(8, 7, False, 9, top, 3, True)]
    buf = b"".join(run_)
    outcome, calls = both_buffer(buf, SegmentTask(PATH, 0), len(buf))
    assert isinstance(outcome, SegmentScan) and outcome.valid_bytes == len(buf) and calls == 1
    table = outcome.batches
    marked = table[table["marker"] != walk.Marker.NONE]
    assert marked["position"].tolist() == [s for s, part in zip(entry_starts(run_), run_, strict=True)
                                           if part in (run_[1], run_[3], run_[6], run_[7])]
    assert marked["marker"].tolist() == [walk.Marker.COMMIT, walk.Marker.ABORT, walk.Marker.COMMIT,
                                         walk.Marker.ABORT]
    assert marked["coordinator_epoch"].tolist() == [5, -2, 9, 9]
    # Long.MAX_VALUE + 3 wraps to Long.MIN_VALUE + 2; with log-append time the batch's max timestamp is taken
    assert marked["marker_timestamp"].tolist() == [T0 + 2, 11,
                                                   -(2**63) + 2, top]
    for parse_markers in (True, False):  # the same bytes with markers not wanted: no marker anywhere
        plain, calls = both_buffer(buf, SegmentTask(PATH, 0, parse_markers=parse_markers), len(buf))
        assert isinstance(plain, SegmentScan) and calls == 1
        assert (plain.batches["marker"] != walk.Marker.NONE).sum() == (4 if parse_markers else 0)
    odd = records.build_end_txn_marker_batch(9, 7, 0, True, codec=compression.GZIP)
    outcome, calls = both_buffer(buf + odd + B(10), SegmentTask(PATH, 0), len(buf) + len(odd) + len(B(10)))
    assert isinstance(outcome, SegmentScan) and calls == 2  # stopped at the gzip marker, then went on after it
    assert outcome.batches["marker"][-2] == walk.Marker.COMMIT


@needs_compiled
def test_every_byte_of_a_marker_record_is_read_alike() -> None:
    """A COMMIT marker with one byte of its attributes, record count or 17-byte record set to another value and
    its CRC made right again: whatever the byte, both walks agree (the compiled loop parses it or hands it to
    the record parser)."""
    marker = bytearray(M(1, 7, True, coord=3))
    outcomes = set()
    for at in (22, *range(57, 78)):
        for value in {0, 1, 2, 8, 12, 32, 0x7F, 0x80, 0xFF, (marker[at] + 1) & 0xFF, (marker[at] - 1) & 0xFF}:
            variant = bytearray(marker)
            variant[at] = value
            struct.pack_into(">I", variant, 17, crc32c(bytes(variant[21:])))
            buf = B(0) + bytes(variant) + B(2)
            outcome, _ = both_buffer(buf, SegmentTask(PATH, 0), len(buf))
            outcomes.add(outcome.stop if isinstance(outcome, SegmentScan) else type(outcome))
    assert {walk.Stop.END, walk.Stop.INVALID_RECORD} <= outcomes


def test_a_build_of_another_version_or_row_layout_is_not_used(caplog: pytest.LogCaptureFixture) -> None:
    """A compiled module of another VERSION, whose rows are not BATCH_TABLE's, or whose index draft's are not
    INDEX_DRAFT's (a build of an older _walk.c) is refused, with a warning that says how to rebuild it: the Python
    walk stays in charge."""
    layout = compiled_walk.expected_layout()
    assert set(layout) == {"VERSION", "ROW_FIELDS", "ROW_BYTES", "DRAFT_FIELDS", "DRAFT_BYTES"}
    assert layout["ROW_FIELDS"][:2] == (("position", 0), ("size", 8)) and layout["ROW_BYTES"] == 80
    if compiled is not None:  # the build at hand is this Python's
        assert compiled_walk.layout_mismatch(compiled) is None
        assert {name: getattr(compiled, name) for name in layout} == layout
    stale = [dict(layout, VERSION=compiled_walk.VERSION - 1),
             dict(layout, ROW_FIELDS=compiled_walk.ROW_FIELDS[:-1]),
             dict(layout, ROW_BYTES=BATCH_TABLE.itemsize + 8),
             dict(layout, DRAFT_FIELDS=draft.INDEX_DRAFT.names[::-1]),
             {k: v for k, v in layout.items() if k != "DRAFT_FIELDS"},
             {}]
    for constants in stale:
        module = SimpleNamespace(__file__="/x/_walk.so", **constants)
        with caplog.at_level("WARNING", logger="mploader.scan.compiled"):
            assert compiled_walk.checked(module) is None
        assert "/x/_walk.so was built from another version of _walk.c" in caplog.text and "Rebuild it" in caplog.text
        caplog.clear()
    good = SimpleNamespace(__file__="/x/_walk.so", **layout)
    assert compiled_walk.checked(good) is good and not caplog.text


@st.composite
def batch_tables(draw: st.DrawFn) -> np.ndarray:
    """A batch table as the walk fills it for the index draft: ascending positions from byte 0 (any gaps), last
    offsets and timestamps of any value (-1 and below included), in any order."""
    sizes = draw(st.lists(st.integers(1, 5000), max_size=60))
    table = np.zeros(len(sizes), BATCH_TABLE)
    table["position"] = np.concatenate(([0], np.cumsum(sizes)[:-1])) if sizes else []
    table["last_offset"] = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=len(sizes), max_size=len(sizes)))
    table["max_timestamp"] = draw(st.lists(st.one_of(st.integers(-3, 3), st.integers(-(2**63), 2**63 - 1)),
                                           min_size=len(sizes), max_size=len(sizes)))
    return table


@needs_compiled
@settings(max_examples=examples(1000), deadline=None)
@given(table=batch_tables(), base_offset=st.integers(0, 2**62), interval=st.one_of(st.integers(0, 6000),
                                                                                   st.just(2**31 - 1)))
def test_the_index_draft_is_drafted_alike(table: np.ndarray, base_offset: int, interval: int) -> None:
    """draft_recovery's index draft by the compiled pass and by numpy (draft.index_draft, the reference)."""
    fast = np.frombuffer(compiled.index_draft(table, base_offset, interval), draft.INDEX_DRAFT)
    assert fast.tobytes() == draft.index_draft(BatchColumns(table), base_offset, interval).tobytes()
    for walk_ in (compiled, None):  # and through draft_recovery, with either
        got = draft.draft_recovery(BatchColumns(table), base_offset, interval, compiled=walk_).index
        assert got.tobytes() == fast.tobytes()
    with pytest.raises(ValueError):
        compiled.index_draft(bytes(BATCH_TABLE.itemsize + 1), 0, 0)


# ---- the generator's brokers and the real corpus -------------------------------------------------------

GENERATED = GeneratorConfig(
    data_dirs=1, topics=3, partitions_per_topic=3, total_bytes=1_500_000, segment_bytes=64 * 1024, batch_bytes=2048,
    records_per_batch=6, index_interval_bytes=4096, transactional_fraction=0.3, idempotent_fraction=0.4,
    abort_fraction=0.4, max_transaction_batches=3, leader_epoch_changes=4, faults=40, fault_kinds=FAULT_KINDS, seed=21,
)


@pytest.fixture(scope="module")
def generated_logs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("walk_compiled")
    logs = []
    for i, config in enumerate((GENERATED, GENERATED.replace(compression="gzip", seed=22, batch_bytes=1024),
                                GENERATED.replace(seed=23, batch_bytes=900, records_per_batch=1,
                                                  fault_kinds=("torn_tail", "flipped_byte", "zero_tail")))):
        generate(root / str(i), config)
        logs += sorted((root / str(i)).rglob("*.log"))
    return logs


def check_log(path: Path, rng: random.Random) -> tuple[int, int]:
    """Both walks over one .log: through scan_segment (an mmap), and as bytes from chosen starts and ends."""
    data = path.read_bytes()
    calls = stops = 0
    for check in (True, False):
        task = SegmentTask(str(path), 0, check_crc=check, index_interval=4096)
        outcome, n = both(scan_segment, task)
        calls += n
        assert isinstance(outcome, SegmentScan)
        stops += outcome.stop != walk.Stop.END
        rows = outcome.batches["position"].tolist()
        for start in {0, *rng.sample(rows, min(3, len(rows))), rng.randrange(len(data) + 1)}:
            for end in {len(data), rng.randrange(start, len(data) + 1)}:
                _, n = both_buffer(data, SegmentTask(str(path), 0, start, end, check_crc=check), end)
                calls += n
    return calls, stops


@needs_compiled
def test_generated_brokers_with_faults_scan_alike(generated_logs: list[Path]) -> None:
    rng = random.Random(7)
    calls = stops = 0
    for path in generated_logs:
        c, s = check_log(path, rng)
        calls, stops = calls + c, stops + s
    assert len(generated_logs) > 50 and calls > len(generated_logs)
    assert stops >= 10  # the faults reached the walks


@needs_compiled
@pytest.mark.slow
def test_the_real_corpus_scans_alike(real_corpus: Path) -> None:
    logs = sorted(real_corpus.rglob("*.log"))
    assert logs
    rng = random.Random(8)
    calls = 0
    for path in logs:
        calls += check_log(path, rng)[0]
    assert calls > 0


# ---- CRC-32C ----------------------------------------------------------------------------------------

LONG = 3 * 65536  # the compiled CRC's blocks: three streams of 256 and of 65536 bytes
LENGTHS = sorted({*range(0, 80), 255, 256, 257, 767, 768, 769, 1000, 1003, 2303, 2304, 2305, 24576, 100_003,
                  LONG - 1, LONG, LONG + 1, LONG + 768, LONG + 775, 2 * LONG + 7})


def crc_implementations() -> list[Any]:
    impls = [compiled.crc32c_portable, compiled.crc32c]
    if compiled.hardware_crc():
        impls.append(compiled.crc32c_hardware)
    return impls


@needs_compiled
def test_crc32c_matches_the_crc32c_package_at_every_length_and_alignment() -> None:
    rng = random.Random(3)
    pool = rng.randbytes(max(LENGTHS) + 64)
    mv = memoryview(pool)
    assert compiled.crc32c_portable(b"123456789") == 0xE3069283  # the check value of CRC-32C
    for n in LENGTHS:
        for align in range(9):
            chunk = mv[align : align + n]
            value = rng.getrandbits(32)
            want, want_continued = crc32c(chunk), crc32c(chunk, value)
            for impl in crc_implementations():
                assert impl(chunk) == want, (impl.__name__, n, align)
                assert impl(chunk, value) == want_continued, (impl.__name__, n, align)


@needs_compiled
@settings(max_examples=examples(300), deadline=None)
@given(data=st.binary(max_size=5000), value=st.integers(0, 2**32 - 1))
def test_crc32c_matches_the_crc32c_package_on_random_bytes(data: bytes, value: int) -> None:
    for impl in crc_implementations():
        assert impl(data, value) == crc32c(data, value)


def cpu_has_crc_instruction() -> bool:
    """What the CPU says it has (Linux): the compiled module must find the same."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    words = set(cpuinfo.split())
    return "sse4_2" in words or "crc32" in words


@needs_compiled
def test_the_portable_crc_can_be_forced() -> None:
    hardware = compiled.hardware_crc()
    if cpu_has_crc_instruction():
        assert hardware, "the CPU has a CRC-32C instruction, the compiled walk does not use it"
    was = compiled.use_portable_crc(True)
    try:
        assert compiled.crc_implementation() == "portable"
        last = B(39, value=b"p" * (39 * 37 % 3000))
        buf = b"".join(B(o, value=b"p" * (o * 37 % 3000)) for o in range(39)) + last
        p, rows = compiled.walk_v2(buf, 0, len(buf), True, True)
        assert p == len(buf) and len(rows) == 40 * BATCH_TABLE.itemsize
        bad = buf[:-5] + bytes([buf[-5] ^ 1]) + buf[-4:]
        assert compiled.walk_v2(bad, 0, len(bad), True, True)[0] == len(buf) - len(last)
        assert compiled.walk_v2(bad, 0, len(bad), False, True)[0] == len(buf)
        assert compiled.use_portable_crc(False) is True
        assert compiled.crc_implementation() == ("portable" if not hardware else
                                                 {"x86_64": "sse4.2", "AMD64": "sse4.2"}.get(platform.machine(),
                                                                                              "armv8-crc"))
        assert compiled.walk_v2(bad, 0, len(bad), True, True)[0] == len(buf) - len(last)
    finally:
        compiled.use_portable_crc(was)
    with pytest.raises(TypeError):
        compiled.crc32c("text")
    with pytest.raises(OverflowError):
        compiled.crc32c(b"x", 2**32)
    if not hardware:
        with pytest.raises(RuntimeError):
            compiled.crc32c_hardware(b"x")


HARNESS = r"""
#define MPLOADER_WALK_NO_PYTHON 1
#include "_walk.c"
#include <stdio.h>
static uint32_t bitwise(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
    return ~crc;
}
int main(void) {
    static unsigned char buf[400000];
    static const size_t lengths[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 255, 256, 257, 767, 768, 769, 1003,
                                     24577, 196607, 196608, 196609, 197383, 393223};
    uint32_t x = 12345;
    crc_init();
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
    if (bitwise(0, (const unsigned char *)"123456789", 9) != 0xE3069283u) return 2;
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++)
        for (size_t a = 0; a < 9; a++) {
            uint32_t v = (uint32_t)(i * 0x9e3779b9u), want = bitwise(v, buf + a, lengths[i]);
            if (crc32c_portable(v, buf + a, lengths[i]) != want) return 3;
            if (hw_crc && crc32c_hardware(v, buf + a, lengths[i]) != want) return 4;
        }
    printf("%s\n", hw_crc ? HW_CRC_NAME : "portable");
    return 0;
}
"""


def compile_and_run(tmp_path: Path, compiler: list[str], runner: list[str], *flags: str) -> str:
    exe = tmp_path / ("crc" + "".join(f.strip("-=") for f in flags) + compiler[0].replace("/", "_"))
    src = tmp_path / "harness.c"
    src.write_text(HARNESS)
    subprocess.run([*compiler, "-O2", "-I", str(REPO / "mploader" / "scan"), *flags, str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    return subprocess.run([*runner, str(exe)], check=True, capture_output=True, text=True).stdout.strip()


def test_the_crc_code_in_other_builds(tmp_path: Path) -> None:
    """_walk.c's CRC alone (no Python), against a bit-by-bit CRC-32C: a build without the CPU's instruction,
    this machine's own build, and, where a cross compiler and qemu are installed, an AArch64 build run under
    qemu (which has the CRC extension: the inline-assembly path and its run-time check)."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    assert compile_and_run(tmp_path, [cc], [], "-DMPLOADER_WALK_NO_HW_CRC") == "portable"
    native = compile_and_run(tmp_path, [cc], [])
    assert native in ("portable", "sse4.2", "armv8-crc")
    if cpu_has_crc_instruction():
        assert native != "portable"
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if cross and qemu and Path("/usr/aarch64-linux-gnu").is_dir():
        runner = [qemu, "-L", "/usr/aarch64-linux-gnu"]
        assert compile_and_run(tmp_path, [cross], runner) == "armv8-crc"
        assert compile_and_run(tmp_path, [cross], runner, "-march=armv8-a+crc") == "armv8-crc"
        assert compile_and_run(tmp_path, [cross], runner, "-DMPLOADER_WALK_NO_HW_CRC") == "portable"


# ---- selection ----------------------------------------------------------------------------------------

def selected(pure: str | None) -> str:
    """What a fresh interpreter picks: whether scans use the compiled walk, and whose CRC-32C a load uses."""
    env = {k: v for k, v in os.environ.items() if k != "MPLOADER_PURE_PYTHON"}
    if pure is not None:
        env["MPLOADER_PURE_PYTHON"] = pure
    code = ("import mploader.scan.walk as w; from mploader.format import crc; "
            "print(w.COMPILED, crc.implementation().__module__)")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                          cwd=REPO).stdout.strip()


def test_pure_python_environment_selects_the_python_walk() -> None:
    python = f"False {crc32c.__module__}"
    assert selected("1") == python
    expected = "True mploader.scan._walk" if compiled is not None else python
    assert selected(None) == expected
    assert selected("0") == expected
    assert compiled_walk.load(environ={"MPLOADER_PURE_PYTHON": "1"}) is None
    assert compiled_walk.load(environ={"MPLOADER_PURE_PYTHON": "0"}) is compiled
    assert walk.COMPILED == (compiled_walk.WALK is not None)
    assert compiled_walk.WALK is (compiled if os.environ.get("MPLOADER_PURE_PYTHON") != "1" else None)


@needs_compiled
def test_the_walks_own_tests_pass_with_the_other_walk() -> None:
    """The scan's own test files, run in a fresh interpreter with the walk this process does not use."""
    env = dict(os.environ)
    env["MPLOADER_PURE_PYTHON"] = "1" if walk.COMPILED else "0"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                           "tests/test_scan.py", "tests/test_walk_size_field.py"],
                          capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
