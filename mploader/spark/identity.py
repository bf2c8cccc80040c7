"""Which broker a data dir belongs to: its ``meta.properties``, read as Kafka reads it
(``org.apache.kafka.metadata.properties.MetaProperties.Builder(Properties)``, the file loaded by
:func:`mploader.broker_config.properties.read_properties`, Java's ``Properties.load``).

``version`` 0 (ZooKeeper era) names the broker by ``broker.id`` (optional, as ``cluster.id`` is), version 1 (KRaft)
by ``node.id`` (required, and so is ``cluster.id``); ``directory.id`` (optional) is a Kafka ``Uuid``, 16 bytes in
URL-safe base64.  A file Kafka would refuse (a bad number, a missing required key, a ``directory.id`` that is not a
Uuid) or no file at all: no identity, the dir is a broker of its own.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass

from mploader.broker_config.properties import PropertiesError, read_properties

META_PROPERTIES = "meta.properties"
_INT = re.compile(r"[+-]?[0-9]+")  # what Integer.parseInt takes (ASCII digits)
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")  # Base64.getUrlDecoder()'s alphabet, and its padding


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str | None
    node_id: int | None  # node.id (version 1) or broker.id (version 0); None: a version-0 file without one
    directory_id: str | None  # as written (URL-safe base64); None: a dir from before directory ids


def read_meta_properties(data_dir: str) -> MetaProperties | None:
    """``data_dir``'s ``meta.properties`` (None: no such file, unreadable, or one Kafka would refuse)."""
    try:
        return meta_properties(read_properties(os.path.join(data_dir, META_PROPERTIES)))
    except (OSError, PropertiesError, ValueError):
        return None


def meta_properties(props: dict[str, str]) -> MetaProperties:
    """``MetaProperties.Builder(Properties)`` then ``build()``; ValueError where Kafka throws."""
    version = _java_int(props.get("version", "0"), "version")
    if version not in (0, 1):  # MetaPropertiesVersion.fromNumber
        raise ValueError(f"unknown meta.properties version {version}")
    key = "broker.id" if version == 0 else "node.id"
    node_id = _java_int(props[key], key) if key in props else None
    cluster_id = props.get("cluster.id")
    if version == 1 and (cluster_id is None or node_id is None):
        raise ValueError("a version 1 meta.properties needs cluster.id and node.id")
    directory_id = props.get("directory.id")
    if directory_id is not None:
        _uuid_bytes(directory_id)
    return MetaProperties(cluster_id, node_id, directory_id)


def broker_key(data_dir: str, meta: MetaProperties | None) -> str:
    """The broker's name in the fleet's tables and its grouping key: ``cluster_id/node_id`` (``node_id`` alone
    for a version-0 file without ``cluster.id``), or the data dir itself where it names no broker."""
    if meta is None or meta.node_id is None:
        return data_dir
    return f"{meta.cluster_id}/{meta.node_id}" if meta.cluster_id else str(meta.node_id)


def _java_int(text: str, key: str) -> int:
    """``Integer.parseInt`` (``PropertiesUtils.loadRequiredIntProp``)."""
    value = int(text) if _INT.fullmatch(text) else None
    if value is None or not -2**31 <= value < 2**31:
        raise ValueError(f"{key}={text!r} is not an int")
    return value


def _uuid_bytes(text: str) -> bytes:
    """``Uuid.fromString``: at most 24 characters of URL-safe base64 that decode to 16 bytes."""
    if len(text) > 24 or not _BASE64URL.fullmatch(text):
        raise ValueError(f"directory.id={text!r} is not a Uuid")
    try:
        raw = base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"directory.id={text!r} is not a Uuid: {e}") from e
    if len(raw) != 16:
        raise ValueError(f"directory.id={text!r} is not a Uuid")
    return raw


__all__ = ["META_PROPERTIES", "MetaProperties", "broker_key", "meta_properties", "read_meta_properties"]
