"""Kafka's own loader beside mploader's: the oracle of ../shared/kafka-oracle (Kafka's ``LogLoader`` built from
its source, driven for one data dir as ``LogManager.loadLogs`` drives it), and what each loader loaded, in one
form, to compare them.

* :func:`find_oracle`: the launcher given, else ``$KAFKA_ORACLE``, else ``~/.cache/kafka-oracle/oracle``;
* :func:`run_oracles`: one load of a broker's data dirs by Kafka's loader with ``num.recovery.threads.per.data.dir``
  threads: one oracle process per data dir, all at once, as ``LogManager.loadLogs`` loads every dir with a pool
  of its own at the same time.  Its ``seconds`` is the slowest dir's ``loadLogs`` (the oracle's summary); each
  process's JVM start is outside it and inside the whole process's time;
* :func:`oracle_partitions` and :func:`mploader_partitions`: per partition directory, the kind, log start and end
  offsets, recovery point (Kafka's after ``UnifiedLog`` raised it to the log start offset), the segments' base
  offsets and sizes, and the leader epochs; :func:`compare` lists how two loads differ.

This module is imported by the experiment's child process, so it imports nothing heavy.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ORACLE_ENV = "KAFKA_ORACLE"
DEFAULT_ORACLE = Path.home() / ".cache" / "kafka-oracle" / "oracle"
Partitions = dict[str, dict[str, Any]]  # partition dir name -> what was loaded


class OracleFailed(Exception):
    """Kafka's loader exited with an error, or reported a partition it could not load."""


def find_oracle(given: str | None = None) -> str | None:
    """The oracle's launcher: ``given``, ``$KAFKA_ORACLE`` or ``~/.cache/kafka-oracle/oracle``, the first that
    can be run; None when there is none."""
    for candidate in (given, os.environ.get(ORACLE_ENV), str(DEFAULT_ORACLE)):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def oracle_partitions(text: str) -> tuple[Partitions, dict[str, Any]]:
    """The oracle's output: its partitions (the comparable form) and its summary line; OracleFailed on an error
    line."""
    parts, summary, errors = {}, {}, []
    for line in text.splitlines():
        if not line.strip():
            continue
        o = json.loads(line)
        if o["type"] == "partition":
            parts[os.path.basename(o["dir"])] = {
                "kind": o["kind"], "log_start_offset": o["log_start_offset"], "log_end_offset": o["log_end_offset"],
                "recovery_point": o["unified_log_recovery_point"],
                "segments": [[s["base_offset"], s["size"]] for s in o["segments"]],
                "epochs": [list(e) for e in o["epochs"]],
            }
        elif o["type"] == "summary":
            summary = o
        else:
            errors.append(o)
    if errors:
        raise OracleFailed(f"Kafka reported {len(errors)} error line(s), first: {errors[0]}")
    return parts, summary


def mploader_partitions(logs: Sequence[Mapping[str, Any]]) -> Partitions:
    """``LoadResult.to_json()["logs"]`` in the form of :func:`oracle_partitions`."""
    return {os.path.basename(lg["dir"]): {
        "kind": {"live": "current"}.get(lg["kind"], lg["kind"]),
        "log_start_offset": lg["log_start_offset"], "log_end_offset": lg["log_end_offset"],
        "recovery_point": lg["recovery_point"],
        "segments": [[s["base_offset"], s["size_bytes"]] for s in lg["segments"]],
        "epochs": [list(e) for e in lg["leader_epochs"]],
    } for lg in logs}


def compare(ref: Partitions, got: Partitions, max_lines: int = 10, ref_name: str = "Kafka",
            got_name: str = "this run") -> list[str]:
    """How ``got`` differs from ``ref``, a line per partition and field (the first ``max_lines``)."""
    diffs = []
    for name in sorted(set(ref) | set(got)):
        if name not in got:
            diffs.append(f"{name}: loaded by {ref_name} only")
        elif name not in ref:
            diffs.append(f"{name}: loaded by {got_name} only")
        else:
            diffs += [f"{name} {k}: {ref_name} {str(v)[:300]} / {got_name} {str(got[name].get(k))[:300]}"
                      for k, v in ref[name].items() if got[name].get(k) != v]
    return diffs[:max_lines] + ([f"... and {len(diffs) - max_lines} more"] if len(diffs) > max_lines else [])


def run_oracles(oracle: str, dirs: Sequence[str], threads: int) -> dict[str, Any]:
    """Kafka's load of ``dirs``, one oracle process per dir at once (see the module docstring); the child's
    document: ``seconds`` (the slowest dir's loadLogs), ``stats``, ``partitions``."""
    with tempfile.TemporaryDirectory(prefix="mploader-oracle-") as out_dir:
        outs = [Path(out_dir) / f"{i}.out" for i in range(len(dirs))]
        errs = [Path(out_dir) / f"{i}.err" for i in range(len(dirs))]
        t0 = time.perf_counter()
        procs = []
        for d, out, err in zip(dirs, outs, errs):
            with open(out, "wb") as o, open(err, "wb") as e:  # files, not pipes: neither process waits on the other
                procs.append(subprocess.Popen([oracle, "datadir", d, "--threads", str(threads)], stdout=o, stderr=e))
        codes = [p.wait() for p in procs]
        wall = time.perf_counter() - t0
        parts: Partitions = {}
        summaries = []
        for code, out, err in zip(codes, outs, errs):
            if code != 0:
                raise OracleFailed(f"the oracle exited {code}: {err.read_text()[-2000:]}")
            loaded, summary = oracle_partitions(out.read_text())
            parts.update(loaded)
            summaries.append(summary)
    seconds = max(float(s.get("seconds", 0.0)) for s in summaries)
    stats = {"bytes_read": 0, "segments_recovered": 0, "workers_per_dir": 0, "oracle_wall_seconds": wall,
             "jvm_uptime_seconds": max(float(s.get("jvm_uptime_seconds", 0.0)) for s in summaries)}
    return {"seconds": seconds, "stats": stats, "partitions": parts}


__all__ = ["DEFAULT_ORACLE", "ORACLE_ENV", "OracleFailed", "Partitions", "compare", "find_oracle",
           "mploader_partitions", "oracle_partitions", "run_oracles"]
