"""``index_check="sanity" | "full"``: an index of a segment the load does not recover that fails is rebuilt
exactly as Kafka's recovery writes it, and nothing else differs from the ``kafka`` mode's outcome."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mploader import LoaderConfig, load_logs
from mploader.format import index, names
from mploader.generate import GeneratorConfig, generate
from mploader.result import LoadResult
from tests.conftest import corpus_data_dirs, materialize_corpus
from tests.fingerprint import tree_state

SMALL = GeneratorConfig(
    data_dirs=1, topics=2, partitions_per_topic=2, total_bytes=700_000, segment_bytes=64 * 1024, batch_bytes=4096,
    records_per_batch=8, transactional_fraction=0.3, idempotent_fraction=0.4, leader_epoch_changes=2, faults=0,
    seed=21,
)
MODES = ("kafka", "sanity", "full")


@pytest.fixture(scope="module")
def clean_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("index-check") / "b"
    generate(out, SMALL.replace(clean_shutdown=True))
    return out / "data-0"


def _copies(src: Path, tmp_path: Path, names_: tuple[str, ...] = MODES) -> dict[str, Path]:
    out = {}
    for n in names_:
        shutil.copytree(src, tmp_path / n / src.name)
        out[n] = tmp_path / n / src.name
    return out


def _load(d: Path, mode: Any, workers: int = 1, dry_run: bool = False) -> LoadResult:
    cfg = LoaderConfig(index_check=mode, segment_scan_workers_per_data_dir=workers, dry_run=dry_run)
    return load_logs([d], cfg, now_ms=1_800_000_000_000)


def _outcome(result: LoadResult) -> list[dict[str, Any]]:
    """Every log's reported outcome but its index checks and where it lives."""
    logs = sorted(result.all_logs(), key=lambda lg: os.path.basename(lg.dir))
    return [{k: v for k, v in lg.to_json().items() if k not in ("index_checks", "dir")} for lg in logs]


def _rebuilt(result: LoadResult) -> set[str]:
    return {os.path.join(os.path.basename(lg.dir), c["file"]) for lg in result.all_logs() for c in lg.index_checks
            if c["action"] == "rebuilt from the log"}


def _same_data_as_kafka(dirs: dict[str, Path], results: dict[str, LoadResult]) -> None:
    """Every mode's outcome is the kafka mode's, file for file, but for the index files it rebuilt."""
    kafka_files = tree_state(dirs["kafka"])
    for mode in MODES[1:]:
        assert _outcome(results[mode]) == _outcome(results["kafka"]), mode
        files = tree_state(dirs[mode])
        rebuilt = _rebuilt(results[mode])
        assert set(files) == set(kafka_files), mode
        assert {p for p in files if files[p] != kafka_files[p]} <= rebuilt, mode


def _segment_with_entries(d: Path, suffix: str, n: int = 3) -> Path:
    size = 8 if suffix == names.INDEX_SUFFIX else 12
    partition = sorted(p for p in d.iterdir() if p.is_dir())[0]
    files = sorted(partition.glob("*" + suffix))
    return next(p for p in files[:-1] if p.stat().st_size >= n * size)  # not the active segment


def _kafka_rebuilt_bytes(src: Path, tmp_path: Path, idx: Path) -> tuple[bytes, bytes]:
    """What Kafka's own recovery writes for ``idx``'s segment: load a copy whose ``.index`` is removed (Kafka
    recovers the segment at load and rebuilds both indexes)."""
    ref = tmp_path / "reference" / src.name
    shutil.copytree(src, ref)
    rel = idx.relative_to(src)
    (ref / rel.with_suffix(names.INDEX_SUFFIX)).unlink()
    _load(ref, "kafka")
    return (ref / rel.with_suffix(names.INDEX_SUFFIX)).read_bytes(), (ref / rel.with_suffix(
        names.TIME_INDEX_SUFFIX)).read_bytes()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_torn_index_is_left_by_kafka_and_rebuilt_by_sanity_and_full(clean_source: Path, tmp_path: Path,
                                                                      workers: int) -> None:
    dirs = _copies(clean_source, tmp_path)
    idx = _segment_with_entries(clean_source, names.INDEX_SUFFIX)
    rel = idx.relative_to(clean_source)
    for d in dirs.values():
        os.truncate(d / rel, idx.stat().st_size - 3)
    torn = (dirs["kafka"] / rel).read_bytes()
    results = {m: _load(d, m, workers) for m, d in dirs.items()}
    assert (dirs["kafka"] / rel).read_bytes() == torn and not _rebuilt(results["kafka"])  # Kafka never reads it
    expected = _kafka_rebuilt_bytes(clean_source, tmp_path, idx)
    for mode in ("sanity", "full"):
        checks = [c for lg in results[mode].all_logs() for c in lg.index_checks]
        assert [(c["file"], "not a multiple of 8" in c["problem"]) for c in checks] == [(idx.name, True)], mode
        assert (dirs[mode] / rel).read_bytes() == expected[0], mode
        assert (dirs[mode] / rel.with_suffix(names.TIME_INDEX_SUFFIX)).read_bytes() == expected[1], mode
        assert results[mode].stats.unplanned_scans == 0 or mode == "sanity"
    _same_data_as_kafka(dirs, results)


def test_swapped_entries_pass_sanity_and_fail_full(clean_source: Path, tmp_path: Path) -> None:
    dirs = _copies(clean_source, tmp_path)
    idx = _segment_with_entries(clean_source, names.INDEX_SUFFIX)
    rel = idx.relative_to(clean_source)
    for d in dirs.values():
        entries = np.fromfile(d / rel, index.OFFSET_ENTRY)
        entries[[0, 1]] = entries[[1, 0]]
        entries.tofile(d / rel)
    results = {m: _load(d, m) for m, d in dirs.items()}
    assert not _rebuilt(results["sanity"])  # the old checks look at the last entry and the length only
    assert _rebuilt(results["full"]) == {str(rel)}
    assert (dirs["full"] / rel).read_bytes() == _kafka_rebuilt_bytes(clean_source, tmp_path, idx)[0]
    _same_data_as_kafka(dirs, results)


def test_preallocated_time_index_is_not_corrupt_to_sanity(clean_source: Path, tmp_path: Path) -> None:
    """Kafka's TimeIndex.sanityCheck reads the last slot of a preallocated .timeindex (timestamp 0) and calls
    the file corrupt (seed 002); the sanity mode judges the last written entry."""
    d = _copies(clean_source, tmp_path, ("sanity",))["sanity"]
    tidx = _segment_with_entries(d, names.TIME_INDEX_SUFFIX)
    os.truncate(tidx, index.round_down(10 * 1024 * 1024, 12))
    entries = np.fromfile(tidx, index.TIME_ENTRY)
    base = names.offset_from_file_name(tidx.name)
    assert index.time_index_problem(str(tidx), base, tidx.stat().st_size, entries) is not None  # Kafka's rule
    assert not [c for lg in _load(d, "sanity").all_logs() for c in lg.index_checks]


def test_a_dry_run_with_full_checks_changes_nothing(clean_source: Path, tmp_path: Path) -> None:
    d = _copies(clean_source, tmp_path, ("full",))["full"]
    idx = _segment_with_entries(d, names.INDEX_SUFFIX)
    os.truncate(idx, idx.stat().st_size - 3)
    before = tree_state(d)
    result = _load(d, "full", dry_run=True)
    assert tree_state(d) == before
    assert [c["action"] for lg in result.all_logs() for c in lg.index_checks] == ["rebuilt from the log"]


def test_every_mode_keeps_kafkas_data_on_generated_faults(tmp_path: Path) -> None:
    out = tmp_path / "src"
    generate(out, SMALL.replace(faults=6, seed=4))
    dirs = _copies(out / "data-0", tmp_path)
    results = {m: _load(d, m) for m, d in dirs.items()}
    _same_data_as_kafka(dirs, results)


def test_every_mode_keeps_kafkas_data_on_the_real_corpus(real_corpus_source: Path, tmp_path: Path) -> None:
    copies = {m: materialize_corpus(real_corpus_source, tmp_path / m) for m in MODES}
    for src in corpus_data_dirs(copies["kafka"]):
        rel = src.relative_to(copies["kafka"])
        dirs = {m: copies[m] / rel for m in MODES}
        try:
            results = {m: _load(d, m) for m, d in dirs.items()}
        except Exception as e:  # a broker that fails to start on a dir fails in every mode alike
            for m in MODES[1:]:
                with pytest.raises(type(e)):
                    _load(dirs[m], m)
            continue
        _same_data_as_kafka(dirs, results)
