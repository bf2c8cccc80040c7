"""What a partition held before the load changed it: the log end offset as found (the impact report).

Kafka reports no "before"; an operator needs it to see what recovery removes.  It is read once per
partition, just before the loader's first change to the log's offsets (a segment's recovery or deletion),
so a partition that recovery leaves alone costs nothing: its log end offset did not move.
"""

from __future__ import annotations

import mmap
import struct

import numpy as np

from mploader.disk.base import Disk
from mploader.errors import InvalidFileNameError
from mploader.format import names
from mploader.recovery.segment import Segment, log_view, read_next_offset, walk_from
from mploader.scan import SegmentScan, SegmentTask, scan_buffer


def log_end_as_found(disk: Disk, directory: str, scan: SegmentScan | None = None) -> int | None:
    """The next offset after the last batch of the partition's highest segment, as its files hold it now:
    Kafka's ``readNextOffset`` (from the last index entry, size fields only), or, where that fails on
    unrecovered bytes (a zeroed tail, an index past the end), the last batch a walk from the start of the
    segment finds.  None when there is no segment, or nothing can be read.  Never raises: the report must
    not change the load.  ``scan``: the recovery's scan of a segment; where it is the highest one's, it spares
    readNextOffset its walk when it proves where that walk ends (``recovery.segment.read_next_offset``)."""
    bases = []
    for name in disk.list_files(directory):
        if names.is_log_file(name):
            try:
                bases.append(names.offset_from_file_name(name))
            except InvalidFileNameError:
                continue
    if not bases:
        return None
    seg = Segment(directory, max(bases))
    own = scan if scan is not None and scan.path == seg.log_path else None
    try:
        if not disk.exists(seg.log_path):
            return None
        end = read_next_offset(disk, seg, own)
        past = log_end_past_the_stop(disk, seg, own) if own is not None else None
        return end if past is None else max(end, past)
    except Exception:  # noqa: BLE001 - an unrecovered segment may fail Kafka's own read; fall back to a walk
        pass
    try:
        rows = walk_from(disk, seg, 0).batches
        return int(rows["last_offset"][-1]) + 1 if len(rows) else seg.base_offset
    except Exception:  # noqa: BLE001
        return None


def log_end_past_the_stop(disk: Disk, seg: Segment, scan: SegmentScan) -> int | None:
    """The next offset after the last valid batch in the bytes past ``scan``'s stop (a scan of ``seg`` from byte 0),
    which its recovery cuts: a broken entry (a size field of 2^31-1, a flipped CRC) ends Kafka's walks, but the
    batches behind it held offsets the cut removes, and the report counts them.  Past each stop, a batch that passes
    the walk's checks (its CRC too) is looked for at every position of the next :data:`RESYNC_BYTES` holding a
    plausible header; from the first found, the walk goes on to its own stop.  The segment is viewed, not read
    again: a torn tail (the common case) costs a look at one window past it.  None: no valid batch past the stop."""
    if scan.start != 0 or scan.valid_bytes >= scan.end:
        return None
    found = None
    with log_view(disk, seg) as (buf, size):
        end, stop = min(scan.end, size), scan.valid_bytes
        while stop < end and (run := _next_run(buf, seg, stop + 1, end)) is not None:
            found, stop = int(run.batches["last_offset"][-1]) + 1, run.valid_bytes
    return found


RESYNC_BYTES = 1 << 20  # how far past a stop a batch is looked for (where the next one starts)
_HEADER = struct.Struct(">qi")  # base (v2) or wrapper (v0/v1) offset, size: what is checked of a candidate
_HEADER_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4")])


def _next_run(buf: bytes | mmap.mmap, seg: Segment, start: int, end: int) -> SegmentScan | None:
    """The scan from the first position in [start, start + RESYNC_BYTES) where a valid batch starts, or None."""
    for candidate in _plausible_headers(buf, start, min(end, start + RESYNC_BYTES), end, seg.base_offset):
        run = scan_buffer(buf, SegmentTask(seg.log_path, seg.base_offset, start=candidate, end=end,
                                           parse_markers=False), end)
        if len(run.batches):
            return run
    return None


def _plausible_headers(buf: bytes | mmap.mmap, lo: int, hi: int, end: int, base_offset: int) -> list[int]:
    """Positions in [lo, hi) holding a record batch's magic (0, 1 or 2) at byte 16, an offset of this segment and a
    size that fits before ``end``: the few positions worth a CRC check (numpy over the window; none in zeros)."""
    if hi - lo < 1 or lo + 16 + _HEADER.size > end:
        return []
    data = np.frombuffer(buf, np.uint8, count=end)
    window = data[lo : min(hi, end - 16) + 16]
    if not window.any():  # a preallocated zero tail: nothing to look at
        return []
    at = np.flatnonzero(window[16:] <= 2) + lo
    at = at[at + _HEADER.size <= end]
    heads = data[at[:, None] + np.arange(_HEADER.size)].copy().view(_HEADER_DTYPE).ravel()
    offsets, sizes = heads["offset"].astype(np.int64), heads["size"].astype(np.int64)
    ok = (offsets >= base_offset) & (offsets < base_offset + 2**31) & (sizes >= 14) & (sizes <= end - at - 12)
    return [int(p) for p in at[ok]]  # a list: no array of the mapping outlives this call (the view is closed after)


def log_bytes(disk: Disk, seg: Segment) -> int:
    """The size of a segment's ``.log`` as the disk sees it (0 if it cannot be read; never raises)."""
    try:
        return disk.size(seg.log_path)
    except OSError:
        return 0


__all__ = ["RESYNC_BYTES", "log_bytes", "log_end_as_found", "log_end_past_the_stop"]
