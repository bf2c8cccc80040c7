"""Text checkpoint files, ``partition.metadata`` and the clean-shutdown marker (docs/formats.md §13-§16).

Offset checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``, ``cleaner-offset-checkpoint``) and the
``leader-epoch-checkpoint`` share one layout::

    0              version line, must be 0
    N              number of entry lines
    <fields...>    N lines, fields split on \\s+ (offsets: topic partition offset; epochs: epoch start)

Reading follows Kafka's two error classes: a malformed file raises
:class:`MalformedCheckpointError` (Kafka: IOException, the data dir goes
offline), a non-numeric field :class:`CheckpointNumberFormatError` (Kafka:
NumberFormatException).
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable
from typing import TypeVar

from mploader.errors import CheckpointNumberFormatError, MalformedCheckpointError, StartupFailedError
from mploader.format.files import read_file
from mploader.format.names import TopicPartition

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
CHECKPOINT_VERSION = 0

_WHITESPACE = re.compile(r"\s+", re.ASCII)  # Java's \s: [ \t\n\x0B\f\r]
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine
_JAVA_INT = re.compile(r"[+-]?\d+")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def java_split(line: str, pattern: re.Pattern[str] = _WHITESPACE) -> list[str]:
    """Java ``Pattern.split(line)`` (limit 0): a leading empty field stays, trailing empty ones go.

    Java returns ``[line]`` when nothing matches (so ``""`` gives ``[""]``), and may return an
    empty array when every field is empty (e.g. a line of blanks).
    """
    parts = pattern.split(line)
    if len(parts) == 1:
        return parts
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def unquoted(text: str) -> str:
    """A malformed line described, never quoted: the file may not be Kafka's at all (a hard link to a private file
    in a data dir another user controls), and an error message must not carry its contents."""
    return f"({len(text)} characters)"


def parse_java_int(text: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int:
    """``Integer.parseInt`` / ``Long.parseLong``: optional sign, decimal digits, in range."""
    if not _JAVA_INT.fullmatch(text):
        raise ValueError(f"For input string {unquoted(text)}")
    value = int(text)
    if not lo <= value <= hi:
        raise ValueError(f"For input string {unquoted(text)} (out of range)")
    return value


def _lines_of(raw: bytes, path: str | os.PathLike[str]) -> list[str]:
    """The lines of the file at ``path``, whose bytes are ``raw``, as Java's BufferedReader returns them (UTF-8;
    \\n, \\r\\n or \\r)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedCheckpointError(path, None, f"not UTF-8 (byte {e.start})") from e
    if text == "":
        return []
    lines = _LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


T = TypeVar("T")


def _parse_checkpoint(raw: bytes, path: str | os.PathLike[str], nfields: int, build: Callable[[list[str]], T],
                      plain: Callable[[str], T | None] = lambda line: None) -> list[T]:
    """``plain``: the entry of a line in its usual shape, parsed without the split (None: the general rule)."""
    lines = _lines_of(raw, path)
    if not lines:
        return []
    try:
        version = parse_java_int(lines[0])
    except ValueError:
        raise MalformedCheckpointError(path, 1, f"malformed version line {unquoted(lines[0])}") from None
    if version != CHECKPOINT_VERSION:
        raise MalformedCheckpointError(path, 1, f"unrecognised version {version}, expected {CHECKPOINT_VERSION}")
    if len(lines) < 2:
        return []
    try:
        expected = parse_java_int(lines[1])
    except ValueError:
        raise MalformedCheckpointError(path, 2, f"malformed entry count {unquoted(lines[1])}") from None
    if expected < 0:  # Kafka: new ArrayList<>(expected) -> IllegalArgumentException, before any entry is read
        raise CheckpointNumberFormatError(path, 2, f"negative entry count {expected} (Illegal Capacity)")
    out: list[T] = []
    for i, line in enumerate(lines[2:], start=3):
        entry = plain(line)
        if entry is not None:
            out.append(entry)
            continue
        fields = java_split(line)
        if len(fields) != nfields:
            raise MalformedCheckpointError(path, i, f"malformed line {unquoted(line)}: expected {nfields} fields")
        try:
            out.append(build(fields))
        except ValueError as e:
            raise CheckpointNumberFormatError(path, i, str(e)) from None
    if len(out) != expected:
        raise MalformedCheckpointError(path, None, f"expected {expected} entries but found {len(out)}")
    return out


def read_offset_checkpoint(path: str | os.PathLike[str]) -> dict[TopicPartition, int]:
    return parse_offset_checkpoint(read_file(path), path)


def parse_offset_checkpoint(raw: bytes, path: str | os.PathLike[str]) -> dict[TopicPartition, int]:
    """``topic partition offset`` lines of the file at ``path``, whose bytes are ``raw``; a later duplicate wins."""
    entries = _parse_checkpoint(
        raw, path, 3,
        lambda f: (TopicPartition(f[0], parse_java_int(f[1])), parse_java_int(f[2], INT64_MIN, INT64_MAX)),
    )
    return dict(entries)


def read_leader_epoch_checkpoint(path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    return parse_leader_epoch_checkpoint(read_file(path), path)


def parse_leader_epoch_checkpoint(raw: bytes, path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    """``epoch startOffset`` lines of the file at ``path``, whose bytes are ``raw``, in file order (the cache applies
    its assign rule to them).  Read by every partition's load (and its preflight): a line of two plain numbers is
    taken as it is, any other by Java's rules."""
    return _parse_checkpoint(raw, path, 2, _epoch_entry, _plain_epoch_entry)


def _epoch_entry(fields: list[str]) -> tuple[int, int]:
    return parse_java_int(fields[0]), parse_java_int(fields[1], INT64_MIN, INT64_MAX)


def _plain_epoch_entry(line: str) -> tuple[int, int] | None:
    """The usual line, ``epoch startOffset`` as two ASCII digit strings and one space, in range; None: any other."""
    a, space, b = line.partition(" ")
    if space and a.isascii() and a.isdigit() and b.isascii() and b.isdigit():
        epoch, start = int(a), int(b)
        if epoch <= INT32_MAX and start <= INT64_MAX:
            return epoch, start
    return None


def format_checkpoint(lines: list[str]) -> bytes:
    return ("\n".join([str(CHECKPOINT_VERSION), str(len(lines)), *lines]) + "\n").encode("utf-8")


def offset_checkpoint_bytes(offsets: dict[TopicPartition, int]) -> bytes:
    return format_checkpoint([f"{tp.topic} {tp.partition} {o}" for tp, o in offsets.items()])


def leader_epoch_checkpoint_bytes(entries: list[tuple[int, int]]) -> bytes:
    return format_checkpoint([f"{e} {o}" for e, o in entries])


# --------------------------------------------------------------------------------------------
# partition.metadata


def uuid_text(topic_id: bytes) -> str:
    """Kafka's ``Uuid.toString``: base64url, no padding."""
    if len(topic_id) != 16:
        raise ValueError("a topic id is 16 bytes")
    return base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode("ascii")


def partition_metadata_bytes(topic_id: bytes) -> bytes:
    """``version: 0\\ntopic_id: <base64url, no padding>`` with no trailing newline."""
    return f"version: 0\ntopic_id: {uuid_text(topic_id)}".encode("ascii")


_PARTITION_METADATA_SEPARATOR = re.compile(r":\s+", re.ASCII)
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


def java_base64url_decode(text: str) -> bytes:
    """``Base64.getUrlDecoder().decode``: URL alphabet only, padding optional but exact if present."""
    body = text.rstrip("=")
    pad = len(text) - len(body)
    rem = len(body) % 4
    if not _BASE64URL.fullmatch(body) or rem == 1 or (pad and (rem == 0 or pad != 4 - rem)):
        raise ValueError(f"illegal base64url text {unquoted(text)}")
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))


def parse_topic_id(text: str) -> bytes:
    """Kafka's ``Uuid.fromString``: at most 24 characters of base64url decoding to 16 bytes."""
    if len(text) > 24:
        raise ValueError(f"topic id {unquoted(text)} is too long to be a base64 UUID")
    raw = java_base64url_decode(text)
    if len(raw) != 16:
        raise ValueError(f"topic id {unquoted(text)} decodes to {len(raw)} bytes, not 16")
    return raw


def read_partition_metadata(path: str | os.PathLike[str]) -> bytes:
    return parse_partition_metadata(read_file(path), path)


def parse_partition_metadata(raw: bytes, path: str | os.PathLike[str]) -> bytes:
    """The topic id in the ``partition.metadata`` at ``path``, whose bytes are ``raw``, with Kafka's error classes
    (docs/formats.md §15).

    Kafka's reader, in order: line 1 split on ``:\\s+`` (Java split semantics) must give 2
    fields, the second an int >= 0 (else IOException); line 2 the same, then ``Uuid.fromString``
    (IllegalArgumentException: start-up fails), the zero UUID is an IOException; a missing
    line is a NullPointerException (start-up fails).  Further lines are never read.
    """
    lines = _lines_of(raw, path)
    if not lines:
        raise StartupFailedError(path, "NullPointerException", "empty partition.metadata")
    version_fields = java_split(lines[0], _PARTITION_METADATA_SEPARATOR)
    if len(version_fields) != 2:
        raise MalformedCheckpointError(path, 1, f"malformed line {unquoted(lines[0])}")
    try:
        version = parse_java_int(version_fields[1])
    except ValueError:
        raise MalformedCheckpointError(path, 1, f"malformed version {unquoted(version_fields[1])}") from None
    if version < 0:
        raise MalformedCheckpointError(path, 1, f"unrecognized version {version}")
    if len(lines) < 2:
        raise StartupFailedError(path, "NullPointerException", "partition.metadata has no topic_id line")
    id_fields = java_split(lines[1], _PARTITION_METADATA_SEPARATOR)
    if len(id_fields) != 2:
        raise MalformedCheckpointError(path, 2, f"malformed line {unquoted(lines[1])}")
    try:
        raw = parse_topic_id(id_fields[1])
    except ValueError as e:
        raise StartupFailedError(path, "IllegalArgumentException", f"invalid topic id: {e}") from None
    if raw == bytes(16):
        raise MalformedCheckpointError(path, 2, "the zero UUID is not a valid topic id")
    return raw


# --------------------------------------------------------------------------------------------
# Clean-shutdown marker


def clean_shutdown_marker_bytes(broker_epoch: int | None) -> bytes:
    """Empty (Kafka <= 3.6) or ``{"version":0,"brokerEpoch":N}`` (>= 3.7)."""
    if broker_epoch is None:
        return b""
    return json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":")).encode("utf-8")


def read_broker_epoch(path: str | os.PathLike[str]) -> int | None:
    """The broker epoch of a marker, tolerantly (unknown fields ignored; unreadable => None)."""
    try:
        doc = json.loads(read_file(path, end=4096).decode("utf-8"))
        epoch = doc.get("brokerEpoch") if isinstance(doc, dict) else None
        ok = isinstance(epoch, int) and not isinstance(epoch, bool) and INT64_MIN <= epoch <= INT64_MAX
        return epoch if ok else None
    except (OSError, ValueError):
        return None
