"""Numpy tables as Arrow columns, and a Phase 1 scan as one Arrow row, both ways.

A scan's batch table travels from an executor as a ``list<struct>`` column (one struct field per
:data:`mploader.scan.BATCH_TABLE` column, each a zero-copy view of the numpy column): Spark moves it as
Arrow, never as pickled Python rows, and it stays readable in Spark SQL (``explode(batches)``).  The
recovery draft a whole-segment scan makes travels the same way, so that Phase 2 only finishes it, as it
does after a pool worker's scan.

An ``OSError`` raised by the scan (a path the executor cannot read) is a row too, with ``errno``,
``error`` and ``filename`` set: the caller raises it again where an inline scan would have raised it.  A piece
whose file is not the one the driver planned (:func:`mploader.spark.identity.piece_problem`) is a row with
``wrong_data`` set, a scan's or an audit's: the :class:`~mploader.spark.identity.WrongDataError` it would raise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa

from mploader.scan import BATCH_TABLE, SegmentScan, SegmentTask, Stop
from mploader.scan.audit import SegmentAudit
from mploader.scan.draft import RecoveryDraft
from mploader.scan.table import INDEX_DRAFT
from mploader.spark.identity import WrongDataError


def struct_type(dtype: np.dtype[Any]) -> pa.StructType:
    """The Arrow struct of a numpy structured dtype's fields."""
    assert dtype.names is not None
    return pa.struct([(name, pa.from_numpy_dtype(dtype[name])) for name in dtype.names])


def table_column(tables: list[np.ndarray], dtype: np.dtype[Any]) -> pa.ListArray:
    """One ``list<struct>`` value per numpy table (rows of ``dtype``)."""
    lengths = np.fromiter((len(t) for t in tables), np.int64, len(tables))
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    whole = np.concatenate(tables) if tables else np.empty(0, dtype)
    assert dtype.names is not None
    fields = [pa.array(np.ascontiguousarray(whole[name])) for name in dtype.names]
    return pa.ListArray.from_arrays(pa.array(offsets), pa.StructArray.from_arrays(fields, list(dtype.names)))


def tables_of(column: pa.ListArray | pa.ChunkedArray, dtype: np.dtype[Any]) -> list[np.ndarray]:
    """The numpy tables of a ``list<struct>`` column made by :func:`table_column` (row by row)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    assert dtype.names is not None
    out: list[np.ndarray] = []
    for chunk in chunks:
        offsets = chunk.offsets.to_numpy()
        values = chunk.values
        cols = {name: values.field(name).to_numpy(zero_copy_only=False) for name in dtype.names}
        for a, b in zip(offsets[:-1], offsets[1:]):
            table = np.empty(b - a, dtype)
            for name, col in cols.items():
                table[name] = col[a:b]
            out.append(table)
    return out


_ROW = np.dtype([("row", "<i8")])  # a draft's row lists (producer order, epoch rows), as one-field tables

# The scan row.  ``piece`` says which task of the job it answers; the task's own fields are the caller's.
SCAN_SCHEMA = pa.schema([
    ("piece", pa.int64()),
    ("end", pa.int64()),
    ("valid_bytes", pa.int64()),
    ("stop", pa.string()),
    ("stop_detail", pa.string()),
    ("fatal", pa.string()),
    ("fatal_exception", pa.string()),
    ("seconds", pa.float64()),
    ("batches", pa.list_(struct_type(BATCH_TABLE))),
    ("draft_interval", pa.int64()),  # null: no draft (a chunk, or a task without an index interval)
    ("draft_seconds", pa.float64()),
    ("draft_index", pa.list_(struct_type(INDEX_DRAFT))),
    ("draft_producer_rows", pa.list_(struct_type(_ROW))),
    ("draft_epoch_rows", pa.list_(struct_type(_ROW))),
    ("errno", pa.int32()),  # set with error and filename when the scan raised an OSError
    ("error", pa.string()),
    ("filename", pa.string()),
    ("wrong_data", pa.string()),  # set alone: the file is not the one the driver planned (WrongDataError's text)
])

_EMPTY_DRAFT = (np.empty(0, INDEX_DRAFT), np.empty(0, _ROW), np.empty(0, _ROW))


Scanned = SegmentScan | OSError | WrongDataError  # a piece's scan, the OSError it raised, or why it was not read


def scans_to_arrow(pieces: list[int], results: list[tuple[Scanned, float]]) -> pa.RecordBatch:
    """One row per scanned piece: its scan (or the OSError it raised, or its WrongDataError) and the seconds it
    took."""
    scans = [r if isinstance(r, SegmentScan) else None for r, _ in results]
    errors = [r if isinstance(r, OSError) else None for r, _ in results]
    drafts = [None if s is None else s.draft for s in scans]
    empty = np.empty(0, BATCH_TABLE)

    def draft_tables(k: int) -> list[np.ndarray]:
        out = []
        for d in drafts:
            if d is None:
                out.append(_EMPTY_DRAFT[k])
            else:
                arrays = (d.index, d.producer_rows.view(_ROW), d.epoch_rows.view(_ROW))
                out.append(arrays[k])
        return out

    def field(get: Any) -> list[Any]:
        return [None if s is None else get(s) for s in scans]

    columns = [
        pa.array(pieces, pa.int64()),
        pa.array(field(lambda s: s.end), pa.int64()),
        pa.array(field(lambda s: s.valid_bytes), pa.int64()),
        pa.array(field(lambda s: s.stop.value), pa.string()),
        pa.array(field(lambda s: s.stop_detail), pa.string()),
        pa.array(field(lambda s: s.fatal), pa.string()),
        pa.array(field(lambda s: s.fatal_exception), pa.string()),
        pa.array([seconds for _, seconds in results], pa.float64()),
        table_column([empty if s is None else s.batches for s in scans], BATCH_TABLE),
        pa.array([None if d is None else d.interval for d in drafts], pa.int64()),
        pa.array([None if d is None else d.seconds for d in drafts], pa.float64()),
        table_column(draft_tables(0), INDEX_DRAFT),
        table_column(draft_tables(1), _ROW),
        table_column(draft_tables(2), _ROW),
        pa.array([None if e is None else e.errno for e in errors], pa.int32()),
        pa.array([None if e is None else (e.strerror or str(e)) for e in errors], pa.string()),
        pa.array([None if e is None else e.filename for e in errors], pa.string()),
        pa.array([str(r) if isinstance(r, WrongDataError) else None for r, _ in results], pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCAN_SCHEMA)


def scans_from_arrow(table: pa.Table, tasks: dict[int, SegmentTask]) -> dict[int, tuple[Scanned, float]]:
    """Per piece, the scan (or OSError, or WrongDataError) of ``tasks[piece]`` that a :func:`scans_to_arrow` row
    holds, and its seconds."""
    pieces = table.column("piece").to_pylist()
    batches = tables_of(table.column("batches"), BATCH_TABLE)
    index = tables_of(table.column("draft_index"), INDEX_DRAFT)
    producer_rows = tables_of(table.column("draft_producer_rows"), _ROW)
    epoch_rows = tables_of(table.column("draft_epoch_rows"), _ROW)
    plain = {name: table.column(name).to_pylist() for name in SCAN_SCHEMA.names
             if not name.startswith(("batches", "draft_index", "draft_producer", "draft_epoch"))}
    out: dict[int, tuple[Scanned, float]] = {}
    for i, piece in enumerate(pieces):
        seconds = plain["seconds"][i]
        if plain["wrong_data"][i] is not None:
            out[piece] = (WrongDataError(plain["wrong_data"][i]), seconds)
            continue
        if plain["error"][i] is not None:
            out[piece] = (OSError(plain["errno"][i], plain["error"][i], plain["filename"][i]), seconds)
            continue
        task = tasks[piece]
        interval = plain["draft_interval"][i]
        draft = None if interval is None else RecoveryDraft(
            interval, index[i], producer_rows[i]["row"].copy(), epoch_rows[i]["row"].copy(),
            seconds=plain["draft_seconds"][i])
        end = plain["end"][i]
        out[piece] = (SegmentScan(task.path, task.base_offset, task.start, end, plain["valid_bytes"][i],
                                  Stop(plain["stop"][i]), plain["stop_detail"][i], batches[i], plain["fatal"][i],
                                  plain["fatal_exception"][i], bytes_read=end - task.start, draft=draft), seconds)
    return out


# A SegmentAudit as an Arrow row: its fields by their annotations (a field verify adds later travels too)
_AUDIT_TYPES = {"int": pa.int64(), "int | None": pa.int64(), "str": pa.string(), "str | None": pa.string(),
                "list[tuple[int, int]]": pa.list_(pa.list_(pa.int64()))}
# (a row with ``wrong_data`` set holds nothing else)
AUDIT_SCHEMA = pa.schema([("piece", pa.int64())] + [(f.name, _AUDIT_TYPES[str(f.type)])
                                                     for f in dataclasses.fields(SegmentAudit)]
                         + [("wrong_data", pa.string())])


def audits_to_arrow(pieces: list[int], audits: list[SegmentAudit | WrongDataError]) -> pa.RecordBatch:
    rows = [{"piece": piece, "wrong_data": str(a)} if isinstance(a, WrongDataError) else
            {"piece": piece, **{f.name: getattr(a, f.name) for f in dataclasses.fields(SegmentAudit)}}
            for piece, a in zip(pieces, audits)]
    return pa.RecordBatch.from_pylist(rows, schema=AUDIT_SCHEMA)


def audits_from_arrow(table: pa.Table) -> dict[int, SegmentAudit | WrongDataError]:
    out: dict[int, SegmentAudit | WrongDataError] = {}
    for row in table.to_pylist():
        piece, wrong = row.pop("piece"), row.pop("wrong_data")
        if wrong is not None:
            out[piece] = WrongDataError(wrong)
            continue
        row["epoch_starts"] = [(e, s) for e, s in row["epoch_starts"]]
        out[piece] = SegmentAudit(**row)
    return out


__all__ = ["AUDIT_SCHEMA", "SCAN_SCHEMA", "Scanned", "audits_from_arrow", "audits_to_arrow", "scans_from_arrow",
           "scans_to_arrow", "struct_type", "table_column", "tables_of"]
