"""``mploader dump FILE``: one file of a data dir, field by field, as Kafka reads it (kafka-dump-log's role).

What an operator runs after ``mploader verify`` said e.g. "segment 247: invalid from byte 63784": the batches of
a ``.log`` from a byte position (``--position``), CRC-checked by the scan's own walk (:mod:`mploader.scan.walk`),
with where and why that walk stops; ``--deep`` adds the records inside (decompressed where the codec is
installed).  Also the entries of an ``.index``/``.timeindex`` (the zero-filled preallocated tail summarised),
a ``.txnindex``, a producer ``.snapshot``, the text checkpoints and ``partition.metadata``.

Read-only: every file is opened with :func:`mploader.format.files.open_regular` (never through a link, never a
FIFO or a device: those are refused, naming the file), and nothing is ever written.  The file's kind comes from
its name (a ``.deleted``, ``.cleaned``, ``.swap`` or ``.tmp`` ending is looked through).  Every kind is first
described as a JSON-ready dict (the ``--json`` document, docs/json-output.md "mploader dump"), and the text is
written from that dict.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import mmap
import os
import struct
import uuid
from collections.abc import Iterator
from typing import Any, cast

import numpy as np

from mploader.cli.exit_codes import EXIT_OK, EXIT_USAGE
from mploader.cli.failures import failed
from mploader.cli.output import fail, print_document, tool
from mploader.errors import (
    CheckpointNumberFormatError,
    CorruptFileError,
    CorruptSnapshotError,
    InvalidFileNameError,
    MalformedCheckpointError,
    StartupFailedError,
)
from mploader.format import checkpoint, compression, index, legacy, log as log_framing, names, records, snapshot
from mploader.format.crc import crc32c
from mploader.format.files import open_regular, read_file, read_to, sparse
from mploader.scan.walk import SegmentScan, SegmentTask, Stop, scan_buffer

DUMP_EXIT_CODES_HELP = """exit status:
  0    the file was shown (whatever it holds: an invalid batch, a corrupt snapshot or a malformed
       checkpoint is shown, with what Kafka makes of it)
  1    the file cannot be read: missing, no permission, a symbolic link, a FIFO, a device or a
       directory (the message names it)
  2    usage error: a file whose kind the name does not tell, a bad --position or --count, --position
       on a file that is not a .log
with --json, a failure prints {"schema": 1, "error": {"kind", "message", ...}} on stdout, same exit status

file kinds (by name): *.log, *.index, *.timeindex, *.txnindex, *.snapshot, recovery-point-offset-checkpoint,
log-start-offset-checkpoint, replication-offset-checkpoint, cleaner-offset-checkpoint,
leader-epoch-checkpoint, partition.metadata, .kafka_cleanshutdown (a .deleted, .cleaned, .swap or .tmp
ending is looked through)"""

AFTER_FAILURE = "dump reads only: nothing was changed"
DEFAULT_COUNT = 1000  # batches (or entries) listed when --count is not given
SHOW_BYTES = 24  # bytes of a key or value shown (text: characters)
DEEP_LIMIT = 64 << 20  # a records section decompressing to more is not decoded (a compression bomb stays a few MB)
MARKER_NAMES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}

OFFSET_CHECKPOINTS = (checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT,
                      checkpoint.REPLICATION_OFFSET_CHECKPOINT, checkpoint.CLEANER_OFFSET_CHECKPOINT)
_LOOKED_THROUGH = (names.DELETED_SUFFIX, names.CLEANED_SUFFIX, names.SWAP_SUFFIX, ".tmp")
_SUFFIX_KINDS = {names.LOG_SUFFIX: "log", names.INDEX_SUFFIX: "offset_index", names.TIME_INDEX_SUFFIX: "time_index",
                 names.TXN_INDEX_SUFFIX: "txn_index", names.SNAPSHOT_SUFFIX: "snapshot"}
_NAME_KINDS = {**dict.fromkeys(OFFSET_CHECKPOINTS, "offset_checkpoint"),
               checkpoint.LEADER_EPOCH_CHECKPOINT: "leader_epoch_checkpoint",
               checkpoint.PARTITION_METADATA: "partition_metadata",
               checkpoint.CLEAN_SHUTDOWN_MARKER: "clean_shutdown_marker"}


class _Usage(Exception):
    """A usage error found after parsing (exit 2)."""


def add_dump_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = DUMP_EXIT_CODES_HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("file", metavar="FILE", help="one file of a data dir (its kind comes from its name)")
    p.add_argument("--position", type=_non_negative, default=None, metavar="N",
                   help="a .log: the byte to start from (default 0); a byte that is not a batch start is said so, "
                        "and the dump starts at the next batch start")
    p.add_argument("--count", type=_count, default=DEFAULT_COUNT, metavar="K|all",
                   help=f"batches (or index entries, producers) to list (default {DEFAULT_COUNT}, then a note)")
    p.add_argument("--deep", action="store_true",
                   help="a .log: also the records inside each batch (decompressed where the codec is installed)")
    p.add_argument("--json", action="store_true", help="print one JSON document (docs/json-output.md)")
    p.set_defaults(_after_failure=AFTER_FAILURE)


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a byte position: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"a byte position is >= 0, not {n}")
    return n


def _count(text: str) -> int | None:
    if text == "all":
        return None
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--count takes a number >= 1 or 'all', not {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError("--count must be >= 1")
    return n


def run_dump(args: argparse.Namespace) -> int:
    path: str = args.file
    limit: int | None = args.count  # None: all
    try:
        kind = file_kind(path)
        if kind != "log" and (args.position is not None or args.deep):
            raise _Usage(f"{'--position' if args.position is not None else '--deep'} applies to a .log, "
                         f"not to {os.path.basename(path)}")
        doc = describe(path, kind, position=args.position or 0, limit=limit, deep=args.deep)
    except _Usage as e:
        return fail(args, EXIT_USAGE, "usage", str(e), path=path)
    except (KeyboardInterrupt, OSError, MemoryError) as e:  # unreadable: its name and what to do
        return failed(args, e)
    if args.json:
        print_document({"schema": 1, "tool": tool(), "command": "dump", **doc})
    else:
        print("\n".join(text_lines(doc)))
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# What a file is


def file_kind(path: str) -> str:
    """The kind of file its name says (``log``, ``offset_index``, ...); :class:`_Usage` when it says none."""
    name = os.path.basename(os.path.normpath(path))
    core = name
    while core.endswith(_LOOKED_THROUGH):
        core = core[: core.rfind(".")]
    if core in _NAME_KINDS:
        return _NAME_KINDS[core]
    for suffix, kind in _SUFFIX_KINDS.items():
        if core.endswith(suffix):
            return kind
    raise _Usage(f"cannot tell what kind of file {name!r} is from its name (expected *.log, *.index, *.timeindex, "
                 f"*.txnindex, *.snapshot, a checkpoint, partition.metadata or .kafka_cleanshutdown)")


def _name_offset(path: str) -> int | None:
    """The offset in a segment-family name (Kafka's offsetFromFileName); None when the name has none."""
    try:
        return names.offset_from_file_name(os.path.basename(path))
    except InvalidFileNameError:
        return None


def describe(path: str, kind: str, *, position: int = 0, limit: int | None = DEFAULT_COUNT,
             deep: bool = False) -> dict[str, Any]:
    """The JSON-ready description of the file (the ``--json`` document without its envelope)."""
    head: dict[str, Any] = {"file": os.path.abspath(path), "kind": kind}
    if kind == "log":
        return {**head, **_describe_log(path, position, limit, deep)}
    if kind in ("offset_index", "time_index"):
        return {**head, **_describe_index(path, kind, limit)}
    if kind == "txn_index":
        return {**head, **_describe_txn_index(path, limit)}
    if kind == "snapshot":
        return {**head, **_describe_snapshot(path, limit)}
    return {**head, **_describe_text_file(path, kind, limit)}


# --------------------------------------------------------------------------------------------
# .log


@contextlib.contextmanager
def _log_bytes(path: str) -> Iterator[tuple[bytes | mmap.mmap, int]]:
    """The ``.log``'s bytes (a mapping for a big file, as the scan maps it) and its size."""
    fd, st = open_regular(path)
    try:
        if st.st_size > (1 << 20) and not sparse(st):
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
                yield mm, st.st_size
                return
        data = read_to(fd, st.st_size)
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror, path) from e
    finally:
        os.close(fd)
    yield data, len(data)


def _describe_log(path: str, position: int, limit: int | None, deep: bool) -> dict[str, Any]:
    base = _name_offset(path)
    with _log_bytes(path) as (buf, size):
        if position > size:
            raise _Usage(f"--position {position} is past the end of {os.path.basename(path)} ({size} bytes)")
        out: dict[str, Any] = {"size": size, "base_offset": base, "position": position}
        start, where = _batch_start(buf, size, position, path, base)
        out["position_check"] = where
        scan = scan_buffer(buf, SegmentTask(path, base or 0, start), size)
        rows = scan.batches
        shown = rows if limit is None else rows[:limit]
        batches = [_batch(buf, int(p), deep, path) for p in shown["position"]]
        out.update({"start": start, "batches": batches, "batches_valid": len(rows),
                    "batches_not_shown": len(rows) - len(shown)})
        out["walk"] = _walk_end(buf, size, scan, deep, path)
        return out


def _batch_start(buf: bytes | mmap.mmap, size: int, position: int, path: str,
                 base: int | None) -> tuple[int, dict[str, Any]]:
    """Where the dump starts, and what ``position`` is: a batch start of the file's framing (Kafka's walk from byte
    0, CRCs not checked) or not; if not, the batch it falls in and the next batch start, and where a walk from
    ``position`` itself ends."""
    if position == 0:
        return 0, {"batch_start": True}
    framing = scan_buffer(buf, SegmentTask(path, base or 0, 0, check_crc=False, parse_markers=False), size)
    starts = framing.batches["position"]
    at = int(np.searchsorted(starts, position))
    if (at < len(starts) and int(starts[at]) == position) or position in (framing.valid_bytes, size):
        return position, {"batch_start": True}
    literal = scan_buffer(buf, SegmentTask(path, base or 0, position), size)
    where: dict[str, Any] = {"batch_start": False, "walk_from_position": {
        "valid_batches": len(literal.batches), "stops_at": literal.valid_bytes, "stop": literal.stop.value,
        "detail": literal.stop_detail or _fatal_text(literal)}}
    if position < framing.valid_bytes:
        inside = int(starts[at - 1])
        nxt = int(starts[at]) if at < len(starts) else framing.valid_bytes
        where.update({"inside_batch_at": inside, "inside_batch_offsets": [
            int(framing.batches["base_offset"][at - 1]), int(framing.batches["last_offset"][at - 1])],
            "next_batch_start": nxt})
        return nxt, where
    # past where the file's framing ends: no batch start is known there; the walk from the position itself is shown
    where.update({"framing_ends_at": framing.valid_bytes, "framing_stop": framing.stop.value,
                  "framing_detail": framing.stop_detail or _fatal_text(framing), "next_batch_start": None})
    return position, where


def _as_bytes(buf: bytes | mmap.mmap) -> bytes:
    """A mapping for the format readers typed for ``bytes``: both are buffers that slice and unpack alike."""
    return cast(bytes, buf)


def _fatal_text(scan: SegmentScan) -> str:
    return "" if scan.fatal is None else f"{scan.fatal} (Kafka: {scan.fatal_exception})"


def _attributes(attributes: int, magic: int) -> dict[str, Any]:
    codec = attributes & records.ATTR_CODEC_MASK
    out: dict[str, Any] = {"raw": attributes, "compression": compression.CODEC_NAMES.get(codec, f"invalid ({codec})"),
                           "timestamp_type": "LogAppendTime" if attributes & records.ATTR_LOG_APPEND_TIME
                           else "CreateTime"}
    if magic >= records.MAGIC_V2:
        out.update({"transactional": bool(attributes & records.ATTR_TRANSACTIONAL),
                    "control": bool(attributes & records.ATTR_CONTROL),
                    "delete_horizon": bool(attributes & records.ATTR_DELETE_HORIZON)})
    return out


def _batch(buf: bytes | mmap.mmap, pos: int, deep: bool, path: str, *, crc_checked: bool = True) -> dict[str, Any]:
    """One entry: its header fields, its CRC (``crc_checked``: the walk found it valid; else computed here)."""
    magic = struct.unpack_from(">b", buf, pos + 16)[0]
    if magic >= records.MAGIC_V2:
        h = records.read_batch_header(buf, pos, path)
        valid = True if crc_checked else records.batch_crc(_as_bytes(buf), pos, h.size) == h.crc
        out: dict[str, Any] = {
            "position": pos, "base_offset": h.base_offset, "last_offset": h.last_offset, "count": h.records_count,
            "size": h.size, "magic": h.magic, "crc": h.crc, "crc_valid": valid,
            "attributes": _attributes(h.attributes, h.magic), "producer_id": h.producer_id,
            "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence, "last_sequence": h.last_sequence,
            "partition_leader_epoch": h.partition_leader_epoch, "base_timestamp": h.base_timestamp,
            "max_timestamp": h.max_timestamp}
        if not valid:
            out["crc_computed"] = records.batch_crc(_as_bytes(buf), pos, h.size)
        if deep:
            out.update(_v2_records(buf, pos, h))
        return out
    e = legacy.read_entry(_as_bytes(buf), pos, path)
    valid = True if crc_checked else legacy.message_crc(_as_bytes(buf), pos, e.size) == e.crc
    out = {"position": pos, "base_offset": None, "last_offset": e.offset, "count": None, "size": e.size,
           "magic": e.magic, "crc": e.crc, "crc_valid": valid, "attributes": _attributes(e.attributes, e.magic),
           "max_timestamp": e.timestamp}
    if e.compression == compression.NONE:
        out["base_offset"], out["count"] = e.offset, 1
    if not valid:
        out["crc_computed"] = legacy.message_crc(_as_bytes(buf), pos, e.size)
    if deep:
        out.update(_legacy_records(buf, pos, path))
    return out


def _shown(data: bytes | None) -> dict[str, Any] | None:
    """A key or value, short and safe: printable UTF-8 text (cut to SHOW_BYTES characters), else hex."""
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.replace("\n", "").replace("\t", "").replace("\r", "").isprintable():
        return {"text": text[:SHOW_BYTES], "truncated": len(text) > SHOW_BYTES}
    return {"hex": data[:SHOW_BYTES].hex(), "truncated": len(data) > SHOW_BYTES}


def _v2_records(buf: bytes | mmap.mmap, pos: int, h: records.BatchHeader) -> dict[str, Any]:
    """The records of a v2 batch (at most DEEP_LIMIT bytes decompressed), or why they cannot be read."""
    end = min(pos + h.size, len(buf))
    raw = bytes(buf[pos + records.RECORD_BATCH_OVERHEAD : end])
    try:
        data = compression.decompress_head(h.compression, raw, DEEP_LIMIT + 1)
    except (compression.UnsupportedCodecError, compression.CompressedDataError) as e:
        return {"records": None, "records_error": f"the records do not decompress: {e}"}
    if len(data) > DEEP_LIMIT:
        return {"records": None, "records_error": f"the records decompress to more than {DEEP_LIMIT} bytes: not read"}
    out: list[dict[str, Any]] = []
    p = 0
    try:
        for _ in range(max(h.records_count, 0)):
            rec, p = records.decode_record(data, p)
            ts = h.max_timestamp if h.is_log_append_time else records.java_long(h.base_timestamp + rec.timestamp_delta)
            r: dict[str, Any] = {
                "offset": h.base_offset + rec.offset_delta, "timestamp": ts,
                "key_size": -1 if rec.key is None else len(rec.key),
                "value_size": -1 if rec.value is None else len(rec.value), "headers": len(rec.headers),
                "key": _shown(rec.key), "value": _shown(rec.value)}
            if h.base_sequence >= 0:
                r["sequence"] = records.java_int(h.base_sequence + rec.offset_delta)
            if h.is_control:
                r["control"] = _control(rec.key, rec.value)
            out.append(r)
    except (CorruptFileError, IndexError, struct.error) as e:
        why = e.reason if isinstance(e, CorruptFileError) else str(e)
        return {"records": out, "records_error": f"record {len(out)} (byte {p} of the records) is unreadable: {why}"}
    rest = len(data) - p
    return {"records": out, "records_error": None if rest == 0 else
            f"{rest} bytes after the {len(out)} declared records (Kafka: incorrect declared batch size)"}


def _control(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """A control record's key (version, type) and, for a transaction marker, its value (coordinator epoch)."""
    if key is None or len(key) < records.CONTROL_KEY.size:
        return {"type": None}
    version, ctype = records.CONTROL_KEY.unpack_from(key, 0)
    out: dict[str, Any] = {"version": version, "type": MARKER_NAMES.get(ctype, f"UNKNOWN ({ctype})")}
    if ctype in (0, 1) and value is not None and len(value) >= records.END_TXN_MARKER_VALUE.size:
        out["coordinator_epoch"] = records.END_TXN_MARKER_VALUE.unpack_from(value, 0)[1]
    return out


def _legacy_records(buf: bytes | mmap.mmap, pos: int, path: str) -> dict[str, Any]:
    try:
        messages = legacy.decode_messages(_as_bytes(buf), pos, path)
    except CorruptFileError as e:
        return {"records": None, "records_error": e.reason}
    return {"records": [{"offset": m.offset, "timestamp": m.timestamp,
                         "key_size": -1 if m.key is None else len(m.key),
                         "value_size": -1 if m.value is None else len(m.value), "headers": 0,
                         "key": _shown(m.key), "value": _shown(m.value)} for m in messages], "records_error": None}


def _walk_end(buf: bytes | mmap.mmap, size: int, scan: SegmentScan, deep: bool, path: str) -> dict[str, Any]:
    """Where the CRC-checked walk stopped, why, the entry there (header, CRC stored and computed) and where its
    framing would go on."""
    stop = "fatal" if scan.fatal is not None else scan.stop.value
    out: dict[str, Any] = {"stops_at": scan.valid_bytes, "stop": stop,
                           "detail": _fatal_text(scan) if scan.fatal is not None else scan.stop_detail,
                           "invalid_bytes": size - scan.valid_bytes, "entry": None, "next_entry": None}
    p = scan.valid_bytes
    if scan.stop in (Stop.CRC, Stop.SMALL_BATCH) and scan.fatal is None:
        if scan.stop is Stop.CRC:
            out["entry"] = _batch(buf, p, deep, path, crc_checked=False)
        else:
            offset, length, ple, magic = log_framing.ENTRY_PREFIX.unpack_from(buf, p)
            out["entry"] = {"position": p, "base_offset": offset, "size_field": length, "size": length + 12,
                            "magic": magic, "partition_leader_epoch": ple}
        nxt = p + out["entry"]["size"]
        out["next_entry"] = nxt if nxt < size else None
    elif scan.stop in (Stop.INCOMPLETE, Stop.CORRUPT_SIZE) and p + 12 <= size:
        offset, length = struct.unpack_from(">qi", buf, p)
        out["entry"] = {"position": p, "base_offset": offset, "size_field": length, "size": length + 12,
                        "magic": buf[p + 16] if p + 17 <= size else None}
    return out


# --------------------------------------------------------------------------------------------
# .index, .timeindex, .txnindex


def _zero_tail(entries: np.ndarray) -> int:
    """The number of all-zero slots at the end (a preallocated index: Kafka counts them as entries)."""
    if not len(entries):
        return 0
    used = np.zeros(len(entries), bool)
    for name in entries.dtype.names or ():
        used |= entries[name] != 0
    written = np.flatnonzero(used)
    return len(entries) - (int(written[-1]) + 1 if written.size else 0)


def _describe_index(path: str, kind: str, limit: int | None) -> dict[str, Any]:
    base = _name_offset(path)
    if base is None:
        raise _Usage(f"{os.path.basename(path)}: the base offset of an index comes from its name (20 digits), "
                     f"which has none")
    dtype = index.OFFSET_ENTRY if kind == "offset_index" else index.TIME_ENTRY
    data = read_file(path)
    entries = index.entries_from_bytes(data, dtype)
    zeros = _zero_tail(entries)
    written = entries[: len(entries) - zeros]
    shown = written if limit is None else written[:limit]
    rel = shown["relative_offset"].astype(np.int64)
    if kind == "offset_index":
        rows = [{"slot": i, "relative_offset": int(r), "offset": base + int(r), "position": int(p)}
                for i, (r, p) in enumerate(zip(rel, shown["position"]))]
        key = written["relative_offset"].astype(np.int64)
        increasing = "offset"
    else:
        rows = [{"slot": i, "timestamp": int(t), "relative_offset": int(r), "offset": base + int(r)}
                for i, (t, r) in enumerate(zip(shown["timestamp"], rel))]
        key = written["timestamp"].astype(np.int64)
        increasing = "timestamp"
    out: dict[str, Any] = {"size": len(data), "base_offset": base, "entry_size": dtype.itemsize,
                           "slots": len(entries), "entries": rows, "entries_written": len(written),
                           "entries_not_shown": len(written) - len(shown), "zero_slots_at_end": zeros,
                           "trailing_bytes": len(data) % dtype.itemsize, "out_of_order": None}
    bad = np.flatnonzero(np.diff(key) <= 0) if len(key) > 1 else np.empty(0, np.int64)
    if bad.size:  # Kafka appends strictly increasing offsets (timestamps): the first slot that breaks the order
        i = int(bad[0]) + 1
        out["out_of_order"] = {"slot": i, "field": increasing, "value": int(key[i]), "previous": int(key[i - 1])}
    return out


def _describe_txn_index(path: str, limit: int | None) -> dict[str, Any]:
    base = _name_offset(path)
    data = read_file(path)
    entries = index.entries_from_bytes(data, index.TXN_ENTRY)
    shown = entries if limit is None else entries[:limit]
    rows = []
    for i, e in enumerate(shown):
        version_byte = struct.unpack_from(">b", data, i * index.TXN_ENTRY.itemsize)[0]
        row: dict[str, Any] = {"slot": i, "version": int(e["version"]), "producer_id": int(e["producer_id"]),
                               "first_offset": int(e["first_offset"]), "last_offset": int(e["last_offset"]),
                               "last_stable_offset": int(e["last_stable_offset"]), "problem": None}
        if version_byte > 0:
            row["problem"] = f"version byte {version_byte}: Kafka fails reading it (KafkaException)"
        elif base is not None and row["last_offset"] < base:
            row["problem"] = (f"last offset below the segment's base offset {base}: Kafka's sanity check finds the "
                              f"index corrupt (recovery rebuilds it)")
        rows.append(row)
    return {"size": len(data), "base_offset": base, "entry_size": index.TXN_ENTRY.itemsize, "entries": rows,
            "entries_not_shown": len(entries) - len(shown),
            "trailing_bytes": len(data) % index.TXN_ENTRY.itemsize}


# --------------------------------------------------------------------------------------------
# .snapshot


def _describe_snapshot(path: str, limit: int | None) -> dict[str, Any]:
    data = read_file(path)
    out: dict[str, Any] = {"size": len(data), "snapshot_offset": _name_offset(path), "version": None, "crc": None,
                           "crc_computed": None, "crc_valid": None, "count": None, "valid": True, "problem": None,
                           "producers": [], "producers_not_shown": 0, "trailing_bytes": 0}
    try:
        snapshot.parse_snapshot(data, path)
    except CorruptSnapshotError as e:
        out["valid"], out["problem"] = False, f"{e.reason} (Kafka deletes a corrupt snapshot when it reads it)"
    if len(data) < snapshot.HEADER.size:
        return out
    version, crc, count = snapshot.HEADER.unpack_from(data, 0)
    computed = crc32c(data[6:])
    out.update({"version": version, "crc": crc, "crc_computed": computed, "crc_valid": crc == computed,
                "count": count})
    fit = max(0, min(count, (len(data) - snapshot.HEADER.size) // snapshot.ENTRY.size))
    shown = fit if limit is None else min(fit, limit)
    fields = ("producer_id", "epoch", "last_sequence", "last_offset", "offset_delta", "timestamp",
              "coordinator_epoch", "current_txn_first_offset")
    at = snapshot.HEADER.size
    out["producers"] = [dict(zip(fields, snapshot.ENTRY.unpack_from(data, at + i * snapshot.ENTRY.size)))
                        for i in range(shown)]
    out["producers_not_shown"] = fit - shown
    out["trailing_bytes"] = len(data) - snapshot.HEADER.size - fit * snapshot.ENTRY.size
    return out


# --------------------------------------------------------------------------------------------
# Checkpoints, partition.metadata, the clean-shutdown marker


def _describe_text_file(path: str, kind: str, limit: int | None) -> dict[str, Any]:
    data = read_file(path)  # unreadable: exit 1, before any parsing
    out: dict[str, Any] = {"size": len(data), "valid": True, "problem": None}
    try:
        if kind == "offset_checkpoint":
            parsed = checkpoint.read_offset_checkpoint(path)
            rows: list[dict[str, Any]] = [{"topic": tp.topic, "partition": tp.partition, "offset": o}
                                          for tp, o in parsed.items()]
        elif kind == "leader_epoch_checkpoint":
            rows = [{"epoch": e, "start_offset": o} for e, o in checkpoint.read_leader_epoch_checkpoint(path)]
        elif kind == "partition_metadata":
            raw = checkpoint.read_partition_metadata(path)
            out.update({"topic_id": base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii"),
                        "topic_id_uuid": str(uuid.UUID(bytes=raw))})
            return out
        else:  # the clean-shutdown marker: Kafka uses only that it exists
            out.update({"content": data[:200].decode("utf-8", "replace"),
                        "broker_epoch": checkpoint.read_broker_epoch(path)})
            return out
    except (MalformedCheckpointError, CheckpointNumberFormatError, StartupFailedError) as e:
        out.update({"valid": False, "problem": _checkpoint_problem(e), "entries": [], "entries_not_shown": 0,
                    "lines": [line[:200] for line in data.decode("utf-8", "replace").splitlines()[:limit]]})
        return out
    shown = rows if limit is None else rows[:limit]
    out.update({"entries": shown, "entries_not_shown": len(rows) - len(shown)})
    return out


def _checkpoint_problem(e: Exception) -> str:
    if isinstance(e, MalformedCheckpointError):
        return f"{e} (Kafka: IOException; the data dir goes offline)"
    if isinstance(e, CheckpointNumberFormatError):
        return f"{e} (Kafka: NumberFormatException)"
    return str(e)


# --------------------------------------------------------------------------------------------
# The text


def _when(ms: int) -> str:
    if ms < 0:
        return str(ms)
    try:
        t = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return f"{ms} ({t.strftime('%Y-%m-%dT%H:%M:%S.')}{ms % 1000:03d}Z)"


def _shown_text(v: dict[str, Any] | None) -> str:
    if v is None:
        return "null"
    more = "..." if v["truncated"] else ""
    if "text" in v:
        return repr(str(v["text"])) + more
    return f"0x{v['hex']}{more}"


def _batch_line(b: dict[str, Any]) -> str:
    a = b["attributes"]
    crc = f"crc: {b['crc']:#010x} isValid: {str(b['crc_valid']).lower()}"
    if "crc_computed" in b:
        crc += f" (computed {b['crc_computed']:#010x})"
    if b["magic"] < records.MAGIC_V2:
        first = "?" if b["base_offset"] is None else b["base_offset"]
        return (f"position: {b['position']} offset: {first}..{b['last_offset']} size: {b['size']} magic: {b['magic']} "
                f"{crc} compresscodec: {a['compression']} {a['timestamp_type']}: {b['max_timestamp']}")
    return (f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} count: {b['count']} "
            f"position: {b['position']} size: {b['size']} magic: {b['magic']} {crc} "
            f"compresscodec: {a['compression']} isTransactional: {str(a['transactional']).lower()} "
            f"isControl: {str(a['control']).lower()} producerId: {b['producer_id']} producerEpoch: "
            f"{b['producer_epoch']} baseSequence: {b['base_sequence']} lastSequence: {b['last_sequence']} "
            f"partitionLeaderEpoch: {b['partition_leader_epoch']} {a['timestamp_type']}: {_when(b['max_timestamp'])}")


def _record_lines(b: dict[str, Any]) -> list[str]:
    if "records" not in b:
        return []
    lines = []
    a = b["attributes"]
    for r in b["records"] or []:
        line = (f"| offset: {r['offset']} {a['timestamp_type']}: {r['timestamp']} keySize: {r['key_size']} "
                f"valueSize: {r['value_size']}")
        if "sequence" in r:
            line += f" sequence: {r['sequence']}"
        line += f" headers: {r['headers']}"
        if "control" in r:
            c = r["control"]
            line += f" controlType: {c.get('type')}"
            if "coordinator_epoch" in c:
                line += f" coordinatorEpoch: {c['coordinator_epoch']}"
        else:
            line += f" key: {_shown_text(r['key'])} payload: {_shown_text(r['value'])}"
        lines.append(line)
    if b.get("records_error"):
        lines.append(f"| records: {b['records_error']}")
    return lines


def _more(n: int, what: str) -> list[str]:
    return [f"... {n} more {what} not shown (--count K, or --count all)"] if n else []


def text_lines(doc: dict[str, Any]) -> list[str]:
    kind = doc["kind"]
    out = [f"Dumping {doc['file']} ({kind.replace('_', ' ')}, {doc['size']} bytes)"]
    if kind == "log":
        out += _log_text(doc)
    elif kind in ("offset_index", "time_index"):
        out += _index_text(doc)
    elif kind == "txn_index":
        out.append(f"base offset (from the name): {doc['base_offset']}; {len(doc['entries'])} aborted transaction(s)")
        out += [f"slot: {e['slot']} version: {e['version']} producerId: {e['producer_id']} firstOffset: "
                f"{e['first_offset']} lastOffset: {e['last_offset']} lastStableOffset: {e['last_stable_offset']}"
                + (f"  PROBLEM: {e['problem']}" if e["problem"] else "") for e in doc["entries"]]
        out += _more(doc["entries_not_shown"], "entries")
        if doc["trailing_bytes"]:
            out.append(f"{doc['trailing_bytes']} trailing bytes: not a whole entry (Kafka ignores them)")
    elif kind == "snapshot":
        out += _snapshot_text(doc)
    else:
        out += _text_file_text(doc)
    return out


def _log_text(doc: dict[str, Any]) -> list[str]:
    out = [f"Starting offset: {doc['base_offset']} (the base offset in the name)"]
    where = doc["position_check"]
    if not where["batch_start"]:
        p = doc["position"]
        walk = where["walk_from_position"]
        if where.get("inside_batch_at") is not None:
            first, last = where["inside_batch_offsets"]
            out.append(f"byte {p} is not a batch start: it lies inside the batch at byte {where['inside_batch_at']} "
                       f"(offsets {first}..{last}); the next batch starts at byte {where['next_batch_start']}")
        else:
            out.append(f"byte {p} is not a batch start: the file's entries end at byte {where['framing_ends_at']} "
                       f"({where['framing_stop']}: {where['framing_detail']}); no batch start is known past it")
        out.append(f"a walk from byte {p} itself: {walk['valid_batches']} valid batch(es), stops at byte "
                   f"{walk['stops_at']} ({walk['stop']}{': ' + walk['detail'] if walk['detail'] else ''})")
        if where.get("next_batch_start") is not None:
            out.append(f"dumping from byte {doc['start']}")
    for b in doc["batches"]:
        out.append(_batch_line(b))
        out += _record_lines(b)
    out += _more(doc["batches_not_shown"], "valid batches")
    w = doc["walk"]
    n = doc["batches_valid"]
    if w["stop"] == Stop.END.value:
        out.append(f"{n} valid batch(es) from byte {doc['start']} to the end of the file ({doc['size']} bytes)")
        return out
    out.append(f"{n} valid batch(es) from byte {doc['start']}; the walk stops at byte {w['stops_at']} of "
               f"{doc['size']} ({w['stop']}{': ' + w['detail'] if w['detail'] else ''}); a recovery of this segment "
               f"truncates it there ({w['invalid_bytes']} bytes)" if w["stop"] != "fatal" else
               f"{n} valid batch(es) from byte {doc['start']}; the walk stops at byte {w['stops_at']}: {w['detail']}")
    e = w["entry"]
    if e is not None:
        if "crc" in e:
            out.append("the invalid entry: " + _batch_line(e))
            out += _record_lines(e)
        else:
            out.append(f"the entry there: offset {e['base_offset']}, size field {e['size_field']} (an entry of "
                       f"{e['size']} bytes), magic {e['magic']}")
    if w["next_entry"] is not None:
        out.append(f"its size field leads on to byte {w['next_entry']} (mploader dump FILE --position "
                   f"{w['next_entry']} to see what follows)")
    return out


def _index_text(doc: dict[str, Any]) -> list[str]:
    out = [f"base offset (from the name): {doc['base_offset']}; {doc['slots']} slot(s) of {doc['entry_size']} bytes, "
           f"{doc['entries_written']} written"]
    for e in doc["entries"]:
        if doc["kind"] == "offset_index":
            out.append(f"slot: {e['slot']} offset: {e['offset']} (relative {e['relative_offset']}) "
                       f"position: {e['position']}")
        else:
            out.append(f"slot: {e['slot']} timestamp: {_when(e['timestamp'])} offset: {e['offset']} "
                       f"(relative {e['relative_offset']})")
    out += _more(doc["entries_not_shown"], "entries")
    if doc["zero_slots_at_end"]:
        zero = "(base offset, position 0)" if doc["kind"] == "offset_index" else "(timestamp 0, base offset)"
        out.append(f"{doc['zero_slots_at_end']} zero (preallocated) slot(s) at the end, from slot "
                   f"{doc['entries_written']} on: Kafka counts each as an entry {zero}")
    if doc["trailing_bytes"]:
        out.append(f"{doc['trailing_bytes']} trailing bytes: not a whole entry (Kafka rounds the length down)")
    if doc["out_of_order"]:
        o = doc["out_of_order"]
        out.append(f"PROBLEM: slot {o['slot']}: {o['field']} {o['value']} does not increase (previous {o['previous']})")
    return out


def _snapshot_text(doc: dict[str, Any]) -> list[str]:
    out = [f"snapshot offset (from the name): {doc['snapshot_offset']}"]
    if doc["version"] is not None:
        crc = f"crc: {doc['crc']:#010x} isValid: {str(doc['crc_valid']).lower()}"
        if not doc["crc_valid"]:
            crc += f" (computed {doc['crc_computed']:#010x})"
        out.append(f"version: {doc['version']} {crc} producers: {doc['count']}")
    for p in doc["producers"]:
        out.append(f"producerId: {p['producer_id']} producerEpoch: {p['epoch']} lastSequence: {p['last_sequence']} "
                   f"lastOffset: {p['last_offset']} offsetDelta: {p['offset_delta']} lastTimestamp: "
                   f"{_when(p['timestamp'])} coordinatorEpoch: {p['coordinator_epoch']} currentTxnFirstOffset: "
                   f"{p['current_txn_first_offset']}")
    out += _more(doc["producers_not_shown"], "producers")
    if doc["trailing_bytes"]:
        out.append(f"{doc['trailing_bytes']} bytes after the producers")
    out.append("valid" if doc["valid"] else f"CORRUPT: {doc['problem']}")
    return out


def _text_file_text(doc: dict[str, Any]) -> list[str]:
    kind = doc["kind"]
    if kind == "partition_metadata" and doc["valid"]:
        return [f"topic_id: {doc['topic_id']} ({doc['topic_id_uuid']})"]
    if kind == "clean_shutdown_marker":
        return [f"content: {doc['content']!r}; broker epoch: {doc['broker_epoch']} (a load uses only that the file "
                f"exists: the data dir shut down cleanly)"]
    if not doc["valid"]:
        return [f"MALFORMED: {doc['problem']}", *(f"  line {i + 1}: {line!r}" for i, line in enumerate(doc["lines"]))]
    out = [f"{len(doc['entries']) + doc['entries_not_shown']} entr{'y' if len(doc['entries']) == 1 else 'ies'}"]
    if kind == "offset_checkpoint":
        out += [f"{e['topic']} {e['partition']} {e['offset']}" for e in doc["entries"]]
    else:
        out += [f"epoch: {e['epoch']} startOffset: {e['start_offset']}" for e in doc["entries"]]
    out += _more(doc["entries_not_shown"], "entries")
    return out


__all__ = ["DUMP_EXIT_CODES_HELP", "add_dump_arguments", "describe", "file_kind", "run_dump", "text_lines"]
