"""The many-core engine: the same outcome for every N, and nothing left behind.

``segment_scan_workers_per_data_dir = N`` moves Phase 1 (read-only segment scans) into N
loky workers per data dir; Phase 2 (everything that writes) stays in the parent.  What a load
decides and writes must not depend on N:

* :class:`EngineConformance` loads each data set -- generated clean / unclean / unclean with
  faults, a clean one whose index files are damaged, a partition whose big segments are cut into
  chunks (some with a corrupt chunk), and the real corpus -- with the engine under test, and
  compares the whole result (``to_json()`` minus the engine-dependent stats, plus every
  LoadedLog field) and every byte on disk with an inline (N=1) load of an identical copy.
  ``TestInlineEngine`` / ``TestPoolEngine2`` / ``TestPoolEngine4`` run it for N = 1, 2, 4.
* Phase 1 descriptors are small: the pickled bytes per task do not grow with the batch count.
* No shared-memory block outlives a load (success, exception, KeyboardInterrupt, dead worker):
  ``/dev/shm`` (the load's ``mploader-<pid>-*`` blocks and owner marker, named after its process
  and its workers, and loky's ``sem.loky-<pid>-*`` semaphores of a child) and Python's
  resource-tracker warnings are checked, in subprocesses where the interpreter's exit matters.
  Only what the load under test made is looked at: other loads may run on the machine meanwhile.
* A worker that dies (``os._exit``, SIGSEGV, SIGKILL, MemoryError) neither hangs nor fails the
  load: its tasks are retried once on a fresh worker, then scanned inline
  (``tests/crashy_worker.py`` makes workers die on demand).
* ``remainingSegmentsToLoad{dir, threadNum}`` exists exactly while a load with N > 1 runs.
* ``"auto"`` picks N from the usable CPUs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.examples import examples

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # ``from tests...`` however pytest was started
    sys.path.insert(0, str(_ROOT))

import mploader.engine.base as base_mod  # noqa: E402
import mploader.engine.chunks as chunks_mod  # noqa: E402
import mploader.engine.plan as plan_mod  # noqa: E402
import mploader.engine.pool as pool_mod  # noqa: E402
import mploader.load_plan as load_plan_mod  # noqa: E402
import mploader.runners.threads as threads_mod  # noqa: E402
from mploader import LoaderConfig, MetricsRegistry, StartupFailedError, load_logs  # noqa: E402
from mploader.engine import ONE_BLAS_THREAD, WORKER_STARTS, worker_start  # noqa: E402
from mploader.engine.base import Engine  # noqa: E402
from mploader.engine.chunks import chunk_boundaries  # noqa: E402
from mploader.engine.inline import InlineEngine  # noqa: E402
from mploader.engine.pool import PoolEngine  # noqa: E402
from mploader.engine.worker import WORKER_NAME  # noqa: E402
from mploader.format import names, records  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from mploader.load_plan import (  # noqa: E402
    LoadPlan,  # noqa: E402
    make_engine,
    workers_per_dir,
)
from mploader.metrics import REMAINING_LOGS_TO_RECOVER, REMAINING_SEGMENTS_TO_LOAD  # noqa: E402
from mploader.progress import NO_PROGRESS  # noqa: E402
from mploader.result import LoadStats  # noqa: E402
from tests.conftest import corpus_data_dirs, materialize_corpus  # noqa: E402
from tests.crashy_worker import (  # noqa: E402
    is_scan_worker,
    pool_pids,
    relabel,
    result_digest,
    shm_blocks,
    tree_digest,
)
from tests.kafkadir import (  # noqa: E402
    NOW,
    B,
    PartitionBuilder,
    batch_facts,
    data_dir,
    flip_bit,
    name as file_name,
    overwrite_bytes,
    txn_entry,
)

GEN_NOW = 1_730_000_000_000 + 600_000  # a few minutes after the generator's first batch
SMALL = GeneratorConfig(
    data_dirs=2, topics=2, partitions_per_topic=3, total_bytes=1_200_000, segment_bytes=64 * 1024,
    batch_bytes=4096, records_per_batch=8, index_interval_bytes=4096, transactional_fraction=0.4,
    idempotent_fraction=0.4, abort_fraction=0.4, max_transaction_batches=3, leader_epoch_changes=4,
    producer_restart_probability=0.02, delete_records_fraction=0.5, faults=0, seed=11,
)
# for the KeyboardInterrupt tests: one data dir, 16 partitions, ~16 MB
BIGGER = GeneratorConfig(data_dirs=1, topics=4, partitions_per_topic=4, total_bytes=16_000_000,
                         segment_bytes=256 * 1024, batch_bytes=4096, records_per_batch=8, faults=6, seed=3)

CHUNK = 128 * 1024  # chunk_bytes of the chunked data set (engine default: 64 MiB)
BIG_VALUE = bytes(range(256)) * 4  # 1 KiB of non-zero bytes per batch
BIG_BATCHES = 600  # ~630 KiB big segments: 4 cuts at CHUNK


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    for k in [k for k in env if k.startswith("CRASHY_")]:
        del env[k]
    env.update(extra)
    return env


def copy_tree(src: Path, dest: Path) -> None:
    """A copy that keeps sparse files sparse (the corpus holds ~6 GB of preallocated zeros)."""
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dest)], check=True)


# ------------------------------------------------------------------------------------------------
# Data sets: built once per session into a template, loaded from fresh copies


def build_generated(cfg: GeneratorConfig) -> Callable[[Path, pytest.FixtureRequest], list[list[str]]]:
    def build(root: Path, request: pytest.FixtureRequest) -> list[list[str]]:
        summary = generate(root / "broker", cfg)
        return [[os.path.relpath(d, root) for d in summary.data_dirs]]  # one broker, all its dirs

    return build


def build_corpus(root: Path, request: pytest.FixtureRequest) -> list[list[str]]:
    source = request.getfixturevalue("real_corpus_source")
    materialize_corpus(source, root / "corpus")
    # every data dir is another broker's (same topic names): one load per dir
    return [[os.path.relpath(d, root)] for d in corpus_data_dirs(root / "corpus")]


def _big_segment(pb: PartitionBuilder, base: int, tail: bytes = b"") -> tuple[Path, list[int], list[Any]]:
    """A segment of BIG_BATCHES 1 KiB batches from ``base``; returns its path, chunk cuts, batches."""
    pb.segment(base, *(B(o, value=BIG_VALUE) for o in range(base, base + BIG_BATCHES)))
    path = pb.file(base, ".log")
    data = path.read_bytes()
    cuts = chunks_mod.chunk_boundaries(str(path), base, len(data), CHUNK)
    assert len(cuts) >= 3, f"expected at least 3 cuts in {path}, got {cuts}"
    if tail:
        with open(path, "ab") as f:
            f.write(tail)
    return path, cuts, batch_facts(data)


def build_chunked(root: Path, request: pytest.FixtureRequest) -> list[list[str]]:
    """One unclean data dir (no checkpoints: every segment is recovered) whose partitions have big
    segments that the pool cuts into ~5 chunks of CHUNK bytes at confirmed index positions, and
    damage at chunk boundaries.  ``expected_valid.json`` says where valid data must end."""
    d = data_dir(root, "d1", clean=False)
    expected: dict[str, dict[str, int]] = {}

    def small(pb: PartitionBuilder, base: int, n: int = 10) -> None:
        pb.segment(base, *(B(o) for o in range(base, base + n)))

    # intact: 2 small rolled segments, a big active one
    pb = PartitionBuilder(d, "intact", 0)
    small(pb, 0), small(pb, 10)
    _big_segment(pb, 20)

    # a flipped byte inside a batch in the middle of chunk 1: that batch and everything after it
    # (the rest of chunk 1 and chunks 2..) is truncated
    pb = PartitionBuilder(d, "midchunk", 0)
    small(pb, 0), small(pb, 10)
    path, cuts, facts = _big_segment(pb, 20)
    inside = [f for f in facts if cuts[0] < f.position and f.position + f.size < cuts[1]]
    victim = inside[len(inside) // 2]
    flip_bit(path, victim.position + 100)
    expected["midchunk-0"] = {"segment": 20, "valid": victim.position}

    # the first batch of chunk 2 (at the cut itself) is corrupt: chunk 1 ends cleanly at the cut,
    # nothing of chunks 2.. survives
    pb = PartitionBuilder(d, "atcut", 0)
    small(pb, 0), small(pb, 10)
    path, cuts, facts = _big_segment(pb, 20)
    flip_bit(path, cuts[1] + 100)
    expected["atcut-0"] = {"segment": 20, "valid": cuts[1]}

    # the last batch of chunk 0 claims 100 more bytes: it runs past the cut (the chunk scan ends
    # "incomplete" there) and its CRC no longer matches (the continuous walk stops there)
    pb = PartitionBuilder(d, "overrun", 0)
    small(pb, 0), small(pb, 10)
    path, cuts, facts = _big_segment(pb, 20)
    last = next(f for f in facts if f.position + f.size == cuts[0])
    overwrite_bytes(path, last.position + 8, (last.size - 12 + 100).to_bytes(4, "big"))
    expected["overrun-0"] = {"segment": 20, "valid": last.position}

    # a big *rolled* segment, corrupt in chunk 1, followed by a small one: truncated, and the
    # later segment deleted (recoverLog)
    pb = PartitionBuilder(d, "rolled", 0)
    path, cuts, facts = _big_segment(pb, 0)
    small(pb, BIG_BATCHES)
    victim = next(f for f in facts if f.position > cuts[0] and f.position + f.size < cuts[1])
    flip_bit(path, victim.position + 200)
    expected["rolled-0"] = {"segment": 0, "valid": victim.position}

    # a zero-filled tail (a preallocated active segment) after the last chunk's real data
    pb = PartitionBuilder(d, "zerotail", 0)
    small(pb, 0)
    path, cuts, facts = _big_segment(pb, 10, tail=bytes(200 * 1024))
    expected["zerotail-0"] = {"segment": 10, "valid": facts[-1].position + facts[-1].size}

    # header damage at a cut that the index still points to: a magic byte of 3 (not CRC-covered)
    # and a wrong base offset (not CRC-covered): chunk_boundaries must stop cutting there
    pb = PartitionBuilder(d, "badmagic", 0)
    small(pb, 0)
    path, cuts, facts = _big_segment(pb, 10)
    overwrite_bytes(path, cuts[1] + 16, b"\x03")
    pb = PartitionBuilder(d, "badoffset", 0)
    small(pb, 0)
    path, cuts, facts = _big_segment(pb, 10)
    head = path.read_bytes()[cuts[1] : cuts[1] + 8]
    overwrite_bytes(path, cuts[1], (int.from_bytes(head, "big") + 7).to_bytes(8, "big"))

    (root / "expected_valid.json").write_text(json.dumps(expected))
    return [[os.path.relpath(d, root)]]


@dataclass(frozen=True)
class DataSet:
    name: str
    build: Callable[[Path, pytest.FixtureRequest], list[list[str]]]
    now_ms: int
    recovery_threads: int = 1
    chunk_bytes: int | None = None  # set on the PoolEngine (make_engine does not pass one)
    pool_work: bool = True  # the pool engine must have scanned something


GEN_CLEAN = DataSet("generated-clean", build_generated(SMALL.replace(clean_shutdown=True, seed=12)), GEN_NOW,
                    pool_work=False)
GEN_CLEAN_INDEX_FAULTS = DataSet(
    "generated-clean-index-faults",
    build_generated(SMALL.replace(clean_shutdown=True, seed=13, faults=10,
                                  fault_kinds=("missing_index", "corrupt_index", "truncated_index",
                                               "orphaned_index", "stray_files"))), GEN_NOW)
GEN_UNCLEAN = DataSet("generated-unclean", build_generated(SMALL), GEN_NOW)
GEN_FAULTS = DataSet("generated-faults", build_generated(SMALL.replace(faults=30, seed=5, topics=3)), GEN_NOW,
                     recovery_threads=2)
CHUNKED = DataSet("chunked", build_chunked, NOW, chunk_bytes=CHUNK)
CORPUS = DataSet("real-corpus", build_corpus, NOW)
BIGGER_DS = DataSet("bigger", build_generated(BIGGER), GEN_NOW)


@dataclass
class Outcome:
    results: list[dict[str, Any]]  # per load group: result digest, or the StartupFailedError
    tree: dict[str, Any]  # every file (size, sha256) and directory under the copy's root
    raw: list[Any]  # the LoadResults (None for a failed group)


def load_copy(ds: DataSet, root: Path, groups: list[list[str]], n: int | str) -> Outcome:
    results, raw = [], []
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=n,  # type: ignore[arg-type]
                       num_recovery_threads_per_data_dir=ds.recovery_threads)
    for group in groups:
        try:
            r = load_logs([str(root / d) for d in group], cfg, now_ms=ds.now_ms)
        except StartupFailedError as e:
            results.append({"error": relabel([type(e).__name__, e.kafka_exception, str(e)], root)})
            raw.append(None)
            continue
        results.append(result_digest(r, root))
        raw.append(r)
    return Outcome(results, tree_digest(root), raw)


class DataSets:
    """Templates (built once) and inline reference outcomes (computed once) per data set."""

    def __init__(self, factory: pytest.TempPathFactory):
        self.factory = factory
        self.templates: dict[str, tuple[Path, list[list[str]]]] = {}
        self.references: dict[str, Outcome] = {}

    def template(self, ds: DataSet, request: pytest.FixtureRequest) -> tuple[Path, list[list[str]]]:
        if ds.name not in self.templates:
            root = self.factory.mktemp(f"{ds.name}-template")
            groups = ds.build(root, request)
            self.templates[ds.name] = (root, groups)
        return self.templates[ds.name]

    def fresh_copy(self, ds: DataSet, request: pytest.FixtureRequest, label: str) -> tuple[Path, list[list[str]]]:
        template, groups = self.template(ds, request)
        dest = self.factory.mktemp(f"{ds.name}-{label}") / "root"
        copy_tree(template, dest)
        return dest, groups

    def reference(self, ds: DataSet, request: pytest.FixtureRequest) -> Outcome:
        """The inline (N=1) outcome, on its own copy."""
        if ds.name not in self.references:
            root, groups = self.fresh_copy(ds, request, "reference")
            self.references[ds.name] = load_copy(ds, root, groups, 1)
        return self.references[ds.name]


@pytest.fixture(scope="session")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> DataSets:
    return DataSets(tmp_path_factory)


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where two JSON-like values first differ (for a readable assertion message)."""
    if type(a) is not type(b):
        return f"{where}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(a.keys() | b.keys(), key=str):
            if k not in a or k not in b:
                return f"{where}/{k}: only in {'reference' if k in b else 'engine'}"
            d = first_difference(a[k], b[k], f"{where}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{where}: {a!r} != {b!r}"


def _without_stats(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "stats"} for r in results]


def assert_same_outcome(got: Outcome | dict[str, Any], ref: Outcome, *, stats: bool = True) -> None:
    """The same result (what was loaded first, then the engine-independent stats) and the same
    bytes on disk.  ``stats=False``: leave the stats to :func:`assert_same_stats`."""
    got_results = got.results if isinstance(got, Outcome) else got["results"]
    got_tree = got.tree if isinstance(got, Outcome) else got["tree"]
    diff = first_difference(_without_stats(got_results), _without_stats(ref.results), "result")
    assert diff is None, f"the result differs from the inline reference at {diff}"
    diff = first_difference(got_tree, ref.tree, "disk")
    assert diff is None, f"the bytes on disk differ from the inline reference at {diff}"
    if stats:
        assert_same_stats(got_results, ref)


def assert_same_stats(got_results: list[dict[str, Any]], ref: Outcome) -> None:
    diff = first_difference([r.get("stats") for r in got_results], [r.get("stats") for r in ref.results], "stats")
    assert diff is None, f"the stats differ from the inline reference at {diff}"


class BlockSpy:
    """Records every shared-memory block a PoolEngine creates in this process, and the processes whose
    names the load's blocks could carry (``owners``: this one and the workers seen as blocks were created)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.names: list[str] = []
        self.owners: set[int] = {os.getpid()}
        real = PoolEngine._new_block

        def new_block(engine: PoolEngine, nbytes_range: int):  # type: ignore[no-untyped-def]
            block, capacity = real(engine, nbytes_range)
            self.names.append(block.name.lstrip("/"))
            self.owners |= pool_pids(engine)
            return block, capacity

        monkeypatch.setattr(PoolEngine, "_new_block", new_block)


def assert_no_new_blocks(before: set[str], created: list[str], owners: set[int]) -> None:
    """No block this load created is left (strict: the names were recorded as they were created),
    and no other block named after the load's processes (``owners``: the loading process and its
    workers) appeared in /dev/shm: a new one gets 3 s to go away before it counts.  Only the load's
    own names are looked at: other loads on the machine (other test sessions, an operator's
    ``mploader load``) come and go in /dev/shm meanwhile."""
    left = [n for n in created if os.path.exists(f"/dev/shm/{n}")]
    assert not left, f"shared-memory blocks outlived the load: {left}"
    deadline = time.monotonic() + 3
    new = shm_blocks(*owners) - before
    while new and time.monotonic() < deadline:
        time.sleep(0.1)
        new = shm_blocks(*owners) - before
    assert not new, f"new shared-memory blocks of the load's processes {sorted(owners)} in /dev/shm: {sorted(new)}"


# ------------------------------------------------------------------------------------------------
# Same results for every N


class EngineConformance:
    """Every data set loads to the same result and the same bytes as the inline engine.
    Subclasses set ``N``; each test builds a fresh copy of the data set and loads it with
    ``segment_scan_workers_per_data_dir=N``; the reference is an inline load of another
    copy (computed once per data set and session)."""

    N: int = 1
    DISK_ORDER: bool | None = None  # the engines' disk_order (True: one reader in disk order, the scans gated on it)

    def check(self, ds: DataSet, datasets: DataSets, request: pytest.FixtureRequest,
              monkeypatch: pytest.MonkeyPatch, *, defer_stats: bool = False) -> tuple[Outcome, Outcome, dict[str, Any]]:
        ref = datasets.reference(ds, request)
        root, groups = datasets.fresh_copy(ds, request, f"N{self.N}")
        spy = BlockSpy(monkeypatch)
        seen: dict[str, Any] = {"cuts": {}, "chunk_results": 0}
        if ds.chunk_bytes is not None or self.DISK_ORDER is not None:
            real_engine = LoadPlan.engine

            def make(*args: Any, **kwargs: Any) -> Engine:
                engine = real_engine(*args, **kwargs)
                if isinstance(engine, PoolEngine) and ds.chunk_bytes is not None:
                    engine.chunk_bytes = ds.chunk_bytes
                engine.disk_order = self.DISK_ORDER
                return engine

            monkeypatch.setattr(LoadPlan, "engine", make)
        real_cuts = chunks_mod.chunk_boundaries

        def cuts(log_path: str, base_offset: int, size: int, chunk_bytes: int = chunks_mod.CHUNK_BYTES) -> list[int]:
            out = real_cuts(log_path, base_offset, size, chunk_bytes)
            seen["cuts"][os.path.relpath(log_path, root)] = out
            return out

        monkeypatch.setattr(chunks_mod, "chunk_boundaries", cuts)
        real_chunk_result = PoolEngine._chunk_result

        def chunk_result(engine: PoolEngine, data_dir: str, chunk: Any) -> Any:
            seen["chunk_results"] += 1
            return real_chunk_result(engine, data_dir, chunk)

        monkeypatch.setattr(PoolEngine, "_chunk_result", chunk_result)
        before = shm_blocks()
        got = load_copy(ds, root, groups, self.N)
        assert_same_outcome(got, ref, stats=not defer_stats)
        assert_no_new_blocks(before, spy.names, spy.owners)
        for r in got.raw:
            if r is not None:
                assert r.stats.workers_per_dir == self.N
                assert r.stats.worker_restarts == 0 and r.stats.inline_fallbacks == 0
                # the engine planned every whole-segment scan Phase 2 asked for (mploader.scan.plan)
                assert r.stats.unplanned_scans == 0
        if self.N > 1 and ds.pool_work:
            assert spy.names, "the pool engine scanned nothing ahead of Phase 2"
            assert seen["chunk_results"] > 0
        if self.N == 1:
            assert not spy.names and not seen["cuts"]
        seen["root"] = root
        return got, ref, seen

    def test_generated_clean(self, datasets, request, monkeypatch) -> None:
        got, ref, _ = self.check(GEN_CLEAN, datasets, request, monkeypatch)
        assert got.raw[0].stats.segments_recovered == 0 and all(got.raw[0].clean_shutdown.values())

    def test_generated_clean_with_index_faults(self, datasets, request, monkeypatch) -> None:
        got, ref, _ = self.check(GEN_CLEAN_INDEX_FAULTS, datasets, request, monkeypatch)
        assert got.raw[0].stats.segments_recovered > 0  # missing .index files were rebuilt

    def test_generated_unclean(self, datasets, request, monkeypatch) -> None:
        got, ref, _ = self.check(GEN_UNCLEAN, datasets, request, monkeypatch)
        assert got.raw[0].stats.segments_recovered > 0

    def test_generated_unclean_with_faults(self, datasets, request, monkeypatch) -> None:
        got, ref, _ = self.check(GEN_FAULTS, datasets, request, monkeypatch)
        stats = got.raw[0].stats
        assert stats.bytes_truncated > 0 and stats.files_deleted > 0

    def test_chunked_segments(self, datasets, request, monkeypatch) -> None:
        """Big segments cut into chunks (N > 1), some damaged inside a chunk or at a cut: the
        truncation is at the first invalid byte, exactly as the inline walk finds it; no batch of
        a later chunk is applied."""
        got, ref, seen = self.check(CHUNKED, datasets, request, monkeypatch, defer_stats=True)
        root: Path = seen["root"]
        result = got.raw[0]
        by_name = {f"{lg.topic}-{lg.partition}": lg for lg in result.all_logs()}
        # independent of either engine: where valid data ends
        for name, exp in json.loads((root / "expected_valid.json").read_text()).items():
            lg = by_name[name]
            seg = next(s for s in lg.segments if s.base_offset == exp["segment"])
            assert seg.size_bytes == exp["valid"], name
            assert lg.segments[-1].base_offset == exp["segment"], f"{name}: later segments must be deleted"
            assert lg.log_end_offset == exp["segment"] + exp["valid"] // (len(B(0, value=BIG_VALUE))), name
        assert by_name["intact-0"].log_end_offset == 20 + BIG_BATCHES and by_name["intact-0"].truncated_bytes == 0
        if self.N > 1:
            cut = {k: v for k, v in seen["cuts"].items() if v}
            # every big segment was cut: 5 chunks for the intact ones, fewer where a cut's header is damaged
            big = {"intact-0/00000000000000000020.log": 4, "midchunk-0/00000000000000000020.log": 4,
                   "atcut-0/00000000000000000020.log": 4, "overrun-0/00000000000000000020.log": 4,
                   "rolled-0/00000000000000000000.log": 4, "zerotail-0/00000000000000000010.log": 4,
                   "badmagic-0/00000000000000000010.log": 1, "badoffset-0/00000000000000000010.log": 1}
            assert {k.split("/", 1)[1]: len(v) for k, v in cut.items()} == big
            chunks = sum(len(v) + 1 for v in cut.values())  # the big segments are all scanned
            assert seen["chunk_results"] >= chunks
            assert result.stats.pickled_bytes / seen["chunk_results"] < 1024
        assert_same_stats(got.results, ref)  # bytes_read included

    @pytest.mark.slow
    def test_real_corpus(self, datasets, request, monkeypatch) -> None:
        got, ref, _ = self.check(CORPUS, datasets, request, monkeypatch)
        assert len(got.results) >= 13 and all("error" not in r for r in got.results)


class TestInlineEngine(EngineConformance):
    N = 1


class TestPoolEngine2(EngineConformance):
    N = 2


class TestPoolEngine4(EngineConformance):
    N = 4


class TestInlineEngineInDiskOrder(EngineConformance):
    """One reader in disk order, every scan waiting for its range (as on a cold disk with a head): the same results."""

    N = 1
    DISK_ORDER = True


class TestPoolEngine2InDiskOrder(EngineConformance):
    N = 2
    DISK_ORDER = True


def _partitions_of(d: str) -> list[tuple[str, Any, Any]]:
    """(path, topic partition, kind) of each partition directory of data dir ``d``, for a DirPlan."""
    from mploader.format.names import parse_partition_dir

    return [(os.path.join(d, name), *parse_partition_dir(name)) for name in sorted(os.listdir(d))
            if os.path.isdir(os.path.join(d, name))]


def test_a_stitched_scan_describes_the_same_range_as_an_inline_scan(datasets, request) -> None:
    """PoolEngine.scan() of a chunked segment returns the SegmentScan scan_segment() returns:
    the same batches, valid end and stop -- and the same ``end`` (the scanned range: the file
    size), ``bytes_read`` and ``truncated_bytes``, also when the walk stops before the last chunk."""
    from mploader.engine.plan import DirPlan
    from mploader.scan import SegmentTask, scan_segment

    root, groups = datasets.fresh_copy(CHUNKED, request, "stitch")
    d = str(root / groups[0][0])
    partitions = _partitions_of(d)
    engine = PoolEngine(LoadStats(), 2, [d], None, chunk_bytes=CHUNK)
    mismatches = []
    try:
        engine.prefetch([DirPlan(d, False, partitions, {})])
        for path, _, _ in partitions:
            for f in sorted(os.listdir(path)):
                if not f.endswith(".log") or os.path.getsize(os.path.join(path, f)) <= CHUNK:
                    continue
                task = SegmentTask(os.path.join(path, f), int(f[:20]))
                pooled, inline = engine.scan(d, task), scan_segment(task)
                assert (pooled.batches == inline.batches).all() and len(pooled.batches) == len(inline.batches)
                got = (pooled.start, pooled.end, pooled.valid_bytes, pooled.stop, pooled.bytes_read,
                       pooled.truncated_bytes)
                want = (inline.start, inline.end, inline.valid_bytes, inline.stop, inline.bytes_read,
                        inline.truncated_bytes)
                if got != want:
                    mismatches.append(f"{os.path.relpath(task.path, d)}: (start, end, valid, stop, bytes_read, "
                                      f"truncated) pool {got} != inline {want}")
    finally:
        engine.close()
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.parametrize("cut_after", [2, 3, 4])
def test_a_batch_kafka_cannot_read_ends_a_stitched_scan_as_it_ends_the_whole_one(cut_after: int) -> None:
    """A control batch Kafka cannot read (here a LEADER_CHANGE record in a transactional batch: start-up
    fails) stops the continuous walk after it; cut into chunks, the joined scan must stop there too,
    with the same failure, whichever chunk holds it."""
    from mploader.engine.chunks import stitch
    from mploader.scan import SegmentTask, scan_buffer

    unreadable = records.build_batch(2, [records.Record(0, 0, struct.pack(">hh", 0, 2), bytes(6))], control=True,
                                     transactional=True, producer_id=9, producer_epoch=0)
    entries = [B(0), B(1), unreadable, B(3), B(4)]
    data = b"".join(entries)
    whole = scan_buffer(data, SegmentTask("x.log", 0), len(data))
    assert whole.fatal is not None and len(whole.batches) == 3
    cut = len(b"".join(entries[:cut_after]))
    parts = [scan_buffer(data, SegmentTask("x.log", 0, 0, cut), cut),
             scan_buffer(data, SegmentTask("x.log", 0, cut, len(data)), len(data))]
    joined, resume = stitch(SegmentTask("x.log", 0), parts)
    assert resume is None
    assert (joined.fatal, joined.fatal_exception, joined.valid_bytes, joined.stop) == \
        (whole.fatal, whole.fatal_exception, whole.valid_bytes, whole.stop)
    assert joined.batches.tobytes() == whole.batches.tobytes()


def test_pool_scans_of_whole_segments_bring_the_index_draft(datasets, request, monkeypatch) -> None:
    """A segment scanned in one piece by a worker comes back with its recovery draft (made in Phase 1,
    sent through the shared-memory block), the same as an inline scan makes; a chunked one without it
    (Phase 2 drafts the joined table)."""
    from mploader.engine.plan import DirPlan
    from mploader.scan import SegmentTask, scan_segment

    monkeypatch.setattr(pool_mod, "IN_FLIGHT_PER_WORKER", 1000)  # every chunk submitted: asked out of order below
    root, groups = datasets.fresh_copy(CHUNKED, request, "index-rows")
    d = str(root / groups[0][0])
    partitions = _partitions_of(d)
    engine = PoolEngine(LoadStats(), 2, [d], None, chunk_bytes=CHUNK)
    seen = {"whole": 0, "chunked": 0}
    try:
        engine.prefetch([DirPlan(d, False, partitions, {}, lambda topic: 4096)])
        for pend in engine._pending.values():  # every task done by a worker before Phase 2 asks for it
            for chunk in pend.chunks:
                chunk.future.result()
        for path, _, _ in partitions:
            for f in sorted(os.listdir(path)):
                if not f.endswith(".log"):
                    continue
                task = SegmentTask(os.path.join(path, f), int(f[:20]), index_interval=4096)
                pooled, inline = engine.scan(d, task), scan_segment(task)
                want = [a.tobytes() for a in (inline.draft.index, inline.draft.producer_rows, inline.draft.epoch_rows)]
                if os.path.getsize(task.path) > CHUNK and chunk_boundaries(task.path, task.base_offset,
                                                                            os.path.getsize(task.path), CHUNK):
                    assert pooled.draft is None
                    seen["chunked"] += 1
                else:
                    got = [a.tobytes()
                           for a in (pooled.draft.index, pooled.draft.producer_rows, pooled.draft.epoch_rows)]
                    assert pooled.draft.interval == 4096 and got == want
                    seen["whole"] += 1
    finally:
        engine.close()
    assert seen["whole"] and seen["chunked"], seen
    assert engine.stats.scans_in_parent == 0  # every draft compared came through a block


def test_the_shared_memory_in_flight_is_bounded(datasets, request, monkeypatch) -> None:
    """At most IN_FLIGHT_PER_WORKER x workers calls of a data dir are in flight (blocks are created as chunks are
    submitted, freed when Phase 2 collects them); a call is one chunk, or a batch of small whole segments of at most
    GROUP_BYTES and GROUP_TASKS; the load is still the inline one.  (No worker dies here, so no retry adds a
    block.)"""
    live: dict[str, int] = {}  # block name -> the bytes of log it holds the rows of
    most = {"blocks": 0, "bytes": 0}
    real_new, real_free = PoolEngine._new_block, PoolEngine._free

    def new_block(engine: PoolEngine, nbytes_range: int):  # type: ignore[no-untyped-def]
        block, capacity = real_new(engine, nbytes_range)
        live[block.name] = nbytes_range
        most["blocks"] = max(most["blocks"], len(live))
        most["bytes"] = max(most["bytes"], sum(live.values()))
        return block, capacity

    def free(engine: PoolEngine, block: Any) -> None:
        if block is not None:
            live.pop(block.name, None)
        real_free(engine, block)

    monkeypatch.setattr(PoolEngine, "_new_block", new_block)
    monkeypatch.setattr(PoolEngine, "_free", free)
    monkeypatch.setattr(PoolEngine, "parent_head_bytes", 0)
    # a window of 2 calls of at most 2 segments each: far fewer than the data set's segments (batches of the default
    # sizes would take them all in one window)
    monkeypatch.setattr(pool_mod, "IN_FLIGHT_PER_WORKER", 1)
    monkeypatch.setattr(pool_mod, "GROUP_TASKS", 2)
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, "window")
    got = load_copy(GEN_UNCLEAN, root, groups, 2)
    assert_same_outcome(got, datasets.reference(GEN_UNCLEAN, request))
    submitted = got.raw[0].stats.segments_recovered
    window = pool_mod.IN_FLIGHT_PER_WORKER * 2 * len(groups[0])  # calls, per data dir
    assert submitted > window * pool_mod.GROUP_TASKS  # more chunks than the window holds
    assert window < most["blocks"] <= window * pool_mod.GROUP_TASKS, (most, window)  # batches, and no more
    # and a window that batches nothing holds a block a call (the bound before batches)
    live.clear()
    most.update(blocks=0, bytes=0)
    monkeypatch.setattr(pool_mod, "GROUP_TASKS", 1)
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, "window-1")
    got = load_copy(GEN_UNCLEAN, root, groups, 2)
    assert_same_outcome(got, datasets.reference(GEN_UNCLEAN, request))
    assert 0 < most["blocks"] <= window, (most, window)


def test_small_whole_segments_go_to_a_worker_together(datasets, request, monkeypatch) -> None:
    """Small whole segments are handed over several to a call (one loky call costs the parent more than scanning
    a small segment), in Phase 2's order, none over GROUP_BYTES in all; the load is the inline one."""
    calls: list[list[str]] = []
    real_submit = PoolEngine._submit

    def submit(engine, data_dir, tasks, broken=None):  # type: ignore[no-untyped-def]
        calls.append([task.path for task in tasks])
        return real_submit(engine, data_dir, tasks, broken)

    monkeypatch.setattr(PoolEngine, "_submit", submit)
    monkeypatch.setattr(PoolEngine, "parent_head_bytes", 0)
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, "together")
    size = {str(p): p.stat().st_size for p in root.rglob("*.log")}  # as planned (recovery may cut them)
    # a byte bound that splits this data set's runs of small segments (the default 8 MiB holds all of them)
    monkeypatch.setattr(pool_mod, "GROUP_BYTES", 3 * sorted(size.values())[len(size) // 2])
    got = load_copy(GEN_UNCLEAN, root, groups, 2)
    assert_same_outcome(got, datasets.reference(GEN_UNCLEAN, request))
    assert got.raw[0].stats.worker_restarts == 0
    assert any(len(c) > 1 for c in calls), calls
    for call in calls:
        assert len(call) <= pool_mod.GROUP_TASKS
        assert len(call) == 1 or sum(size[p] for p in call) <= pool_mod.GROUP_BYTES
    order = [p for call in calls for p in call]
    assert len(order) == len(set(order))  # each segment handed over once


_SMALL_SHM_LOAD = """
import json, sys
from mploader import LoaderConfig, load_logs
from mploader.engine.pool import PoolEngine
from tests.crashy_worker import result_digest
PoolEngine.parent_head_bytes = 0  # every scan to the workers
r = load_logs([sys.argv[1]], LoaderConfig(segment_scan_workers_per_data_dir=2), now_ms=int(sys.argv[2]))
print(json.dumps({"digest": result_digest(r, sys.argv[3]), "stats": r.stats.to_json()}))
"""


def test_a_small_dev_shm_slows_a_load_but_does_not_break_it(tmp_path) -> None:
    """With a 1 MiB /dev/shm (a private tmpfs mounted over it in a new mount namespace, as root), the
    workers' tables do not fit: each worker's write fails with ENOSPC (a store through a mapping would kill
    it with SIGBUS), and the parent scans those chunks; the load is the inline one."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private /dev/shm")
    out = tmp_path / "broker"
    generate(out, GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=2, total_bytes=12_000_000,
                                  segment_bytes=2_000_000, batch_bytes=150, faults=0, seed=5))
    (out / "data-0" / "recovery-point-offset-checkpoint").write_text("0\n0\n")  # recover every segment
    shutil.copytree(out, tmp_path / "inline")
    inline = load_logs([str(tmp_path / "inline" / "data-0")], LoaderConfig(), now_ms=GEN_NOW)
    repo = str(Path(__file__).resolve().parents[1])
    mount = "mount -t tmpfs -o size=1m tmpfs /dev/shm && exec \"$0\" -c \"$1\" \"$2\" \"$3\" \"$4\""
    proc = subprocess.run(["unshare", "-m", "sh", "-c", mount, sys.executable, _SMALL_SHM_LOAD,
                           str(out / "data-0"), str(GEN_NOW), str(out)],
                          capture_output=True, text=True, timeout=300, cwd=repo,
                          env={**os.environ, "PYTHONPATH": repo})
    if proc.returncode != 0 and "mount" in proc.stderr and "permission" in proc.stderr.lower():
        pytest.skip(f"cannot mount a private /dev/shm here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert got["digest"] == result_digest(inline, tmp_path / "inline")
    stats = got["stats"]
    assert stats["worker_restarts"] == 0 and stats["inline_fallbacks"] == 0, stats  # no worker was killed
    # the segments whose rows alone are larger than the whole /dev/shm cannot have gone through a block
    from mploader.scan import SegmentTask, scan_segment

    too_big = sum(1 for log in (tmp_path / "inline" / "data-0").glob("*/*.log")
                  if scan_segment(SegmentTask(str(log), int(log.name[:20]))).batches.nbytes > 1 << 20)
    assert too_big >= 4 and stats["scans_in_parent"] >= too_big, (too_big, stats)


def test_no_room_for_a_block_is_never_taken_for_the_segments_io_error(datasets, request, monkeypatch) -> None:
    """When /dev/shm cannot take a block (ENOSPC creating it), the parent scans the chunk: the error is the
    engine's, not the segment's, which recovery would answer by truncating valid data (it did: a load with
    /dev/shm full truncated whole segments to their base offset)."""
    import errno

    def no_room(engine: PoolEngine, nbytes_range: int):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device", "/dev/shm/psm_test")

    monkeypatch.setattr(PoolEngine, "_new_block", no_room)
    monkeypatch.setattr(PoolEngine, "parent_head_bytes", 0)
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, "no-room")
    got = load_copy(GEN_UNCLEAN, root, groups, 2)
    assert_same_outcome(got, datasets.reference(GEN_UNCLEAN, request))
    assert got.raw[0].stats.scans_in_parent >= got.raw[0].stats.segments_recovered > 0


def test_a_block_that_cannot_be_written_or_read_back_is_never_the_segments_error(datasets, request, monkeypatch,
                                                                                 tmp_path) -> None:
    """Any error of a block (its write: a full /dev/shm, a tmpfs quota, a block gone; its read-back: no descriptor
    left) is the engine's: the worker reports it, or the parent meets it, and the parent scans the chunk itself.
    Raised as the segment's OSError, it would fail the partition (its data dir taken offline)."""
    import errno

    from mploader.engine.worker import NoSpace, worker_scan
    from mploader.scan import SegmentTask

    d = _one_segment_dir(tmp_path, 20)
    task = SegmentTask(str(d / "t-0" / "00000000000000000000.log"), 0)
    gone = worker_scan(task, f"mploader-test-{os.getpid()}-never-created", 20)
    assert isinstance(gone, NoSpace) and "No such file" in gone.error

    def no_descriptor_left(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(pool_mod, "arrays_from_block", no_descriptor_left)
    monkeypatch.setattr(PoolEngine, "parent_head_bytes", 0)
    spy = BlockSpy(monkeypatch)
    before = shm_blocks()
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, "no-read-back")
    got = load_copy(GEN_UNCLEAN, root, groups, 2)
    assert_same_outcome(got, datasets.reference(GEN_UNCLEAN, request))
    assert got.raw[0].stats.scans_in_parent >= got.raw[0].stats.segments_recovered > 0
    assert_no_new_blocks(before, spy.names, spy.owners)


def test_the_parent_scans_the_head_of_the_order_itself(tmp_path, monkeypatch) -> None:
    """The first segments Phase 2 needs, up to parent_head_bytes, are scanned by the parent while the
    pool starts (never submitted); the rest go to the workers; the load is the inline one."""
    d = data_dir(tmp_path / "pool", "d1", clean=False)
    part = PartitionBuilder(d, "t", 0)
    for base in (0, 300, 600):
        part.segment(base, *(B(o) for o in range(base, base + 300)))
    first = os.path.getsize(os.path.join(d, "t-0", "00000000000000000000.log"))
    monkeypatch.setattr(PoolEngine, "parent_head_bytes", first)
    submitted: list[str] = []
    real_submit = PoolEngine._submit

    def submit(engine, data_dir, tasks, broken=None):  # type: ignore[no-untyped-def]
        submitted.extend(os.path.basename(task.path) for task in tasks)
        return real_submit(engine, data_dir, tasks, broken)

    monkeypatch.setattr(PoolEngine, "_submit", submit)
    shutil.copytree(tmp_path / "pool", tmp_path / "inline")
    pooled = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=2), now_ms=NOW)
    assert sorted(submitted) == ["00000000000000000300.log", "00000000000000000600.log"]  # the first is kept
    assert pooled.stats.scans_in_parent >= 1
    inline = load_logs([str(tmp_path / "inline" / "d1")], LoaderConfig(segment_scan_workers_per_data_dir=1),
                       now_ms=NOW)
    lg_p, lg_i = pooled.logs[next(iter(pooled.logs))], inline.logs[next(iter(inline.logs))]
    assert ((lg_p.log_end_offset, lg_p.recovered_segments) == (lg_i.log_end_offset, lg_i.recovered_segments)
            == (900, [0, 300, 600]))


def test_a_worker_ignores_ctrl_c(tmp_path) -> None:
    """A terminal's Ctrl-C reaches every process of the group: the workers leave it to the parent (no
    traceback of their own, no death mid-task that would look like a crash)."""
    engine = PoolEngine(LoadStats(), 1, [str(tmp_path)], None)
    try:
        ex = engine._executor(str(tmp_path))
        pid = ex.submit(os.getpid).result()
        os.kill(pid, signal.SIGINT)
        time.sleep(0.3)
        assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        assert ex.submit(os.getpid).result(timeout=30) == pid  # the same worker, still working
    finally:
        engine.close()


@pytest.mark.skipif(psutil.cpu_count() < 2, reason="OpenBLAS starts no extra thread on one CPU")
@pytest.mark.parametrize("start", WORKER_STARTS)
def test_workers_start_no_blas_threads(tmp_path, start: str) -> None:
    """numpy's import starts OpenBLAS's thread pool, one thread per CPU, which the workers never use: a
    spawned worker starts with it limited to one (its start-up is CPU the parent's scans share), a forked one
    has none of the parent's threads."""
    from loky import ProcessPoolExecutor

    from tests.crashy_worker import startup_report

    engine = PoolEngine(LoadStats(), 1, [str(tmp_path)], None, start=start)
    try:
        env, threads = engine._executor(str(tmp_path)).submit(startup_report).result()
    finally:
        engine.close()
    if start == "spawn":
        assert env == ONE_BLAS_THREAD
    if any(os.environ.get(name) for name in ONE_BLAS_THREAD):
        pytest.skip("this process's environment limits the threads already")
    with ProcessPoolExecutor(max_workers=1) as plain:  # a spawned worker without ONE_BLAS_THREAD
        _, plain_threads = plain.submit(startup_report).result()
    assert threads < plain_threads


@pytest.mark.parametrize("start", WORKER_STARTS)
def test_a_worker_starts_as_chosen_and_holds_nothing_of_the_parents(tmp_path, start: str) -> None:
    """``start="fork"``: the worker is a copy of the parent (its command line, the modules the parent had
    imported); ``"spawn"``: loky's fresh interpreter.  Either way it names itself ``mploader-scan`` and holds no
    descriptor of the load's owner marker (a killed load's marker would stay locked while its workers live, and the
    next load would leave its blocks), no descriptor of a block the parent wrote before the worker started
    (the block's pages would stay in /dev/shm until the worker exits), and none of the parent's Python signal
    handlers or its signal wake-up descriptor (an event loop's pipe)."""
    from tests.crashy_worker import process_report

    def parents_own(signum: int, frame: object) -> None:  # pragma: no cover - never sent
        raise AssertionError("the parent's handler ran")

    engine = PoolEngine(LoadStats(), 1, [str(tmp_path)], None, start=start)
    previous = signal.signal(signal.SIGTERM, parents_own)
    loop_r, loop_w = os.pipe()
    os.set_blocking(loop_w, False)
    previous_wakeup = signal.set_wakeup_fd(loop_w)
    try:
        early, _ = engine._new_block(1 << 20)
        early.write([np.ones(4096, np.uint8)])  # a page of the block in /dev/shm
        marker = os.path.realpath(f"/proc/self/fd/{engine._marker}")
        got = engine._executor(str(tmp_path)).submit(process_report).result()
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.set_wakeup_fd(previous_wakeup)
        os.close(loop_r)
        os.close(loop_w)
        engine.close()
    me = Path("/proc/self/cmdline").read_bytes().split(b"\0")[:-1]
    assert (got["argv"] == [a.decode() for a in me]) == (start == "fork")
    assert ("_pytest" in got["modules"]) == (start == "fork")  # this process's test runner: a copy of it has it too
    assert got["name"] == WORKER_NAME  # what top and pidof show, however it started
    assert marker.startswith("/dev/shm/") and marker not in got["fds"]
    assert early.path not in got["fds"]  # (nothing maps a block: tests/test_block.py)
    assert got["sigterm"] == repr(signal.SIG_DFL) and got["wakeup_fd"] == -1


@pytest.mark.parametrize("start", WORKER_STARTS)
def test_the_configs_start_wins_over_the_environment(tmp_path, monkeypatch, start: str) -> None:
    """``LoaderConfig.worker_start`` reaches the pool and "auto"'s weighing of its start, whatever
    MPLOADER_WORKER_START says."""
    other = next(s for s in WORKER_STARTS if s != start)
    monkeypatch.setenv("MPLOADER_WORKER_START", other)
    monkeypatch.setattr(load_plan_mod, "usable_cpus", lambda: 2)
    engine = make_engine(LoaderConfig(segment_scan_workers_per_data_dir=2, worker_start=start),
                         [str(tmp_path)], LoadStats())
    try:
        assert isinstance(engine, PoolEngine) and engine.start == start
    finally:
        engine.close()
    # 1 GB in 16 segments: a forked pool of 2 pays there, a spawned one does not (perf/README.md)
    auto = LoaderConfig(segment_scan_workers_per_data_dir="auto", worker_start=start)
    assert workers_per_dir(auto, 1, 1_000_000_000, 16) == (2 if start == "fork" else 1)
    with pytest.raises(ValueError, match="worker_start"):
        LoaderConfig(worker_start="forkserver")  # type: ignore[arg-type]
    # the load's stats say how its workers started (none: inline)
    for n, expected in ((2, start), (1, None)):
        got = load_logs([str(tmp_path)], LoaderConfig(segment_scan_workers_per_data_dir=n, worker_start=start))
        assert (got.stats.workers_per_dir, got.stats.worker_start) == (n, expected)


@pytest.mark.parametrize("value, expected", [("", "fork"), ("fork", "fork"), ("Spawn", "spawn")])
def test_the_start_method_comes_from_the_environment(monkeypatch, value: str, expected: str) -> None:
    monkeypatch.setenv("MPLOADER_WORKER_START", value)
    assert worker_start() == (expected if sys.platform == "linux" or value else "spawn")
    monkeypatch.setenv("MPLOADER_WORKER_START", "forkserver")
    with pytest.raises(ValueError, match="MPLOADER_WORKER_START='forkserver': expected one of fork, spawn"):
        worker_start()


# ------------------------------------------------------------------------------------------------
# Nothing per batch is pickled


def _one_segment_dir(root: Path, batches: int) -> Path:
    d = data_dir(root, "d1", clean=False)
    PartitionBuilder(d, "t", 0).segment(0, *(B(o) for o in range(batches)))
    return d


def test_a_bug_in_the_scan_code_propagates_with_the_workers_traceback(tmp_path, monkeypatch) -> None:
    """An exception the scan code raises in a worker (not a dead worker, not MemoryError) is a bug: the
    parent raises it as it is, loky's remote traceback as its __cause__, and retries nothing."""
    from concurrent.futures import wait

    from mploader.engine.plan import DirPlan
    from tests.crashy_worker import crashy_scan

    d = _one_segment_dir(tmp_path, 50)
    monkeypatch.setenv("CRASHY_MODE", "bug")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(pool_mod, "worker_scan", crashy_scan)  # looked up at submission
    engine = PoolEngine(LoadStats(), 1, [str(d)], None)
    engine.parent_head_bytes = 0
    try:
        engine.prefetch([DirPlan(str(d), False, _partitions_of(str(d)), {})])
        [(_, [task])] = engine.planned[str(d)]
        wait([c.future for p in engine._pending.values() for c in p.chunks])  # the worker has raised
        with pytest.raises(ValueError, match="a bug injected") as e:
            engine.scan(str(d), task)
    finally:
        engine.close()
    assert "crashy_scan" in str(e.value.__cause__)  # the worker's traceback
    assert (engine.stats.worker_restarts, engine.stats.inline_fallbacks) == (0, 0)


def test_a_scan_the_plan_did_not_hold_is_counted(tmp_path) -> None:
    """Phase 2 asking an engine for a segment its plan did not hold is counted in unplanned_scans (and
    still scanned); planned ones are not counted."""
    from mploader import TopicPartition
    from mploader.engine.inline import InlineEngine
    from mploader.engine.plan import DirPlan
    from mploader.scan import SegmentTask

    d = _one_segment_dir(tmp_path, 5)
    PartitionBuilder(d, "t", 0).segment(5, B(5))
    # unclean, recovery point 5: recoverLog reads segment 5 only (segment 0 has its .index)
    engine = InlineEngine(LoadStats())
    engine.prefetch([DirPlan(str(d), False, _partitions_of(str(d)), {TopicPartition("t", 0): 5})])
    part = d / "t-0"
    assert engine.source(str(d)).scan(SegmentTask(str(part / "00000000000000000005.log"), 5)).valid_bytes > 0
    assert engine.stats.unplanned_scans == 0
    assert engine.source(str(d)).scan(SegmentTask(str(part / "00000000000000000000.log"), 0)).valid_bytes > 0
    assert engine.stats.unplanned_scans == 1


def test_an_engine_is_configured_by_its_constructor(tmp_path) -> None:
    """The IO budget and the plans already made (which prefetch then reuses) are constructor arguments; without a
    progress the engine reports to NO_PROGRESS."""
    from mploader.engine.plan import DirPlan, plan_segment_scans

    d = _one_segment_dir(tmp_path, 5)
    dir_plan = DirPlan(str(d), False, _partitions_of(str(d)), {})
    planned = plan_segment_scans(dir_plan)
    engine = InlineEngine(LoadStats(), max_read_bytes_per_sec=3 << 20, planned={str(d): planned})
    budget = engine.budget(str(d))
    assert budget is not None and budget.bytes_per_s == 3 << 20
    assert engine.plan(dir_plan) is planned  # not planned again
    assert engine.planned_paths[str(d)] == {t.path for _, tasks in planned for t in tasks}
    assert engine.progress is NO_PROGRESS
    plain = InlineEngine(LoadStats(), None)  # what an EngineFactory may be given: no progress
    assert plain.budget(str(d)) is None and plain.planned == {} and plain.progress is NO_PROGRESS
    pool = PoolEngine(LoadStats(), 2, [str(d)], None, max_read_bytes_per_sec=1 << 20, planned={str(d): planned})
    with pool:
        assert pool.budget(str(d)) is not None and pool.plan(dir_plan) is planned


class ClosingEngine(InlineEngine):
    """The inline engine, keeping the ``kill`` of each close."""

    def __init__(self) -> None:
        super().__init__(LoadStats())
        self.kills: list[bool] = []

    def close(self, kill: bool = False) -> None:
        self.kills.append(kill)
        super().close(kill)


@pytest.mark.parametrize(("error", "kill"), [(None, False), (ValueError("x"), False), (OSError(5, "EIO"), False),
                                             (KeyboardInterrupt(), True), (SystemExit(3), True)])
def test_an_engine_closes_as_a_context_manager_killing_on_ctrl_c(error: BaseException | None, kill: bool) -> None:
    """``with engine:`` closes it on the way out, at once (kill) when the block ends by Ctrl-C or another
    BaseException that is not an Exception; the exception goes on."""
    engine = ClosingEngine()
    with pytest.raises(type(error)) if error is not None else contextlib.nullcontext():
        with engine as entered:
            assert entered is engine and engine.kills == []
            if error is not None:
                raise error
    assert engine.kills == [kill]
    cancelled = engine.inline_source("d").cancelled
    assert cancelled is not None and cancelled.is_set()  # closed: a wait for a read budget's turn ends


def test_pickled_bytes_per_task_do_not_depend_on_the_batch_count(tmp_path, monkeypatch) -> None:
    calls = {"n": 0}
    real = PoolEngine._chunk_result

    def counting(engine: PoolEngine, data_dir: str, chunk: Any) -> Any:
        calls["n"] += 1
        return real(engine, data_dir, chunk)

    monkeypatch.setattr(PoolEngine, "_chunk_result", counting)
    per_task = {}
    for batches in (100, 10_000):
        d = _one_segment_dir(tmp_path / str(batches), batches)
        calls["n"] = 0
        r = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=2), now_ms=NOW)
        lg = r.logs[next(iter(r.logs))]
        assert lg.log_end_offset == batches and lg.recovered_segments == [0]
        assert calls["n"] >= 1 and r.stats.pickled_bytes > 0
        per_task[batches] = r.stats.pickled_bytes / calls["n"]
    assert per_task[10_000] < 1024, per_task
    assert abs(per_task[10_000] - per_task[100]) <= 32, per_task


def test_a_block_too_small_for_the_rows_is_never_overrun_and_the_parent_scans_instead(tmp_path, monkeypatch) -> None:
    """Only a file that grew after its block was sized has more rows than slots: the worker writes
    nothing and says so, and the parent scans the task itself (same load as inline)."""
    d = _one_segment_dir(tmp_path / "pool", 300)
    shutil.copytree(tmp_path / "pool", tmp_path / "inline")
    real_new_block = PoolEngine._new_block
    capacities: list[int] = []

    def small_block(engine: PoolEngine, nbytes_range: int) -> Any:
        block, capacity = real_new_block(engine, nbytes_range)
        capacities.append(capacity)
        return block, 10  # room for 10 of the 300 rows

    monkeypatch.setattr(PoolEngine, "_new_block", small_block)
    pooled = load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=2), now_ms=NOW)
    assert capacities and pooled.stats.scans_in_parent >= 1 and pooled.stats.worker_restarts == 0
    inline = load_logs([str(tmp_path / "inline" / "d1")], LoaderConfig(segment_scan_workers_per_data_dir=1),
                       now_ms=NOW)
    assert result_digest(pooled, tmp_path / "pool") == result_digest(inline, tmp_path / "inline")
    assert tree_digest(tmp_path / "pool") == tree_digest(tmp_path / "inline")


def test_worker_scan_reports_a_grown_file_instead_of_writing_past_its_block(tmp_path) -> None:
    from mploader.engine.block import Block
    from mploader.engine.worker import SLOT_BYTES, Grown, Scanned, arrays_from_block, worker_scan
    from mploader.scan import SegmentTask, scan_segment

    d = _one_segment_dir(tmp_path, 50)
    task = SegmentTask(str(d / "t-0" / "00000000000000000000.log"), 0)
    block = Block.create(f"mploader-test-{os.getpid()}-grown", 50 * SLOT_BYTES)
    try:
        assert isinstance(worker_scan(task, block.name, 10), Grown)  # 10 slots claimed for 50 rows
        assert os.stat(block.path).st_blocks == 0  # nothing written
        ok = worker_scan(task, block.name, 50)  # exactly enough slots
        assert isinstance(ok, Scanned) and ok.rows == 50
        table, _ = arrays_from_block(block, ok.rows, ok.draft)
    finally:
        block.unlink()
    assert not os.path.exists(block.path)
    assert table.tobytes() == scan_segment(task).batches.tobytes()


# ------------------------------------------------------------------------------------------------
# No shared-memory block outlives a load


def test_no_block_outlives_a_successful_load(datasets, request, monkeypatch) -> None:
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, "shm-success")
    spy = BlockSpy(monkeypatch)
    before = shm_blocks()
    load_copy(GEN_UNCLEAN, root, groups, 2)
    assert spy.names
    assert_no_new_blocks(before, spy.names, spy.owners)


def _fatal_dir(root: Path) -> Path:
    """An unclean data dir: partition a-0 has 3 segments to recover (pool work), b-0 a .txnindex
    entry whose first byte is 0x01 (a positive version), which fails the broker's start-up
    (KafkaException)."""
    d = data_dir(root, "d1", clean=False)
    pa = PartitionBuilder(d, "a", 0)
    for base in (0, 100, 200):
        pa.segment(base, *(B(o) for o in range(base, base + 100)))
    pb = PartitionBuilder(d, "b", 0)
    pb.segment(0, *(B(o) for o in range(50)))
    pb.write("00000000000000000000.txnindex", txn_entry(7, 1, 2, 0, version=0x0100))  # first byte 0x01
    return d


def test_no_block_outlives_a_failed_load(tmp_path, monkeypatch) -> None:
    d = _fatal_dir(tmp_path)
    spy = BlockSpy(monkeypatch)
    before = shm_blocks()
    with pytest.raises(StartupFailedError) as e:
        load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=2), now_ms=NOW)
    assert e.value.kafka_exception == "KafkaException"
    assert spy.names
    assert_no_new_blocks(before, spy.names, spy.owners)


RESOURCE_TRACKER_WARNINGS = ("resource_tracker", "leaked shared_memory", "leaked semaphore")


@dataclass
class Child:
    pid: int
    returncode: int
    stderr: str


def run_child(tmp_path: Path, name: str, dirs: list[Path], root: Path, n: int, now_ms: int, *,
              env: dict[str, str] | None = None, crashy: bool = False, popen: bool = False,
              timeout: float = 120, hold_after_started: float = 0) -> Any:
    """Load ``dirs`` in a fresh interpreter (tests/crashy_worker.py ``main``), in its own session
    (so that it and its workers can be signalled as a group).  Returns (Child, spec), or
    (Popen, spec) with ``popen=True``."""
    spec = {"dirs": [str(d) for d in dirs], "root": str(root), "n": n, "now_ms": now_ms,
            "out": str(tmp_path / f"{name}.out.json"), "blocks": str(tmp_path / f"{name}.blocks"),
            "owners": str(tmp_path / f"{name}.owners"),
            "started": str(tmp_path / f"{name}.started"), "calling": str(tmp_path / f"{name}.calling"),
            "crashy": crashy,
            "hold_after_started": hold_after_started}
    spec_path = tmp_path / f"{name}.spec.json"
    spec_path.write_text(json.dumps(spec))
    argv = [sys.executable, "-c", "import sys; from tests import crashy_worker; crashy_worker.main(sys.argv[1])",
            str(spec_path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            env=env or child_env(), cwd=str(_ROOT), text=True)
    if popen:
        return proc, spec
    err = _exit_within(proc, spec, timeout, f"the load hung (still running after {timeout} s)")
    return Child(proc.pid, proc.returncode, err), spec


def _exit_within(proc: subprocess.Popen, spec: dict[str, Any], timeout: float, failure: str) -> str:
    """The stderr of a child that exits within ``timeout`` seconds; otherwise kill it (workers and what
    they leave in /dev/shm too) and fail the test with ``failure`` and the end of its stderr."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        err = _stop(proc, spec)
    pytest.fail(f"{failure}; stderr:\n{err[-3000:]}")


def child_blocks(spec: dict[str, Any]) -> list[str]:
    p = Path(spec["blocks"])
    return p.read_text().split() if p.exists() else []


def child_owners(pid: int, spec: dict[str, Any]) -> set[int]:
    """The child load's process ``pid`` and the workers it recorded (tests/crashy_worker.py ``owners``)."""
    p = Path(spec["owners"])
    return {pid, *(int(w) for w in (p.read_text().split() if p.exists() else []))}


def assert_no_tracker_warnings(stderr: str) -> None:
    bad = [line for line in stderr.splitlines() if any(w in line for w in RESOURCE_TRACKER_WARNINGS)]
    assert not bad, "resource tracker warnings:\n" + "\n".join(bad)


def test_no_block_and_no_tracker_warning_after_a_load_in_a_fresh_interpreter(datasets, request, tmp_path) -> None:
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, "shm-child")
    before = shm_blocks()
    proc, spec = run_child(tmp_path, "ok", [root / d for d in groups[0]], root, 2, GEN_NOW)
    assert proc.returncode == 0, proc.stderr
    assert child_blocks(spec)
    assert_child_left_nothing(proc.pid, spec, before, proc.stderr)
    out = json.loads(Path(spec["out"]).read_text())
    ref = datasets.reference(GEN_UNCLEAN, request)
    assert_same_outcome({"results": [{k: v for k, v in out.items() if k != "raw_stats"}], "tree": tree_digest(root)},
                        ref)


def test_no_block_and_no_tracker_warning_after_a_failed_load_in_a_fresh_interpreter(tmp_path) -> None:
    d = _fatal_dir(tmp_path / "data")
    before = shm_blocks()
    proc, spec = run_child(tmp_path, "fatal", [d], tmp_path / "data", 2, NOW)
    assert proc.returncode != 0 and "StartupFailedError" in proc.stderr, proc.stderr
    assert child_blocks(spec)
    assert_child_left_nothing(proc.pid, spec, before, proc.stderr)


# ---- KeyboardInterrupt


def _stop(proc: subprocess.Popen, spec: dict[str, Any]) -> str:
    """Kill a child that did not exit (and its workers), and remove what the kill leaves in
    /dev/shm: its shared-memory blocks and loky's semaphores (``sem.loky-<pid>-*``)."""
    os.killpg(proc.pid, signal.SIGKILL)
    _, err = proc.communicate()
    time.sleep(0.5)  # the loky workers notice their parent is gone
    leftovers = [f"/dev/shm/{n}" for n in child_blocks(spec)] + [str(p) for p in child_semaphores(proc.pid)]
    leftovers += [str(p) for p in Path("/dev/shm").glob(f"mploader-{proc.pid}-*")]  # the load's owner marker
    for path in leftovers:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return err


def child_semaphores(pid: int) -> list[Path]:
    """loky's named semaphores of process ``pid`` still in /dev/shm."""
    return sorted(Path("/dev/shm").glob(f"sem.loky-{pid}-*"))


def assert_child_left_nothing(pid: int, spec: dict[str, Any], before: set[str], stderr: str) -> None:
    """After a child exited: none of its blocks, no other new block named after it or its workers,
    none of its loky semaphores, and no resource-tracker warning."""
    assert_no_new_blocks(before, child_blocks(spec), child_owners(pid, spec))
    left = child_semaphores(pid)
    assert not left, f"named semaphores of the load outlived it: {left}"
    assert_no_tracker_warnings(stderr)


def _final_state(outcome: Outcome) -> list[Any]:
    """What a load leaves (not what it did: a rerun after an interrupted load has less to do)."""
    keep = ("topic_partition", "kind", "log_start_offset", "recovery_point", "log_end_offset", "segments",
            "leader_epochs", "producers")
    return [{k: lg[k] for k in keep} for lg in outcome.results[0]["details"]]


@pytest.mark.parametrize("when", ["after-first-partition", "at-0.5s"])
def test_keyboard_interrupt_leaves_nothing_and_a_rerun_recovers_exactly(datasets, request, tmp_path, when) -> None:
    """SIGINT to the loading process (N=2): it exits, leaves no shared memory and no tracker
    warning, and a full load afterwards leaves exactly the bytes that one uninterrupted load of
    an identical copy leaves."""
    root, groups = datasets.fresh_copy(BIGGER_DS, request, f"sigint-{when}")
    before = shm_blocks()
    # the partition after the first one waits before loading: the SIGINT lands while a loading thread is
    # busy, and load_logs must not return (releasing the dirs' locks) before that thread ends.  At 0.5 s the
    # wait (2 s) only keeps a fast machine from finishing the whole load before the signal: it lands wherever
    # the load is at 0.5 s (start-up, the first partition, or that wait)
    proc, spec = run_child(tmp_path, "sigint", [root / d for d in groups[0]], root, 2, GEN_NOW, popen=True,
                           hold_after_started=0.5 if when == "after-first-partition" else 2)
    # 0.5 s into load_logs, not into the interpreter's start: a slow CI machine was still importing mploader
    # at 0.5 s, and an interrupt there tests Python's import, not the load
    marker = spec["calling"] if when == "at-0.5s" else spec["started"]
    t0 = time.monotonic()
    while not os.path.exists(marker) and proc.poll() is None and time.monotonic() - t0 < 60:
        time.sleep(0.01)
    if when == "at-0.5s":
        time.sleep(0.5)
    assert proc.poll() is None, "the load ended before it could be interrupted: use a bigger data set"
    proc.send_signal(signal.SIGINT)
    err = _exit_within(proc, spec, 20, "the load did not exit within 20 s of SIGINT")
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err[-3000:]
    assert "loading threads alive after the interrupt: []" in err, err[-3000:]
    assert not os.path.exists(spec["out"])
    assert_child_left_nothing(proc.pid, spec, before, err)
    # the rerun (pool engine) vs one uninterrupted load (the session's inline reference)
    rerun = load_copy(BIGGER_DS, root, groups, 2)
    ref = datasets.reference(BIGGER_DS, request)
    diff = first_difference(rerun.tree, ref.tree, "disk")
    assert diff is None, f"after an interrupted load and a rerun, the bytes on disk differ at {diff}"
    assert _final_state(rerun) == _final_state(ref)


PROMPT_S = 1  # the issue: "Ctrl-C during a load stops workers within a second"


def test_keyboard_interrupt_while_the_partitions_are_submitted_stops_the_threads_already_started(
        tmp_path, monkeypatch) -> None:
    """Ctrl-C may land while the partitions are being handed to a dir's loading threads, after a thread has
    started: the load still cancels, shuts every thread pool down and waits for its threads before the
    interrupt leaves load_logs (the caller releases the dirs' locks next).  A real SIGINT is raised in the main
    thread at the second submission (a slow, busy machine ran into it in the SIGINT test at 0.5 s)."""
    from concurrent.futures import ThreadPoolExecutor

    d = data_dir(tmp_path, "d1", clean=False)
    for p in range(3):
        PartitionBuilder(d, "t", p).segment(0, *(B(o) for o in range(20)))
    made: list[ThreadPoolExecutor] = []

    class InterruptedAtTheSecondSubmit(ThreadPoolExecutor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)
            self.submitted = 0

        def submit(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            self.submitted += 1
            if self.submitted == 2:
                signal.raise_signal(signal.SIGINT)  # Python's own handler: KeyboardInterrupt in this thread
            return super().submit(*args, **kwargs)

    monkeypatch.setattr(threads_mod, "ThreadPoolExecutor", InterruptedAtTheSecondSubmit)
    # Python's own handler, also where the test run inherited an ignored SIGINT (a shell starts a background
    # command so, and Python then installs none: the signal would be ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=1))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert made and all(pool._shutdown for pool in made), "a loading-thread pool was left running"
    alive = [t.name for t in threading.enumerate() if t.name.startswith("log-recovery-")]
    assert not alive, f"loading threads alive after the interrupt: {alive}"


@pytest.mark.parametrize("target", ["process", "process-group"])
def test_keyboard_interrupt_stops_the_load_promptly(datasets, request, tmp_path, target) -> None:
    """Ctrl-C during a long load ends it, workers included, within PROMPT_S seconds.  The workers are made slow
    (0.6 s per scan, tests/crashy_worker.py ``sleep``) so that the uninterrupted load would take
    ~10 s more; "process-group" is what a terminal's Ctrl-C does (the workers get SIGINT too)."""
    root, groups = datasets.fresh_copy(BIGGER_DS, request, f"sigint-prompt-{target}")
    before = shm_blocks()
    env = child_env(CRASHY_MODE="sleep", CRASHY_SLEEP="0.6")
    proc, spec = run_child(tmp_path, "slow", [root / d for d in groups[0]], root, 2, GEN_NOW, env=env,
                           crashy=True, popen=True)
    t0 = time.monotonic()
    while not child_blocks(spec) and proc.poll() is None and time.monotonic() - t0 < 30:
        time.sleep(0.01)  # the pool is planning and submitting
    time.sleep(0.5)
    assert proc.poll() is None
    workers = psutil.Process(proc.pid).children(recursive=True)  # the resource trackers among them
    assert any(is_scan_worker(p.pid) for p in workers), "the load started no worker processes"
    if target == "process":
        proc.send_signal(signal.SIGINT)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    t1 = time.monotonic()
    err = _exit_within(proc, spec, PROMPT_S, f"the load was still running {PROMPT_S} s after SIGINT "
                       f"({len(child_blocks(spec))} scans submitted, 0.6 s each on 2 workers)")
    assert "KeyboardInterrupt" in err, err[-3000:]
    _, alive = psutil.wait_procs(workers, timeout=max(0.0, PROMPT_S - (time.monotonic() - t1)))
    alive = [p for p in alive if _running(p)]  # an exited worker whose parent is gone stays a zombie here
    assert not alive, f"workers still running {PROMPT_S} s after SIGINT: {[p.pid for p in alive]}"
    assert_child_left_nothing(proc.pid, spec, before, err)


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---- SIGKILL of the parent (nothing can run in it): the workers go by themselves, the next load removes the rest


def _load_processes(sid: int) -> list[int]:
    """The live (not zombie) processes of session ``sid``: a child load started by :func:`run_child` (its own
    session), its workers and resource trackers, wherever they were reparented."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) != sid:
                continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        if stat[stat.rindex(b")") + 2:][:1] not in (b"Z", b"X"):
            pids.append(int(entry))
    return pids


def _load_shm(pid: int, spec: dict[str, Any]) -> list[str]:
    """What the load of process ``pid`` has in /dev/shm: its blocks, its owner marker, loky's semaphores."""
    named = [n for n in child_blocks(spec) if os.path.exists(f"/dev/shm/{n}")]
    return sorted({*named, *(p.name for p in Path("/dev/shm").glob(f"mploader-{pid}-*")),
                   *(p.name for p in child_semaphores(pid))})


def _wait_gone(sid: int, limit: float, since: float | None = None) -> tuple[float, list[int]]:
    """Wait until no process of session ``sid`` runs, up to ``limit`` s after ``since`` (a monotonic time; now
    if None); returns how long after ``since`` that was, and the processes still running."""
    t0 = time.monotonic() if since is None else since
    while (alive := _load_processes(sid)) and time.monotonic() - t0 < limit:
        time.sleep(0.005)
    return time.monotonic() - t0, alive


KILL_GONE_S = 2  # the issue: "within 2 s no mploader process and no block of that load remain"


@pytest.mark.parametrize("target", ["parent", "process-group"])
def test_a_killed_load_leaves_no_process_and_the_next_load_removes_its_blocks(datasets, request, tmp_path,
                                                                             target) -> None:
    """SIGKILL at random moments of N=2 loads, in real child loads of a generated broker.  "parent": only the
    loading process dies (kill -9 of its pid): its workers and resource trackers must exit by themselves within
    KILL_GONE_S.  "process-group": everything dies at once (a container's OOM kill): nothing can clean up, and the
    next load's start must remove every block, the owner marker and loky's semaphores the dead load left.  The
    moments are drawn over the pool's part of an uninterrupted load of the same copy, measured first: from its
    first block to the last one seen in /dev/shm (after it only Phase 2 runs, with nothing of the pool to leave
    behind; forked workers scan a load's segments in a small part of it)."""
    import random

    root, groups = datasets.fresh_copy(BIGGER_DS, request, f"kill-{target}")
    dirs = [root / d for d in groups[0]]
    # calibration: from the first block to the last one alive, in an uninterrupted load (it leaves nothing: checked)
    proc, spec = run_child(tmp_path, "calibrate", dirs, root, 2, GEN_NOW, popen=True)
    t0 = time.monotonic()
    while not child_blocks(spec) and proc.poll() is None and time.monotonic() - t0 < 60:
        time.sleep(0.002)
    t_first = t_last_block = time.monotonic()
    while proc.poll() is None and time.monotonic() - t_first < 60:
        if any(os.path.exists(f"/dev/shm/{n}") for n in child_blocks(spec)):
            t_last_block = time.monotonic()
        time.sleep(0.002)
    err = _exit_within(proc, spec, 60, "the uninterrupted load hung")
    window = t_last_block - t_first
    assert proc.returncode == 0, err[-3000:]
    assert not _wait_gone(proc.pid, KILL_GONE_S)[1]  # its resource trackers exit once it has
    assert not _load_shm(proc.pid, spec)
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    moments = sorted(rng.uniform(0, window) for _ in range(5 if target == "parent" else 3))
    report = []
    left_counts: list[int] = []
    # a moment the load outran is tried again, earlier, twice at most; and one kill as soon as a worker is seen (the
    # random moments alone once all fell where no worker ran: the workers scan a small part of the window)
    tries: list[tuple[float | None, int]] = [(m, 0) for m in moments] + [(None, 0)]
    for i, (at, retry) in enumerate(tries):
        proc, spec = run_child(tmp_path, f"kill{i}", dirs, root, 2, GEN_NOW, popen=True)
        try:
            t0 = time.monotonic()
            while not child_blocks(spec) and proc.poll() is None and time.monotonic() - t0 < 60:
                time.sleep(0.002)
            t_block = time.monotonic()
            if at is None:
                while (proc.poll() is None and time.monotonic() - t_block < 60
                       and not any(is_scan_worker(p) for p in _load_processes(proc.pid))):
                    time.sleep(0.001)
            else:
                time.sleep(at)
            moment = time.monotonic() - t_block
            said = f"{moment:.3f} s{'' if at is not None else ' (at a worker)'}"
            if proc.poll() is not None:  # the load ended first (a faster run than the calibration): no moment
                report.append(f"{said}: the load had ended")
                if retry < 2 and at is not None:
                    tries.append((at / 2, retry + 1))
                continue
            before_kill = _load_processes(proc.pid)
            workers = len([p for p in before_kill if is_scan_worker(p)])
            t_kill = time.monotonic()
            if target == "parent":
                os.kill(proc.pid, signal.SIGKILL)
            else:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()  # not communicate(): the workers hold its stdout and stderr too
            took, alive = _wait_gone(proc.pid, KILL_GONE_S, since=t_kill)
            report.append(f"{said}: {len(before_kill) - 1} processes under the parent ({workers} workers), "
                          f"gone {took:.3f} s after the kill")
            assert not alive, (f"processes of the load killed {moment:.3f} s after its first block still running "
                               f"{KILL_GONE_S} s after the kill: {alive}; " + "; ".join(report))
            left_by_kill = _load_shm(proc.pid, spec)
            PoolEngine(LoadStats(), 2, [str(dirs[0])], None).close()  # what the next pool load does first
            left = _load_shm(proc.pid, spec)
            assert not left, (f"the load killed {moment:.3f} s after its first block left {left} in /dev/shm after "
                              f"the next load's start; " + "; ".join(report))
            report[-1] += f", {len(left_by_kill)} entries in /dev/shm, removed by the next load's start"
            left_counts.append(len(left_by_kill))
        finally:
            if proc.poll() is None or _load_processes(proc.pid):
                _stop(proc, spec)
            else:
                proc.communicate()
            for name in _load_shm(proc.pid, spec):  # after a failure: not left to the next test
                Path(f"/dev/shm/{name}").unlink(missing_ok=True)
    print(f"SIGKILL of the {target}:", "; ".join(report))
    assert sum("gone" in r for r in report if "(at a worker)" not in r) >= len(moments) // 2 + 1, report
    if target != "parent":  # nothing could clean up: some kill must have left blocks for the next load to remove
        assert max(left_counts) > 1, report
    # the kill at a worker landed while one ran (it fails where the load ended before any worker was seen)
    assert any("(0 workers)" not in r for r in report if "gone" in r), f"no kill while workers ran: {report}"


def test_workers_stay_while_the_thread_that_started_them_ends_and_leave_with_the_parent(tmp_path) -> None:
    """Linux sends a parent-death signal when the *thread* that started a worker ends, not the process (loky
    starts workers in the thread that submits first: a loading thread, after a worker crash).  A worker must
    not take that for its parent's death; it must still go when the parent process is killed."""
    code = """if True:
        import json, os, sys, threading, time
        from mploader.engine.pool import PoolEngine
        from mploader.result import LoadStats
        from tests.crashy_worker import scan_workers
        engine = PoolEngine(LoadStats(), 2, [sys.argv[1]], None)
        ex = engine._executor(sys.argv[1])
        t = threading.Thread(target=lambda: ex.submit(os.getpid).result())
        t.start(); t.join()  # the workers were started in t, which has ended
        deadline = time.monotonic() + 10  # a worker shows as one once its initializer named it: on a busy machine
        while len(scan_workers()) < 2 and time.monotonic() < deadline:  # the second may not have, yet
            time.sleep(0.05)
        first = sorted(scan_workers())
        time.sleep(0.5)
        ex.submit(os.getpid).result(timeout=30)
        print(json.dumps([first, sorted(scan_workers())]), flush=True)
        time.sleep(60)
    """
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env=child_env(), cwd=str(_ROOT), text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line, proc.communicate(timeout=10)[1][-3000:]
        first, later = json.loads(line)
        assert len(first) == 2 and later == first, f"the workers {first} died with the thread that started them: " \
                                                   f"{later}"
        t_kill = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        took, alive = _wait_gone(proc.pid, KILL_GONE_S, since=t_kill)
        assert not alive, f"processes still running {KILL_GONE_S} s after the parent's SIGKILL: {alive}"
    finally:
        if _load_processes(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        for p in [*Path("/dev/shm").glob(f"mploader-{proc.pid}-*"), *child_semaphores(proc.pid)]:
            p.unlink(missing_ok=True)


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_remove_orphaned_blocks_removes_only_what_dead_loads_left(tmp_path) -> None:
    """Real entries in /dev/shm, real processes: a dead load's blocks, marker and loky semaphores go; a live
    load's stay, also one whose owner looks dead from here but holds its marker's lock (another pid namespace),
    and so do the semaphores of a pid that a live process has (a load whose process started at another time is
    dead, its pid now someone else's)."""
    import fcntl

    from mploader.engine.cleanup import process_start, remove_orphaned_blocks

    dead, me = _dead_pid(), os.getpid()
    my_start = process_start(me)
    assert my_start, "no start time from /proc"
    locked_pid = _dead_pid()
    names = {
        "dead": [f"mploader-{dead}-123-1", f"mploader-{dead}-123-1-0", f"mploader-{dead}-123-1-7",
                 f"mploader-{dead}-123-2-0", f"sem.loky-{dead}-abc123"],
        "reused": [f"mploader-{me}-{my_start + 1}-1", f"mploader-{me}-{my_start + 1}-1-0"],
        "live": [f"mploader-{me}-{my_start}-999", f"mploader-{me}-{my_start}-999-0", f"sem.loky-{me}-abc123"],
        "locked": [f"mploader-{locked_pid}-77-1", f"mploader-{locked_pid}-77-1-0"],
        "foreign": [f"psm_{dead:x}", f"sem.loky-{_dead_pid()}-abc123", f"mploader-{dead}-x"],
    }
    fds = {}
    try:
        for group in names.values():
            for n in group:
                fds[n] = os.open(f"/dev/shm/{n}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        fcntl.flock(fds[f"mploader-{locked_pid}-77-1"], fcntl.LOCK_EX)  # held by this (live) process
        removed = remove_orphaned_blocks()
        exists = {n for group in names.values() for n in group if os.path.exists(f"/dev/shm/{n}")}
        assert not exists & {*names["dead"], *names["reused"]}, sorted(exists)
        assert exists >= {*names["live"], *names["locked"], *names["foreign"]}, sorted(exists)
        assert set(removed.blocks) >= {*names["dead"][:4], *names["reused"]}
        assert f"sem.loky-{dead}-abc123" in removed.semaphores
        assert f"mploader-{locked_pid}-77-1" in removed.locked
    finally:
        for n, fd in fds.items():
            os.close(fd)
            Path(f"/dev/shm/{n}").unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------
# A worker that dies


def _crash_run(datasets: DataSets, request: pytest.FixtureRequest, tmp_path: Path, label: str,
               **crashy: str) -> tuple[Child, dict[str, Any], Path]:
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, label)
    env = child_env(**{f"CRASHY_{k.upper()}": v for k, v in crashy.items()},
                    CRASHY_LOG=str(tmp_path / "crashes.log"))
    before = shm_blocks()
    proc, spec = run_child(tmp_path, label, [root / d for d in groups[0]], root, 2, GEN_NOW, env=env, crashy=True,
                           timeout=120)
    assert_child_left_nothing(proc.pid, spec, before, proc.stderr)
    assert (tmp_path / "crashes.log").exists(), "no worker ran crashy_scan on a matching task"
    return proc, spec, root


def _assert_conforms(proc: Child, spec: dict[str, Any], root: Path, ref: Outcome) -> dict:
    assert proc.returncode == 0, f"the load failed:\n{proc.stderr[-4000:]}"
    out = json.loads(Path(spec["out"]).read_text())
    stats = out.pop("raw_stats")
    assert_same_outcome({"results": [out], "tree": tree_digest(root)}, ref)
    return stats


@pytest.mark.parametrize("mode", ["exit", "segv", "kill"])
def test_a_worker_that_dies_once_is_replaced(datasets, request, tmp_path, mode) -> None:
    """The first scan of a task of orders-0 kills its worker (os._exit(1) / SIGSEGV / SIGKILL):
    the tasks of the broken pool are retried on a fresh one; the load completes as inline."""
    proc, spec, root = _crash_run(datasets, request, tmp_path, f"once-{mode}", mode=mode, match="/orders-0/",
                                  marker=str(tmp_path / "crashed-once"))
    stats = _assert_conforms(proc, spec, root, datasets.reference(GEN_UNCLEAN, request))
    assert stats["worker_restarts"] >= 1 and stats["inline_fallbacks"] == 0, stats
    assert "worker died" in proc.stderr and "WARNING" in proc.stderr


def test_a_worker_memory_error_does_not_fail_the_load(datasets, request, tmp_path) -> None:
    """MemoryError raised by the scan in a worker (the worker survives; the future raises): the
    issue lists it with the dead workers -- retried, then inline; the load must not fail."""
    proc, spec, root = _crash_run(datasets, request, tmp_path, "memory", mode="memory", match="/orders-0/",
                                  marker=str(tmp_path / "crashed-once"))
    stats = _assert_conforms(proc, spec, root, datasets.reference(GEN_UNCLEAN, request))
    assert stats["worker_restarts"] + stats["inline_fallbacks"] >= 1, stats
    assert any(line.startswith("WARNING") and "/orders-0/" in line for line in proc.stderr.splitlines()), proc.stderr


def test_a_task_whose_worker_always_dies_is_scanned_inline(tmp_path) -> None:
    """The only task of a load kills every worker that runs it: one retry on a fresh pool, then
    the parent scans it."""
    d = data_dir(tmp_path / "data", "d1", clean=False)
    PartitionBuilder(d, "t", 0).segment(0, *(B(o) for o in range(200)))
    ref_root = tmp_path / "ref"
    copy_tree(tmp_path / "data", ref_root)
    ref = load_copy(DataSet("one-partition", lambda root, request: [["d1"]], NOW), ref_root, [["d1"]], 1)
    env = child_env(CRASHY_MODE="exit", CRASHY_MATCH="/t-0/", CRASHY_LOG=str(tmp_path / "crashes.log"))
    before = shm_blocks()
    proc, spec = run_child(tmp_path, "always1", [d], tmp_path / "data", 2, NOW, env=env, crashy=True)
    assert_child_left_nothing(proc.pid, spec, before, proc.stderr)
    stats = _assert_conforms(proc, spec, tmp_path / "data", Outcome(ref.results, tree_digest(ref_root), []))
    assert stats["worker_restarts"] == 2 and stats["inline_fallbacks"] == 1, stats
    assert len((tmp_path / "crashes.log").read_text().splitlines()) == 2
    assert "worker died" in proc.stderr and "scanning it in the parent" in proc.stderr


def test_tasks_whose_worker_always_dies_among_other_tasks_are_scanned_inline(datasets, request, tmp_path) -> None:
    """Every scan of orders-0's segments kills its worker, while other tasks of the same data dir
    are in flight: the load still completes as inline (retry once, then the parent)."""
    proc, spec, root = _crash_run(datasets, request, tmp_path, "always", mode="exit", match="/orders-0/")
    stats = _assert_conforms(proc, spec, root, datasets.reference(GEN_UNCLEAN, request))
    assert stats["worker_restarts"] >= 2 and stats["inline_fallbacks"] >= 1, stats
    assert "worker died" in proc.stderr


# ------------------------------------------------------------------------------------------------
# Metrics


def test_remaining_segments_to_load_exists_only_while_a_pool_load_runs(datasets, request) -> None:
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, "metrics-2")
    metrics = MetricsRegistry()
    dirs = [str(root / d) for d in groups[0]]
    result = load_logs(dirs, LoaderConfig(segment_scan_workers_per_data_dir=2), now_ms=GEN_NOW,
                       metrics=metrics)
    events = [(i, e) for i, e in enumerate(metrics.history) if e.name == REMAINING_SEGMENTS_TO_LOAD]
    registered = {e.tags for _, e in events if e.kind == "register"}
    assert registered == {metrics.tags(dir=d, threadNum=t) for d in dirs for t in range(2)}
    removed = {e.tags for _, e in events if e.kind == "remove"}
    assert removed == registered
    assert not any(name == REMAINING_SEGMENTS_TO_LOAD for name, _ in metrics.current())
    # registered before the first partition finished loading, removed after the last one
    partition_done = [i for i, e in enumerate(metrics.history)
                      if e.name == REMAINING_LOGS_TO_RECOVER and e.kind == "set"]
    assert max(i for i, e in events if e.kind == "register") < partition_done[0]
    assert min(i for i, e in events if e.kind == "remove") > partition_done[-1]
    for tags in registered:
        values = [e.value for _, e in events if e.tags == tags and e.kind == "set"]
        assert values and values == sorted(values, reverse=True), values  # counts down ...
        assert values[-1] == 0  # ... to 0: every planned scan of this fault-free data was used
    assert result.stats.segments_recovered > 0


def test_remaining_segments_to_load_is_never_registered_inline(datasets, request) -> None:
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, "metrics-1")
    metrics = MetricsRegistry()
    load_logs([str(root / d) for d in groups[0]], LoaderConfig(), now_ms=GEN_NOW, metrics=metrics)
    assert metrics.history and not any(e.name == REMAINING_SEGMENTS_TO_LOAD for e in metrics.history)


# ------------------------------------------------------------------------------------------------
# "auto"


@pytest.mark.parametrize("total, workers, expected", [
    (2_000_000_000, 2, 250_000_000),  # 2 GB on 2 workers: pieces of 250 MB (85 MB segments stay whole)
    (2_000_000_000, 16, 64 * 1024 * 1024),  # 16 workers: cut, but never below 64 MiB
    (10_000_000, 4, 64 * 1024 * 1024),
])
def test_segments_are_cut_only_as_small_as_keeps_every_worker_busy(total, workers, expected) -> None:
    assert chunks_mod.piece_bytes(total, workers) == expected


@pytest.mark.parametrize("cpus, dirs, expected", [
    (8, 1, 8), (8, 2, 4), (8, 3, 2), (8, 8, 1), (8, 16, 1), (2, 1, 2), (1, 1, 1), (64, 0, 64), (5, 2, 2),
])
def test_auto_shares_the_usable_cpus_among_the_data_dirs(monkeypatch, cpus, dirs, expected) -> None:
    monkeypatch.setattr(load_plan_mod, "usable_cpus", lambda: cpus)
    assert workers_per_dir(LoaderConfig(segment_scan_workers_per_data_dir="auto"), dirs) == expected
    assert workers_per_dir(LoaderConfig(segment_scan_workers_per_data_dir=3), dirs) == 3  # explicit N wins


def test_auto_makes_a_pool_only_with_more_than_one_worker_per_dir(monkeypatch, tmp_path) -> None:
    cfg = LoaderConfig(segment_scan_workers_per_data_dir="auto")
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    monkeypatch.setattr(load_plan_mod, "usable_cpus", lambda: 8)
    engine = make_engine(cfg, dirs, LoadStats())
    try:
        assert isinstance(engine, PoolEngine) and engine.workers_per_dir == 4
    finally:
        engine.close()
    monkeypatch.setattr(load_plan_mod, "usable_cpus", lambda: 3)
    engine = make_engine(cfg, dirs, LoadStats())
    assert type(engine) is InlineEngine and engine.workers_per_dir == 1


def test_auto_load_reports_its_n_and_conforms(datasets, request, monkeypatch) -> None:
    monkeypatch.setattr(load_plan_mod, "usable_cpus", lambda: 4)
    # this small data set counts as big enough
    monkeypatch.setattr(load_plan_mod, "POOL_START_SECONDS", dict.fromkeys(WORKER_STARTS, 0.0))
    monkeypatch.setattr(load_plan_mod, "POOL_TASK_SECONDS", 0)
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, "auto")
    got = load_copy(GEN_UNCLEAN, root, groups, "auto")
    assert got.raw[0].stats.workers_per_dir == 2  # 4 CPUs, 2 data dirs
    assert_same_outcome(got, datasets.reference(GEN_UNCLEAN, request))


@pytest.mark.parametrize("start, cpus, dirs, scan_bytes, tasks, expected", [
    # spawned workers: a fresh interpreter each
    ("spawn", 2, 1, 2_000_000_000, 24, 1),  # 2 workers: a 2 GB page-cached load was faster inline (perf/README.md)
    ("spawn", 2, 1, 4_000_000_000, 48, 2),  # ... and a 4 GB one with the pool
    ("spawn", 16, 1, 2_000_000_000, 24, 16),  # 16 workers save more of the scans: the pool pays sooner
    # measured on 16 CPUs (perf/README.md, "Many cores"): 8 GB in 160 segments, the pool 1.5-1.75x faster; 2 GB in
    # 2,117 segments of 1 MB, inline faster than any pool (the parent's cost per segment); 4 dirs of 2 GB, inline
    # faster than any pool (the dirs' loading threads already scan at once)
    ("spawn", 16, 1, 8_000_000_000, 160, 16), ("spawn", 16, 1, 2_000_000_000, 2_117, 1),
    ("spawn", 16, 4, 2_000_000_000, 40, 1),
    ("spawn", 16, 2, 4_000_000_000, 40, 8),  # 2 dirs of 4 GB: half of the scans' saving still pays (8 a dir 1.14x)
    ("spawn", 16, 8, 4_000_000_000, 20, 1), ("spawn", 1, 1, 10**12, 1, 1),  # 8 dirs: 2 CPUs each, 8 loading threads
    # forked workers (perf/README.md, "Workers forked"), 2 CPUs: 2 GB 1.10-1.41x as fast as inline, 1 GB 1.09x,
    # 512 MB no faster (0.19 against 0.18 s)
    ("fork", 2, 1, 2_000_000_000, 24, 2), ("fork", 2, 1, 1_000_000_000, 16, 2), ("fork", 2, 1, 512_000_000, 16, 1),
    ("fork", 16, 1, 2_000_000_000, 2_117, 1), ("fork", 16, 4, 2_000_000_000, 40, 1), ("fork", 1, 1, 10**12, 1, 1),
])
def test_auto_starts_a_pool_where_its_start_pays(monkeypatch, start, cpus, dirs, scan_bytes, tasks, expected) -> None:
    monkeypatch.setattr(load_plan_mod, "usable_cpus", lambda: cpus)
    monkeypatch.setenv("MPLOADER_WORKER_START", start)
    cfg = LoaderConfig(segment_scan_workers_per_data_dir="auto")
    assert workers_per_dir(cfg, dirs, scan_bytes, tasks) == expected
    pool_min = load_plan_mod.auto_pool_min_bytes
    assert pool_min(2) > pool_min(4) > pool_min(16)
    assert load_plan_mod.auto_pool_min_bytes(4, tasks=1_000) > load_plan_mod.auto_pool_min_bytes(4, tasks=10)
    assert load_plan_mod.auto_pool_min_bytes(4, dirs=4) == 4 * load_plan_mod.auto_pool_min_bytes(4)
    this_start = load_plan_mod.auto_pool_min_bytes(2)
    monkeypatch.setenv("MPLOADER_WORKER_START", "spawn" if start == "fork" else "fork")
    assert (this_start < load_plan_mod.auto_pool_min_bytes(2)) == (start == "fork")  # a fork is the cheaper start


def test_auto_counts_only_the_dirs_that_scan(monkeypatch) -> None:
    """4 data dirs on 16 CPUs, the busiest recovering 8 GB in 160 segments: where all 4 scan as much, the inline
    engine's 4 loading threads already scan at once (inline); where it is the only one that scans, a pool of 4
    pays as it would for that dir alone.  Spawned workers, the start those 16-CPU figures were measured with."""
    monkeypatch.setattr(load_plan_mod, "usable_cpus", lambda: 16)
    monkeypatch.setenv("MPLOADER_WORKER_START", "spawn")
    cfg = LoaderConfig(segment_scan_workers_per_data_dir="auto")
    assert workers_per_dir(cfg, 4, 8_000_000_000, 160, 4) == workers_per_dir(cfg, 4, 8_000_000_000, 160) == 1
    assert workers_per_dir(cfg, 4, 8_000_000_000, 160, 1) == 4


def test_auto_weighs_the_busiest_dir_and_counts_the_dirs_that_scan(tmp_path) -> None:
    """_work: the busiest dir's bytes (sparse files of the sizes a plan would scan) and segments, and how many dirs
    have anything to scan: 4 dirs of which one recovers 8 GB weigh as one dir, not as four."""
    from mploader.scan import SegmentTask

    def tasks(d: str, sizes: list[int]) -> list[Any]:
        (tmp_path / d).mkdir()
        out = []
        for i, size in enumerate(sizes):
            path = tmp_path / d / f"{i:020d}.log"
            with open(path, "wb") as f:
                f.truncate(size)
            out.append(SegmentTask(str(path), i))
        return out

    planned = {"a": [(None, tasks("a", [4_000_000_000, 4_000_000_000]))], "b": [(None, [])], "c": [],
               "d": [(None, tasks("d", [10, 20, 30]))]}
    assert load_plan_mod._weigh(planned, {})[1:] == (8_000_000_000, 2, 2, 8_000_000_060, 5)  # type: ignore[arg-type]
    assert load_plan_mod._weigh({}, {})[1:] == (0, 0, 0, 0, 0)


def test_the_plan_asks_the_loads_disk_not_the_file_system_again(tmp_path, monkeypatch) -> None:
    """A partition the preflight listed and sized through the load's disk is planned from what the disk kept: no
    second listing of the partition, no second stat of a planned .log, and the same plan; one it did not keep is
    listed and left unkept."""
    from mploader import DirKind, TopicPartition
    from mploader.disk import RealDisk
    from mploader.engine.plan import DirPlan, partition_scans

    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d, "t", 0).std3()
    pb.file(10, ".index").unlink()  # segment 10: a load-time recovery, planned too
    part = (str(pb.path), TopicPartition("t", 0), DirKind.LIVE)
    plan = DirPlan(str(d), False, [part], {TopicPartition("t", 0): 20})
    expected = list(partition_scans(plan))
    assert [[t.base_offset for t in tasks] for _, _, tasks in expected] == [[10, 20]]
    disk = RealDisk()
    for name_ in disk.list_files(str(pb.path)):  # what the preflight does: list once, size each .log
        if name_.endswith(".log"):
            disk.size(str(pb.path / name_))

    def refused(*args: object) -> None:
        raise AssertionError(f"asked the file system again: {args}")

    # a partition the preflight did not cache (preflight.LISTING_CACHE_NAMES) is listed by the plan, and not cached by
    # it: the listings of every partition would otherwise stay in memory until each one's load
    other = RealDisk()
    assert list(partition_scans(DirPlan(str(d), False, [part], {TopicPartition("t", 0): 20}, disk=other))) == expected
    assert other.cached_listing(str(pb.path)) is None
    monkeypatch.setattr(plan_mod.os, "listdir", refused)
    monkeypatch.setattr(plan_mod.os.path, "getsize", refused)
    assert list(partition_scans(DirPlan(str(d), False, [part], {TopicPartition("t", 0): 20}, disk=disk))) == expected


def test_a_plan_asks_for_the_rebuilt_indexes_only_of_the_segments_recovery_writes(tmp_path) -> None:
    """With index_check="full" every segment is planned, to be checked; only those recoverLog recovers (after an
    unclean shutdown, from the recovery point) have their indexes prepared by their scan."""
    from mploader import DirKind, TopicPartition
    from mploader.engine.plan import DirPlan, partition_scans

    d = data_dir(tmp_path, clean=False)
    pb = PartitionBuilder(d, "t", 0).std3()
    part = (str(pb.path), TopicPartition("t", 0), DirKind.LIVE)

    def sizes(clean: bool, scan_all: bool) -> dict[int, int | None]:
        plan = DirPlan(str(d), clean, [part], {TopicPartition("t", 0): 20}, lambda topic: 4096,
                       lambda topic: 1024, scan_all=scan_all)
        return {t.base_offset: t.max_index_size for _, _, tasks in partition_scans(plan) for t in tasks}

    assert sizes(clean=False, scan_all=False) == {20: 1024}
    assert sizes(clean=False, scan_all=True) == {0: None, 10: None, 20: 1024}
    assert sizes(clean=True, scan_all=True) == {0: None, 10: None, 20: None}


def test_auto_sizes_a_clean_dir_by_a_bound_and_plans_it_only_for_a_pool(datasets, request, monkeypatch) -> None:
    """A clean dir has little to scan, and the inline engine never plans it: "auto" sizes it by a bound, the bytes
    of its .log files as the preflight sized them (else a plan that reads no .txnindex, each counted as corrupt),
    and plans it exactly only where that bound asks for a pool. Either way the outcome is the reference's."""
    monkeypatch.setattr(load_plan_mod, "usable_cpus", lambda: 4)
    reads: list[int] = []
    real = plan_mod._txn_index_corrupt
    monkeypatch.setattr(plan_mod, "_txn_index_corrupt", lambda d, b: reads.append(b) or real(d, b))
    plans: list[bool] = []  # bound_only of each plan made
    real_plan = load_plan_mod.plan_segment_scans
    monkeypatch.setattr(load_plan_mod, "plan_segment_scans",
                        lambda p, bound_only=False: plans.append(bound_only) or real_plan(p, bound_only))
    root, groups = datasets.fresh_copy(GEN_CLEAN_INDEX_FAULTS, request, "auto-clean-bound")
    assert list(root.rglob("*.txnindex")), "the data set must hold .txnindex files for this test to mean anything"
    got = load_copy(GEN_CLEAN_INDEX_FAULTS, root, groups, "auto")
    assert all(r.stats.workers_per_dir == 1 for r in got.raw) and reads == [] and False not in plans
    # the preflight sized a dir whose partitions it read through (a stray .swap file, say, stops it short: then the
    # bound is a plan)
    assert len(plans) < len(groups[0])
    assert_same_outcome(got, datasets.reference(GEN_CLEAN_INDEX_FAULTS, request))
    for d in groups[0]:  # the bound holds every segment the exact plan holds
        parts = [(str(p), *names.parse_partition_dir(p.name)) for p in sorted((root / d).iterdir()) if p.is_dir()]
        dir_plan = plan_mod.DirPlan(str(root / d), True, parts, {})
        exact = {t.path for _, tasks in plan_mod.plan_segment_scans(dir_plan) for t in tasks}
        bound = {t.path for _, tasks in plan_mod.plan_segment_scans(dir_plan, bound_only=True) for t in tasks}
        assert exact < bound
    # a pool pays: the clean dirs are planned exactly
    monkeypatch.setattr(load_plan_mod, "POOL_START_SECONDS", dict.fromkeys(WORKER_STARTS, 0.0))
    monkeypatch.setattr(load_plan_mod, "POOL_TASK_SECONDS", 0)
    reads.clear()
    root, groups = datasets.fresh_copy(GEN_CLEAN_INDEX_FAULTS, request, "auto-clean-exact")
    got = load_copy(GEN_CLEAN_INDEX_FAULTS, root, groups, "auto")
    assert got.raw[0].stats.workers_per_dir == 2 and reads and got.raw[0].stats.unplanned_scans == 0
    assert_same_outcome(got, datasets.reference(GEN_CLEAN_INDEX_FAULTS, request))


def test_a_pool_plans_a_clean_dir_only_where_the_preflight_found_something_to_scan(tmp_path, monkeypatch) -> None:
    """A clean dir whose every segment has its .index (the preflight's ``DirPlan.clean_scans``) has nothing to scan
    but a segment whose .txnindex fails its check: ``--workers 2`` does not plan it, as the inline engine plans no
    clean dir, and no pool starts.  With one .index gone the same load plans the dir, and the segment's scan is the
    plan's."""
    def build(root: Path) -> Path:
        d = data_dir(root, "d1", clean=True)
        for p in range(3):
            pb = PartitionBuilder(d, "orders", p)
            for base in (0, 10, 20):
                pb.segment(base, *(B(o) for o in range(base, base + 10)))
        return d

    plans: list[str] = []
    real_plan = base_mod.plan_segment_scans
    monkeypatch.setattr(base_mod, "plan_segment_scans", lambda p, *a: plans.append(p.data_dir) or real_plan(p, *a))
    nothing = build(tmp_path / "nothing")
    ref = load_logs([str(build(tmp_path / "ref"))], LoaderConfig(segment_scan_workers_per_data_dir=1))
    plans.clear()
    got = load_logs([str(nothing)], LoaderConfig(segment_scan_workers_per_data_dir=2))
    assert plans == [] and got.stats.segments_scanned == 0 and got.stats.unplanned_scans == 0
    ends = [lg.log_end_offset for lg in got.logs.values()]
    assert ends == [lg.log_end_offset for lg in ref.logs.values()] == [30] * 3

    rebuilt = build(tmp_path / "rebuilt")
    index = Path("orders-1") / file_name(10, ".index")
    (rebuilt / index).unlink()
    got = load_logs([str(rebuilt)], LoaderConfig(segment_scan_workers_per_data_dir=2))
    assert plans == [str(rebuilt)] and got.stats.segments_scanned == 1 and got.stats.unplanned_scans == 0
    assert (rebuilt / index).read_bytes() == (nothing / index).read_bytes()

    # a .txnindex failing its check (an entry below the segment's base): not planned, the parent scans it, as inline
    def corrupt(root: Path) -> Path:
        d = build(root)
        (d / "orders-2" / file_name(20, ".txnindex")).write_bytes(txn_entry(7, 3, 5, 3))
        return d

    plans.clear()
    ref = load_logs([str(corrupt(tmp_path / "txn-ref"))], LoaderConfig(segment_scan_workers_per_data_dir=1))
    got = load_logs([str(corrupt(tmp_path / "txn"))], LoaderConfig(segment_scan_workers_per_data_dir=2))
    assert plans == [] and got.stats.segments_scanned == ref.stats.segments_scanned == 1
    assert tree_digest(tmp_path / "txn") == tree_digest(tmp_path / "txn-ref")


def test_auto_scans_inline_when_there_is_little_to_scan(datasets, request, monkeypatch) -> None:
    """Starting a pool costs more than scanning a few MB: "auto" stays inline below auto_pool_min_bytes."""
    monkeypatch.setattr(load_plan_mod, "usable_cpus", lambda: 4)
    root, groups = datasets.fresh_copy(GEN_UNCLEAN, request, "auto-small")
    got = load_copy(GEN_UNCLEAN, root, groups, "auto")
    assert got.raw[0].stats.workers_per_dir == 1 and got.raw[0].stats.segments_scanned > 0
    assert_same_outcome(got, datasets.reference(GEN_UNCLEAN, request))


@pytest.mark.parametrize("affinity, cpu_max, expected", [
    (8, "max 100000\n", 8), (8, "400000 100000\n", 4), (8, "150000 100000\n", 1), (8, "50000 100000\n", 1),
    (2, "800000 100000\n", 2), (6, None, 6), (3, "garbage\n", 3),
])
def test_usable_cpus_reads_affinity_and_the_cgroup_quota(monkeypatch, affinity, cpu_max, expected) -> None:
    import builtins
    import io

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)))
    real_open = builtins.open

    def fake_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if path == "/sys/fs/cgroup/cpu.max":
            if cpu_max is None:
                raise FileNotFoundError(path)
            return io.StringIO(cpu_max)
        return real_open(path, *args, **kwargs)

    import mploader.host.cpus as cpus_mod

    monkeypatch.setattr(cpus_mod, "open", fake_open, raising=False)
    assert cpus_mod.usable_cpus() == expected


GOOD, WRONG_OFFSET, MID_BATCH, NEAR_END = range(4)  # kinds of index entries in the chunk-cut property test


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(80, 400), min_size=5, max_size=60),
       picks=st.lists(st.tuples(st.integers(0, 59), st.sampled_from([GOOD] * 6 + [WRONG_OFFSET, MID_BATCH, NEAR_END])),
                      max_size=30),
       chunk=st.integers(100, 3000))
def test_chunk_cuts_are_the_first_confirmed_entry_past_each_target(tmp_path_factory, sizes, picks, chunk) -> None:
    """Whatever the order of the index entries (a damaged index may go back), each cut is the first entry in
    index order at or past the target (the previous cut + chunk_bytes); it must start a v2 batch whose last
    offset is the entry's, at least 61 bytes before the end: the first that does not (a wrong offset, a
    position inside a batch or near the end) stops the cutting."""
    from mploader.format import index as index_fmt

    d = tmp_path_factory.mktemp("cuts")
    batches = [records.build_batch(i, records.simple_records([b"v" * (s - 72)])) for i, s in enumerate(sizes)]
    starts = np.cumsum([0] + [len(b) for b in batches[:-1]]).tolist()
    log = d / "00000000000000000000.log"
    log.write_bytes(b"".join(batches))
    size = log.stat().st_size
    entries = []  # (kind, relative offset, position), in index order, repeats included
    for p, kind in picks:
        i = p % len(batches)
        position = {GOOD: starts[i], WRONG_OFFSET: starts[i], MID_BATCH: starts[i] + 7, NEAR_END: size - 30}[kind]
        entries.append((kind, i + 1000 if kind == WRONG_OFFSET else i, position))
    (d / "00000000000000000000.index").write_bytes(index_fmt.offset_index_bytes(
        0, [e[1] for e in entries], [e[2] for e in entries], file_size=8 * (len(entries) + 5)))
    expected, target = [], chunk
    if size > chunk:
        for kind, _, position in entries:
            if position < target:
                continue
            if kind != GOOD:
                break
            expected.append(position)
            target = position + chunk
    assert chunks_mod.chunk_boundaries(str(log), 0, size, chunk) == expected
