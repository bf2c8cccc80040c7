"""Producer snapshots of millions of producers in bounded memory (recovery/producer_map.py): the map keeps a
snapshot's entries as its rows and writes them again in java.util.HashMap's order, with the outcome of Kafka's
entry-by-entry rules (the model of format/java_hashmap.py, one put at a time)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mploader.config import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from mploader.format.hashmap_order import put_order, spread_hashes, table_length
from mploader.format.java_hashmap import JavaLongHashMap, computed_hashmap_order, java_hashmap_order
from mploader.format.names import TopicPartition
from mploader.format.snapshot import (
    SNAPSHOT_ENTRY,
    ProducerSnapshotEntry,
    snapshot_bytes,
    snapshot_file_bytes,
    snapshot_rows,
)
from mploader.result import ProducerInfo
from tests.examples import examples
from tests.kafkadir import NOW, T0, B, P, PartitionBuilder, data_dir, load, name

TP = TopicPartition("t", 0)
ROOT = Path(__file__).resolve().parents[1]

# keys that share buckets: multiples of a power of two, and longs whose two halves cancel in Long.hashCode
colliding = st.one_of(st.integers(0, 300).map(lambda i: i * 1024), st.integers(0, 300).map(lambda i: i * 64),
                      st.integers(0, 200).map(lambda i: (i << 32) | (0x5A5A ^ i)), st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=examples(300), deadline=None)
@given(keys=st.lists(colliding, max_size=400, unique=True), capacity=st.sampled_from([16, 32, 64, 128, 1024]))
def test_put_order_is_the_models(keys: list[int], capacity: int) -> None:
    """The sort, with the model for the first keys and the treeified buckets, iterates as HashMap does."""
    model = JavaLongHashMap()
    model.capacity = capacity
    for k in keys:
        model.put(k)
    ids = np.array(keys, np.int64)
    order, length = put_order(spread_hashes(ids), capacity, lambda at: ids[at])
    assert ids[order].tolist() == model.order()
    assert length == model.capacity == table_length(len(keys), capacity, lambda at: ids[at])


def test_put_order_with_many_tree_bins() -> None:
    """Thousands of keys in few buckets: bins treeified, split by resizes, some untreeified again."""
    rng = np.random.default_rng(7)
    keys = list(dict.fromkeys((rng.integers(0, 40, 6000) * 4096 + rng.integers(0, 2, 6000) * 2**40).tolist()))
    keys += list(range(1, 3000))
    ids = np.array(keys, np.int64)
    order, _ = put_order(spread_hashes(ids), 16, lambda at: ids[at])
    assert ids[order].tolist() == java_hashmap_order(keys)


entry_fields = st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**15), 2**15 - 1),
                         st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1),
                         st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1),
                         st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=examples(100), deadline=None)
@given(fields=st.lists(entry_fields, max_size=50), cut=st.integers(0, 50))
def test_the_rows_writer_writes_what_the_entries_writer_does(fields: list[tuple[int, ...]], cut: int) -> None:
    entries = [ProducerSnapshotEntry(*f) for f in fields]
    data = snapshot_bytes(entries)
    rows = snapshot_rows(data)
    assert snapshot_file_bytes(len(rows), [rows[:cut], rows[cut:]]) == data


# ---- a small partition: the load's snapshot and report against Kafka's rules, entry by entry ----------------------

EXPIRED = NOW - DEFAULT_PRODUCER_ID_EXPIRATION_MS


def _snapshot_entries() -> list[ProducerSnapshotEntry]:
    """Colliding producer ids (tree bins), one listed twice, one expired, one open transaction, one without a batch
    whose other batch fields are not -1."""
    pids = [i * 1024 for i in range(1, 200)] + [i * 2**32 + 7 for i in range(60)]
    entries = [ProducerSnapshotEntry(p, 0, 3, 50 + i % 40, 1, T0 + 90, -1, -1) for i, p in enumerate(pids)]
    entries[5] = ProducerSnapshotEntry(pids[5], 2, 9, 60, 0, EXPIRED, 4, -1)  # expired: not loaded
    entries[6] = ProducerSnapshotEntry(pids[6], 1, 4, 70, 0, EXPIRED, 3, 75)  # open transaction: kept
    entries[7] = ProducerSnapshotEntry(pids[7], 0, 7, -1, 3, T0 + 80, -1, -5)  # no batch: written -1, -1, 0
    entries.append(ProducerSnapshotEntry(pids[9], 1, 11, 88, 2, T0 + 95, 2, -1))  # pids[9] again: this one wins
    return entries


def _segment_batches() -> list[tuple[int, int, int]]:
    """(offset, producer id, sequence): producers of the snapshot and new ones."""
    loaded = [i * 1024 for i in (1, 2, 9, 30, 150)] + [3 * 2**32 + 7]
    new = [5 * 1024 * 1024 + 1, 64, 3 * 2**40]
    pids = loaded + new
    return [(o, pids[(o - 100) % len(pids)], o) for o in range(100, 130)]


def _expected(clean: bool) -> dict[int, tuple[int, ...]]:
    """Kafka's producer map after the load, in put order: loadFromSnapshot's entries, then the segment's batches."""
    state: dict[int, tuple[int, ...]] = {}
    for e in _snapshot_entries():
        if e.current_txn_first_offset < 0 and NOW - e.timestamp >= DEFAULT_PRODUCER_ID_EXPIRATION_MS:
            continue
        no_batch = e.last_offset < 0
        state[e.producer_id] = (e.producer_id, e.epoch, -1 if no_batch else e.last_sequence,
                                -1 if no_batch else e.last_offset, 0 if no_batch else e.offset_delta, e.timestamp,
                                e.coordinator_epoch, max(e.current_txn_first_offset, -1))
    batches = _segment_batches()
    new = [p for p in dict.fromkeys(p for _, p, _ in batches) if p not in state]
    if clean:  # loadProducersFromRecords updates the map in the order of its computeIfAbsent HashMap
        order = computed_hashmap_order(dict.fromkeys(p for _, p, _ in batches))
        new = [p for p in order if p in new]
    state.update((p, ()) for p in new)
    for o, p, seq in batches:
        coordinator, txn = state[p][6:] if state[p] else (-1, -1)
        state[p] = (p, 0, seq, o, 0, T0 + o, coordinator, txn)
    return state


@pytest.mark.parametrize("clean", [False, True], ids=["recovered", "clean"])
def test_a_loaded_snapshot_is_written_again_as_kafka_writes_it(tmp_path: Path, clean: bool) -> None:
    """Recovered: the segment's manager loads the snapshot, applies the segment and writes 130.snapshot, which the
    log's manager then loads from memory.  Clean: the log's manager loads it, the segment, and writes."""
    d = data_dir(tmp_path, clean=clean, rp=[("t", 0, 100)])
    pb = PartitionBuilder(d).segment(0, *(B(o) for o in range(100)))
    pb.segment(100, *(P(o, pid, seq) for o, pid, seq in _segment_batches()))
    pb.write(name(100, ".snapshot"), snapshot_bytes(_snapshot_entries())).epochs((0, 0))

    log = load(d).logs[TP]

    expected = _expected(clean)
    order = java_hashmap_order(expected)
    assert pb.read(name(130, ".snapshot")) == snapshot_bytes([ProducerSnapshotEntry(*expected[p]) for p in order])
    assert log.producers == {p: ProducerInfo(*e) for p, e in expected.items()}
    # the report lists the producers in the order they were put: the log's manager loaded the recovered
    # segment's 130.snapshot, or the 100.snapshot and then the segment
    assert list(log.producers) == (list(expected) if clean else order)


# ---- a million producers: the memory a load takes ------------------------------------------------------------------

PRODUCERS = 1_000_000

CHILD = textwrap.dedent("""
    import dataclasses, json, resource, sys
    import numpy as np
    from mploader import LoaderConfig, load_logs
    import mploader.recovery.loader, mploader.recovery.producer_apply, mploader.recovery.producer_map  # noqa: F401
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = load_logs([sys.argv[1]], LoaderConfig(segment_scan_workers_per_data_dir=1), now_ms=int(sys.argv[2]))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    log = next(iter(result.logs.values()))
    print(json.dumps({"extra": (after - before) * 1024, "producers": len(log.producers),
                      "sample": [list(dataclasses.astuple(log.producers[pid]))
                                 for pid in map(int, sys.argv[3:])]}))
""")


def _million_producer_partition(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A snapshot of PRODUCERS producers at the base of a segment the load recovers (the recovery point): its
    manager loads them, applies the segment and writes them all again; the log's manager then holds them."""
    rng = np.random.default_rng(3)
    rows = np.zeros(PRODUCERS, SNAPSHOT_ENTRY)
    rows["producer_id"] = rng.permutation(np.unique(rng.integers(1, 2**40, PRODUCERS + PRODUCERS // 50)))[:PRODUCERS]
    rows["last_sequence"] = 3
    rows["last_offset"] = rng.integers(0, 100, PRODUCERS)
    rows["timestamp"] = T0 + 90
    rows["coordinator_epoch"] = -1
    rows["current_txn_first_offset"] = -1
    d = data_dir(tmp_path, clean=False, rp=[("t", 0, 100)])
    pb = PartitionBuilder(d).segment(0, *(B(o) for o in range(100)))
    pids = rows["producer_id"].tolist()
    pb.segment(100, *(P(o, pids[o * 7919 % PRODUCERS] if o % 2 else 2**41 + o, 5) for o in range(100, 200)))
    pb.write(name(100, ".snapshot"), snapshot_file_bytes(PRODUCERS, [rows])).epochs((0, 0))
    return d, rows


def test_a_snapshot_of_a_million_producers_loads_in_three_times_its_size(tmp_path: Path) -> None:
    """Reading the snapshot, holding its producers through recovery and writing them again take at most 3x the
    file's size of memory (peak RSS of a fresh process, over what it had once imported mploader)."""
    d, rows = _million_producer_partition(tmp_path)
    size = (d / "t-0" / name(100, ".snapshot")).stat().st_size
    untouched = [int(rows["producer_id"][i]) for i in (0, 1, PRODUCERS - 1)]
    out = subprocess.run([sys.executable, "-c", CHILD, str(d), str(NOW), *map(str, untouched)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert report["extra"] <= 3 * size, f"{report['extra'] / size:.2f}x the snapshot's {size} bytes"
    assert report["producers"] == PRODUCERS + 50
    written = snapshot_rows((d / "t-0" / name(200, ".snapshot")).read_bytes())
    assert len(written) == PRODUCERS + 50
    for fields in report["sample"]:  # a producer the segment did not touch: as the snapshot had it
        pid = fields[0]
        row = rows[rows["producer_id"] == pid][0]
        assert fields == [pid, 0, 3, int(row["last_offset"]), 0, T0 + 90, -1, -1]
        assert written[written["producer_id"] == pid][0].tolist() == row.tolist()
