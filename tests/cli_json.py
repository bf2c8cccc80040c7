"""Run ``mploader`` as an operator does, and hold every ``--json`` document to the published schema
(docs/mploader-output.schema.json; ``mploader verify``'s report: docs/mploader-verify.schema.json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_PATH = ROOT / "docs" / "mploader-output.schema.json"
VERIFY_SCHEMA_PATH = ROOT / "docs" / "mploader-verify.schema.json"


@cache
def _validator(path: Path = SCHEMA_PATH) -> Any:
    import jsonschema

    schema = json.loads(path.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def validate(doc: Any) -> Any:
    """``doc`` if it is valid against its schema (a verify report's, or the load's and the error document's);
    raises jsonschema.ValidationError otherwise."""
    verify_report = isinstance(doc, dict) and doc.get("command") == "verify"
    _validator(VERIFY_SCHEMA_PATH if verify_report else SCHEMA_PATH).validate(doc)
    return doc


def run(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m mploader ARGS`` in a subprocess; with ``--json`` its stdout must be one valid document."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    out = subprocess.run([sys.executable, "-m", "mploader", *args], capture_output=True, text=True, env=full_env,
                         timeout=timeout)
    if "--json" in args:
        validate(json.loads(out.stdout))
    return out
