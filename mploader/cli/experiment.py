"""``mploader experiment NAME``: the experiments the project exists for.  One so far, ``hdd-vs-ssd``
(:mod:`mploader.experiments.hdd_vs_ssd`): seed 002's clean and unclean restart x 1/2/4/8 workers on the
machine's own disk, a throttled loop device with HDD-like limits, the seek-modelled HDD and SSD-like devices,
and tmpfs."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from mploader.cli.exit_codes import EXPERIMENT_EXIT_CODES_HELP
from mploader.cli.experiment_common import (
    add_common_arguments,
    add_throttle_arguments,
    broker_for,
    choices,
    command_line,
    finish,
    interval_of,
    limits_of,
    run_line,
    say,
    scratch,
    worker_counts,
)
from mploader.cli.units import format_bytes
from mploader.experiments.disk_model import HDD_7200, SSD_LIKE, describe
from mploader.experiments.hdd_vs_ssd import RESTARTS, HddVsSsdPlan, run_hdd_vs_ssd
from mploader.experiments.places import DEVICE_CLASSES, SEEK_LABELS, THROTTLED_LABEL
from mploader.experiments.plots import Panel, plot_against_workers, plot_timeline
from mploader.experiments.report import Report, machine_facts
from mploader.experiments.run import RunResult

QUICK = {"size": 600_000_000, "segment_bytes": 32 << 20, "partitions": 24}
FULL = {"size": 2_000_000_000, "segment_bytes": 128 << 20, "partitions": 16}


def add_experiment_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXPERIMENT_EXIT_CODES_HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("name", choices=["hdd-vs-ssd"], help="hdd-vs-ssd: seed 002's experiment (see the module help)")
    p.add_argument("--workers", type=worker_counts, default=(1, 2, 4, 8, "adaptive"), metavar="LIST",
                   help="worker counts (default 1,2,4,8,adaptive)")
    p.add_argument("--devices", type=choices(DEVICE_CLASSES), default=DEVICE_CLASSES, metavar="LIST",
                   help="disk (the work dir's), throttled (a loop device under a cgroup's read limits), hdd-seek and "
                        "ssd-seek (a loop device on a disk model: one 7200 rpm head, or an SSD's channels), tmpfs "
                        "(default all)")
    p.add_argument("--restarts", type=choices(RESTARTS), default=RESTARTS, metavar="LIST",
                   help="clean, unclean or both (default both)")
    add_throttle_arguments(p, "the throttled device")
    add_common_arguments(p, "mploader-hdd-vs-ssd")


def _plots(runs: list[RunResult], restarts: tuple[str, ...]) -> list[tuple[str, Callable[[Path], None]]]:
    panels = []
    for restart in restarts:  # a clean restart scans next to nothing: its figure is the load's time
        mine = [r for r in runs if r.spec.restart == restart]
        if restart == "clean":
            speed = Panel(f"{restart} restart: seconds of the load", "s", mine, lambda r: r.seconds)
        else:
            speed = Panel(f"{restart} restart: throughput", "MB scanned per second", mine, lambda r: r.throughput / 1e6)
        panels += [speed, Panel(f"{restart} restart: device busy (%util; throttled: share of the limit)", "%", mine,
                                RunResult.busy)]
    out: list[tuple[str, Callable[[Path], None]]] = [
        ("throughput and device use against the worker count, per device class",
         lambda path: plot_against_workers(panels, lambda r: r.place, path, "mploader experiment hdd-vs-ssd"))]
    hdd = next((label for label in (SEEK_LABELS["hdd"], THROTTLED_LABEL) if any(r.place == label for r in runs)),
               None)  # the timeline of the most credible HDD run
    on_hdd = [r for r in runs if r.place == hdd and r.spec.restart == restarts[-1]]
    if on_hdd:
        most = max(on_hdd, key=lambda r: (r.spec.workers if isinstance(r.spec.workers, int) else 0))
        out.append((f"timeline of run {most.id}: {hdd}, {most.spec.restart} restart, "
                    f"{most.spec.workers} workers",
                    lambda path: plot_timeline(most, path, f"run {most.id}: {most.place}, {most.spec.restart}, "
                                                           f"{most.spec.workers} workers")))
    return out


def run_experiment(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else FULL
    interval = interval_of(args)
    t0 = time.monotonic()
    notes = []
    with scratch(args) as work:
        broker = broker_for(args, work, **sizes)
        plan = HddVsSsdPlan(args.workers, args.devices, args.restarts, limits_of(args), broker.device_bytes,
                            args.repeat)
        say(f"{broker.description}; {len(plan.specs()) * len(plan.devices)} runs")

        def skipped(device: str, why: str) -> None:
            notes.append(f"device class '{device}' not run: {why}")
            say(f"mploader experiment: skipping the {device} device class: {why}")

        runs, places = run_hdd_vs_ssd(work, broker.data_dirs, plan, interval, args.cache_method, run_line, skipped)
    notes.append(f"every run from a cold page cache; sampling every {interval} s")
    if "throttled" in args.devices:
        notes.append(f"throttled device: reads capped at {format_bytes(args.read_bps)}/s and {args.read_iops} IOPS")
    if {"hdd-seek", "ssd-seek"} & set(args.devices):
        notes.append(f"seek-modelled devices: {describe(HDD_7200)}; {describe(SSD_LIKE)} (docs/experiments.md)")
    report = Report("hdd-vs-ssd", "mploader experiment hdd-vs-ssd" + (" (quick)" if args.quick else ""),
                    command_line("experiment hdd-vs-ssd"), machine_facts(places),
                    f"{broker.description}; {format_bytes(broker.log_bytes)} of .log; clean restart: as generated "
                    f"(clean-shutdown marker); unclean: marker removed and every recovery point 0", runs, notes,
                    time.monotonic() - t0, _plots(runs, args.restarts))
    return finish(args, report)


__all__ = ["add_experiment_arguments", "run_experiment"]
