"""Shared fixtures.

``real_corpus`` materialises the third-party Kafka data directories of ``shared/corpus/real``
(see its README) once per test session into a temporary directory: tests must never read or
load the shared folder itself, since loading recovers and rewrites files.  ``--no-verify``
mode is used (the git-blob check of the 585 recreated preallocated index files takes ~4 s;
the corpus itself is read-only and was verified when it was collected), so materialising
takes well under a second.  Preallocated index files are recreated sparse.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests.examples import PROFILE

_REPO = Path(__file__).resolve().parents[1]


def _corpus_source() -> Path | None:
    candidates = [os.environ.get("MPLOADER_REAL_CORPUS"), _REPO / "shared" / "corpus" / "real",
                  _REPO.parent / "shared" / "corpus" / "real"]
    for c in candidates:
        if c and (Path(c) / "ANALYSIS.json").is_file() and (Path(c) / "materialize.py").is_file():
            return Path(c)
    return None


# property tests: the full profile in CI, a smaller one locally (tests/examples.py scales explicit counts alike)
settings.register_profile("ci", settings.get_profile("default"))
settings.register_profile("dev", max_examples=20)
settings.load_profile(PROFILE)


# the quick loop (scripts/test --quick, or pytest -m quick): the lower floors and the scenarios, in process, under a
# minute on the project's 2-core machine; the rest starts processes, Spark, real devices or bigger brokers
QUICK = frozenset({"scenarios", "test_format_basics.py", "test_format_errors.py", "test_scan.py",
                   "test_walk_size_field.py", "test_config.py", "test_epoch_cache.py", "test_index_rebuild_model.py",
                   "test_producer_state.py", "test_draft.py", "test_snapshot_files.py", "test_layering.py",
                   "test_disk.py", "test_preflight.py", "test_index_check.py"})


# scripts/test's second pass (MPLOADER_TEST_PASS=2: the Python walk, spawned workers) skips the tests marked one_pass,
# whose outcome neither changes (a real Spark cluster: a minute of JVMs, run once)
SECOND_PASS = os.environ.get("MPLOADER_TEST_PASS") == "2"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(_REPO / "tests").parts
        if parts[0] in QUICK:
            item.add_marker(pytest.mark.quick)
        if SECOND_PASS and item.get_closest_marker("one_pass") is not None:
            item.add_marker(pytest.mark.skip(reason="one_pass: run in scripts/test's first pass only"))


@pytest.fixture(autouse=True)
def workers_scan_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's data sets are far smaller than the head of the order the parent keeps for itself
    (PARENT_HEAD_BYTES): without this a test's pool would get no task, and a test "with 2 workers"
    would test the inline scans.  A test of the head sets it itself."""
    from mploader.engine.pool import PoolEngine

    monkeypatch.setattr(PoolEngine, "parent_head_bytes", 0)


@pytest.fixture(scope="session")
def real_corpus_source() -> Path:
    """The read-only corpus folder (for its documentation files only: ANALYSIS.json, *.tsv)."""
    src = _corpus_source()
    if src is None:
        pytest.skip("real Kafka corpus (shared/corpus/real) not available")
    return src


@pytest.fixture(scope="session")
def real_corpus(real_corpus_source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private, writable copy of the real corpus, materialised once per session."""
    spec = importlib.util.spec_from_file_location("_corpus_materialize", real_corpus_source / "materialize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dest = tmp_path_factory.mktemp("real_corpus")
    module.materialize(real_corpus_source, dest, verify=False)
    return dest


@pytest.fixture(scope="session")
def real_corpus_analysis(real_corpus_source: Path) -> dict[str, Any]:
    """ANALYSIS.json: per-``.log`` statistics of the independent kafka-python pass."""
    with open(real_corpus_source / "ANALYSIS.json") as f:
        return json.load(f)


def materialize_corpus(source: Path, dest: Path) -> Path:
    """A fresh writable copy of the real corpus in ``dest`` (loading rewrites files: one per test)."""
    spec = importlib.util.spec_from_file_location("_corpus_materialize_fresh", source / "materialize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.materialize(source, dest, verify=False)
    return dest


def corpus_data_dirs(root: Path) -> list[Path]:
    """The broker data dirs of a materialised corpus: every directory holding a meta.properties."""
    return sorted(Path(dirpath) for dirpath, _, files in os.walk(root) if "meta.properties" in files)


@pytest.fixture
def fresh_real_corpus(real_corpus_source: Path, tmp_path: Path) -> Path:
    """A private copy of the real corpus for tests that load (and so modify) it."""
    return materialize_corpus(real_corpus_source, tmp_path / "corpus")
