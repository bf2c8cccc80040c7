"""The partition's snapshot set shared by its producer-state managers, and the segment map's kept order: what
made recovery quadratic in a partition's recovered segments (perf/README.md, "Limits") and what replaced it."""

from __future__ import annotations

import errno
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from mploader.api import load_logs
from mploader.config import LoaderConfig
from mploader.disk.real import RealDisk
from mploader.format import names
from mploader.generate import GeneratorConfig, generate
from mploader.recovery.producer_state import ProducerStateManager
from mploader.recovery.segment import LogSegments, Segment
from mploader.recovery.snapshot_files import SnapshotFiles
from tests.examples import examples

ops = st.lists(st.tuples(st.sampled_from(["add", "pop", "outside"]), st.integers(0, 40), st.integers(0, 40)),
               max_size=80)


@settings(max_examples=examples(300), deadline=None)
@given(ops=ops)
def test_snapshot_files_behave_as_a_sorted_map(ops: list[tuple[str, int, int]]) -> None:
    files, model = SnapshotFiles(), {}
    for op, a, b in ops:
        if op == "add":
            files.add(a, f"{a}.snapshot")
            model[a] = f"{a}.snapshot"
        elif op == "pop":
            assert files.pop(a) == model.pop(a, None)
        else:  # Kafka's truncateAndReload condition, each offset once even where the range is empty
            assert files.outside(a, b) == [o for o in sorted(model) if o <= a or o > b]
        assert list(files) == sorted(model) and len(files) == len(model)
        assert files.latest() == (max(model) if model else None)
        assert all(files[o] == model[o] and o in files for o in model)
    copy = files.copy()
    copy.add(99, "x")
    assert 99 not in files  # a copy is its own


def _snapshot(directory: Path, offset: int) -> None:
    (directory / names.segment_file_name(offset, names.SNAPSHOT_SUFFIX)).write_bytes(b"")


def test_a_manager_sees_what_was_on_disk_when_made_and_the_shared_set_follows_every_change(tmp_path: Path) -> None:
    for off in (10, 20):
        _snapshot(tmp_path, off)
    disk = RealDisk()
    on_disk = SnapshotFiles.listed(disk, str(tmp_path))
    old = ProducerStateManager(disk, str(tmp_path), 86_400_000, on_disk)
    new = ProducerStateManager(disk, str(tmp_path), 86_400_000, on_disk)
    new.map_end_offset = 30
    new.take_snapshot()  # written by the newer manager: the older one does not know it, as in Kafka
    assert list(old.snapshots) == [10, 20] and list(new.snapshots) == [10, 20, 30]
    assert old.mark_snapshot_deleted(30) is None and (tmp_path / names.segment_file_name(30, ".snapshot")).exists()
    assert old.mark_snapshot_deleted(10) == names.segment_file_name(10, ".snapshot")
    assert list(new.snapshots) == [10, 20, 30]  # stale, as Kafka's map would be
    newest = ProducerStateManager(disk, str(tmp_path), 86_400_000, on_disk)
    assert list(newest.snapshots) == [20, 30] == list(SnapshotFiles.listed(RealDisk(), str(tmp_path)))


def test_a_snapshot_whose_write_failed_is_known_to_the_next_manager(tmp_path: Path, monkeypatch) -> None:
    """recoverLog goes on after an IOException: the file a failed snapshot write left is in the directory, so the
    next manager (Kafka's lists it) knows it, while the manager that failed does not, and no entries are kept."""
    import os

    disk = RealDisk()
    on_disk = SnapshotFiles.listed(disk, str(tmp_path))
    psm = ProducerStateManager(disk, str(tmp_path), 86_400_000, on_disk)
    psm.map_end_offset = 30

    def eio(fd: int, data: bytes) -> int:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(os, "write", eio)
        with pytest.raises(OSError):
            psm.take_snapshot()
    name = names.segment_file_name(30, names.SNAPSHOT_SUFFIX)
    assert (tmp_path / name).exists() and 30 not in psm.snapshots
    assert list(on_disk) == [30] == list(SnapshotFiles.listed(RealDisk(), str(tmp_path)))
    assert on_disk.written(30, name) is None


def test_the_entries_written_last_are_known_until_the_file_changes(tmp_path: Path) -> None:
    """A manager's snapshot is what the next recovered segment's manager loads: the shared set keeps its entries
    (read back from memory), but only while they are what the file holds."""
    from mploader.format.snapshot import ProducerSnapshotEntry

    entries = [ProducerSnapshotEntry(7, 0, 4, 104, 4, 1_700_000_000_000, -1, -1)]
    name = names.segment_file_name(30, names.SNAPSHOT_SUFFIX)
    files = SnapshotFiles({10: names.segment_file_name(10, names.SNAPSHOT_SUFFIX)})
    files.wrote(30, name, entries)
    assert files.written(30, name) == entries and 30 in files and files.latest() == 30
    assert files.written(30, "30.snapshot") is None  # another file of the same offset holds other bytes
    assert files.copy().written(30, name) is None  # a manager's view holds no bytes
    files.wrote(10, names.segment_file_name(10, names.SNAPSHOT_SUFFIX), entries)  # over an older file: its tail
    assert files.written(10, names.segment_file_name(10, names.SNAPSHOT_SUFFIX)) is None  # stays: read it
    assert files.written(30, name) is None  # the latest only
    for change in (lambda: files.pop(30), lambda: files.note(name, present=True), lambda: files.add(30, name)):
        files.pop(30)
        files.wrote(30, name, entries)
        change()
        assert files.written(30, name) is None


def _one_unclean_partition(tmp_path: Path, size: int) -> Path:
    """A data dir of one partition of 8 KB segments (~1 KB batches, producers), every segment to recover."""
    out = generate(str(tmp_path / "gen"), GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=1,
                                                          total_bytes=size, segment_bytes=8 * 1024,
                                                          batch_bytes=1024, faults=0, seed=3))
    d = tmp_path / "d"
    shutil.copytree(out.data_dirs[0], d)
    (d / "recovery-point-offset-checkpoint").write_text("0\n0\n")  # every segment recovered
    return d


def test_recovery_reads_back_no_snapshot_it_wrote(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Each recovered segment's manager loads the snapshot the one before wrote: from memory, not the disk."""
    d = _one_unclean_partition(tmp_path, 300_000)
    read: list[str] = []
    original = RealDisk.read
    monkeypatch.setattr(RealDisk, "read", lambda self, p, *a: read.append(p) or original(self, p, *a))

    result = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=1))

    (log,) = result.all_logs()
    assert len(log.recovered_segments) > 30 and log.producers
    snapshots_read = [p for p in read if p.endswith(names.SNAPSHOT_SUFFIX)]
    assert snapshots_read == []  # the first recovered segment's (base 0) has none to load: nothing is read


def test_a_recovered_segments_manager_copies_no_snapshot_set(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Its view is the shared set itself (nothing else changes a snapshot file while it lives): a copy each, of a
    set holding a snapshot per segment recovered so far, made recovery quadratic again."""
    d = _one_unclean_partition(tmp_path, 300_000)
    copies: list[int] = []
    original = SnapshotFiles.copy
    monkeypatch.setattr(SnapshotFiles, "copy", lambda self: copies.append(len(self)) or original(self))

    result = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=1))

    (log,) = result.all_logs()
    assert len(log.recovered_segments) > 30
    assert len(copies) == 2, copies  # the log's manager, its stray-snapshot pass


def test_a_snapshot_name_without_an_offset_fails_start_up_naming_the_file(tmp_path: Path) -> None:
    from mploader.errors import StartupFailedError

    (tmp_path / "abc.snapshot").write_bytes(b"")
    with pytest.raises(StartupFailedError) as e:
        SnapshotFiles.listed(RealDisk(), str(tmp_path))
    assert e.value.kafka_exception == "NumberFormatException" and "abc.snapshot" in str(e.value)


def test_log_segments_keep_their_order_through_every_change() -> None:
    segs = LogSegments()
    rng = random.Random(7)
    model: dict[int, Segment] = {}
    for _ in range(300):
        base = rng.randrange(50)
        if rng.random() < 0.6:
            segs[base] = model[base] = Segment("/d", base)
        elif rng.random() < 0.5:
            assert segs.pop(base, None) is model.pop(base, None)
        elif base in model:
            del segs[base], model[base]
        order = segs.ascending()
        assert [s.base_offset for s in order] == sorted(model) and all(s is model[s.base_offset] for s in order)
        assert segs.ascending() is order  # no sort again while nothing changed
    segs.clear()
    assert list(segs.ascending()) == []


def test_recovering_a_partition_parses_each_snapshot_name_a_bounded_number_of_times(tmp_path: Path, monkeypatch):  # type: ignore[no-untyped-def]
    """Every recovered segment gets a new manager; each used to list and parse every snapshot of the partition
    (one per segment recovered before it: ~N**2/2 parses).  Now the names are parsed when listed, once."""
    d = _one_unclean_partition(tmp_path, 1_500_000)
    parsed: list[str] = []
    original = names.offset_from_file_name
    monkeypatch.setattr(names, "offset_from_file_name", lambda n: parsed.append(n) or original(n))

    result = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=1))

    (log,) = result.all_logs()
    recovered = len(log.recovered_segments)
    assert recovered > 150
    snapshot_parses = sum(n.endswith(names.SNAPSHOT_SUFFIX) for n in parsed)
    assert snapshot_parses <= 3 * recovered, (snapshot_parses, recovered)


def _literal_listing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's own way: every manager, and the stray-snapshot pass, lists the directory (through the disk, whose
    listing follows every change), and reads the snapshot it loads from the file."""
    init, strays = ProducerStateManager.__init__, ProducerStateManager.remove_stray_snapshots

    def listing_init(self, disk, log_dir, expiration_ms, on_disk, own_view=True):  # type: ignore[no-untyped-def]
        init(self, disk, log_dir, expiration_ms, on_disk)
        self.snapshots = SnapshotFiles.listed(disk, log_dir)

    def listing_strays(self, bases):  # type: ignore[no-untyped-def]
        self.on_disk = SnapshotFiles.listed(self.disk, self.dir)
        strays(self, bases)

    monkeypatch.setattr(ProducerStateManager, "__init__", listing_init)
    monkeypatch.setattr(ProducerStateManager, "remove_stray_snapshots", listing_strays)
    monkeypatch.setattr(SnapshotFiles, "written", lambda self, offset, name: None)  # every snapshot read from disk
    monkeypatch.setattr(SnapshotFiles, "defer_deletes", lambda self: None)  # every delete at once


def _swap_with_recovery_point_inside(root: Path) -> Path:
    """A compaction's swap of two middle segments left by a killed broker, their old files gone, their snapshots
    still there (the swap pass deletes them by name), and the recovery point inside the swapped range: the
    first recovered segment's manager must not see the snapshots the swap pass deleted."""
    from tests.crash_points import small_broker
    from tests.test_crash_safety import _interrupted_swap

    data = small_broker(root, seed=3, clean=False, faults=0, everything_unflushed=True)
    part = _interrupted_swap(data, moved=True)
    swapped = sorted(int(p.name[:20]) for p in part.glob("*.log.swap"))
    (data / "recovery-point-offset-checkpoint").write_text(f"0\n1\n{part.name.rsplit('-', 1)[0]} "
                                                           f"{part.name.rsplit('-', 1)[1]} {swapped[-1] + 1}\n")
    return data


def _unclean_with_faults(root: Path) -> Path:
    from tests.crash_points import small_broker

    return small_broker(root, seed=4, clean=False, faults=6, everything_unflushed=True)


def _clean_without_snapshots(root: Path) -> Path:
    from tests.crash_points import small_broker

    return small_broker(root, seed=5, clean=True, faults=3, drop_snapshots=2)


@pytest.mark.parametrize("make", [_swap_with_recovery_point_inside, _unclean_with_faults, _clean_without_snapshots])
def test_the_shared_snapshot_set_loads_as_kafkas_listing_per_manager(tmp_path: Path, make, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Differential: the partition's one listing, kept by the managers and the loader, against a listing of the
    directory per manager as Kafka does it: the same files, byte for byte, and the same outcome."""
    from tests.crash_points import copy_tree, final_outcome, tree_state

    pristine = make(tmp_path / "pristine")
    config = LoaderConfig(segment_scan_workers_per_data_dir=1)
    results, trees = [], []
    work = tmp_path / "work"  # one path: the outcome names the directories
    for literal in (False, True):
        copy_tree(pristine, work)
        with monkeypatch.context() as m:
            if literal:
                _literal_listing(m)
            result = load_logs([str(work)], config, now_ms=1_730_000_600_000)
        assert not result.offline_dirs, result.offline_dirs
        results.append(final_outcome(result))
        trees.append(tree_state(work))
    assert results[0] == results[1]
    assert trees[0] == trees[1]


def _deletes_and_tree(pristine: Path, work: Path, monkeypatch: pytest.MonkeyPatch, *, defer: bool,
                      fail_after: int | None = None) -> tuple[list[str], dict[str, tuple[int, str]], object]:
    """Load a copy of ``pristine`` at ``work``: the snapshot files deleted, the files left, the outcome.
    ``fail_after``: that many snapshot writes succeed, the next fails with a full disk (the partition fails)."""
    from tests.crash_points import copy_tree, final_outcome, tree_state

    copy_tree(pristine, work)
    deleted: list[str] = []
    writes = [0]
    delete, write = RealDisk.delete, RealDisk.write

    def counting_delete(self, path):  # type: ignore[no-untyped-def]
        if path.endswith(names.SNAPSHOT_SUFFIX):
            deleted.append(path)
        return delete(self, path)

    def failing_write(self, path, data, **kw):  # type: ignore[no-untyped-def]
        if path.endswith(names.SNAPSHOT_SUFFIX):
            writes[0] += 1
            if fail_after is not None and writes[0] > fail_after:
                raise OSError(errno.ENOSPC, "No space left on device", path)
        return write(self, path, data, **kw)

    with monkeypatch.context() as m:
        m.setattr(RealDisk, "delete", counting_delete)
        m.setattr(RealDisk, "write", failing_write)
        if not defer:
            m.setattr(SnapshotFiles, "defer_deletes", lambda self: None)
        result = load_logs([str(work)], LoaderConfig(segment_scan_workers_per_data_dir=1),
                           now_ms=1_730_000_600_000)
    return deleted, tree_state(work), (final_outcome(result), result.offline_dirs)


def _padded_snapshots(tmp_path: Path) -> Path:
    """One unclean partition whose broker-written snapshots are each 64 bytes longer than what recovery writes
    at their offsets: a rewrite that does not truncate keeps a tail, which Kafka's new file has not."""
    d = _one_unclean_partition(tmp_path, 300_000)
    snaps = sorted(d.rglob("*" + names.SNAPSHOT_SUFFIX))
    assert len(snaps) > 30
    for snap in snaps:
        with open(snap, "ab") as f:
            f.write(b"\xff" * 64)
    return d


def test_recovery_rewrites_the_snapshots_it_deletes_in_place_with_kafkas_files(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """recoverLog's deletes of the snapshots the next segments write again are deferred: the files and the
    outcome are those of deleting each at once (Kafka's order), with a delete per snapshot saved."""
    pristine = _padded_snapshots(tmp_path)
    at_once = _deletes_and_tree(pristine, tmp_path / "work", monkeypatch, defer=False)
    deferred = _deletes_and_tree(pristine, tmp_path / "work", monkeypatch, defer=True)
    assert deferred[1:] == at_once[1:]  # every file, byte for byte, and the outcome
    assert len(at_once[0]) > 30 and len(deferred[0]) <= 2, (len(at_once[0]), deferred[0])


def test_a_recovery_that_fails_mid_loop_still_deletes_the_snapshots_it_owes(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk fails the partition after a few recovered segments: the deferred deletes are made all the
    same, so the files left are those of deleting at once."""
    pristine = _padded_snapshots(tmp_path)
    at_once = _deletes_and_tree(pristine, tmp_path / "work", monkeypatch, defer=False, fail_after=5)
    deferred = _deletes_and_tree(pristine, tmp_path / "work", monkeypatch, defer=True, fail_after=5)
    assert at_once[2][1], "the full disk did not fail the partition: the test no longer tests an error"
    assert deferred[1:] == at_once[1:]
    assert len(at_once[0]) > 30 and len(deferred[0]) > 30  # made after the failure, instead of before it
