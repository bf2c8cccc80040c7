"""The Spark engine (``mploader.spark.engine``) held to the engine conformance tests of the inline and pool
engines (tests/test_engine.py), with a real ``local[2]`` session: the same result, stats and bytes on disk as
an inline load, every planned scan made by an executor, big segments cut into the pool's chunks."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import mploader.engine.chunks as chunks_mod  # noqa: E402
import tests.test_engine as engine_tests  # noqa: E402
from mploader.load_plan import LoadPlan  # noqa: E402
from tests.spark_session import spark  # noqa: E402, F401
from tests.test_engine import DataSet, DataSets, EngineConformance, Outcome, assert_same_outcome, load_copy  # noqa: E402

datasets = engine_tests.datasets  # the data sets' session fixture (templates and inline references, built once)


class TestSparkEngine(EngineConformance):
    """``N = 2``: the config asks for 2 workers, and the engine reports local[2]'s 2 cores as its workers."""

    N = 2

    def check(self, ds: DataSet, datasets: DataSets, request: pytest.FixtureRequest,
              monkeypatch: pytest.MonkeyPatch, *, defer_stats: bool = False) -> tuple[Outcome, Outcome, dict[str, Any]]:
        from mploader.spark.engine import SparkEngine

        session = request.getfixturevalue("spark")
        ref = datasets.reference(ds, request)
        root, groups = datasets.fresh_copy(ds, request, "spark")
        seen: dict[str, Any] = {"cuts": {}, "engines": []}
        real_cuts = chunks_mod.chunk_boundaries

        def cuts(log_path: str, base_offset: int, size: int, chunk_bytes: int = chunks_mod.CHUNK_BYTES) -> list[int]:
            out = real_cuts(log_path, base_offset, size, chunk_bytes)
            seen["cuts"][os.path.relpath(log_path, root)] = out
            return out

        monkeypatch.setattr(chunks_mod, "chunk_boundaries", cuts)

        def make(plan: Any, cfg: Any, dirs: Any, stats: Any, metrics: Any = None, progress: Any = None,
                 **_: Any) -> SparkEngine:
            engine = SparkEngine(session, stats, progress, chunk_bytes=ds.chunk_bytes)
            seen["engines"].append(engine)
            return engine

        monkeypatch.setattr(LoadPlan, "engine", make)
        got = load_copy(ds, root, groups, self.N)
        assert_same_outcome(got, ref, stats=not defer_stats)
        for r in got.raw:
            if r is not None:
                assert r.stats.workers_per_dir == self.N
                assert r.stats.inline_fallbacks == 0 and r.stats.unplanned_scans == 0
        seen["chunk_results"] = sum(e.executor_pieces for e in seen["engines"])
        if ds.pool_work:
            assert seen["chunk_results"] > 0, "no scan came back from an executor"
        seen["root"] = root
        return got, ref, seen
