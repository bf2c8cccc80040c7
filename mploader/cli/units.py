"""Sizes and worker counts in and out of the command line (``--workers``, ``--max-read-rate``, "1.2 GB")."""

from __future__ import annotations

import argparse
import re

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
