"""The points of an experiment: every run of one spec on one device class (its rounds, ``--repeat``) taken
together, as a median with the lowest and highest round beside it.

The median, not the fastest round: the fastest is the round the neighbours disturbed least, a figure no other
machine reproduces, while the median of three is what a second run of the experiment most likely shows; the
min-max range says how much the rounds disagreed, and a point any of whose rounds ran on a busy host
(:mod:`.host_load`) is flagged as such.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mploader.experiments.run import RunResult, RunSpec

Figure = Callable[[RunResult], float | None]


@dataclass(frozen=True, slots=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        return cls(statistics.median(values), min(values), max(values)) if values else None

    def to_json(self, digits: int = 3) -> dict[str, float]:
        return {"median": round(self.median, digits), "min": round(self.low, digits), "max": round(self.high, digits)}


@dataclass(frozen=True, slots=True)
class Point:
    place: str
    spec: RunSpec
    runs: tuple[RunResult, ...]  # its rounds, in the order they ran

    def spread(self, value: Figure) -> Spread | None:
        """The figure's median, min and max over the rounds that have it."""
        return Spread.of([v for r in self.runs if (v := value(r)) is not None])

    @property
    def seconds(self) -> float:
        """The median seconds of the load (what the findings compare)."""
        return statistics.median(r.seconds for r in self.runs)

    @property
    def busy_rounds(self) -> list[int]:
        """The ids of its rounds that ran on a busy host."""
        return [r.id for r in self.runs if r.busy_host()]

    def to_json(self) -> dict[str, Any]:
        figures: dict[str, Figure] = {
            "seconds": lambda r: r.seconds, "process_seconds": lambda r: r.process_seconds,
            "throughput_mb_s": lambda r: r.throughput / 1e6 if r.bytes_read else None,
            "device_busy_percent": RunResult.busy, "others_cpu_percent": lambda r: r.mean("others_cpu")}
        out: dict[str, Any] = {
            "place": self.place, "data_dirs": self.spec.data_dirs, "restart": self.spec.restart,
            "mode": "dry run" if self.spec.dry_run else "recover", "cache": self.spec.cache,
            "recovery_threads": self.spec.recovery_threads, "loader": self.spec.loader, "choice": self.spec.choice,
            "max_read_bytes_per_sec": self.spec.max_read_bytes_per_sec, "rounds": len(self.runs),
            "runs": [r.id for r in self.runs], "busy_host_runs": self.busy_rounds}
        for name, value in figures.items():
            spread = self.spread(value)
            out[name] = None if spread is None else spread.to_json()
        return out


def points(runs: Sequence[RunResult]) -> list[Point]:
    """One point per place and spec, in the order of their first rounds."""
    groups: dict[tuple[str, RunSpec], list[RunResult]] = {}
    for r in runs:
        groups.setdefault((r.place, r.spec), []).append(r)
    return [Point(place, spec, tuple(rs)) for (place, spec), rs in groups.items()]


__all__ = ["Figure", "Point", "Spread", "points"]
