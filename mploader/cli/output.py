"""The ``--json`` documents (docs/json-output.md, schema in docs/mploader-output.schema.json).

Every document has ``"schema": SCHEMA_VERSION`` and ``"tool": {"name", "version"}``.  A load prints its
result (``"command": "load"``); any failure prints an error document instead, ``{"schema", "tool",
"error": {"kind", "message", "kafka_exception", "path", "position", ...}}``, with the exit code the text
output would have had.  ``SCHEMA_VERSION`` changes only when a field is removed or changes meaning;
new fields may appear in any version.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from mploader._version import __version__

SCHEMA_VERSION = 1

_printed: list[bool] = []  # a document went to stdout in this command: a later failure must not print a second


def new_command() -> None:
    """A command starts (:func:`mploader.cli.main.main`): no document printed yet."""
    _printed.clear()


def tool_version() -> str:
    """``mploader._version``, which the package metadata takes too (pyproject.toml: a dynamic version): asking
    ``importlib.metadata`` cost every command ~20 ms of start-up for importing it."""
    return __version__


def tool() -> dict[str, str]:
    return {"name": "mploader", "version": tool_version()}


def error_document(kind: str, message: str, *, kafka_exception: str | None = None, path: str | None = None,
                   position: int | None = None, exit_code: int, **extra: Any) -> dict[str, Any]:
    """``kind``: ``usage``, ``startup_failed``, ``io_error``, ``corrupt_file``, ``interrupted``, ``out_of_memory``,
    ``internal_error`` or ``error``."""
    return {"schema": SCHEMA_VERSION, "tool": tool(),
            "error": {"kind": kind, "message": message, "kafka_exception": kafka_exception, "path": path,
                      "position": position, "exit_code": exit_code, **extra}}


def fail(args: argparse.Namespace, code: int, kind: str, message: str, **fields: Any) -> int:
    """A command's failure, answered as the command was asked: with ``--json`` the error document on stdout
    (``fields``: :func:`error_document`'s), else ``mploader COMMAND: message`` on stderr (``_prog``, the
    subcommand parser's name, :func:`mploader.cli.main.build_parser`).  Returns ``code``, the exit code.  After
    the command's document went out (a failure while it was written), on stderr: stdout holds one document."""
    if getattr(args, "json", False) and not _printed:  # (a command without --json answers on stderr)
        print_document(error_document(kind, message, exit_code=code, **fields))
    else:
        print(f"{args._prog}: {message}", file=sys.stderr)
    return code


def print_document(doc: dict[str, Any], stream: TextIO | None = None) -> None:
    """``doc`` as :func:`document_text` lays it out, in one write (``json.dump`` writes every token apart: 72k writes
    for 300 logs)."""
    out = stream or sys.stdout
    if out is sys.stdout:
        _printed.append(True)
    out.write(document_text(doc) + "\n")
    out.flush()


_COMPACT = json.JSONEncoder(separators=(", ", ": ")).encode  # indent=None: the C encoder


def document_text(value: Any, depth: int = 0) -> str:
    """JSON laid out for a person as far as two levels down (the document's fields, then one line per log, per
    warning, per stat), each value below written on one line.  ``json.dumps(doc, indent=1)`` would take Python's
    own encoder (the C one has no indent): 13-15 ms for a 300-partition load's document, against 3-4 ms."""
    if depth >= 2 or not isinstance(value, (dict, list)) or not value or (
            isinstance(value, dict) and not all(isinstance(k, str) for k in value)):  # json's own key conversions
        return _COMPACT(value)
    pad = " " * (depth + 1)
    if isinstance(value, dict):
        items = [f"{pad}{_COMPACT(str(k))}: {document_text(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad[1:] + "}"
    return "[\n" + ",\n".join(pad + document_text(v, depth + 1) for v in value) + "\n" + pad[1:] + "]"
