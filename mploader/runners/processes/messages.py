"""What the parent and a partition-loading worker say to each other over the worker's pipe."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mploader.config import LoaderConfig
from mploader.recovery.job import PartitionJob
from mploader.result import LoadStats
from mploader.runners.base import Outcome


@dataclass(frozen=True, slots=True)
class LoadGroup:
    """Parent to worker: load these jobs, in order; keep the mploader log records at ``level`` and above."""

    group: int
    jobs: list[PartitionJob]
    cfg: LoaderConfig
    level: int


@dataclass(frozen=True, slots=True)
class SegmentsLeft:
    """Worker to parent: job ``job`` (its position in the group) has ``count`` segments left to recover."""

    job: int
    count: int


@dataclass(frozen=True, slots=True)
class GroupLoaded:
    """Worker to parent: a group's answer, durable (its file systems synced), or the error of that sync (its
    partitions then fail with it, their dirs offline, as an inline load's last sync takes them)."""

    group: int
    outcomes: list[Outcome]
    records: list[logging.LogRecord]  # the log records its loads made, for the parent's handlers
    changed_dirs: list[str]
    sync_failed: OSError | None
    work: LoadStats  # what its loads scanned and wrote

    def final_outcomes(self) -> list[Outcome]:
        """Its outcomes, or its sync's error for each where the sync failed (they are not durable)."""
        return self.outcomes if self.sync_failed is None else [self.sync_failed] * len(self.outcomes)


#: parent to worker: no more groups, exit
STOP = None

__all__ = ["STOP", "GroupLoaded", "LoadGroup", "SegmentsLeft"]
