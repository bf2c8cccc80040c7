"""The command line's own look at the directories an operator names, before a load or an audit reads them: the
mistakes a broker would not catch, since its ``log.dirs`` come from its configuration, not from a typed path.
:func:`data_dirs_problem` is the one check every command that takes data dirs makes (``load``, ``verify``, the
``spark`` forms, ``sweep``); what it refuses is a usage error (exit 2) and nothing is written:

* no data dir given (``mploader spark verify`` with none);
* a path that does not exist (``load --create-missing`` creates it instead, as a broker does);
* a path that is not a directory;
* a data dir's parent given for the data dir: a load would take each data dir inside for a partition directory
  (``data-0`` is partition 0 of a topic ``data``) and write a segment, its indexes and a leader-epoch checkpoint
  into it, and an audit would find it healthy;
* a partition directory given for its data dir (its name parses as ``topic-partition`` and it holds segment
  ``.log`` files, and it has no ``meta.properties``): a load would find no partition in it and write ``.lock`` and
  checkpoints into it, an audit would read none of its segments and call it healthy;
* a directory that is not a data dir at all: no partition directory (no subdirectory) and none of a data dir's
  own files (``meta.properties``, a checkpoint, the clean-shutdown marker, ``.lock``) -- an empty or unrelated
  folder.  The one exception is an empty directory given to ``load --create-missing``: the flag that lets a load
  create a new data dir, as a broker does, lets it take an existing empty one for a new data dir too.

A directory holding any subdirectory is given to the load, which refuses what Kafka refuses (``lost+found``, a
name that is not ``topic-partition``) before it writes anything.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from mploader.format import checkpoint, names
from mploader.format.names import TopicPartition

# what only a data dir holds, never a partition directory (Kafka writes these at the data dir's root)
META_PROPERTIES = "meta.properties"
LOCK_FILE = ".lock"  # LogManager.LockFileName
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


def refuse_data_dir_parents(dirs: Sequence[str]) -> str | None:
    """Why a command must not run on ``dirs`` (a usage error naming what to give instead), or None."""
    for d in dirs:
        inside = data_dirs_inside(d)
        if inside:
            return (f"{d} is not a data dir (log.dirs) but holds {len(inside)}: {', '.join(inside)} (they hold "
                    f"meta.properties or a data dir's checkpoints); name them instead: "
                    f"{' '.join(inside[:4])}{' ...' if len(inside) > 4 else ''}")
    return None


def looks_like_partition_dir(path: str) -> bool:
    """``path`` is a partition directory: named ``topic-partition`` (as Kafka parses it), holding segment ``.log``
    files, and not vouched for as a data dir by a ``meta.properties`` of its own."""
    try:
        names.parse_partition_dir(os.path.basename(os.path.normpath(path)))
        entries = os.listdir(path)
    except (ValueError, OSError):
        return False
    if META_PROPERTIES in entries:
        return False
    return any(names.is_log_file(n) and _is_offset_name(n) for n in entries)


def _is_offset_name(name: str) -> bool:
    try:
        names.offset_from_file_name(name)
    except ValueError:
        return False
    return True


def _is_data_dir_like(path: str) -> tuple[bool, bool]:
    """(holds a data dir's own file or a subdirectory, is empty)."""
    try:
        with os.scandir(path) as entries:
            seen = False
            for e in entries:
                seen = True
                if e.name in DATA_DIR_FILES or e.name == LOCK_FILE or _is_dir(e):
                    return True, False
            return False, not seen
    except OSError:  # unreadable: the load's own checks name it
        return True, False


def data_dirs_problem(dirs: Sequence[str], create_missing: bool = False, can_create: bool = False) -> str | None:
    """Why a command must not run on ``dirs`` (the module docstring's rules, in that order), as a usage error that
    names what to give instead; None when they will do.  ``create_missing``: ``load --create-missing`` (a missing dir
    is created, an empty one taken for a new data dir); ``can_create``: the command has that flag (``load``), and
    its message may offer it."""
    if not dirs:
        return "no data dir given: name the broker's data dirs (log.dirs)"
    missing = [d for d in dirs if not os.path.lexists(d)]
    if missing and not create_missing:
        return f"no such data directory: {', '.join(missing)}" + (
            " (a Kafka broker would create it, empty; to do that too, add --create-missing)" if can_create else "")
    files = [d for d in dirs if os.path.lexists(d) and not os.path.isdir(d)]
    if files:
        return f"not a directory: {', '.join(files)} (a data dir, Kafka's log.dirs, is a directory)"
    if (why := refuse_data_dir_parents([d for d in dirs if os.path.lexists(d)])) is not None:
        return why
    for d in dirs:
        if not os.path.lexists(d):
            continue
        if looks_like_partition_dir(d):
            parent = os.path.dirname(os.path.abspath(os.path.normpath(d)))
            tp, _ = names.parse_partition_dir(os.path.basename(os.path.normpath(d)))
            return (f"{d} is a partition directory (partition {tp.partition} of topic {tp.topic}: it holds its "
                    f"segments), not a data dir (log.dirs): did you mean {parent}?")
        data_dir_like, empty = _is_data_dir_like(d)
        if data_dir_like or (empty and create_missing):
            continue
        what = "is empty: it holds" if empty else "holds"
        new = "; if it is a new data dir for a broker's first start, add --create-missing" if empty and can_create \
            else ""
        return (f"{d} {what} no partition directory and none of a data dir's own files (meta.properties, a "
                f"checkpoint, .lock): it is not a Kafka data dir (log.dirs){new}")
    return None


def partitions_in(dirs: Sequence[str]) -> list[TopicPartition]:
    """The partitions the directories of ``dirs`` are named for (live, -future, -delete, -stray alike), from one
    listing each; a name Kafka would refuse is skipped (the load names it)."""
    out = []
    for d in dirs:
        try:
            with os.scandir(d) as entries:
                for e in entries:
                    if not _is_dir(e):
                        continue
                    try:
                        out.append(names.parse_partition_dir(e.name)[0])
                    except ValueError:
                        continue
        except OSError:
            continue
    return out


__all__ = ["DATA_DIR_FILES", "data_dirs_inside", "data_dirs_problem", "looks_like_partition_dir", "partitions_in",
           "refuse_data_dir_parents"]
