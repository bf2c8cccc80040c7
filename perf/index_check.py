#!/usr/bin/env python3
"""The cost of the checking modes on a clean-shutdown start: ``kafka`` vs ``sanity`` vs ``full`` vs lazy.

For generated brokers of N segments each (clean shutdown, page cache warm), alternating rounds, best of
``--repeat``: the seconds a load takes in each ``index_check`` mode, and with ``verify_in_background`` the
seconds until the load returns and until the background verification is done.  The slope per 1,000 segments
is fitted between the smallest and the largest broker.  Between runs the clean-shutdown marker is put back (a
load deletes it; nothing else a clean load writes changes the next load).

Usage: perf/index_check.py [--segments 1000,10000] [--segment-bytes 16KiB] [--repeat 3] [--report perf/README.md]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mploader import LoaderConfig, load_logs  # noqa: E402
from mploader.cli.units import format_bytes, parse_size  # noqa: E402
from mploader.format import checkpoint  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from perf.report import Lines, replace_section  # noqa: E402

MODES = ("kafka", "sanity", "full")


def _broker(root: Path, segments: int, segment_bytes: int) -> tuple[Path, bytes, int]:
    cfg = GeneratorConfig(data_dirs=1, topics=10, partitions_per_topic=10, total_bytes=segments * segment_bytes,
                          segment_bytes=segment_bytes, batch_bytes=4096, clean_shutdown=True, faults=0, seed=3,
                          nonzero_start_fraction=0.0)
    summary = generate(root, cfg)
    d = Path(summary.data_dirs[0])
    marker = (d / checkpoint.CLEAN_SHUTDOWN_MARKER).read_bytes()
    return d, marker, summary.segments


def _timed_load(d: Path, marker: bytes, mode: str) -> tuple[float, float | None]:
    (d / checkpoint.CLEAN_SHUTDOWN_MARKER).write_bytes(marker)
    lazy = mode == "lazy"
    cfg = LoaderConfig(index_check="kafka" if lazy else mode)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    result = load_logs([d], cfg, verify_in_background=lazy)
    loaded = time.perf_counter() - t0
    if result.background is None:
        return loaded, None
    report = result.background.wait()
    assert report is not None and report.healthy, "a generated clean broker verifies healthy"
    return loaded, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", default="1000,10000")
    ap.add_argument("--segment-bytes", type=parse_size, default=parse_size("16KiB"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--report", type=Path, default=None)
    args = ap.parse_args(argv)
    counts = [int(n) for n in args.segments.split(",")]
    out = Lines()
    rows: dict[int, dict[str, tuple[float, float | None]]] = {}
    with tempfile.TemporaryDirectory(prefix="mploader-perf-index-check-") as tmp:
        for n in counts:
            d, marker, made = _broker(Path(tmp) / f"b{n}", n, args.segment_bytes)
            nbytes = sum(p.stat().st_size for p in d.glob("*/*.log"))
            for p in d.glob("*/*"):  # page cache warm
                p.read_bytes()
            best: dict[str, tuple[float, float | None]] = {}
            for _ in range(args.repeat):
                for mode in (*MODES, "lazy"):
                    t = _timed_load(d, marker, mode)
                    if mode not in best or t[0] < best[mode][0]:
                        best[mode] = t
            rows[made] = best
            out.say(f"- {made:,} segments, {format_bytes(nbytes)} of log: " + ", ".join(
                f"{m} {t[0]:.2f} s" + (f" (verified {t[1]:.2f} s)" if t[1] is not None else "")
                for m, t in best.items()))
    out.say("")
    small, large = min(rows), max(rows)
    if small != large:
        out.say("| mode | seconds per 1,000 segments (slope) | vs kafka |")
        out.say("|---|---|---|")
        per_k = {m: (rows[large][m][0] - rows[small][m][0]) / (large - small) * 1000 for m in (*MODES, "lazy")}
        for m, slope in per_k.items():
            out.say(f"| {m} (load returns) | {slope:.3f} | {slope / per_k['kafka']:.2f}x |")
        done = rows[large]["lazy"][1], rows[small]["lazy"][1]
        if done[0] is not None and done[1] is not None:
            out.say(f"| lazy (verification done) | {(done[0] - done[1]) / (large - small) * 1000:.3f} | "
                    f"{(done[0] - done[1]) / (large - small) * 1000 / per_k['kafka']:.2f}x |")
    out.say(f"\n`perf/index_check.py --segments {args.segments} --segment-bytes {args.segment_bytes} "
            f"--repeat {args.repeat}`, best of {args.repeat} alternating rounds, page cache warm, clean shutdown")
    if args.report is not None:
        replace_section(args.report, "index-check", out.lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
