#!/usr/bin/env python3
"""Instructions a load executes (valgrind's callgrind), this tree against a revision: a figure the VM's noise does
not move.

On this shared 2-vCPU VM, alternating whole processes of one tree against another (``perf/ab.py``) put the same
code 7% apart in one run of 8 rounds, and 19ef833 against a tree with ~35 us a segment less of Python 14-22% the
wrong way in two (perf/README.md, "Counted in instructions").  The number of instructions a load executes moves by
less than 0.1% from run to run: a change to the Python of Phase 2 shows there, however busy the machine.

    python perf/instructions.py DATA_DIR [--base REV] [--unclean] [--workers 1|N|auto]

Per tree, two processes under ``valgrind --tool=callgrind --cache-sim=no`` (``PYTHONHASHSEED=0``, one BLAS thread):
one imports mploader and loads a fresh copy of ``DATA_DIR`` in process (``load_logs``, ``--workers``:
``segment_scan_workers_per_data_dir``, 1 scanning in the loading process), the other only imports it; the
load's instructions are the difference.  The copy is made outside valgrind (sparse, as ``perf/ab.py`` makes it;
``--unclean``: every segment recovered).  Reported: the load's instructions, per recovered segment, and this tree
against the base.  What it does not count: the kernel's work (system calls: the file system's time, most of writing
a segment's files) and waiting; a change that saves system calls (a ``stat``) shows only its Python.  About 40 s a
run for the 1,023-segment set (valgrind runs Python ~50 times slower).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mploader.experiments.run import copy_sparse, make_unclean  # noqa: E402
from perf.trees import compile_bytecode, scratch_dir, worktree_of  # noqa: E402

_ROOT = Path(__file__).resolve().parents[1]
# the process valgrind runs: mploader from TREE, then (with DIR) one load of DIR, its recovered segments on stdout
_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from mploader import LoaderConfig, load_logs
if len(sys.argv) > 2:
    workers = sys.argv[3]
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=int(workers) if workers.isdigit() else workers)
    result = load_logs([sys.argv[2]], cfg)
    print(result.stats.segments_recovered)
"""


def instructions(tree: Path, data: Path | None, workers: str) -> tuple[int, int]:
    """(instructions, recovered segments) of one process under callgrind: an import of ``tree``'s mploader and,
    with ``data``, a load of it.  Only that process's: workers it forks count their own (valgrind follows them),
    which are not the load's serial part."""
    with tempfile.TemporaryDirectory(prefix="mploader-callgrind-") as tmp:
        argv = ["valgrind", "--tool=callgrind", "--cache-sim=no", f"--callgrind-out-file={tmp}/out",
                sys.executable, "-P", "-c", _CHILD, str(tree)]
        if data is not None:
            argv += [str(data), str(workers)]
        env = {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    first = re.search(r"==(\d+)==", done.stderr)
    collected = first and re.search(rf"=={first.group(1)}== Collected : (\d+)", done.stderr)
    if collected is None:
        raise RuntimeError(f"callgrind reported no count:\n{done.stderr[-2000:]}")
    return int(collected.group(1)), int(done.stdout.strip() or 0)


def measure(tree: Path, source: Path, root: Path, unclean: bool, workers: str) -> tuple[int, int]:
    """The load's instructions (the load's process less the import's) and its recovered segments."""
    compile_bytecode(tree)
    data = root / "data"
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(source, data, symlinks=True, copy_function=copy_sparse)
    if unclean:
        make_unclean([data])
    os.sync()
    loaded, recovered = instructions(tree, data, workers)
    imported, _ = instructions(tree, None, workers)
    return loaded - imported, recovered


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--base", help="a git revision to count beside this tree")
    ap.add_argument("--unclean", action="store_true", help="each copy made unclean: every segment recovered")
    ap.add_argument("--workers", default="1", help="segment_scan_workers_per_data_dir (default 1; 'auto': "
                    "the parent's instructions only, where it takes workers)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        ap.error("valgrind is not installed")
    with scratch_dir("mploader-instructions-", None, keep=False) as root:
        rows = []
        with worktree_of(args.base, root) if args.base else contextlib.nullcontext() as base:
            trees = [("this", _ROOT)] + ([(f"base ({args.base})", base)] if base is not None else [])
            for label, tree in trees:
                count, recovered = measure(tree, args.data_dir, root, args.unclean, args.workers)
                rows.append((label, count, recovered))
    print(f"`python perf/instructions.py {args.data_dir}{f' --base {args.base}' if args.base else ''}"
          f"{' --unclean' if args.unclean else ''} --workers {args.workers}`\n")
    print("| tree | instructions of the load | per recovered segment | against this tree |")
    print("|---|---|---|---|")
    for label, count, recovered in rows:
        per = f"{count / recovered:,.0f}" if recovered else "-"
        print(f"| {label} | {count:,} | {per} | {count / rows[0][1]:.3f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
