"""Phase 1's walk per batch: the Python loop (the reference) against the compiled one, side by side in one run.

    .venv/bin/python perf/walk.py [--size 256MB] [--batch-bytes 1KB] [--repeat 5] [--report perf/README.md]

Generates one segment of ~``--batch-bytes`` v2 batches (one record each, as perf/engine.py does) twice:
"plain" (idempotent and plain producers, no control batch: every batch takes the fast loop) and "mixed"
(10% transactional producers as in perf/engine.py: the COMMIT/ABORT markers go through the Python general
path whichever loop runs). With a warm page cache, each round times, one after the other:

* the bare CRC-32C: the crc32c package over the whole segment in one call (the floor of any walk that
  checks every byte), the compiled module's own CRC-32C the same way, and the crc32c package called once
  per batch from Python (what the Python loop pays for its CRCs alone);
* ``scan_segment`` (map the file, walk, CRC, batch table) with the Python loop and with the compiled one
  (``scan_segment``'s ``compiled`` argument: None, or ``mploader.scan.compiled.WALK``);
* their parts: ``batch_table`` on the scan's positions, and the compiled ``walk_v2`` alone (with and
  without CRC checks; over the mixed segment it is called again after each control batch), over pages
  mapped beforehand and over a fresh mapping as a scan makes (its page faults included).

Each figure is the best of ``--repeat`` rounds, per batch. ``--report FILE`` writes the tables between
the ``<!-- walk:begin -->`` / ``<!-- walk:end -->`` markers of FILE.
"""

from __future__ import annotations

import argparse
import mmap
import platform
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path

import psutil
from crc32c import crc32c

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from report import Lines, replace_section  # noqa: E402 - perf/report.py, beside this script
from trees import scratch_dir  # noqa: E402 - perf/trees.py, beside this script

import mploader.scan.walk as walk  # noqa: E402
from mploader.cli.units import parse_size  # noqa: E402
from mploader.experiments.report import cpu_model  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from mploader.scan import SegmentTask, scan_segment  # noqa: E402
from mploader.scan.compiled import WALK  # noqa: E402


def make_segment(out: Path, size: int, batch_bytes: int, transactional: float) -> Path:
    generate(out, GeneratorConfig(
        data_dirs=1, topics=1, partitions_per_topic=1, total_bytes=size, segment_bytes=min(size + (1 << 20), 2**31 - 1),
        batch_bytes=batch_bytes, records_per_batch=1, idempotent_fraction=0.3, transactional_fraction=transactional,
        nonzero_start_fraction=0.0, delete_records_fraction=0.0, faults=0, seed=1))
    logs = sorted(out.rglob("*.log"), key=lambda p: p.stat().st_size)
    return logs[-1]


def measure(path: Path, repeat: int) -> tuple[dict[str, float], int, int, int]:
    """Best seconds of each measurement over ``repeat`` rounds; the batch count, bytes and control batches."""
    compiled = WALK
    data = path.read_bytes()  # warms the page cache
    task = SegmentTask(str(path), 0)
    reference = scan_segment(task, None)
    positions = reference.batches["position"].tolist()
    sizes = reference.batches["size"].tolist()
    assert reference.valid_bytes == len(data), "the benchmark segment must be valid to its end"
    del data
    f = open(path, "rb")  # noqa: SIM115 - held for the whole measurement
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    mv = memoryview(mm)

    def crc_per_batch() -> None:
        for p, total in zip(positions, sizes):
            crc32c(mv[p + 21 : p + total])

    size_at = dict(zip(positions, sizes))

    def walk_v2_all(check: bool) -> None:
        """walk_v2 from byte 0 to the end, markers parsed, stepping over each entry it stops at (a marker it leaves
        to Python) as the general path would: the compiled loop's share of a scan, calls included."""
        p, end = 0, len(mm)
        while p < end:
            p, _ = compiled.walk_v2(mm, p, end, check, True)
            if p < end:
                p += size_at[p]

    def walk_v2_fresh_mapping() -> None:
        """walk_v2 over a new mapping of the file, as a scan makes one: the page faults of mapping the (cached)
        pages are part of the time."""
        with open(path, "rb") as g, mmap.mmap(g.fileno(), 0, access=mmap.ACCESS_READ) as fresh:
            p, end = 0, len(fresh)
            while p < end:
                p, _ = compiled.walk_v2(fresh, p, end, True, True)
                if p < end:
                    p += size_at[p]

    def scan_with(use_compiled: bool) -> Callable[[], object]:
        def run() -> object:
            return scan_segment(task, compiled if use_compiled else None)
        return run

    runs: dict[str, Callable[[], object]] = {
        "crc32c package, whole segment": lambda: crc32c(mm),
        "crc32c package, one call per batch": crc_per_batch,
        "scan_segment, Python walk": scan_with(False),
        "batch_table (a list of positions)": lambda: walk.batch_table(mm, positions, array("q")),
    }
    if compiled is not None:
        as_array = array("q", positions)
        runs.update({
            "compiled crc32c, whole segment": lambda: compiled.crc32c(mm),
            "scan_segment, compiled walk": scan_with(True),
            "batch_table (int64 array of positions)": lambda: walk.batch_table(mm, as_array, array("q")),
            "walk_v2 alone, CRC checked": lambda: walk_v2_all(True),
            "walk_v2 alone, CRC checked, on a fresh mapping (page faults)": walk_v2_fresh_mapping,
            "walk_v2 alone, no CRC": lambda: walk_v2_all(False),
        })
    best = dict.fromkeys(runs, float("inf"))
    try:
        for _ in range(repeat):
            for name, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t0)
    finally:
        mv.release()
        mm.close()
        f.close()
    control = int((reference.batches["attributes"] & 0x20 != 0).sum())
    return best, len(positions), reference.valid_bytes, control


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=parse_size, default=parse_size("256MB"))
    ap.add_argument("--batch-bytes", type=parse_size, default=1024)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "perf" / "out",
                    help="where the scratch directory of the segments goes (default: perf/out; only the scratch "
                    "directory is deleted at the end)")
    ap.add_argument("--report", default=None, help="write the tables into this Markdown file")
    ap.add_argument("--keep", action="store_true", help="keep the generated segments and print their directory")
    args = ap.parse_args()
    with scratch_dir("walk-", args.out, args.keep) as out:
        tables = run(args, out)
    if args.report:
        replace_section(Path(args.report), "walk", tables)


def run(args: argparse.Namespace, out: Path) -> list[str]:
    """Both segments generated under ``out`` and measured; the lines printed (the README's tables)."""
    printed = Lines()
    say, lines = printed.say, printed.lines

    compiled = WALK
    impl = compiled.crc_implementation() if compiled is not None else "not built"
    say(f"`python perf/walk.py {' '.join(sys.argv[1:])}` on {cpu_model()} ({psutil.cpu_count()} CPUs), "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}; one process, warm page cache, "
        f"best of {args.repeat} rounds; compiled walk: {impl} CRC-32C")
    for label, transactional in (("plain", 0.0), ("mixed", 0.1)):
        path = make_segment(out / label, args.size, args.batch_bytes, transactional)
        best, n, nbytes, control = measure(path, args.repeat)
        say("")
        say(f"{label}: {n:,} batches in one segment of {nbytes / 1e6:.0f} MB ({nbytes / n:.0f} B a batch), "
            f"{control:,} of them control batches")
        say("")
        say("| what | ms | ns/batch | GB/s |")
        say("|---|---|---|---|")
        for name, seconds in best.items():
            say(f"| {name} | {seconds * 1e3:.1f} | {seconds / n * 1e9:.0f} | {nbytes / seconds / 1e9:.2f} |")
        python, fast = best["scan_segment, Python walk"], best.get("scan_segment, compiled walk")
        if fast is not None:
            say(f"| **compiled scan vs Python scan** | | | **{python / fast:.2f}x as fast** |")
    return lines


if __name__ == "__main__":
    main()
