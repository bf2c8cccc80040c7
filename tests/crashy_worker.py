"""Test helpers for tests/test_engine.py: a Phase 1 worker function that dies on demand, one that
reports a worker's start-up environment, a subprocess load runner, and engine-independent digests of a
load (result and bytes on disk).

Why a module: a monkeypatch in the test process does not reach loky's worker processes.  The
subprocess runner (``python -c "from tests import crashy_worker; crashy_worker.main(SPEC)"``)
sets ``mploader.engine.pool.worker_scan = crashy_scan``; ``PoolEngine._submit`` looks ``worker_scan``
up at call time, and loky (cloudpickle) pickles a function of an importable module by reference,
so each worker imports ``tests.crashy_worker`` itself (``PYTHONPATH`` must hold the repository
root) and runs :func:`crashy_scan`, which reads what to do from the environment:

``CRASHY_MODE``    ``exit`` (``os._exit(1)``), ``segv`` (``SIGSEGV``), ``kill`` (``SIGKILL``),
                   ``memory`` (``raise MemoryError``), ``bug`` (``raise ValueError``: the scan code's own
                   exception) or ``sleep`` (no crash: sleep ``CRASHY_SLEEP``
                   seconds before scanning, a slow disk); empty: never crash
``CRASHY_MATCH``   crash only on tasks whose ``.log`` path contains this string
``CRASHY_MARKER``  a file path: crash only if it does not exist yet (created atomically first),
                   i.e. once per load; unset: crash every time (forces the inline fallback)
``CRASHY_LOG``     a file to which every worker appends ``pid mode path start`` when it crashes
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import hashlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from mploader.engine.pool import worker_scan as _real_worker_scan
from mploader.engine.worker import WORKER_NAME

# LoadStats fields that legitimately depend on the engine (or on time) and are left out when two
# loads are compared: timings, what the pool did (pickled bytes, workers, restarts, fallbacks,
# scans the parent took over because no worker had started them),
# and segments_scanned (the pool counts the segments Phase 2 collected, the inline engine every scan,
# including the producer-state reads of unrecovered segments).
# Any other stats field whose name contains "seconds" is a timing too and is left out as well.
ENGINE_DEPENDENT_STATS = ("seconds", "dir_seconds", "pickled_bytes", "workers_per_dir", "worker_start",
                          "segments_scanned", "worker_restarts", "inline_fallbacks", "scans_in_parent", "loaded_by")


def crashy_scan(task, block_name, capacity, not_before=0.0):  # type: ignore[no-untyped-def]
    """``mploader.engine.pool.worker_scan`` that dies as ``CRASHY_*`` say (see the module docstring)."""
    mode = os.environ.get("CRASHY_MODE", "")
    match = os.environ.get("CRASHY_MATCH", "")
    if mode and match in task.path:
        fire = True
        marker = os.environ.get("CRASHY_MARKER")
        if marker:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                fire = False
        if fire:
            log = os.environ.get("CRASHY_LOG")
            if log:
                with open(log, "a") as f:
                    f.write(f"{os.getpid()} {mode} {task.path} {task.start}\n")
            if mode == "exit":
                os._exit(1)
            if mode == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "memory":
                raise MemoryError("injected by tests/crashy_worker.py")
            if mode == "bug":
                raise ValueError("a bug injected by tests/crashy_worker.py")
            if mode == "sleep":
                time.sleep(float(os.environ.get("CRASHY_SLEEP", "1")))
    return _real_worker_scan(task, block_name, capacity, not_before)


def startup_report() -> tuple[dict[str, str | None], int]:
    """Runs in a worker: the thread-count variables of its environment, and how many threads the
    process has once numpy is imported (what :data:`mploader.engine.ONE_BLAS_THREAD` is for)."""
    import numpy  # noqa: F401 - imported by every scan; OpenBLAS starts its threads here

    names = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    return {n: os.environ.get(n) for n in names}, len(os.listdir(f"/proc/{os.getpid()}/task"))


def is_scan_worker(pid: int) -> bool:
    """Whether process ``pid`` is a Phase 1 worker now: a worker names itself
    :data:`mploader.engine.worker.WORKER_NAME` (its ``comm``) in its initializer; a spawned one is loky's
    ``LokyProcess`` from its start, while it still imports what a scan needs.  A zombie is no worker any more."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    name, _, rest = stat.partition(b"(")[2].rpartition(b")")
    if rest.split()[0] == b"Z":
        return False
    return name.decode(errors="replace") == WORKER_NAME or b"LokyProcess" in cmdline


def scan_workers(pid: int | None = None) -> list[int]:
    """The Phase 1 workers under process ``pid`` (this process if None), at any depth."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [c.pid for c in children if is_scan_worker(c.pid)]


def process_report() -> dict[str, Any]:
    """Runs in a worker: its command line, name, the top-level packages it has imported, where its descriptors
    point, its memory map, its SIGTERM handler and its signal wake-up descriptor."""
    pid = os.getpid()
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
    fds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed meanwhile
            pass
    modules = sorted({m.partition(".")[0] for m in sys.modules})
    return {"argv": argv, "name": Path(f"/proc/{pid}/comm").read_text().strip(), "modules": modules, "fds": fds,
            "maps": Path(f"/proc/{pid}/maps").read_text(), "sigterm": repr(signal.getsignal(signal.SIGTERM)),
            "wakeup_fd": signal.set_wakeup_fd(-1)}


# ------------------------------------------------------------------------------------------------
# Digests


def _relabel(obj: Any, roots: dict[str, str]) -> Any:
    if isinstance(obj, str):
        for path, label in roots.items():
            obj = obj.replace(path, label)
        return obj
    if isinstance(obj, dict):
        return {_relabel(k, roots): _relabel(v, roots) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_relabel(v, roots) for v in obj]
    return obj


def _json_default(o: Any) -> Any:
    if isinstance(o, enum.Enum):
        return o.value
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    return str(o)


def _plain(obj: Any) -> Any:
    """JSON-compatible form (tuples -> lists, enums -> values, dataclasses -> dicts)."""
    return json.loads(json.dumps(obj, default=_json_default))


def log_details(lg: Any) -> dict[str, Any]:
    """Every field of a LoadedLog, whatever fields it has (lists of file names sorted)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(lg):
        v = getattr(lg, f.name)
        if f.name == "topic_partition":
            v = [v.topic, v.partition]
        elif f.name == "producers":
            v = {str(pid): dataclasses.asdict(p) for pid, p in sorted(v.items())}
        elif f.name.endswith("_files"):  # deleted_files (and any other list of names)
            v = sorted(v)
        out[f.name] = v
    return out


def result_digest(result: Any, root: str | os.PathLike[str]) -> dict[str, Any]:
    """``result.to_json()`` without the engine-dependent stats, plus every LoadedLog field, with the
    data set's root path replaced by ``<root>`` (two copies of a data set live in different places)."""
    j = result.to_json()
    stats = j.pop("stats")
    j["stats"] = {k: v for k, v in stats.items() if k not in ENGINE_DEPENDENT_STATS and "seconds" not in k}
    j["details"] = [log_details(lg)
                    for lg in sorted(result.all_logs(), key=lambda lg: (lg.topic, lg.partition, lg.dir))]
    return _plain(relabel(j, root))


def relabel(obj: Any, root: str | os.PathLike[str]) -> Any:
    """``obj`` with every ``ROOT/`` in its strings replaced by ``<root>/``."""
    return _relabel(obj, {os.fspath(root).rstrip(os.sep) + os.sep: "<root>" + os.sep})


_BLOCK = 1 << 16


def file_digest(path: str) -> str:
    """sha256 of a file's content, reading only its data extents (SEEK_DATA / SEEK_HOLE): the
    real corpus holds ~6 GB of sparse preallocated index files.  Canonical: the digest covers
    every non-zero 64 KiB block (by its index) and the size, so it is equal exactly when the
    contents are, however the zeros are stored."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        h.update(size.to_bytes(8, "little"))
        pos, last_block = 0, -1
        while pos < size:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:  # only a hole from here on
                    break
                raise
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            for blk in range(max(data // _BLOCK, last_block + 1), (hole + _BLOCK - 1) // _BLOCK):
                chunk = os.pread(fd, _BLOCK, blk * _BLOCK)
                if chunk.count(0) != len(chunk):
                    h.update(blk.to_bytes(8, "little"))
                    h.update(chunk)
                last_block = blk
            pos = hole
    return h.hexdigest()


def tree_digest(root: str | os.PathLike[str]) -> dict[str, Any]:
    """{relative path: [size, sha256]} of every file, {relative path: None} of every directory."""
    out: dict[str, Any] = {}
    root = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for name in filenames:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root)] = [os.path.getsize(p), file_digest(p)]
    return out


def shm_blocks(*pids: int) -> set[str]:
    """Names of the POSIX shared-memory blocks in /dev/shm of the pool loads that processes ``pids`` ran
    (``mploader-<pid>-*``: a load names its blocks and its owner marker after the process that runs it,
    mploader.engine.cleanup), so that a test sees only its own load's, whatever other loads run on the machine.
    Without ``pids``: every pool load's (``mploader-*``) and those of Python's own naming (``psm_*``)."""
    prefixes = tuple(f"mploader-{pid}-" for pid in pids) if pids else ("psm_", "mploader-")
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith(prefixes)}
    except FileNotFoundError:  # pragma: no cover - not Linux
        return set()


def pool_pids(engine: Any) -> set[int]:
    """The pids of the workers that ``engine`` (a PoolEngine) runs now (loky's executors keep them in
    ``_processes``): the processes besides the loading one whose names a load's blocks could carry."""
    pids: set[int] = set()
    for ex in list(getattr(engine, "_executors", {}).values()):
        pids.update(int(p) for p in list(getattr(ex, "_processes", {})))
    return pids


# ------------------------------------------------------------------------------------------------
# Subprocess runner


def main(spec_path: str) -> None:
    """Load as ``spec`` (a JSON file) says, in this (sub)process.

    spec: ``dirs``, ``root``, ``n``, ``now_ms``, ``recovery_threads``, ``out`` (result digest JSON
    written there on success), ``blocks`` (every shared-memory block name the engine creates is
    appended there as it is created), ``owners`` (with ``blocks``: the pids of this process and of its
    workers, appended as each block is created), ``started`` (touched when the first partition finished
    loading; the next partition's loading thread then waits ``hold_after_started`` seconds), ``calling``
    (touched just before ``load_logs`` is called: imports and set-up are done), ``crashy`` (True:
    install :func:`crashy_scan`).
    """
    import logging

    import mploader.engine.pool
    from mploader import LoaderConfig, MetricsRegistry, load_logs
    from mploader.metrics import REMAINING_LOGS_TO_RECOVER

    with open(spec_path) as f:
        spec = json.load(f)
    # Ctrl-C raises KeyboardInterrupt here even when the test run was started in the background, whose
    # children inherit an ignored SIGINT (a shell's rule for asynchronous commands)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    # the test data sets are small: every planned scan goes to the workers unless a test says otherwise
    mploader.engine.pool.PoolEngine.parent_head_bytes = spec.get("parent_head_bytes", 0)
    if spec.get("crashy"):
        mploader.engine.pool.worker_scan = crashy_scan
    blocks_file = spec.get("blocks")
    owners_file = spec.get("owners")
    if blocks_file:
        real_new_block = mploader.engine.pool.PoolEngine._new_block

        def new_block(self, nbytes_range):  # type: ignore[no-untyped-def]
            block, capacity = real_new_block(self, nbytes_range)
            with open(blocks_file, "a") as bf:
                bf.write(block.name.lstrip("/") + "\n")
            if owners_file:  # this process and the workers so far: whose names in /dev/shm are this load's
                with open(owners_file, "a") as of:
                    of.write(" ".join(map(str, {os.getpid(), *pool_pids(self)})) + "\n")
            return block, capacity

        mploader.engine.pool.PoolEngine._new_block = new_block
    started = spec.get("started")

    def listener(event) -> None:  # type: ignore[no-untyped-def]
        if started and event.name == REMAINING_LOGS_TO_RECOVER and event.kind == "set" and not os.path.exists(started):
            with open(started, "w"):
                pass

    hold = spec.get("hold_after_started", 0)
    if hold:  # the first partition loaded after the marker waits first: a loading thread is busy, holding no lock
        import mploader.recovery.loader

        real_load = mploader.recovery.loader.LogLoader.load
        held: list[bool] = []

        def load(self):  # type: ignore[no-untyped-def]
            if not held and os.path.exists(started):
                held.append(True)
                time.sleep(hold)
            return real_load(self)

        mploader.recovery.loader.LogLoader.load = load
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=spec["n"],
                       num_recovery_threads_per_data_dir=spec.get("recovery_threads", 1))
    calling = spec.get("calling")
    if calling:
        with open(calling, "w"):
            pass
    try:
        result = load_logs(spec["dirs"], cfg, now_ms=spec["now_ms"], metrics=MetricsRegistry(listener))
    except KeyboardInterrupt:  # load_logs released the dirs' locks: none of its threads may still be loading
        alive = sorted(t.name for t in threading.enumerate() if t.name.startswith("log-recovery"))
        print(f"loading threads alive after the interrupt: {alive}", file=sys.stderr, flush=True)
        raise
    digest = result_digest(result, spec["root"])
    digest["raw_stats"] = _plain(result.stats.to_json())
    with open(spec["out"], "w") as f:
        json.dump(digest, f)


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1])
