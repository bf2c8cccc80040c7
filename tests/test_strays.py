"""Stray logs as a KRaft broker decides them at start-up (LogManager.loadLog's ``isStray``, the broker's
``LogManager.isStrayKraftReplica``): from its metadata image and its ``node.id``, a loaded log whose topic id the
image does not know, whose replicas do not include this broker, or that has no topic id, is renamed
``<topic>-<partition>.<uuid>-stray`` and reported; nothing of it is deleted; a dry run renames nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mploader import LoaderConfig, load_logs
from mploader.cli.main import main
from mploader.format import metadata_records as mr
from mploader.format.checkpoint import partition_metadata_bytes
from mploader.format.metadata_image import read_metadata_image
from mploader.format.names import DirKind, TopicPartition
from mploader.manager import KraftStrayLogs
from tests.fingerprint import tree_state
from tests.kafkadir import NOW, B, PartitionBuilder, data_dir
from tests.metadata_writer import encode, write_log

ORDERS, GONE = b"\x01" * 16, b"\x02" * 16  # topic ids: one the image knows, one it does not
BROKER = 1
STRAY_NAME = re.compile(r"(?P<tp>.+)\.[0-9a-f]{32}-stray")


def _broker(root: Path) -> Path:
    """A KRaft broker's data dir (node.id 1) whose metadata log assigns orders-0 to it and orders-1 to broker 2;
    gone-0's topic id is not in the image; nometa-0 has no partition.metadata."""
    d = data_dir(root, "d1", clean=False)
    for name, p, tid in (("orders", 0, ORDERS), ("orders", 1, ORDERS), ("gone", 0, GONE), ("nometa", 0, None)):
        b = PartitionBuilder(d, name, p).segment(0, *(B(o) for o in range(12)))
        if tid is not None:
            b.write("partition.metadata", partition_metadata_bytes(tid))
    meta = d / "__cluster_metadata-0"
    meta.mkdir()
    write_log(meta, [[encode(mr.FeatureLevelRecord("metadata.version", 21)), encode(mr.TopicRecord("orders", ORDERS)),
                      encode(mr.PartitionRecord(0, ORDERS, (1, 3), (1, 3), (), (), 1, 0, 0), 1),
                      encode(mr.PartitionRecord(1, ORDERS, (2, 3), (2, 3), (), (), 2, 0, 0), 1)]])
    return d


def _server_properties(root: Path, d: Path) -> Path:
    path = root / "server.properties"
    path.write_text(f"process.roles=broker\nnode.id={BROKER}\nlog.dirs={d}\n")
    return path


def _strays(d: Path) -> dict[str, str]:
    """The stray directories in ``d``: the partition each was, by its name."""
    return {m["tp"]: e.name for e in d.iterdir() if (m := STRAY_NAME.fullmatch(e.name))}


def test_the_load_renames_what_the_image_does_not_give_this_broker(tmp_path: Path) -> None:
    d = _broker(tmp_path)
    files_before = {p.name: tree_state(d / p.name) for p in d.iterdir() if p.is_dir()}
    result = load_logs([str(d)], LoaderConfig(), NOW,
                       strays=KraftStrayLogs(read_metadata_image(d / "__cluster_metadata-0"), BROKER))
    assert set(result.logs) == {TopicPartition("orders", 0)}
    reasons = {lg.topic_partition: lg.stray_reason for lg in result.stray_logs}
    assert set(reasons) == {TopicPartition("orders", 1), TopicPartition("gone", 0), TopicPartition("nometa", 0)}
    assert "does not contain" in str(reasons[TopicPartition("orders", 1)])
    assert "does not exist" in str(reasons[TopicPartition("gone", 0)])
    assert "no topic id" in str(reasons[TopicPartition("nometa", 0)])
    assert all(lg.kind is DirKind.STRAY and Path(lg.dir).name == _strays(d)[str(lg.topic_partition)]
               for lg in result.stray_logs)
    assert set(_strays(d)) == {"orders-1", "gone-0", "nometa-0"}
    for tp, name in _strays(d).items():  # renamed, not deleted: its files are the ones a load leaves
        assert not (d / tp).exists() and {f.name for f in (d / name).iterdir()} >= {
            f for f in files_before[tp] if f.endswith(".log")}
    # the next start loads them as stray dirs again, renames nothing more
    again = load_logs([str(d)], LoaderConfig(), NOW,
                      strays=KraftStrayLogs(read_metadata_image(d / "__cluster_metadata-0"), BROKER))
    assert {lg.topic_partition for lg in again.stray_logs} == set(reasons)
    assert all(lg.stray_reason is None for lg in again.stray_logs) and set(_strays(d)) == {"orders-1", "gone-0",
                                                                                          "nometa-0"}


def test_without_the_image_no_log_is_a_stray(tmp_path: Path) -> None:
    d = _broker(tmp_path)
    result = load_logs([str(d)], LoaderConfig(), NOW)
    assert len(result.logs) == 4 and not result.stray_logs and _strays(d) == {}


@pytest.mark.parametrize("dry_run", [True, False])
def test_load_config_reads_the_metadata_log_and_reports_the_strays(tmp_path: Path, dry_run: bool,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    d = _broker(tmp_path)
    before = tree_state(d)
    code = main(["load", "--json", "--config", str(_server_properties(tmp_path, d)),
                 *(["--dry-run"] if dry_run else [])])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    strays = {(lg["topic"], lg["partition"]): lg for lg in doc["logs"] if lg["kind"] == "stray"}
    assert set(strays) == {("orders", 1), ("gone", 0), ("nometa", 0)}
    assert all(lg["stray_reason"] for lg in strays.values())
    if dry_run:
        assert tree_state(d) == before and _strays(d) == {}  # a dry run renames nothing
    else:
        assert set(_strays(d)) == {"orders-1", "gone-0", "nometa-0"}
        assert {Path(lg["dir"]).name for lg in strays.values()} == set(_strays(d).values())


def test_the_text_summary_names_each_stray_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _broker(tmp_path)
    assert main(["load", "--dry-run", "--config", str(_server_properties(tmp_path, d))]) == 0
    out = capsys.readouterr().out
    assert "stray logs (not this broker's in the cluster's metadata) would be renamed -stray" in out
    assert "orders-1: " in out and "gone-0: " in out and "nometa-0: " in out


def test_a_kraft_config_without_a_metadata_log_says_what_is_not_known(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    d = data_dir(tmp_path, "d1", clean=False)
    PartitionBuilder(d, "orders", 0).segment(0, *(B(o) for o in range(3)))
    assert main(["load", "--json", "--dry-run", "--config", str(_server_properties(tmp_path, d))]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("no KRaft metadata log" in w["message"] for w in doc["structured_warnings"] if w["kind"] == "config")
    assert [lg["kind"] for lg in doc["logs"]] == ["live"]
