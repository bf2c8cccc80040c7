"""The partition journal: what a clean load killed half-way must tell its rerun (docs/crash-safety.md).

A clean dir's load keeps its clean-shutdown marker until every partition is loaded (``manager.dirs.commit_clean_dirs``),
so that the rerun of a killed load is a clean load again.  A clean load is not always a fixpoint of itself,
though.  Where the final producer-state rebuild finds no snapshot, Kafka writes empty snapshots at the last
offsets without reading the log (``UnifiedLog.rebuildProducerState`` with ``reloadFromCleanShutdown``): a
rerun that found those snapshots would replay the log from them instead.  And where it finds snapshots but
the log is empty (log end = log start), the replay deletes every one and writes none: a rerun would find no
snapshot and take the shortcut, which writes one.  Before either, the loader writes ``mploader-journal`` in
the partition directory with its choice (``shortcut``); a rerun that finds it valid makes the same one: for
the shortcut it deletes the partition's snapshots first (they are the shortcut's: there were none when it
was taken), for the replay it does not take the shortcut.  The manager deletes the journals once the load has
committed (the marker deleted).

The journal holds the identity of the marker it was written under (inode, size, modification time, bytes).
A broker that started since has deleted that marker (Kafka deletes it when it reads it) and may have written
another at its shutdown: a journal whose marker is gone or another is stale, deleted and ignored.  Kafka
ignores the file (it is no segment, index, snapshot or checkpoint name); a dry run keeps it in memory.
"""

from __future__ import annotations

import bisect
import json
import os

from mploader.disk.base import Disk
from mploader.errors import EnvironmentFailure
from mploader.format.checkpoint import CLEAN_SHUTDOWN_MARKER
from mploader.format.names import SNAPSHOT_SUFFIX

JOURNAL = "mploader-journal"


def _marker_identity(disk: Disk, data_dir: str) -> str | None:
    """The clean-shutdown marker of ``data_dir`` as one string (None: there is none)."""
    try:
        return disk.fingerprint(os.path.join(data_dir, CLEAN_SHUTDOWN_MARKER))
    except (FileNotFoundError, EnvironmentFailure):  # none, or a directory: none to identify
        return None


def note_clean_start(disk: Disk, partition_dir: str, data_dir: str, shortcut: bool) -> bool:
    """Record, durably, whether this clean load rebuilds the producer state by Kafka's shortcut; whether a
    journal was written (not where the marker is gone)."""
    marker = _marker_identity(disk, data_dir)
    if marker is None:
        return False
    data = json.dumps({"marker": marker, "shortcut": shortcut}).encode()
    disk.write(os.path.join(partition_dir, JOURNAL), data, fsync=True)
    return True


def replay(disk: Disk, partition_dir: str, data_dir: str, listing: list[str]) -> bool | None:
    """Before a partition loads: act on a valid journal left by a killed load and return its choice (for the
    shortcut, the partition's snapshots go first); delete a stale one (None: no choice to repeat).
    ``listing``: the partition directory's files, sorted (a journal is looked for only there)."""
    at = bisect.bisect_left(listing, JOURNAL)
    if at == len(listing) or listing[at] != JOURNAL:
        return None
    path = os.path.join(partition_dir, JOURNAL)
    try:
        facts = json.loads(disk.read(path))
        valid = isinstance(facts, dict) and facts.get("marker") == _marker_identity(disk, data_dir)
    except ValueError:  # torn by the kill: written before the choice changed any snapshot
        valid = False
    if not valid or not isinstance(facts.get("shortcut"), bool):
        disk.delete(path)
        return None
    if facts["shortcut"]:
        for name in listing:
            if name.endswith(SNAPSHOT_SUFFIX):
                disk.delete(os.path.join(partition_dir, name))
    return bool(facts["shortcut"])


def remove(disk: Disk, partition_dir: str) -> None:
    """The load has committed: the journal is of no more use (called only where the load wrote or replayed one:
    ``LoadedLog.journal``, so that a commit costs no look-up in every partition directory)."""
    disk.delete(os.path.join(partition_dir, JOURNAL))


__all__ = ["JOURNAL", "note_clean_start", "remove", "replay"]
