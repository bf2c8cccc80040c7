"""Spark local[2] against the process pool on the same data, and a fleet-shaped run (issue 15).

1. One broker (2 data dirs, --size bytes, unclean, page cache warm), on the pool (2 workers per dir) and on
   Spark local[2], alternating rounds (A B A B ...), medians: ``verify_logs`` without the prediction (an audit
   of every byte: Phase 1 only, as Spark tasks) and a dry-run ``load_logs`` (the segments above the recovery
   point; on Spark each partition loaded whole, Phase 1 and 2, by a task, as ``mploader spark load`` does).
2. A fleet of --brokers generated brokers (one dir each, 16 KiB segments), ``mploader.spark``'s verify (one job
   of audits, one of predictions) and dry-run load (one job) on local[2] against the number of brokers: wall time,
   Spark jobs, stages, tasks (SparkContext.statusTracker), beside the pool doing each broker in turn.

    .venv/bin/python perf/spark.py --root /tmp/mploader-spark-perf --report perf/README.md

writes its block of perf/README.md (``<!-- spark:begin -->``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import Lines, replace_section  # noqa: E402 - perf/report.py, beside this script

from mploader import LoaderConfig, load_logs  # noqa: E402
from mploader.experiments.cache import make_warm  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from mploader.spark import fleet  # noqa: E402
from mploader.spark.engine import SparkEngine  # noqa: E402
from mploader.spark.phase2 import SparkPartitions  # noqa: E402
from mploader.spark.session import spark_session  # noqa: E402
from mploader.verify import verify_logs  # noqa: E402

NOW = 1_730_000_000_000 + 600_000


def jobs_of(spark: Any, job_groups: Sequence[str]) -> tuple[int, int, int]:
    """(jobs, stages, tasks) run in ``job_groups`` (the tracker keeps spark.ui.retainedJobs jobs)."""
    tracker = spark.sparkContext.statusTracker()
    jobs = [j for g in job_groups for j in tracker.getJobIdsForGroup(g)]
    stages = [s for j in jobs if (info := tracker.getJobInfo(j)) is not None for s in info.stageIds]
    tasks = sum(info.numTasks for s in stages if (info := tracker.getStageInfo(s)) is not None)
    return len(jobs), len(stages), tasks


def compare(spark: Any, root: Path, size: int, rounds: int, say: Any) -> None:
    broker = root / "broker"
    if not broker.exists():
        generate(broker, GeneratorConfig(data_dirs=2, topics=4, partitions_per_topic=4, total_bytes=size,
                                         segment_bytes=1 << 20, faults=0, seed=7))
    dirs = [str(d) for d in sorted(broker.glob("data-*"))]
    make_warm([broker])
    pool = LoaderConfig(segment_scan_workers_per_data_dir=2, dry_run=True)
    spark_engine = lambda st, pr: SparkEngine(spark, st, pr)  # noqa: E731
    runs: dict[str, Any] = {
        "verify, pool 2/dir": lambda: verify_logs(dirs, pool, predict=False),
        "verify, Spark local[2]": lambda: verify_logs(dirs, pool, predict=False, engine=spark_engine),
        "load --dry-run, pool 2/dir": lambda: load_logs(dirs, pool, NOW),
        # as `mploader spark load` does: each partition loaded (Phase 1 and 2) by a Spark task
        "load --dry-run, Spark local[2]": lambda: load_logs(dirs, pool, NOW, partitions=SparkPartitions(spark)),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    scanned: dict[str, int] = {}
    for _ in range(rounds):
        for name, run in runs.items():
            t0 = time.perf_counter()
            out = run()
            times[name].append(time.perf_counter() - t0)
            scanned[name] = out.bytes if hasattr(out, "bytes") else out.stats.bytes_read
    say(f"one broker: {len(dirs)} dirs, {size / 1e6:.0f} MB, page cache warm; {rounds} alternating rounds, median")
    say("")
    say("| run | median s | all rounds s | MB/s of Phase 1 bytes | vs the pool |")
    say("|---|---|---|---|---|")
    for name, ts in times.items():
        base = "pool 2/dir".join(name.rsplit("Spark local[2]", 1)) if "Spark" in name else name
        ratio = statistics.median(ts) / statistics.median(times[base])
        say(f"| {name} | {statistics.median(ts):.2f} | {', '.join(f'{t:.2f}' for t in ts)} | "
            f"{scanned[name] / statistics.median(ts) / 1e6:.0f} | {ratio:.2f}x |")


def fleet_run(spark: Any, root: Path, counts: Sequence[int], say: Any) -> None:
    """The fleet's two commands against its number of brokers (the first N of the largest fleet), one Spark job
    per phase, beside the single-host pool loading (verifying) the same brokers one after another."""
    fleet_root = root / f"fleet-{max(counts)}"
    if not fleet_root.exists():
        for b in range(max(counts)):
            generate(fleet_root / f"broker-{b:03d}",
                     GeneratorConfig(data_dirs=1, topics=2, partitions_per_topic=4, total_bytes=1_000_000,
                                     segment_bytes=16 * 1024, faults=2 if b % 4 == 0 else 0, node_id=b + 1,
                                     seed=100 + b))
    brokers = sorted(fleet_root.glob("broker-*"))
    make_warm([fleet_root])
    say("")
    say(f"fleet: the first N of {len(brokers)} generated brokers (one dir each, 8 partitions, 16 KiB segments, a "
        f"quarter with faults), Spark {spark.sparkContext.master} ({spark.sparkContext.defaultParallelism} cores), "
        f"page cache warm; the pool: `load_logs`/`verify_logs` of each broker in turn, 2 workers per dir")
    say("")
    say("| brokers | segments | command | Spark wall s | Spark jobs | stages | tasks | rows built s | rows written s "
        "| pool wall s | Spark / pool |")
    say("|---|---|---|---|---|---|---|---|---|---|---|")
    pool = LoaderConfig(segment_scan_workers_per_data_dir=2, dry_run=True)
    built: list[float] = []  # the driver's time building the inventory and summary rows, per run

    def timed(make: Any) -> Any:
        def run(*args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return make(*args)
            finally:
                built.append(time.perf_counter() - t0)
        return run

    fleet.load_tables, fleet.verify_tables = timed(fleet.load_tables), timed(fleet.verify_tables)
    for n in counts:
        dirs = [str(d) for b in brokers[:n] for d in sorted(b.glob("data-*"))]
        segments = sum(1 for b in brokers[:n] for _ in b.rglob("*.log"))
        for name, run, alone in (
                ("spark verify", fleet.verify, lambda d: verify_logs([d], pool, now_ms=NOW)),
                ("spark load (dry run)", fleet.load, lambda d: load_logs([d], pool, NOW))):
            t0 = time.perf_counter()
            out = run(spark, dirs, now_ms=NOW)
            wall = time.perf_counter() - t0
            t1 = time.perf_counter()
            for d in dirs:
                alone(d)
            pool_wall = time.perf_counter() - t1
            jobs, stages, tasks = jobs_of(spark, out.job_groups)
            t2 = time.perf_counter()
            out.tables.write(root / "history")
            written = time.perf_counter() - t2
            say(f"| {n} | {segments} | {name} | {wall:.1f} | {jobs} | {stages} | {tasks} | {built[-1]:.2f} | "
                f"{written:.2f} | {pool_wall:.1f} | {wall / pool_wall:.1f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="/tmp/mploader-spark-perf")
    ap.add_argument("--size", type=int, default=200_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--brokers", default="10,25,50,100", help="fleet sizes, comma-separated")
    ap.add_argument("--report", default=None, help="write the block into this README")
    args = ap.parse_args()
    root = Path(args.root)
    spark = spark_session("local[2]", "mploader-perf")
    spark.sparkContext.setLogLevel("ERROR")
    lines = Lines()
    lines.say(f"`{' '.join(['.venv/bin/python', *sys.argv])}`")
    lines.say("")
    compare(spark, root, args.size, args.rounds, lines.say)
    fleet_run(spark, root, [int(n) for n in args.brokers.split(",")], lines.say)
    spark.stop()
    if args.report:
        replace_section(Path(args.report), "spark", lines.lines)


if __name__ == "__main__":
    main()
