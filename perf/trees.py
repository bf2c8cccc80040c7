"""Where the perf scripts run mploader from: this tree or a git revision's worktree.

One place for the command line of a load and for the worktree of a revision, so that a side-by-side figure
(perf/phase2.py, perf/startup.py, perf/kafka_compare.py) runs both trees the same way and only the code differs.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


def mploader_argv(workers: str, tree: Path | None = None) -> Callable[[str], list[str]]:
    """``mploader load --json --no-progress --workers W DIR`` as a command line for DIR.

    Without ``tree``: the console script beside this interpreter (the working tree as installed).  With one:
    ``python -P -m mploader`` with ``PYTHONPATH`` on that tree (``-P``: the working directory, maybe this tree,
    does not come before it on ``sys.path``)."""
    if tree is None:
        script = Path(sys.executable).with_name("mploader")
        base = [str(script)] if script.exists() else [sys.executable, "-m", "mploader"]
    else:
        base = ["env", f"PYTHONPATH={tree}", sys.executable, "-P", "-m", "mploader"]
    return lambda d: [*base, "load", "--json", "--no-progress", "--workers", workers, d]


@contextlib.contextmanager
def worktree_of(rev: str, root: Path) -> Iterator[Path]:
    """A git worktree of ``rev`` under ``root`` with its compiled walk built in place (as scripts/_venv.sh builds
    it), removed from git's list on the way out, whatever happened."""
    wt = root / "base"
    subprocess.run(["git", "-C", str(_ROOT), "worktree", "add", "--detach", str(wt), rev], check=True,
                   capture_output=True)
    try:
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=wt, check=True,
                       capture_output=True)
        yield wt
    finally:
        subprocess.run(["git", "-C", str(_ROOT), "worktree", "remove", "--force", str(wt)], check=False)

