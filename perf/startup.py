#!/usr/bin/env python3
"""The fixed cost of a load's process: ``mploader load`` of an empty data dir, this tree against a git revision.

Each round runs the whole process once per tree, in alternating order (this machine is shared: only the side by
side figures count): ``python -P -m mploader load --json --no-progress --workers auto EMPTY_DIR`` with
``PYTHONPATH`` on the tree (perf/trees.py's ``mploader_argv``, as perf/phase2.py runs a revision).  The revision is
a git worktree with its compiled walk built (perf/trees.py's ``worktree_of``).  Reported: the minimum and the median
wall seconds of each, and the modules the load imports.

Usage: perf/startup.py --base REV [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.trees import mploader_argv, worktree_of  # noqa: E402

_ROOT = Path(__file__).resolve().parents[1]
# the modules a load of an empty dir has imported when it is done (its exit code ignored: the dir holds nothing)
IMPORTS = ("import contextlib, io, sys; from mploader.cli.main import main\n"
           "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
           "    main(['load', '--json', '--no-progress', '--workers', 'auto', sys.argv[1]])\n"
           "print(len(sys.modules))")


def one_run(tree: Path, empty: Path) -> float:
    argv = mploader_argv("auto", tree)(str(empty))
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the git revision to compare with")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mploader-startup-") as work, worktree_of(args.base, Path(work)) as base:
        root = Path(work)
        trees = {"this tree": _ROOT, args.base: base}
        times: dict[str, list[float]] = {name: [] for name in trees}
        for r in range(args.rounds):
            for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                times[name].append(one_run(trees[name], Path(tempfile.mkdtemp(dir=root))))  # a fresh empty dir
        print(f"`perf/startup.py {' '.join(sys.argv[1:])}`, {time.strftime('%Y-%m-%d %H:%M')}:")
        for name, tree in trees.items():
            modules = subprocess.run([sys.executable, "-P", "-c", IMPORTS, tempfile.mkdtemp(dir=root)],
                                     env=dict(os.environ, PYTHONPATH=str(tree)), capture_output=True, text=True,
                                     check=True).stdout.strip()
            ts = times[name]
            print(f"  {name:>12}: min {min(ts):.3f} s, median {statistics.median(ts):.3f} s, {modules} modules "
                  f"imported by mploader load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
