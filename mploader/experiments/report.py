"""What an experiment leaves: CSV and JSON of the runs and their samples, PNG plots, and a markdown report
with the command, the machine's facts and what the runs show.

The facts are those that decide the figures: CPU model, cores (and how many this process may use), memory,
kernel, and for each place the mount and the chain of devices with their model, scheduler and rotational
flag (repeated as the kernel reports it: a virtual disk's flag says nothing about the medium).
:func:`findings` states, per group of runs, where the knee is (the fewest workers within 5% of the
fastest load) and whether more workers made the load slower; it computes, the reader judges.
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
from mploader.experiments.run import Place, RunResult, best_of
from mploader.host.cpus import usable_cpus

KNEE_SHARE = 0.95  # the knee: the fewest workers reaching this share of the best speed (1 / seconds)
HURT_SHARE = 0.90  # more workers "hurt" when the most workers reach less than this share of the best speed


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
        "places": {p.label: {"storage": p.storage.describe(),
                             "read_limit_bytes_per_s": p.limits.bytes_per_s, "read_limit_iops": p.limits.iops}
                   for p in places},
    }


def _group_key(r: RunResult) -> tuple[Any, ...]:
    s = r.spec
    return (r.place, "dry run" if s.dry_run else "recover", s.restart, s.cache, s.recovery_threads)


def _describe_key(key: tuple[Any, ...]) -> str:
    place, mode, restart, cache, threads = key
    return f"{place}, {restart} restart, {mode}, {cache} cache, {threads} recovery thread(s)"


def _speed(r: RunResult) -> str:
    return f"{r.seconds:.2f} s" + (f" ({r.throughput / 1e6:.0f} MB/s)" if r.bytes_read else "")


def findings(runs: Sequence[RunResult]) -> list[str]:
    """One line per group of runs that differ only in the worker count: the knee, whether more hurt, the
    adaptive run against the best fixed count (all by the load's seconds: a clean restart scans next to
    nothing, so MB/s would say nothing there); and one line per rate-limited run: the rate it held.  A run
    repeated in several rounds counts with its fastest round."""
    groups: dict[tuple[Any, ...], list[RunResult]] = {}
    lines = []
    runs = best_of(runs)
    for r in runs:
        if r.spec.max_read_bytes_per_sec is None:
            groups.setdefault(_group_key(r), []).append(r)
    for key, group in groups.items():
        fixed = sorted((r for r in group if isinstance(r.spec.workers, int)), key=lambda r: int(r.spec.workers))
        if not fixed:
            continue
        best = min(fixed, key=lambda r: r.seconds)
        knee = next(r for r in fixed if r.seconds * KNEE_SHARE <= best.seconds)
        most = fixed[-1]
        text = (f"{_describe_key(key)}: fastest {_speed(best)} with {best.spec.workers} worker(s); knee at "
                f"{knee.spec.workers} (the fewest within {100 - KNEE_SHARE * 100:.0f}% of the fastest)")
        if len(fixed) > 1:
            share = best.seconds / most.seconds if most.seconds else 1.0
            verdict = "slower: more workers hurt" if share < HURT_SHARE else "no real loss"
            text += f"; {most.spec.workers} workers: {_speed(most)}, {100 * share:.0f}% of the best speed ({verdict})"
        for r in group:
            if r.spec.workers == "adaptive" and r.seconds:
                share = best.seconds / r.seconds
                text += f"; adaptive: {_speed(r)}, {100 * share:.0f}% of the fastest fixed count's speed"
        lines.append(text)
    for r in runs:
        rate = r.spec.max_read_bytes_per_sec
        if rate:
            disk = r.mean("read_bytes_per_s")
            lines.append(f"{r.place}, IO budget {rate / 1e6:.0f} MB/s with {r.spec.workers} worker(s): scanned "
                         f"{r.throughput / 1e6:.1f} MB/s, {100 * r.throughput / rate:.0f}% of the budget"
                         + ("" if disk is None else f"; the device read {disk / 1e6:.1f} MB/s while it ran"))
    return lines


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


REPORT_COLUMNS = ("run", "place", "restart", "mode", "cache", "recovery_threads", "workers", "seconds",
                  "throughput_mb_s", "util_mean", "throttle_use_mean", "read_mb_s_mean", "queue_depth_mean",
                  "cpu_mean", "load_cpu_mean", "rss_parent_peak_mb", "rss_workers_peak_mb", "shm_peak_mb")


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
    plots: list[tuple[str, Callable[[Path], None]]] = field(default_factory=list)  # (caption, draw to path)

    def write(self, out_dir: Path) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        written = [out_dir / f"{self.name}-runs.csv", out_dir / f"{self.name}-samples.csv",
                   out_dir / f"{self.name}.json"]
        _write_csv(written[0], [r.row() for r in self.runs])
        _write_csv(written[1], _samples_rows(self.runs))
        doc = {"title": self.title, "command": self.command, "facts": self.facts, "data": self.data,
               "notes": self.notes, "seconds": round(self.seconds, 1), "findings": findings(self.runs),
               "runs": [r.to_json() for r in self.runs]}
        written[2].write_text(json.dumps(doc, separators=(",", ":")) + "\n")  # compact: the samples are most of it
        images = []
        for i, (caption, draw) in enumerate(self.plots):
            png = out_dir / f"{self.name}-{i + 1}.png"
            draw(png)
            images.append((caption, png.name))
            written.append(png)
        md = out_dir / f"{self.name}.md"
        md.write_text(self.markdown(images))
        written.append(md)
        return written

    def markdown(self, images: list[tuple[str, str]]) -> str:
        f = self.facts
        lines = [f"# {self.title}", "", f"Command: `{self.command}`", "",
                 f"Made {time.strftime('%Y-%m-%d %H:%M')} in {self.seconds:.0f} s. Files beside this one: "
                 f"`{self.name}-runs.csv` (one row per run), `{self.name}-samples.csv` (one row per sample), "
                 f"`{self.name}.json` (both, with every device's figures per sample).", "",
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
            lines.append(f"* {label}: {place['storage']}{limit}")
        lines += ["", "## Data", "", self.data, ""]
        if self.notes:
            lines += ["## Notes", "", *[f"* {n}" for n in self.notes], ""]
        lines += ["## What the runs show (computed)", "", *[f"* {x}" for x in findings(self.runs)], ""]
        adaptive = [r for r in self.runs if r.spec.workers == "adaptive"]
        if adaptive:
            lines += ["## The adaptive runs' decisions", ""]
            for r in adaptive:
                lines.append(f"* run {r.id} ({r.place}, {r.spec.restart}, {r.spec.cache} cache): "
                             + ("; ".join(r.adaptive) if r.adaptive else "held its first count throughout"))
            lines.append("")
        for caption, name in images:
            lines += [f"![{caption}]({name})", "", f"*{caption}*", ""]
        lines += ["## Runs", "", "| " + " | ".join(REPORT_COLUMNS) + " |", "|" + "---|" * len(REPORT_COLUMNS)]
        for r in self.runs:
            row = r.row()
            lines.append("| " + " | ".join("" if row[c] is None else str(row[c]) for c in REPORT_COLUMNS) + " |")
        lines += ["", "throughput: bytes scanned per second of the `load_logs` call; util: the device's %util as "
                  "iostat computes it, mean over the run; throttle_use: the reads' share of the cgroup's limit; "
                  "RSS and shared memory: peaks.", ""]
        return "\n".join(lines)


__all__ = ["Report", "cpu_model", "findings", "machine_facts"]
