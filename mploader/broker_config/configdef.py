"""The parsing and validation of config values, as Kafka's ``ConfigDef`` does it, with its messages.

A value is a string (from a properties file, a ConfigRecord, ``kafka-configs --describe``); ``ConfigDef.parseType``
trims it (``String.trim``: every character up to U+0020), then reads it by its type, and the key's validator checks
the result.  A failure is Kafka's ``ConfigException``: "Invalid value V for configuration K: why".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from mploader.broker_config import versions


class ConfigException(ValueError):  # noqa: N818  # Kafka's name: its messages are matched
    """A configuration Kafka refuses, with the message of Kafka's ``ConfigException`` (or of the
    ``InvalidConfigurationException`` of a check across keys); ``name``: the key, where one is to blame."""

    def __init__(self, message: str, name: str | None = None):
        super().__init__(message)
        self.name = name


def invalid(name: str, value: object, message: str | None = None) -> ConfigException:
    """``new ConfigException(name, value, message)``: "Invalid value V for configuration K: message"."""
    text = f"Invalid value {_java_str(value)} for configuration {name}" + ("" if message is None else f": {message}")
    return ConfigException(text, name)


class Type(Enum):
    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    INT = "INT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    LIST = "LIST"
    CLASS = "CLASS"


Validator = Callable[[str, Any], None]
_INT_RANGE = {Type.INT: 1 << 31, Type.LONG: 1 << 63}
_INTEGER = re.compile(r"[+-]?\d+")  # Integer.parseInt: a sign, then decimal digits (Character.digit: Unicode Nd too)
# Double.parseDouble (FloatingDecimal): Java's decimal and hex literals, an optional f/F/d/D suffix, NaN, Infinity
_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?"
                     r"|0[xX]([0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?\d+[fFdD]?)", re.ASCII)
_COMMA = re.compile(r"\s*,\s*", re.ASCII)  # ConfigDef.COMMA_WITH_WHITESPACE (\s: ASCII whitespace in Java)


def java_trim(s: str) -> str:
    """``String.trim``: every character <= U+0020 off both ends (Python's strip takes other whitespace too)."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One ``ConfigDef.define``: a name, a type, the default (already parsed; None: null) and a validator."""

    name: str
    type: Type
    default: Any
    validator: Validator | None = None


def parse_key(key: ConfigKey, props: Mapping[str, str]) -> Any:
    """``ConfigDef.parseValue``: the value given, parsed and validated; else the key's default (Kafka's, valid)."""
    if key.name not in props:
        return key.default
    value = parse_type(key.name, props[key.name], key.type)
    if key.validator is not None:
        key.validator(key.name, value)
    return value


def parse_type(name: str, value: str, type_: Type) -> Any:
    """``ConfigDef.parseType`` of a string."""
    trimmed = java_trim(value)
    if type_ is Type.BOOLEAN:
        if trimmed.lower() in ("true", "false"):  # equalsIgnoreCase
            return trimmed.lower() == "true"
        raise invalid(name, value, "Expected value to be either true or false")
    if type_ in _INT_RANGE:
        bound = _INT_RANGE[type_]
        if _INTEGER.fullmatch(trimmed) and -bound <= (n := int(trimmed)) < bound:
            return n
        raise invalid(name, value, f"Not a number of type {type_.value}")
    if type_ is Type.DOUBLE:
        if _DOUBLE.fullmatch(trimmed):
            return float(trimmed.rstrip("fFdD")) if not trimmed.lstrip("+-").startswith(("0x", "0X")) \
                else float.fromhex(trimmed.rstrip("fFdD"))
        raise invalid(name, value, f"Not a number of type {type_.value}")
    if type_ is Type.LIST:
        return [] if not trimmed else _COMMA.split(trimmed)
    return trimmed  # STRING; CLASS: its name (a broker would load the class: mploader does not)


def _java_str(value: object) -> str:
    """A value as Java's string concatenation shows it (null, true/false, a list as [a, b])."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(map(_java_str, value)) + "]"
    return str(value)


# --------------------------------------------------------------------------------------------
# Validators (ConfigDef.Range, ValidString, ValidList; MetadataVersionValidator)


def _number_text(n: float) -> str:
    return str(int(n)) if isinstance(n, int) else repr(n)


def at_least(minimum: float) -> Validator:
    """``Range.atLeast``."""
    return between(minimum, None)


def between(minimum: float | None, maximum: float | None) -> Validator:
    """``Range.between`` (None: no bound)."""
    def check(name: str, value: Any) -> None:
        if value is None:
            raise invalid(name, None, "Value must be non-null")
        if minimum is not None and value < minimum:
            raise invalid(name, value, f"Value must be at least {_number_text(minimum)}")
        if maximum is not None and value > maximum:
            raise invalid(name, value, f"Value must be no more than {_number_text(maximum)}")
    return check


def one_of(*allowed: str) -> Validator:
    """``ValidString.in``."""
    def check(name: str, value: Any) -> None:
        if value not in allowed:
            raise invalid(name, value, f"String must be one of: {', '.join(allowed)}")
    return check


def each_one_of(*allowed: str) -> Validator:
    """``ValidList.in``: every element ``ValidString.in``."""
    element = one_of(*allowed)

    def check(name: str, value: Any) -> None:
        for v in value:
            element(name, v)
    return check


def metadata_version(name: str, value: Any) -> None:
    """``MetadataVersionValidator``: a version ``MetadataVersion.fromVersionString`` knows."""
    try:
        versions.from_version_string(str(value))
    except ValueError as e:
        raise invalid(name, value, str(e)) from None
