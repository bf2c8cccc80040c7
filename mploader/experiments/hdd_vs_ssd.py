"""Seed 002's experiment: clean and unclean restart x 1/2/4/8 workers x device class, on one generated broker.

Seed 002 measured an unclean restart of a broker on HDDs: recovery held the disks at ~90% utilisation for
over an hour, and more recovery threads made it slower (1h16m with one, 1h36m with two), as concurrent
readers broke the sequential pattern a spinning disk needs.  Here the same load runs on each device class
(:mod:`.places`): the machine's own disk, a throttled loop device with HDD-like limits, the seek-modelled HDD
and SSD-like devices, and tmpfs as the no-disk upper bound, always from a cold page cache (the disk is what is
measured).  A device class this machine cannot make (no root, no throttle controller, no FUSE) is skipped with
the reason, and the rest runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mploader.experiments.places import DEVICE_CLASSES, HDD_LIKE, PlaceUnavailable, make_place
from mploader.experiments.run import Place, RunResult, RunSpec, run_once
from mploader.host.cgroup import ReadLimits

RESTARTS = ("clean", "unclean")


@dataclass(frozen=True, slots=True)
class HddVsSsdPlan:
    workers: tuple[int | str, ...] = (1, 2, 4, 8)
    devices: tuple[str, ...] = DEVICE_CLASSES
    restarts: tuple[str, ...] = RESTARTS
    limits: ReadLimits = HDD_LIKE
    device_bytes: int = 1 << 30  # size of the loop devices and of the tmpfs (must hold one copy)
    repeat: int = 1  # rounds on each device (the reports take each run's fastest round)

    def specs(self) -> list[RunSpec]:
        return [RunSpec(w, 1, False, "cold", restart) for restart in self.restarts for w in self.workers] * self.repeat


def run_hdd_vs_ssd(work_dir: Path, sources: Sequence[Path], plan: HddVsSsdPlan, interval: float,
                   cache_method: str = "auto", on_run: Callable[[RunResult, int, int], None] | None = None,
                   skipped: Callable[[str, str], None] | None = None) -> tuple[list[RunResult], list[Place]]:
    """Every run of ``plan``, one device class after the other (each made, used and removed in turn)."""
    specs = plan.specs()
    total = len(specs) * len(plan.devices)
    results: list[RunResult] = []
    places: list[Place] = []
    for device in plan.devices:
        with contextlib.ExitStack() as stack:  # the device is removed on the way out, error or Ctrl-C included
            try:
                place = stack.enter_context(make_place(device, work_dir, plan.device_bytes, plan.limits))
            except PlaceUnavailable as e:  # nothing of it was made (or it was removed again): run the others
                if skipped is not None:
                    skipped(device, str(e))
                continue
            places.append(place)
            for spec in specs:
                results.append(run_once(len(results) + 1, place, sources, spec, interval, cache_method))
                if on_run is not None:
                    on_run(results[-1], len(results), total)
    return results, places


__all__ = ["HddVsSsdPlan", "RESTARTS", "run_hdd_vs_ssd"]
