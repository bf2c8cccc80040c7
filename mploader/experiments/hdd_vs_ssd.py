"""Seed 002's experiment: clean and unclean restart of one generated broker, with its data dirs on one device or
each on a device of its own, loaded by mploader (``--workers`` 1/2/4/8, auto, adaptive, ``--partition-workers
auto``) and by Kafka's own loader (1, 2 and 4 recovery threads), on each device class, every point repeated.

Seed 002 measured an unclean restart of a broker on HDDs: recovery held the disks at ~90% utilisation for
over an hour, and more recovery threads made it slower (1h16m with one, 1h36m with two), as concurrent
readers broke the sequential pattern a spinning disk needs.  Here the same load runs on each device class
(:mod:`.places`): the machine's own disk, a throttled loop device with HDD-like limits, the seek-modelled HDD
and SSD-like devices, and tmpfs as the no-disk upper bound, always from a cold page cache (the disk is what is
measured).  A broker of two data dirs gets two devices of the class, one each, as a broker's ``log.dirs``
usually name two disks; the classes that cannot make a second device of their own (the machine's one disk, the
throttle's one cgroup) run one data dir only.  A device class this machine cannot make (no root, no throttle
controller, no FUSE) is skipped with the reason, and the rest runs.

Kafka's runs need its loader, the oracle of ../shared/kafka-oracle (:mod:`.kafka`); without it they are left
out and the report says so.  Each run of either loader gets a fresh copy of the unclean data on the device, and
the same cold page cache.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mploader.experiments.places import DEVICE_CLASSES, HDD_LIKE, PlaceUnavailable, make_place
from mploader.experiments.run import Place, RunResult, RunSpec, run_once
from mploader.experiments.seek_daemon import STATS_EVERY_S
from mploader.host.cgroup import ReadLimits

RESTARTS = ("clean", "unclean")
WORKERS: tuple[int | str, ...] = (1, 2, 4, 8, "auto", "adaptive")
KAFKA_THREADS = (1, 2, 4)
ONE_DEVICE = {"disk": "the work dir's disk is one device",
              "throttled": "a run's processes join one throttle cgroup, made for one device"}


@dataclass(frozen=True, slots=True)
class HddVsSsdPlan:
    workers: tuple[int | str, ...] = WORKERS
    partition_workers: tuple[int | str, ...] = ("auto",)  # --partition-workers values (none: ())
    kafka_threads: tuple[int, ...] = KAFKA_THREADS  # Kafka's num.recovery.threads.per.data.dir values
    devices: tuple[str, ...] = DEVICE_CLASSES
    restarts: tuple[str, ...] = RESTARTS
    data_dirs: tuple[int, ...] = (1, 2)  # the broker's layouts: its data dirs, each on a device of its own
    limits: ReadLimits = HDD_LIKE
    device_bytes: int = 1 << 30  # size of each loop device and tmpfs (must hold one copy of a data dir)
    repeat: int = 3  # rounds: every run again, in the same order (the reports take each point's median)
    oracle: str | None = None  # Kafka's loader (kafka.find_oracle); None: its runs are left out

    def specs(self, data_dirs: int) -> list[RunSpec]:
        """The runs on one layout, round after round."""
        one: list[RunSpec] = []
        for restart in self.restarts:
            one += [RunSpec(w, restart=restart, data_dirs=data_dirs) for w in self.workers]
            one += [RunSpec("auto", restart=restart, partition_workers=p, data_dirs=data_dirs)
                    for p in self.partition_workers]
            if self.oracle is not None:
                one += [RunSpec(None, t, restart=restart, loader="kafka", data_dirs=data_dirs)
                        for t in self.kafka_threads]
        return one * self.repeat

    def layouts(self) -> list[tuple[str, int]]:
        """(device class, data dirs) in the order they run: the classes that have one device run one data dir."""
        return [(d, n) for d in self.devices for n in self.data_dirs if n == 1 or d not in ONE_DEVICE]

    def total(self) -> int:
        return sum(len(self.specs(n)) for _, n in self.layouts())


@dataclass(slots=True)
class HddVsSsdRuns:
    runs: list[RunResult] = field(default_factory=list)
    places: list[Place] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # the seek-modelled devices' own figures, the layouts not run


def _model_note(places: Sequence[Place], dirs: int) -> str | None:
    """The modelled devices' figures over all their requests (mkfs and the copies included): how many of the
    image's reads and writes took longer than the model allowed (the machine's disk busy with others)."""
    figures = [p.figures() for p in places if p.figures is not None]
    if not figures:
        return None
    requests = sum(f["requests"] for f in figures)
    late = sum(f["late"] for f in figures)
    return (f"{places[0].label}, {dirs} data dir(s): the disk model served {requests:,} requests, {late:,} of them "
            f"late ({100 * late / max(1, requests):.1f}%: the image's own read or write took longer than the model "
            f"allowed); its daemon(s) used {sum(f['cpu_s'] for f in figures):.1f} s of CPU")


def run_hdd_vs_ssd(work_dir: Path, brokers: Mapping[int, Sequence[Path]], plan: HddVsSsdPlan, interval: float,
                   cache_method: str = "auto", on_run: Callable[[RunResult, int, int], None] | None = None,
                   skipped: Callable[[str, str], None] | None = None) -> HddVsSsdRuns:
    """Every run of ``plan``, one device class and layout after the other (their devices made, used and removed in
    turn); ``brokers``: the data dirs of the broker of each layout (by its number of data dirs)."""
    total = plan.total()
    done = HddVsSsdRuns()
    unavailable: set[str] = set()
    for device, n in [(d, n) for d in plan.devices for n in plan.data_dirs]:
        if (device, n) not in plan.layouts():
            done.notes.append(f"device class '{device}' with {n} data dirs not run: {ONE_DEVICE[device]}")
            continue
        if device in unavailable:
            continue
        with contextlib.ExitStack() as stack:  # the devices are removed on the way out, error or Ctrl-C included
            try:
                places = [stack.enter_context(make_place(device, work_dir, plan.device_bytes, plan.limits))
                          for _ in range(n)]
            except PlaceUnavailable as e:  # nothing of it was made (or it was removed again): run the others
                if skipped is not None:
                    skipped(device, str(e))
                done.notes.append(f"device class '{device}' not run: {e}")
                unavailable.add(device)
                continue
            done.places += places[:1]
            for spec in plan.specs(n):
                done.runs.append(run_once(len(done.runs) + 1, places, brokers[n], spec, interval, cache_method,
                                          plan.oracle))
                if on_run is not None:
                    on_run(done.runs[-1], len(done.runs), total)
            if any(p.figures is not None for p in places):
                time.sleep(STATS_EVERY_S + 0.1)  # the daemons' last figures
                if (note := _model_note(places, n)) is not None:
                    done.notes.append(note)
    return done


__all__ = ["HddVsSsdPlan", "HddVsSsdRuns", "KAFKA_THREADS", "ONE_DEVICE", "RESTARTS", "WORKERS", "run_hdd_vs_ssd"]
