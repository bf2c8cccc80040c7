"""The recovery draft Phase 1 makes (mploader.scan.draft) against the batch-by-batch rules it stands for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mploader.errors import StartupFailedError
from mploader.scan import BATCH_TABLE, BatchColumns, draft_recovery
from tests.examples import examples

# (magic, partition leader epoch, producer id, size)
batch = st.tuples(st.sampled_from([1, 2, 2, 2]), st.integers(-2, 6), st.integers(-1, 4), st.integers(30, 3000))


def _table(batches):  # type: ignore[no-untyped-def]
    t = np.zeros(len(batches), BATCH_TABLE)
    pos = 0
    for i, (magic, epoch, pid, size) in enumerate(batches):
        t[i]["position"], t[i]["size"], t[i]["magic"] = pos, size, magic
        t[i]["partition_leader_epoch"], t[i]["producer_id"] = epoch, pid
        t[i]["base_offset"] = t[i]["last_offset"] = 100 + i
        t[i]["max_timestamp"] = 1000 + (i * 7919) % 50
        pos += size
    return t


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(batch, max_size=50), st.one_of(st.none(), st.integers(-1, 7)), st.integers(0, 50))
def test_the_draft_stands_for_the_batch_by_batch_rules(batches, latest, cut):  # type: ignore[no-untyped-def]
    table = _table(batches)
    draft = draft_recovery(BatchColumns(table), 100, 4096)
    # LogSegment.recover assigns a v2 batch's epoch when it is >= 0 and above the cache's latest, which it
    # then becomes; the draft's rows above the latest epoch are exactly those
    assigned, top = [], latest
    for i, (magic, epoch, _, _) in enumerate(batches):
        if magic >= 2 and epoch >= 0 and (top is None or epoch > top):
            assigned.append(i)
            top = epoch
    rows = draft.epoch_rows
    epochs = table["partition_leader_epoch"][rows]
    assert rows[epochs > (-1 if latest is None else latest)].tolist() == assigned
    # producer order: v2 batches with a producer id, by producer, log order within each
    expected = sorted((pid, i) for i, (magic, _, pid, _) in enumerate(batches) if magic >= 2 and pid >= 0)
    assert draft.producer_rows.tolist() == [i for _, i in expected]
    # a prefix of the draft is the draft of the prefix
    part = draft.prefix(cut)
    direct = draft_recovery(BatchColumns(table[:cut]), 100, 4096)
    for a, b in ((part.index, direct.index), (part.producer_rows, direct.producer_rows),
                 (part.epoch_rows, direct.epoch_rows)):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("field, bad", [("index_interval_bytes", -1), ("max_index_size", 3), ("record_version", 3)])
def test_a_topic_override_is_held_to_the_broker_defaults_bounds(field, bad) -> None:
    """Kafka's topic configs have the broker's bounds (index.interval.bytes >= 0, ...): an override outside them is
    refused where it is made, as the broker default is. A negative interval never reaches the index draft, whose
    numpy reference would not end on one."""
    from mploader.config import LoaderConfig, TopicConfig

    with pytest.raises(ValueError, match=field.split("_")[0]):
        TopicConfig(**{field: bad})
    with pytest.raises(ValueError, match=field.split("_")[0]):
        LoaderConfig(**{field: bad})
    ok = {"index_interval_bytes": 0, "max_index_size": 4, "record_version": 0}[field]
    assert getattr(LoaderConfig(topic_overrides={"t": TopicConfig(**{field: ok})}).for_topic("t"), field) == ok


def test_the_indexes_phase1_prepares_are_the_ones_phase2_writes_and_the_same_bytes(tmp_path, monkeypatch) -> None:
    """A scan from byte 0 that knows segment.index.bytes prepares the indexes recover() rebuilds
    (mploader.scan.indexes): Phase 2 writes those bytes and prepares none itself. A load whose scans prepare
    nothing, so that Phase 2 prepares every segment's, leaves the same files, byte for byte, on a broker with
    faults recovered from offset 0; and so does a load whose scans run in worker processes."""
    import shutil

    from mploader import LoaderConfig, load_logs
    from mploader.experiments.run import copy_sparse, make_unclean
    from mploader.generate import GeneratorConfig, generate
    from mploader.recovery import segment_recovery
    from mploader.scan import draft as draft_mod
    from tests.fingerprint import tree_state

    generate(tmp_path / "gen", GeneratorConfig(data_dirs=1, topics=2, partitions_per_topic=2, total_bytes=400_000,
                                               segment_bytes=24 * 1024, faults=4, seed=7))
    copies = [tmp_path / name for name in ("phase1", "phase2", "pool")]
    for copy in copies:
        shutil.copytree(tmp_path / "gen" / "data-0", copy, copy_function=copy_sparse)
    make_unclean(copies)
    in_phase2: list[int] = []
    prepare = segment_recovery.prepare_indexes
    monkeypatch.setattr(segment_recovery, "prepare_indexes",
                        lambda *a, **k: in_phase2.append(a[1]) or prepare(*a, **k))
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=1)
    first = load_logs([copies[0]], cfg, now_ms=1_730_000_000_000)
    assert first.stats.segments_recovered >= 20
    assert in_phase2 == []  # every recovered segment's indexes came from its scan
    # the same from worker processes: the indexes' bytes come back in the shared-memory block
    pool = load_logs([copies[2]], LoaderConfig(segment_scan_workers_per_data_dir=2), now_ms=1_730_000_000_000)
    assert pool.stats.workers_per_dir == 2 and pool.stats.scans_in_parent == 0
    assert in_phase2 == []
    assert tree_state(copies[0]) == tree_state(copies[2])

    def refused(*args: object, **kwargs: object) -> None:
        raise StartupFailedError(str(args[4]), "BufferOverflowException", "(the test's: no indexes in Phase 1)")

    monkeypatch.setattr(draft_mod, "prepare_indexes", refused)
    second = load_logs([copies[1]], cfg, now_ms=1_730_000_000_000)
    assert len(in_phase2) == second.stats.segments_recovered == first.stats.segments_recovered
    assert tree_state(copies[0]) == tree_state(copies[1])


def test_a_scan_made_only_to_check_the_indexes_prepares_none(tmp_path, monkeypatch) -> None:
    """``index_check="full"`` scans every segment of a clean broker to check its indexes; nothing is recovered, so
    no scan prepares the rebuilt indexes (which only a recovery writes)."""
    from mploader import LoaderConfig, load_logs
    from mploader.generate import GeneratorConfig, generate
    from mploader.scan import draft as draft_mod

    generate(tmp_path / "gen", GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=2, total_bytes=200_000,
                                               segment_bytes=24 * 1024, faults=0, clean_shutdown=True, seed=3))
    prepared: list[int] = []
    prepare = draft_mod.prepare_indexes
    monkeypatch.setattr(draft_mod, "prepare_indexes", lambda *a, **k: prepared.append(a[1]) or prepare(*a, **k))
    result = load_logs([tmp_path / "gen" / "data-0"], LoaderConfig(segment_scan_workers_per_data_dir=1,
                                                                   index_check="full"), now_ms=1_730_000_000_000)
    assert result.stats.segments_scanned >= 8 and result.stats.segments_recovered == 0
    assert prepared == []
