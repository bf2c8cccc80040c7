"""The checks of one partition directory beyond its segments' own (what no single segment's audit can see).

* offsets across segments: each segment's last offset below the next segment's base offset;
* index files whose ``.log`` is not there;
* ``leader-epoch-checkpoint`` against the epochs the v2 batches carry: the file parses, its epochs increase
  and its start offsets do not decrease, and every epoch the log starts (in log order, each above the ones
  before: what ``LeaderEpochFileCache.assign`` keeps) is there, starting no later than its first batch (or
  the log start offset, to which ``truncateFromStart`` raises it).  Epochs in the file without batches are
  normal (a leader elected that appended nothing);
* producer snapshots: version, CRC and entry count (``ProducerStateManager.readSnapshot``), each entry's last
  offset below the snapshot's offset, and the snapshot's offset within the log;
* ``partition.metadata``: Kafka's reader accepts it.
"""

from __future__ import annotations

import os

from mploader.errors import StartupFailedError
from mploader.format import checkpoint, names
from mploader.format.snapshot import read_snapshot
from mploader.scan.audit import SegmentAudit
from mploader.verify.report import Finding

# what Kafka's readers of checkpoints, partition.metadata and snapshots raise on a bad or unreadable file
# (MalformedCheckpointError and CorruptFileError are an OSError and a ValueError)
UNREADABLE = (StartupFailedError, ValueError, OSError)


def log_end_offset(segments: list[SegmentAudit]) -> int:
    """After the last valid batch of the last segment; that segment's base offset if it has none."""
    if not segments:
        return 0
    last = segments[-1]
    return last.base_offset if last.last_offset is None else last.last_offset + 1


def partition_findings(directory: str, files: list[str], segments: list[SegmentAudit],
                       log_start_offset: int | None) -> list[Finding]:
    """Everything wrong in ``directory`` beyond its segments (``files``: the names in it, sorted)."""
    out = offsets_across(segments) + orphaned_indexes(directory, files, segments)
    end = log_end_offset(segments)
    out += epoch_findings(directory, segments, log_start_offset or 0, end)
    for name in files:
        if name.endswith(names.SNAPSHOT_SUFFIX):
            out += snapshot_findings(os.path.join(directory, name), end)
    path = os.path.join(directory, checkpoint.PARTITION_METADATA)
    if os.path.exists(path):
        try:
            checkpoint.read_partition_metadata(path)
        except UNREADABLE as e:
            out.append(Finding(path, None, reason_of(e)))
    return out


def offsets_across(segments: list[SegmentAudit]) -> list[Finding]:
    out = []
    for prev, seg in zip(segments, segments[1:], strict=False):
        if prev.last_offset is not None and prev.last_offset >= seg.base_offset:
            out.append(Finding(prev.path, None, f"segment {prev.base_offset} ends at offset {prev.last_offset}, "
                                                f"not below the next segment's base offset {seg.base_offset}"))
    return out


def orphaned_indexes(directory: str, files: list[str], segments: list[SegmentAudit]) -> list[Finding]:
    """Index files without their ``.log``: a segment file lost, or a deletion never finished (a load deletes
    them, ``LogLoader.removeTempFilesAndCollectSwapFiles``)."""
    bases = {s.base_offset for s in segments}
    return [Finding(os.path.join(directory, name), None, "index file without its .log: a lost segment, or a "
                                                         "deletion never finished (a load deletes it)")
            for name in files if names.is_index_file(name) and names.offset_from_file_name(name) not in bases]


def epoch_findings(directory: str, segments: list[SegmentAudit], log_start: int, end: int) -> list[Finding]:
    path = os.path.join(directory, checkpoint.LEADER_EPOCH_CHECKPOINT)
    starts: list[tuple[int, int]] = []  # the epochs the log starts, each above every earlier one
    for seg in segments:
        for epoch, offset in seg.epoch_starts:
            if not starts or epoch > starts[-1][0]:
                starts.append((epoch, offset))
    if not os.path.exists(path):
        if not starts:
            return []
        return [Finding(path, None, f"missing, but the batches carry leader epochs {starts[0][0]}..{starts[-1][0]}")]
    try:
        entries = checkpoint.read_leader_epoch_checkpoint(path)
    except UNREADABLE as e:
        return [Finding(path, None, reason_of(e))]
    out = []
    for (e0, s0), (e1, s1) in zip(entries, entries[1:], strict=False):
        if e1 <= e0 or s1 < s0:
            out.append(Finding(path, None,
                               f"entry (epoch {e1}, offset {s1}) does not follow (epoch {e0}, offset {s0})"))
            return out
    cached = dict(entries)
    for epoch, first in starts:
        start = cached.get(epoch)
        if start is None:
            out.append(Finding(path, None, f"epoch {epoch} (first batch at offset {first}) is not in the file"))
        elif start > max(first, log_start):
            out.append(Finding(path, None, f"epoch {epoch} starts at offset {start} in the file, but its first "
                                           f"batch is at offset {first}"))
    beyond = [(e, s) for e, s in entries if s > end]
    if beyond:
        out.append(Finding(path, None, f"{len(beyond)} entries start beyond the log end offset {end} (from epoch "
                                       f"{beyond[0][0]}; a load truncates them)"))
    return out


def snapshot_findings(path: str, end: int) -> list[Finding]:
    try:
        offset = names.offset_from_file_name(os.path.basename(path))
        entries = read_snapshot(path)
    except UNREADABLE as e:
        return [Finding(path, getattr(e, "position", None),
                        reason_of(e) + " (Kafka deletes a corrupt snapshot when it reads it)")]
    out = []
    late = [entry for entry in entries if entry.last_offset >= offset]
    if late:
        out.append(Finding(path, None, f"producer {late[0].producer_id}: last offset {late[0].last_offset} is not "
                                       f"below the snapshot's offset {offset}"))
    if offset > end:
        out.append(Finding(path, None, f"snapshot offset {offset} is beyond the log end offset {end} "
                                       "(a load deletes it)"))
    return out


def reason_of(e: BaseException) -> str:
    """What a reader's error says, without the path a finding names already (a CorruptFileError's reason)."""
    return getattr(e, "reason", None) or str(e)


__all__ = ["UNREADABLE", "epoch_findings", "log_end_offset", "offsets_across", "orphaned_indexes", "partition_findings",
           "reason_of", "snapshot_findings"]
