"""``mploader spark`` as an operator runs it, in a process of its own (a JVM's start-up is what is under test):
quiet unless ``-v`` (no log4j INFO/WARN line of Spark's, no "Setting default log level", no FutureWarning), the
WARN lines of ``mploader load`` (truncations, deleted segments, acknowledged records lost) printed by
``spark load --apply`` too, once each, though the executors made them, and the inventory's and summary's integer
columns integers (pandas' nullable ``Int64``), not floats with NaN for null.  The Parquet writing without Spark too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_json import ROOT
from tests.kafkadir import NOW
from tests.test_cli_operator import _lossy_broker

# a log4j line (Spark's pattern, ours, or a level word after a date), and what Spark's default profile prints at start
_LOG4J = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN) ")
_SPARK_START = ("Using Spark's default log4j profile", "Setting default log level", "To adjust logging level")
# the JVM's own line (Spark's launcher adds the module): no log4j configuration can hold it back
_JVM = "WARNING: Using incubator modules: jdk.incubator.vector"
# the load's WARN lines, as cli.logs formats them: "[2025-01-31 12:00:00,123] WARN message (logger)"
_WARN = re.compile(r"^\[[^]]+\] WARN (.*)$")


def _need_spark() -> None:
    pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        pytest.skip("java not found: install Java 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME")


def _mploader(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="default::FutureWarning")  # shown, as by default
    return subprocess.run([sys.executable, "-m", "mploader", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def _noise(stderr: str) -> list[str]:
    """The lines of ``stderr`` a quiet run must not print."""
    return [line for line in stderr.splitlines()
            if _LOG4J.match(line) or line.startswith(_SPARK_START) or "FutureWarning" in line]


def _integer_columns_are_integers(out: Path) -> None:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name in ("inventory", "summary"):
        schema = pq.read_schema(next((out / name).rglob("*.parquet")))
        frame = pd.read_parquet(out / name)
        ints = [f.name for f in schema if pa.types.is_integer(f.type)]
        assert ints and not [f.name for f in schema if pa.types.is_floating(f.type)], schema
        assert {c: str(frame[c].dtype) for c in ints} == {c: "Int32" if c in ("partition", "node_id") else "Int64"
                                                          for c in ints}
    inventory = pd.read_parquet(out / "inventory")
    assert inventory.first_invalid_position.isna().any() and inventory.first_invalid_position.notna().any()


def test_spark_verify_prints_no_spark_log_line_unless_v(tmp_path: Path) -> None:
    _need_spark()
    d, _ = _lossy_broker(tmp_path)
    quiet = _mploader("spark", "verify", str(d), "--out", str(tmp_path / "out"), "--now-ms", str(NOW))
    assert quiet.returncode == 1, quiet.stderr  # the lossy broker is not healthy
    assert "NOT HEALTHY" in quiet.stdout
    assert not _noise(quiet.stderr), quiet.stderr
    assert [line for line in quiet.stderr.splitlines() if line != _JVM] == [], quiet.stderr
    _integer_columns_are_integers(tmp_path / "out")
    verbose = _mploader("-v", "spark", "verify", str(d), "--out", str(tmp_path / "out-v"), "--now-ms", str(NOW))
    assert verbose.returncode == 1, verbose.stderr
    assert any(line.startswith(_SPARK_START) or _LOG4J.match(line) for line in verbose.stderr.splitlines()), \
        verbose.stderr  # with -v, Spark's own lines show
    assert "Loading logs from log dir" in verbose.stderr  # and mploader's INFO lines


def test_spark_load_prints_the_warn_lines_of_mploader_load_once_each(tmp_path: Path) -> None:
    _need_spark()
    d, _ = _lossy_broker(tmp_path / "src")
    single, spark = tmp_path / "single", tmp_path / "spark"
    shutil.copytree(d, single)
    shutil.copytree(d, spark)
    ref = _mploader("load", str(single), "--now-ms", str(NOW), "--no-progress")
    got = _mploader("spark", "load", str(spark), "--apply", "--out", str(tmp_path / "out"), "--now-ms", str(NOW))
    assert got.returncode == ref.returncode, (ref.stderr, got.stderr)
    assert not _noise(got.stderr), got.stderr

    def warnings(stderr: str, path: Path) -> list[str]:
        return sorted(m.group(1).replace(str(path), "DIR") for line in stderr.splitlines() if (m := _WARN.match(line)))

    want = warnings(ref.stderr, single)
    assert any("truncat" in w.lower() for w in want) and any("acknowledged" in w.lower() for w in want), ref.stderr
    assert any("mploader.recovery" in w for w in want) and any("mploader.manager" in w for w in want), ref.stderr
    assert warnings(got.stderr, spark) == want, got.stderr
    _integer_columns_are_integers_load(tmp_path / "out")


def _integer_columns_are_integers_load(out: Path) -> None:
    import pandas as pd

    summary = pd.read_parquet(out / "summary")
    assert str(summary.records_removed.dtype) == "Int64" and str(summary.healthy.dtype) == "boolean"
    assert summary.healthy.isna().all()  # verify only: null, not False


def test_append_parquet_keeps_integers_and_never_replaces_a_file(tmp_path: Path) -> None:
    """Without Spark: what :meth:`FleetTables.write` appends to a local path, run after run; a write that fails
    leaves nothing of its own behind and the earlier run's file as it was."""
    pa = pytest.importorskip("pyarrow", reason="the spark extra is not installed (pip install -e '.[spark]')")
    pd = pytest.importorskip("pandas", reason="the spark extra is not installed (pip install -e '.[spark]')")
    from mploader.spark.output import INVENTORY_SCHEMA, RunInfo, append_parquet

    def rows(run: RunInfo) -> list[dict[str, object]]:
        where = {**run.columns(), "broker": "c/1", "broker_dirs": ["/d"], "data_dir": "/d", "topic": "t",
                 "dir": "/d/t-0", "size_bytes": 1, "crc": "ok"}
        return [{**where, "partition": 0, "base_offset": 0, "first_invalid_position": None, "max_timestamp": None},
                {**where, "partition": 1, "base_offset": 2**62, "first_invalid_position": 17, "crc": "invalid",
                 "max_timestamp": 1_730_000_000_123}]

    path = tmp_path / "inventory"
    first, second = RunInfo.begin("verify"), RunInfo.begin("verify")
    (a,) = append_parquet([(pa.Table.from_pylist(rows(first), INVENTORY_SCHEMA), str(path))], first)
    before = Path(a).read_bytes()
    (b,) = append_parquet([(pa.Table.from_pylist(rows(second), INVENTORY_SCHEMA), str(path))], second)
    assert Path(a).read_bytes() == before and a != b
    assert sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()) == sorted(
        f"run_date={r.run_date}/part-{r.run_id}-00000.parquet" for r in (first, second))
    broken = pa.Table.from_pylist([{**rows(second)[0], "broker": None}], INVENTORY_SCHEMA)  # a non-null column
    with pytest.raises(ValueError, match="broker"):
        append_parquet([(broken, str(path))], RunInfo.begin("verify"))
    assert len([p for p in path.rglob("*") if p.is_file()]) == 2 and Path(a).read_bytes() == before
    frame = pd.read_parquet(path)
    assert str(frame.first_invalid_position.dtype) == "Int64" and str(frame.partition.dtype) == "Int32"
    assert frame.first_invalid_position.isna().tolist() == [True, False] * 2 and frame.base_offset[1] == 2**62
    assert sorted(set(frame.run_id)) == sorted({first.run_id, second.run_id})
    import pyarrow.parquet as pq

    schema = pq.read_schema(a)
    assert schema.field("first_invalid_position").type == pa.int64()
    assert schema.field("max_timestamp").type == pa.timestamp("ms", tz="UTC")
    assert not schema.field("broker").nullable and schema.field("reason").nullable
    assert pq.read_table(a).column("max_timestamp").to_pylist()[1].timestamp() == 1_730_000_000.123


def test_a_url_is_written_by_spark_a_path_by_the_driver() -> None:
    from mploader.spark.output import _local_path

    assert _local_path("/tmp/out") == "/tmp/out" and _local_path("out") == "out"
    assert _local_path("file:///tmp/out") == "/tmp/out" and _local_path("file:/tmp/out") == "/tmp/out"
    assert _local_path("hdfs://nn/out") is None and _local_path("s3a://bucket/out") is None


def test_spark_load_documents_carry_the_warnings_of_mploader_load(tmp_path: Path) -> None:
    """Each broker's document has the ``warnings`` ``mploader load --json`` has: its executors' lines too (the
    truncations), not only the driver's."""
    import json

    _need_spark()
    d, _ = _lossy_broker(tmp_path / "src")
    single, spark = tmp_path / "single", tmp_path / "spark"
    shutil.copytree(d, single)
    shutil.copytree(d, spark)
    ref = _mploader("load", str(single), "--now-ms", str(NOW), "--json")
    got = _mploader("spark", "load", str(spark), "--out", str(tmp_path / "out"), "--now-ms", str(NOW), "--json")
    assert got.returncode == ref.returncode, (ref.stderr, got.stderr)
    want = [w.replace(str(single), "DIR") for w in json.loads(ref.stdout)["warnings"]]
    brokers = json.loads(got.stdout)["brokers"]
    assert len(brokers) == 1 and any("truncat" in w.lower() for w in want), want
    assert [w.replace(str(spark), "DIR") for w in brokers[0]["warnings"]] == want
