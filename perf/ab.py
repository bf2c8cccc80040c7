"""Loads side by side: whole ``mploader load`` processes of variants in alternating rounds, each on a fresh copy.

    python perf/ab.py DATA_DIR [--rounds 10] [--base REV] [--unclean] VARIANT [VARIANT ...]

A variant is ``TREE@WORKERS[@COPY]``: TREE ``this`` (the working tree) or ``base`` (a worktree of ``--base``),
WORKERS what ``--workers`` takes (``1``, ``2``, ``auto``) or ``pN`` (``--partition-workers N``), COPY how the
fresh copy is made, ``sparse`` (the default: holes stay holes, as ``cp -a`` and a broker's own preallocated
indexes) or ``shutil`` (zeros written).
E.g. ``this@2 base@2 this@1``, or ``this@1@sparse this@1@shutil``.

Each round runs every variant once, in an order reversed every other round; before each run the data dir is copied
into a scratch directory (made unclean with ``--unclean``: every segment recovered) and synced, neither timed. Per
variant, the medians (and the minimum of the process) of: the whole process; ``stats.seconds.total``, the load in
process; its plan; its scans; writing files (``write_seconds`` and the final sync); Phase 2 beyond writing, per
recovered segment (issue 11's measure: the load less its scans and writing); the CPU of the process and its
workers (``getrusage`` of the children).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "perf"))

from trees import mploader_argv, scratch_dir, worktree_of  # noqa: E402

from mploader.experiments.run import copy_sparse, make_unclean  # noqa: E402

COPIES: dict[str, Callable[[str, str], object]] = {"sparse": copy_sparse, "shutil": shutil.copy2}


def run_once(argv: list[str]) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    st = json.loads(out)["stats"]
    sec = st["seconds"]
    writing = st["write_seconds"] + sec.get("flush", 0.0)
    recovered = st["segments_recovered"]
    # the parent's Phase 2 only where it ran in this process: with workers' (loaded_by), the scans and writes are
    # summed over processes and the difference means nothing
    beyond = ((sec["total"] - st["scan_seconds"] - writing) / recovered * 1e3
              if recovered and st.get("loaded_by") is None else math.nan)
    return {"process": wall, "load": sec["total"], "plan": sec.get("plan", 0.0), "scans": st["scan_seconds"],
            "writing": writing, "beyond_ms": beyond,
            "cpu": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--base", help="the git revision a 'base' variant runs")
    ap.add_argument("--unclean", action="store_true", help="each copy made unclean: every segment recovered")
    ap.add_argument("--scratch", type=Path, help="where the copies go (default: the system's temporary directory)")
    args = ap.parse_args()
    specs = []
    for v in args.variants:
        tree, workers, *copy = v.split("@")
        if tree not in ("this", "base") or (tree == "base" and not args.base) or copy not in ([], ["sparse"],
                                                                                               ["shutil"]):
            ap.error(f"{v}: a variant is this|base@WORKERS[@sparse|shutil] (base needs --base)")
        specs.append((v, tree, workers, copy[0] if copy else "sparse"))
    results: dict[str, list[dict[str, float]]] = {v: [] for v, *_ in specs}
    with scratch_dir("mploader-ab-", args.scratch, keep=False) as root:
        with worktree_of(args.base, root) if args.base else contextlib.nullcontext() as base:
            argv = {v: mploader_argv(w, base if tree == "base" else None) for v, tree, w, _ in specs}
            for r in range(args.rounds):
                for v, _, _, copy in (specs if r % 2 == 0 else specs[::-1]):
                    data = root / "data"
                    shutil.rmtree(data, ignore_errors=True)
                    shutil.copytree(args.data_dir, data, symlinks=True, copy_function=COPIES[copy])
                    if args.unclean:
                        make_unclean([data])
                    os.sync()
                    results[v].append(run_once(argv[v](str(data))))
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"`python perf/ab.py {args.data_dir} --rounds {args.rounds}"
          f"{f' --base {args.base}' if args.base else ''}{' --unclean' if args.unclean else ''}"
          f"{f' --scratch {args.scratch}' if args.scratch else ''} "
          f"{' '.join(args.variants)}`, medians (the process's minimum in brackets)\n")
    print("| variant | process (s) | load (s) | plan (s) | scans (s) | writing (s) | Phase 2 beyond writing "
          "(ms a recovered segment) | CPU (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for v, runs in results.items():
        m = {key: statistics.median(x[key] for x in runs) for key in runs[0]}
        print(f"| {v} | {m['process']:.3f} ({min(x['process'] for x in runs):.3f}) | {m['load']:.3f} | "
              f"{m['plan']:.3f} | {m['scans']:.3f} | {m['writing']:.3f} | "
              f"{'-' if math.isnan(m['beyond_ms']) else format(m['beyond_ms'], '.3f')} | {m['cpu']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
