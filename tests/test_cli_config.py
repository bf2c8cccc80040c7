"""``mploader load|verify --config server.properties --topic-config FILE`` end to end: the broker's configuration
and its topics' overrides reach the load (a topic's index.interval.bytes changes the index it rebuilds, exactly as
the API's topic_overrides does), flags override the file, a value Kafka refuses is a usage error."""

from __future__ import annotations

import json
from pathlib import Path

from mploader import LoaderConfig, TopicConfig, load_logs
from tests import cli_json
from tests.fingerprint import tree_state
from tests.kafkadir import NOW, B, PartitionBuilder, data_dir, name

TOPIC = "orders.v2"  # a topic name with a dot: TOPIC.NAME lines split before the config name


def _broker(root: Path) -> Path:
    """An unclean data dir: every segment is recovered and its index rebuilt at the topic's index.interval.bytes
    (20 batches of 72 bytes: no entry at 4096, one every two batches at 100)."""
    d = data_dir(root, clean=False)
    for topic in (TOPIC, "other"):
        PartitionBuilder(d, topic, 0).segment(0, *(B(o) for o in range(20))).segment(20, B(20), B(21))
    return d


def _index(d: Path, topic: str) -> bytes:
    return (d / f"{topic}-0" / name(0, ".index")).read_bytes()


def _server_properties(root: Path, d: Path, extra: str = "") -> Path:
    f = root / "server.properties"
    f.write_text(f"# a KRaft broker\nprocess.roles=broker\nnode.id=1\nlog.dirs={d}\n{extra}")
    return f


def test_a_topic_override_from_topic_config_rebuilds_the_index_as_the_api_does(tmp_path: Path) -> None:
    plain, configured, api = (_broker(tmp_path / n) for n in ("plain", "configured", "api"))
    assert cli_json.run("load", "--now-ms", str(NOW), str(plain)).returncode == 0
    server = _server_properties(tmp_path / "configured", configured, "log.segement.bytes=1\n")
    topics = tmp_path / "topics.properties"
    topics.write_text(f"{TOPIC}.index.interval.bytes=100\n")
    out = cli_json.run("load", "--json", "--now-ms", str(NOW), "--config", str(server), "--topic-config", str(topics))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert list(doc["clean_shutdown"]) == [str(configured)]  # the data dirs from log.dirs
    assert {"kind": "config", "option": "--config", "message": "The configuration 'log.segement.bytes' was supplied "
            "but isn't a known config."} in doc["structured_warnings"]
    load_logs([str(api)], LoaderConfig(topic_overrides={TOPIC: TopicConfig(index_interval_bytes=100)}), NOW)
    assert _index(plain, TOPIC) == b"" and len(_index(configured, TOPIC)) > 0
    assert _index(configured, TOPIC) == _index(api, TOPIC)
    assert _index(configured, "other") == _index(plain, "other")  # no override: the broker default


def test_flags_override_the_file_and_describe_output_gives_topic_overrides(tmp_path: Path) -> None:
    d = _broker(tmp_path)
    server = _server_properties(tmp_path, d, "log.index.interval.bytes=100\n")
    describe = tmp_path / "describe.txt"
    describe.write_text(f"Dynamic configs for topic {TOPIC} are:\n  index.interval.bytes=200 sensitive=false "
                        f"synonyms={{DYNAMIC_TOPIC_CONFIG:index.interval.bytes=200, DEFAULT_CONFIG:"
                        f"log.index.interval.bytes=4096}}\n")
    # --index-interval-bytes 4096 over the file's 100: "other" gets no entry; the topic's own 200 wins over both
    out = cli_json.run("load", "--now-ms", str(NOW), "--config", str(server), "--topic-config", str(describe),
                       "--index-interval-bytes", "4096")
    assert out.returncode == 0, out.stderr
    assert _index(d, "other") == b""
    api = _broker(tmp_path / "api")
    load_logs([str(api)], LoaderConfig(topic_overrides={TOPIC: TopicConfig(index_interval_bytes=200)}), NOW)
    assert _index(d, TOPIC) == _index(api, TOPIC) != b""
    verified = cli_json.run("verify", "--json", "--config", str(server))  # verify takes the same configuration
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["healthy"] is True


def test_a_value_kafka_refuses_is_a_usage_error_and_nothing_is_written(tmp_path: Path) -> None:
    d = _broker(tmp_path)
    before = tree_state(d)
    server = _server_properties(tmp_path, d, "log.segment.bytes=abc\n")
    for command in (["load"], ["load", "--dry-run"], ["verify"]):
        out = cli_json.run(*command, "--json", "--config", str(server))
        assert out.returncode == 2, out.stderr
        error = json.loads(out.stdout)["error"]
        assert error["kind"] == "usage" and error["message"] == (
            f"--config {server}: Invalid value abc for configuration log.segment.bytes: Not a number of type INT")
    bad_topic = tmp_path / "topics.properties"
    bad_topic.write_text(f"{TOPIC}.segment.index.bytes=2\n")
    out = cli_json.run("load", "--topic-config", str(bad_topic), str(d))
    assert out.returncode == 2 and out.stderr.strip() == (
        f"mploader load: --topic-config {bad_topic}: Invalid value 2 for configuration segment.index.bytes: Value "
        f"must be at least 4 (topic {TOPIC})")
    out = cli_json.run("load", "--json", "--config", str(tmp_path / "missing.properties"))
    assert out.returncode == 2 and "cannot read" in json.loads(out.stdout)["error"]["message"]
    out = cli_json.run("load", "--json")  # neither a DIR nor --config
    assert out.returncode == 2 and "no data dir given" in json.loads(out.stdout)["error"]["message"]
    assert tree_state(d) == before
