"""The process-count sweep: the same broker loaded with 1..N worker processes (and recovery-thread counts),
real recovery and dry run, cold and warm page cache, each run sampled (:mod:`.run`).

The question it answers is seed 002's: where does adding workers stop paying on this machine and these
disks (the knee), and does it ever make the load slower?  The runs are made in an order that moves the
worker count fastest, so that the runs compared with each other are close in time on a noisy machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mploader.experiments.run import Place, RunResult, RunSpec, run_once

Workers = int | str  # a count, "auto" or "adaptive"


@dataclass(frozen=True, slots=True)
class SweepPlan:
    workers: tuple[Workers, ...]
    recovery_threads: tuple[int, ...] = (1,)
    dry_runs: tuple[bool, ...] = (False, True)  # real recovery, dry run
    caches: tuple[str, ...] = ("cold", "warm")
    restart: str = "unclean"
    rates: tuple[int, ...] = ()  # extra runs per IO budget (max_read_bytes_per_sec): cold, recover, at each of
    rate_workers: tuple[Workers, ...] = (1, 2)
    repeat: int = 3  # rounds: every run again, in the same order (the reports take each point's median)
    data_dirs: int = 1  # the broker's (all on the one device)

    def specs(self) -> list[RunSpec]:
        out = [RunSpec(w, rt, dry, cache, self.restart, data_dirs=self.data_dirs)
               for cache in self.caches for dry in self.dry_runs for rt in self.recovery_threads for w in self.workers]
        out += [RunSpec(w, self.recovery_threads[0], False, "cold", self.restart, rate, data_dirs=self.data_dirs)
                for rate in self.rates for w in self.rate_workers]
        return out * self.repeat


def run_sweep(place: Place, sources: Sequence[Path], plan: SweepPlan, interval: float, cache_method: str = "auto",
              on_run: Callable[[RunResult, int, int], None] | None = None, first_id: int = 1) -> list[RunResult]:
    """Every run of ``plan`` on ``place``; ``on_run(result, done, total)`` after each."""
    specs = plan.specs()
    results = []
    for i, spec in enumerate(specs):
        result = run_once(first_id + i, [place], sources, spec, interval, cache_method)
        results.append(result)
        if on_run is not None:
            on_run(result, i + 1, len(specs))
    return results


__all__ = ["SweepPlan", "Workers", "run_sweep"]
