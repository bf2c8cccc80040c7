"""What every sub-command shares: exit codes, usage errors, sizes in and out."""

from __future__ import annotations

import argparse
import re

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_UNVERIFIED = 3  # load --verify-after: the load succeeded, the check after it could not run
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM: stopped as by Ctrl-C (mploader.cli.failures)

EXIT_CODES_HELP = """exit status:
  0    every data dir loaded (generate: written)
  1    a data dir went offline, a Kafka broker would fail to start on this input, an I/O error (a
       full disk, too many open files: the message names the file and what to do) or out of memory
       (a start-up failure found before recovery changes nothing; the message says so, or names the
       directories a failure found during recovery had already changed)
  2    usage error: bad arguments, a data dir that does not exist (without --create-missing), or a
       folder that holds data dirs given for one
  3    load --verify-after: the load succeeded, but the check after it could not run (the message
       says why; mploader verify checks the data dirs later)
  130  interrupted (Ctrl-C): what was written is what a broker itself could have left; load again
  143  stopped by SIGTERM: as 130, the load stopped at a safe point; load again
with --json, a failure prints {"schema": 1, "error": {"kind", "message", ...}} on stdout, same exit status"""


class UsageError(Exception):
    """Bad arguments found after parsing (exit code 2)."""


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)b?\s*", re.IGNORECASE)


def parse_workers(text: str, flag: str = "--workers", words: tuple[str, ...] = ("auto",)) -> int | str:
    """``--workers N|auto`` (or another ``flag`` of the same form; ``words``: the names it takes besides a number)."""
    if text in words:
        return text
    try:
        n = int(text)
    except ValueError:
        named = " or ".join(repr(w) for w in words)
        raise argparse.ArgumentTypeError(f"{flag} takes a number >= 1 or {named}, not {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{flag} must be >= 1")
    return n


def parse_size(text: str) -> int:
    """``"10GB"`` -> 10_000_000_000, ``"256KiB"`` -> 262144, ``"4096"`` -> 4096 (B optional)."""
    m = _SIZE.fullmatch(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 4096, 256KiB, 60MB, 10GB)")
    number, unit, binary = m.groups()
    power = "kmgtp".find(unit.lower()) + 1 if unit else 0
    value = float(number) * (1024 if binary else 1000) ** power
    return int(value)


def format_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError
