"""The command line's own look at the directories an operator names, before a load or an audit reads them: the
mistakes a broker would not catch, since its ``log.dirs`` come from its configuration, not from a typed path.

* a data dir's parent given for the data dir: a load would take each data dir inside for a partition directory
  (``data-0`` is partition 0 of a topic ``data``) and write a segment, its indexes and a leader-epoch checkpoint
  into it, and an audit would find it healthy;
* a partition directory given for its data dir.
"""

from __future__ import annotations

import os

from mploader.format import checkpoint, names

# what only a data dir holds, never a partition directory (Kafka writes these at the data dir's root)
META_PROPERTIES = "meta.properties"
DATA_DIR_FILES = (META_PROPERTIES, checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT,
                  checkpoint.REPLICATION_OFFSET_CHECKPOINT, checkpoint.CLEAN_SHUTDOWN_MARKER)


def data_dirs_inside(path: str) -> list[str]:
    """The directories in ``path`` that hold a data dir's own files, unless ``path`` holds ``meta.properties`` itself
    (a real data dir then costs one listing here).  Only ``meta.properties`` vouches for ``path``: a load run on the
    parent by mistake (before this check) left its checkpoints there."""
    if os.path.lexists(os.path.join(path, META_PROPERTIES)):  # one stat: a data dir of 10,000 partitions took
        return []  # 7.4 ms to list
    try:
        with os.scandir(path) as entries:
            return sorted(e.path for e in entries if _is_dir(e) and any(
                os.path.lexists(os.path.join(e.path, f)) for f in DATA_DIR_FILES))
    except OSError:  # not a directory, or unreadable: the load's own checks say so
        return []


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # a link loop: the loader's own checks name it
        return False


def refuse_data_dir_parents(dirs: list[str]) -> str | None:
    """Why a command must not run on ``dirs`` (a usage error naming what to give instead), or None."""
    for d in dirs:
        inside = data_dirs_inside(d)
        if inside:
            return (f"{d} is not a data dir (log.dirs) but holds {len(inside)}: {', '.join(inside)} (they hold "
                    f"meta.properties or a data dir's checkpoints); name them instead: "
                    f"{' '.join(inside[:4])}{' ...' if len(inside) > 4 else ''}")
    return None


def audit_dirs_problem(dirs: list[str]) -> str | None:
    """Why a read-only command (``verify``, ``spark``) must not run on ``dirs``, which must exist as they are:
    one missing, one not a directory, or a folder of data dirs; None when they will do."""
    missing = [d for d in dirs if not os.path.lexists(d)]
    if missing:
        return f"no such data directory: {', '.join(missing)}"
    files = [d for d in dirs if not os.path.isdir(d)]
    if files:
        return f"not a directory: {', '.join(files)}"
    return refuse_data_dir_parents(dirs)


def looks_like_partition_dir(path: str) -> bool:
    """``path`` is named like a partition directory and holds a partition's files."""
    try:
        names.parse_partition_dir(os.path.basename(os.path.normpath(path)))
        entries = os.listdir(path)
    except (ValueError, OSError):
        return False
    return any(n.endswith((names.LOG_SUFFIX, names.INDEX_SUFFIX)) or n in (
        checkpoint.LEADER_EPOCH_CHECKPOINT, checkpoint.PARTITION_METADATA) for n in entries)
