"""What a fleet run leaves: a segment inventory and a per-partition summary, Spark DataFrames made from Arrow
tables, appended as Parquet to a fleet history (docs/spark.md, "The fleet history": every column, and queries).

A load's rows of its partitions are made by the Spark tasks that loaded them (:mod:`mploader.spark.rows`), and the
driver keeps those its brokers' loads keep and adds the run's and broker's columns (:func:`load_tables`).
Every row carries its run (``run_id``, ``run_time``, ``run_date``, ``command``, ``tool_version``, ``host``) and its
broker (``broker``, ``broker_dirs``, ``cluster_id``, ``node_id``; ``data_dir`` and its ``directory_id``), read from
the dirs' ``meta.properties`` (:mod:`mploader.broker_config.meta`).  A run appends, partitioned by ``run_date`` (the
UTC date of ``run_time``): ``PATH/inventory/run_date=YYYY-MM-DD/`` and ``PATH/summary/...``; nothing of an
earlier run is deleted or rewritten, and an output of the layout before the history (Parquet files directly in
``inventory/``) is refused rather than mixed with (:func:`history_problem`).

Both tables have one schema whatever the command: ``verify`` fills every inventory column (it audits every
segment); ``load`` fills what a load knows (its segments after the load; ``crc`` is ``"recovered"`` for the
segments it CRC-checked and recovered, ``"not checked"`` for those Kafka does not read, and the audit columns are
null).  A broker Kafka would refuse to start is a summary row per data dir with ``error`` set and no topic, and so
is a data dir it would take offline: the run goes on with the other brokers.  The columns that always have a value
are non-nullable fields (Arrow, Parquet ``required``, the DataFrames' schema).

Integer columns stay integers where a value is missing (``first_invalid_position`` of a healthy segment, the
impact columns of a verify without a prediction): Arrow and Parquet ``int64`` (``int32``) with nulls, never a
float.  Written to a local path, the files are the driver's (pyarrow, from the tables it holds: each a temporary
name, renamed when whole) and carry pandas' metadata, so that ``pandas.read_parquet`` reads those columns as its
nullable ``Int64``/``Int32`` (and ``healthy`` as ``boolean``), not as ``float64`` with NaN for null; another URL
(``hdfs://``, ``s3a://``: what only Spark can reach) is appended by Spark (its output committer makes the files
appear at the job's commit), whose files pandas reads so with ``dtype_backend="numpy_nullable"``.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import re
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from mploader._version import __version__
from mploader.broker_config.meta import MetaProperties, broker_key, read_meta_properties
from mploader.errors import StartupFailedError
from mploader.result import Impact, LoadResult
from mploader.scan.audit import SegmentAudit
from mploader.spark.rows import (
    INVENTORY_FIELDS,
    SUMMARY_FIELDS,
    WHERE_FIELDS,
    PartitionRows,
    fields,
    impact_columns,
    recovery_words,
)
from mploader.verify import VerifyReport

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PARTITION_COLUMN = "run_date"
NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP: a segment none of whose batches carries one

_STR = pa.string()
_RUN_FIELDS = fields(
    ("run_id", _STR, False), ("run_time", pa.timestamp("us", tz="UTC"), False), (PARTITION_COLUMN, pa.date32(), False),
    ("command", _STR, False), ("tool_version", _STR, False), ("host", _STR, False),
    ("broker", _STR, False), ("broker_dirs", pa.list_(pa.field("element", _STR, nullable=False)), False),
    ("cluster_id", _STR, True), ("node_id", pa.int32(), True),
)
INVENTORY_SCHEMA = pa.schema([*_RUN_FIELDS, *WHERE_FIELDS, *INVENTORY_FIELDS])
#: a partition-less row (a broker Kafka refuses to start, an offline dir) has no topic, partition or dir
SUMMARY_SCHEMA = pa.schema([*_RUN_FIELDS, *(f.with_nullable(True) if f.name in ("topic", "partition", "dir") else f
                                          for f in WHERE_FIELDS), *SUMMARY_FIELDS])


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run of the fleet job: what its rows say about it."""

    run_id: str  # uuid4, hex
    run_time: dt.datetime  # when it began, UTC, to the microsecond
    command: str  # "verify", "load" (a dry run) or "load --apply"
    tool_version: str = __version__
    host: str = field(default_factory=socket.gethostname)  # the driver's

    @classmethod
    def begin(cls, command: str) -> RunInfo:
        return cls(uuid.uuid4().hex, dt.datetime.now(dt.UTC), command)

    @property
    def run_date(self) -> dt.date:
        return self.run_time.astimezone(dt.UTC).date()

    def columns(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "run_time": self.run_time, PARTITION_COLUMN: self.run_date,
                "command": self.command, "tool_version": self.tool_version, "host": self.host}


@dataclass(slots=True)
class FleetTables:
    inventory: DataFrame
    summary: DataFrame
    inventory_rows: int
    summary_rows: int
    run: RunInfo
    inventory_table: pa.Table | None = None  # the same rows as Arrow (INVENTORY_SCHEMA), held by the driver
    summary_table: pa.Table | None = None
    #: a load's partitions by where their rows were made: by the task that loaded them, or by the driver
    made_by: dict[str, int] = field(default_factory=dict)

    def write(self, out: str | os.PathLike[str]) -> tuple[str, str]:
        """Append both to the fleet history under ``out`` (``inventory``, ``summary``, partitioned by
        ``run_date``): a local path by the driver, with pandas' metadata (see the module docstring), any other URL
        by Spark.  :class:`HistoryLayoutError` where ``out`` holds an output of the layout before the history."""
        out = os.fspath(out)
        if (why := history_problem(self.inventory.sparkSession, out)) is not None:
            raise HistoryLayoutError(why)
        paths = os.path.join(out, "inventory"), os.path.join(out, "summary")
        if _local_path(out) is not None and self.inventory_table is not None and self.summary_table is not None:
            append_parquet([(self.inventory_table, _local_path(paths[0]) or paths[0]),
                            (self.summary_table, _local_path(paths[1]) or paths[1])], self.run)
            return paths
        for frame, path in zip((self.inventory, self.summary), paths):  # the summary last, as above
            _spark_append(frame, path)
        return paths


class HistoryLayoutError(ValueError):
    """``--out`` holds what a run cannot append to (:func:`history_problem`)."""


def _local_path(out: str) -> str | None:
    """``out`` as a path of the driver's file system, or None for a URL of another (``hdfs://``, ``s3a://``)."""
    if out.startswith("file://"):
        return out[len("file://"):]
    if out.startswith("file:"):
        return out[len("file:"):]
    return None if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", out) else out


def history_problem(spark: SparkSession, out: str | os.PathLike[str]) -> str | None:
    """Why a run cannot append to ``out`` (None: it can): ``inventory/`` or ``summary/`` holds something other
    than ``run_date=`` partitions and hidden files (``_SUCCESS``, ``.crc``): the unpartitioned output of an
    earlier mploader, which a reader of the history would mix up with it.  A local path is listed by the driver,
    another URL through Spark's Hadoop file system."""
    out = os.fspath(out)
    local = _local_path(out)
    for table in ("inventory", "summary"):
        path = os.path.join(out, table)
        names = _local_names(os.path.join(local, table)) if local is not None else _hadoop_names(spark, path)
        strays = sorted(n for n in names if not n.startswith(("_", ".", f"{PARTITION_COLUMN}=")))
        if strays:
            return (f"{path} holds an earlier output of the unpartitioned layout ({', '.join(strays[:3])}), not a "
                    f"fleet history ({PARTITION_COLUMN}=YYYY-MM-DD partitions): mploader does not mix the two; "
                    f"move {out} aside (e.g. rename it to {out.rstrip('/')}.old) or give --out a new path")
    return None


def _local_names(path: str) -> list[str]:
    if not os.path.lexists(path):
        return []
    return os.listdir(path) if os.path.isdir(path) else [os.path.basename(path)]


def _hadoop_names(spark: SparkSession, path: str) -> list[str]:
    jvm: Any = spark.sparkContext._jvm  # Py4J: the JVM's Hadoop FileSystem of the path's scheme
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(hpath):
        return []
    if not fs.getFileStatus(hpath).isDirectory():
        return [hpath.getName()]
    return [status.getPath().getName() for status in fs.listStatus(hpath)]


def _spark_append(frame: DataFrame, path: str) -> None:
    """``frame`` appended to ``path``, partitioned by ``run_date``; the timestamps as Parquet ``TIMESTAMP``
    (microseconds, UTC), not Spark's default ``INT96``."""
    conf = frame.sparkSession.conf
    key = "spark.sql.parquet.outputTimestampType"
    saved = conf.get(key)
    conf.set(key, "TIMESTAMP_MICROS")
    try:
        frame.write.mode("append").partitionBy(PARTITION_COLUMN).parquet(path)
    finally:
        if saved is None:
            conf.unset(key)
        else:
            conf.set(key, saved)


def nullable_table(table: pa.Table) -> pa.Table:
    """``table`` with pandas' metadata saying that its integer columns are pandas' nullable ``Int64``/``Int32`` and
    its booleans ``boolean`` (the Arrow types and values unchanged)."""
    pd: Any = importlib.import_module("pandas")  # the spark extra's (typed or not, as its version has it)
    mapping = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype(), pa.bool_(): pd.BooleanDtype()}
    frame = table.to_pandas(types_mapper=mapping.get)
    return pa.Table.from_pandas(frame, schema=table.schema, preserve_index=False)


def append_parquet(tables: Sequence[tuple[pa.Table, str]], run: RunInfo) -> list[str]:
    """Each table (:func:`nullable_table`, without its ``run_date``) as one new Parquet file of ``run``'s
    partition of its dataset: ``PATH/run_date=YYYY-MM-DD/part-<run_id>-00000.parquet``.  Every file is written
    under a hidden temporary name (readers skip it) and synced, then all are renamed in order: a file appears
    whole or not at all, and never replaces one (the run id is new).  The files' paths."""
    import pyarrow.parquet as pq

    written: list[tuple[str, str]] = []
    try:
        for table, path in tables:
            part = os.path.join(path, f"{PARTITION_COLUMN}={run.run_date.isoformat()}")
            os.makedirs(part, exist_ok=True)
            name = os.path.join(part, f"part-{run.run_id}-00000.parquet")
            tmp = os.path.join(part, f".part-{run.run_id}-00000.parquet.tmp")
            written.append((tmp, name))
            with open(tmp, "xb") as f:
                pq.write_table(nullable_table(table.drop_columns([PARTITION_COLUMN])), f)
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        for tmp, _ in written:  # this run's own temporary files, nothing else
            if os.path.lexists(tmp):
                os.unlink(tmp)
        raise
    for tmp, name in written:
        os.rename(tmp, name)
        _sync_dir(os.path.dirname(name))
    return [name for _, name in written]


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class _Broker:
    """A broker's identity columns: its dirs' ``meta.properties`` (the first dir's names the broker)."""

    dirs: list[str]
    metas: dict[str, MetaProperties | None]

    @classmethod
    def of(cls, dirs: list[str]) -> _Broker:
        return cls(dirs, {d: read_meta_properties(d) for d in dirs})

    @property
    def directory_ids(self) -> dict[str, str | None]:
        return {d: meta.directory_id if meta else None for d, meta in self.metas.items()}

    def where(self, run: RunInfo, data_dir: str) -> dict[str, Any]:
        """The run's and the broker's columns of a row of ``data_dir``."""
        meta, own = self.metas.get(self.dirs[0]), self.metas.get(data_dir)
        return {**run.columns(), "broker": broker_key(self.dirs[0], meta), "broker_dirs": self.dirs,
                "cluster_id": meta.cluster_id if meta else None, "node_id": meta.node_id if meta else None,
                "data_dir": data_dir, "directory_id": own.directory_id if own else None}


def _frames(spark: SparkSession, inventory: pa.Table, summary: pa.Table, run: RunInfo,
            made_by: dict[str, int] | None = None) -> FleetTables:
    return FleetTables(spark.createDataFrame(inventory), spark.createDataFrame(summary), inventory.num_rows,
                       summary.num_rows, run, inventory, summary, made_by or {})


def _startup_failure(run: RunInfo, broker: _Broker, error: str) -> list[dict[str, Any]]:
    """A broker Kafka would refuse to start: a row per data dir, none of which it loads."""
    return [{**broker.where(run, d), "error": error} for d in broker.dirs]


def load_tables(spark: SparkSession, results: Sequence[tuple[list[str], LoadResult | StartupFailedError]],
                run: RunInfo, made: PartitionRows | None = None) -> FleetTables:
    """The fleet's rows of a load: ``results`` per broker (its dirs, its result), ``made``: the rows the Spark tasks
    made of the partitions they loaded (:mod:`mploader.spark.rows`).  The rows of the partitions the brokers'
    results keep: the tasks' where they made them, else made here (``--driver-fallback``); the run's and broker's
    columns taken per row from a row per data dir (a few Arrow calls for the whole fleet, whatever its number of
    brokers); a row per data dir of a broker Kafka would refuse to start, and per offline dir."""
    made = made or PartitionRows.concat([])
    theirs = made.dirs
    data_dirs: list[dict[str, Any]] = []  # the run's and broker's columns of each data dir
    failures: list[dict[str, Any]] = []
    kept: list[str] = []
    here: list[PartitionRows] = []
    for dirs, result in results:
        broker = _Broker.of(dirs)
        data_dirs.extend(broker.where(run, d) for d in dirs)
        if isinstance(result, StartupFailedError):
            failures.extend(_startup_failure(run, broker, f"{result.kafka_exception}: {result}"))
            continue
        failures.extend({**broker.where(run, d), "error": f"offline: {reason}"}
                        for d, reason in result.offline_dirs.items())
        logs = result.all_logs()
        kept.extend(lg.dir for lg in logs)
        here.append(PartitionRows.of([lg for lg in logs if lg.dir not in theirs], broker.directory_ids))
    rows = PartitionRows.concat([made, *here]).only(kept)
    driver = sum(p.summary.num_rows for p in here)
    where = pa.Table.from_pylist(data_dirs, pa.schema([*_RUN_FIELDS, WHERE_FIELDS[0], WHERE_FIELDS[1]]))
    summary = pa.concat_tables([pa.Table.from_pylist(failures, SUMMARY_SCHEMA),
                                _with_data_dirs(rows.summary, where, SUMMARY_SCHEMA)])
    return _frames(spark, _with_data_dirs(rows.inventory, where, INVENTORY_SCHEMA), summary, run,
                   {"executors": len(kept) - driver, "driver": driver})


def _with_data_dirs(table: pa.Table, where: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s rows in ``schema``: each with the columns of its data dir's row of ``where``."""
    if table.num_rows == 0:  # an empty table of one empty chunk a column (Spark takes no column of none)
        return schema.empty_table()
    at = pc.index_in(table["data_dir"], value_set=where["data_dir"])
    return pa.Table.from_arrays([table[f.name] if f.name in table.column_names else where[f.name].take(at)
                                 for f in schema], schema=schema)


def _audit_row(a: SegmentAudit) -> dict[str, Any]:
    return {"base_offset": a.base_offset, "next_offset": None if a.last_offset is None else a.last_offset + 1,
            "size_bytes": a.size_bytes, "valid_bytes": a.valid_bytes, "batches": a.batches, "records": a.records,
            "max_timestamp": None if a.max_timestamp == NO_TIMESTAMP else a.max_timestamp,
            "first_leader_epoch": a.epoch_starts[0][0] if a.epoch_starts else None,
            "last_leader_epoch": a.epoch_starts[-1][0] if a.epoch_starts else None,
            "crc": "ok" if a.first_invalid_position is None else "invalid",
            "first_invalid_position": a.first_invalid_position, "reason": a.reason,
            "index": a.index, "timeindex": a.timeindex, "txnindex": a.txnindex}


def verify_tables(spark: SparkSession, reports: Sequence[tuple[list[str], VerifyReport]],
                  run: RunInfo) -> FleetTables:
    inventory: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    for dirs, report in reports:
        broker = _Broker.of(dirs)
        if report.startup_failure is not None:
            failure = report.startup_failure
            summary.extend(_startup_failure(run, broker, f"{failure['kafka_exception']}: {failure['message']}"))
        for p in report.partitions:
            where = {**broker.where(run, p.data_dir), "topic": p.topic, "partition": p.partition, "dir": p.dir}
            inventory.extend({**where, **_audit_row(a)} for a in p.segments)
            row: dict[str, Any] = {
                **where, "kind": p.kind, "segments": len(p.segments), "healthy": p.healthy,
                "log_start_offset": p.log_start_offset, "recovery_point": p.recovery_point,
                "log_end_offset": p.log_end_offset, "high_watermark": p.high_watermark}
            if p.recovery is not None:
                row.update(impact_columns(len(p.recovery["recovered_segments"]), Impact(**p.recovery["impact"])))
                truncated = sum(t["from_bytes"] - t["to_bytes"] for t in p.recovery["truncated_segments"])
                row["recovery"] = recovery_words(row["recovered_segments"], truncated, row["segments_deleted"],
                                                 row["records_removed"], row["lost_below_high_watermark"], "would ")
            summary.append(row)
    return _frames(spark, pa.Table.from_pylist(inventory, INVENTORY_SCHEMA),
                   pa.Table.from_pylist(summary, SUMMARY_SCHEMA), run)


__all__ = ["INVENTORY_SCHEMA", "NO_TIMESTAMP", "PARTITION_COLUMN", "SUMMARY_SCHEMA", "FleetTables",
           "HistoryLayoutError", "RunInfo", "append_parquet", "history_problem", "load_tables", "nullable_table",
           "recovery_words", "verify_tables"]
