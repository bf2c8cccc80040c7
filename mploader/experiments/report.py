"""What an experiment leaves: CSV and JSON of the runs, their points and their samples, PNG plots (each with its
data beside it), and a markdown report with the command, the machine's facts and what the runs show.

The facts are those that decide the figures: CPU model, cores (and how many this process may use), memory,
kernel, and for each place the mount and the chain of devices with their model, scheduler and rotational
flag (repeated as the kernel reports it: a virtual disk's flag says nothing about the medium), and what the
device models.  The data's size, the CPUs and the device profiles are also on every figure (its subtitle).
The computed sentences are :mod:`.findings`'; the medians and ranges :mod:`.points`'; the busy host's
threshold :mod:`.host_load`'s.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from mploader.experiments.cache import can_drop_caches
from mploader.experiments.findings import agreement, findings
from mploader.experiments.host_load import BUSY_CPU_PERCENT, BUSY_READ_SHARE
from mploader.experiments.points import Point, points
from mploader.experiments.run import Place, RunResult
from mploader.host.cpus import usable_cpus

Draw = Callable[[Path, str], None]  # draws a figure to a path, with the report's subtitle


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_facts(places: Sequence[Place]) -> dict[str, Any]:
    return {
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cpus": usable_cpus(),
        "memory_bytes": psutil.virtual_memory().total,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "drop_caches_permitted": can_drop_caches(),
        "places": {p.label: {"storage": p.storage.describe(), "profile": p.profile,
                             "read_limit_bytes_per_s": p.limits.bytes_per_s, "read_limit_iops": p.limits.iops}
                   for p in places},
    }


def subtitle(facts: dict[str, Any], scale: str) -> str:
    """What every figure says under its title: the data, the CPUs, the devices' profiles."""
    profiles = list(dict.fromkeys(p["profile"] for p in facts["places"].values() if p["profile"]))
    return "\n".join([f"{scale}; {facts['usable_cpus']} usable of {facts['logical_cpus']} CPUs ({facts['cpu_model']})",
                      *profiles])


def _samples_rows(runs: Sequence[RunResult]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        for s in r.samples:
            dev = s.disks.get(r.device) if r.device else None
            disk = s.disks.get(r.disk) if r.disk else None
            row: dict[str, Any] = {
                "run": r.id, "t": round(s.t, 3), "device": r.device,
                "util": None if dev is None else round(dev.util_percent, 1),
                "read_mb_s": None if dev is None else round(dev.read_bytes_per_s / 1e6, 2),
                "read_iops": None if dev is None else round(dev.read_iops, 1),
                "read_request_kb": None if dev is None or dev.read_request_bytes is None
                else round(dev.read_request_bytes / 1e3, 1),
                "read_await_ms": None if dev is None or dev.read_await_ms is None else round(dev.read_await_ms, 2),
                "queue_depth": None if dev is None else round(dev.queue_depth, 2),
                "throttle_use": round(s.throttle_use[r.device], 1) if r.device in s.throttle_use else None,
                "disk": r.disk, "disk_util": None if disk is None else round(disk.util_percent, 1),
                "cpu_mean": round(sum(s.cpu_percent) / max(1, len(s.cpu_percent)), 1),
                "load_cpu": round(s.load_cpu_percent, 1),
                "others_cpu": None if s.others_cpu_percent is None else round(s.others_cpu_percent, 1),
                "load_read_mb": None if s.load_read_bytes is None else round(s.load_read_bytes / 1e6, 2),
                "rss_parent_mb": round((s.rss_parent or 0) / 1e6, 1), "workers": len(s.rss_workers),
                "rss_workers_mb": round(sum(s.rss_workers.values()) / 1e6, 1),
                "shm_mb": round(s.shm_bytes / 1e6, 2),
            }
            row.update({f"cpu{i}": round(c, 1) for i, c in enumerate(s.cpu_percent)})
            rows.append(row)
    return rows


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(rows)


REPORT_COLUMNS = ("run", "place", "data_dirs", "restart", "mode", "cache", "recovery_threads", "choice", "seconds",
                  "process_seconds", "throughput_mb_s", "util_mean", "throttle_use_mean", "read_mb_s_mean",
                  "queue_depth_mean", "cpu_mean", "load_cpu_mean", "others_cpu_mean", "others_read_mb", "busy_host",
                  "rss_parent_peak_mb", "rss_workers_peak_mb", "shm_peak_mb")


def _range(p: Point, value: Callable[[RunResult], float | None], digits: int = 2) -> str:
    s = p.spread(value)
    if s is None:
        return ""
    return f"{s.median:.{digits}f} [{s.low:.{digits}f}-{s.high:.{digits}f}]"


def _points_table(pts: list[Point]) -> list[str]:
    head = ("place", "data dirs", "restart", "mode", "cache", "choice", "rounds", "seconds", "whole process s",
            "device busy %", "others' CPU %", "busy host")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in pts:
        s = p.spec
        busy = ", ".join(f"run {i}" for i in p.busy_rounds) or "no"
        cells = (p.place, str(s.data_dirs), s.restart, "dry run" if s.dry_run else "recover", s.cache, s.choice,
                 str(len(p.runs)), _range(p, lambda r: r.seconds), _range(p, lambda r: r.process_seconds),
                 _range(p, RunResult.busy, 0), _range(p, lambda r: r.mean("others_cpu"), 0), busy)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _busy_lines(runs: Sequence[RunResult]) -> list[str]:
    flagged = [(r, why) for r in runs if (why := r.busy_host())]
    if not flagged:
        return ["No run was flagged: other processes stayed under the thresholds in every run."]
    return [f"* run {r.id} ({r.place}, {r.spec.choice}): " + "; ".join(why) for r, why in flagged]


def _adaptive_lines(runs: Sequence[RunResult]) -> list[str]:
    lines = []
    for r in runs:
        if r.spec.workers == "adaptive" and r.spec.loader == "mploader":
            counts = "; ".join(f"{os.path.basename(d)}: " + " -> ".join(f"{int(n)} at {t:.2f} s" for t, n in series)
                               for d, series in r.worker_counts().items())
            lines.append(f"* run {r.id} ({r.place}, {r.spec.data_dirs} data dir(s), {r.spec.restart}): "
                         + (counts or "held its first count throughout"))
    return lines


@dataclass(slots=True)
class Report:
    """Everything a report is made of; :meth:`write` puts it in ``out_dir``."""

    name: str  # file name stem, e.g. "sweep"
    title: str
    command: str
    facts: dict[str, Any]
    data: str  # what was loaded
    runs: list[RunResult]
    notes: list[str] = field(default_factory=list)  # e.g. skipped device classes, the cache method
    seconds: float = 0.0
    plots: list[tuple[str, Draw]] = field(default_factory=list)  # (caption, draw to a path with the subtitle)
    scale: str = ""  # the data's size in a line, for the figures' subtitles (default: ``data``)
    repeat: int = 1  # the rounds asked for (--repeat)

    @property
    def subtitle(self) -> str:
        return subtitle(self.facts, self.scale or self.data)

    def document(self) -> dict[str, Any]:
        """The JSON report: everything but the figures."""
        return {"title": self.title, "subtitle": self.subtitle, "command": self.command, "facts": self.facts,
                "data": self.data, "notes": self.notes, "seconds": round(self.seconds, 1), "repeat": self.repeat,
                "busy_host_thresholds": {"others_cpu_percent_of_one_core": BUSY_CPU_PERCENT,
                                         "others_reads_share": BUSY_READ_SHARE},
                "findings": findings(self.runs), "agreement": agreement(self.runs),
                "points": [p.to_json() for p in points(self.runs)], "runs": [r.to_json() for r in self.runs]}

    def write(self, out_dir: Path) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        written = [out_dir / f"{self.name}-runs.csv", out_dir / f"{self.name}-points.csv",
                   out_dir / f"{self.name}-samples.csv", out_dir / f"{self.name}.json"]
        _write_csv(written[0], [r.row() for r in self.runs])
        _write_csv(written[1], [_flat(p.to_json()) for p in points(self.runs)])
        _write_csv(written[2], _samples_rows(self.runs))
        written[3].write_text(json.dumps(self.document(), separators=(",", ":")) + "\n")  # compact: samples mostly
        images = []
        for i, (caption, draw) in enumerate(self.plots):
            png = out_dir / f"{self.name}-{i + 1}.png"
            draw(png, self.subtitle)
            images.append((caption, png.name))
            written += [png, png.with_suffix(".json")]
        md = out_dir / f"{self.name}.md"
        md.write_text(self.markdown(images))
        written.append(md)
        return written

    def _head(self) -> list[str]:
        f = self.facts
        lines = [f"# {self.title}", "", *[f"*{line}*  " for line in self.subtitle.splitlines()], "",
                 f"Command: `{self.command}`", "",
                 f"Made {time.strftime('%Y-%m-%d %H:%M')} in {self.seconds:.0f} s. Files beside this one: "
                 f"`{self.name}-runs.csv` (one row per run), `{self.name}-points.csv` (one row per point: the median, "
                 f"min and max of its rounds), `{self.name}-samples.csv` (one row per sample), `{self.name}.json` (all "
                 f"of them, with every device's figures per sample), and each figure's data as JSON beside it.", "",
                 "## Machine", "",
                 f"* CPU: {f['cpu_model']}, {f['logical_cpus']} logical CPUs ({f['physical_cores']} cores), "
                 f"{f['usable_cpus']} usable by this process",
                 f"* memory {f['memory_bytes'] / 2**30:.1f} GiB, kernel {f['kernel']}, Python {f['python']}",
                 f"* dropping the page cache (`/proc/sys/vm/drop_caches`) permitted: "
                 f"{'yes' if f['drop_caches_permitted'] else 'no (posix_fadvise DONTNEED per file instead)'}"]
        for label, place in f["places"].items():
            limit = ""
            if place["read_limit_bytes_per_s"] or place["read_limit_iops"]:
                limit = (f"; reads capped at {(place['read_limit_bytes_per_s'] or 0) / 1e6:.0f} MB/s and "
                         f"{place['read_limit_iops'] or 'unlimited'} IOPS by a cgroup")
            profile = f" ({place['profile']})" if place["profile"] else ""
            lines.append(f"* {label}{profile}: {place['storage']}{limit}")
        return lines

    def markdown(self, images: list[tuple[str, str]]) -> str:
        pts = points(self.runs)
        lines = [*self._head(), "", "## Data", "", self.data, "",
                 "## How to read it", "",
                 f"Every point was run {self.repeat} time(s) (`--repeat`), the rounds one after the other in the same "
                 f"order; a point's figure is the median of its rounds, with the lowest and highest round beside it "
                 f"(the bars in the figures). A run is flagged **busy host** when other processes than the "
                 f"experiment's used more than {BUSY_CPU_PERCENT:.0f}% of a core on average while it ran, or read more "
                 f"than {100 * BUSY_READ_SHARE:.0f}% of what its devices read (docs/experiments.md); a point with a "
                 f"flagged round is drawn hollow.", ""]
        if self.notes:
            lines += ["## Notes", "", *[f"* {n}" for n in self.notes], ""]
        lines += ["## What the runs show (computed, from the medians)", "", *[f"* {x}" for x in findings(self.runs)],
                  ""]
        same = agreement(self.runs)
        if same:
            lines += ["## What each load loaded (computed)", "", *[f"* {x}" for x in same], ""]
        lines += ["## Busy host", "", *_busy_lines(self.runs), ""]
        adaptive = _adaptive_lines(self.runs)
        if adaptive:
            lines += ["## The adaptive runs' worker counts", "", "Per data dir, the count the controller set and "
                      "when (seconds into the load), from the count it started with:", "", *adaptive, ""]
        for caption, name in images:
            lines += [f"![{caption}]({name})", "", f"*{caption}*", ""]
        lines += ["## Points (median [min-max] of the rounds)", "", *_points_table(pts), ""]
        lines += ["## Runs", "", "| " + " | ".join(REPORT_COLUMNS) + " |", "|" + "---|" * len(REPORT_COLUMNS)]
        for r in self.runs:
            row = r.row()
            lines.append("| " + " | ".join("" if row[c] is None else str(row[c]) for c in REPORT_COLUMNS) + " |")
        lines += ["", "seconds: the load in its process (mploader's `load_logs` call; Kafka's `loadLogs`, the slowest "
                  "data dir's); whole process: the load's process from start to exit (interpreter or JVM start "
                  "included); throughput: bytes scanned per second of the load (mploader's count); util: the device's "
                  "%util as iostat computes it, mean over the run; throttle_use: the reads' share of the cgroup's "
                  "limit; others_cpu: other processes' CPU (100 = one core); others_read_mb: their reads of the "
                  "run's devices; RSS and shared memory: peaks.", ""]
        return "\n".join(lines)


def _flat(doc: dict[str, Any]) -> dict[str, Any]:
    """A point's JSON as a CSV row: each spread as three columns."""
    out: dict[str, Any] = {}
    for k, v in doc.items():
        if isinstance(v, dict):
            out.update({f"{k}_{m}": x for m, x in v.items()})
        else:
            out[k] = " ".join(map(str, v)) if isinstance(v, list) else v
    return out


__all__ = ["Draw", "Report", "cpu_model", "machine_facts", "subtitle"]
