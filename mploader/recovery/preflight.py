"""What :class:`~mploader.recovery.loader.LogLoader` would refuse in a partition, known before it runs.

The manager checks every partition of every data dir with :func:`startup_failure` before the load writes
its first byte, so that a load that makes a Kafka broker fail to start changes nothing.  The checks are
the loader's own, in its order (docs/loading.md §5-§6.3, §6.15), on the files as found, and they read
only: the leader-epoch checkpoint's numbers, the names of producer snapshots, ``.cleaned``, ``.swap``,
index and log files, symbolic links, the 2 GiB segment limit and ``partition.metadata``'s topic id.

A failure is reported only where it is certain: the loader reaches that check whatever recovery finds on
the way, unless an IOException ends the partition first (then the data dir goes offline and the broker
starts).  :func:`will_not_fail_with_io_error` is the test for that, done only for partitions with a
finding: every file readable and writable, the directory too.  A partition with a ``.swap`` to complete
is checked only up to the swap (what completing it reads may fail first); what only recovery can find
(a corrupt record in a segment being read, an invalid offset, an index longer than allowed after the
rebuild) is found by the loader, mid-load (the manager then says which partitions were already written).
"""

from __future__ import annotations

import os
import re

from mploader.config import EffectiveConfig
from mploader.disk.base import Disk
from mploader.errors import (
    CheckpointNumberFormatError,
    InvalidFileNameError,
    MploaderError,
    StartupFailedError,
)
from mploader.format import checkpoint, names
from mploader.format.names import DirKind
from mploader.scan.plan import CleanScans

MAX_SEGMENT_BYTES = 2**31 - 1  # the loader's limit (FileRecords refuses to open a larger .log)
# file names the preflight leaves listed for the loader, over all partitions (~100 B each: ~10 MB at most); a
# partition's cached listing saves the loader a second listing of the directory (~20-30 us a partition)
LISTING_CACHE_NAMES = 100_000


def startup_failure(disk: Disk, directory: str, kind: DirKind, cfg: EffectiveConfig,
                    cache_listing: bool = False, clean_scans: list[CleanScans] | None = None,
                    sized_logs: dict[str, tuple[int, int]] | None = None) -> StartupFailedError | None:
    """The first StartupFailedError the loader meets in ``directory`` before recovering anything, or None
    (no such failure, or an IOException comes first: see :func:`will_not_fail_with_io_error`).  The listing
    is read through the disk, which keeps it for the loader if ``cache_listing`` (the loader releases it when the
    partition is loaded), else releases it at once: the manager keeps at most :data:`LISTING_CACHE_NAMES` names, since
    holding every partition's listing until its turn to load cost ~120 B of memory per segment on a big clean
    broker.  ``clean_scans``: where what a clean load of the partition may scan is appended, when the preflight
    sized every ``.log`` (:func:`_oversized_log`); ``sized_logs``: where the bytes and the number of its ``.log``
    files go then, by ``directory`` (``runners.processes.partition_cost``: no second listing)."""
    try:
        return _first_failure(disk, directory, kind, cfg, clean_scans, sized_logs)
    except (OSError, MploaderError, ValueError):  # the loader meets an IOException (or something else) first
        return None
    finally:
        if not cache_listing:
            disk.release(directory)


def _first_failure(disk: Disk, directory: str, kind: DirKind, cfg: EffectiveConfig,
                   clean_scans: list[CleanScans] | None,
                   sized_logs: dict[str, tuple[int, int]] | None) -> StartupFailedError | None:
    # UnifiedLog.apply: the leader-epoch checkpoint (LogLoader._open_epoch_cache)
    epoch_path = os.path.join(directory, checkpoint.LEADER_EPOCH_CHECKPOINT)
    if cfg.record_version >= 2 and disk.exists(epoch_path):
        try:
            checkpoint.parse_leader_epoch_checkpoint(disk.read(epoch_path), epoch_path)
        except CheckpointNumberFormatError as e:
            return StartupFailedError(epoch_path, "NumberFormatException", str(e))
    files, links = disk.list_files(directory), disk.symlinks(directory)
    if not links and all(map(_ordinary, files)):  # the usual partition: only the .log sizes are left to check
        return (_oversized_log(disk, directory, [f for f in files if f.endswith(names.LOG_SUFFIX)], files,
                               clean_scans, sized_logs) or _metadata(disk, directory))
    # the main ProducerStateManager lists the snapshots (new SnapshotFile: Long.parseLong)
    for name in files:
        if name.endswith(names.SNAPSHOT_SUFFIX) and (e2 := _bad_offset(directory, name)) is not None:
            return e2
    # §6.1 removeTempFilesAndCollectSwapFiles
    swaps: list[str] = []
    gone: set[str] = set()
    for name in files:
        if name in links:
            return StartupFailedError(os.path.join(directory, name), "KafkaException",
                                      "a file in a partition directory is a symbolic link; mploader does not "
                                      "follow links out of a data dir: replace the link by the file itself")
        if name.endswith(names.DELETED_SUFFIX) and not name.endswith(names.CHECKPOINT_DELETED_SUFFIX):
            gone.add(name)
        elif name.endswith(names.CLEANED_SUFFIX):
            if (e2 := _bad_offset(directory, name)) is not None:
                return e2
            gone.add(name)
        elif name.endswith(names.SWAP_SUFFIX):
            swaps.append(name)
    for name in swaps:
        if (e2 := _bad_offset(directory, name)) is not None:
            return e2
    if swaps:  # §6.2 reads the swapped segments: what follows is left to the loader
        return None
    # §6.3 loadSegmentFiles: the names, and the size of each .log
    logs: list[str] = []
    for name in files:
        if name in gone:
            continue
        if names.is_index_file(name) or names.is_log_file(name):
            if (e2 := _bad_offset(directory, name)) is not None:
                return e2
        if names.is_log_file(name):
            logs.append(names.segment_file_name(names.offset_from_file_name(name), names.LOG_SUFFIX))
    return _oversized_log(disk, directory, logs, files, clean_scans, sized_logs) or _metadata(disk, directory)


# a name that passes every name check above: a padded base offset of at most 18 significant digits (as
# _bad_offset's own shortcut: a 19-digit one may exceed Long.MAX_VALUE) and a segment file's suffix, or a
# file the checks do not look at
_ORDINARY_NAME = re.compile(r"00\d{18}\.(?:log|index|timeindex|txnindex|snapshot)")
_UNCHECKED = frozenset({checkpoint.LEADER_EPOCH_CHECKPOINT, checkpoint.PARTITION_METADATA})


def _ordinary(name: str) -> bool:
    return name in _UNCHECKED or _ORDINARY_NAME.fullmatch(name) is not None


def _oversized_log(disk: Disk, directory: str, logs: list[str], files: list[str],
                   clean_scans: list[CleanScans] | None,
                   sized_logs: dict[str, tuple[int, int]] | None) -> StartupFailedError | None:
    """FileRecords refuses a ``.log`` larger than Integer.MAX_VALUE bytes.  When every one is below that, the sizes of
    those a clean load may recover at load time go to ``clean_scans`` (:class:`~mploader.scan.plan.CleanScans`), if
    asked (a clean dir's), and their sum and number to ``sized_logs``, if asked."""
    listed = set(files) if clean_scans is not None else None
    scans = CleanScans()
    total = found = 0
    for name in logs:
        padded = os.path.join(directory, name)
        try:
            size = disk.size(padded)  # one stat, cached with a cached listing (a missing padded .log: created empty)
        except FileNotFoundError:
            continue
        if size > MAX_SEGMENT_BYTES:
            return StartupFailedError(padded, "KafkaException", f"segment of {size} bytes is larger than the maximum "
                                      f"segment size of {MAX_SEGMENT_BYTES} bytes")
        total += size
        found += 1
        if listed is not None:
            scans = scans.plus(names.offset_from_file_name(name), listed, size)
    if clean_scans is not None:
        clean_scans.append(scans)
    if sized_logs is not None:
        sized_logs[directory] = (total, found)
    return None


def _metadata(disk: Disk, directory: str) -> StartupFailedError | None:
    """§6.15: the UnifiedLog constructor reads partition.metadata after loading."""
    metadata = os.path.join(directory, checkpoint.PARTITION_METADATA)
    if disk.exists(metadata):
        try:
            checkpoint.parse_partition_metadata(disk.read(metadata), metadata)
        except StartupFailedError as e:
            return e
    return None


def _bad_offset(directory: str, name: str) -> StartupFailedError | None:
    prefix, dot, _ = name.partition(".")
    if dot and prefix.isascii() and prefix.isdigit() and len(prefix.lstrip("0")) <= 18:  # the usual padded name
        return None
    try:
        names.offset_from_file_name(name)
    except InvalidFileNameError as e:
        return StartupFailedError(os.path.join(directory, name), "NumberFormatException", str(e))
    return None


def will_not_fail_with_io_error(directory: str) -> bool:
    """Whether the loader can read and change everything in ``directory`` (so no IOException of the
    files' own making ends the partition before a check :func:`startup_failure` found): the directory
    and every file in it readable and writable.  A failing device or a full file system is not foreseen."""
    if not os.access(directory, os.R_OK | os.W_OK | os.X_OK):
        return False
    try:
        with os.scandir(directory) as it:
            return all(os.access(e.path, os.R_OK | os.W_OK) for e in it if e.is_file())
    except OSError:
        return False


__all__ = ["MAX_SEGMENT_BYTES", "startup_failure", "will_not_fail_with_io_error"]
