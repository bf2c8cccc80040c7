"""The right data or nothing: a Spark task checks that it sees what the driver planned before it reads or writes.

An executor reads the paths the driver planned on its own file system.  On storage that every executor shares at
the same path, that is the driver's data; on local disks (a broker's data on its own host, often at the same path
on every host), a task placed on another host finds another broker's data dir there, or nothing.  So each task
checks, before it reads a byte of a segment and before it writes one:

* the data dir's identity, its ``meta.properties`` (``cluster.id``, ``node.id`` or ``broker.id``, ``directory.id``
  where present, read as Kafka reads them: :mod:`mploader.broker_config.meta`), read by the driver once per dir and
  by a task once per dir it touches: the same, or both without one;
* the files: a load's partition directory holds the files the driver listed, each with the same size, mtime and
  inode (:class:`mploader.recovery.job.PlannedData`); a scan's or an audit's file has the size, mtime and inode the
  driver planned it with (:func:`mploader.engine.chunks.file_stat`).

A difference raises :class:`WrongDataError` in the task: never an ``OSError``, so never a disk failure, an
unreadable segment or an offline dir.  Its one line names the executor's host, the path and what differed; Spark's
job fails, and :class:`mploader.spark.jobs.SparkJobFailed` carries the line to the driver.  A scan's or an audit's
file that differs is answered instead (:func:`piece_problem`): only the driver can tell a file changed since it
planned (a running broker's active segment, verify's) from one that this host sees otherwise (docs/spark.md).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from mploader.broker_config.meta import MetaProperties, load_meta_properties
from mploader.engine.chunks import FileStat, file_stat
from mploader.errors import MploaderError
from mploader.recovery.job import ListedFile, PartitionJob, listed_files

_FIX = "the executors must see each data dir at the driver's path (docs/spark.md, \"Data on local disks\")"


class WrongDataError(MploaderError, RuntimeError):
    """A Spark task does not see the data the driver planned at a path (another broker's data dir, another file,
    nothing): it failed before it read or wrote any of it."""


def wrong_data(path: str, what: str) -> WrongDataError:
    """The error of a task on this host that found ``what`` at ``path`` (one line)."""
    return WrongDataError(f"on host {socket.gethostname()}, {path} is not what the driver planned: {what}; {_FIX}")


def _why(error: BaseException) -> str:
    what = "not there" if isinstance(error, FileNotFoundError) else "not readable"
    return f"{what} ({type(error).__name__}: {error})"


def _differences(found: Iterable[tuple[str, object]], planned: Iterable[tuple[str, object]]) -> str:
    return ", ".join(f"{name} {got} (the driver's: {want})"
                     for (name, got), (_, want) in zip(found, planned, strict=True) if got != want)


def _identity_fields(meta: MetaProperties | None) -> list[tuple[str, object]]:
    """What of a ``meta.properties`` names the dir (all None: none, or one that names nothing)."""
    m = meta or MetaProperties(None, None, None)
    return [("cluster.id", m.cluster_id), ("node.id", m.node_id), ("directory.id", m.directory_id)]


def _said(fields: list[tuple[str, object]]) -> str:
    return " ".join(f"{name}={value}" for name, value in fields if value is not None) or "none"


_NONE = _identity_fields(None)


def _stat_fields(stat: FileStat) -> list[tuple[str, object]]:
    return [("size", stat[0]), ("mtime_ns", stat[1]), ("inode", stat[2])]


def check_data_dir(data_dir: str, planned: MetaProperties | None) -> None:
    """WrongDataError unless ``data_dir`` is there with the ``meta.properties`` identity the driver read (both none:
    the files decide)."""
    want = _identity_fields(planned)
    try:
        os.stat(data_dir)
    except OSError as e:
        raise wrong_data(data_dir, _why(e)) from None
    try:
        got = _identity_fields(load_meta_properties(data_dir))
    except (OSError, ValueError) as e:  # none Kafka would read: the driver read none either?
        if want != _NONE:
            raise wrong_data(data_dir, f"meta.properties {_why(e)}, the driver read {_said(want)}") from None
        return
    if got != want:
        raise wrong_data(data_dir, "meta.properties: " + (
            _differences(got, want) if _NONE not in (got, want) else f"{_said(got)} (the driver's: {_said(want)})"))


class DataDirs:
    """The data dirs a task found to be the driver's: each checked once (:func:`check_data_dir`)."""

    def __init__(self) -> None:
        self._right: dict[str, MetaProperties | None] = {}

    def check(self, data_dir: str, planned: MetaProperties | None) -> None:
        if data_dir not in self._right or self._right[data_dir] != planned:
            check_data_dir(data_dir, planned)
            self._right[data_dir] = planned


def _listing_difference(found: tuple[ListedFile, ...], planned: tuple[ListedFile, ...]) -> str | None:
    """What differs between the files found and those the driver listed, first file first; None: nothing."""
    here, there = {f[0]: f[1:] for f in found}, {f[0]: f[1:] for f in planned}
    differ = sorted(name for name in here.keys() | there.keys() if here.get(name) != there.get(name))
    if not differ:
        return None
    name = differ[0]
    if name not in here:
        what = "not there"
    elif name not in there:
        what = "a file the driver did not list"
    else:
        what = _differences(_stat_fields(here[name]), _stat_fields(there[name]))
    more = f" ({len(differ)} files differ)" if len(differ) > 1 else ""
    return f"file {name}: {what}{more}"


def check_partition(job: PartitionJob, dirs: DataDirs, files: bool = True) -> None:
    """WrongDataError unless ``job``'s data dir is the driver's and, with ``files``, its partition directory holds the
    files the driver listed, unchanged (a job without :attr:`~PartitionJob.planned`: nothing to check)."""
    planned = job.planned
    if planned is None:
        return
    dirs.check(job.data_dir, planned.identity)
    if planned.files is None:  # the driver could not list it: the load meets the error as it would there
        return
    try:
        found = listed_files(job.dir)
    except OSError as e:
        raise wrong_data(job.dir, _why(e)) from None
    if files and (what := _listing_difference(found, planned.files)) is not None:
        raise wrong_data(job.dir, what)


def changed_since_planned(job: PartitionJob, ignored: frozenset[str] = frozenset()) -> bool:
    """Whether ``job``'s partition directory holds files other than those the driver listed, or changed ones, names in
    ``ignored`` left out (True where either listing is unknown)."""
    planned = job.planned
    if planned is None or planned.files is None:
        return True
    try:
        found = listed_files(job.dir)
    except OSError:
        return True
    return [f for f in found if f[0] not in ignored] != [f for f in planned.files if f[0] not in ignored]


def file_problem(path: str, planned: FileStat) -> WrongDataError | None:
    """Why ``path`` here is not the file the driver planned with ``planned`` (its :func:`file_stat`); None: it is."""
    try:
        found = file_stat(path)
    except OSError as e:
        return wrong_data(path, _why(e))
    if found == planned:
        return None
    return wrong_data(path, _differences(_stat_fields(found), _stat_fields(planned)))


def piece_problem(row: Mapping[str, Any], dirs: DataDirs) -> WrongDataError | None:
    """A piece's row (:data:`mploader.spark.tasks.PIECE_COLUMNS`): WrongDataError raised unless its data dir is the
    driver's, returned where its file is not the one the driver planned (the driver tells which it is); None: it is."""
    dirs.check(row["data_dir"], MetaProperties(row["cluster_id"], row["node_id"], row["directory_id"]))
    if row["inode"] is None:  # the driver could not stat it: the scan or audit says why, as there
        return None
    return file_problem(row["path"], (row["file_size"], row["mtime_ns"], row["inode"]))


__all__ = ["DataDirs", "WrongDataError", "changed_since_planned", "check_data_dir", "check_partition", "file_problem",
           "piece_problem", "wrong_data"]
