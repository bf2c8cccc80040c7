"""What a partition held before the load changed it: the log end offset as found (the impact report).

Kafka reports no "before"; an operator needs it to see what recovery removes.  It is read once per
partition, just before the loader's first change to the log's offsets (a segment's recovery or deletion),
so a partition that recovery leaves alone costs nothing: its log end offset did not move.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np

from mploader.disk.base import Disk
from mploader.errors import InvalidFileNameError
from mploader.format import names
from mploader.recovery.segment import Segment, read_next_offset, walk_from
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
    batches behind it held offsets the cut removes, and the report counts them.  Found by looking for a batch that
    passes the walk's checks (its CRC too) at every position holding a plausible header, in the first
    :data:`RESYNC_BYTES` past the stop.  None: nothing past the stop, or no valid batch found there."""
    if scan.start != 0 or scan.valid_bytes >= scan.end:
        return None
    end = min(scan.end, scan.valid_bytes + RESYNC_BYTES)
    buf = disk.read(seg.log_path, 0, end)
    found = None
    p = scan.valid_bytes + 1
    for candidate in _plausible_headers(buf, p, end, seg.base_offset):
        if candidate < p:  # inside a run of batches found already
            continue
        run = scan_buffer(buf, SegmentTask(seg.log_path, seg.base_offset, start=candidate, end=end,
                                           parse_markers=False), end)
        if len(run.batches):
            found = int(run.batches["last_offset"][-1]) + 1
            p = run.valid_bytes
    return found


RESYNC_BYTES = 64 << 20  # past it, the offsets a cut removes stay uncounted (a report, not a reason to read 1 GB)
_HEADER = struct.Struct(">qi")  # base (v2) or wrapper (v0/v1) offset, size: what is checked of a candidate


def _plausible_headers(buf: bytes, start: int, end: int, base_offset: int) -> Iterator[int]:
    """Positions from ``start`` holding a record batch's magic (0, 1 or 2) at byte 16, an offset of this segment
    and a size that fits before ``end``: the few positions worth a CRC check (found with numpy, a window at a time:
    a zeroed tail has a candidate magic at every byte)."""
    data = np.frombuffer(buf, np.uint8, count=end)
    window = 1 << 22
    for lo in range(start, max(start, end - 16 - _HEADER.size + 1), window):
        hi = min(lo + window, end - 16)
        if not data[lo : hi + 16].any():  # a preallocated zero tail: nothing to look at
            continue
        at = np.flatnonzero(data[lo + 16 : hi + 16] <= 2) + lo
        at = at[at + _HEADER.size <= end]
        if not len(at):
            continue
        heads = data[at[:, None] + np.arange(_HEADER.size)].copy().view(_HEADER_DTYPE).ravel()
        offsets, sizes = heads["offset"].astype(np.int64), heads["size"].astype(np.int64)
        ok = (offsets >= base_offset) & (offsets < base_offset + 2**31) & (sizes >= 14) & (sizes <= end - at - 12)
        yield from at[ok].tolist()


_HEADER_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4")])


def log_bytes(disk: Disk, seg: Segment) -> int:
    """The size of a segment's ``.log`` as the disk sees it (0 if it cannot be read; never raises)."""
    try:
        return disk.size(seg.log_path)
    except OSError:
        return 0


__all__ = ["RESYNC_BYTES", "log_bytes", "log_end_as_found", "log_end_past_the_stop"]
