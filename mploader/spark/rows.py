"""A load's rows of the fleet history, made where its partitions were loaded (a Spark task on an executor).

A partition's own columns of the segment inventory and of the summary (its segments, its offsets, what its recovery
did) are made from its :class:`LoadedLog` by the task that loaded it, as Arrow tables (:class:`PartitionRows`), and
travel to the driver in the task's last row, one table a task (:mod:`mploader.spark.phase2`).  The driver makes no
row of them: it keeps those of the partitions the brokers' loads kept (a broker Kafka refuses to start keeps none,
an offline dir's are dropped) and adds the run's and the broker's columns, taken from a row per data dir
(:func:`mploader.spark.output.load_tables`).  A partition the driver loaded (``--driver-fallback``) has its rows
made there by the same function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mploader.result import Impact, LoadedLog

_I64, _I32, _STR, _BOOL = pa.int64(), pa.int32(), pa.string(), pa.bool_()


def fields(*columns: tuple[str, pa.DataType, bool]) -> list[pa.Field]:
    return [pa.field(name, kind, nullable=nullable) for name, kind, nullable in columns]


#: what places a partition: its data dir (and that dir's directory.id), topic, partition and directory
WHERE_FIELDS = fields(("data_dir", _STR, False), ("directory_id", _STR, True), ("topic", _STR, False),
                      ("partition", _I32, False), ("dir", _STR, False))
#: a partition's own columns of the inventory (a row a segment)
INVENTORY_FIELDS = fields(
    ("base_offset", _I64, False), ("next_offset", _I64, True), ("size_bytes", _I64, False),
    ("valid_bytes", _I64, True), ("batches", _I64, True), ("records", _I64, True),
    ("max_timestamp", pa.timestamp("ms", tz="UTC"), True),
    ("first_leader_epoch", _I64, True), ("last_leader_epoch", _I64, True),
    ("crc", _STR, False),  # "ok", "invalid" (verify); "recovered", "not checked" (load)
    ("first_invalid_position", _I64, True), ("reason", _STR, True),
    ("index", _STR, True), ("timeindex", _STR, True), ("txnindex", _STR, True),
)
#: a partition's own columns of the summary (a row a partition; a broker's or data dir's failure: ``error``)
SUMMARY_FIELDS = fields(
    ("kind", _STR, True), ("segments", _I64, True), ("healthy", _BOOL, True),  # healthy: verify only
    ("log_start_offset", _I64, True), ("recovery_point", _I64, True), ("log_end_offset", _I64, True),
    ("high_watermark", _I64, True), ("recovered_segments", _I64, True), ("log_end_offset_before", _I64, True),
    ("records_removed", _I64, True), ("bytes_removed", _I64, True), ("segments_deleted", _I64, True),
    ("lost_below_high_watermark", _BOOL, True), ("acknowledged_offsets_lost", _I64, True),
    ("recovery", _STR, True),  # what recovery does (load) or would do (verify's dry run), in words
    ("error", _STR, True),  # the broker's start-up failure, or why a data dir is offline
)
PARTITION_INVENTORY = pa.schema([*WHERE_FIELDS, *INVENTORY_FIELDS])
PARTITION_SUMMARY = pa.schema([*WHERE_FIELDS, *SUMMARY_FIELDS])


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


def impact_columns(recovered_segments: int, i: Impact) -> dict[str, Any]:
    """``acknowledged_offsets_lost``: the offsets below the high watermark that the load removes from the end of
    the log (:attr:`Impact.acknowledged_removed`, as the JSON's ``acknowledged_records_lost`` counts them)."""
    return {"recovered_segments": recovered_segments, "log_end_offset_before": i.log_end_offset_before,
            "records_removed": i.records_removed, "bytes_removed": i.bytes_removed,
            "segments_deleted": i.segments_deleted, "lost_below_high_watermark": i.lost_below_high_watermark,
            "acknowledged_offsets_lost": len(i.acknowledged_removed)}


@dataclass(frozen=True, slots=True)
class PartitionRows:
    """Loaded partitions' own rows: :data:`PARTITION_INVENTORY` and :data:`PARTITION_SUMMARY` tables."""

    inventory: pa.Table
    summary: pa.Table

    @classmethod
    def of(cls, logs: Iterable[LoadedLog], directory_ids: Mapping[str, str | None]) -> PartitionRows:
        """The rows of ``logs`` (a load's), in order of data dir, topic, partition and directory;
        ``directory_ids``: each data dir's ``directory.id``."""
        inventory: list[dict[str, Any]] = []
        summary: list[dict[str, Any]] = []
        for lg in sorted(logs, key=lambda lg: (lg.data_dir, lg.topic, lg.partition, lg.dir)):
            where = {"data_dir": lg.data_dir, "directory_id": directory_ids.get(lg.data_dir), "topic": lg.topic,
                     "partition": lg.partition, "dir": lg.dir}
            recovered = set(lg.recovered_segments)
            inventory.extend({**where, "base_offset": s.base_offset, "next_offset": s.next_offset,
                              "size_bytes": s.size_bytes, "crc": "recovered" if s.base_offset in recovered
                              else "not checked"} for s in lg.segments)
            impact = impact_columns(len(lg.recovered_segments), lg.impact)
            summary.append({**where, "kind": lg.kind.value, "segments": len(lg.segments),
                            "log_start_offset": lg.log_start_offset, "recovery_point": lg.recovery_point,
                            "log_end_offset": lg.log_end_offset, "high_watermark": lg.high_watermark, **impact,
                            "recovery": recovery_words(impact["recovered_segments"], lg.truncated_bytes,
                                                       impact["segments_deleted"], impact["records_removed"],
                                                       impact["lost_below_high_watermark"])})
        return cls(pa.Table.from_pylist(inventory, PARTITION_INVENTORY),
                   pa.Table.from_pylist(summary, PARTITION_SUMMARY))

    @classmethod
    def concat(cls, parts: Iterable[PartitionRows]) -> PartitionRows:
        parts = list(parts)
        if not parts:
            return cls(PARTITION_INVENTORY.empty_table(), PARTITION_SUMMARY.empty_table())
        return cls(pa.concat_tables([p.inventory for p in parts]), pa.concat_tables([p.summary for p in parts]))

    def only(self, dirs: Iterable[str]) -> PartitionRows:
        """The rows of the partition directories ``dirs``, in the order of data dir, topic, partition, directory
        (and base offset)."""
        keep = pa.array(sorted(set(dirs)), _STR)
        order = [("data_dir", "ascending"), ("topic", "ascending"), ("partition", "ascending"), ("dir", "ascending")]
        return PartitionRows(
            self.inventory.filter(pc.is_in(self.inventory["dir"], keep)).sort_by(
                [*order, ("base_offset", "ascending")]),
            self.summary.filter(pc.is_in(self.summary["dir"], keep)).sort_by(order))

    @property
    def dirs(self) -> set[str]:
        return set(self.summary["dir"].to_pylist())


__all__ = ["INVENTORY_FIELDS", "PARTITION_INVENTORY", "PARTITION_SUMMARY", "SUMMARY_FIELDS", "WHERE_FIELDS",
           "PartitionRows", "fields", "impact_columns", "recovery_words"]
