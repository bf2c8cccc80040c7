"""Where Phase 1 runs, behind one interface (:class:`mploader.engine.base.Engine`); which engine a load gets is
:mod:`mploader.load_plan`'s choice.

* :mod:`.base`      the interface, and the inline scan source both engines use
* :mod:`.plan`      a data dir's planned scans (the rule itself is :mod:`mploader.scan.plan`)
* :mod:`.inline`    Phase 1 in the calling thread (the reference engine)
* :mod:`.pool`      N loky worker processes per data dir, results through shared memory
* :mod:`.worker`    what a worker process runs, and the shared-memory block layout
* :mod:`.chunks`    cutting a big segment at confirmed index positions, and stitching the pieces
* :mod:`.readahead` asks the kernel for the planned ranges ahead of the scans (cold page cache)
* :mod:`.diskorder` which dirs one reader reads in disk order (a cold disk with a head), and that order
* :mod:`.throttle`  the IO budget per data dir (``max_read_bytes_per_sec``): scans at their turns, in pieces
* :mod:`.adaptive`  adaptive workers: a controller per data dir from throughput and the device's %util
* :mod:`.cleanup`   names a load's shared memory, removes what killed loads left

This package's ``__init__`` imports nothing of its own: a worker process imports :mod:`.worker` alone.
"""

import os
import sys

# numpy's import starts OpenBLAS's thread pool, one thread per CPU, and mploader calls no BLAS routine: the pool's
# workers (loky's env) and the command's own process (cli.main) start with one, whose CPU the scans keep
# (perf/README.md, "Start-up: the process's fixed cost").
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# How a pool's workers start: "fork", a copy of the parent with numpy and the scan modules imported, scans at once;
# "spawn", loky's fresh interpreter (the start every platform has), imports them first (perf/README.md, "Workers
# forked").  MPLOADER_WORKER_START chooses; Linux forks unless told otherwise, elsewhere loky starts them.
WORKER_STARTS = ("fork", "spawn")


def worker_start(chosen: str | None = None) -> str:
    """The start method a new pool uses: ``chosen`` (``LoaderConfig.worker_start``) if given, else
    ``MPLOADER_WORKER_START`` if set (one of :data:`WORKER_STARTS`), else "fork" on Linux and "spawn" elsewhere."""
    source = "worker_start"
    if chosen is None:
        source, chosen = "MPLOADER_WORKER_START", os.environ.get("MPLOADER_WORKER_START", "").strip().lower()
        if not chosen:
            return "fork" if sys.platform == "linux" else "spawn"
    if chosen not in WORKER_STARTS:
        raise ValueError(f"{source}={chosen!r}: expected one of {', '.join(WORKER_STARTS)}")
    return chosen
