"""``mploader experiment NAME``: the experiments the project exists for.  One so far, ``hdd-vs-ssd``
(:mod:`mploader.experiments.hdd_vs_ssd`): seed 002's clean and unclean restart of a broker of one or two data
dirs, loaded by mploader (1/2/4/8 workers, auto, adaptive, ``--partition-workers auto``) and by Kafka's own
loader (1/2/4 recovery threads), on the machine's own disk, a throttled loop device with HDD-like limits, the
seek-modelled HDD and SSD-like devices, and tmpfs; every point repeated."""

from __future__ import annotations

import argparse
import functools
import os
import time

from mploader.cli.exit_codes import EXPERIMENT_EXIT_CODES_HELP, UsageError
from mploader.cli.experiment_common import (
    BusyHost,
    add_common_arguments,
    add_throttle_arguments,
    broker_for,
    choices,
    command_line,
    counts,
    finish,
    interval_of,
    limits_of,
    on_run,
    refused,
    say,
    scratch,
    worker_counts,
)
from mploader.cli.units import format_bytes
from mploader.experiments.hdd_vs_ssd import KAFKA_THREADS, RESTARTS, WORKERS, HddVsSsdPlan, run_hdd_vs_ssd
from mploader.experiments.kafka import ORACLE_ENV, find_oracle
from mploader.experiments.places import DEVICE_CLASSES, SEEK_LABELS, THROTTLED_LABEL
from mploader.experiments.plots import Panel, plot_points, plot_timeline, plot_worker_counts
from mploader.experiments.points import Point
from mploader.experiments.report import Draw, Report, machine_facts
from mploader.experiments.run import RunResult

QUICK = {"size": 50_000_000, "segment_bytes": 1 << 20, "partitions": 16}
FULL = {"size": 2_000_000_000, "segment_bytes": 8 << 20, "partitions": 64}
QUICK_WORKERS: tuple[int | str, ...] = (1, 4, "adaptive")
QUICK_RESTARTS = ("unclean",)
QUICK_KAFKA_THREADS = (1, 4)
TITLE = "mploader experiment hdd-vs-ssd"


def add_experiment_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXPERIMENT_EXIT_CODES_HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("name", choices=["hdd-vs-ssd"], help="hdd-vs-ssd: seed 002's experiment (see the module help)")
    p.add_argument("--workers", type=worker_counts, metavar="LIST",
                   help="mploader's --workers values (default 1,2,4,8,auto,adaptive; --quick 1,4,adaptive)")
    p.add_argument("--partition-workers", type=lambda t: worker_counts(t, ("auto",), empty=True), default=("auto",),
                   metavar="LIST", help="mploader's --partition-workers values, run too (default auto; '' for none)")
    p.add_argument("--kafka-threads", type=lambda t: counts(t, empty=True), metavar="LIST",
                   help="Kafka's loader with these num.recovery.threads.per.data.dir values (default 1,2,4; --quick "
                        "1,4; '' for none); needs the oracle (--oracle)")
    p.add_argument("--oracle", metavar="PATH",
                   help=f"Kafka's loader, the oracle of shared/kafka-oracle (default ${ORACLE_ENV}, else "
                        f"~/.cache/kafka-oracle/oracle; none there: Kafka's runs are left out, and the report says "
                        f"so; a PATH given that cannot be run: usage error)")
    p.add_argument("--data-dirs", type=counts, default=(1, 2), metavar="LIST",
                   help="the broker's data dirs: 1, 2 or both (default 1,2; two: each on a device of its own)")
    p.add_argument("--devices", type=choices(DEVICE_CLASSES), default=DEVICE_CLASSES, metavar="LIST",
                   help="disk (the work dir's), throttled (a loop device under a cgroup's read limits), hdd-seek and "
                        "ssd-seek (a loop device on a disk model: one 7200 rpm head, or an SSD's channels), tmpfs "
                        "(default all)")
    p.add_argument("--restarts", type=choices(RESTARTS), metavar="LIST",
                   help="clean, unclean or both (default both; --quick unclean)")
    add_throttle_arguments(p, "the throttled device")
    add_common_arguments(p, "mploader-hdd-vs-ssd")


def _by_device(p: Point) -> str:
    return p.place


def _choice_panels(runs: list[RunResult]) -> list[Panel]:
    return [Panel("seconds of the load (in its process)", "s", runs, lambda r: r.seconds),
            Panel("seconds of the whole process (start to exit)", "s", runs, lambda r: r.process_seconds),
            Panel("device busy (mean %util; throttled: share of the limit)", "%", runs, RunResult.busy),
            Panel("CPU of the load's processes (mean; 100% = one core)", "%", runs, lambda r: r.mean("load_cpu"))]


def _plots(runs: list[RunResult], restarts: tuple[str, ...]) -> list[tuple[str, Draw]]:
    out: list[tuple[str, Draw]] = []
    for restart in restarts:
        for n in sorted({r.spec.data_dirs for r in runs}):
            mine = [r for r in runs if r.spec.restart == restart and r.spec.data_dirs == n]
            title = f"{TITLE}: {restart} restart, {n} data dir{'s' if n > 1 else ''}"
            out.append((f"{restart} restart, {n} data dir(s): each loader and choice per device class (median of the "
                        f"rounds, bars from the lowest to the highest)",
                        functools.partial(plot_points, _choice_panels(mine), _by_device, title=title)))
    hdd = next((label for label in (SEEK_LABELS["hdd"], THROTTLED_LABEL) if any(r.place == label for r in runs)),
               None)  # the timeline of the most credible HDD run
    on_hdd = [r for r in runs if r.place == hdd and r.spec.restart == restarts[-1] and r.spec.loader == "mploader"]
    if on_hdd:
        most = max(on_hdd, key=lambda r: (r.spec.workers if isinstance(r.spec.workers, int) else 0))
        title = f"run {most.id}: {most.place}, {most.spec.restart}, {most.spec.choice}"
        out.append((f"timeline of run {most.id}: {hdd}, {most.spec.restart} restart, {most.spec.choice}",
                    functools.partial(plot_timeline, most, title=title)))
    adaptive = [r for r in runs if r.spec.workers == "adaptive" and r.spec.loader == "mploader"]
    if adaptive:
        out.append(("the adaptive runs' worker counts over time, per data dir",
                    functools.partial(plot_worker_counts, adaptive, title=f"{TITLE}: adaptive worker counts")))
    return out


def _kafka(args: argparse.Namespace) -> tuple[tuple[int, ...], str | None, list[str]]:
    """Kafka's thread counts, its loader (None: not run) and what the report says of it; checked before any work."""
    threads = args.kafka_threads if args.kafka_threads is not None else (
        QUICK_KAFKA_THREADS if args.quick else KAFKA_THREADS)
    if args.oracle is not None and not os.access(args.oracle, os.X_OK):
        raise UsageError(f"--oracle {args.oracle}: not a program this user can run (the launcher "
                         f"shared/kafka-oracle/build.sh prints)")
    oracle = find_oracle(args.oracle) if threads else None
    if threads and oracle is None:
        return threads, None, [f"Kafka's loader not run: no oracle (--oracle, ${ORACLE_ENV} or "
                               f"~/.cache/kafka-oracle/oracle; build it with shared/kafka-oracle/build.sh)"]
    if oracle is None:
        return threads, None, []
    return threads, oracle, [f"Kafka's loader: {oracle} (one process per data dir, all at once, as LogManager.loadLogs "
                             f"loads every dir; its seconds are the slowest dir's loadLogs)"]


def _run(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else FULL
    interval = interval_of(args)
    t0 = time.monotonic()
    threads, oracle, notes = _kafka(args)
    restarts = args.restarts or (QUICK_RESTARTS if args.quick else RESTARTS)
    with scratch(args) as work:
        made = {n: broker_for(args, work, **sizes, data_dirs=n, brokers=len(args.data_dirs)) for n in args.data_dirs}
        plan = HddVsSsdPlan(args.workers or (QUICK_WORKERS if args.quick else WORKERS), args.partition_workers,
                            threads, args.devices, restarts, args.data_dirs, limits_of(args),
                            max(b.device_bytes for b in made.values()), args.repeat, oracle)
        say(f"{'; '.join(b.description for b in made.values())}; {plan.total()} runs")

        def skipped(device: str, why: str) -> None:
            say(f"mploader experiment: skipping the {device} device class: {why}")

        done = run_hdd_vs_ssd(work, {n: b.data_dirs for n, b in made.items()}, plan, interval, args.cache_method,
                              on_run(args), skipped)
    notes += done.notes
    notes.append(f"every run from a cold page cache; sampling every {interval} s")
    if "throttled" in args.devices:
        notes.append(f"throttled device: reads capped at {format_bytes(args.read_bps)}/s and {args.read_iops} IOPS")
    first = next(iter(made.values()))
    scale = (f"{format_bytes(first.log_bytes)} of .log, {args.partitions or sizes['partitions']} partitions in "
             f"{' or '.join(str(n) for n in made)} data dir(s), "
             f"{format_bytes(args.segment_bytes or sizes['segment_bytes'])} segments")
    report = Report("hdd-vs-ssd", TITLE + (" (quick)" if args.quick else ""), command_line("experiment hdd-vs-ssd"),
                    machine_facts(done.places),
                    "; ".join(b.description for b in made.values())
                    + "; clean restart: as generated (clean-shutdown marker); unclean: marker removed and every "
                      "recovery point 0", done.runs, notes, time.monotonic() - t0, _plots(done.runs, restarts),
                    scale, args.repeat)
    return finish(args, report)


def run_experiment(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except BusyHost as e:
        return refused(args, e)


__all__ = ["add_experiment_arguments", "run_experiment"]
