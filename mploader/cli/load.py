"""``mploader load DIR...``: load and recover data dirs the way a Kafka broker's start-up does."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections import defaultdict
from typing import TextIO

from mploader.cli.units import EXIT_FAILURE as EXIT_OFFLINE, EXIT_OK, EXIT_USAGE, format_bytes, parse_size
from mploader.config import LoaderConfig
from mploader.errors import MploaderError, StartupFailedError
from mploader.manager import load_logs
from mploader.progress import Progress
from mploader.result import LoadResult


def _workers(text: str) -> int | str:
    if text == "auto":
        return "auto"
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers takes a number >= 1 or 'auto', not {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError("--workers must be >= 1")
    return n


def _read_ahead(text: str) -> int | str:
    if text == "auto":
        return "auto"
    return parse_size(text)


def add_load_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dirs", nargs="+", metavar="DIR", help="data directories (Kafka's log.dirs)")
    p.add_argument("--dry-run", action="store_true", help="report everything recovery would do; change nothing")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the summary")
    p.add_argument("--workers", type=_workers, default="auto", metavar="N|auto",
                   help="Phase 1 worker processes per data dir: N (1 scans inline), or 'auto' (default): the "
                        "usable CPUs divided among the data dirs, inline when there is under 1 GiB to scan per dir")
    p.add_argument("--recovery-threads", type=int, default=1, metavar="N",
                   help="partitions loaded at once per data dir (num.recovery.threads.per.data.dir, default 1)")
    p.add_argument("--read-ahead", type=_read_ahead, default="auto", metavar="SIZE|auto",
                   help="per data dir, how far ahead of the scans the disk is asked to read (e.g. 512MiB); 0: off; "
                        "'auto' (default): 256 MiB beyond what the workers hold, at most a quarter of free memory")
    p.add_argument("--index-interval-bytes", type=int, default=4096, metavar="B", help="log.index.interval.bytes")
    p.add_argument("--max-index-size", type=int, default=10485760, metavar="B", help="log.index.size.max.bytes")
    p.add_argument("--now-ms", type=int, default=None, metavar="MS",
                   help="wall clock for producer expiry (default: now)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("-v", "--verbose", action="store_true", help="log what the loader does (Kafka's messages)")


class _ProgressLine(Progress):
    """``partitions 12/48 | segments scanned 130 (1.2 GB)`` on one redrawn stderr line."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.total = 0
        self.done = 0
        self.segments = 0
        self.nbytes = 0
        self._lock = threading.Lock()
        self._last = 0.0

    def start(self, partitions_per_dir: dict[str, int]) -> None:
        self.total = sum(partitions_per_dir.values())
        self._draw(force=True)

    def partition_done(self, data_dir: str, partition: str) -> None:
        with self._lock:
            self.done += 1
        self._draw()

    def segments_scanned(self, data_dir: str, segments: int, nbytes: int) -> None:
        with self._lock:
            self.segments += segments
            self.nbytes += nbytes
        self._draw()

    def close(self) -> None:
        self._draw(force=True)
        self.stream.write("\n")
        self.stream.flush()

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] partitions {self.done}/{self.total}"
                          f" | segments scanned {self.segments} ({format_bytes(self.nbytes)})")
        self.stream.flush()


def summary_lines(result: LoadResult) -> list[str]:
    per_dir: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for lg in result.all_logs():
        d = per_dir[lg.data_dir]
        d["partitions"] += 1
        d["segments"] += len(lg.segments)
        d["recovered"] += len(lg.recovered_segments)
        d["truncated"] += lg.truncated_bytes
        d["deleted"] += len(lg.deleted_files)
    lines = []
    for data_dir, clean in result.clean_shutdown.items():
        d = per_dir[data_dir]
        state = "OFFLINE: " + result.offline_dirs[data_dir] if data_dir in result.offline_dirs else "loaded"
        secs = result.stats.dir_seconds.get(data_dir, 0.0)
        lines.append(f"{data_dir}: {state}")
        lines.append(f"  {'clean' if clean else 'unclean'} shutdown; {d['partitions']} partitions, "
                     f"{d['segments']} segments; {d['recovered']} segments recovered, "
                     f"{format_bytes(d['truncated'])} truncated, {d['deleted']} files deleted; {secs:.2f} s")
    for data_dir, reason in result.offline_dirs.items():
        if data_dir not in result.clean_shutdown:
            lines.append(f"{data_dir}: OFFLINE: {reason}")
    s = result.stats
    lines.append(f"total: {s.partitions} partitions, {s.segments_recovered} segments recovered, "
                 f"{format_bytes(s.bytes_read)} scanned, {s.seconds.get('total', 0.0):.2f} s "
                 f"({s.workers_per_dir} Phase 1 worker(s) per dir)")
    return lines


def run_load(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="mploader: %(levelname)s: %(message)s", stream=sys.stderr)
    try:
        cfg = LoaderConfig(
            num_recovery_threads_per_data_dir=args.recovery_threads,
            num_segment_loading_threads_per_data_dir=args.workers,
            index_interval_bytes=args.index_interval_bytes, max_index_size=args.max_index_size,
            dry_run=args.dry_run, read_ahead_bytes=args.read_ahead,
        )
    except ValueError as e:
        print(f"mploader load: {e}", file=sys.stderr)
        return EXIT_USAGE
    progress = None if args.json or args.no_progress or not sys.stderr.isatty() else _ProgressLine(sys.stderr)
    try:
        result = load_logs(args.dirs, cfg, args.now_ms, progress=progress)
    except StartupFailedError as e:
        print(f"mploader load: a Kafka broker would fail to start on this input: {e}", file=sys.stderr)
        return EXIT_OFFLINE
    except MploaderError as e:
        print(f"mploader load: {e}", file=sys.stderr)
        return EXIT_OFFLINE
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        if args.dry_run:
            print("dry run: nothing on disk was changed; this is what the load would do")
        print("\n".join(summary_lines(result)))
    return EXIT_OFFLINE if result.offline_dirs else EXIT_OK
