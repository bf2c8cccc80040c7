"""A broker's ``server.properties``, read as ``KafkaConfig`` reads it, for what a load needs: its data dirs, its
identity and mode, and the broker-level defaults of the topic configs a load uses (``KafkaConfig.extractLogConfigMap``:
the ``log.*`` names).

Validated as Kafka validates them: every key of the families read here (``LogConfig.SERVER_CONFIG_DEF``,
``CleanerConfig``, the KRaft and remote-storage keys below) is parsed by its type and checked by its validator, and
a bad value raises :class:`~mploader.broker_config.configdef.ConfigException` with Kafka's message, as the broker's
start would fail.  A ``log.*`` key Kafka does not define (a typo) and a topic-level name given for a broker default
are reported as warnings ("The configuration 'x' was supplied but isn't a known config."); the rest of the file
(listeners, security, ...) is not a load's business and is not read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mploader.broker_config import versions
from mploader.broker_config.configdef import (
    ConfigException,
    ConfigKey,
    Type,
    at_least,
    between,
    each_one_of,
    metadata_version,
    one_of,
    parse_key,
)
from mploader.broker_config.topic import CLEANUP_POLICIES, TIMESTAMP_TYPES, TOPIC_CONFIG_NAMES

_LONG_MAX = (1 << 63) - 1
DEFAULT_LOG_DIR = "/tmp/kafka-logs"  # ServerLogConfigs.LOG_DIR_DEFAULT

# LogConfig.SERVER_CONFIG_DEF, CleanerConfig's keys, then those of KRaftConfigs, ServerConfigs, ReplicationConfigs,
# TransactionLogConfig and RemoteLogManagerConfig that a load reads
BROKER_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("num.partitions", Type.INT, 1, at_least(1)),
    ConfigKey("log.dir", Type.STRING, DEFAULT_LOG_DIR),
    ConfigKey("log.dirs", Type.STRING, None),
    ConfigKey("log.segment.bytes", Type.INT, 1 << 30, at_least(14)),
    ConfigKey("log.roll.ms", Type.LONG, None),
    ConfigKey("log.roll.hours", Type.INT, 168, at_least(1)),
    ConfigKey("log.roll.jitter.ms", Type.LONG, None),
    ConfigKey("log.roll.jitter.hours", Type.INT, 0, at_least(0)),
    ConfigKey("log.retention.ms", Type.LONG, None),
    ConfigKey("log.retention.minutes", Type.INT, None),
    ConfigKey("log.retention.hours", Type.INT, 168),
    ConfigKey("log.retention.bytes", Type.LONG, -1),
    ConfigKey("log.retention.check.interval.ms", Type.LONG, 300_000, at_least(1)),
    ConfigKey("log.cleanup.policy", Type.LIST, ["delete"], each_one_of(*CLEANUP_POLICIES)),
    ConfigKey("log.index.size.max.bytes", Type.INT, 10 * 1024 * 1024, at_least(4)),
    ConfigKey("log.index.interval.bytes", Type.INT, 4096, at_least(0)),
    ConfigKey("log.flush.interval.messages", Type.LONG, _LONG_MAX, at_least(1)),
    ConfigKey("log.segment.delete.delay.ms", Type.LONG, 60_000, at_least(0)),
    ConfigKey("log.flush.scheduler.interval.ms", Type.LONG, _LONG_MAX),
    ConfigKey("log.flush.interval.ms", Type.LONG, None),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", Type.INT, 60_000, at_least(0)),
    ConfigKey("log.flush.start.offset.checkpoint.interval.ms", Type.INT, 60_000, at_least(0)),
    ConfigKey("log.preallocate", Type.BOOLEAN, False),
    ConfigKey("num.recovery.threads.per.data.dir", Type.INT, 1, at_least(1)),
    ConfigKey("auto.create.topics.enable", Type.BOOLEAN, True),
    ConfigKey("min.insync.replicas", Type.INT, 1, at_least(1)),
    ConfigKey("log.message.format.version", Type.STRING, versions.DEFAULT_MESSAGE_FORMAT_VERSION, metadata_version),
    ConfigKey("log.message.timestamp.type", Type.STRING, "CreateTime", one_of(*TIMESTAMP_TYPES)),
    ConfigKey("log.message.timestamp.difference.max.ms", Type.LONG, _LONG_MAX, at_least(0)),
    ConfigKey("log.message.timestamp.before.max.ms", Type.LONG, _LONG_MAX, at_least(0)),
    ConfigKey("log.message.timestamp.after.max.ms", Type.LONG, _LONG_MAX, at_least(0)),
    ConfigKey("create.topic.policy.class.name", Type.CLASS, None),
    ConfigKey("alter.config.policy.class.name", Type.CLASS, None),
    ConfigKey("log.message.downconversion.enable", Type.BOOLEAN, True),
    ConfigKey("log.dir.failure.timeout.ms", Type.LONG, 30_000, at_least(1)),
    ConfigKey("log.initial.task.delay.ms", Type.LONG, 30_000, at_least(0)),
    ConfigKey("log.cleaner.threads", Type.INT, 1, at_least(0)),
    ConfigKey("log.cleaner.io.max.bytes.per.second", Type.DOUBLE, float("inf")),
    ConfigKey("log.cleaner.dedupe.buffer.size", Type.LONG, 128 * 1024 * 1024),
    ConfigKey("log.cleaner.io.buffer.size", Type.INT, 512 * 1024, at_least(0)),
    ConfigKey("log.cleaner.io.buffer.load.factor", Type.DOUBLE, 0.9),
    ConfigKey("log.cleaner.backoff.ms", Type.LONG, 15_000, at_least(0)),
    ConfigKey("log.cleaner.min.cleanable.ratio", Type.DOUBLE, 0.5, between(0, 1)),
    ConfigKey("log.cleaner.enable", Type.BOOLEAN, True),
    ConfigKey("log.cleaner.delete.retention.ms", Type.LONG, 86_400_000, at_least(0)),
    ConfigKey("log.cleaner.min.compaction.lag.ms", Type.LONG, 0, at_least(0)),
    ConfigKey("log.cleaner.max.compaction.lag.ms", Type.LONG, _LONG_MAX, at_least(1)),
    ConfigKey("log.local.retention.ms", Type.LONG, -2, at_least(-2)),
    ConfigKey("log.local.retention.bytes", Type.LONG, -2, at_least(-2)),
    ConfigKey("process.roles", Type.LIST, [], each_one_of("broker", "controller")),
    ConfigKey("node.id", Type.INT, -1),
    ConfigKey("broker.id", Type.INT, -1),
    ConfigKey("metadata.log.dir", Type.STRING, None),
    ConfigKey("inter.broker.protocol.version", Type.STRING, versions.LATEST_PRODUCTION, metadata_version),
    ConfigKey("producer.id.expiration.ms", Type.INT, 86_400_000, at_least(1)),
    ConfigKey("remote.log.storage.system.enable", Type.BOOLEAN, False),
)
_BY_NAME = {k.name: k for k in BROKER_KEYS}
# every key that affects a load (docs/cli.md lists them): the data dirs, the mode, the defaults of the topic configs
LOAD_KEYS = ("log.dirs", "log.dir", "process.roles", "inter.broker.protocol.version", "log.message.format.version",
             "log.segment.bytes", "log.index.size.max.bytes", "log.index.interval.bytes", "log.preallocate",
             "log.cleanup.policy", "num.recovery.threads.per.data.dir", "producer.id.expiration.ms",
             "remote.log.storage.system.enable")


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """What a load takes from a broker's configuration (``KafkaConfig``'s names in the comments)."""

    data_dirs: list[str]  # logDirs: log.dirs, else log.dir (comma-separated)
    metadata_log_dir: str  # metadataLogDir: metadata.log.dir, else the first data dir
    node_id: int  # node.id (broker.id when only it is given: KafkaConfig.populateSynonyms); -1: none
    process_roles: list[str]  # process.roles; none: a ZooKeeper-mode broker
    inter_broker_protocol: str  # interBrokerProtocolVersion (pinned to 3.0-IV1 in KRaft mode)
    record_version: int  # of log.message.format.version where the protocol is older than 3.0-IV1, else 2
    num_recovery_threads_per_data_dir: int
    segment_bytes: int  # log.segment.bytes
    index_interval_bytes: int  # log.index.interval.bytes
    max_index_size: int  # log.index.size.max.bytes
    preallocate: bool  # log.preallocate
    compact: bool  # "compact" in log.cleanup.policy
    producer_id_expiration_ms: int
    remote_log_storage_system_enable: bool
    warnings: list[str] = field(default_factory=list, compare=False)  # what Kafka would log at WARN

    @property
    def kraft(self) -> bool:
        return bool(self.process_roles)


def broker_config(props: Mapping[str, str]) -> BrokerConfig:
    """``props`` (a ``server.properties``, :func:`~mploader.broker_config.properties.read_properties`) read as
    ``KafkaConfig`` reads it; :class:`ConfigException` for a value Kafka refuses."""
    v = _parse(_with_id_synonyms(props))
    roles = _process_roles(v["process.roles"])
    ibp = _inter_broker_protocol(props, v["inter.broker.protocol.version"], kraft=bool(roles))
    warnings = unknown_keys(props)
    record_version = 2
    fmt = versions.from_version_string(v["log.message.format.version"])
    if not versions.at_least(ibp, versions.IBP_3_0_IV1):
        record_version = versions.record_version(fmt)
    elif "log.message.format.version" in props:  # KafkaConfig.createBrokerWarningMessage
        warnings.append(f"Broker configuration log.message.format.version with value "
                        f"{v['log.message.format.version']} is ignored because the inter-broker protocol version "
                        f"`{v['inter.broker.protocol.version']}` is greater or equal than 3.0. This configuration "
                        f"is deprecated and it will be removed in Apache Kafka 4.0.")
    _check_compaction_lags(v)
    dirs = parse_csv_list(v["log.dirs"] if v["log.dirs"] is not None else v["log.dir"])
    return BrokerConfig(
        data_dirs=dirs, metadata_log_dir=v["metadata.log.dir"] or (dirs[0] if dirs else ""),
        node_id=v["node.id"], process_roles=roles, inter_broker_protocol=ibp, record_version=record_version,
        num_recovery_threads_per_data_dir=v["num.recovery.threads.per.data.dir"],
        segment_bytes=v["log.segment.bytes"], index_interval_bytes=v["log.index.interval.bytes"],
        max_index_size=v["log.index.size.max.bytes"], preallocate=v["log.preallocate"],
        compact="compact" in [p.lower() for p in v["log.cleanup.policy"]],
        producer_id_expiration_ms=v["producer.id.expiration.ms"],
        remote_log_storage_system_enable=v["remote.log.storage.system.enable"], warnings=warnings)


def _parse(props: Mapping[str, str]) -> dict[str, Any]:
    """Every key of :data:`BROKER_KEYS`: the value given, parsed, or the default; validated (``ConfigDef.parse``)."""
    return {key.name: parse_key(key, props) for key in BROKER_KEYS}


def _with_id_synonyms(props: Mapping[str, str]) -> dict[str, str]:
    """``KafkaConfig.populateSynonyms``: node.id and broker.id stand for each other when only one is given."""
    out = dict(props)
    if "node.id" in out and "broker.id" not in out:
        out["broker.id"] = out["node.id"]
    elif "broker.id" in out and "node.id" not in out:
        out["node.id"] = out["broker.id"]
    return out


def _process_roles(roles: list[str]) -> list[str]:
    """``KafkaConfig.parseProcessRoles``: no role named twice."""
    if len(set(roles)) != len(roles):
        raise ConfigException(f"Duplicate role names found in `process.roles`: ArrayBuffer({', '.join(roles)})")
    return roles


def _inter_broker_protocol(props: Mapping[str, str], value: str, kraft: bool) -> str:
    """``KafkaConfig.interBrokerProtocolVersion``: the configured one in ZooKeeper mode; in KRaft mode pinned to
    3.0-IV1 (a configured version older than it is refused)."""
    configured = versions.from_version_string(value)
    if not kraft:
        return configured
    if "inter.broker.protocol.version" in props and not versions.at_least(configured, versions.MINIMUM_KRAFT_VERSION):
        raise ConfigException(f"A non-KRaft version {value} given for inter.broker.protocol.version. The minimum "
                               f"version is {versions.MINIMUM_KRAFT_VERSION}")
    return versions.MINIMUM_KRAFT_VERSION


def _check_compaction_lags(v: Mapping[str, Any]) -> None:
    """``LogConfig.validateValues``, as ``LogManager.apply`` runs it on the broker defaults."""
    low, high = v["log.cleaner.min.compaction.lag.ms"], v["log.cleaner.max.compaction.lag.ms"]
    if low > high:
        raise ConfigException(f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                               f"max.compaction.lag.ms ({high})")


def parse_csv_list(text: str) -> list[str]:
    """``Csv.parseCsvList``: split at commas and the whitespace around them; empty entries dropped."""
    return [] if not text else [v for v in re.split(r"\s*,\s*", text, flags=re.ASCII) if v]


# every log.* name Kafka defines (ServerLogConfigs, CleanerConfig, RemoteLogManagerConfig): another is a typo
_KNOWN_LOG_NAMES = frozenset(k.name for k in BROKER_KEYS if k.name.startswith("log."))
# topic-level names that are broker configs under the same name (ServerTopicConfigSynonyms.sameName)
_SAME_NAME = frozenset({"unclean.leader.election.enable", "min.insync.replicas", "compression.type",
                        "compression.gzip.level", "compression.lz4.level", "compression.zstd.level"})
# the broker defaults of the topic configs a load reads (ServerTopicConfigSynonyms), named in the warning
_BROKER_SYNONYM = {"segment.bytes": "log.segment.bytes", "segment.index.bytes": "log.index.size.max.bytes",
                   "index.interval.bytes": "log.index.interval.bytes", "preallocate": "log.preallocate",
                   "cleanup.policy": "log.cleanup.policy", "message.format.version": "log.message.format.version",
                   "file.delete.delay.ms": "log.segment.delete.delay.ms"}


def unknown_keys(props: Mapping[str, str]) -> list[str]:
    """Warnings for the keys that look like a load's but that Kafka does not know: a ``log.*`` name it does not
    define, a topic-level name (``segment.bytes``: the broker default is ``log.segment.bytes``)."""
    out = []
    for key in props:
        if key.startswith("log.") and key not in _KNOWN_LOG_NAMES:
            out.append(f"The configuration '{key}' was supplied but isn't a known config.")
        elif key in TOPIC_CONFIG_NAMES and key not in _SAME_NAME and key not in _BY_NAME:
            synonym = _BROKER_SYNONYM.get(key)
            out.append(f"The configuration '{key}' was supplied but isn't a known config. ({key} is a topic-level "
                       f"name" + (f": the broker default is {synonym})" if synonym else ")"))
    return out
