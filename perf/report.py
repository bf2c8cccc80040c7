"""The benchmarks' one way of writing into perf/README.md: a generated block between two markers."""

from __future__ import annotations

import json
from pathlib import Path


class Lines:
    """What a benchmark prints, kept for its README block: ``say`` prints a line and keeps it."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)


def replace_section(path: Path, name: str, lines: list[str]) -> None:
    """Put ``lines`` between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in ``path`` (appended when
    the markers are not there yet); the rest of the file stays as it is."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = path.read_text() if path.exists() else ""
    block = "\n".join([begin, *lines, end])
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def publish(figures: object, lines: list[str], *, as_json: bool, report: Path | None, section: str) -> None:
    """Print ``figures`` as JSON (``as_json``), or else ``lines``, kept in ``report``'s ``section`` when given."""
    if as_json:
        print(json.dumps(figures, indent=1))
        return
    out = Lines()
    for line in lines:
        out.say(line)
    if report is not None:
        replace_section(report, section, out.lines)
