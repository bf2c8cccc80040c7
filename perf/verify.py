#!/usr/bin/env python3
"""How fast ``mploader verify`` reads a page-cached broker, against the engine's scan of the same bytes.

Side by side in one run, alternating rounds (ABAB), each figure the best of ``--repeat``:

* per core: :func:`mploader.scan.walk.scan_segment` (recovery's Phase 1 walk: the engine's unit of work) over
  every segment, against :func:`mploader.scan.audit.audit_segment` (the same walk plus the offset and
  index checks) over the same segments, in this process;
* whole: ``verify_logs`` with 1 and N workers per data dir (without the dry run, which reads nothing on a
  clean broker, and with it);
* kafka-dump-log's approach: a serial loop over the files, each read and every batch CRC-checked with
  kafka-python's reader (``MemoryRecords`` + ``validate_crc``), as a tool that checks one file at a time does.

Usage: perf/verify.py [--size 300MB] [--batch-bytes 16KiB] [--workers 2] [--repeat 3] [--report perf/README.md]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mploader.cli.units import format_bytes, parse_size  # noqa: E402
from mploader.config import LoaderConfig  # noqa: E402
from mploader.format import names  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from mploader.scan import SegmentTask, scan_segment  # noqa: E402
from mploader.scan.audit import AuditTask, audit_segment  # noqa: E402
from mploader.verify import verify_logs  # noqa: E402
from perf.report import Lines, replace_section  # noqa: E402


def _segments(data_dir: Path) -> list[tuple[str, int]]:
    return [(str(p), names.offset_from_file_name(p.name)) for p in sorted(data_dir.glob("*/*.log"))]


def _kafka_python_loop(segments: list[tuple[str, int]]) -> None:
    from kafka.record.memory_records import MemoryRecords

    for path, _ in segments:
        with open(path, "rb") as f:
            records = MemoryRecords(f.read())
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            if not batch.validate_crc():
                raise AssertionError(f"{path}: CRC mismatch")


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=parse_size, default=parse_size("300MB"))
    ap.add_argument("--batch-bytes", type=parse_size, default=parse_size("16KiB"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--report", type=Path, default=None, help="write the figures into this README's section")
    args = ap.parse_args(argv)
    out = Lines()
    with tempfile.TemporaryDirectory(prefix="mploader-perf-verify-") as tmp:
        cfg = GeneratorConfig(data_dirs=1, topics=4, partitions_per_topic=4, total_bytes=args.size,
                              segment_bytes=8 << 20, batch_bytes=args.batch_bytes, clean_shutdown=True, faults=0,
                              seed=1)
        summary = generate(Path(tmp) / "b", cfg)
        data_dir = Path(summary.data_dirs[0])
        segments = _segments(data_dir)
        nbytes = sum(Path(p).stat().st_size for p, _ in segments)
        batches = summary.batches
        for p, _ in segments:  # page cache warm
            Path(p).read_bytes()
        runs: dict[str, Callable[[], object]] = {
            "scan_segment (recovery's walk), 1 core": lambda: [scan_segment(SegmentTask(p, b)) for p, b in segments],
            "audit_segment (verify's walk + checks), 1 core":
                lambda: [audit_segment(AuditTask(p, b)) for p, b in segments],
            "verify_logs, 1 worker, no dry run": lambda: verify_logs(
                [data_dir], LoaderConfig(segment_scan_workers_per_data_dir=1), predict=False),
            f"verify_logs, {args.workers} workers, no dry run": lambda: verify_logs(
                [data_dir], LoaderConfig(segment_scan_workers_per_data_dir=args.workers), predict=False),
            f"verify_logs, {args.workers} workers, with the dry run": lambda: verify_logs(
                [data_dir], LoaderConfig(segment_scan_workers_per_data_dir=args.workers)),
            "kafka-python reader, serial per file (kafka-dump-log's approach)":
                lambda: _kafka_python_loop(segments),
        }
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(args.repeat):  # alternating rounds: the machine's noise falls on every row alike
            for name, fn in runs.items():
                best[name] = min(best[name], _best(fn, 1))
        base = best["scan_segment (recovery's walk), 1 core"]
        out.say(f"`perf/verify.py --size {format_bytes(args.size)} --batch-bytes {args.batch_bytes} "
                f"--workers {args.workers} --repeat {args.repeat}`: {len(segments)} segments, {format_bytes(nbytes)}, "
                f"{batches:,} batches (~{nbytes // max(1, batches):,} B each), clean shutdown, page cache warm, "
                f"best of {args.repeat} alternating rounds")
        out.say("")
        out.say("| run | seconds | MB/s | time vs recovery's walk on 1 core |")
        out.say("|---|---|---|---|")
        for name, t in best.items():
            out.say(f"| {name} | {t:.3f} | {nbytes / t / 1e6:,.0f} | {t / base:.2f}x |")
    if args.report is not None:
        replace_section(args.report, f"verify-{args.batch_bytes}", out.lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
