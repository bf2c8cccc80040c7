"""Phase 1 on the executors: each task reads its pieces' files through their paths and answers in Arrow.

``mapInArrow`` hands a task its pieces (:data:`mploader.spark.tasks.PIECE_COLUMNS`) as Arrow batches; for each
piece it runs the same pure function the other engines run (:func:`mploader.scan.scan_segment`, or
:func:`mploader.scan.audit.audit_segment` for verify) on the executor's own view of the path (a shared or
identically mounted file system) and yields one Arrow batch per piece.  Nothing of a file goes through the
driver, and nothing is pickled per batch of the log: a batch table is a ``list<struct>`` column
(:mod:`mploader.spark.arrow`).  Before it reads a piece, the task checks that it sees what the driver planned
(:func:`mploader.spark.identity.piece_problem`): a data dir that is not the driver's fails the task; a file that is
not the planned one is answered as such, unread, and the driver decides.  A planned file the executor cannot read
answers with an error row (a disk's error, as on one host), never a failed job.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from mploader.scan import SegmentScan, SegmentTask, scan_segment
from mploader.scan.audit import AuditTask, audit_segment
from mploader.spark.arrow import AUDIT_SCHEMA, SCAN_SCHEMA, audits_to_arrow, scans_to_arrow
from mploader.spark.identity import DataDirs, WrongDataError, piece_problem

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def scan_pieces(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The executor side of a Phase 1 scan job (``mapInArrow``)."""
    dirs = DataDirs()
    for batch in batches:
        for row in batch.to_pylist():
            t0 = time.perf_counter()
            result: SegmentScan | OSError | WrongDataError | None = piece_problem(row, dirs)
            if result is None:
                try:
                    result = scan_segment(SegmentTask(row["path"], row["base_offset"], row["start"], row["end"],
                                                      index_interval=row["index_interval"]))
                except OSError as e:
                    result = e
            yield scans_to_arrow([row["piece"]], [(result, time.perf_counter() - t0)])


def audit_pieces(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The executor side of verify's audit job (``mapInArrow``); ``audit_segment`` reports an unreadable file
    in its row itself."""
    dirs = DataDirs()
    for batch in batches:
        rows = batch.to_pylist()
        if rows:
            yield audits_to_arrow([r["piece"] for r in rows],
                                  [piece_problem(r, dirs) or audit_segment(AuditTask(r["path"], r["base_offset"]))
                                   for r in rows])


def scan_frame(pieces: DataFrame) -> DataFrame:
    from pyspark.sql.pandas.types import from_arrow_schema

    return pieces.mapInArrow(scan_pieces, from_arrow_schema(SCAN_SCHEMA))


def audit_frame(pieces: DataFrame) -> DataFrame:
    from pyspark.sql.pandas.types import from_arrow_schema

    return pieces.mapInArrow(audit_pieces, from_arrow_schema(AUDIT_SCHEMA))


__all__ = ["audit_frame", "audit_pieces", "scan_frame", "scan_pieces"]
