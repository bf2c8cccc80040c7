"""The recovery draft Phase 1 makes (mploader.scan.draft) against the batch-by-batch rules it stands for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mploader.scan import BATCH_TABLE, BatchColumns, draft_recovery

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


@settings(max_examples=300, deadline=None)
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
