"""Phase 1, pure: what a segment's bytes say, read-only.

* :mod:`.table`  the batch table (one row per batch) and its column view
* :mod:`.walk`   :class:`SegmentTask` -> :class:`SegmentScan`: the CRC-checked walk of a ``.log`` range
* :mod:`.draft`  what a whole segment's recovery needs besides the table (index entries, producer order,
  epoch changes), computed alongside the scan so that Phase 2 only finishes it
* :mod:`.indexes` the offset and time indexes recover() rebuilds from a whole segment, with their append checks,
  as bytes: prepared with the draft, so that Phase 2 only writes them
* :mod:`.plan`   the one rule for which segments Phase 2 will read (used by the loader and the engines)

Nothing here writes, renames or deletes: a scan may run anywhere, in any order, twice.
"""

from mploader.scan.draft import RecoveryDraft, draft_recovery
from mploader.scan.table import BATCH_TABLE, BatchColumns, Field, Marker
from mploader.scan.walk import ScanSource, SegmentScan, SegmentTask, Stop, scan_buffer, scan_segment

__all__ = ["BATCH_TABLE", "BatchColumns", "Field", "Marker", "RecoveryDraft", "ScanSource", "SegmentScan",
           "SegmentTask", "Stop", "draft_recovery", "scan_buffer", "scan_segment"]
