"""File and directory names (docs/formats.md §2-§3).

* segment family: ``<20-digit base offset><suffix>``, e.g. ``00000000000000000042.log``;
* partition directories: ``<topic>-<partition>`` and the ``.<uuid>-delete``,
  ``.<uuid>-future`` and ``.<uuid>-stray`` forms.
"""

from __future__ import annotations

import enum
import re
import uuid
from typing import NamedTuple

from mploader.errors import InvalidFileNameError, InvalidPartitionDirError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
CHECKPOINT_DELETED_SUFFIX = ".checkpoint.deleted"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
REMOTE_LOG_INDEX_CACHE = "remote-log-index-cache"
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
MAX_DIR_NAME = 255

INT64_MAX = 2**63 - 1
_JAVA_INT = re.compile(r"[+-]?\d+")  # Integer.parseInt / Long.parseLong syntax


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class DirKind(enum.Enum):
    LIVE = "live"
    DELETE = "delete"
    FUTURE = "future"
    STRAY = "stray"


def filename_prefix(offset: int) -> str:
    """The 20-digit, zero-padded decimal base offset."""
    return f"{offset:020d}"


def segment_file_name(offset: int, suffix: str) -> str:
    return filename_prefix(offset) + suffix


def offset_from_file_name(name: str) -> int:
    """Kafka's offsetFromFileName: ``Long.parseLong`` of everything before the first ``.``."""
    dot = name.find(".")
    prefix = name if dot < 0 else name[:dot]
    if dot == 20 and prefix.isascii() and prefix.isdigit() and (offset := int(prefix)) <= INT64_MAX:
        return offset  # the usual padded name, without the regular expression
    if dot < 0 or not _JAVA_INT.fullmatch(prefix) or not -(2**63) <= int(prefix) <= INT64_MAX:
        raise InvalidFileNameError(name, f"file name does not start with a decimal offset: {prefix!r}")
    return int(prefix)


def is_log_file(name: str) -> bool:
    return name.endswith(LOG_SUFFIX)


def is_index_file(name: str) -> bool:
    return name.endswith(INDEX_SUFFIXES)


_SUFFIXED_DIR = {
    sfx: re.compile(r"(\S+)-(\S+)\.(\S+)" + re.escape(sfx), re.ASCII)
    for sfx in (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)
}
_KIND = {DELETE_DIR_SUFFIX: DirKind.DELETE, FUTURE_DIR_SUFFIX: DirKind.FUTURE, STRAY_DIR_SUFFIX: DirKind.STRAY}


def parse_partition_dir(name: str) -> tuple[TopicPartition, DirKind]:
    """Kafka's LocalLog.parseTopicPartitionName, exactly (errors are fatal in a data dir)."""
    if not name or "-" not in name:
        raise InvalidPartitionDirError(name, "no '-' in the name")
    kind = DirKind.LIVE
    base = name
    for sfx, pattern in _SUFFIXED_DIR.items():
        if name.endswith(sfx):
            if not pattern.fullmatch(name):
                raise InvalidPartitionDirError(name, f"a {sfx} directory must be <topic>-<partition>.<uuid>{sfx}")
            kind = _KIND[sfx]
            base = name[: name.rindex(".")]
            break
    i = base.rindex("-")
    topic, part = base[:i], base[i + 1 :]
    if not topic or not part:
        raise InvalidPartitionDirError(name, "empty topic or partition")
    if not _JAVA_INT.fullmatch(part) or not -(2**31) <= int(part) <= 2**31 - 1:
        raise InvalidPartitionDirError(name, f"partition {part!r} is not an int32")
    return TopicPartition(topic, int(part)), kind


def _capped(tp: TopicPartition, tail: str) -> str:
    head = f"-{tp.partition}{tail}"
    return tp.topic[: MAX_DIR_NAME - len(head)] + head


def partition_dir_name(tp: TopicPartition, kind: DirKind = DirKind.LIVE, dir_uuid: uuid.UUID | None = None) -> str:
    """The directory name Kafka gives a log (``-delete``/``-stray`` capped to 255 chars)."""
    if kind is DirKind.LIVE:
        return str(tp)
    tail = f".{(dir_uuid or uuid.uuid4()).hex}-{kind.value}"
    if kind is DirKind.FUTURE:
        return f"{tp}{tail}"
    return _capped(tp, tail)
