"""What a partition held before the load changed it: the log end offset as found (the impact report).

Kafka reports no "before"; an operator needs it to see what recovery removes.  It is read once per
partition, just before the loader's first change to the log's offsets (a segment's recovery or deletion),
so a partition that recovery leaves alone costs nothing: its log end offset did not move.
"""

from __future__ import annotations

from mploader.disk.base import Disk
from mploader.errors import InvalidFileNameError
from mploader.format import names
from mploader.recovery.segment import Segment, read_next_offset, walk_from
from mploader.scan import SegmentScan


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
    try:
        if not disk.exists(seg.log_path):
            return None
        return read_next_offset(disk, seg, scan if scan is not None and scan.path == seg.log_path else None)
    except Exception:  # noqa: BLE001 - an unrecovered segment may fail Kafka's own read; fall back to a walk
        pass
    try:
        rows = walk_from(disk, seg, 0).batches
        return int(rows["last_offset"][-1]) + 1 if len(rows) else seg.base_offset
    except Exception:  # noqa: BLE001
        return None


def log_bytes(disk: Disk, seg: Segment) -> int:
    """The size of a segment's ``.log`` as the disk sees it (0 if it cannot be read; never raises)."""
    try:
        return disk.size(seg.log_path)
    except OSError:
        return 0


__all__ = ["log_bytes", "log_end_as_found"]
