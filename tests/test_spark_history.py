"""The fleet history (docs/spark.md, "The fleet history"), with real Spark and the real command: three runs to one
``--out`` (``spark verify`` of two brokers, ``spark load --apply`` of one, ``spark verify`` again) append, each
run's rows with its id, time, command and broker identity; the files of a run are never touched again; the types
read back as written (pyarrow and Spark); ``acknowledged_offsets_lost`` is what the JSON says; the three queries
of docs/spark.md, taken from the doc, answer what the JSON documents say they must; an ``--out`` of the layout
before the history is refused.  Spark's own writer (a URL only Spark reaches) appends the same history."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from mploader import LoaderConfig, __version__  # noqa: E402
from mploader.broker_config.properties import read_properties  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from mploader.spark.identity import MetaProperties, broker_key, meta_properties  # noqa: E402
from tests.kafkadir import NOW  # noqa: E402
from tests.spark_session import spark  # noqa: E402, F401
from tests.test_cli_operator import _lossy_broker  # noqa: E402

# a broker whose faults leave segments with a failed CRC (test_spark_fleet's b3)
_BROKER = GeneratorConfig(data_dirs=2, topics=2, partitions_per_topic=2, total_bytes=400_000, segment_bytes=32 * 1024,
                          batch_bytes=4096, records_per_batch=8, faults=8, seed=23, node_id=3)
_QUERIES = re.compile(r"```sql\n(.*?)```", re.DOTALL)


@dataclass
class Run:
    doc: dict[str, Any]  # the --json-out document
    text: str  # what it printed
    code: int


@dataclass
class History:
    out: Path
    broker_dirs: list[str]  # the generated broker's (meta.properties: node.id 3)
    lossy: str  # a data dir without meta.properties, whose load loses acknowledged offsets
    runs: list[Run]
    first_files: dict[Path, bytes]  # every file of the history after the first run


def _main(args: list[str], doc: Path) -> Run:
    from mploader.cli.main import main

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = main([*args, "--now-ms", str(NOW), "--json-out", str(doc)])
    return Run(json.loads(doc.read_text()), text.getvalue(), code)


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def history(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> History:  # noqa: F811
    root = tmp_path_factory.mktemp("history")
    generate(root / "b3", _BROKER)
    broker_dirs = [str(d) for d in sorted((root / "b3").glob("data-*"))]
    lossy = str(_lossy_broker(root / "lossy")[0])
    out = root / "out"
    runs = [_main(["spark", "verify", *broker_dirs, lossy, "--out", str(out)], root / "1.json")]
    first = _files(out)
    runs.append(_main(["spark", "load", lossy, "--apply", "--out", str(out)], root / "2.json"))
    runs.append(_main(["spark", "verify", *broker_dirs, lossy, "--out", str(out)], root / "3.json"))
    return History(out, broker_dirs, lossy, runs, first)


def _read(path: Path) -> Any:
    """A table of the history with ``run_date`` a date (pyarrow)."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    return pq.read_table(path, partitioning=ds.partitioning(pa.schema([("run_date", pa.date32())]), flavor="hive"))


def _broker_of(h: History, data_dir: str) -> str:
    """The ``broker`` column's value, from the files (docs/spark.md)."""
    if data_dir == h.lossy:
        return h.lossy
    props = read_properties(Path(data_dir) / "meta.properties")
    return f"{props['cluster.id']}/{props['node.id']}"


def test_runs_append_and_never_touch_an_earlier_runs_files(history: History) -> None:
    h = history
    assert [r.code for r in h.runs] == [1, 4, 1]  # the faulty broker is unhealthy; the load lost acknowledged data
    ids = [r.doc["spark"]["run_id"] for r in h.runs]
    assert len(set(ids)) == 3 and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    for run, run_id in zip(h.runs, ids):
        assert f"run {run_id}: appended {run.doc['spark']['inventory_rows']} inventory rows" in run.text
    after = _files(h.out)
    assert {p: after.get(p) for p in h.first_files} == h.first_files  # byte for byte
    names = sorted(p.relative_to(h.out).as_posix() for p in after)
    assert names == sorted(f"{table}/run_date={r.doc['spark']['run_time'][:10]}/part-{r.doc['spark']['run_id']}-00000"
                           f".parquet" for table in ("inventory", "summary") for r in h.runs)
    for table in ("inventory", "summary"):
        rows = _read(h.out / table).group_by("run_id").aggregate([("run_id", "count")]).to_pylist()
        assert {r["run_id"]: r["run_id_count"] for r in rows} == {
            r.doc["spark"]["run_id"]: r.doc["spark"][f"{table}_rows"] for r in h.runs}


def test_types_and_identity_read_back(spark: Any, history: History) -> None:  # noqa: F811
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import types as T

    from mploader.spark.output import INVENTORY_SCHEMA, SUMMARY_SCHEMA

    h = history
    for table, schema in (("inventory", INVENTORY_SCHEMA), ("summary", SUMMARY_SCHEMA)):
        for file in (h.out / table).rglob("*.parquet"):
            got = pq.read_schema(file)
            assert [(f.name, f.type, f.nullable) for f in got] == [
                (f.name, f.type, f.nullable) for f in schema if f.name != "run_date"]
        read = _read(h.out / table)
        assert read.schema.field("run_date").type == pa.date32()
        assert read.schema.field("broker_dirs").type == pa.list_(pa.field("element", pa.string(), nullable=False))
        assert not [f.name for f in schema if not f.nullable and read.column(f.name).null_count]
        assert {f.name: type(f.dataType) for f in spark.read.parquet(str(h.out / table)).schema if f.name in (
            "run_time", "run_date", "broker_dirs", "max_timestamp", "node_id")} == {
            "run_time": T.TimestampType, "run_date": T.DateType, "broker_dirs": T.ArrayType, "node_id": T.IntegerType,
            **({"max_timestamp": T.TimestampType} if table == "inventory" else {})}
        assert spark.read.parquet(str(h.out / table)).schema["broker_dirs"].dataType.elementType == T.StringType()
    assert INVENTORY_SCHEMA.field("max_timestamp").type == pa.timestamp("ms", tz="UTC")  # the files' (above)
    inventory = _read(h.out / "inventory").to_pylist()
    commands = {r.doc["spark"]["run_id"]: c for r, c in zip(h.runs, ("verify", "load --apply", "verify"))}
    meta = {d: meta_properties(read_properties(Path(d) / "meta.properties")) for d in h.broker_dirs}
    segments = {(s["base_offset"], p["dir"], run.doc["spark"]["run_id"]): s for run in (h.runs[0], h.runs[2])
                for p in run.doc["partitions"] for s in p["segments"]}
    for row in inventory:
        assert (row["command"], row["tool_version"], row["host"]) == (commands[row["run_id"]], __version__,
                                                                     socket.gethostname())
        assert row["run_time"].tzinfo is not None and row["run_date"] == row["run_time"].astimezone(dt.UTC).date()
        assert row["broker"] == _broker_of(h, row["data_dir"]) and row["data_dir"] in row["broker_dirs"]
        own = meta.get(row["data_dir"])
        assert (row["cluster_id"], row["node_id"], row["directory_id"]) == (
            (own.cluster_id, 3, own.directory_id) if own else (None, None, None))
        assert row["broker_dirs"] == (h.broker_dirs if own else [h.lossy])
        if row["command"] == "verify":  # Kafka's -1 (no timestamp) is null; the rest are the audit's milliseconds
            ms = segments[(row["base_offset"], row["dir"], row["run_id"])]["max_timestamp"]
            assert row["max_timestamp"] == (None if ms == -1 else dt.datetime.fromtimestamp(ms / 1000, dt.UTC))
    assert all(m is not None and m.directory_id for m in meta.values())


def test_acknowledged_offsets_lost_is_the_jsons(history: History) -> None:
    h = history
    summary = _read(h.out / "summary").to_pylist()

    def column(run: Run) -> dict[str, int | None]:
        return {r["dir"]: r["acknowledged_offsets_lost"] for r in summary if r["run_id"] == run.doc["spark"]["run_id"]}

    (broker,) = h.runs[1].doc["brokers"]
    lost = {w["dir"]: w["offsets"] for w in broker["structured_warnings"] if w["kind"] == "acknowledged_records_lost"}
    assert column(h.runs[1]) == {lg["dir"]: lost.get(lg["dir"], 0) for lg in broker["logs"]}
    assert sum(lost.values()) == 11  # orders-3: the log end falls from 30 to 14 below the high watermark 25
    for run in (h.runs[0], h.runs[2]):  # verify: its prediction's impact
        want = {}
        for p in run.doc["partitions"]:
            i = p["recovery"]["impact"]
            hw, before, after = i["high_watermark"], i["log_end_offset_before"], i["log_end_offset_after"]
            want[p["dir"]] = 0 if hw is None else max(0, min(before, hw) - after)
        assert column(run) == want
    assert column(h.runs[0])[f"{h.lossy}/orders-3"] == 11 and column(h.runs[2])[f"{h.lossy}/orders-3"] == 0


def _documented_queries() -> list[str]:
    return _QUERIES.findall((_ROOT / "docs" / "spark.md").read_text())


def test_the_documented_queries_answer_what_the_runs_say(spark: Any, history: History) -> None:  # noqa: F811
    h = history
    spark.read.parquet(str(h.out / "inventory")).createOrReplaceTempView("inventory")
    spark.read.parquet(str(h.out / "summary")).createOrReplaceTempView("summary")
    lost_sql, crc_sql, growth_sql = _documented_queries()

    def rows(sql: str, *keep: str) -> list[tuple[Any, ...]]:
        return [tuple(r[k] for k in keep) for r in spark.sql(sql).collect()]

    # lost in the last 7 days: from the documents, per broker, partition and command
    summary = _read(h.out / "summary").to_pylist()
    want_lost: dict[tuple[str, str, int, str], list[int]] = {}
    for r in summary:
        if r["acknowledged_offsets_lost"]:
            want_lost.setdefault((r["broker"], r["topic"], r["partition"], r["command"]), []).append(
                r["acknowledged_offsets_lost"])
    assert {(h.lossy, "orders", 3, "load --apply"), (h.lossy, "orders", 3, "verify")} <= set(want_lost)
    assert rows(lost_sql, "broker", "topic", "partition", "command", "acknowledged_offsets_lost", "runs") == [
        (*k, max(v), len(v)) for k, v in sorted(want_lost.items())]
    # failed CRCs of each broker's newest verify: the third run's document
    newest = h.runs[2].doc
    want_crc = sorted((_broker_of(h, p["data_dir"]), newest["spark"]["run_id"], p["data_dir"], p["topic"],
                       p["partition"], s["base_offset"], s["first_invalid_position"], s["reason"])
                      for p in newest["partitions"] for s in p["segments"] if s["first_invalid_position"] is not None)
    assert want_crc and {w[0] for w in want_crc} == {_broker_of(h, h.broker_dirs[0])}  # the load fixed the lossy dir
    assert rows(crc_sql, "broker", "run_id", "data_dir", "topic", "partition", "base_offset",
                "first_invalid_position", "reason") == want_crc
    # bytes per topic, verify by verify
    want_growth = []
    for topic in sorted({p["topic"] for r in (h.runs[0], h.runs[2]) for p in r.doc["partitions"]}):
        before = None
        for run in (h.runs[0], h.runs[2]):
            size = sum(s["size_bytes"] for p in run.doc["partitions"] if p["topic"] == topic for s in p["segments"])
            want_growth.append((topic, run.doc["spark"]["run_id"], size, None if before is None else size - before))
            before = size
    assert rows(growth_sql, "topic", "run_id", "bytes", "growth") == want_growth
    assert any(g is not None and g < 0 for *_, g in want_growth)  # the load cut the lossy dir's orders-3


def test_an_output_of_the_old_layout_is_refused(spark: Any, tmp_path: Path) -> None:  # noqa: F811
    from mploader.spark.output import _hadoop_names, history_problem

    d, _ = _lossy_broker(tmp_path / "src")
    out = tmp_path / "out"
    (out / "inventory").mkdir(parents=True)
    (out / "inventory" / "part-00000.parquet").write_bytes(b"an earlier run's")
    (out / "inventory" / "_SUCCESS").write_bytes(b"")
    before = _files(tmp_path)
    run = _main(["spark", "load", str(d), "--apply", "--out", str(out)], tmp_path / "doc.json")
    assert run.code == 2 and run.doc["error"]["kind"] == "usage"
    message = run.doc["error"]["message"]
    assert f"{out}/inventory holds an earlier output of the unpartitioned layout (part-00000.parquet)" in message
    assert f"rename it to {out}.old" in message
    assert {p: b for p, b in _files(tmp_path).items() if p.name != "doc.json"} == before  # nor the data dir loaded
    # Spark's file system (another URL than a local path) lists the same
    assert sorted(_hadoop_names(spark, f"file://{out}/inventory")) == ["_SUCCESS", "part-00000.parquet"]
    assert _hadoop_names(spark, f"file://{out}/summary") == []
    assert history_problem(spark, out) == message
    assert history_problem(spark, f"file://{out}") == message.replace(str(out), f"file://{out}")


def test_spark_appends_the_same_history(spark: Any, tmp_path: Path) -> None:  # noqa: F811
    """What Spark writes (another URL than a local path: here the held Arrow tables are dropped): appended by
    ``run_date``, timestamps as Parquet TIMESTAMP, the non-null columns ``required``, the first run's files kept."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mploader.spark import fleet
    from mploader.spark.output import INVENTORY_SCHEMA, SUMMARY_SCHEMA, history_problem

    d, _ = _lossy_broker(tmp_path / "src")
    out = tmp_path / "out"
    runs = [fleet.verify(spark, [str(d)], LoaderConfig(), now_ms=NOW) for _ in range(2)]
    for frame, schema in ((runs[0].tables.inventory, INVENTORY_SCHEMA), (runs[0].tables.summary, SUMMARY_SCHEMA)):
        assert [(f.name, f.nullable) for f in frame.schema] == [(f.name, f.nullable) for f in schema]
    written = []
    for run in runs:
        dataclasses.replace(run.tables, inventory_table=None, summary_table=None).write(out)
        written.append(_files(out))
    assert {p: written[1].get(p) for p in written[0]} == written[0]
    assert history_problem(spark, out) is None  # _SUCCESS and .crc files are Spark's, not an old layout
    for table, schema in (("inventory", INVENTORY_SCHEMA), ("summary", SUMMARY_SCHEMA)):
        files = sorted((out / table).rglob("*.parquet"))
        assert len(files) >= 2 and {f.parent.name for f in files} <= {f"run_date={r.tables.run.run_date}" for r in runs}
        got = pq.read_schema(files[0])
        want = {f.name: f.nullable for f in schema if f.name != "run_date"}
        assert {f.name: f.nullable for f in got} == want
        assert got.field("run_time").type == pa.timestamp("us", tz="UTC")
        if table == "inventory":
            assert got.field("max_timestamp").type == pa.timestamp("us", tz="UTC")
        ids = set(_read(out / table).column("run_id").to_pylist())
        assert ids == {r.tables.run.run_id for r in runs}


def test_meta_properties_as_kafka_reads_them() -> None:
    uuid = "AAAAAAAAAAAAAAAAAAAAAQ"
    assert meta_properties({"version": "1", "cluster.id": "c", "node.id": "7", "directory.id": uuid}) == \
        MetaProperties("c", 7, uuid)
    assert meta_properties({"broker.id": "2", "node.id": "9"}) == MetaProperties(None, 2, None)  # version 0: broker.id
    assert meta_properties({"version": "0"}) == MetaProperties(None, None, None)
    for bad in ({"version": "1", "node.id": "1"}, {"version": "1", "cluster.id": "c"}, {"version": "2"},
                {"broker.id": "x"}, {"broker.id": str(2**31)}, {"broker.id": "1", "directory.id": "short"},
                {"broker.id": "1", "directory.id": "AAAAAAAAAAAAAAAAAAAAA+"}):
        with pytest.raises(ValueError):
            meta_properties(bad)
    assert broker_key("/d", MetaProperties("c", 7, None)) == "c/7"
    assert broker_key("/d", MetaProperties(None, 2, None)) == "2"
    assert broker_key("/d", MetaProperties(None, None, None)) == broker_key("/d", None) == "/d"
