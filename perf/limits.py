#!/usr/bin/env python3
"""Limits of the host, measured: open files against the number of segments, memory against their bytes.

* ``files``: a broker of ``--segments`` tiny segments (100,000 by default), every one recovered (recovery
  point 0: ``mploader.experiments.run.make_unclean``), loaded by a child process whose soft limit on open files is
  ``--open-files`` (1,024), with ``--workers`` Phase 1 workers (which inherit the limit).  Sampled every 50 ms:
  the descriptors each process of the load holds (the parent, each worker).
* ``memory``: brokers whose descriptors (batches) and bytes vary apart, each loaded the same way (every segment
  recovered, ``--workers`` workers) by a fresh child process, sampled every 50 ms: the peak anonymous memory
  plus shared memory (``RssAnon + RssShmem`` in ``/proc/<pid>/status``: what the load allocates, batch tables in
  /dev/shm included) of the parent and of the largest worker, and apart from it the peak of mapped file pages
  (``RssFile``: the page cache the mappings of the segments touch, which the kernel takes back under pressure).
  The brokers: ``small`` (``--size`` / 64 in 1 KiB batches), ``big`` (``--size`` in 64 KiB batches: 64 times
  the bytes of ``small`` with the same number of segments and batches) and ``many`` (``--size`` / 8 in 1 KiB
  batches: 8 times the batches of ``small``).  Memory that follows the batches, not the bytes, is ``big``
  close to ``small`` and ``many`` above both.

Each load runs on a freshly generated broker (generated once, loaded once); the pool's parent keeps no head of
the scan order for itself (``PoolEngine.parent_head_bytes = 0``, as in the tests), so that the workers scan
from the first segment on at every size.  Everything is generated under
``--work`` (default: a temporary directory, removed after).

Usage: perf/limits.py [files] [memory] [--segments 100000] [--open-files 1024] [--size 10GB] [--workers 2]
                      [--work DIR] [--json] [--report perf/README.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mploader.cli.units import format_bytes, parse_size  # noqa: E402
from mploader.experiments.run import make_unclean  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from perf.report import publish  # noqa: E402

CHILD = """
import json, resource, sys, time
limit, workers, dirs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
if limit:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
import logging
logging.disable(logging.WARNING)
from mploader import LoaderConfig, load_logs
from mploader.engine.pool import PoolEngine
PoolEngine.parent_head_bytes = 0  # the workers scan from the first segment on, whatever the broker's size
t0 = time.perf_counter()
r = load_logs(dirs, LoaderConfig(segment_scan_workers_per_data_dir=workers), now_ms=0)
print(json.dumps({"seconds": time.perf_counter() - t0, "offline": r.offline_dirs,
                  "segments": sum(len(lg.segments) for lg in r.logs.values()),
                  "recovered": sum(len(lg.recovered_segments) for lg in r.logs.values()),
                  "bytes_read": r.stats.bytes_read}))
"""


def _status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile", "RssShmem"):
                out[key] = int(value.split()[0]) * 1024
    return out


class TreeSampler(threading.Thread):
    """Every ``interval`` s: the descriptors and memory of a process and of its workers (loky's resource
    trackers, which hold neither, are left out); keeps each process's peaks."""

    def __init__(self, pid: int, interval: float = 0.05):
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.interval = interval
        self.stop = threading.Event()
        self.peaks: dict[int, dict[str, int]] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                return
            for p in procs:
                try:
                    if "resource_tracker" in " ".join(p.cmdline()):
                        continue
                    figures = _status(p.pid) | {"fds": len(os.listdir(f"/proc/{p.pid}/fd"))}
                except (OSError, psutil.Error):
                    continue
                figures["anon_shmem"] = figures.get("RssAnon", 0) + figures.get("RssShmem", 0)
                peak = self.peaks.setdefault(p.pid, {})
                for k, v in figures.items():
                    peak[k] = max(peak.get(k, 0), v)
            time.sleep(self.interval)

    def parent(self) -> dict[str, int]:
        return self.peaks.get(self.root.pid, {})

    def workers(self) -> list[dict[str, int]]:
        return [v for pid, v in self.peaks.items() if pid != self.root.pid]


def load_in_child(dirs: list[str], workers: int, open_files: int = 0) -> tuple[dict[str, Any], TreeSampler]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(open_files), str(workers), *dirs],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    sampler = TreeSampler(proc.pid)
    sampler.start()
    out, err = proc.communicate()
    sampler.stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"the load failed ({proc.returncode}): {err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1]), sampler


def _recover_everything(root: Path) -> list[str]:
    dirs = sorted(root.glob("data-*"))
    make_unclean(dirs)
    return [str(d) for d in dirs]


def files(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    root = work / "files"
    t0 = time.perf_counter()
    summary = generate(root, GeneratorConfig(data_dirs=1, topics=2, partitions_per_topic=8,
                                             total_bytes=200 * args.segments, segment_bytes=200, batch_bytes=100,
                                             records_per_batch=1, faults=0, seed=1))
    generated = time.perf_counter() - t0
    nfiles = sum(len(files) for _, _, files in os.walk(root / "data-0"))
    result, sampler = load_in_child(_recover_everything(root), args.workers, args.open_files)
    shutil.rmtree(root)
    return {"segments": summary.segments, "files": nfiles, "generate_seconds": round(generated, 1),
            "open_files_limit": args.open_files, "workers": args.workers, "load_seconds": round(result["seconds"], 1),
            "offline": result["offline"], "recovered": result["recovered"],
            "peak_fds_parent": sampler.parent().get("fds", 0),
            "peak_fds_worker": max((w.get("fds", 0) for w in sampler.workers()), default=0)}


def memory(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    size = parse_size(args.size)
    shapes = {  # name: (bytes, batch bytes); 32 segments per partition at every size
        "small": (size // 64, 1024),
        "big": (size, 64 * 1024),
        "many": (size // 8, 1024),
    }
    partitions = 8
    out = []
    for name, (nbytes, batch) in shapes.items():
        root = work / name
        segment = max(batch, nbytes // (partitions * 32))
        t0 = time.perf_counter()
        summary = generate(root, GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=partitions,
                                                 total_bytes=nbytes, segment_bytes=segment, batch_bytes=batch,
                                                 records_per_batch=max(1, batch // 256), faults=0, seed=2))
        generated = time.perf_counter() - t0
        result, sampler = load_in_child(_recover_everything(root), args.workers)
        shutil.rmtree(root)
        workers = sampler.workers()
        out.append({
            "broker": name, "log_bytes": summary.log_bytes, "segments": summary.segments, "batches": summary.batches,
            "generate_seconds": round(generated, 1), "load_seconds": round(result["seconds"], 1),
            "bytes_read": result["bytes_read"],
            "parent_anon_shmem": sampler.parent().get("anon_shmem", 0),
            "worker_anon_shmem": max((w.get("anon_shmem", 0) for w in workers), default=0),
            "parent_file": sampler.parent().get("RssFile", 0),
            "worker_file": max((w.get("RssFile", 0) for w in workers), default=0),
        })
        print(f"{name}: {out[-1]}", file=sys.stderr, flush=True)
    return out


def report(figures: dict[str, Any], args: argparse.Namespace) -> list[str]:
    lines = [f"`perf/limits.py {' '.join(args.parts)} --segments {args.segments} --open-files {args.open_files} "
             f"--size {args.size} --workers {args.workers}` on {platform.machine()}, {os.cpu_count()} CPUs, Python "
             f"{platform.python_version()}:", ""]
    if "files" in figures:
        f = figures["files"]
        lines += ["| segments | files | soft limit on open files | workers | load s | recovered | offline dirs | "
                  "peak descriptors, parent | peak descriptors, a worker |",
                  "|---:|---:|---:|---:|---:|---:|---|---:|---:|",
                  f"| {f['segments']:,} | {f['files']:,} | {f['open_files_limit']:,} | {f['workers']} | "
                  f"{f['load_seconds']} | {f['recovered']:,} | {len(f['offline'])} | {f['peak_fds_parent']} | "
                  f"{f['peak_fds_worker']} |", ""]
    if "memory" in figures:
        lines += ["| broker | .log bytes | segments | batches | load s | parent anon+shm peak | largest worker "
                  "anon+shm peak | parent mapped file pages peak | worker mapped file pages peak |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for m in figures["memory"]:
            lines.append(f"| {m['broker']} | {format_bytes(m['log_bytes'])} | {m['segments']:,} | {m['batches']:,} | "
                         f"{m['load_seconds']} | {format_bytes(m['parent_anon_shmem'])} | "
                         f"{format_bytes(m['worker_anon_shmem'])} | {format_bytes(m['parent_file'])} | "
                         f"{format_bytes(m['worker_file'])} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # no choices=: Python 3.11's argparse checks an absent optional positional's default against them (exit 2)
    ap.add_argument("parts", nargs="*", metavar="files|memory", help="which parts to run (default: both)")
    ap.add_argument("--segments", type=int, default=100_000)
    ap.add_argument("--open-files", type=int, default=1024)
    ap.add_argument("--size", default="10GB", help="the big broker's .log bytes (default 10GB)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", type=Path)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--report", type=Path, help="write the tables into this markdown file's limits section")
    args = ap.parse_args(argv)
    args.parts = args.parts or ["files", "memory"]
    if set(args.parts) - {"files", "memory"}:
        ap.error(f"unknown part(s) {sorted(set(args.parts) - {'files', 'memory'})}: choose from files, memory")
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="limits-", dir=args.work) as work:
        if "files" in args.parts:
            figures["files"] = files(args, Path(work))
            print(f"files: {figures['files']}", file=sys.stderr, flush=True)
        if "memory" in args.parts:
            figures["memory"] = memory(args, Path(work))
    publish(figures, report(figures, args), as_json=args.json, report=args.report, section="limits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
