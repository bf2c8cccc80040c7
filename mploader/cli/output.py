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


def tool_version() -> str:
    """``mploader._version``, which the package metadata takes too (pyproject.toml: a dynamic version): asking
    ``importlib.metadata`` cost every command ~20 ms of start-up for importing it."""
    return __version__


def tool() -> dict[str, str]:
    return {"name": "mploader", "version": tool_version()}


def error_document(kind: str, message: str, *, kafka_exception: str | None = None, path: str | None = None,
                   position: int | None = None, exit_code: int, **extra: Any) -> dict[str, Any]:
    """``kind``: ``usage``, ``startup_failed``, ``io_error``, ``corrupt_file``, ``interrupted`` or ``error``."""
    return {"schema": SCHEMA_VERSION, "tool": tool(),
            "error": {"kind": kind, "message": message, "kafka_exception": kafka_exception, "path": path,
                      "position": position, "exit_code": exit_code, **extra}}


def fail(args: argparse.Namespace, code: int, kind: str, message: str, **fields: Any) -> int:
    """A command's failure, answered as the command was asked: with ``--json`` the error document on stdout
    (``fields``: :func:`error_document`'s), else ``mploader COMMAND: message`` on stderr (``_prog``, the
    subcommand parser's name, :func:`mploader.cli.main.build_parser`).  Returns ``code``, the exit code."""
    if args.json:
        print_document(error_document(kind, message, exit_code=code, **fields))
    else:
        print(f"{args._prog}: {message}", file=sys.stderr)
    return code


def print_document(doc: dict[str, Any], stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(json.dumps(doc, indent=1) + "\n")  # one write: json.dump writes every token apart (72k for 300 logs)
    out.flush()
