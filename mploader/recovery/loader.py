"""One partition directory: Kafka's UnifiedLog.apply + LogLoader.load (docs/loading.md §5-§6).

The algorithm is Kafka's, step for step, so that every branch keeps its
outcome.  What differs is where bytes are read: every segment scan comes from
a :class:`ScanSource` (Phase 1, possibly precomputed in parallel by an engine),
and every change to disk goes through the partition's :class:`Disk`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from mploader.config import EffectiveConfig
from mploader.disk.base import Disk
from mploader.errors import (
    CheckpointNumberFormatError,
    EnvironmentFailure,
    InvalidFileNameError,
    LoadInterrupted,
    StartupFailedError,
    environment_failure,
    of_the_environment,
)
from mploader.format import checkpoint, names
from mploader.format.index import txn_index_corrupt
from mploader.format.names import INT64_MAX, DirKind, TopicPartition
from mploader.recovery import attempts, journal
from mploader.recovery.epoch_cache import LeaderEpochCache
from mploader.recovery.impact import log_bytes, log_end_as_found
from mploader.recovery.index_check import IndexCheck, full_problems, rebuild_indexes, sanity_problems
from mploader.recovery.producer_state import ProducerStateManager
from mploader.recovery.resume import Recovered, recovered_before
from mploader.recovery.segment import (
    LogSegments,
    Segment,
    check_index_fits,
    log_size,
    read_next_offset,
    resize_indexes,
    translate_offset,
    truncate_to,
    walk_from,
)
from mploader.recovery.segment_recovery import InvalidOffsetError, OffsetOverflowError, recover_segment
from mploader.recovery.snapshot_files import SnapshotFiles
from mploader.result import LoadedLog, SegmentInfo
from mploader.scan import BATCH_TABLE, ScanSource, SegmentScan, SegmentTask, Stop, plan

log = logging.getLogger(__name__)

MAX_SEGMENT_BYTES = 2**31 - 1  # FileRecords refuses to open a larger .log


@dataclass(slots=True)
class PartitionContext:
    disk: Disk
    data_dir: str
    dir: str
    tp: TopicPartition
    kind: DirKind
    cfg: EffectiveConfig
    clean_shutdown: bool
    recovery_point_checkpoint: int
    log_start_checkpoint: int
    now_ms: int
    scans: ScanSource
    set_remaining_segments: Callable[[int], None] = lambda n: None
    cancelled: threading.Event = field(default_factory=threading.Event)  # set on Ctrl-C
    recovered: list[int] = field(default_factory=list)
    truncated_bytes: int = 0
    deleted_files: list[str] = field(default_factory=list)
    bytes_scanned: int = 0
    # the impact report (recovery.impact): the log end offset as found, read before the first change to the
    # log's offsets (None: nothing changed them), and the segments recovery deleted (base offset, .log bytes)
    log_end_offset_before: int | None = None
    log_end_offset_before_read: bool = False
    deleted_segments: list[tuple[int, int]] = field(default_factory=list)
    index_check: str = "kafka"  # LoaderConfig.index_check (mploader.recovery.index_check)
    resumed_from: Recovered | None = None  # --resumable: a killed load's record of this partition (recovery.resume)
    index_checks: list[IndexCheck] = field(default_factory=list)
    # the Spark job (run id) whose attempt records this load keeps (recovery.attempts; None: it keeps none)
    attempt_run: str | None = None


class LogLoader:
    def __init__(self, ctx: PartitionContext):
        self.ctx = ctx
        self.disk = ctx.disk
        self.dir = ctx.dir
        self.cfg = ctx.cfg
        self.segments = LogSegments()
        self.epochs: LeaderEpochCache | None = None
        self._scans = _ScanCache()
        self._floor_pin: str | None = None  # see _pin_for_recover_log
        self._journaled: bool | None = None  # a killed clean load's producer-state choice (recovery.journal)
        self._journal_on_disk = False  # a journal is in the directory (replayed or written), for the commit to delete
        self._snapshot_files = SnapshotFiles()  # the directory's snapshots, listed when the load starts (_load)

    # ---- helpers -----------------------------------------------------------------------------

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def _delete(self, name: str) -> None:
        if self.disk.delete(self.path(name)):
            self.ctx.deleted_files.append(name)
            self._snapshot_files.note(name, present=False)  # a snapshot in a swapped range, say

    def _producer_state_manager(self, own_view: bool = True) -> ProducerStateManager:
        """A new manager, as Kafka makes one for the log and one per recovered segment (``own_view=False``: no
        other manager or pass changes a snapshot file while it lives, so its view is the shared set itself)."""
        return ProducerStateManager(self.disk, self.dir, self.cfg.producer_id_expiration_ms, self._snapshot_files,
                                    own_view=own_view)

    def full_scan(self, seg: Segment, to_recover: bool = True) -> SegmentScan:
        """A CRC-checked scan of the whole current ``.log`` (reused while the cache holds it); ``to_recover``: the
        scan also prepares the indexes recovery writes (not for a scan made to check the indexes)."""
        size = self.disk.size(seg.log_path)
        cached = self._scans.get(seg.log_path, size)
        if cached is None:
            task = SegmentTask(seg.log_path, seg.base_offset, index_interval=self.cfg.index_interval_bytes,
                               max_index_size=self.cfg.max_index_size if to_recover else None)
            cached = self.disk.scan(task, self.ctx.scans)
            self.ctx.bytes_scanned += cached.bytes_read
            self._scans.put(seg.log_path, cached)
        return cached

    # ---- UnifiedLog.apply ----------------------------------------------------------------------

    def _open_epoch_cache(self) -> None:
        path = self.path(checkpoint.LEADER_EPOCH_CHECKPOINT)
        if self.cfg.record_version < 2:
            self._delete(checkpoint.LEADER_EPOCH_CHECKPOINT)
            return
        cache = LeaderEpochCache(path)
        if not self.disk.exists(path):
            self.disk.write(path, b"")
        else:
            try:
                entries = checkpoint.parse_leader_epoch_checkpoint(self.disk.read(path), path)
            except CheckpointNumberFormatError as e:
                raise StartupFailedError(path, "NumberFormatException", str(e)) from e
            cache.load(entries)
        self.epochs = cache

    # ---- LogLoader.load -----------------------------------------------------------------------

    def load(self) -> LoadedLog:
        try:
            return self._load()
        except Exception:
            self._write_epoch_cache_after_failure()
            raise
        finally:
            self.disk.release(self.dir)  # its listing, kept by the disk while this partition loads

    def _write_epoch_cache_after_failure(self) -> None:
        """Kafka's ``LeaderEpochFileCache.assign`` writes the checkpoint at every new epoch, so a partition whose
        load fails (start-up fails, or its dir goes offline) has on disk the epochs recovery met before the
        failure.  mploader writes the cache once, at the end (:meth:`_write_epoch_cache`), and so here too."""
        try:
            self._write_epoch_cache()
        except Exception:  # noqa: BLE001 - the load's own error is the one to report
            log.debug("%s: the leader-epoch checkpoint of a failed load was not written", self.dir, exc_info=True)

    def _load(self) -> LoadedLog:
        ctx = self.ctx
        self._check_cancelled()
        self._open_epoch_cache()
        listing = self.disk.list_files(self.dir)
        self._journaled = journal.replay(self.disk, self.dir, ctx.data_dir, listing)
        self._journal_on_disk = self._journaled is not None
        attempts.drop_stale(self.disk, self.dir, listing, ctx.attempt_run)
        # kept true by every manager's change and the loader's own (recovery/snapshot_files.py); from the listing
        # just taken: a replayed shortcut deleted every snapshot in it, nothing else in the replay touches one
        self._snapshot_files = SnapshotFiles.of(self.dir, () if self._journaled else listing)
        self.psm = self._producer_state_manager()
        swaps = self._remove_temp_files_and_collect_swap_files(listing)
        self._complete_swaps(swaps)
        self._retry_on_overflow(self._load_segment_files)
        if ctx.kind is not DirKind.DELETE:
            new_rp, next_offset = self._retry_on_overflow(self._recover_log)
            active = self.segments.ascending()[-1]
            # Kafka resizes the active indexes here, keeping their entry count, so lookups made later in
            # the load never see the zero tail; we grow the files after those lookups (same end state).
            # Only the failing resize (an index longer than segment.index.bytes) must happen now.
            check_index_fits(self.disk, active, self.cfg.max_index_size)
            if ctx.index_check != "kafka":
                self._check_indexes()
        else:
            if not self.segments:
                # LogSegment.open(dir, 0, config, time, config.initFileSize(), false): never preallocated
                self._new_segment(0, preallocate=False)
            new_rp, next_offset = 0, 0
        if self.epochs is not None:
            self.epochs.truncate_from_end(next_offset)
        first_base = min(self.segments)
        new_log_start = ctx.log_start_checkpoint if self.cfg.remote_storage else max(ctx.log_start_checkpoint,
                                                                                       first_base)
        if self.epochs is not None:
            self.epochs.truncate_from_start(ctx.log_start_checkpoint)
        self.psm.remove_stray_snapshots(sorted(self.segments))
        self.rebuild_producer_state(self.psm, self.segments.ascending(), new_log_start, next_offset,
                                    reload_from_clean_shutdown=ctx.clean_shutdown and self._clean_shortcut(
                                        new_log_start, next_offset))
        if ctx.kind is not DirKind.DELETE and not ctx.clean_shutdown:
            # a clean dir's are grown by the manager once its marker is gone (manager.dirs.commit_clean_dirs): a
            # clean reload reads the log end offset through them, and a kill must leave it what this load read
            resize_indexes(self.disk, self.segments.ascending()[-1], self.cfg.max_index_size)
        self._write_epoch_cache()
        # UnifiedLog constructor (initializeTopicId, keepPartitionMetadataFile in KRaft): an existing
        # partition.metadata is read after loading; its IOException takes the dir offline, a bad UUID fails start-up
        metadata = self.path(checkpoint.PARTITION_METADATA)
        topic_id = (checkpoint.parse_partition_metadata(self.disk.read(metadata), metadata)
                    if self.disk.exists(metadata) else None)
        local_start = max(new_log_start, first_base)
        log_start = new_log_start if self.cfg.remote_storage else local_start
        segments = [SegmentInfo(s.base_offset, log_size(self.disk, s), 0) for s in self.segments.ascending()]
        nexts = [s.base_offset for s in segments[1:]] + [next_offset]
        return LoadedLog(
            topic_partition=ctx.tp, dir=self.dir, data_dir=ctx.data_dir, kind=ctx.kind,
            clean_shutdown=ctx.clean_shutdown, log_start_offset=log_start,
            recovery_point=max(new_rp, local_start), loader_recovery_point=new_rp, log_end_offset=next_offset,
            segments=[SegmentInfo(s.base_offset, s.size_bytes, n) for s, n in zip(segments, nexts)],
            leader_epochs=list(self.epochs.entries) if self.epochs is not None else None,
            producers=self.psm.producer_infos(), recovered_segments=list(dict.fromkeys(ctx.recovered)),
            truncated_bytes=ctx.truncated_bytes, deleted_files=list(ctx.deleted_files),
            index_checks=[c.to_json() for c in ctx.index_checks], journal=self._journal_on_disk, topic_id=topic_id,
        )

    def _clean_shortcut(self, log_start: int, log_end: int) -> bool:
        """Whether a clean load's final producer-state rebuild may take Kafka's shortcut (it does where it finds no
        snapshot).  The choice is journaled where a kill would make a rerun choose otherwise
        (:mod:`mploader.recovery.journal`): the shortcut writes snapshots (an empty log's writes none), and a
        replay of an empty log (log end at its start) deletes every snapshot and writes none."""
        if self._journaled is not None:  # a killed load's choice, repeated
            return self._journaled
        if self.cfg.record_version < 2:  # rebuild_producer_state writes the same snapshots either way
            return True
        writes = log_end > self.psm.last_snap_offset  # what the shortcut would write
        if self.psm.latest_snapshot_offset() is None:
            if writes:
                self._journal_on_disk = journal.note_clean_start(self.disk, self.dir, self.ctx.data_dir, shortcut=True)
        elif writes and log_end <= log_start:
            self._journal_on_disk = journal.note_clean_start(self.disk, self.dir, self.ctx.data_dir, shortcut=False)
        return True

    def _check_indexes(self) -> None:
        """``index_check`` (:mod:`mploader.recovery.index_check`) over the segments this load did not recover."""
        ctx = self.ctx
        recovered = set(ctx.recovered)
        for seg in self.segments.ascending():
            if seg.base_offset in recovered:
                continue
            scan = self.full_scan(seg, to_recover=False) if ctx.index_check == "full" else None
            problems = full_problems(seg, scan) if scan is not None else sanity_problems(self.disk, seg)
            if not problems:
                continue
            rebuildable = [p for p in problems if p != seg.txn_index_path]
            why_not = None
            if rebuildable:
                why_not = rebuild_indexes(self.disk, seg, scan or self.full_scan(seg, to_recover=False), self.cfg)
            for path, problem in problems.items():
                action = "left: a .txnindex is not rebuilt (it needs earlier segments' producer state)" \
                    if path == seg.txn_index_path else why_not or "rebuilt from the log"
                ctx.index_checks.append(IndexCheck(os.path.basename(path), problem, action))
                log.warning("%s: %s (index_check=%s): %s; %s", self.dir, os.path.basename(path), ctx.index_check,
                            problem, action)

    def _write_epoch_cache(self) -> None:
        """Kafka rewrites the checkpoint whenever the cache changed; the last write is what stays.  Bytes
        equal to the file's are not written again (same outcome, no fsync)."""
        if self.epochs is not None and self.epochs.dirty:
            data = checkpoint.leader_epoch_checkpoint_bytes(self.epochs.entries)
            if not self.disk.exists(self.epochs.path) or self.disk.read(self.epochs.path) != data:
                self.disk.write_atomically(self.epochs.path, data)

    def _retry_on_overflow(self, fn: Callable[[], object]):  # type: ignore[no-untyped-def]
        """LogLoader.retryOnOffsetOverflow (docs/loading.md §11): split the overflowed segment, run ``fn`` again."""
        while True:
            try:
                return fn()
            except OffsetOverflowError as e:
                # imported here: an overflow is rare (pre-0.11 segments), the module a few ms of every start-up
                from mploader.recovery.split import replace_in_segment_map, split_overflowed_segment

                old = e.segment
                log.info("%s: %s; splitting the segment and retrying", self.dir, e)
                # the split changes .log files (a segment it writes may replace the highest one's, or be higher):
                # the impact report's "before" first, where recoverLog was still waiting with it
                self._note_log_end_before()
                in_map = old.base_offset in self.segments  # False inside loadSegmentFiles
                new = split_overflowed_segment(self.disk, old, self.cfg, in_map, deleted=self.ctx.deleted_files)
                self._scans.drop({old.log_path, *(s.log_path for s in new)})
                for base in replace_in_segment_map(self.segments, old, new, in_map):
                    if (snapshot := self.psm.mark_snapshot_deleted(base)) is not None:  # deleteProducerSnapshotsAsync
                        self._note_deleted(snapshot)

    # ---- §6.1 temp files and swaps ------------------------------------------------------------

    def _offset_of(self, name: str) -> int:
        try:
            return names.offset_from_file_name(name)
        except InvalidFileNameError as e:
            raise StartupFailedError(self.path(name), "NumberFormatException", str(e)) from e

    def _remove_temp_files_and_collect_swap_files(self, listing: list[str]) -> list[str]:
        """``listing``: the directory's files as the load found them (the journal's replay and the stale attempt
        record's deletion, before, delete only names this pass does not act on: those two and snapshots)."""
        swaps: list[str] = []
        cleaned: list[str] = []
        min_cleaned = INT64_MAX
        links = self.disk.symlinks(self.dir)
        for name in listing:
            if name in links:
                raise StartupFailedError(self.path(name), "KafkaException",
                                         "a file in a partition directory is a symbolic link; mploader does not "
                                         "follow links out of a data dir: replace the link by the file itself")
            if name.endswith(names.DELETED_SUFFIX) and not name.endswith(names.CHECKPOINT_DELETED_SUFFIX):
                self._delete(name)
            elif name.endswith(names.CLEANED_SUFFIX):
                min_cleaned = min(min_cleaned, self._offset_of(name))
                cleaned.append(name)
            elif name.endswith(names.SWAP_SUFFIX):
                swaps.append(name)
        valid: list[str] = []
        for name in swaps:
            if self._offset_of(name) >= min_cleaned:
                self._delete(name)
            else:
                valid.append(name)
        for name in cleaned:
            self._delete(name)
        return valid

    def _complete_swaps(self, swaps: list[str]) -> None:
        min_swap, max_swap = INT64_MAX, -(2**63)
        for name in swaps:
            if names.is_log_file(name[: -len(names.SWAP_SUFFIX)]):
                base = self._offset_of(name)
                seg = Segment(self.dir, base, names.SWAP_SUFFIX)
                if not self.disk.exists(seg.index_path):  # materialising the index creates it preallocated
                    self.disk.set_size(seg.index_path, (self.cfg.max_index_size // 8) * 8)
                min_swap = min(min_swap, base)
                max_swap = max(max_swap, read_next_offset(self.disk, seg))
        if not swaps:
            return
        for name in self.disk.list_files(self.dir):
            if name.endswith(names.SWAP_SUFFIX):
                continue
            try:
                off = names.offset_from_file_name(name)
            except InvalidFileNameError:
                continue
            if min_swap <= off < max_swap:
                self._delete(name)
        # Every .log.swap first (LogSegment.changeFileSuffixes renames a segment's .log first, as split.py does): a
        # kill after them leaves only index swaps, which the next load renames, deleting nothing.  An index renamed
        # before its .log lies in the range of the .log.swap still there: the next load deletes and rebuilds it.
        remaining = [name for name in self.disk.list_files(self.dir) if name.endswith(names.SWAP_SUFFIX)]
        for name in sorted(remaining, key=lambda n: not names.is_log_file(n[: -len(names.SWAP_SUFFIX)])):
            self.disk.rename(self.path(name), self.path(name[: -len(names.SWAP_SUFFIX)]))
            self._snapshot_files.note(name[: -len(names.SWAP_SUFFIX)], present=True)

    # ---- §6.3 loadSegmentFiles --------------------------------------------------------------

    def _load_segment_files(self) -> None:
        self.segments.clear()
        listing = self.disk.list_files(self.dir)  # sorted
        present = set(listing)  # what exists, kept up to date by this pass (saves a stat per question)
        for name in listing:
            if names.is_index_file(name):
                base = self._offset_of(name)
                if names.segment_file_name(base, names.LOG_SUFFIX) not in present:
                    log.info("%s: deleting orphaned index file %s", self.dir, name)
                    self._delete(name)
                    present.discard(name)
            elif names.is_log_file(name):
                base = self._offset_of(name)
                seg = Segment(self.dir, base)
                log_name = names.segment_file_name(base, names.LOG_SUFFIX)
                if log_name not in present:
                    # a non-padded "5.log" makes Kafka open (create) the padded name
                    self.disk.write(seg.log_path, b"")
                    present.add(log_name)
                size = self.disk.size(seg.log_path)
                if size > MAX_SEGMENT_BYTES:
                    raise StartupFailedError(seg.log_path, "KafkaException",
                                             f"segment of {size} bytes is larger than the maximum segment size "
                                             f"of {MAX_SEGMENT_BYTES} bytes")
                if self._needs_load_time_recovery(seg, present):
                    why = ("its offset index (.index) is missing" if plan.index_missing(base, present)
                           else "its transaction index (.txnindex) is corrupt")
                    log.warning("%s: segment %d: %s; recovering the segment and rebuilding its index files", self.dir,
                                base, why)
                    try:
                        self._recover_segment(seg, index_last=True)  # its cut deletes no later segment (§6.3)
                        if not self.ctx.clean_shutdown:  # recoverLog may recover it again (§16a): read it once
                            self._pin_for_recover_log(seg)
                    except InvalidOffsetError as e:  # only recoverLog catches it
                        raise StartupFailedError(seg.log_path, "InvalidOffsetException", str(e)) from e
                self.segments[base] = seg

    def _pin_for_recover_log(self, seg: Segment) -> None:
        """Keep the scan of a segment recovered in the load phase that recoverLog will recover again: those
        from the floor segment of the recovery point on.  The listing goes in offset order, so a segment
        at or below the recovery point replaces the previous candidate for the floor."""
        if seg.base_offset <= self.ctx.recovery_point_checkpoint:
            if self._floor_pin is not None:
                self._scans.unpin(self._floor_pin)
            self._floor_pin = seg.log_path
        self._scans.pin(seg.log_path)

    def _needs_load_time_recovery(self, seg: Segment, present: set[str]) -> bool:
        """LogSegment.sanityCheck: True for NoSuchFile (.index) or CorruptIndex (.txnindex), the rule of
        :func:`mploader.scan.plan.needs_load_time_recovery`.

        A missing ``.timeindex`` next to an existing ``.index`` is created empty (not rebuilt)."""
        prefix = names.filename_prefix(seg.base_offset)
        if prefix + names.INDEX_SUFFIX in present and prefix + names.TIME_INDEX_SUFFIX not in present:
            self.disk.write(seg.time_index_path, b"")
            present.add(prefix + names.TIME_INDEX_SUFFIX)
        return plan.needs_load_time_recovery(seg.base_offset, present, lambda _: self._txn_index_corrupt(seg))

    def _txn_index_corrupt(self, seg: Segment) -> bool:
        return txn_index_corrupt(self.disk.read(seg.txn_index_path), seg.txn_index_path, seg.base_offset)

    def _check_cancelled(self) -> None:
        if self.ctx.cancelled.is_set():
            raise LoadInterrupted(f"{self.dir}: the load was interrupted")

    def _recover_segment(self, seg: Segment, before_cut: Callable[[], None] = lambda: None,
                         index_last: bool = False, note_before: bool = True) -> int:
        """LogLoader.recoverSegment (§6.5): an intermediate PSM, then LogSegment.recover.  ``before_cut``: see
        :func:`recover_segment`.  ``note_before=False``: the impact report's "before" waits for a later segment's
        recovery (:meth:`_recover_unflushed`), unless this one fails.

        ``index_last``: a load-time recovery, which only a missing ``.index`` (or a corrupt ``.txnindex``)
        starts.  An existing ``.index`` is first renamed to a name every load deletes (``.deleted``), the
        rebuilt one is written there and renamed into place after the snapshot, as the last change: a load
        killed at any point in between leaves the segment without its ``.index``, so that the next load (or
        Kafka's) recovers it again and not only what was left (docs/crash-safety.md).  The rebuilt indexes are
        fsynced before that rename: after a power loss the segment has no ``.index`` or its whole rebuilt ones,
        never a renamed one whose bytes were lost (the next load, clean or below the recovery point, trusts it)."""
        self._check_cancelled()
        try:
            psm = self._producer_state_manager(own_view=False)  # only it and the segment's own files change meanwhile
            self.rebuild_producer_state(psm, self.segments.ascending(), self.ctx.log_start_checkpoint,
                                        seg.base_offset, reload_from_clean_shutdown=False)
            scan = self.full_scan(seg)
        except Exception:
            self._note_log_end_before()  # before what the caller does next (a truncation of this segment)
            raise
        # the "before" is still read before the first change to a .log or an .index (the producer state above writes
        # and deletes snapshots only), and now with the scan: where this is the highest segment, the scan spares
        # readNextOffset a walk of all of it (an unclean shutdown leaves the active segment's index preallocated)
        if note_before:
            self._note_log_end_before(scan)
        self._check_unchanged(seg, scan)
        pending = seg.index_path + names.DELETED_SUFFIX if index_last else None
        if pending is not None and self.disk.exists(seg.index_path):
            self.disk.rename(seg.index_path, pending)
        try:
            result = recover_segment(self.disk, seg, scan, psm, self.epochs, self.cfg, before_cut=before_cut,
                                     index_path=pending, fsync=index_last)
        except (InvalidOffsetError, OffsetOverflowError, StartupFailedError):
            # recover()'s own failures, as Kafka's: the index they leave (Kafka's), in place.  Any other exception
            # (a full disk, an interrupt) may have torn the pending index: it stays a .deleted file, which the next
            # load deletes, and the segment, with no .index, is recovered again
            if pending is not None and self.disk.exists(pending):
                self.disk.rename(pending, seg.index_path)
            raise
        self.ctx.recovered.append(seg.base_offset)
        self.ctx.truncated_bytes += result.truncated_bytes
        if result.truncated_bytes:
            log.warning("%s: truncated %d invalid bytes at the end of segment %d, from byte %d of %s (%s)", self.dir,
                        result.truncated_bytes, seg.base_offset, result.valid_bytes, os.path.basename(seg.log_path),
                        scan.stop_detail)
        psm.take_snapshot()
        if pending is not None:
            self.disk.rename(pending, seg.index_path)
        return result.truncated_bytes

    def _check_unchanged(self, seg: Segment, scan: SegmentScan) -> None:
        """Before a recovery changes a segment: it still has the size it was planned and scanned with.  A segment
        another process appends to (a running broker without its lock, a copy still in progress) would be cut at
        the torn batch it was writing, and every later segment deleted: valid data (docs/loading.md §18)."""
        now = self.disk.current_size(seg.log_path)
        if now != scan.end or now != self.disk.size(seg.log_path):
            raise EnvironmentFailure(seg.log_path, errno.EBUSY, f"the segment changed size during the load "
                                     f"({scan.end} bytes scanned, {now} now): another process is writing it",
                                     "stop whatever writes to the data dir (a broker, a copy) and load again")

    # ---- §6.6 recoverLog ------------------------------------------------------------------------

    def _recover_log(self) -> tuple[int, int]:
        ctx = self.ctx
        rp = ctx.recovery_point_checkpoint
        if not ctx.clean_shutdown and not self._recovered_before():
            unflushed = [self.segments[b] for b in plan.unflushed(sorted(self.segments), rp)]
            ctx.set_remaining_segments(len(unflushed))
            with self._snapshot_deletes_deferred():
                self._recover_unflushed(unflushed)
        leo = self._delete_segments_if_log_start_greater_than_log_end()
        if not self.segments:
            self._new_segment(ctx.log_start_checkpoint)
        if ctx.clean_shutdown and leo is not None:
            return leo, leo
        if leo is None:
            leo = read_next_offset(self.disk, self.segments.ascending()[-1])
        return min(rp, leo), leo

    def _recover_unflushed(self, unflushed: list[Segment]) -> None:
        ctx = self.ctx
        # ``unflushed`` runs to the highest segment: the impact report's "before" waits for its recovery and its scan
        # (_recover_segment); until then only earlier segments' own files change, and a cut of one deletes the later
        # segments' files first (_delete_segment_files reads the "before" then), a failed recovery reads it at once
        for i, seg in enumerate(unflushed):
            log.info("%s: recovering unflushed segment %d (%d/%d recovered)", self.dir, seg.base_offset, i,
                     len(unflushed))
            later = unflushed[i + 1 :]
            condemn = lambda later=later: self._delete_later_segment_files(later)  # noqa: E731
            try:
                truncated = self._recover_segment(seg, before_cut=condemn, note_before=not later)
                self._scans.unpin(seg.log_path)  # recovered for the last time: an ordinary cached scan
            except (InvalidOffsetError, OSError) as e:
                if of_the_environment(e):  # Kafka cuts here too; mploader never cuts for the environment
                    raise environment_failure(e, self.dir) from e
                log.warning("%s: %s; truncating segment %d to its base offset", self.dir, e, seg.base_offset)
                truncated = truncate_to(self.disk, seg, seg.base_offset, self.cfg.max_index_size,
                                        before_cut=condemn)
                ctx.recovered.append(seg.base_offset)
                ctx.truncated_bytes += truncated
            if truncated > 0:
                for s in later:  # their files went before the cut; their snapshots go now, as in Kafka
                    self._delete_segment(s)
                ctx.set_remaining_segments(0)
                break
            ctx.set_remaining_segments(len(unflushed) - i - 1)

    @contextlib.contextmanager
    def _snapshot_deletes_deferred(self) -> Iterator[None]:
        """recoverLog's managers delete every snapshot above a recovered segment's base, and the next segments
        write most of those names again: their deletes wait until the loop ends (recovery/snapshot_files.py;
        docs/crash-safety.md, "Snapshots a recovery rewrites")."""
        self._snapshot_files.defer_deletes()
        failed = True  # the loop ended by an error: the one to report
        try:
            yield
            failed = False
        finally:
            for name in self._snapshot_files.end_deferral():
                try:
                    self.disk.delete(self.path(name))
                except OSError:
                    if not failed:
                        raise

    def _recovered_before(self) -> bool:
        """A ``--resumable`` load killed after recovering this whole partition left it as it is now: its last
        segment (the one Kafka reads again, holding the recovery point) needs no second recovery."""
        if self.ctx.resumed_from is None or not self.segments:
            return False
        last = self.segments.ascending()[-1]
        return recovered_before(self.disk, self.ctx.resumed_from, self.ctx.recovery_point_checkpoint,
                                last.log_path, last.base_offset)

    def _new_segment(self, base: int, preallocate: bool | None = None) -> None:
        """LogSegment.open(dir, base, ..., initFileSize, preallocate): a preallocated file's FileRecords
        starts with size 0 (end = 0), so none of its zero bytes is ever read as a batch."""
        prealloc = self.cfg.preallocate if preallocate is None else preallocate
        seg = Segment(self.dir, base, records_end=0 if prealloc else None)
        self.disk.set_size(seg.log_path, self.cfg.segment_bytes if prealloc else 0)
        self.segments[base] = seg

    def _delete_later_segment_files(self, later: list[Segment]) -> None:
        """The files of the segments after one that recovery is about to cut, deleted before the cut, newest
        first.  Kafka cuts first: killed in between, it restarts with a valid-looking cut segment followed by
        the old later ones, a hole in the offsets that its next recovery keeps.  In this order every state a
        kill can leave is a shorter log that still ends in the uncut segment, which the next load recovers
        and cuts again (docs/crash-safety.md)."""
        for seg in reversed(later):
            self._delete_segment_files(seg)
        self.ctx.deleted_segments.sort()  # reported oldest first, as deleted in Kafka's order

    def _delete_segment(self, seg: Segment) -> None:
        """deleteSegmentFiles (async in Kafka: *.deleted now, removed after file.delete.delay.ms)."""
        self._delete_segment_files(seg)
        if (snapshot := self.psm.mark_snapshot_deleted(seg.base_offset)) is not None:
            self._note_deleted(snapshot)

    def _delete_segment_files(self, seg: Segment) -> None:
        """The segment's own files (its snapshot is the caller's), once."""
        if self.segments.get(seg.base_offset) is not seg:
            return
        self._note_log_end_before()
        self.ctx.deleted_segments.append((seg.base_offset, log_bytes(self.disk, seg)))
        del self.segments[seg.base_offset]
        for suffix in (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX):
            self._delete(names.segment_file_name(seg.base_offset, suffix))

    def _note_log_end_before(self, scan: SegmentScan | None = None) -> None:
        """The impact report's "before": read once, before the first change to the log's offsets (``scan``: see
        :func:`~mploader.recovery.impact.log_end_as_found`)."""
        if not self.ctx.log_end_offset_before_read:
            self.ctx.log_end_offset_before_read = True
            self.ctx.log_end_offset_before = log_end_as_found(self.disk, self.dir, scan)

    def _note_deleted(self, name: str) -> None:
        self.ctx.deleted_files.append(name)

    def _delete_segments_if_log_start_greater_than_log_end(self) -> int | None:
        if not self.segments:
            return None
        leo = read_next_offset(self.disk, self.segments.ascending()[-1])
        if leo >= self.ctx.log_start_checkpoint:
            return leo
        log.warning("%s: log end offset %d is below the log start offset %d; deleting every segment", self.dir,
                    leo, self.ctx.log_start_checkpoint)
        for seg in self.segments.ascending():
            self._delete_segment(seg)
        if self.epochs is not None:
            self.epochs.clear()
        self.psm.truncate_fully_and_start_at(self.ctx.log_start_checkpoint)
        return None

    # ---- §6.14 rebuildProducerState ---------------------------------------------------------------

    def rebuild_producer_state(self, psm: ProducerStateManager, segments: Sequence[Segment], log_start: int,
                               last_offset: int, *, reload_from_clean_shutdown: bool) -> None:
        to_snapshot: list[int | None] = []
        if segments:
            to_snapshot += [segments[-2].base_offset if len(segments) > 1 else None, segments[-1].base_offset]
        to_snapshot.append(last_offset)
        if self.cfg.record_version < 2 or (psm.latest_snapshot_offset() is None and reload_from_clean_shutdown):
            for o in to_snapshot:
                if o is not None:
                    psm.map_end_offset = o
                    psm.take_snapshot()
            return
        empty_before = psm.is_empty() and psm.map_end_offset >= last_offset
        psm.truncate_and_reload(log_start, last_offset, self.ctx.now_ms)
        if last_offset > psm.map_end_offset and not empty_before:
            by_base = {s.base_offset: s for s in segments}
            floor_bases = [b for b in by_base if b <= last_offset]
            seg_of_last = by_base[max(floor_bases)] if floor_bases else None
            for seg in _values_of(by_base, psm.map_end_offset, last_offset, self.dir):
                start = max(seg.base_offset, psm.map_end_offset, log_start)
                psm.map_end_offset = start
                if seg.base_offset in to_snapshot:
                    psm.take_snapshot()
                max_pos = log_size(self.disk, seg)
                if seg is seg_of_last:
                    hit = translate_offset(self.disk, seg, last_offset)
                    max_pos = hit[0] if hit is not None else max_pos
                psm.load_producers_from_batches(self._read_batches(seg, start, max_pos), seg.log_path)
        psm.map_end_offset = last_offset
        psm.take_snapshot()

    def _read_batches(self, seg: Segment, start_offset: int, max_pos: int) -> np.ndarray:
        """LogSegment.read(startOffset, MAX, maxPosition): batches from the one holding start_offset."""
        hit = translate_offset(self.disk, seg, start_offset)
        if hit is None:
            return np.empty(0, dtype=_empty_table().dtype)
        if max_pos < hit[0]:
            raise StartupFailedError(seg.log_path, "IllegalArgumentException",
                                     f"invalid read range {hit[0]}..{max_pos}")
        size = self.disk.size(seg.log_path)
        cached = self._scans.get(seg.log_path, size)
        if cached is not None and cached.valid_bytes >= max_pos:
            rows = cached.batches
            return rows[(rows["position"] >= hit[0]) & (rows["position"] < max_pos)]
        walk = walk_from(self.disk, seg, hit[0], max_pos)
        self.ctx.bytes_scanned += walk.bytes_read
        if walk.fatal is not None:
            raise StartupFailedError(seg.log_path, walk.fatal_exception or "KafkaException", walk.fatal)
        if walk.stop is Stop.CORRUPT_SIZE:
            raise StartupFailedError(seg.log_path, "CorruptRecordException",
                                     f"{walk.stop_detail} at byte {walk.valid_bytes}")
        return walk.batches


class _ScanCache:
    """The latest scans of a partition's segments, by file.  A segment recovered twice (docs/loading.md §16a) and
    the producer-state reads right after a recovery reuse them; older scans are dropped, so that a
    partition of many big segments holds a few batch tables (80 bytes a batch), not all of them."""

    KEEP = 4

    def __init__(self) -> None:
        self._scans: OrderedDict[str, SegmentScan] = OrderedDict()
        self._pinned: set[str] = set()

    def get(self, path: str, size: int) -> SegmentScan | None:
        """The scan of ``path`` at its current ``size``: as scanned, or truncated at its valid end."""
        scan = self._scans.get(path)
        if scan is None:
            return None
        self._scans.move_to_end(path)
        if scan.end == size:
            return scan
        if scan.valid_bytes == size < scan.end:  # recovery truncated it: the same batches, nothing left to cut
            return _prefix(scan, size)
        return None

    def put(self, path: str, scan: SegmentScan) -> None:
        self._scans[path] = scan
        self._scans.move_to_end(path)
        unpinned = [p for p in self._scans if p not in self._pinned]
        for p in unpinned[: max(0, len(unpinned) - self.KEEP)]:
            del self._scans[p]

    def pin(self, path: str) -> None:
        self._pinned.add(path)

    def unpin(self, path: str) -> None:
        """An ordinary cached scan again: dropped when KEEP newer ones are put."""
        self._pinned.discard(path)

    def drop(self, paths: set[str]) -> None:
        for p in paths:
            self._scans.pop(p, None)
            self._pinned.discard(p)


def _values_of(by_base: dict[int, Segment], start: int, end: int, where: str) -> list[Segment]:
    if end < start:
        raise StartupFailedError(where, "IllegalArgumentException", f"invalid segment range {start}..{end}")
    return [by_base[b] for b in plan.values_between(sorted(by_base), start, end)]


def _prefix(scan: SegmentScan, size: int) -> SegmentScan:
    """The scan of a segment truncated at its valid end: same batches, nothing left to truncate."""
    return replace(scan, end=size, valid_bytes=size, bytes_read=0)  # the draft (a pure function of the rows) stays


def _empty_table() -> np.ndarray:
    return np.empty(0, BATCH_TABLE)


__all__ = ["LogLoader", "PartitionContext"]
