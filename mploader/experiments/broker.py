"""The broker an experiment loads: one generated with :mod:`mploader.generate`, or the user's own data dirs.

A generated broker ends with a clean shutdown and no faults; each run copies it and, for an unclean
restart, takes the marker away and sets every recovery point to 0 (:func:`mploader.experiments.run.make_unclean`),
so that a clean and an unclean restart load the very same bytes.  The user's dirs are copied as they are
("as given"), never loaded in place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mploader.generate import GeneratorConfig, generate


@dataclass(frozen=True, slots=True)
class Broker:
    data_dirs: tuple[Path, ...]
    description: str  # what the report says about the data
    log_bytes: int  # of the .log files
    total_bytes: int  # every file's apparent size (what a copy of it writes, at most)
    generated: dict[str, Any] | None = None  # the generator's config, when generated

    @property
    def device_bytes(self) -> int:
        """A device (throttled loop file system, tmpfs) that holds one copy of it, with room to spare."""
        return int(self.total_bytes * 1.5) + (64 << 20)


def _sizes(dirs: tuple[Path, ...]) -> tuple[int, int]:
    files = [f for d in dirs for f in d.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files if f.suffix == ".log"), sum(f.stat().st_size for f in files)


def generated_broker(out: Path, size: int, segment_bytes: int, partitions: int, batch_bytes: int = 1024,
                     seed: int = 1, data_dirs: int = 1) -> Broker:
    """A clean broker of ``size`` .log bytes in ``data_dirs`` data dirs (the partitions spread over them as
    LogManager spreads new ones): ``partitions`` partitions of one topic, ~1 KiB batches (where Phase 1 spends the
    most CPU per byte), no faults."""
    cfg = GeneratorConfig(data_dirs=data_dirs, topics=1, partitions_per_topic=partitions, total_bytes=size,
                          segment_bytes=segment_bytes, batch_bytes=batch_bytes, records_per_batch=1,
                          clean_shutdown=True, faults=0, seed=seed)
    summary = generate(str(out), cfg)
    dirs = tuple(Path(d) for d in summary.data_dirs)
    return Broker(dirs,
                  f"generated: {data_dirs} data dir{'s' if data_dirs > 1 else ''}, {summary.partitions} partitions, "
                  f"{summary.segments} segments, {summary.batches:,} batches, {summary.log_bytes / 1e6:.0f} MB of .log "
                  f"(seed {seed}, ~{batch_bytes} B batches)",
                  *_sizes(dirs), cfg.to_dict())


def given_broker(dirs: list[str]) -> Broker:
    paths = tuple(Path(os.path.abspath(d)) for d in dirs)
    for p in paths:
        if not p.is_dir():
            raise FileNotFoundError(f"no such data directory: {p}")
    return Broker(paths, f"the data dirs given: {', '.join(map(str, paths))} (copied for every run, as given)",
                  *_sizes(paths))


__all__ = ["Broker", "generated_broker", "given_broker"]
