"""The soak: randomly generated, fault-injected brokers through load, verify, load again, with random worker counts.

One round (:func:`soak_one`), from a seed:

1. a broker is generated with a random shape (data dirs, topics, partitions, sizes, segment and batch sizes,
   codec, producers and transactions, leader elections, clean or not) and random faults of every kind; a clean
   one is loaded once first (leaks checked): that load deletes the clean-shutdown marker, as Kafka's does, so
   the loads after it are unclean ones, which recover what the clean one had no reason to read;
2. **load** with a random number of Phase 1 workers (inline or a pool of 2-3) and recovery threads;
3. **verify** (``mploader.verify.verify_logs``, its dry-run prediction included) with a random worker count:
   it must change no byte, and predict that a load now recovers nothing (no cut, no deletion, no impact);
4. **load again**, with other random counts: the same outcome as the first load (offsets, segments, epochs,
   producers, or the same typed error), nothing cut or deleted, and not a byte of any file changed;
5. after each step, nothing leaked: no process left under this one, no descriptor left open, no shared-memory
   block (``/dev/shm/mploader-<this pid>-*``) or loky semaphore (``sem.loky-<this pid>-*``) left.  The two
   resource trackers (multiprocessing's and loky's) live as long as this process, one of each whatever the
   number of loads: :func:`warm_up` starts them before the first round, so that a round that starts another
   one shows.

A :class:`Mismatch` says what differed.  tests/test_soak.py runs a few rounds; perf/soak.py runs 200.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from mploader import LoaderConfig, load_logs
from mploader.errors import MploaderError
from mploader.format import compression
from mploader.generate import FAULT_KINDS, GeneratorConfig, generate
from mploader.verify import verify_logs
from tests.fingerprint import changed, tree_state

SHM_DIR = "/dev/shm"


def random_config(rng: random.Random, seed: int) -> GeneratorConfig:
    batch = rng.choice([200, 700, 2048, 8192])
    idempotent = rng.uniform(0, 0.6)
    return GeneratorConfig(
        data_dirs=rng.randint(1, 3), topics=rng.randint(1, 3), partitions_per_topic=rng.randint(1, 4),
        total_bytes=rng.randint(20_000, 1_500_000), segment_bytes=batch * rng.randint(1, 40), batch_bytes=batch,
        records_per_batch=rng.randint(1, 12), compression=rng.choice(compression.available_codecs()),
        idempotent_fraction=idempotent, transactional_fraction=rng.uniform(0, 1 - idempotent),
        abort_fraction=rng.uniform(0, 0.6), max_transaction_batches=rng.randint(1, 6),
        leader_epoch_changes=rng.uniform(0, 5), nonzero_start_fraction=rng.random(),
        delete_records_fraction=rng.uniform(0, 0.3), clean_shutdown=rng.random() < 0.2,
        faults=rng.randint(0, 8), fault_kinds=tuple(rng.sample(FAULT_KINDS, rng.randint(1, len(FAULT_KINDS)))),
        index_interval_bytes=rng.choice([0, 512, 4096]), seed=seed,
    )


def random_loader(rng: random.Random) -> LoaderConfig:
    return LoaderConfig(segment_scan_workers_per_data_dir=rng.choice([1, 1, 2, 3]),
                        num_recovery_threads_per_data_dir=rng.randint(1, 2))


class Mismatch(AssertionError):
    """A round's outcome differed from the first load's, or something leaked."""


@dataclass
class Footprint:
    """What this process holds that a load must give back."""

    fds: set[str]
    children: set[int]
    shm: set[str]

    @classmethod
    def now(cls) -> Footprint:
        pid = os.getpid()
        names = os.listdir(SHM_DIR) if os.path.isdir(SHM_DIR) else []
        mine = {n for n in names if n.startswith((f"mploader-{pid}-", f"sem.loky-{pid}-"))}
        return cls(set(os.listdir("/proc/self/fd")), {p.pid for p in psutil.Process().children(recursive=True)},
                   mine)

    def leaks_since(self, before: Footprint) -> list[str]:
        out = [f"shared memory {n}" for n in sorted(self.shm - before.shm)]
        out += [f"process {p}" for p in sorted(self.children - before.children)]
        out += [f"descriptor {fd} -> {_target(fd)}" for fd in sorted(self.fds - before.fds)]
        return out


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


def _settled(before: Footprint, what: str, timeout: float = 10.0) -> None:
    """Nothing of ``before``'s kinds left over ``what``; workers and trackers get ``timeout`` s to exit."""
    deadline = time.monotonic() + timeout
    while True:
        leaks = Footprint.now().leaks_since(before)
        if not leaks:
            return
        if time.monotonic() > deadline:
            raise Mismatch(f"{what} leaked: {', '.join(leaks)}")
        time.sleep(0.05)


def outcome(result: Any) -> dict[str, Any]:
    """What a load says about each partition, without what it did to get there."""
    return {str(tp): (lg.dir, lg.kind, lg.log_start_offset, lg.recovery_point, lg.log_end_offset,
                      [(s.base_offset, s.size_bytes) for s in lg.segments], lg.leader_epochs,
                      sorted((pid, repr(p)) for pid, p in lg.producers.items()))
            for tp, lg in result.logs.items()} | {"offline": dict(result.offline_dirs)}


def _load(dirs: list[str], config: LoaderConfig) -> Any:
    """The load's result, or the typed error it raised (an outcome too: a broker that would not start)."""
    try:
        return load_logs(dirs, config, now_ms=0)
    except MploaderError as e:
        return e


@dataclass
class Round:
    seed: int
    segments: int = 0
    faults: int = 0
    log_bytes: int = 0
    workers: list[int] = field(default_factory=list)  # first load, verify, second load
    failed_start: str | None = None  # the typed error both loads raised, if any
    recovered_segments: int = 0  # by the first load
    clean_load: bool = False  # the broker was generated clean: a clean load ran first (its marker goes)
    seconds: float = 0.0


def warm_up() -> None:
    """Start the per-process resource trackers (multiprocessing's, for shared memory, and loky's) before the rounds:
    a pool starts them at its first use and they stay for the life of the process."""
    import multiprocessing.resource_tracker

    import loky.backend.resource_tracker

    multiprocessing.resource_tracker.ensure_running()
    loky.backend.resource_tracker.ensure_running()


def soak_one(seed: int, work: Path) -> Round:
    """One round (see the module docstring) in a fresh directory under ``work``; raises :class:`Mismatch`."""
    t0 = time.perf_counter()
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix=f"soak-{seed}-", dir=work))
    try:
        summary = generate(root, random_config(rng, seed))
        r = Round(seed, summary.segments, len(summary.faults), summary.log_bytes)
        dirs = list(summary.data_dirs)
        first_cfg, verify_cfg, second_cfg = random_loader(rng), random_loader(rng), random_loader(rng)
        r.workers = [int(c.segment_scan_workers_per_data_dir) for c in (first_cfg, verify_cfg, second_cfg)]
        where = f"seed {seed} (workers {r.workers})"

        before = Footprint.now()
        if summary.clean_shutdown:  # the load that finds the marker deletes it: from there on, loads are unclean
            _load(dirs, random_loader(rng))  # its outcome is not compared: the loads after it are
            r.clean_load = True
            _settled(before, f"{where}: the clean load")
        first = _load(dirs, first_cfg)
        _settled(before, f"{where}: the first load")
        after_first = tree_state(root)

        report = verify_logs(dirs, verify_cfg, now_ms=0)
        _settled(before, f"{where}: verify")
        if tree_state(root) != after_first:
            raise Mismatch(f"{where}: verify changed {changed(after_first, tree_state(root))}")
        if not isinstance(first, MploaderError):
            for p in report.partitions:
                rec = p.recovery
                if rec is not None and (rec["truncated_segments"] or rec["deleted_segments"] or rec["deleted_files"]
                                        or rec["impact"]["records_removed"] or rec["impact"]["bytes_removed"]):
                    raise Mismatch(f"{where}: verify predicts that a load would still recover {p.dir}: {rec}")

        second = _load(dirs, second_cfg)
        _settled(before, f"{where}: the second load")
        if tree_state(root) != after_first:
            raise Mismatch(f"{where}: the second load changed {changed(after_first, tree_state(root))}")
        if isinstance(first, MploaderError) or isinstance(second, MploaderError):
            if (type(first), str(first)) != (type(second), str(second)):
                raise Mismatch(f"{where}: the loads ended differently: {first!r} then {second!r}")
            r.failed_start = f"{type(first).__name__}: {first}"
        else:
            if outcome(second) != outcome(first):
                diff = [k for k in outcome(first) if outcome(first)[k] != outcome(second).get(k)]
                raise Mismatch(f"{where}: the second load's outcome differs for {diff}")
            busy = [str(tp) for tp, lg in second.logs.items() if lg.truncated_bytes or lg.deleted_files
                    or lg.deleted_segments or lg.impact.changed_data]
            if busy:
                raise Mismatch(f"{where}: the second load still recovered {busy}")
            r.recovered_segments = sum(len(lg.recovered_segments) for lg in first.logs.values())
        r.seconds = time.perf_counter() - t0
        return r
    finally:
        shutil.rmtree(root, ignore_errors=True)


__all__ = ["Footprint", "Mismatch", "Round", "outcome", "random_config", "random_loader", "soak_one", "warm_up"]
