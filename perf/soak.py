#!/usr/bin/env python3
"""The long soak: N random, fault-injected brokers through load, verify, load again (tests/soak.py, one round per
seed), with random worker counts; counts mismatches with the first load's outcome and leaks (processes,
descriptors, /dev/shm blocks and loky semaphores of this process).  Each Phase 1 pool gets every segment (the
parent keeps no head of the order for itself, as in the tests), so that the workers and their shared memory are
exercised on brokers this small.

Usage: perf/soak.py [--brokers 200] [--first-seed 0] [--work DIR] [--json] [--report perf/README.md]
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mploader.engine.pool import PoolEngine  # noqa: E402
from perf.report import publish  # noqa: E402
from tests.soak import Mismatch, Round, soak_one, warm_up  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", type=int, default=200)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--work", type=Path, help="where the brokers are generated (default: a temporary directory)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--report", type=Path, help="write the figures into this markdown file's soak section")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # every fault is a WARNING of the loader
    PoolEngine.parent_head_bytes = 0
    warm_up()
    rounds: list[Round] = []
    mismatches: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="soak-", dir=args.work) as work:
        for seed in range(args.first_seed, args.first_seed + args.brokers):
            try:
                rounds.append(soak_one(seed, Path(work)))
            except Mismatch as e:
                mismatches.append({"seed": seed, "what": str(e)})
                print(f"seed {seed}: MISMATCH {e}", file=sys.stderr, flush=True)
            done = len(rounds) + len(mismatches)
            if done % 10 == 0 and not args.json:
                print(f"{done}/{args.brokers} brokers, {len(mismatches)} mismatch(es), "
                      f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    figures = {
        "brokers": args.brokers, "first_seed": args.first_seed, "seconds": round(time.perf_counter() - t0, 1),
        "segments": sum(r.segments for r in rounds), "faults": sum(r.faults for r in rounds),
        "log_bytes": sum(r.log_bytes for r in rounds),
        "recovered_segments": sum(r.recovered_segments for r in rounds),
        "clean_brokers": sum(r.clean_load for r in rounds),
        "failed_starts": sum(r.failed_start is not None for r in rounds),
        "loads_with_a_pool": sum(w > 1 for r in rounds for w in (r.workers[0], r.workers[2])),
        "verifies_with_a_pool": sum(r.workers[1] > 1 for r in rounds),
        "mismatches": mismatches,
    }
    publish(figures, report(figures), as_json=args.json, report=args.report, section="soak")
    return 1 if mismatches else 0


def report(f: dict[str, Any]) -> list[str]:
    loads = 2 * f["brokers"] + f["clean_brokers"]
    return [
        f"`perf/soak.py --brokers {f['brokers']} --first-seed {f['first_seed']}` on {platform.machine()}, Python "
        f"{platform.python_version()}, {f['seconds']:.0f} s:", "",
        "| brokers | segments | faults | .log MB | loads (with a pool) | verifies (with a pool) | segments recovered "
        "by the first load | clean brokers | failed starts | mismatches | leaks |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {f['brokers']} | {f['segments']:,} | {f['faults']:,} | {f['log_bytes'] / 1e6:,.1f} | {loads} "
        f"({f['loads_with_a_pool']}) | {f['brokers']} ({f['verifies_with_a_pool']}) | {f['recovered_segments']:,} | "
        f"{f['clean_brokers']} | {f['failed_starts']} | "
        f"{sum('leaked' not in m['what'] for m in f['mismatches'])} | "
        f"{sum('leaked' in m['what'] for m in f['mismatches'])} |",
    ] + [f"* seed {m['seed']}: {m['what'][:300]}" for m in f["mismatches"]]


if __name__ == "__main__":
    sys.exit(main())
