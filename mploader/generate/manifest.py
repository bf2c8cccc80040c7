"""The ground-truth manifest: ``manifest.json`` (config, totals, faults) and ``manifest.jsonl``
(one line per data dir, batch chunk, segment, snapshot, partition and fault), written as the
generator goes and read back by :func:`iter_manifest` and :func:`read_manifest`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MANIFEST_JSON = "manifest.json"
MANIFEST_LINES = "manifest.jsonl"
MANIFEST_FORMAT = "mploader-generate-manifest"
MANIFEST_VERSION = 1

#: The fields of one row of a ``batches`` line of the manifest, in order.
BATCH_FIELDS = (
    "position", "size", "base_offset", "last_offset", "records", "max_timestamp", "leader_epoch",
    "producer_id", "producer_epoch", "base_sequence", "transactional", "control",
)


class _Manifest:
    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / MANIFEST_LINES
        self._f = open(self.path, "w", encoding="utf-8", buffering=1 << 20)

    def line(self, obj: dict[str, Any]) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")))
        self._f.write("\n")

    def close(self) -> None:
        self._f.close()


def iter_manifest(out_dir: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The lines of ``manifest.jsonl``, one dict each, streaming (any size)."""
    with open(Path(out_dir) / MANIFEST_LINES, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def read_manifest(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The whole manifest as nested dicts (for small outputs: tests, tools).

    Returns ``manifest.json`` plus ``partitions``: ``{(dir, topic, partition): partition line}``,
    where each partition line gains ``segments`` (segment lines in order, each with ``batches``:
    one dict per batch, keys ``BATCH_FIELDS``) and ``snapshots`` (snapshot lines).
    """
    out_dir = Path(out_dir)
    with open(out_dir / MANIFEST_JSON, encoding="utf-8") as f:
        summary: dict[str, Any] = json.load(f)
    fields = summary.get("batch_fields", list(BATCH_FIELDS))
    partitions: dict[tuple[str, str, int], dict[str, Any]] = {}
    pending_batches: dict[tuple[str, str, int, str], list[dict[str, Any]]] = {}
    pending_segments: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    pending_snapshots: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    data_dirs: list[dict[str, Any]] = []
    for line in iter_manifest(out_dir):
        kind = line["type"]
        if kind == "data_dir":
            data_dirs.append(line)
            continue
        if kind == "fault":
            continue  # manifest.json lists them
        key = (line["dir"], line["topic"], line["partition"])
        if kind == "batches":
            pending_batches.setdefault((*key, line["segment"]), []).extend(dict(zip(fields, r)) for r in line["rows"])
        elif kind == "segment":
            line["batches"] = pending_batches.pop((*key, line["file"]), [])
            pending_segments.setdefault(key, []).append(line)
        elif kind == "snapshot":
            pending_snapshots.setdefault(key, []).append(line)
        elif kind == "partition":
            line["segments"] = pending_segments.pop(key, [])
            line["snapshots"] = pending_snapshots.pop(key, [])
            partitions[key] = line
    summary["partitions"] = partitions
    summary["data_dir_lines"] = data_dirs
    return summary


def _is_generator_output(out_dir: Path) -> bool:
    try:
        with open(out_dir / MANIFEST_JSON, encoding="utf-8") as f:
            fmt: object = json.load(f).get("format")  # AttributeError: not a JSON object
            return fmt == MANIFEST_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


__all__ = ["BATCH_FIELDS", "MANIFEST_FORMAT", "MANIFEST_JSON", "MANIFEST_LINES", "MANIFEST_VERSION", "iter_manifest",
           "read_manifest"]
