"""The process-count sweep on a many-core host: mploader's whole process at 1..N workers against the compiled
ceiling at as many processes, on the same page-cached data, in alternating rounds.

    python perf/manycore.py [--workers 1,2,4,8,12,16] [--rounds 3] [--base-size 1GB] [--copies 8]
        [--small-size 2GB] [--sets big,dirs4,small] [--work DIR] [--json-out F] [--spawned-workers 2,16]
        [--partition-workers 2,4,8,16]

The data sets (every one unclean, recovery point 0: every byte is read, CRC-checked and indexed again):

* ``big``: one data dir of ``8 x copies`` partitions of ~1 KB batches in 64 MiB segments (``copies x
  base-size``): the case a pool is for, Phase 1 work much larger than Phase 2's;
* ``dirsK``: the same bytes and partitions over K data dirs (a JBOD broker: a pool and a Phase 2 thread per dir);
* ``small``: one data dir of ``small-size`` in 1 MB segments of ~16 KB batches (2,000 segments at 2 GB): a
  realistic broker where Phase 2, serial in the parent, is a large share (Amdahl's bound on any pool).

``big`` and ``dirsK`` are one generated broker of 8 partitions copied under new partition numbers (the
generator spends ~8 us of CPU a batch in one process; the loads read the copies as distinct files). A load
leaves rebuilt indexes and new snapshots behind; before each run the data dir is made unclean again
(``make_unclean``), which gives the next run the same work (the same segments recovered, the same bytes read:
checked by the correctness pass, which compares every run's offsets with the first ``--workers 1`` run's).

Each round times, per set: the compiled walk + CRC-32C (``perf/engine.py``'s ceiling: ``mploader.scan._walk``
over a mapping of each file, no table kept, no Phase 2) in 1..N processes splitting the files, then
``mploader load --json --workers W`` as a fresh process for every W and ``auto``, in an order that changes
from round to round, and ``--partition-workers N`` ("pN": whole partitions in N processes, mploader.runners.processes)
for each N of ``--partition-workers``. It prints a table per set (medians) and, with ``--json-out``, every run as
it goes.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import re
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PERF = Path(__file__).resolve().parent
sys.path[:0] = [str(PERF.parent), str(PERF)]

from engine import bare_parallel, bare_walk_compiled  # noqa: E402 - perf/engine.py, beside this script

from mploader.experiments.report import cpu_model  # noqa: E402
from mploader.experiments.run import copy_sparse, make_unclean  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from mploader.host.cpus import usable_cpus  # noqa: E402
from mploader.scan import walk as walk_mod  # noqa: E402
from perf.kafka_compare import (  # noqa: E402
    Failed,
    compare,
    parse_mploader,
    phase2_seconds,
    round_order,
    timed_process,
)
from perf.trees import mploader_argv, worker_start_as  # noqa: E402

MB = 1_000_000
BASE_PARTITIONS = 8


@dataclass
class DataSet:
    key: str
    label: str
    dirs: list[str]
    facts: str = ""
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # contender -> its runs
    ceiling: dict[int, list[float]] = field(default_factory=dict)  # processes -> seconds of each round

    def log_paths(self) -> list[str]:
        return sorted(str(p) for d in self.dirs for p in Path(d).rglob("*.log"))


# ----------------------------------------------------------------------------------------------- the data


def new_directory_id(meta: Path) -> None:
    """A data dir's own ``directory.id`` in its meta.properties (two dirs of a broker never share one)."""
    fresh = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
    meta.write_text(re.sub(r"(?m)^directory\.id=.*$", f"directory.id={fresh}", meta.read_text()))


def copy_broker(base: Path, dest: Path, partitions: range) -> str:
    """A data dir at ``dest`` holding ``base``'s files and, for each number in ``partitions``, a copy of base
    partition ``n % 8`` as partition ``n`` of the same topic; made unclean."""
    dest.mkdir(parents=True)
    names = {int(p.name.rsplit("-", 1)[1]): p for p in base.iterdir() if p.is_dir()}
    for f in base.iterdir():
        if f.is_file() and f.name != ".lock":
            shutil.copy2(f, dest / f.name)
    new_directory_id(dest / "meta.properties")
    for n in partitions:
        src = names[n % BASE_PARTITIONS]
        shutil.copytree(src, dest / f"{src.name.rsplit('-', 1)[0]}-{n}", copy_function=copy_sparse)
    make_unclean([dest])
    return str(dest)


def make_sets(args: argparse.Namespace, root: Path) -> list[DataSet]:
    wanted = args.sets.split(",")
    sets = []
    dir_counts = [int(w[4:]) for w in wanted if re.fullmatch(r"dirs\d+", w)]
    if "big" in wanted or dir_counts:
        t0 = time.perf_counter()
        g = generate(str(root / "base"), GeneratorConfig(
            data_dirs=1, topics=1, partitions_per_topic=BASE_PARTITIONS, total_bytes=args.base_size,
            segment_bytes=64 * 2**20, batch_bytes=1024, records_per_batch=1, idempotent_fraction=0.3,
            transactional_fraction=0.1, nonzero_start_fraction=0.0, delete_records_fraction=0.0,
            clean_shutdown=False, faults=0, seed=1))
        base = Path(g.data_dirs[0])
        made = f"{g.batches:,} batches in {g.segments} segments generated in {time.perf_counter() - t0:.1f} s"
        n = BASE_PARTITIONS * args.copies
        size = args.base_size * args.copies / 1e9
        if "big" in wanted:
            t0 = time.perf_counter()
            d = copy_broker(base, root / "big" / "data-0", range(n))
            sets.append(DataSet("big", f"1 data dir, {n} partitions of ~1 KB batches, 64 MiB segments "
                                f"({size:.0f} GB)", [d], f"{made}; copied in {time.perf_counter() - t0:.1f} s"))
        for k in dir_counts:
            t0 = time.perf_counter()
            per = n // k
            ds = [copy_broker(base, root / f"dirs{k}" / f"data-{i}", range(i * per, (i + 1) * per)) for i in range(k)]
            sets.append(DataSet(f"dirs{k}", f"{k} data dirs x {per} partitions of ~1 KB batches ({size:.0f} GB)", ds,
                                f"{made}; copied in {time.perf_counter() - t0:.1f} s"))
        shutil.rmtree(root / "base")
    if "small" in wanted:
        t0 = time.perf_counter()
        segments = args.small_size // MB
        topics = max(1, segments // 100)
        g = generate(str(root / "small"), GeneratorConfig(
            data_dirs=1, topics=topics, partitions_per_topic=10, total_bytes=args.small_size, segment_bytes=MB,
            batch_bytes=16 * 1024, clean_shutdown=False, faults=0, seed=3))
        make_unclean([Path(d) for d in g.data_dirs])
        sets.append(DataSet("small", f"1 data dir, {g.partitions} partitions, {g.segments:,} segments of 1 MB, "
                            f"~16 KB batches ({g.log_bytes / 1e9:.1f} GB)", list(g.data_dirs),
                            f"generated in {time.perf_counter() - t0:.1f} s"))
    return sets


# ----------------------------------------------------------------------------------------------- the runs


def contender_parts(contender: str) -> tuple[str, bool, str | None]:
    """A contender is ``--workers``' value, with ``@base`` for the tree ``--base`` instead of this one, or ``~spawn``
    for workers started as fresh interpreters (``MPLOADER_WORKER_START=spawn``) instead of forked: the count, whether
    from the base tree, and the start method asked for (None: the default)."""
    spec, _, start = contender.partition("~")
    workers, _, which = spec.partition("@")
    return workers, bool(which), start or None


def load_once(contender: str, ds: DataSet, scratch: Path, base: Path | None = None) -> dict[str, Any]:
    """One whole ``mploader load`` process over the set's data dirs, made unclean first (not timed) (a contender:
    :func:`contender_parts`)."""
    workers, from_base, start = contender_parts(contender)
    make_unclean([Path(d) for d in ds.dirs])
    argv = mploader_argv(workers, base if from_base else None)(*ds.dirs)
    with worker_start_as(start):
        seconds, cpu, text = timed_process(f"--workers {contender}", argv, scratch)
    partitions, stats = parse_mploader(text)
    return {"seconds": seconds, "cpu": cpu, "stats": stats, "partitions": partitions}


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(ds: DataSet, contenders: list[str], say: Any) -> None:
    say(f"\n### {ds.label}\n\n{ds.facts}\n")
    say("| workers | mploader s | speed-up | compiled ceiling s | its speed-up | share of the ceiling's speed-up "
        "| CPU s | scan s (all processes) | Phase 2 waited s | the load in process s | the parent's own CPU s |")
    say("|---|---|---|---|---|---|---|---|---|---|---|")
    one = med([r["seconds"] for r in ds.runs["1"]])
    c1 = med(ds.ceiling.get(1, []))
    for w in contenders:
        rs = ds.runs.get(w) or []
        if not rs:
            continue
        t = med([r["seconds"] for r in rs])
        picked = sorted({r["stats"]["workers_per_dir"] for r in rs})
        count, from_base, start = contender_parts(w)
        whole = {r["stats"].get("loaded_by") for r in rs} - {None}  # auto that loaded whole partitions in workers
        label = (f"auto ({'/'.join(map(str, picked))} a dir)" if not whole else f"auto ({', '.join(sorted(whole))})"
                 ) if count == "auto" else (f"{count[1:]}, whole partitions" if count.startswith("p") else count)
        label += " (base)" if from_base else ""
        label += f" ({start}ed)" if start else ""
        cells = [label, f"{t:.2f}", f"{one / t:.2f}x"]
        n = None if count == "auto" else int(count.lstrip("p"))
        if n is not None and ds.ceiling.get(n):
            c = med(ds.ceiling[n])
            cells += [f"{c:.3f}", f"{c1 / c:.2f}x", f"{(one / t) / (c1 / c):.0%}"]
        else:
            cells += ["", "", ""]
        cells += [f"{med([r['cpu'] for r in rs]):.2f}", f"{med([r['stats']['scan_seconds'] for r in rs]):.2f}",
                  f"{med([r['stats']['wait_seconds'] for r in rs]):.2f}",
                  f"{med([r['stats']['seconds']['total'] for r in rs]):.2f}"]
        # stats seconds.cpu: the serial part no count of workers shortens (absent from trees before 3c70c82)
        own = [r["stats"]["seconds"]["cpu"] for r in rs if "cpu" in r["stats"]["seconds"]]
        cells.append(f"{med(own):.2f}" if own else "")
        say("| " + " | ".join(cells) + " |")
    fixed = {w: med([r["seconds"] for r in rs]) for w, rs in ds.runs.items() if w.lstrip("p").isdigit() and rs}
    if ds.runs.get("auto") and fixed:
        best = min(fixed, key=fixed.__getitem__)
        named = f"{best[1:]} workers, whole partitions" if best.startswith("p") else f"{best} workers"
        say(f"\n`auto` {med([r['seconds'] for r in ds.runs['auto']]) / fixed[best]:.2f}x the best fixed count "
            f"({named}, {fixed[best]:.2f} s)")
    if len(ds.dirs) > 1:  # scan_seconds sums the dirs' loading threads, which ran at once: no serial share to read
        return
    inline = ds.runs["1"]
    total = med([r["stats"]["seconds"]["total"] for r in inline])
    scans = med([r["stats"]["scan_seconds"] for r in inline])
    p2 = med([phase2_seconds(r["stats"]) for r in inline])
    say(f"With 1 worker: the load {total:.2f} s in process, its scans {scans:.2f} s, Phase 2 and fixed costs "
        f"{p2:.2f} s, the process around the load {one - total:.2f} s (Amdahl: with Phase 2 serial in the parent, "
        f"no count of scanning workers brings the process under ~{p2 + one - total:.2f} s; whole partitions in "
        f"workers share Phase 2 too)")


def main() -> int:
    from mploader.cli.units import parse_size

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,4,8,12,16", help="process counts; 1 (inline) is always included")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base-size", type=parse_size, default=parse_size("1GB"))
    ap.add_argument("--copies", type=int, default=8, help="'big' and 'dirsK' hold this many copies of the base")
    ap.add_argument("--small-size", type=parse_size, default=parse_size("2GB"))
    ap.add_argument("--sets", default="big,dirs4,small", help="big, dirsK (big's bytes in K dirs), small")
    ap.add_argument("--work", type=Path, default=Path("/dev/shm"), help="parent of the scratch directory "
                    "(default /dev/shm: tmpfs, the page-cached case); only the scratch directory is deleted")
    ap.add_argument("--json-out", type=Path, help="every run, appended as JSON lines as they finish")
    ap.add_argument("--base", type=Path, help="also run each of --base-workers from this tree (a checkout of another "
                    "revision with its compiled walk built), alternating with this one's")
    ap.add_argument("--base-workers", default="", help="the counts (or auto) run from --base too")
    ap.add_argument("--partition-workers", default="2,4,8,16",
                    help="the counts of processes loading whole partitions (--partition-workers) timed too; '' none")
    ap.add_argument("--spawned-workers", default="", help="the counts (or auto) run again with spawned workers "
                    "(MPLOADER_WORKER_START=spawn), alternating with the forked ones")
    args = ap.parse_args()
    counts = sorted({1, *(int(w) for w in args.workers.split(","))})
    def say(line: str) -> None:
        print(line, flush=True)

    def record(obj: dict[str, Any]) -> None:
        if args.json_out:
            with open(args.json_out, "a") as f:
                f.write(json.dumps(obj) + "\n")

    cmd = " ".join(["python perf/manycore.py", *sys.argv[1:]])
    facts = {"cpu_model": cpu_model(), "cpus": os.cpu_count(), "usable_cpus": usable_cpus(),
             "python": platform.python_version(), "compiled_walk": walk_mod.COMPILED,
             "sse4_2": "sse4_2" in Path("/proc/cpuinfo").read_text()}
    say(f"`{cmd}`, {time.strftime('%Y-%m-%d %H:%M')}; {facts}")
    record({"type": "facts", "command": cmd, **facts})
    if not walk_mod.COMPILED:
        say("!!! the compiled walk is not built: the ceiling needs it")
        return 2
    root = Path(args.work) / f"mploader-manycore-{os.getpid()}"
    t_start = time.perf_counter()
    failures = 0
    try:
        sets = make_sets(args, root)
        for ds in sets:
            say(f"[{ds.key}] {ds.label}: {ds.facts}")
        contenders = [str(n) for n in counts] + ["auto"]
        if args.base:
            contenders += [f"{w}@base" for w in args.base_workers.split(",") if w]
        contenders += [f"{w}~spawn" for w in args.spawned_workers.split(",") if w]
        contenders += [f"p{w}" for w in args.partition_workers.split(",") if w]
        for w in ("1", str(counts[-1])):  # warm-up, not counted: the first process compiles and caches more
            load_once(w, sets[0], root)
        for r in range(args.rounds):
            for ds in sets:
                paths = ds.log_paths()
                for n in counts if r % 2 == 0 else counts[::-1]:
                    secs = bare_parallel(paths, n, bare_walk_compiled)
                    ds.ceiling.setdefault(n, []).append(secs)
                    record({"type": "ceiling", "set": ds.key, "round": r, "processes": n, "seconds": secs})
                time.sleep(1.0)  # the ceiling's pools finish exiting: a load right after them ran 0.1-0.2 s slower
                for w in round_order(contenders, r):
                    try:
                        run = load_once(w, ds, root, args.base)
                    except Failed as e:
                        say(f"!!! [{ds.key}] FAILED: {e}")
                        failures += 1
                        continue
                    ds.runs.setdefault(w, []).append(run)
                    record({"type": "load", "set": ds.key, "round": r, "workers": w, "seconds": run["seconds"],
                            "cpu": run["cpu"], "stats": run["stats"]})
                    print(f"  round {r + 1} [{ds.key}] --workers {w:<5} {run['seconds']:6.2f} s (CPU {run['cpu']:6.2f}"
                          f" s, {run['stats']['workers_per_dir']} a dir)", flush=True)
        for ds in sets:
            ref = ds.runs["1"][0]["partitions"]
            bad = [(w, k) for w, rs in ds.runs.items() for k, run in enumerate(rs) if compare(ref, run["partitions"])]
            for w, k in bad:
                say(f"!!! [{ds.key}] MISMATCH: --workers {w} run {k + 1} loaded other offsets than --workers 1")
            failures += len(bad)
            say(f"[{ds.key}] correctness: {sum(map(len, ds.runs.values())) - len(bad)} runs loaded the same "
                f"offsets as the first --workers 1 run ({len(ref)} partitions)")
            report(ds, contenders, say)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    say(f"\n{time.perf_counter() - t_start:.0f} s in all; "
        + ("every run agreed" if not failures else f"!!! {failures} failed or mismatched run(s)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
