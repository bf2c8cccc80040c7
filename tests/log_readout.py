"""A whole segment's valid prefix as recovery would keep it: the tests' reference reading of a ``.log``,
built on the package's framing (:func:`mploader.format.log.iter_entries`) and entry summaries."""

from __future__ import annotations

from dataclasses import dataclass

from mploader.errors import CorruptRecordError
from mploader.format.log import EntrySummary, iter_entries, summarize


@dataclass(frozen=True, slots=True)
class LogReadout:
    entries: list[EntrySummary]  # the valid prefix, as recovery would keep it
    valid_bytes: int  # the byte position where recovery would truncate
    stop_reason: str  # "end", "incomplete", "corrupt size", "crc"


def read_log(buf: bytes | memoryview, path: str | None = None) -> LogReadout:
    """Walk a whole segment and report where its valid prefix ends (no control-record parsing)."""
    out: list[EntrySummary] = []
    valid = 0
    try:
        for pos, size, magic in iter_entries(buf, 0, len(buf), path):
            s = summarize(buf, pos, size, magic)
            if not s.valid:
                return LogReadout(out, valid, "crc")
            out.append(s)
            valid = pos + size
    except CorruptRecordError:
        return LogReadout(out, valid, "corrupt size")
    return LogReadout(out, valid, "end" if valid == len(buf) else "incomplete")
