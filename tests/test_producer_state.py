"""Phase 2's producer-state update of a segment equals Kafka's batch-by-batch rule (docs/loading.md §7.2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import mploader.recovery.producer_apply as producer_apply
from mploader.disk import RealDisk
from mploader.errors import StartupFailedError
from mploader.recovery.producer_state import ATTR_CONTROL, ATTR_TRANSACTIONAL, ProducerStateManager
from mploader.recovery.segment_recovery import _apply_batches
from mploader.recovery.snapshot_files import SnapshotFiles
from mploader.scan import BATCH_TABLE, BatchColumns, Field, Marker, draft_recovery
from tests.examples import examples

PLAIN, TXN, COMMIT, ABORT, EMPTY = range(5)
# (producer id, epoch, kind, records, base sequence); producers 6 and 7 only ever write plain data
row = st.tuples(st.integers(0, 7), st.sampled_from([0, 0, 0, 1]), st.sampled_from([PLAIN, PLAIN, TXN, TXN, COMMIT,
                ABORT, EMPTY]), st.integers(1, 3), st.integers(-1, 2**31 - 1)).map(
    lambda r: (r[0], r[1], PLAIN if r[0] >= 6 else r[2], r[3], r[4]))
# producers known before the segment: (producer id, epoch, open transaction or not)
known = st.lists(st.tuples(st.integers(0, 9), st.sampled_from([0, 1]), st.booleans()), max_size=4)


def _psm(directory: str) -> ProducerStateManager:
    """A manager of ``directory`` with its own listing (Kafka's constructor)."""
    return ProducerStateManager(RealDisk(), directory, 86_400_000, SnapshotFiles.listed(RealDisk(), directory))


def _table(rows):  # type: ignore[no-untyped-def]
    t = np.zeros(len(rows), BATCH_TABLE)
    offset = 2000
    for i, (pid, epoch, kind, n, seq) in enumerate(rows):
        n = 1 if kind >= COMMIT else n
        attributes = (ATTR_TRANSACTIONAL if kind != PLAIN else 0) | (ATTR_CONTROL if kind >= COMMIT else 0)
        marker = {COMMIT: Marker.COMMIT, ABORT: Marker.ABORT, EMPTY: Marker.EMPTY_CONTROL}.get(kind, Marker.NONE)
        t[i] = (100 * i, 100, 2, attributes, offset, offset + n - 1, 10 * i, 0, pid, epoch, seq,
                0 if kind == EMPTY else n, marker, i % 3, 10 * i + 1)
        offset += n
    return t


def _apply(table, psm, txn_entries):  # type: ignore[no-untyped-def]
    rows = BatchColumns(table)
    _apply_batches(rows, draft_recovery(rows, 2000, 4096), psm, None, txn_entries, "x")


def _reference(rows, psm, txn_entries):  # type: ignore[no-untyped-def]
    """Kafka's loop: prepareUpdate, append, update, then LSO / txn index / completeTxn, one batch at a time."""
    for r in rows.tolist():
        info = psm.prepare_update(r[Field.PRODUCER_ID])
        completed = info.append(r, "x")
        psm.update(info)
        if completed is not None:
            lso = psm.last_stable_offset(completed)
            if completed.is_aborted:
                txn_entries.append((completed.producer_id, completed.first_offset, completed.last_offset, lso))
            psm.complete_txn(completed, "x")
    if len(rows):
        psm.map_end_offset = int(rows["last_offset"][-1]) + 1


def _state(psm: ProducerStateManager):  # type: ignore[no-untyped-def]
    return ({pid: (e.epoch, e.coordinator_epoch, e.last_timestamp, e.current_txn_first_offset, list(e.batches))
             for pid, e in psm.producers.items()}, list(psm.producers), list(psm.ongoing.items()),
            list(psm.unreplicated.items()), psm.producers.order(), psm.map_end_offset)


def _known_producers(psm: ProducerStateManager, producers) -> None:  # type: ignore[no-untyped-def]
    """Producers written before the segment (through Kafka's steps), some with a transaction still open."""
    table = _table([(pid, epoch, TXN if is_open else PLAIN, 1, 0) for pid, epoch, is_open in producers])
    table["base_offset"] -= 1000
    table["last_offset"] -= 1000
    _reference(table, psm, [])


def _side_by_side(directory: str, before, rows, apply):  # type: ignore[no-untyped-def]
    """Two managers that know the producers ``before``; the segment of ``rows`` applied to the first by ``apply``,
    to the second by Kafka's loop: both managers, and for each (its exception's name or None, its txn entries)."""
    a, b = (_psm(directory) for _ in range(2))
    before = list({pid: (pid, epoch, is_open) for pid, epoch, is_open in before}.values())
    for psm in (a, b):
        _known_producers(psm, before)
    table = _table(rows)
    results = []
    for psm, run in ((a, apply), (b, _reference)):
        txn_entries: list = []
        try:
            run(table, psm, txn_entries)
            results.append((None, txn_entries))
        except StartupFailedError as e:
            results.append((e.kafka_exception, None))
    return a, b, results


@pytest.fixture
def replays(monkeypatch):  # type: ignore[no-untyped-def]
    """Counts the batch-by-batch replays; every segment, however small, takes the vectorised pass first."""
    calls: list[int] = []
    original = producer_apply.replay
    monkeypatch.setattr(producer_apply, "REPLAY_BELOW", 0)

    def counting(psm, rows, txn_entries, path):  # type: ignore[no-untyped-def]
        calls.append(len(rows))
        original(psm, rows, txn_entries, path)

    monkeypatch.setattr(producer_apply, "replay", counting)
    return calls


@settings(max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(row, min_size=1, max_size=60), before=known)
def test_segment_update_matches_batch_by_batch(tmp_path_factory, replays, rows, before):  # type: ignore[no-untyped-def]
    replays.clear()  # the fixture lives across examples: reset it for each
    a, b, results = _side_by_side(str(tmp_path_factory.mktemp("psm")), before, rows, _apply)
    assert results[0][0] == results[1][0]
    if results[0][0] is None:
        assert results[0][1] == results[1][1]
        assert _state(a) == _state(b)
        assert replays == []  # valid input never needs the batch-by-batch replay
    else:
        assert results[0][0] == "InvalidTxnStateException" and replays


@settings(max_examples=examples(300), deadline=None)
@given(rows=st.lists(row, min_size=1, max_size=30), before=known)
def test_the_replay_matches_kafkas_loop(tmp_path_factory, rows, before):  # type: ignore[no-untyped-def]
    """The replay (small segments, and input the vectorised pass declines) updates a known producer's entry in
    place for a data batch that cannot fail; the state, the txn index entries and the exception stay those of
    Kafka's prepareUpdate / append / update on a copy."""
    a, b, results = _side_by_side(str(tmp_path_factory.mktemp("psm")), before, rows,
                                  lambda t, p, tx: producer_apply.replay(p, t, tx, "x"))
    assert results[0] == results[1]
    b.map_end_offset = a.map_end_offset  # _reference also maps the end offset; replay leaves it to its caller
    assert _state(a) == _state(b)


@pytest.mark.parametrize("stray_producer, replayed", [(2, False), (3, True)])
def test_ongoing_transaction_no_entry_has_open(tmp_path, replays, stray_producer, replayed):  # type: ignore[no-untyped-def]
    """A transaction in the ongoing map that no entry has open holds back the last stable offset as in Kafka;
    computed at once when its producer has no batch in the segment, replayed when it has."""
    a, b = (_psm(str(tmp_path)) for _ in range(2))
    for psm in (a, b):
        _known_producers(psm, [(1, 0, True), (3, 0, False)])
        psm.ongoing[5] = stray_producer
    table = _table([(1, 0, ABORT, 1, 0), (3, 0, PLAIN, 1, 0), (4, 0, TXN, 1, 0), (4, 0, ABORT, 1, 0)])
    ta: list = []
    tb: list = []
    _apply(table, a, ta)
    _reference(table, b, tb)
    assert bool(replays) == replayed
    assert ta == tb and _state(a) == _state(b)
    assert [e[3] for e in ta] == [5, 5]


def test_a_small_segment_is_replayed_and_a_big_one_is_not(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    calls: list[int] = []
    original = producer_apply.replay
    monkeypatch.setattr(producer_apply, "replay", lambda psm, rows, tx, path: calls.append(len(rows)) or
                        original(psm, rows, tx, path))
    small = producer_apply.REPLAY_BELOW - 1
    for n in (small, producer_apply.REPLAY_BELOW):
        psm = _psm(str(tmp_path))
        _apply(_table([(1 + i % 3, 0, PLAIN, 1, 0) for i in range(n)]), psm, [])
    assert calls == [small]


def test_loading_producers_from_batches_enters_them_in_the_order_of_kafkas_computed_map(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """loadProducersFromRecords collects a segment's producers with HashMap.computeIfAbsent, which links a new key
    at the head of its bucket (put links it at the tail), then updates the manager's map in that map's order.
    301039 and 301023 share a bucket of 16: seen in this order, Kafka's snapshot lists 301023 first (observed
    with Kafka's own loader on a generated broker, and in tests/data/java_hashmap_order.json, cia_kafka_seed13)."""
    psm = _psm(str(tmp_path))
    psm.load_producers_from_batches(_table([(301039, 0, PLAIN, 1, 0), (301025, 0, PLAIN, 1, 0),
                                            (301023, 0, PLAIN, 1, 0)]), "x")
    assert psm.producers.order() == [301025, 301023, 301039]


def test_expiry_takes_the_difference_in_javas_long() -> None:
    """isProducerExpired computes ``now - lastTimestamp`` in a Java long: for a timestamp near Long.MIN_VALUE (a
    crafted, CRC-valid snapshot) it wraps negative and Kafka keeps the producer; one ordinary old timestamp goes."""
    import numpy as np

    from mploader.format.snapshot import SNAPSHOT_ENTRY
    from mploader.recovery.producer_state import unexpired

    rows = np.zeros(4, SNAPSHOT_ENTRY)
    rows["producer_id"] = [1, 2, 3, 4]
    rows["current_txn_first_offset"] = [-1, -1, -1, 5]
    rows["timestamp"] = [-2**63, 0, 1_700_000_000_000 - 86_400_000 + 1, 0]
    kept = unexpired(rows, 1_700_000_000_000, 86_400_000)
    assert kept["producer_id"].tolist() == [1, 3, 4]  # 2 expired; 4 has an open transaction
