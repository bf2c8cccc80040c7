"""A topic's configuration, as Kafka stores it (strings by topic-level name: a KRaft metadata log's ConfigRecords,
``kafka-configs --describe``), read into :class:`mploader.config.TopicConfig` the way a broker reads it when it loads
the topic's partitions (``LogManager.fetchTopicConfigOverrides``, ``LogConfig.fromProps``).

Every value is parsed and validated as ``LogConfig``'s ``ConfigDef`` does (a malformed one fails the broker's start,
and here raises :class:`~mploader.broker_config.configdef.ConfigException` with Kafka's message); a name ``LogConfig``
does not define is ignored by a broker's load, and reported as a warning with ``LogConfig.validateNames``' message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mploader.broker_config import versions
from mploader.broker_config.configdef import (
    ConfigKey,
    Type,
    at_least,
    between,
    each_one_of,
    invalid,
    java_trim,
    metadata_version,
    one_of,
    parse_key,
)
from mploader.config import TopicConfig

_LONG_MAX = (1 << 63) - 1
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")  # BrokerCompressionType.names()
CLEANUP_POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def _gzip_level(name: str, value: Any) -> None:
    """``CompressionType.GZIP.levelValidator``: 1..9, or -1 (Deflater.DEFAULT_COMPRESSION)."""
    if value > 9 or (value < 1 and value != -1):
        raise invalid(name, value, "Value must be between 1 and 9 or equal to -1")


_REPLICA = re.compile(r"([0-9]+:[0-9]+)?", re.ASCII)


def _throttled_replicas(name: str, value: Any) -> None:
    """``ThrottledReplicaListValidator``: ``*``, or partition:broker pairs."""
    proposed = [java_trim(v) for v in value]
    if not (all(_REPLICA.fullmatch(v) for v in proposed) or "".join(proposed) == "*"):
        raise invalid(name, value, f"{name} must be the literal '*' or a list of replicas in the following "
                                           f"format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


# LogConfig's CONFIG, in its order: the topic-level names, their types, Kafka's defaults and validators
TOPIC_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("segment.bytes", Type.INT, 1 << 30, at_least(14)),  # LegacyRecord.RECORD_OVERHEAD_V0
    ConfigKey("segment.ms", Type.LONG, 604_800_000, at_least(1)),
    ConfigKey("segment.jitter.ms", Type.LONG, 0, at_least(0)),
    ConfigKey("segment.index.bytes", Type.INT, 10 * 1024 * 1024, at_least(4)),
    ConfigKey("flush.messages", Type.LONG, _LONG_MAX, at_least(1)),
    ConfigKey("flush.ms", Type.LONG, _LONG_MAX, at_least(0)),
    ConfigKey("retention.bytes", Type.LONG, -1),
    ConfigKey("retention.ms", Type.LONG, 604_800_000, at_least(-1)),
    ConfigKey("max.message.bytes", Type.INT, 1024 * 1024 + 12, at_least(0)),
    ConfigKey("index.interval.bytes", Type.INT, 4096, at_least(0)),
    ConfigKey("delete.retention.ms", Type.LONG, 86_400_000, at_least(0)),
    ConfigKey("min.compaction.lag.ms", Type.LONG, 0, at_least(0)),
    ConfigKey("max.compaction.lag.ms", Type.LONG, _LONG_MAX, at_least(1)),
    ConfigKey("file.delete.delay.ms", Type.LONG, 60_000, at_least(0)),
    ConfigKey("min.cleanable.dirty.ratio", Type.DOUBLE, 0.5, between(0, 1)),
    ConfigKey("cleanup.policy", Type.LIST, ["delete"], each_one_of(*CLEANUP_POLICIES)),
    ConfigKey("unclean.leader.election.enable", Type.BOOLEAN, False),
    ConfigKey("min.insync.replicas", Type.INT, 1, at_least(1)),
    ConfigKey("compression.type", Type.STRING, "producer", one_of(*COMPRESSION_TYPES)),
    ConfigKey("compression.gzip.level", Type.INT, -1, _gzip_level),
    ConfigKey("compression.lz4.level", Type.INT, 9, between(1, 17)),
    ConfigKey("compression.zstd.level", Type.INT, 3, between(-131072, 22)),
    ConfigKey("preallocate", Type.BOOLEAN, False),
    ConfigKey("message.format.version", Type.STRING, versions.DEFAULT_MESSAGE_FORMAT_VERSION, metadata_version),
    ConfigKey("message.timestamp.type", Type.STRING, "CreateTime", one_of(*TIMESTAMP_TYPES)),
    ConfigKey("message.timestamp.difference.max.ms", Type.LONG, _LONG_MAX, at_least(0)),
    ConfigKey("message.timestamp.before.max.ms", Type.LONG, _LONG_MAX, at_least(0)),
    ConfigKey("message.timestamp.after.max.ms", Type.LONG, _LONG_MAX, at_least(0)),
    ConfigKey("leader.replication.throttled.replicas", Type.LIST, [], _throttled_replicas),
    ConfigKey("follower.replication.throttled.replicas", Type.LIST, [], _throttled_replicas),
    ConfigKey("message.downconversion.enable", Type.BOOLEAN, True),
    ConfigKey("remote.storage.enable", Type.BOOLEAN, False),
    ConfigKey("local.retention.ms", Type.LONG, -2, at_least(-2)),
    ConfigKey("local.retention.bytes", Type.LONG, -2, at_least(-2)),
    ConfigKey("remote.log.copy.disable", Type.BOOLEAN, False),
    ConfigKey("remote.log.delete.on.disable", Type.BOOLEAN, False),
)
TOPIC_CONFIG_NAMES = frozenset(k.name for k in TOPIC_KEYS)

#: the topic-level names whose value changes what a load does, and the TopicConfig field each sets
#: (message.format.version and cleanup.policy are read into record_version and compact)
LOAD_KEYS = {"index.interval.bytes": "index_interval_bytes", "segment.index.bytes": "max_index_size",
             "segment.bytes": "segment_bytes", "preallocate": "preallocate",
             "remote.storage.enable": "remote_storage_enable", "message.format.version": "record_version",
             "cleanup.policy": "compact"}


@dataclass(frozen=True, slots=True)
class TopicConfigResult:
    """A topic's :class:`TopicConfig` and what a broker would log while reading it (warnings)."""

    config: TopicConfig
    warnings: list[str] = field(default_factory=list)


def parse_topic_values(raw: Mapping[str, str]) -> dict[str, Any]:
    """The values given, parsed and validated as ``LogConfig``'s ConfigDef does, in its order (the first bad value
    raises :class:`ConfigException`); unknown names are left out."""
    return {key.name: parse_key(key, raw) for key in TOPIC_KEYS if key.name in raw}


def unknown_topic_names(raw: Mapping[str, str]) -> list[str]:
    """``LogConfig.validateNames``' message for each name LogConfig does not define."""
    return [f"Unknown topic config name: {name}" for name in raw if name not in TOPIC_CONFIG_NAMES]


def topic_config(topic: str, raw: Mapping[str, str], inter_broker_protocol: str = versions.MINIMUM_KRAFT_VERSION
                 ) -> TopicConfigResult:
    """``raw`` (a topic's overrides, topic-level names, string values) as the broker reads them to load the topic's
    partitions.  ``inter_broker_protocol``: the broker's (KRaft pins it to 3.0-IV1; a ZooKeeper broker's is its
    ``inter.broker.protocol.version``): from 3.0-IV1 on, a topic's ``message.format.version`` is dropped, with
    ``LogConfig.MessageFormatVersion.topicWarningMessage`` when it named a format older than V2
    (``LogManager.fetchTopicConfigOverrides``)."""
    values = parse_topic_values(raw)
    warnings = unknown_topic_names(raw)
    record_version = None
    if (fmt := values.get("message.format.version")) is not None:
        version = versions.from_version_string(fmt)
        if not versions.at_least(inter_broker_protocol, versions.IBP_3_0_IV1):
            record_version = versions.record_version(version)
        elif versions.record_version(version) < 2:
            warnings.append(f"Topic configuration message.format.version with value `{fmt}` is ignored for `{topic}` "
                            f"because the inter-broker protocol version `{inter_broker_protocol}` is greater or equal "
                            f"than 3.0. This configuration is deprecated and it will be removed in Apache Kafka 4.0.")
    policy = values.get("cleanup.policy")
    config = TopicConfig(
        index_interval_bytes=values.get("index.interval.bytes"), max_index_size=values.get("segment.index.bytes"),
        segment_bytes=values.get("segment.bytes"), preallocate=values.get("preallocate"),
        record_version=record_version, remote_storage_enable=values.get("remote.storage.enable"),
        compact=None if policy is None else "compact" in [p.lower() for p in policy])
    return TopicConfigResult(config, warnings)
