"""``mploader sweep [DIR...]``: load a broker with 1..N worker processes and watch the disk, the CPUs and the
memory (:mod:`mploader.experiments.sweep`); a report with plots at the end."""

from __future__ import annotations

import argparse
import functools
import time

from mploader.cli.exit_codes import EXIT_USAGE, EXPERIMENT_EXIT_CODES_HELP
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
    sizes,
    worker_counts,
)
from mploader.cli.units import format_bytes
from mploader.experiments.places import DEVICE_CLASSES, PlaceUnavailable, make_place
from mploader.experiments.plots import Panel, plot_points, plot_timeline
from mploader.experiments.points import Point
from mploader.experiments.report import Draw, Report, machine_facts
from mploader.experiments.run import RunResult, RunSpec
from mploader.experiments.sweep import SweepPlan, run_sweep
from mploader.host.cpus import usable_cpus

QUICK = {"size": 600_000_000, "segment_bytes": 32 << 20, "partitions": 16}
FULL = {"size": 2_000_000_000, "segment_bytes": 128 << 20, "partitions": 16}
MODES = {"recover": False, "dry-run": True}


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXPERIMENT_EXIT_CODES_HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("dirs", nargs="*", metavar="DIR",
                   help="data dirs to load (a fresh copy for every run); none: generate a broker (unclean restart, "
                        "every byte recovered)")
    p.add_argument("--workers", type=worker_counts, metavar="LIST",
                   help="worker counts, e.g. 1-8 or 1,2,4,adaptive (default 1..2 x usable CPUs and adaptive; --quick "
                        "1..4 and adaptive)")
    p.add_argument("--recovery-threads", type=counts, metavar="LIST",
                   help="num.recovery.threads.per.data.dir values (default 1,2; --quick 1)")
    p.add_argument("--modes", type=choices(tuple(MODES)), default=tuple(MODES), metavar="LIST",
                   help="recover, dry-run or both (default both)")
    p.add_argument("--cache", type=choices(("cold", "warm")), default=("cold", "warm"), metavar="LIST",
                   help="cold, warm or both (default both)")
    p.add_argument("--rates", type=sizes, metavar="LIST",
                   help="IO budgets (max_read_bytes_per_sec) to run too, cold, with 1 and 2 workers, e.g. 50MB,200MB "
                        "(default: none; --quick 100MB)")
    p.add_argument("--device", choices=DEVICE_CLASSES, default="disk",
                   help="where the copies go: the work dir's disk (default), a throttled loop device, a seek-modelled "
                        "HDD (hdd-seek) or SSD-like device (ssd-seek), or tmpfs")
    add_throttle_arguments(p, "--device throttled")
    add_common_arguments(p, "mploader-sweep")


def _series(spec: RunSpec) -> str:
    return (f"{'dry run' if spec.dry_run else 'recover'}, {spec.cache}"
            f"{f', {spec.recovery_threads} rec. threads' if spec.recovery_threads > 1 else ''}")


def _point_series(p: Point) -> str:
    return _series(p.spec)


def _plots(runs: list[RunResult]) -> list[tuple[str, Draw]]:
    swept = [r for r in runs if r.spec.max_read_bytes_per_sec is None]
    panels = [Panel("throughput (MB scanned per second of the load)", "MB/s", swept, lambda r: r.throughput / 1e6),
              Panel("device busy: mean %util (throttled: share of the limit)", "%", swept, RunResult.busy),
              Panel("CPU of the load's processes (mean; 100% = one core)", "%", swept, lambda r: r.mean("load_cpu")),
              Panel("peak RSS: parent + workers", "MB", swept,
                    lambda r: (r.peak("rss_parent") + r.peak("rss_workers")) / 1e6)]
    cold = [r for r in swept if r.spec.cache == "cold" and not r.spec.dry_run] or swept
    timeline = max(cold, key=lambda r: (r.spec.workers if isinstance(r.spec.workers, int) else 0, r.id))
    return [
        ("throughput, device util, CPU and memory against the worker count (median of the rounds, bars from the "
         "lowest to the highest)", functools.partial(plot_points, panels, _point_series, title="mploader sweep")),
        (f"timeline of run {timeline.id} ({timeline.spec.workers} workers, {_series(timeline.spec)})",
         functools.partial(plot_timeline, timeline, title=f"run {timeline.id}: {timeline.spec.workers} workers, "
                                                          f"{_series(timeline.spec)}, {timeline.place}")),
    ]


def run_sweep_command(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except BusyHost as e:
        return refused(args, e)


def _run(args: argparse.Namespace) -> int:
    shape = QUICK if args.quick else FULL
    workers = args.workers or (*range(1, 5 if args.quick else 2 * usable_cpus() + 1), "adaptive")
    rates = args.rates if args.rates is not None else ((100_000_000,) if args.quick else ())
    interval = interval_of(args)
    t0 = time.monotonic()
    with scratch(args) as work:
        broker = broker_for(args, work, **shape)
        plan = SweepPlan(workers, args.recovery_threads or ((1,) if args.quick else (1, 2)),
                         tuple(MODES[m] for m in args.modes), args.cache, "as given" if args.dirs else "unclean", rates,
                         repeat=args.repeat, data_dirs=len(broker.data_dirs))
        say(f"{broker.description}; {len(plan.specs())} runs")
        try:
            place_cm = make_place(args.device, work, broker.device_bytes, limits_of(args))
            with place_cm as place:
                runs = run_sweep(place, broker.data_dirs, plan, interval, args.cache_method, on_run(args))
        except PlaceUnavailable as e:
            say(f"mploader sweep: cannot make the {args.device} device here: {e}")
            return EXIT_USAGE
    report = Report("sweep", "mploader sweep" + (" (quick)" if args.quick else ""), command_line("sweep"),
                    machine_facts([place]), f"{broker.description}; {format_bytes(broker.log_bytes)} of .log",
                    runs, [f"restart: {plan.restart}; sampling every {interval} s"], time.monotonic() - t0,
                    _plots(runs), repeat=args.repeat)
    return finish(args, report)


__all__ = ["add_sweep_arguments", "run_sweep_command"]
