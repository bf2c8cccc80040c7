"""File for file against Kafka's own loader: a few cases of perf/files_vs_kafka.py (the wide sweep and its figures:
perf/README.md, "File for file against Kafka's loader").

The cases that run Kafka's oracle (../shared/kafka-oracle, built into ~/.cache/kafka-oracle) are skipped where it
is absent, as on CI.  The comparison itself is tested without it: what it reports for a reordered snapshot, a
changed byte, a file only one side has, and what it leaves out (Kafka's pending ``*.deleted`` deletes).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mploader.format.snapshot import ProducerSnapshotEntry, snapshot_bytes
from perf.files_vs_kafka import (
    FAMILIES,
    HOUR_MS,
    Case,
    CaseResult,
    Corpus,
    Generated,
    compare_files,
    corpus_cases,
    generated_cases,
    run_case,
    scenario_results,
)
from perf.kafka_compare import find_oracle
from tests.conftest import materialize_corpus
from tests.fingerprint import changed, tree_state

ORACLE = find_oracle(None)
needs_oracle = pytest.mark.skipif(ORACLE is None, reason="Kafka's oracle (~/.cache/kafka-oracle/oracle) is not built")


def _entry(pid: int) -> ProducerSnapshotEntry:
    return ProducerSnapshotEntry(pid, 0, 5, 100 + pid, 0, 1_730_000_000_000, 0, -1)


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_comparison_reports_each_kind_of_difference_and_ignores_kafkas_pending_deletes(tmp_path: Path) -> None:
    same = {"p-0/00000000000000000000.log": b"log bytes", "meta.properties": b"version=1\n"}
    kafka = _write(tmp_path / "k", {
        **same, "p-0/00000000000000000007.snapshot": snapshot_bytes([_entry(1), _entry(17)]),
        "p-0/00000000000000000000.index": bytes(range(8)), "p-0/00000000000000000005.log.deleted": b"old",
    })
    mploader = _write(tmp_path / "m", {
        **same, "p-0/00000000000000000007.snapshot": snapshot_bytes([_entry(17), _entry(1)]),
        "p-0/00000000000000000000.index": bytes([0, 1, 2, 9, 4, 5, 6, 7]),
        "p-0/00000000000000000007.txnindex": b"", "p-0/00000000000000000006.log.deleted": b"left",
    })
    result = CaseResult("test", "tree", "")
    compare_files(kafka, mploader, result)
    lines = [d.line() for d in result.file_diffs]
    assert lines == [
        "p-0/00000000000000000000.index: Kafka 8 B, mploader 8 B; first difference at byte 3 (Kafka 0x03, "
        "mploader 0x09)",
        "p-0/00000000000000000006.log.deleted: Kafka absent, mploader 4 B",
        "p-0/00000000000000000007.snapshot: Kafka 102 B, mploader 102 B; the same 2 entries in another order, from "
        "entry 0: Kafka producer 1, mploader producer 17",
        "p-0/00000000000000000007.txnindex: Kafka absent, mploader 0 B",
    ]
    assert (result.kafka_pending_deletes, result.files, result.snapshots) == (1, 4, 1)


def test_comparison_names_the_producers_that_differ(tmp_path: Path) -> None:
    other = ProducerSnapshotEntry(17, 1, 5, 117, 0, 1_730_000_000_000, 0, -1)
    kafka = _write(tmp_path / "k", {"p-0/1.snapshot": snapshot_bytes([_entry(1), _entry(17)])})
    mploader = _write(tmp_path / "m", {"p-0/1.snapshot": snapshot_bytes([_entry(2), other])})
    result = CaseResult("test", "tree", "")
    compare_files(kafka, mploader, result)
    [diff] = result.file_diffs
    assert diff.detail == ("2 against 2 entries; producers only in Kafka's [1]; producers only in mploader's [2]; "
                           "1 producers differ, first 17: Kafka epoch=0, last_sequence=5, last_offset=117, "
                           "offset_delta=0, timestamp=1730000000000, coordinator_epoch=0, current_txn_first_offset=-1 "
                           "/ mploader epoch=1, last_sequence=5, last_offset=117, offset_delta=0, "
                           "timestamp=1730000000000, coordinator_epoch=0, current_txn_first_offset=-1")


def _generated(family: str, seed: int) -> Case:
    fam = FAMILIES[family]
    assert isinstance(fam, Generated)
    [case] = generated_cases(family, fam, [seed], int(time.time() * 1000) // HOUR_MS * HOUR_MS)
    return case


def _assert_same(result: CaseResult) -> None:
    assert result.kafka_outcome == "loaded"
    assert not result.file_diffs, [d.line() for d in result.file_diffs]
    assert not result.result_diffs, result.result_diffs
    assert result.snapshots > 0


@needs_oracle
@pytest.mark.parametrize(("family", "seed"), [
    ("unclean-rp0", 3),  # damaged segments cut, later segments deleted (Kafka's pending deletes)
    ("clean-nosnap", 2),  # Kafka's clean-start shortcut: empty snapshots, the log not read
    ("fresh-clean", 1),  # snapshots read at load, no producer expired
    ("producers-rp0", 3),  # 96 idempotent producers a partition: HashMaps of 128 slots and more
    ("producers-clean-nosnap", 5),  # 400
])
def test_generated_broker_is_left_as_kafka_leaves_it(family: str, seed: int, tmp_path: Path) -> None:
    assert ORACLE is not None
    result = run_case(_generated(family, seed), ORACLE, tmp_path)
    _assert_same(result)
    if family == "unclean-rp0":  # the cut's deletes are Kafka's pending *.deleted files: compared as gone
        assert result.kafka_pending_deletes > 0
    # Kafka's load changed files (recovered, rebuilt, deleted, wrote snapshots): mploader matched real work
    assert changed(tree_state(tmp_path / "pristine" / "data-0"), tree_state(tmp_path / "kafka"))


@needs_oracle
def test_whole_partitions_in_workers_leave_the_broker_as_kafka_leaves_it(tmp_path: Path) -> None:
    """The path ``auto`` takes on a big broker (``--partition-workers``): the same files as Kafka's loader."""
    assert ORACLE is not None
    result = run_case(_generated("producers-unclean", 4), ORACLE, tmp_path, partition_workers=2)
    _assert_same(result)
    assert changed(tree_state(tmp_path / "pristine" / "data-0"), tree_state(tmp_path / "kafka"))


@needs_oracle
def test_real_corpus_dir_recovered_from_scratch_is_left_as_kafka_leaves_it(real_corpus_source: Path,
                                                                           tmp_path: Path) -> None:
    """A real broker's dir (VolodymyrZee: a clean marker yet 10 MiB preallocated active indexes, producer
    snapshots), marker and recovery-point checkpoint removed: every segment recovered by both loaders."""
    assert ORACLE is not None
    fam = FAMILIES["corpus-unclean"]
    assert isinstance(fam, Corpus)
    corpus = materialize_corpus(real_corpus_source, tmp_path / "corpus")
    [case] = corpus_cases("corpus-unclean", fam, corpus, "VolodymyrZee")
    (tmp_path / "case").mkdir()
    _assert_same(run_case(case, ORACLE, tmp_path / "case"))


@needs_oracle
def test_scenario_tests_loads_are_compared(tmp_path: Path) -> None:
    """The scenarios family: a scenario test run with the plugin, its one load compared (S54: epochs assigned by
    the first batch of each higher epoch), the test passing as without it."""
    assert ORACLE is not None
    node = "tests/scenarios/test_f_epochs.py::test_s54_only_first_batch_of_each_higher_epoch_assigned"
    [result], note = scenario_results(ORACLE, node, tmp_path, keep=False)
    assert result.label == f"{node} load 1"
    _assert_same(result)
    assert note.endswith("1 passed") or "1 passed in" in note, note
