"""mploader against Kafka's own loader (the oracle of ../shared/kafka-oracle), whole process against whole process.

    .venv/bin/python perf/kafka_compare.py [--rounds 3] [--quick] [--sets a,b,...] [--oracle PATH] [--json-out F]
        [--work DIR] [--keep] [--base REV]

For each data set below (ONE data dir each, made with ``mploader.generate``, no faults; unclean with the
recovery point forced to 0 unless said, so that every segment is recovered) it times, in alternating rounds
whose order changes from round to round, the whole process of:

* ``mploader load --json --workers 1``, ``--workers 2`` and ``--workers auto`` (the console script of the
  interpreter running this file: the working tree as it is), and ``--partition-workers 2`` ("P=2": whole
  partitions in 2 worker processes, mploader.runners.processes);
* Kafka's LogLoader driven like ``LogManager.loadLogs``: ``oracle datadir DIR --threads 1`` and ``--threads 2``
  (Kafka 4.0's default), when ``$KAFKA_ORACLE`` or ``~/.cache/kafka-oracle/oracle`` is there (else skipped).

Every run gets a fresh copy of the data dir (``cp -a`` then ``sync``, not timed; the copy leaves its pages in
the page cache, so every run reads a warm cache). It reports the median seconds of each, the ratio of each to
Kafka with 2 threads, and checks per data set that every run of either tool loaded the same offsets as Kafka:
per partition the kind, log start and end offsets, recovery point (mploader's against Kafka's after
``UnifiedLog`` raised it to the log start), the segments' base offsets and sizes, and the leader epochs. A
difference is printed as MISMATCH and the script exits with status 1.

For the 1,000-segment set it also reports Phase 2's share of the load: with ``--workers 1`` the scans run
inline, so Phase 2 (and the fixed costs around it) = stats ``seconds.total`` - ``scan_seconds``; and how much of
it is writing files (stats ``write_seconds`` + ``seconds.flush``) and the rest, Phase 2 beyond writing, in ms a
recovered segment. Then, for every mploader variant, the loading process's own CPU seconds (stats
``seconds.cpu``, its workers' not included) and their share of the load: the serial part, which bounds what more
workers can give.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mploader.experiments.kafka import (  # noqa: E402
    OracleFailed,
    compare,
    find_oracle,
    mploader_partitions,
    oracle_partitions,
)
from mploader.experiments.report import cpu_model  # noqa: E402
from mploader.experiments.run import make_unclean  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from perf.trees import mploader_argv, scratch_dir, worktree_of  # noqa: E402

MB = 1_000_000


@dataclass(frozen=True)
class DataSet:
    key: str
    label: str
    config: dict[str, Any]  # GeneratorConfig's fields beyond one data dir, no faults
    recovery_point_zero: bool = True  # made unclean after generation (make_unclean): every segment recovered
    seed: int = 1


def data_sets(quick: bool) -> list[DataSet]:
    """The five data sets (``--quick``: about a quarter of the bytes, of the partitions of the last two)."""
    s = 4 if quick else 1
    kb1 = dict(batch_bytes=1024, records_per_batch=1)
    return [
        DataSet("a", "8 partitions x 6 segments, 240k ~1 KB batches (240 MB)",
                dict(topics=1, partitions_per_topic=8, total_bytes=240 * MB // s, segment_bytes=5_500_000 // s, **kb1)),
        DataSet("b", "1 partition x 48 segments (240 MB)",
                dict(topics=1, partitions_per_topic=1, total_bytes=240 * MB // s, segment_bytes=5_000_000 // s, **kb1)),
        DataSet("c", "8 partitions x 4 segments of ~16 KB batches (332 MB)",
                dict(topics=1, partitions_per_topic=8, total_bytes=332 * MB // s, segment_bytes=12_500_000 // s,
                     batch_bytes=16 * 1024)),
        DataSet("d", "100 partitions x 10 segments of 100 KB (1,000 recovered segments)",
                dict(topics=10 // (2 if quick else 1), partitions_per_topic=10 // (2 if quick else 1),
                     total_bytes=90 * MB // s, segment_bytes=100_000)),
        DataSet("e", "clean shutdown, 300 partitions x 10 small segments",
                dict(topics=30 // s, partitions_per_topic=10, total_bytes=270 * MB // s, segment_bytes=100_000,
                     clean_shutdown=True), recovery_point_zero=False),
        DataSet("z", "empty data dir (the process's fixed cost)", {}, recovery_point_zero=False),
    ]


# ----------------------------------------------------------------------------------------------- runners


@dataclass
class Contender:
    name: str
    kind: str  # "mploader" or "kafka"
    argv: Callable[[str], list[str]]


@dataclass
class Run:
    seconds: float
    cpu: float  # user + system seconds of the process and the children it waited for (workers, JVM threads)
    partitions: dict[str, dict[str, Any]]  # partition dir name -> the offsets compared
    stats: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ Phase 2 from a load's stats (--workers 1)


def phase2_seconds(stats: dict[str, Any]) -> float:
    """Phase 2 and the fixed costs around it: the load less its scans (which run inline with ``--workers 1``),
    the process's start excluded."""
    return float(stats["seconds"]["total"] - stats["scan_seconds"])


def writing_seconds(stats: dict[str, Any]) -> float | None:
    """Phase 2's time in the file system: its file changes (``write_seconds``: creates, writes, truncations,
    renames, deletes) and the final sync (``seconds.flush``); None from a tree before ``write_seconds``."""
    if "write_seconds" not in stats:
        return None
    return float(stats["write_seconds"] + stats["seconds"]["flush"])


def beyond_writing_seconds(stats: dict[str, Any]) -> float | None:
    """Phase 2 beyond writing its bytes (issue 11's target is per recovered segment of this)."""
    writing = writing_seconds(stats)
    return None if writing is None else phase2_seconds(stats) - writing


def serial_parts(runs: dict[str, list[Run]]) -> str:
    """Each mploader variant's own process CPU in the load (stats ``seconds.cpu``: its threads, not its workers'),
    against the load's wall time: the part no number of workers shortens (Amdahl's serial part, at most)."""
    cells = []
    for name, rs in runs.items():
        got = [r for r in rs if name.startswith("mploader") and "cpu" in r.stats.get("seconds", {})]
        if got:
            cpu = statistics.median(r.stats["seconds"]["cpu"] for r in got)
            share = statistics.median(r.stats["seconds"]["cpu"] / r.stats["seconds"]["total"] for r in got)
            cells.append(f"{name.removeprefix('mploader ')} {cpu:.3f} s ({share:.0%})")
    return "  the loading process's own CPU (stats seconds.cpu; of the load, medians): " + ", ".join(cells)


def per_segment_ms(seconds: float | None, stats: dict[str, Any]) -> float | None:
    """``seconds`` per recovered segment of the load, in milliseconds."""
    return None if seconds is None else seconds / max(1, stats["segments_recovered"]) * 1e3


def figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def median_cell(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    return figure(statistics.median(known) if known else None)


def oracle_argv(oracle: str, threads: int) -> Callable[[str], list[str]]:
    return lambda d: [oracle, "datadir", d, "--threads", str(threads)]


class Failed(Exception):
    pass


def parse_mploader(text: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    doc = json.loads(text)
    if "error" in doc:
        raise Failed(f"mploader failed: {doc['error']}")
    if doc.get("offline_dirs"):
        raise Failed(f"mploader: offline dirs {doc['offline_dirs']}")
    return mploader_partitions(doc["logs"]), doc["stats"]


def parse_kafka(text: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    try:
        return oracle_partitions(text)
    except OracleFailed as e:
        raise Failed(str(e)) from None


def run_once(c: Contender, template: str, scratch: Path) -> Run:
    """A fresh copy of the template (not timed), then the whole process, timed."""
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    data = scratch / "data"
    subprocess.run(["cp", "-a", template, str(data)], check=True)
    os.sync()  # the copy's writeback must not land in the timed run; its pages stay cached (warm)
    dt, cpu, text = timed_process(c.name, c.argv(str(data)), scratch)
    parts, stats = (parse_mploader if c.kind == "mploader" else parse_kafka)(text)
    shutil.rmtree(scratch)
    return Run(dt, cpu, parts, stats)


def timed_process(name: str, argv: list[str], scratch: Path) -> tuple[float, float, str]:
    """Run ``argv`` (its output into files under ``scratch``): its wall seconds, its CPU seconds (user + system,
    the children it waited for included) and its stdout; Failed if it exits non-zero."""
    out_path, err_path = scratch / "stdout", scratch / "stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        rc = subprocess.call(argv, stdout=out, stderr=err)
        dt = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = out_path.read_text()
    if rc != 0:
        raise Failed(f"{name} exited {rc}: {err_path.read_text()[-2000:]} {text[-2000:]}")
    return dt, ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, text


# ----------------------------------------------------------------------------------------------- main


def round_order(contenders: list[Contender], r: int) -> list[Contender]:
    """Round r: the list rotated by r, reversed on odd rounds (ABAB..., then BABA..., from another start)."""
    n = len(contenders)
    order = [contenders[(i + r) % n] for i in range(n)]
    return order[::-1] if r % 2 else order


def make_template(ds: DataSet, root: Path) -> tuple[str, str]:
    """The data set's one data dir, generated under ``root / gen-KEY`` (a new name in a fresh scratch directory),
    and a line of facts about it."""
    out = root / f"gen-{ds.key}"
    if not ds.config:  # the empty data dir
        empty = out / "data-0"
        empty.mkdir(parents=True)
        return str(empty), "empty"
    cfg = GeneratorConfig(data_dirs=1, faults=0, seed=ds.seed, **ds.config)
    t0 = time.perf_counter()
    g = generate(str(out), cfg)
    d = g.data_dirs[0]
    if ds.recovery_point_zero:
        make_unclean([Path(d)])
    facts = (f"{g.partitions} partitions, {g.segments} segments, {g.batches:,} batches, {g.log_bytes / MB:.0f} MB "
             f"(generated in {time.perf_counter() - t0:.1f} s)")
    return d, facts


def machine() -> str:
    return f"nproc {os.cpu_count()}, CPU model {cpu_model()!r}, Python {platform.python_version()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one round, about a quarter of the data")
    ap.add_argument("--sets", default="a,b,c,d,e,z", help="which data sets (keys a..e, z: empty data dir)")
    ap.add_argument("--oracle", help="Kafka oracle launcher (default: $KAFKA_ORACLE, ~/.cache/kafka-oracle/oracle)")
    ap.add_argument("--work", type=Path, help="where the scratch directory goes (default: the system's temporary "
                    "directory; the scratch directory is deleted at the end, the --work directory is not)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (the generated data sets) and "
                    "print its path")
    ap.add_argument("--json-out", help="also write every timing and stat here")
    ap.add_argument("--base", metavar="REV", help="also time mploader at this git revision (a worktree of it), each "
                    "variant beside this tree's, in the same rounds: a change's cost or gain against Kafka's")
    args = ap.parse_args()
    with scratch_dir("mploader-kafka-compare-", args.work, args.keep) as root:
        if args.base is None:
            return run_sets(args, root)
        with worktree_of(args.base, root) as base:
            return run_sets(args, root, base)


def run_sets(args: argparse.Namespace, root: Path, base: Path | None = None) -> int:
    """Every data set asked for, generated under ``root``: timed, checked, reported; 1 if a run failed or differed.
    ``base``: a worktree whose mploader runs beside this tree's (``--base``)."""
    rounds = 1 if args.quick else args.rounds
    oracle = find_oracle(args.oracle)

    def ours(label: str, workers: str) -> list[Contender | None]:
        here = Contender(f"mploader {label}", "mploader", mploader_argv(workers))
        return [here, None if base is None else
                Contender(f"base {label}", "mploader", mploader_argv(workers, base))]

    listed = [
        *ours("N=1", "1"),
        Contender("Kafka 1 thread", "kafka", oracle_argv(oracle, 1)) if oracle else None,
        *ours("N=2", "2"),
        Contender("Kafka 2 threads", "kafka", oracle_argv(oracle, 2)) if oracle else None,
        *ours("auto", "auto"),
        *ours("P=2", "p2"),
    ]
    contenders = [c for c in listed if c is not None]
    names = [c.name for c in contenders]
    cmd = " ".join(["python perf/kafka_compare.py", *sys.argv[1:]])
    print(f"`{cmd}`, {time.strftime('%Y-%m-%d %H:%M')}; {machine()}", flush=True)
    print(f"Kafka oracle: {oracle}" if oracle else
          "Kafka oracle: NOT FOUND (set KAFKA_ORACLE or build ../shared/kafka-oracle): Kafka's columns are skipped",
          flush=True)

    wanted = args.sets.split(",")
    results: dict[str, dict[str, list[Run]]] = {}
    facts: dict[str, str] = {}
    mismatches = 0
    t_start = time.perf_counter()
    sets = [ds for ds in data_sets(args.quick) if ds.key in wanted]
    for i, ds in enumerate(sets):
        template, facts[ds.key] = make_template(ds, root)
        print(f"\n[{ds.key}] {ds.label}: {facts[ds.key]}", flush=True)
        if i == 0:  # warm-up of every contender (interpreter, JVM, class files): not counted
            for c in contenders:
                run_once(c, template, root / "run")
        runs: dict[str, list[Run]] = {c.name: [] for c in contenders}
        for r in range(rounds):
            for c in round_order(contenders, r):
                try:
                    run = run_once(c, template, root / "run")
                except Failed as e:
                    print(f"  !!! FAILED: {e}", flush=True)
                    mismatches += 1
                    continue
                runs[c.name].append(run)
                print(f"  round {r + 1} {c.name:<16} {run.seconds:6.2f} s  (CPU {run.cpu:5.2f} s, load average "
                      f"{os.getloadavg()[0]:.1f})", flush=True)
        results[ds.key] = runs
        # correctness: every run against the first run of Kafka (or of mploader N=1 when Kafka is absent)
        ref_name = "Kafka 2 threads" if oracle else "mploader N=1"
        if not runs.get(ref_name):
            print(f"  !!! no reference run ({ref_name}) to check against", flush=True)
            mismatches += 1
        else:
            ref = runs[ref_name][0].partitions
            bad = 0
            for name, rs in runs.items():
                for k, run in enumerate(rs):
                    diffs = compare(ref, run.partitions)
                    if diffs:
                        bad += 1
                        print(f"  !!! MISMATCH: {name} run {k + 1} differs from {ref_name}:", flush=True)
                        for line in diffs:
                            print(f"  !!!   {line}", flush=True)
            mismatches += bad
            segs = sum(len(p["segments"]) for p in ref.values())
            n_runs = sum(len(rs) for rs in runs.values())
            if not bad:
                print(f"  correctness: all {n_runs} runs loaded the same as {ref_name} ({len(ref)} partitions, "
                      f"{segs} segments: kind, log start/end offsets, recovery point, segment bases and sizes, "
                      f"leader epochs)", flush=True)
        if not args.keep:
            shutil.rmtree(root / f"gen-{ds.key}", ignore_errors=True)

    # ------------------------------------------------------------------ report
    def med(key: str, name: str, what: str) -> float | None:
        rs = results[key].get(name) or []
        return statistics.median(getattr(r, what) for r in rs) if rs else None

    for what, title in (("seconds", "wall seconds of the whole process"),
                        ("cpu", "CPU seconds (user + system) of the whole process and its children")):
        print(f"\n{title}, median of {rounds} round(s); in brackets: / Kafka 2 threads\n")
        print("| data | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for ds in sets:
            k2 = med(ds.key, "Kafka 2 threads", what)
            cells = []
            for name in names:
                m = med(ds.key, name, what)
                cell = "-" if m is None else f"{m:.2f}"
                if m is not None and k2 and name != "Kafka 2 threads":
                    cell += f" ({m / k2:.2f}x)"
                cells.append(cell)
            print(f"| {ds.label} | " + " | ".join(cells) + " |")

    print("\nin-process figures (medians): mploader N=1 stats seconds.total / scan_seconds / seconds.flush; "
          "Kafka 2 threads: loadLogs seconds / JVM uptime at exit\n")
    for ds in sets:
        m1 = results[ds.key].get("mploader N=1") or []
        line = f"[{ds.key}] "
        if m1:
            tot = statistics.median(r.stats["seconds"]["total"] for r in m1)
            scan = statistics.median(r.stats["scan_seconds"] for r in m1)
            flush = statistics.median(r.stats["seconds"]["flush"] for r in m1)
            line += f"mploader N=1: total {tot:.3f} s, scan {scan:.3f} s, flush {flush:.3f} s"
        k2r = results[ds.key].get("Kafka 2 threads") or []
        if k2r:
            line += (f"; Kafka 2 threads: loadLogs {statistics.median(r.stats['seconds'] for r in k2r):.3f} s, "
                     f"JVM uptime {statistics.median(r.stats['jvm_uptime_seconds'] for r in k2r):.3f} s")
        print(line)

    if "d" in results and results["d"].get("mploader N=1"):
        m1 = results["d"]["mploader N=1"]
        shares = [phase2_seconds(r.stats) / r.stats["seconds"]["total"] for r in m1]
        p2 = statistics.median(phase2_seconds(r.stats) for r in m1)
        whole = statistics.median(r.seconds for r in m1)
        print(f"\n1,000-segment set, mploader N=1: Phase 2 (total - scan_seconds) = {p2:.3f} s, "
              f"{statistics.median(shares):.0%} of the load (stats total; runs: "
              f"{', '.join(f'{s:.0%}' for s in shares)}), {p2 / whole:.0%} of the whole process ({whole:.2f} s)")
        beyond = [per_segment_ms(beyond_writing_seconds(r.stats), r.stats) for r in m1]
        print(f"  of which writing files (stats write_seconds + seconds.flush) "
              f"{median_cell([writing_seconds(r.stats) for r in m1])} s; Phase 2 beyond writing {median_cell(beyond)} "
              f"ms a recovered segment (runs: {', '.join(figure(b) for b in beyond)}; target 0.3 ms)")
        print(serial_parts(results["d"]))

    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "command": cmd, "machine": machine(), "oracle": oracle, "facts": facts,
            "runs": {k: {n: [{"seconds": r.seconds, "cpu": r.cpu, "stats": r.stats} for r in rs] for n, rs in v.items()}
                     for k, v in results.items()}}, indent=1))
    print(f"\n{time.perf_counter() - t_start:.0f} s in all; "
          + ("CORRECTNESS: all runs agree" if not mismatches else f"!!! {mismatches} MISMATCHED OR FAILED RUN(S) !!!"))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
