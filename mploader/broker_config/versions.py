"""Kafka's inter-broker protocol / message format versions (``MetadataVersion``), as far as a load needs them: which
version a string names (``fromVersionString``) and the record version it writes (``highestSupportedRecordVersion``)."""

from __future__ import annotations

# MetadataVersion's constants in order, as (release, sub-version); "" for the releases without one
_VERSIONS: tuple[tuple[str, str], ...] = (
    ("0.8.0", ""), ("0.8.1", ""), ("0.8.2", ""), ("0.9.0", ""),
    ("0.10.0", "IV0"), ("0.10.0", "IV1"), ("0.10.1", "IV0"), ("0.10.1", "IV1"), ("0.10.1", "IV2"), ("0.10.2", "IV0"),
    ("0.11.0", "IV0"), ("0.11.0", "IV1"), ("0.11.0", "IV2"), ("1.0", "IV0"), ("1.1", "IV0"),
    ("2.0", "IV0"), ("2.0", "IV1"), ("2.1", "IV0"), ("2.1", "IV1"), ("2.1", "IV2"), ("2.2", "IV0"), ("2.2", "IV1"),
    ("2.3", "IV0"), ("2.3", "IV1"), ("2.4", "IV0"), ("2.4", "IV1"), ("2.5", "IV0"), ("2.6", "IV0"),
    ("2.7", "IV0"), ("2.7", "IV1"), ("2.7", "IV2"), ("2.8", "IV0"), ("2.8", "IV1"), ("3.0", "IV0"), ("3.0", "IV1"),
    ("3.1", "IV0"), ("3.2", "IV0"), ("3.3", "IV0"), ("3.3", "IV1"), ("3.3", "IV2"), ("3.3", "IV3"), ("3.4", "IV0"),
    ("3.5", "IV0"), ("3.5", "IV1"), ("3.5", "IV2"), ("3.6", "IV0"), ("3.6", "IV1"), ("3.6", "IV2"),
    ("3.7", "IV0"), ("3.7", "IV1"), ("3.7", "IV2"), ("3.7", "IV3"), ("3.7", "IV4"), ("3.8", "IV0"), ("3.9", "IV0"),
    ("4.0", "IV0"), ("4.0", "IV1"), ("4.0", "IV2"), ("4.0", "IV3"),
)


def _name(release: str, sub: str) -> str:
    return f"{release}-{sub}" if sub else release


NAMES: tuple[str, ...] = tuple(_name(r, s) for r, s in _VERSIONS)  # MetadataVersion.version(), in order
LATEST_PRODUCTION = "4.0-IV0"  # MetadataVersion.LATEST_PRODUCTION: inter.broker.protocol.version's default
MINIMUM_KRAFT_VERSION = "3.0-IV1"  # KRaft pins the inter-broker protocol to it (KafkaConfig)
IBP_3_0_IV1 = "3.0-IV1"  # from it on, message.format.version is ignored (LogConfig.shouldIgnoreMessageFormatVersion)
DEFAULT_MESSAGE_FORMAT_VERSION = "3.0-IV1"  # ServerLogConfigs.LOG_MESSAGE_FORMAT_VERSION_DEFAULT

_ORDER = {name: i for i, name in enumerate(NAMES)}
# a release alone ("2.8") names its latest production version (IBP_VERSIONS' second map)
_LOOKUP = {**_ORDER, **{r: _ORDER[_name(r, s)] for r, s in _VERSIONS
                        if _ORDER[_name(r, s)] <= _ORDER[LATEST_PRODUCTION]}}


def from_version_string(text: str) -> str:
    """``MetadataVersion.fromVersionString``: the version a config value names ("2.8", "0.10.2", "2.8-IV1"; a third
    number, or a fourth after "0.", is ignored), as its canonical name; else ValueError with Kafka's message."""
    segments = text.split(".")
    while segments and segments[-1] == "" and len(segments) > 1:  # Java's split drops trailing empty strings
        segments.pop()
    count = 3 if text.startswith("0.") else 2
    key = text if count >= len(segments) else ".".join(segments[:count])
    if key not in _LOOKUP:
        raise ValueError(f"Version {text} is not a valid version")
    return NAMES[_LOOKUP[key]]


def at_least(version: str, than: str) -> bool:
    return _ORDER[version] >= _ORDER[than]


def record_version(version: str) -> int:
    """``MetadataVersion.highestSupportedRecordVersion``: 0 before 0.10.0, 1 before 0.11.0, else 2."""
    if not at_least(version, "0.10.0-IV0"):
        return 0
    return 1 if not at_least(version, "0.11.0-IV0") else 2
