"""A broker's own configuration, given to a load as the broker gives it to its own: its ``server.properties``
(:mod:`.properties`, :mod:`.broker`) and its topics' configs (:mod:`.topic`; from files: :mod:`.topic_file`); which
broker and directory a data dir is, its ``meta.properties`` (:mod:`.meta`).

:func:`loader_setup` is the one place where they meet: a topic's value is its override from ``--topic-config``,
else its override in the cluster's metadata (a KRaft metadata image: ``image_topic_configs``), else the broker
default (``log.*``), else Kafka's default -- ``LogManager.fetchTopicConfigOverrides`` and ``LogConfig.fromProps``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mploader.broker_config.broker import BrokerConfig, broker_config
from mploader.broker_config.configdef import ConfigException
from mploader.broker_config.properties import PropertiesError, read_properties
from mploader.broker_config.topic import TopicConfigResult, topic_config
from mploader.broker_config.topic_file import TopicConfigs, read_topic_configs
from mploader.config import LoaderConfig, TopicConfig

__all__ = ["BrokerConfig", "ConfigException", "LoaderSetup", "PropertiesError", "TopicConfigs", "broker_config",
           "broker_setup", "loader_setup", "merge_topic_configs", "read_properties", "read_topic_configs",
           "topic_config", "topic_overrides"]


@dataclass(frozen=True, slots=True)
class LoaderSetup:
    """What a broker's configuration gives its load: the :class:`LoaderConfig`, the data dirs (``log.dirs``), the
    broker's config itself, and what a broker would log at WARN while reading them."""

    config: LoaderConfig
    data_dirs: list[str]
    broker: BrokerConfig
    warnings: list[str] = field(default_factory=list)


def broker_setup(server_properties: str | os.PathLike[str], topic_config_files: Sequence[str] = ()) -> LoaderSetup:
    """:func:`loader_setup` of the ``server.properties`` at that path and the topic config files (later files'
    values over earlier ones')."""
    broker = broker_config(read_properties(server_properties))
    return loader_setup(broker, files_topic_configs=merge_topic_configs(*map(read_topic_configs, topic_config_files)))


def loader_setup(broker: BrokerConfig, image_topic_configs: Mapping[str, Mapping[str, str]] | None = None,
                 files_topic_configs: Mapping[str, Mapping[str, str]] | None = None) -> LoaderSetup:
    """The load's configuration from the broker's: its log defaults, and each topic's overrides, a value from
    ``files_topic_configs`` (``--topic-config``) over one from ``image_topic_configs`` (the metadata image's
    ConfigRecords) for the same topic and name.  :class:`ConfigException` for a value Kafka refuses."""
    merged = merge_topic_configs(image_topic_configs or {}, files_topic_configs or {})
    overrides, warnings = topic_overrides(merged, broker.inter_broker_protocol)
    config = LoaderConfig(
        num_recovery_threads_per_data_dir=broker.num_recovery_threads_per_data_dir,
        index_interval_bytes=broker.index_interval_bytes, max_index_size=broker.max_index_size,
        segment_bytes=broker.segment_bytes, preallocate=broker.preallocate,
        producer_id_expiration_ms=broker.producer_id_expiration_ms,
        remote_log_storage_system_enable=broker.remote_log_storage_system_enable,
        record_version=broker.record_version, topic_overrides=overrides, compact=broker.compact)
    return LoaderSetup(config, list(broker.data_dirs), broker, [*broker.warnings, *warnings])


def merge_topic_configs(*layers: Mapping[str, Mapping[str, str]]) -> TopicConfigs:
    """The topics' raw configs, a later layer's value over an earlier one's, name by name."""
    out: TopicConfigs = {}
    for layer in layers:
        for topic, values in layer.items():
            out.setdefault(topic, {}).update(values)
    return out


def topic_overrides(configs: Mapping[str, Mapping[str, str]], inter_broker_protocol: str
                    ) -> tuple[dict[str, TopicConfig], list[str]]:
    """``{topic: TopicConfig}`` (only the topics whose overrides change a load) and the warnings."""
    overrides: dict[str, TopicConfig] = {}
    warnings: list[str] = []
    for topic, raw in sorted(configs.items()):
        try:
            result: TopicConfigResult = topic_config(topic, raw, inter_broker_protocol)
        except ConfigException as e:
            raise ConfigException(f"{e} (topic {topic})", e.name) from None
        warnings += [f"{w} (topic {topic})" if w.startswith("Unknown") else w for w in result.warnings]
        if result.config != TopicConfig():
            overrides[topic] = result.config
    return overrides, warnings
