"""Stray logs: a partition directory this broker should not hold, as a KRaft broker decides at start-up.

Kafka's ``LogManager.loadLog`` (trunk of 2024-10-25, the version mploader follows: docs/loading.md §2) asks
``isStray(log)`` of every log it loaded whose directory is not a ``-delete`` or ``-stray`` one; the broker passes
``LogManager.isStrayKraftReplica(brokerId, image.topics, log)`` (:func:`mploader.format.metadata_image.stray_reason`).
A stray log is renamed ``<topic>-<partition>.<uuid>-stray`` and kept among the stray logs, with a WARN; nothing of
it is deleted at start-up (a dry run renames nothing).  In ZooKeeper mode, or without the metadata image, no log is
a stray (:data:`NO_STRAYS`).
"""

from __future__ import annotations

import dataclasses
import logging
import os

from mploader.disk import Disk
from mploader.format import names
from mploader.format.metadata_image import MetadataImage, stray_reason
from mploader.format.names import DirKind
from mploader.result import LoadedLog

log = logging.getLogger("mploader.manager")


class StrayLogs:
    """Which loaded logs are strays; this base: none."""

    def reason(self, loaded: LoadedLog) -> str | None:
        """Why ``loaded`` is a stray (None: it is not)."""
        return None


NO_STRAYS = StrayLogs()


class KraftStrayLogs(StrayLogs):
    """A KRaft broker's: by its metadata image and its ``node.id``."""

    def __init__(self, image: MetadataImage, broker_id: int) -> None:
        self.image = image
        self.broker_id = broker_id

    def reason(self, loaded: LoadedLog) -> str | None:
        return stray_reason(self.image, self.broker_id, loaded.partition, loaded.topic_id)


def settle_stray(loaded: LoadedLog, strays: StrayLogs, disk: Disk) -> LoadedLog:
    """``loaded`` as LogManager.loadLog leaves it: a live or future log that is a stray renamed to a stray directory
    and marked so; any other as it is."""
    if loaded.kind not in (DirKind.LIVE, DirKind.FUTURE):
        return loaded
    why = strays.reason(loaded)
    if why is None:
        return loaded
    renamed = os.path.join(os.path.dirname(loaded.dir), names.partition_dir_name(loaded.topic_partition,
                                                                                   DirKind.STRAY))
    disk.rename_dir(loaded.dir, renamed)
    log.warning("Log in %s marked stray and renamed to %s (%s)", loaded.dir, renamed, why)
    return dataclasses.replace(loaded, dir=renamed, kind=DirKind.STRAY, stray_reason=why)


__all__ = ["NO_STRAYS", "KraftStrayLogs", "StrayLogs", "settle_stray"]
