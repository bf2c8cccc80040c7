"""What the executors are given: a list of pieces (a segment, or a chunk of a big one) sized in bytes, packed
into Spark partitions by bytes, not by file count.

A data dir's work is very uneven: one partition's active segment may be 1 GiB and a thousand others 4 KiB
each.  Spark's default slicing (equal counts per partition) would give one task most of the bytes; here the
pieces are first cut as the process pool cuts them (:func:`mploader.engine.chunks.piece_bytes`: only as
small as it takes to give every core a few pieces, never below 64 MiB, at confirmed batch starts), then packed
greedily, biggest first, into the Spark partition with the fewest bytes so far (LPT), ``TASKS_PER_CORE`` per
core of the cluster, so that a slow task is evened out by the others.  Each Spark partition holds exactly
one such bin: the RDD is made with one element (the bin's rows) per slice.  Each piece carries what the driver
planned it with (its data dir's identity, its file's size, mtime and inode): the task checks them before it reads
(:mod:`mploader.spark.identity`).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mploader.broker_config.meta import MetaProperties
from mploader.engine.chunks import FileStat

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TASKS_PER_CORE = 3


@dataclass(frozen=True, slots=True)
class Piece:
    """One unit of executor work: ``path`` from ``start`` to ``end`` (None: the file's end)."""

    id: int
    path: str
    base_offset: int
    start: int
    end: int | None
    size: int  # bytes to read (what the packing weighs)
    index_interval: int | None = None  # a whole segment's scan also drafts its recovery (mploader.scan.draft)
    data_dir: str = ""  # its data dir, and that dir's meta.properties as the driver read it (None: none)
    identity: MetaProperties | None = None
    stat: FileStat | None = None  # its file as the driver planned it (None: not stat-able there, the task says why)


PIECE_COLUMNS = ("piece long, path string, base_offset long, start long, end long, index_interval long, "
                 "data_dir string, cluster_id string, node_id long, directory_id string, "
                 "file_size long, mtime_ns long, inode long")


def pack(sizes: Sequence[int], bins: int) -> list[list[int]]:
    """Indexes of ``sizes`` in ``bins`` groups of about equal total size (largest first into the lightest
    bin); each group keeps the indexes' order.  Empty groups are dropped."""
    heap = [(0, b) for b in range(max(1, bins))]
    out: list[list[int]] = [[] for _ in heap]
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        total, b = heapq.heappop(heap)
        out[b].append(i)
        heapq.heappush(heap, (total + sizes[i], b))
    return [sorted(group) for group in out if group]


def cores(spark: SparkSession) -> int:
    """The cores the cluster gives this application (Spark's default parallelism)."""
    return max(1, int(spark.sparkContext.defaultParallelism))


def binned_frame(spark: SparkSession, rows: Sequence[tuple[Any, ...]], sizes: Sequence[int], schema: str,
                 bins: int) -> DataFrame:
    """A DataFrame of ``rows`` (``schema``: Spark's DDL), one Spark partition per bin of :func:`pack` of their
    ``sizes``."""
    groups = [[rows[i] for i in group] for group in pack(sizes, bins)]
    rdd = spark.sparkContext.parallelize(groups, max(1, len(groups))).flatMap(lambda group: group)
    return spark.createDataFrame(rdd, schema)


def piece_row(p: Piece) -> tuple[Any, ...]:
    """``p`` as a row of :data:`PIECE_COLUMNS`."""
    meta = p.identity or MetaProperties(None, None, None)
    return (p.id, p.path, p.base_offset, p.start, p.end, p.index_interval, p.data_dir, meta.cluster_id, meta.node_id,
            meta.directory_id, *(p.stat or (None, None, None)))


def piece_frame(spark: SparkSession, pieces: Sequence[Piece]) -> DataFrame:
    """A DataFrame of ``pieces`` (:data:`PIECE_COLUMNS`), ``TASKS_PER_CORE`` bins per core."""
    return binned_frame(spark, [piece_row(p) for p in pieces], [p.size for p in pieces], PIECE_COLUMNS,
                        cores(spark) * TASKS_PER_CORE)


__all__ = ["PIECE_COLUMNS", "TASKS_PER_CORE", "Piece", "binned_frame", "cores", "pack", "piece_frame", "piece_row"]
