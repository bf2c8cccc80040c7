"""Where the perf scripts run mploader from (this tree or a git revision's worktree), and their scratch directory.

One place for the command line of a load and for the worktree of a revision, so that a side-by-side figure
(perf/phase2.py, perf/startup.py, perf/kafka_compare.py) runs both trees the same way and only the code differs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def worker_start_as(start: str | None) -> Iterator[None]:
    """``MPLOADER_WORKER_START`` set to ``start`` inside (None: left as it is): how the pools of the ``mploader``
    commands started inside start their workers (in process, ``LoaderConfig.worker_start`` says it)."""
    before = os.environ.get("MPLOADER_WORKER_START")
    if start is not None:
        os.environ["MPLOADER_WORKER_START"] = start
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MPLOADER_WORKER_START", None)
        else:
            os.environ["MPLOADER_WORKER_START"] = before


def mploader_argv(workers: str, tree: Path | None = None) -> Callable[..., list[str]]:
    """``mploader load --json --no-progress --create-missing --workers W DIR [DIR ...]`` as a command line for the
    data dirs (``W`` = ``pN``: ``--partition-workers N`` instead).

    Without ``tree``: the console script beside this interpreter (the working tree as installed).  With one:
    ``python -P -m mploader`` with ``PYTHONPATH`` on that tree (``-P``: the working directory, maybe this tree,
    does not come before it on ``sys.path``).

    The tree's bytecode is compiled first (``compileall``), as an install writes its ``.pyc`` files: without it,
    a run under ``PYTHONDONTWRITEBYTECODE=1`` compiles again every module whose ``.pyc`` is missing or older than
    its source (a new worktree: all of them), and a side-by-side figure would time the compiler."""
    compile_bytecode(tree or _ROOT)
    if tree is None:
        script = Path(sys.executable).with_name("mploader")
        base = [str(script)] if script.exists() else [sys.executable, "-m", "mploader"]
    else:
        base = ["env", f"PYTHONPATH={tree}", sys.executable, "-P", "-m", "mploader"]
    # "pN": whole partitions in N worker processes (mploader.runners.processes)
    flag = ["--partition-workers", workers[1:]] if workers.startswith("p") else ["--workers", workers]
    # --create-missing: an empty data dir is a new one (a broker's first start), the empty set's fixed cost
    return lambda *dirs: [*base, "load", "--json", "--no-progress", "--create-missing", *flag, *dirs]


def compile_bytecode(tree: Path) -> None:
    """Write the ``.pyc`` of every module of ``tree/mploader`` that has none or a stale one."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "mploader")], check=True,
                   stdout=subprocess.DEVNULL)


@contextlib.contextmanager
def worktree_of(rev: str, root: Path) -> Iterator[Path]:
    """A git worktree of ``rev`` under ``root`` with its compiled walk built in place (the flags of setup.py),
    removed from git's list on the way out, whatever happened."""
    wt = root / "base"
    subprocess.run(["git", "-C", str(_ROOT), "worktree", "add", "--detach", str(wt), rev], check=True,
                   capture_output=True)
    try:
        build_walk(wt)
        yield wt
    finally:
        subprocess.run(["git", "-C", str(_ROOT), "worktree", "remove", "--force", str(wt)], check=False)


def build_walk(tree: Path) -> None:
    """``tree``'s compiled walk built in place with this interpreter's compiler and headers, the flags of its
    setup.py (the compiler directly: ``setup.py build_ext`` depends on the installed setuptools reading the
    revision's pyproject.toml)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    out = f"mploader/scan/_walk{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run([*cc, "-O3", "-Wall", "-Wextra", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
                    "mploader/scan/_walk.c", "-o", out], cwd=tree, check=True, capture_output=True)


@contextlib.contextmanager
def scratch_dir(prefix: str, parent: Path | None, keep: bool) -> Iterator[Path]:
    """A new directory under ``parent`` (default: the system's temporary directory), deleted on the way out
    unless ``keep`` (then its path is printed).  Only this directory is ever deleted: ``parent`` may be any
    directory the user names (``/tmp``, the home directory) and keeps everything it held."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        if keep:
            print(f"kept: {path}", flush=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
