"""What a Phase 1 worker process runs, and the layout of the shared-memory block it fills.

Kept apart from :mod:`mploader.engine.pool` so that a worker imports only what a scan needs (numpy, crc32c,
:mod:`mploader.scan.walk`), not loky's parent side, the engine and the loader.

A block has, per slot, room for a batch-table row and for a row of each recovery-draft array; with
``capacity`` slots the arrays lie one after the other (:func:`regions`).  The parent creates the block
sized for the worst case and reads it back with :func:`arrays_from_block`; the worker attaches to it by
name, writes through raw byte views and returns a small descriptor tuple.
"""

from __future__ import annotations

import os
import time
from multiprocessing import shared_memory

import numpy as np

from mploader.scan.draft import INDEX_DRAFT, ROW, RecoveryDraft
from mploader.scan.walk import BATCH_TABLE, SegmentTask, scan_segment

# ("ok", pid, end, valid, stop, detail, rows, draft, fatal, fatal_exc, seconds)
# | ("oserror", pid, errno, strerror, filename) | ("grown", pid)
# draft: None or (interval, length of each draft array, seconds)
Descriptor = tuple
# a block has room, per slot, for a table row and a row of each draft array, laid out one after the other
DRAFT_DTYPES = (INDEX_DRAFT, ROW, ROW)  # RecoveryDraft.index, .producer_rows, .epoch_rows
SLOT_BYTES = BATCH_TABLE.itemsize + sum(d.itemsize for d in DRAFT_DTYPES)


def regions(capacity: int) -> list[int]:
    """Byte offsets of the table and of each draft array in a block of ``capacity`` slots."""
    offsets = [0]
    for dtype in (BATCH_TABLE, *DRAFT_DTYPES):
        offsets.append(offsets[-1] + capacity * dtype.itemsize)
    return offsets


def _draft_arrays(draft: RecoveryDraft) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return draft.index, draft.producer_rows, draft.epoch_rows


def arrays_from_block(block: shared_memory.SharedMemory, capacity: int, rows: int,
                      draft: tuple[int, tuple[int, ...], float] | None) -> tuple[np.ndarray, RecoveryDraft | None]:
    """Copy the batch table (and the recovery draft) out of a block through raw byte views (10x faster
    than a structured assignment)."""
    at = regions(capacity)
    out = []
    lengths = (rows, *(() if draft is None else draft[1]))
    for k, (dtype, n) in enumerate(zip((BATCH_TABLE, *DRAFT_DTYPES), lengths)):
        a = np.empty(n, dtype)
        a.view(np.uint8)[:] = np.frombuffer(block.buf, np.uint8, count=n * dtype.itemsize, offset=at[k])
        out.append(a)
    if draft is None:
        return out[0], None
    return out[0], RecoveryDraft(draft[0], *out[1:], seconds=draft[2])


def worker_scan(task: SegmentTask, block_name: str, capacity: int) -> Descriptor:
    """Runs in a worker: scan, write the batch table (and the recovery draft) into the parent's block,
    return a descriptor."""
    t0 = time.perf_counter()
    try:
        scan = scan_segment(task)
    except OSError as e:
        return ("oserror", os.getpid(), e.errno, e.strerror, e.filename)
    rows = len(scan.batches)
    arrays = [scan.batches, *(() if scan.draft is None else _draft_arrays(scan.draft))]
    draft = None if scan.draft is None else (scan.draft.interval, tuple(len(a) for a in arrays[1:]),
                                             scan.draft.seconds)
    if rows > capacity:
        # every entry takes at least MIN_ENTRY_BYTES, so only a file that grew after the parent sized the block
        # has more rows than slots; the parent scans a file that changed since planning again anyway
        return ("grown", os.getpid())
    block = shared_memory.SharedMemory(name=block_name)
    try:
        for a, offset in zip(arrays, regions(capacity)):
            view = np.frombuffer(block.buf, np.uint8, count=a.nbytes, offset=offset)
            view[:] = a.view(np.uint8)
            del view
    finally:
        block.close()
    return ("ok", os.getpid(), scan.end, scan.valid_bytes, scan.stop.value, scan.stop_detail, rows, draft,
            scan.fatal, scan.fatal_exception, time.perf_counter() - t0)


__all__ = ["Descriptor", "DRAFT_DTYPES", "SLOT_BYTES", "arrays_from_block", "regions", "worker_scan"]
