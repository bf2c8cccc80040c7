"""Phase 2's producer-state update of a segment equals Kafka's batch-by-batch rule (LOADING.md §7.2)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mploader.disk import Disk
from mploader.errors import StartupFailedError
from mploader.producer_state import ATTR_CONTROL, ATTR_TRANSACTIONAL, ProducerStateManager
from mploader.recovery import _apply_batches
from mploader.scan import BATCH_TABLE, Marker

# (producer id, epoch, kind: 0 plain data / 1 transactional data / 2 COMMIT / 3 ABORT, records, base sequence);
# producers 3..5 only ever write plain data (the vectorised path), 0..2 mix everything (the replayed path)
row = st.tuples(st.integers(0, 5), st.sampled_from([0, 0, 0, 1]), st.sampled_from([0, 0, 1, 2, 3]),
                st.integers(1, 3), st.integers(-1, 2**31 - 1)).map(
    lambda r: (r[0], r[1], 0 if r[0] >= 3 else r[2], r[3], r[4]))


def _table(rows):  # type: ignore[no-untyped-def]
    t = np.zeros(len(rows), BATCH_TABLE)
    offset = 2000
    for i, (pid, epoch, kind, n, seq) in enumerate(rows):
        n = 1 if kind >= 2 else n
        t[i] = (100 * i, 100, 2, (ATTR_TRANSACTIONAL if kind else 0) | (ATTR_CONTROL if kind >= 2 else 0),
                offset, offset + n - 1, 10 * i, 0, pid, epoch, seq, n,
                {2: Marker.COMMIT, 3: Marker.ABORT}.get(kind, Marker.NONE), i % 3, 10 * i + 1)
        offset += n
    return t


def _reference(rows, psm, txn_entries):  # type: ignore[no-untyped-def]
    """Kafka's loop: prepareUpdate, append, update, then LSO / txn index / completeTxn, one batch at a time."""
    for r in rows:
        info = psm.prepare_update(int(r["producer_id"]))
        completed = info.append(r, "x")
        psm.update(info)
        if completed is not None:
            lso = psm.last_stable_offset(completed)
            if completed.is_aborted:
                txn_entries.append((completed.producer_id, completed.first_offset, completed.last_offset, lso))
            psm.complete_txn(completed, "x")
    psm.map_end_offset = int(rows["last_offset"][-1]) + 1


def _state(psm: ProducerStateManager):  # type: ignore[no-untyped-def]
    return ({pid: (e.epoch, e.coordinator_epoch, e.last_timestamp, e.current_txn_first_offset, list(e.batches))
             for pid, e in psm.producers.items()}, list(psm.producers), dict(psm.ongoing), dict(psm.unreplicated),
            psm._table.order(), psm.map_end_offset)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(row, min_size=1, max_size=60), preexisting=st.lists(st.integers(0, 5), max_size=3))
def test_segment_update_matches_batch_by_batch(tmp_path_factory, rows, preexisting):  # type: ignore[no-untyped-def]
    d = str(tmp_path_factory.mktemp("psm"))
    a, b = (ProducerStateManager(Disk(), d, 86_400_000) for _ in range(2))
    for psm in (a, b):  # producers known before the segment, the first with an open transaction
        for i, pid in enumerate(dict.fromkeys(preexisting)):
            psm.append_data_batch(pid, 0, 1000 + i, 1000 + i, 0, 5, transactional=(i == 0), path="x")
    table = _table(rows)
    results = []
    for psm, apply in ((a, lambda t, p, tx: _apply_batches(t, p, None, tx, "x")), (b, _reference)):
        txn_entries: list = []
        try:
            apply(table, psm, txn_entries)
            results.append((None, txn_entries))
        except StartupFailedError as e:
            results.append((e.kafka_exception, None))
    assert results[0][0] == results[1][0]
    if results[0][0] is None:
        assert results[0][1] == results[1][1]
        assert _state(a) == _state(b)
