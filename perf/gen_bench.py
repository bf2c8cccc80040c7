"""How close `mploader generate` comes to the disk's raw sequential write speed.

Both are measured in the same run, on the same file system, to durable storage (the generator
is followed by sync(2); the raw write by fsync), so the ratio means something on a noisy VM:

    raw write   the same number of bytes written with 8 MiB os.write calls, then fsync
    generate    `python -m mploader generate OUT --size N ...` in a subprocess, then sync

The raw write runs before and after the generator to bracket drifting disk speed.  The output
is deleted afterwards unless --keep is given.

    python perf/gen_bench.py                 # 2 GB
    python perf/gen_bench.py --size 10GB     # needs ~10 GB free
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mploader.cli.units import format_bytes, parse_size  # noqa: E402


def raw_write(path: Path, size: int, chunk: int = 8 << 20) -> float:
    """Seconds to write ``size`` random bytes sequentially and fsync them."""
    buf = os.urandom(chunk)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = size
        while left > 0:
            left -= os.write(fd, buf if left >= chunk else buf[:left])
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - t0
    path.unlink()
    return elapsed


def run_generate(out: Path, size: int, extra: list[str]) -> tuple[float, float, dict]:
    """(wall seconds including sync, child CPU seconds, the --json summary)."""
    cmd = [sys.executable, "-m", "mploader", "generate", str(out), "--size", str(size), "--json",
           "--no-progress", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    os.sync()
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, json.loads(proc.stdout)


def disk_usage(path: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=parse_size, default=parse_size("2GB"), help="bytes to write (default 2GB)")
    ap.add_argument("--dir", type=Path, default=ROOT / "perf" / "out" / "gen-bench",
                    help="scratch directory on the disk to measure (default perf/out/gen-bench)")
    ap.add_argument("--segment-bytes", default="16MiB", help="log.segment.bytes for the generator (default 16MiB)")
    ap.add_argument("--keep", action="store_true", help="keep the generated broker")
    ap.add_argument("generate_args", nargs="*", help="more `mploader generate` options (after --)")
    args = ap.parse_args(argv)

    args.dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.dir).free
    if free < args.size * 1.2:
        print(f"not enough space in {args.dir}: {format_bytes(free)} free, need {format_bytes(args.size * 1.2)}",
              file=sys.stderr)
        return 2
    out = args.dir / "broker"
    if out.exists():
        shutil.rmtree(out)
    extra = ["--segment-bytes", args.segment_bytes, "--faults", "0", *args.generate_args]

    print(f"writing {format_bytes(args.size)} to {args.dir} ({os.cpu_count()} CPUs)", flush=True)
    raw1 = raw_write(args.dir / "raw.bin", args.size)
    print(f"  raw write 1: {raw1:.1f} s", flush=True)
    gen_s, gen_cpu, summary = run_generate(out, args.size, extra)
    print(f"  generate:    {gen_s:.1f} s", flush=True)
    on_disk = disk_usage(out)
    if not args.keep:
        shutil.rmtree(out)
    os.sync()
    raw2 = raw_write(args.dir / "raw.bin", args.size)
    print(f"  raw write 2: {raw2:.1f} s", flush=True)

    raw = (raw1 + raw2) / 2
    log_bytes = summary["log_bytes"]
    rows = [
        ("raw write + fsync (mean of 2)", args.size, raw),
        ("mploader generate + sync", log_bytes, gen_s),
    ]
    print()
    print(f"| {'what':<32} | {'bytes':>14} | {'seconds':>8} | {'MB/s':>8} | {'vs raw':>6} |")
    print(f"|{'-' * 34}|{'-' * 16}|{'-' * 10}|{'-' * 10}|{'-' * 8}|")
    raw_rate = args.size / raw
    for what, n, s in rows:
        rate = n / s
        print(f"| {what:<32} | {n:>14,} | {s:>8.1f} | {rate / 1e6:>8.0f} | {rate / raw_rate:>6.2f} |")
    print()
    print(f"raw write runs: {args.size / raw1 / 1e6:.0f} and {args.size / raw2 / 1e6:.0f} MB/s")
    print(f"generator: {summary['partitions']} partitions, {summary['segments']:,} segments, "
          f"{summary['batches']:,} batches, {format_bytes(on_disk)} on disk (indexes, snapshots, manifest "
          f"included), {gen_cpu:.1f} s CPU ({gen_cpu / gen_s * 100:.0f}% of one core), "
          f"own timer {summary['elapsed_s']:.1f} s before sync")
    return 0


if __name__ == "__main__":
    sys.exit(main())
