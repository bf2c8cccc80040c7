#!/usr/bin/env python3
"""Phase 2 per recovered segment, as a partition's segment count grows: is recovery linear in it?

One data dir of one partition of N small segments (``mploader generate``: 10 KB segments of ~1 KB batches, seed
3, no faults), every segment recovered (``recovery-point-offset-checkpoint`` = 0), for each N of
``--segments``.  Per round, in an order that changes from round to round (perf/kafka_compare.py's
``round_order``), the whole process of each contender runs on a fresh ``cp -a`` copy (warm page cache):

* ``mploader``: this tree, ``mploader load --json --workers 1`` (the scans run inline in the parent);
* ``mploader at REV`` (``--base REV``): the same command on a git worktree of REV (its compiled walk built
  there), the before of a change, side by side;
* ``Kafka 1 thread``: Kafka's own LogLoader (``oracle datadir DIR --threads 1``), when the oracle of
  ../shared/kafka-oracle is built (``$KAFKA_ORACLE`` or ``~/.cache/kafka-oracle/oracle``).

Reported, medians of the rounds: wall seconds of the process, and for mploader Phase 2 per recovered segment,
``(stats.seconds.total - stats.scan_seconds) / recovered segments`` (the load without its scans, the process's
start excluded), the part of it spent writing files (``stats.write_seconds``, the file system's creates, writes,
truncations, renames and deletes, plus the final sync ``stats.seconds.flush``) and the rest: Phase 2 beyond writing
its bytes, the figure issue 11's target (0.3 ms) is about.  Every run's partition (offsets, segments, epochs) is
checked against Kafka's first run (or this tree's when Kafka is absent); a difference exits 1.

Usage: perf/phase2.py [--segments 300,600,1200,2400] [--rounds 3] [--base REV] [--report perf/README.md]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.kafka_compare import (  # noqa: E402
    Contender,
    DataSet,
    Failed,
    Run,
    beyond_writing_seconds,
    compare,
    find_oracle,
    machine,
    make_template,
    median_cell,
    oracle_argv,
    per_segment_ms,
    phase2_seconds,
    round_order,
    run_once,
    writing_seconds,
)
from perf.report import Lines, replace_section  # noqa: E402
from perf.trees import mploader_argv, scratch_dir, worktree_of  # noqa: E402

SEGMENT_BYTES = 10_000


def at_revision(rev: str, wt: Path) -> Contender:
    return Contender(f"mploader at {rev}", "mploader", mploader_argv("1", wt))


def make_partition(n: int, root: Path) -> str:
    """The data dir of one partition of about ``n`` segments of ``SEGMENT_BYTES``, every one to be recovered."""
    config = dict(topics=1, partitions_per_topic=1, total_bytes=n * SEGMENT_BYTES * 96 // 100,
                  segment_bytes=SEGMENT_BYTES, batch_bytes=1024)
    template, _ = make_template(DataSet(str(n), f"{n} segments", config, seed=3), root)
    return template


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", default="300,600,1200,2400", help="segment counts of the partition, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", help="also time this git revision of mploader (a worktree), side by side")
    ap.add_argument("--oracle", help="Kafka oracle launcher (default: $KAFKA_ORACLE, ~/.cache/kafka-oracle/oracle)")
    ap.add_argument("--work", type=Path, help="where the scratch directory goes (default: the system's temporary "
                    "directory; the scratch directory is deleted at the end, the --work directory is not)")
    ap.add_argument("--report", type=Path, help="write the table into this README (section phase2)")
    args = ap.parse_args()
    with scratch_dir("mploader-phase2-", args.work, keep=False) as work, contextlib.ExitStack() as stack:
        return run(args, work, stack.enter_context(worktree_of(args.base, work)) if args.base else None)


def run(args: argparse.Namespace, root: Path, base_tree: Path | None) -> int:
    oracle = find_oracle(args.oracle)
    contenders = [Contender("mploader", "mploader", mploader_argv("1"))]
    if base_tree is not None:
        contenders.append(at_revision(args.base, base_tree))
    if oracle:
        contenders.append(Contender("Kafka 1 thread", "kafka", oracle_argv(oracle, 1)))
    out = Lines()
    cmd = " ".join(["perf/phase2.py", *sys.argv[1:]])
    out.say(f"`{cmd}`, {time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f} at the start; "
            f"{machine()}; Kafka: {'the oracle' if oracle else 'not built (skipped)'}")
    out.say("")
    ours = [c for c in contenders if c.kind == "mploader"]
    head = ([f"{c.name} s" for c in contenders] + [f"{c.name} Phase 2 ms/segment" for c in ours]
            + [f"{c.name} of which writing files ms/segment" for c in ours]
            + [f"{c.name} Phase 2 beyond writing ms/segment" for c in ours])
    out.say("| segments recovered | " + " | ".join(head) + " |")
    out.say("|---:|" + "---:|" * len(head))
    bad = 0
    for n in (int(x) for x in args.segments.split(",")):
        template = make_partition(n, root)
        runs: dict[str, list[Run]] = {c.name: [] for c in contenders}
        for r in range(args.rounds):
            for c in round_order(contenders, r):
                try:
                    runs[c.name].append(run_once(c, template, root / "run"))
                except Failed as e:
                    print(f"  !!! FAILED: {c.name}: {e}", flush=True)
                    bad += 1
        ref_runs = runs[contenders[-1].name if oracle else contenders[0].name]  # Kafka's, where it ran
        ref = ref_runs[0].partitions if ref_runs else {}
        for name, rs in runs.items():
            for run in rs:
                if diffs := compare(ref, run.partitions):
                    print(f"  !!! MISMATCH: {name}: {diffs}", flush=True)
                    bad += 1
        first = runs[contenders[0].name]
        recovered = first[0].stats["segments_recovered"] if first else 0
        cells = [f"{statistics.median(r.seconds for r in runs[c.name]):.2f}" if runs[c.name] else "-"
                 for c in contenders]
        for part in (phase2_seconds, writing_seconds, beyond_writing_seconds):
            cells += [median_cell([per_segment_ms(part(r.stats), r.stats) for r in runs[c.name]]) for c in ours]
        out.say(f"| {recovered:,} | " + " | ".join(cells) + " |")
        shutil.rmtree(Path(template).parent)
    if args.report and not bad:
        replace_section(args.report, "phase2", out.lines)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
