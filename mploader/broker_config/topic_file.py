"""``--topic-config FILE``: topics' configs from a file, in one of two forms (told apart by their content).

* The output of ``kafka-configs.sh --describe --entity-type topics`` (with or without ``--entity-name`` and
  ``--all``; ``ConfigCommand.describeResourceConfig``)::

      Dynamic configs for topic orders are:
        index.interval.bytes=100 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:index.interval.bytes=100, ...}

  ``--all`` writes "All configs for topic X are:" and lists every config with its value in effect; only the
  entries whose value is the topic's own (their first synonym is ``DYNAMIC_TOPIC_CONFIG``) are taken: the others
  are broker defaults, which come from ``--config``.

* A properties file (``java.util.Properties`` syntax) of ``TOPIC.NAME=value`` lines, NAME a topic-level config
  name (``orders.index.interval.bytes=100``).  A topic name may hold dots, so the key is split before the longest
  topic config name that ends it; where a shorter one would also do (``x.local.retention.ms``: topic ``x`` with
  ``local.retention.ms``, or ``x.local`` with ``retention.ms``) the line is refused as ambiguous.
  ``TOPIC/NAME=value`` (a ``/`` is in no topic name and no config name) is never ambiguous.
"""

from __future__ import annotations

import re

from mploader.broker_config.configdef import ConfigException
from mploader.broker_config.properties import load_properties
from mploader.broker_config.topic import TOPIC_CONFIG_NAMES

TopicConfigs = dict[str, dict[str, str]]  # {topic: {topic-level name: value as written}}

_HEADER = re.compile(r"(Dynamic|All) configs for topic (?P<topic>.*) are:")
_ANY_HEADER = re.compile(r"\S.* configs for .* are:")  # brokers', groups', ...: not the topics' this wants
_ENTRY = re.compile(r"  (?P<name>[^=]+)=(?P<value>.*) sensitive=(true|false) synonyms=\{(?P<synonyms>.*)\}")
_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")  # Topic.LEGAL_CHARS


def read_topic_configs(path: str) -> TopicConfigs:
    """The topics' configs in the file at ``path`` (either form); :class:`ConfigException` for what it cannot
    read, naming the line."""
    with open(path, "rb") as f:
        text = f.read().decode("latin-1")  # as Properties.load(InputStream); describe's output is ASCII
    return parse_topic_configs(text)


def parse_topic_configs(text: str) -> TopicConfigs:
    if any(_ANY_HEADER.fullmatch(line.rstrip("\r")) for line in text.splitlines()):
        return parse_describe_output(text)
    return parse_topic_properties(text)


def parse_describe_output(text: str) -> TopicConfigs:
    """``kafka-configs --describe --entity-type topics`` (``--all`` or not): each topic's own overrides."""
    out: TopicConfigs = {}
    topic: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r")
        if (header := _HEADER.fullmatch(line)) is not None:
            topic = header["topic"]
            out.setdefault(topic, {})
        elif _ANY_HEADER.fullmatch(line):
            raise ConfigException(f"line {number}: {line!r}: not a topic's configs (--entity-type topics)")
        elif (entry := _ENTRY.fullmatch(line)) is not None and topic is not None:
            if entry["synonyms"].startswith("DYNAMIC_TOPIC_CONFIG:"):  # the value is the topic's own
                out[topic][entry["name"]] = entry["value"]
        elif line.strip():
            raise ConfigException(f"line {number}: {line!r} is not a line of kafka-configs --describe's output")
    return out


def parse_topic_properties(text: str) -> TopicConfigs:
    """``TOPIC.NAME=value`` / ``TOPIC/NAME=value`` properties."""
    out: TopicConfigs = {}
    for key, value in load_properties(text).items():
        topic, name = split_topic_key(key)
        out.setdefault(topic, {})[name] = value
    return out


def split_topic_key(key: str) -> tuple[str, str]:
    """``orders.v2.segment.index.bytes`` -> (``orders.v2``, ``segment.index.bytes``); see the module's rules."""
    if "/" in key:
        topic, _, name = key.partition("/")
        return _checked(key, topic, name)
    splits = [(key[:-len(name) - 1], name) for name in TOPIC_CONFIG_NAMES
              if key.endswith("." + name) and len(key) > len(name) + 1]
    if not splits:
        raise ConfigException(f"{key}: not TOPIC.NAME with NAME a topic config name (e.g. orders.index.interval.bytes)")
    if len(splits) > 1:
        readings = " or ".join(f"{t}/{n}" for t, n in sorted(splits))
        raise ConfigException(f"{key} is ambiguous: write {readings}")
    return _checked(key, *splits[0])


def _checked(key: str, topic: str, name: str) -> tuple[str, str]:
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ConfigException(f"{key}: {topic!r} is not a legal topic name (letters, digits, '.', '_', '-')")
    return topic, name
