"""The vectorised producer-state update of a run of data batches equals Kafka's batch-by-batch rule."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mploader.disk import Disk
from mploader.errors import StartupFailedError
from mploader.producer_state import ProducerStateManager

row = st.tuples(st.integers(0, 4), st.integers(0, 2), st.booleans(), st.integers(1, 3), st.integers(-1, 2**31 - 1))


def _state(psm: ProducerStateManager):  # type: ignore[no-untyped-def]
    return ({pid: (e.epoch, e.last_timestamp, e.current_txn_first_offset, list(e.batches))
             for pid, e in psm.producers.items()}, list(psm.producers), dict(psm.ongoing), psm._table.order())


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(row, min_size=1, max_size=40), preexisting=st.lists(st.integers(0, 4), max_size=3))
def test_append_data_run_matches_batch_by_batch(tmp_path_factory, rows, preexisting):  # type: ignore[no-untyped-def]
    d = str(tmp_path_factory.mktemp("psm"))
    a, b = (ProducerStateManager(Disk(), d, 86_400_000) for _ in range(2))
    for psm in (a, b):  # some producers known before the run, one with an open transaction
        for i, pid in enumerate(dict.fromkeys(preexisting)):
            psm.append_data_batch(pid, 0, 1000 + i, 1000 + i, 0, 5, transactional=(i == 0), path="x")
    pid = np.array([r[0] for r in rows], np.int64)
    epoch = np.array([r[1] for r in rows], np.int16)
    txn = np.array([r[2] for r in rows], bool)
    counts = np.array([r[3] for r in rows], np.int64)
    base = 2000 + np.concatenate(([0], np.cumsum(counts)[:-1]))
    last = base + counts - 1
    seq = np.array([r[4] for r in rows], np.int32)
    ts = 10 * np.arange(len(rows), dtype=np.int64)
    error_a = error_b = None
    try:
        for i in range(len(rows)):
            a.append_data_batch(int(pid[i]), int(epoch[i]), int(base[i]), int(last[i]), int(seq[i]), int(ts[i]),
                                bool(txn[i]), "x")
    except StartupFailedError as e:
        error_a = e.kafka_exception
    try:
        b.append_data_run(pid, epoch, base, last, seq, ts, txn, "x")
    except StartupFailedError as e:
        error_b = e.kafka_exception
    assert error_a == error_b
    if error_a is None:
        assert _state(a) == _state(b)
