"""A broker's own configuration (mploader/broker_config): server.properties read as java.util.Properties and
KafkaConfig read it, topic configs as LogConfig reads them, --topic-config's two forms, Kafka's messages."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from mploader.broker_config import (
    ConfigException,
    PropertiesError,
    broker_config,
    broker_setup,
    loader_setup,
    topic_config,
)
from mploader.broker_config.configdef import Type, parse_type
from mploader.broker_config.properties import dump_properties, load_properties, logical_lines
from mploader.broker_config.topic_file import parse_topic_configs, split_topic_key
from mploader.broker_config.versions import from_version_string, record_version
from mploader.config import TopicConfig
from tests.examples import examples

# --------------------------------------------------------------------------------------------
# java.util.Properties.load


@pytest.mark.parametrize(("text", "expected"), [
    ("a=b", {"a": "b"}),
    ("a = b  ", {"a": "b  "}),  # the value's trailing whitespace is kept
    ("a:b", {"a": "b"}),
    ("a b", {"a": "b"}),
    ("a \t= : b", {"a": ": b"}),  # whitespace, one separator, whitespace: the second ':' is the value's
    ("a==b", {"a": "=b"}),
    ("a", {"a": ""}),
    ("  \t\fa=b", {"a": "b"}),
    ("# c=d\n! e=f\n  # g=h", {}),
    ("a=b # not a comment", {"a": "b # not a comment"}),
    ("\\#a=b", {"#a": "b"}),
    ("k\\ ey=v", {"k ey": "v"}),
    ("k\\=ey=v", {"k=ey": "v"}),
    ("k\\:ey v", {"k:ey": "v"}),
    ("a=x\\\n    y", {"a": "xy"}),  # a continuation drops the next line's leading whitespace
    ("a=x\\\r\n  y\\\r  z", {"a": "xyz"}),
    ("a=x\\\\\nb=y", {"a": "x\\", "b": "y"}),  # an even number of backslashes does not continue
    ("a=x\\\\\\\n y", {"a": "x\\y"}),
    ("a=x\\\n\nb=y", {"a": "x", "b": "y"}),  # an empty continuation line ends the logical line
    ("a=x\\\n   \nb=y", {"a": "x", "b": "y"}),
    ("# comment \\\na=b", {"a": "b"}),  # a comment does not continue
    ("a=x\\", {"a": "x"}),  # a backslash at the end of the file is dropped
    ("a=\\t\\n\\r\\f\\q\\\\", {"a": "\t\n\r\fq\\"}),
    ("a=\\u0041\\u00e9\\uD83D\\uDE00", {"a": "A\u00e9\U0001F600"}),
    ("a=1\na=2", {"a": "2"}),
    ("\\\n#x=y", {}),  # a line of one backslash continues into a '#' line, taken as a comment
    ("\\\n#x=y\nk=v", {"k": "v"}),
    ("a=b\r\nc=d\re=f", {"a": "b", "c": "d", "e": "f"}),
])
def test_properties_are_read_as_java_util_properties_reads_them(text: str, expected: dict[str, str]) -> None:
    assert load_properties(text) == expected


@pytest.mark.parametrize("text", ["a=\\u00g1", "a=\\u12", "\\uzzzz=1"])
def test_a_malformed_unicode_escape_is_refused_with_javas_message(text: str) -> None:
    with pytest.raises(PropertiesError, match=r"^Malformed \\uxxxx encoding\.$"):
        load_properties(text)


def test_comments_and_blank_lines_are_not_logical_lines() -> None:
    assert logical_lines("\n\n  # x\n\t\n! y\nk=v\n\n") == ["k=v"]


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


@given(st.dictionaries(_TEXT, _TEXT, max_size=8))
@settings(max_examples=examples(300), deadline=None)
def test_what_is_written_escaped_reads_back(props: dict[str, str]) -> None:
    assert load_properties(dump_properties(props)) == props


@given(st.lists(st.tuples(st.from_regex(r"[a-z][a-z0-9.]{0,10}", fullmatch=True),
                          st.from_regex(r"[^\\\r\n]{0,12}", fullmatch=True).map(str.strip)), max_size=6),
       st.sampled_from(["=", ":", " = ", "\t", " : "]), st.sampled_from(["\n", "\r\n", "\r"]))
@settings(max_examples=examples(300), deadline=None)
def test_plain_lines_with_any_separator_and_line_break(pairs: list[tuple[str, str]], sep: str, eol: str) -> None:
    text = eol.join(f"{k}{sep}{v}" for k, v in pairs)
    expected: dict[str, str] = {}
    for k, v in pairs:
        value = v.lstrip(" \t\f")
        if sep.strip() == "" and value[:1] in ("=", ":"):  # "k\t=v": the first = or : after blanks separates
            value = value[1:].lstrip(" \t\f")
        expected[k] = value
    assert load_properties(text) == expected


# --------------------------------------------------------------------------------------------
# ConfigDef's parsing and Kafka's messages


@pytest.mark.parametrize(("props", "message"), [
    ({"log.segment.bytes": "abc"}, "Invalid value abc for configuration log.segment.bytes: Not a number of type INT"),
    ({"log.segment.bytes": "10"}, "Invalid value 10 for configuration log.segment.bytes: Value must be at least 14"),
    ({"log.segment.bytes": "2147483648"},
     "Invalid value 2147483648 for configuration log.segment.bytes: Not a number of type INT"),
    ({"log.segment.bytes": "1_000"},
     "Invalid value 1_000 for configuration log.segment.bytes: Not a number of type INT"),
    ({"log.index.interval.bytes": "-1"},
     "Invalid value -1 for configuration log.index.interval.bytes: Value must be at least 0"),
    ({"log.index.size.max.bytes": "3"},
     "Invalid value 3 for configuration log.index.size.max.bytes: Value must be at least 4"),
    ({"log.preallocate": "yes"},
     "Invalid value yes for configuration log.preallocate: Expected value to be either true or false"),
    ({"producer.id.expiration.ms": "0"},
     "Invalid value 0 for configuration producer.id.expiration.ms: Value must be at least 1"),
    ({"num.recovery.threads.per.data.dir": "0"},
     "Invalid value 0 for configuration num.recovery.threads.per.data.dir: Value must be at least 1"),
    ({"log.cleanup.policy": "compact,remove"},
     "Invalid value remove for configuration log.cleanup.policy: String must be one of: compact, delete"),
    ({"log.message.timestamp.type": "Now"},
     "Invalid value Now for configuration log.message.timestamp.type: String must be one of: CreateTime, "
     "LogAppendTime"),
    ({"log.message.format.version": "0.7"},
     "Invalid value 0.7 for configuration log.message.format.version: Version 0.7 is not a valid version"),
    ({"process.roles": "broker,broker"}, "Duplicate role names found in `process.roles`: ArrayBuffer(broker, broker)"),
    ({"process.roles": "broker", "inter.broker.protocol.version": "2.8"},
     "A non-KRaft version 2.8 given for inter.broker.protocol.version. The minimum version is 3.0-IV1"),
    ({"log.cleaner.min.compaction.lag.ms": "10", "log.cleaner.max.compaction.lag.ms": "5"},
     "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
])
def test_a_value_kafka_refuses_fails_with_kafkas_message(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigException) as e:
        broker_config(props)
    assert str(e.value) == message


@pytest.mark.parametrize(("text", "type_", "value"), [
    (" 42\t", Type.INT, 42), ("+7", Type.INT, 7), ("-2147483648", Type.INT, -2**31), ("\u0663", Type.INT, 3),
    ("9223372036854775807", Type.LONG, 2**63 - 1), (" TRUE ", Type.BOOLEAN, True), ("fAlse", Type.BOOLEAN, False),
    ("0.5", Type.DOUBLE, 0.5), ("1e3", Type.DOUBLE, 1000.0), ("2d", Type.DOUBLE, 2.0),
    (" a , b,c ", Type.LIST, ["a", "b", "c"]), ("  ", Type.LIST, []), ("\u00a0x", Type.STRING, "\u00a0x"),
])
def test_values_are_parsed_as_configdef_parses_them(text: str, type_: Type, value: object) -> None:
    assert parse_type("k", text, type_) == value


@pytest.mark.parametrize("text", ["", " ", "1.0", "0x10", "1 000", "2147483648", "--1", "1e3"])
def test_what_integer_parseint_refuses_is_not_an_int(text: str) -> None:
    with pytest.raises(ConfigException, match="Not a number of type INT"):
        parse_type("k", text, Type.INT)


def test_version_strings_as_metadata_version_reads_them() -> None:
    assert from_version_string("2.8") == "2.8-IV1"  # a release: its latest production version
    assert from_version_string("0.10.2") == "0.10.2-IV0"
    assert from_version_string("1.0.1") == "1.0-IV0"  # anything after the second number is ignored
    assert from_version_string("0.8.2.1") == "0.8.2"
    assert from_version_string("4.0") == "4.0-IV0"  # 4.0-IV1.. are not production versions
    for bad in ("3.0.", "5.0", "0.10", "", "2.8-IV9"):
        with pytest.raises(ValueError, match=f"^Version {bad} is not a valid version$"):
            from_version_string(bad)
    assert [record_version(from_version_string(v)) for v in ("0.9.0", "0.10.0", "0.10.2", "0.11.0", "2.8")] == \
        [0, 1, 1, 2, 2]


# --------------------------------------------------------------------------------------------
# KafkaConfig: data dirs, mode, defaults, precedence


def test_data_dirs_mode_and_identity() -> None:
    b = broker_config({"log.dirs": " /a , /b ,, ", "log.dir": "/ignored", "process.roles": "broker, controller",
                       "broker.id": "7"})
    assert b.data_dirs == ["/a", "/b"] and b.metadata_log_dir == "/a" and b.kraft and b.node_id == 7
    assert b.process_roles == ["broker", "controller"] and b.inter_broker_protocol == "3.0-IV1"
    b = broker_config({"log.dir": "/one", "metadata.log.dir": "/meta", "node.id": "3"})
    assert b.data_dirs == ["/one"] and b.metadata_log_dir == "/meta" and not b.kraft and b.node_id == 3
    assert broker_config({}).data_dirs == ["/tmp/kafka-logs"]  # Kafka's log.dir default


def test_the_broker_defaults_reach_the_loader_config_and_a_topic_override_wins_over_them() -> None:
    b = broker_config({"log.index.interval.bytes": "100", "log.index.size.max.bytes": "4096",
                       "log.segment.bytes": "1048576", "log.preallocate": "true", "num.recovery.threads.per.data.dir":
                       "3", "producer.id.expiration.ms": "1000", "remote.log.storage.system.enable": "true"})
    setup = loader_setup(b, {"t": {"index.interval.bytes": "10", "segment.index.bytes": "800"}},
                         {"t": {"index.interval.bytes": "20"}, "u": {"remote.storage.enable": "true"}})
    cfg = setup.config
    assert (cfg.index_interval_bytes, cfg.max_index_size, cfg.segment_bytes, cfg.preallocate) == \
        (100, 4096, 1 << 20, True)
    assert cfg.num_recovery_threads_per_data_dir == 3 and cfg.producer_id_expiration_ms == 1000
    t = cfg.for_topic("t")  # --topic-config (20) > the metadata image (10) > the broker default (100)
    assert (t.index_interval_bytes, t.max_index_size, t.segment_bytes) == (20, 800, 1 << 20)
    assert cfg.for_topic("plain").index_interval_bytes == 100 and cfg.for_topic("u").remote_storage
    assert not cfg.for_topic("__consumer_offsets").remote_storage


def test_a_compacted_topic_has_no_remote_storage() -> None:
    b = broker_config({"remote.log.storage.system.enable": "true"})
    cfg = loader_setup(b, {"c": {"remote.storage.enable": "true", "cleanup.policy": "compact, delete"},
                           "d": {"remote.storage.enable": "true"}}).config
    assert not cfg.for_topic("c").remote_storage and cfg.for_topic("d").remote_storage
    cfg = loader_setup(broker_config({"remote.log.storage.system.enable": "true", "log.cleanup.policy": "compact"}),
                       {"d": {"remote.storage.enable": "true"}}).config
    assert not cfg.for_topic("d").remote_storage


def test_message_format_version_applies_only_below_inter_broker_protocol_3_0() -> None:
    old = broker_config({"inter.broker.protocol.version": "2.8", "log.message.format.version": "0.10.2"})
    assert old.record_version == 1 and not old.warnings
    assert topic_config("t", {"message.format.version": "0.9.0"}, old.inter_broker_protocol).config.record_version == 0
    kraft = broker_config({"process.roles": "broker", "log.message.format.version": "0.10.2"})
    assert kraft.record_version == 2
    assert kraft.warnings == ["Broker configuration log.message.format.version with value 0.10.2 is ignored because "
                              "the inter-broker protocol version `4.0-IV0` is greater or equal than 3.0. This "
                              "configuration is deprecated and it will be removed in Apache Kafka 4.0."]
    result = topic_config("t", {"message.format.version": "0.10.2"}, kraft.inter_broker_protocol)
    assert result.config == TopicConfig() and result.warnings == [
        "Topic configuration message.format.version with value `0.10.2` is ignored for `t` because the inter-broker "
        "protocol version `3.0-IV1` is greater or equal than 3.0. This configuration is deprecated and it will be "
        "removed in Apache Kafka 4.0."]


def test_unknown_keys_are_warnings_as_kafka_logs_them() -> None:
    b = broker_config({"log.segement.bytes": "1", "segment.bytes": "5", "listeners": "PLAINTEXT://:9092",
                       "min.insync.replicas": "2"})
    assert b.warnings == [
        "The configuration 'log.segement.bytes' was supplied but isn't a known config.",
        "The configuration 'segment.bytes' was supplied but isn't a known config. (segment.bytes is a topic-level "
        "name: the broker default is log.segment.bytes)"]
    assert topic_config("t", {"index.interval.byte": "1"}).warnings == [
        "Unknown topic config name: index.interval.byte"]


@pytest.mark.parametrize(("raw", "message"), [
    ({"index.interval.bytes": "x"}, "Invalid value x for configuration index.interval.bytes: Not a number of type INT"),
    ({"segment.index.bytes": "2"}, "Invalid value 2 for configuration segment.index.bytes: Value must be at least 4"),
    ({"segment.bytes": "13"}, "Invalid value 13 for configuration segment.bytes: Value must be at least 14"),
    ({"min.cleanable.dirty.ratio": "1.5"},
     "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    ({"compression.gzip.level": "0"},
     "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
    ({"leader.replication.throttled.replicas": "0:1,x"},
     "Invalid value [0:1, x] for configuration leader.replication.throttled.replicas: leader.replication.throttled"
     ".replicas must be the literal '*' or a list of replicas in the following format: "
     "[partitionId]:[brokerId],[partitionId]:[brokerId],..."),
    ({"remote.storage.enable": "1"},
     "Invalid value 1 for configuration remote.storage.enable: Expected value to be either true or false"),
])
def test_a_topic_value_kafka_refuses_fails_with_kafkas_message(raw: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigException) as e:
        topic_config("t", raw)
    assert str(e.value) == message
    with pytest.raises(ConfigException, match=r"\(topic orders\)$"):
        loader_setup(broker_config({}), {"orders": raw})


def test_broker_setup_reads_the_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "server.properties"
    f.write_bytes(b"log.index.interval.bytes = 512\nnum.recovery.threads.per.data.dir:2\nlog.dirs=/x,/y\n")
    t = tmp_path / "topics.properties"
    t.write_text("a.index.interval.bytes=1\n")
    setup = broker_setup(f, [str(t)])
    cfg = setup.config
    assert (cfg.index_interval_bytes, cfg.num_recovery_threads_per_data_dir) == (512, 2)
    assert setup.data_dirs == ["/x", "/y"] and cfg.for_topic("a").index_interval_bytes == 1


# --------------------------------------------------------------------------------------------
# --topic-config's two forms

DESCRIBE = """Dynamic configs for topic orders.v2 are:
  index.interval.bytes=100 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:index.interval.bytes=100, \
DEFAULT_CONFIG:log.index.interval.bytes=4096}
  segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576, \
STATIC_BROKER_CONFIG:log.segment.bytes=2097152, DEFAULT_CONFIG:log.segment.bytes=1073741824}
Dynamic configs for topic plain are:
"""

DESCRIBE_ALL = """All configs for topic orders.v2 are:
  cleanup.policy=delete sensitive=false synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}
  index.interval.bytes=100 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:index.interval.bytes=100, \
DEFAULT_CONFIG:log.index.interval.bytes=4096}
  remote.storage.enable=false sensitive=false synonyms={}
  segment.bytes=2097152 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.segment.bytes=2097152, \
DEFAULT_CONFIG:log.segment.bytes=1073741824}
"""


def test_kafka_configs_describe_output_gives_each_topics_own_overrides() -> None:
    assert parse_topic_configs(DESCRIBE) == {"orders.v2": {"index.interval.bytes": "100", "segment.bytes": "1048576"},
                                             "plain": {}}
    # --all: the values in effect from broker defaults are not the topic's overrides
    assert parse_topic_configs(DESCRIBE_ALL) == {"orders.v2": {"index.interval.bytes": "100"}}
    with pytest.raises(ConfigException, match="line 1"):
        parse_topic_configs("Default configs for brokers in the cluster are:\n  a=b sensitive=false synonyms={}\n")


def test_topic_dot_key_lines_split_before_the_config_name() -> None:
    assert parse_topic_configs("orders.v2.index.interval.bytes=100\nmy-topic.segment.index.bytes = 4096\n"
                               "a.b/retention.ms=5\n# comment\n") == {
        "orders.v2": {"index.interval.bytes": "100"}, "my-topic": {"segment.index.bytes": "4096"},
        "a.b": {"retention.ms": "5"}}
    assert split_topic_key("x.segment.bytes") == ("x", "segment.bytes")
    with pytest.raises(ConfigException, match="ambiguous: write x/local.retention.ms or x.local/retention.ms"):
        split_topic_key("x.local.retention.ms")
    assert split_topic_key("x/local.retention.ms") == ("x", "local.retention.ms")
    for bad in ("segment.bytes", "orders.nonsense", "a b.segment.bytes", "../segment.bytes"):
        with pytest.raises(ConfigException):
            split_topic_key(bad)
