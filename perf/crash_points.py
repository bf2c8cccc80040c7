#!/usr/bin/env python3
"""Kill-point enumeration at scale: every change of loads of generated brokers with faults and of every real
corpus data dir, SIGKILLed one point at a time, rerun, compared byte for byte (tests/crash_points.py).

The brokers: for each seed, a small generated broker (tests/crash_points.py ``SMALL_BROKER``: 4 partitions,
~8 segments each) in four shapes: unclean as generated (recovery points where the generator put them),
unclean with every segment unflushed (damaged segments cut and the segments after them deleted), clean with
the faults a clean start survives, and clean with two partitions' snapshots gone (Kafka's clean-start
shortcut); then every data dir of the real corpus (shared/corpus/real, materialised).  Prints one line per
load and the totals: kill points, mismatches, children that took another path.  With ``--errors``, instead of a
SIGKILL at each point, each of EMFILE, EACCES, EIO, ENOSPC is raised there in-process (tests/crash_points.py
``enumerate_error_points``; ``--opens``: the opens of files to read are points too).

Usage: perf/crash_points.py [--seeds 1-10] [--no-corpus] [--resumable] [--no-commit-rule] [--errors [--opens]]
                            [--report perf/README.md]
"""

from __future__ import annotations

import argparse
import collections
import functools
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mploader import LoaderConfig  # noqa: E402
from mploader.recovery import resume  # noqa: E402
from perf.files_vs_kafka import parse_seeds  # noqa: E402
from perf.report import Lines, replace_section  # noqa: E402
from tests.conftest import _corpus_source, corpus_data_dirs, materialize_corpus  # noqa: E402
from tests.crash_points import (  # noqa: E402
    GEN_NOW,
    Enumeration,
    ErrorEnumeration,
    enumerate_error_points,
    enumerate_kill_points,
    small_broker,
)

INLINE = LoaderConfig(segment_scan_workers_per_data_dir=1)
SHAPES = {
    "unclean": {"clean": False, "faults": 8},
    "unclean, every segment unflushed": {"clean": False, "faults": 8, "everything_unflushed": True},
    "clean": {"clean": True, "faults": 8},
    "clean, 2 partitions without snapshots": {"clean": True, "faults": 8, "drop_snapshots": 2},
}


def _generated_dir(work: Path) -> list[str]:
    return [str(work / "data-0")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--no-corpus", action="store_true")
    ap.add_argument("--report", type=Path, default=None)
    ap.add_argument("--resumable", action="store_true",
                    help="load with persist_recovery_points (the checkpoint written after each partition, in the "
                         "loading thread); the loader's own recovery point is not compared")
    ap.add_argument("--no-commit-rule", dest="commit_rule", action="store_false",
                    help="compare every kill with the uninterrupted load alone (for code that deletes the "
                         "clean-shutdown marker first, as Kafka does)")
    ap.add_argument("--errors", action="store_true",
                    help="raise an error of the environment (EMFILE, EACCES, EIO, ENOSPC) at every point instead of "
                         "killing: the failed load cuts no valid byte, goes offline naming the file, and a rerun "
                         "without the fault reaches the uninterrupted outcome")
    ap.add_argument("--opens", action="store_true", help="with --errors: the opens of files to read are points too")
    args = ap.parse_args(argv)
    enumerate_points = (functools.partial(enumerate_error_points, opens=args.opens) if args.errors
                        else enumerate_kill_points)
    logging.disable(logging.CRITICAL)  # a killed load's warnings, thousands of times
    config = INLINE.replace(persist_recovery_points=args.resumable)
    ignore = ("loader_recovery_point",) if args.resumable else ()
    resume.BACKGROUND = False  # one order of changes
    out = Lines()
    reports: list[tuple[str, Enumeration]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mploader-crash-points-") as tmp:
        root = Path(tmp)
        for seed in parse_seeds(args.seeds):
            for shape, kw in SHAPES.items():
                pristine = root / f"{seed}-{len(reports)}"
                small_broker(pristine, seed=seed, **kw)  # type: ignore[arg-type]
                report = enumerate_points(f"seed {seed}, {shape}", pristine, root / "work", _generated_dir,
                                          config, GEN_NOW, commit_rule=args.commit_rule, ignore=ignore)
                reports.append((shape, report))
                out.say("- " + report.summary())
                _say_mismatches(out, report)
        source = None if args.no_corpus else _corpus_source()
        if source is not None:
            corpus = materialize_corpus(source, root / "corpus")
            for d in corpus_data_dirs(corpus):
                name = d.relative_to(corpus).as_posix()
                report = enumerate_points(name, d, root / "work", lambda w: [str(w)], config, 1_800_000_000_000,
                                          commit_rule=args.commit_rule, ignore=ignore)
                reports.append(("real corpus", report))
                out.say("- " + report.summary())
                _say_mismatches(out, report)
    out.say("")
    groups: dict[str, list[Enumeration]] = collections.defaultdict(list)
    for shape, r in reports:
        groups[shape].append(r)
    if args.errors:
        out.say("| loads | points | errors injected | completed | offline | halted | mismatches | another path |")
        out.say("|---|---:|---:|---:|---:|---:|---:|---:|")
    else:
        out.say("| loads | kill points | mismatches | another path |")
        out.say("|---|---:|---:|---:|")
    for shape, rs in [*groups.items(), ("all", [r for _, r in reports])]:
        counts = ""
        if args.errors:
            es = [r for r in rs if isinstance(r, ErrorEnumeration)]
            counts = "".join(f" {sum(getattr(r, k) for r in es):,} |" for k in ("injected", "completed", "offline",
                                                                                "halted"))
        out.say(f"| {shape} ({len(rs)}) | {sum(r.points for r in rs):,} |{counts} "
                f"{sum(len(r.mismatches) for r in rs)} | {sum(len(r.nondeterministic) for r in rs)} |")
    flags = "".join(f" --{f}" for f, on in (("no-corpus", args.no_corpus), ("resumable", args.resumable),
                                            ("no-commit-rule", not args.commit_rule), ("errors", args.errors),
                                            ("opens", args.opens)) if on)
    out.say(f"\n`perf/crash_points.py --seeds {args.seeds}{flags}`: "
            f"{time.perf_counter() - t0:.0f} s")
    if args.report is not None:
        section = "crash-points-errors" if args.errors else "crash-points"
        replace_section(args.report, section + ("-resumable" if args.resumable else ""), out.lines)
    return 1 if any(r.mismatches or r.nondeterministic for _, r in reports) else 0


def _say_mismatches(out: Lines, report: Enumeration, most: int = 8) -> None:
    """The first mismatches of ``report``, one line each (point, op, file, errno, why)."""
    for m in report.mismatches[:most]:
        out.say(f"  - point {m.point} ({m.op} {m.path}{', ' + m.errno if m.errno else ''}): {m.why[:300]}")
    if len(report.mismatches) > most:
        out.say(f"  - ... {len(report.mismatches) - most} more")


if __name__ == "__main__":
    raise SystemExit(main())
