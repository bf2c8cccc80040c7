"""Cutting a big segment into chunks that workers scan side by side, and joining their scans.

A cut is made only at a confirmed batch start: an offset-index entry whose position holds a v2 batch
header whose last offset is the entry's offset.  Each chunk is scanned as if it were a segment of its
own; :func:`stitch` joins them as the continuous walk would have ended.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import numpy as np

from mploader.format import names, records
from mploader.format.files import open_regular, read_file, read_to
from mploader.format.index import OFFSET_ENTRY
from mploader.scan import SegmentScan, SegmentTask, Stop, scan_segment

MIN_ENTRY_BYTES = 26  # the smallest legacy entry; bounds the rows a byte range can hold
CHUNK_BYTES = 64 * 1024 * 1024  # no piece of a cut segment is smaller (except the last)
PIECES_PER_WORKER = 4  # segments are cut only when a dir has fewer pieces of that size than this per worker


def piece_bytes(total_bytes: int, workers: int) -> int:
    """The size at which a dir's segments are cut into chunks: only as small as it takes for each
    worker to get about PIECES_PER_WORKER pieces of the dir's bytes (so that one big segment does not
    make the tail of the load), and never below CHUNK_BYTES (a cut costs a stitch and keeps Phase 1
    from picking the index entries)."""
    return max(CHUNK_BYTES, total_bytes // max(1, workers * PIECES_PER_WORKER))


def chunk_boundaries(log_path: str, base_offset: int, size: int, chunk_bytes: int = CHUNK_BYTES) -> list[int]:
    """Positions at which a big segment can be cut: offset-index entries whose position holds a
    v2 batch header whose last offset equals the entry's offset (confirmed batch starts)."""
    if size <= chunk_bytes:
        return []
    index_path = log_path[: -len(names.LOG_SUFFIX)] + names.INDEX_SUFFIX
    try:
        data = read_file(index_path)
    except OSError:
        return []
    entries = np.frombuffer(data, OFFSET_ENTRY, count=len(data) // 8)
    if not len(entries):
        return []
    pos = entries["position"].astype(np.int64)
    rel = entries["relative_offset"].astype(np.int64)
    # the first entry at or past a target, in index order, always raises the largest position so far:
    # searching those (increasing) positions visits one entry per cut, not every entry
    raising = np.flatnonzero(pos > np.maximum.accumulate(np.concatenate(([0], pos[:-1]))))
    raised = pos[raising]
    out: list[int] = []
    target = chunk_bytes
    fd, _ = open_regular(log_path)
    try:
        while (k := int(np.searchsorted(raised, target))) < len(raising):
            i = int(raising[k])
            p = int(pos[i])
            if records.header_load_fails(p, size):
                break
            head = read_to(fd, p + records.RECORD_BATCH_OVERHEAD, p)
            if len(head) < records.RECORD_BATCH_OVERHEAD:
                break  # the file is shorter than planned
            base, _, _, magic, _, _, last_offset_delta = records.BATCH_HEADER.unpack_from(head)[:7]
            # past the real entries (a preallocated zero tail), not a v2 batch, or not the entry's batch: stop
            if magic != 2 or base + last_offset_delta != base_offset + int(rel[i]):
                break
            out.append(p)
            target = p + chunk_bytes
    finally:
        os.close(fd)
    return out


def chunk_tasks(task: SegmentTask, cuts: list[int]) -> list[SegmentTask]:
    """``task`` (a whole segment) as the tasks of its chunks between ``cuts`` (0, the cut positions, the size).
    Only an uncut segment keeps the index interval and size: its scan can draft the whole segment's recovery."""
    whole = len(cuts) == 2
    return [SegmentTask(task.path, task.base_offset, a, b if b != cuts[-1] else None,
                        index_interval=task.index_interval if whole else None,
                        max_index_size=task.max_index_size if whole else None) for a, b in zip(cuts, cuts[1:])]


def stitch_whole(task: SegmentTask, parts: list[SegmentScan]) -> tuple[SegmentScan, float]:
    """The scan of ``task``'s whole range from its chunks' scans, as an inline scan describes it: :func:`stitch`,
    and where a chunk stopped on a torn entry that the continuous walk does not cut, the rest scanned here without
    cuts.  Returns the scan and the seconds that rescan took (0.0 without one), for the caller's stats."""
    scan, resume = stitch(task, parts)
    seconds = 0.0
    if resume is not None:
        t0 = time.perf_counter()
        rest = scan_segment(SegmentTask(task.path, task.base_offset, resume, task.end))
        seconds = time.perf_counter() - t0
        scan = join_scans(task, [scan.batches, rest.batches], rest)
    # like an inline scan, the result describes the task's whole range, whatever chunk it stopped in
    scan.end = parts[-1].end
    scan.bytes_read = scan.end - task.start
    return scan, seconds


def stitch(task: SegmentTask, parts: list[SegmentScan]) -> tuple[SegmentScan, int | None]:
    """Join chunk scans in order.  Returns the joined scan and, when a chunk stopped on a torn entry
    (one running past its end: a cut that the continuous walk does not hit), the position from which the
    rest must be scanned again without cuts.  A chunk that ends with Stop.END and no fatal batch ended
    exactly at its cut; one that met a batch Kafka cannot read (``fatal``, also with Stop.END) ends the
    walk there, as it would end the continuous one."""
    if len(parts) == 1:
        return parts[0], None
    rows = []
    for k, part in enumerate(parts):
        rows.append(part.batches)
        last = k == len(parts) - 1
        if not last and part.stop is Stop.END and part.fatal is None:
            continue
        resume = part.valid_bytes if not last and part.stop is Stop.INCOMPLETE else None
        return join_scans(task, rows, part), resume
    raise AssertionError("unreachable: the last part returns")


def join_scans(task: SegmentTask, rows: list[np.ndarray], last: SegmentScan) -> SegmentScan:
    """One scan of ``task``'s range from the tables of its consecutive pieces, ending as ``last`` ends."""
    table = rows[0] if len(rows) == 1 else np.concatenate(rows)
    return SegmentScan(task.path, task.base_offset, task.start, last.end, last.valid_bytes, last.stop,
                       last.stop_detail, table, last.fatal, last.fatal_exception,
                       bytes_read=last.end - task.start)


# a scan's identity (two asks for the same range with the same checks are the same scan)
TaskKey = tuple[str, int, int | None, bool, bool]


def task_key(task: SegmentTask) -> TaskKey:
    return (task.path, task.start, task.end, task.check_crc, task.parse_markers)


FileStat = tuple[int, int, int]  # file_stat(): size, mtime_ns, inode


def file_stat(path: str) -> FileStat:
    """Size, mtime and inode: a file planned for a scan is still that file if they are unchanged."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino


def plan_cuts(tasks: Iterable[SegmentTask], workers: int, chunk_bytes: int | None = None,
              max_piece: int | None = None, head_bytes: int | None = None,
              ) -> tuple[list[tuple[SegmentTask, FileStat]], list[tuple[SegmentTask, FileStat, list[int]]]]:
    """A dir's planned scans as Phase 1 hands them out: each task with its file's stat (one that cannot be
    stat'ed is left out: Phase 2's own scan raises its error); the first tasks whose sizes add up to at most
    ``head_bytes`` kept whole (none when None); the rest with their cuts (0, :func:`chunk_boundaries`, the size)
    at ``chunk_bytes`` or :func:`piece_bytes` of the dir's bytes, at most ``max_piece``."""
    stated: list[tuple[SegmentTask, FileStat]] = []
    for task in tasks:
        try:
            stated.append((task, file_stat(task.path)))
        except OSError:
            continue
    cut_at = chunk_bytes or piece_bytes(sum(st[0] for _, st in stated), workers)
    if max_piece is not None:
        cut_at = min(cut_at, max_piece)
    n = 0 if head_bytes is None else int(np.count_nonzero(np.cumsum([st[0] for _, st in stated]) <= head_bytes))
    cut = [(task, st, [0, *chunk_boundaries(task.path, task.base_offset, st[0], cut_at), st[0]])
           for task, st in stated[n:]]
    return stated[:n], cut
