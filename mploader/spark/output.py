"""What a fleet run leaves: a segment inventory and a per-partition summary, Spark DataFrames made from Arrow
tables, written as Parquet (readable by Spark and by pandas: ``pandas.read_parquet(PATH/"summary")``).

Both have one schema whatever the command: ``verify`` fills every inventory column (it audits every segment);
``load`` fills what a load knows (its segments after the load; ``crc`` is ``"recovered"`` for the segments it
CRC-checked and recovered, ``"not checked"`` for those Kafka does not read, and the audit columns are null).
A broker Kafka would refuse to start, or a data dir it would take offline, is a summary row with ``error`` set
and no topic: the run goes on with the other brokers.

Integer columns stay integers where a value is missing (``first_invalid_position`` of a healthy segment, the
impact columns of a verify without a prediction): Arrow and Parquet ``int64`` (``int32``) with nulls, never a
float.  Written to a local path, the files are the driver's (pyarrow, from the tables it holds) and carry pandas'
metadata, so that ``pandas.read_parquet`` reads those columns as its nullable ``Int64``/``Int32`` (and ``healthy``
as ``boolean``), not as ``float64`` with NaN for null; another URL (``hdfs://``, ``s3a://``: what only Spark can
reach) is written by Spark, whose files pandas reads so with ``dtype_backend="numpy_nullable"``.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from mploader.errors import StartupFailedError
from mploader.result import LoadedLog, LoadResult
from mploader.scan.audit import SegmentAudit
from mploader.verify import VerifyReport

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_I64, _STR = pa.int64(), pa.string()
INVENTORY_SCHEMA = pa.schema([
    ("broker", _STR), ("data_dir", _STR), ("topic", _STR), ("partition", pa.int32()), ("dir", _STR),
    ("base_offset", _I64), ("next_offset", _I64), ("size_bytes", _I64), ("valid_bytes", _I64),
    ("batches", _I64), ("records", _I64), ("max_timestamp", _I64),
    ("first_leader_epoch", _I64), ("last_leader_epoch", _I64),
    ("crc", _STR),  # "ok", "invalid" (verify); "recovered", "not checked" (load)
    ("first_invalid_position", _I64), ("reason", _STR),
    ("index", _STR), ("timeindex", _STR), ("txnindex", _STR),
])
SUMMARY_SCHEMA = pa.schema([
    ("broker", _STR), ("data_dir", _STR), ("topic", _STR), ("partition", pa.int32()), ("dir", _STR), ("kind", _STR),
    ("segments", _I64), ("healthy", pa.bool_()),  # healthy: verify only
    ("log_start_offset", _I64), ("recovery_point", _I64), ("log_end_offset", _I64), ("high_watermark", _I64),
    ("recovered_segments", _I64), ("log_end_offset_before", _I64), ("records_removed", _I64),
    ("bytes_removed", _I64), ("segments_deleted", _I64), ("lost_below_high_watermark", pa.bool_()),
    ("recovery", _STR),  # what recovery does (load) or would do (verify's dry run), in words
    ("error", _STR),  # the broker's start-up failure, or why a data dir is offline
])


@dataclass(slots=True)
class FleetTables:
    inventory: DataFrame
    summary: DataFrame
    inventory_rows: int
    summary_rows: int
    inventory_table: pa.Table | None = None  # the same rows as Arrow (INVENTORY_SCHEMA), held by the driver
    summary_table: pa.Table | None = None

    def write(self, out: str | os.PathLike[str]) -> tuple[str, str]:
        """Write both as Parquet under ``out`` (``inventory``, ``summary``; replaced if there): a local path by the
        driver, with pandas' metadata (see the module docstring), any other URL by Spark."""
        paths = os.path.join(os.fspath(out), "inventory"), os.path.join(os.fspath(out), "summary")
        local = _local_path(os.fspath(out))
        if local is not None and self.inventory_table is not None and self.summary_table is not None:
            for path, table in zip(paths, (self.inventory_table, self.summary_table)):
                write_parquet(table, _local_path(path) or path)
            return paths
        self.inventory.write.mode("overwrite").parquet(paths[0])
        self.summary.write.mode("overwrite").parquet(paths[1])
        return paths


def _local_path(out: str) -> str | None:
    """``out`` as a path of the driver's file system, or None for a URL of another (``hdfs://``, ``s3a://``)."""
    if out.startswith("file://"):
        return out[len("file://"):]
    if out.startswith("file:"):
        return out[len("file:"):]
    return None if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", out) else out


def nullable_table(table: pa.Table) -> pa.Table:
    """``table`` with pandas' metadata saying that its integer columns are pandas' nullable ``Int64``/``Int32`` and
    its booleans ``boolean`` (the Arrow types and values unchanged)."""
    pd: Any = importlib.import_module("pandas")  # the spark extra's (typed or not, as its version has it)
    mapping = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype(), pa.bool_(): pd.BooleanDtype()}
    frame = table.to_pandas(types_mapper=mapping.get)
    return pa.Table.from_pandas(frame, schema=table.schema, preserve_index=False)


def write_parquet(table: pa.Table, path: str) -> None:
    """``table`` (:func:`nullable_table`) as a Parquet dataset of one file at ``path``, as Spark lays one out
    (``part-00000.parquet`` and ``_SUCCESS``: ``spark.read.parquet(path)`` and ``pandas.read_parquet(path)`` read
    it); what was at ``path`` is replaced."""
    import pyarrow.parquet as pq

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
    os.makedirs(path)
    pq.write_table(nullable_table(table), os.path.join(path, "part-00000.parquet"))
    with open(os.path.join(path, "_SUCCESS"), "wb"):
        pass


def _frames(spark: SparkSession, inventory: list[dict[str, Any]], summary: list[dict[str, Any]]) -> FleetTables:
    tables = pa.Table.from_pylist(inventory, INVENTORY_SCHEMA), pa.Table.from_pylist(summary, SUMMARY_SCHEMA)
    return FleetTables(spark.createDataFrame(tables[0]), spark.createDataFrame(tables[1]), len(inventory),
                       len(summary), *tables)


def broker_name(dirs: Sequence[str]) -> str:
    return ",".join(dirs)


def recovery_words(recovered: int, truncated: int, deleted: int, removed: int, lost: bool, verb: str = "") -> str:
    """What a recovery did (``verb`` "") or would do ("would ") to a partition, in a few words."""
    if not (recovered or truncated or deleted or removed):
        return "nothing"
    parts = [f"{verb}recover {recovered} segment(s)"] if recovered else []
    if truncated:
        parts.append(f"{verb}truncate {truncated} bytes")
    if deleted:
        parts.append(f"{verb}delete {deleted} segment(s)")
    if removed:
        parts.append(f"{verb}remove {removed} offsets" + (" below the high watermark (acknowledged)" if lost else ""))
    return ", ".join(parts)


def _impact_columns(lg: LoadedLog) -> dict[str, Any]:
    i = lg.impact
    return {"recovered_segments": len(lg.recovered_segments), "log_end_offset_before": i.log_end_offset_before,
            "records_removed": i.records_removed, "bytes_removed": i.bytes_removed,
            "segments_deleted": i.segments_deleted, "lost_below_high_watermark": i.lost_below_high_watermark}


def load_tables(spark: SparkSession, results: Sequence[tuple[list[str], LoadResult | StartupFailedError]]
                ) -> FleetTables:
    inventory: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    for dirs, result in results:
        broker = broker_name(dirs)
        if isinstance(result, StartupFailedError):
            summary.append({"broker": broker, "error": f"{result.kafka_exception}: {result}"})
            continue
        for d, reason in result.offline_dirs.items():
            summary.append({"broker": broker, "data_dir": d, "error": f"offline: {reason}"})
        for lg in sorted(result.all_logs(), key=lambda lg: (lg.data_dir, lg.topic, lg.partition, lg.dir)):
            where = {"broker": broker, "data_dir": lg.data_dir, "topic": lg.topic, "partition": lg.partition,
                     "dir": lg.dir}
            recovered = set(lg.recovered_segments)
            inventory.extend({**where, "base_offset": s.base_offset, "next_offset": s.next_offset,
                              "size_bytes": s.size_bytes, "crc": "recovered" if s.base_offset in recovered
                              else "not checked"} for s in lg.segments)
            impact = _impact_columns(lg)
            summary.append({**where, "kind": lg.kind.value, "segments": len(lg.segments),
                            "log_start_offset": lg.log_start_offset, "recovery_point": lg.recovery_point,
                            "log_end_offset": lg.log_end_offset, "high_watermark": lg.high_watermark, **impact,
                            "recovery": recovery_words(impact["recovered_segments"], lg.truncated_bytes,
                                                       impact["segments_deleted"], impact["records_removed"],
                                                       impact["lost_below_high_watermark"])})
    return _frames(spark, inventory, summary)


def _audit_row(a: SegmentAudit) -> dict[str, Any]:
    return {"base_offset": a.base_offset, "next_offset": None if a.last_offset is None else a.last_offset + 1,
            "size_bytes": a.size_bytes, "valid_bytes": a.valid_bytes, "batches": a.batches, "records": a.records,
            "max_timestamp": a.max_timestamp,
            "first_leader_epoch": a.epoch_starts[0][0] if a.epoch_starts else None,
            "last_leader_epoch": a.epoch_starts[-1][0] if a.epoch_starts else None,
            "crc": "ok" if a.first_invalid_position is None else "invalid",
            "first_invalid_position": a.first_invalid_position, "reason": a.reason,
            "index": a.index, "timeindex": a.timeindex, "txnindex": a.txnindex}


def verify_tables(spark: SparkSession, reports: Sequence[tuple[list[str], VerifyReport]]) -> FleetTables:
    inventory: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    for dirs, report in reports:
        broker = broker_name(dirs)
        if report.startup_failure is not None:
            failure = report.startup_failure
            summary.append({"broker": broker, "error": f"{failure['kafka_exception']}: {failure['message']}"})
        for p in report.partitions:
            where = {"broker": broker, "data_dir": p.data_dir, "topic": p.topic, "partition": p.partition,
                     "dir": p.dir}
            inventory.extend({**where, **_audit_row(a)} for a in p.segments)
            row: dict[str, Any] = {
                **where, "kind": p.kind, "segments": len(p.segments), "healthy": p.healthy,
                "log_start_offset": p.log_start_offset, "recovery_point": p.recovery_point,
                "log_end_offset": p.log_end_offset, "high_watermark": p.high_watermark}
            if p.recovery is not None:
                impact = p.recovery["impact"]
                row.update(recovered_segments=len(p.recovery["recovered_segments"]),
                           log_end_offset_before=impact["log_end_offset_before"],
                           records_removed=impact["records_removed"], bytes_removed=impact["bytes_removed"],
                           segments_deleted=impact["segments_deleted"],
                           lost_below_high_watermark=impact["lost_below_high_watermark"])
                truncated = sum(t["from_bytes"] - t["to_bytes"] for t in p.recovery["truncated_segments"])
                row["recovery"] = recovery_words(row["recovered_segments"], truncated, row["segments_deleted"],
                                                 row["records_removed"], row["lost_below_high_watermark"], "would ")
            summary.append(row)
    return _frames(spark, inventory, summary)


__all__ = ["INVENTORY_SCHEMA", "SUMMARY_SCHEMA", "FleetTables", "broker_name", "load_tables", "nullable_table",
           "recovery_words", "verify_tables", "write_parquet"]
