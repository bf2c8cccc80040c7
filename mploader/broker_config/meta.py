"""A data dir's ``meta.properties``: which cluster, which broker and which directory it is (Kafka's
``MetaProperties``, read by ``MetaPropertiesEnsemble.Loader`` through ``PropertiesUtils.readPropertiesFile``: a
``java.util.Properties`` file).

Kafka writes it in every data dir it formats: ``cluster.id``, the broker's ``node.id`` (``broker.id`` in the
ZooKeeper era's version 0) and, since KIP-858, the dir's own ``directory.id``.  mploader reads it to tell brokers
apart (:func:`mploader.spark.fleet.brokers`) and to check that a Spark task sees the data dir the driver planned
(:mod:`mploader.spark.identity`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mploader.broker_config.properties import read_properties

META_PROPERTIES = "meta.properties"


@dataclass(frozen=True, slots=True)
class DirIdentity:
    """The identity ``meta.properties`` gives a data dir; all None: none (no file, or one without these keys)."""

    cluster_id: str | None = None
    node_id: str | None = None  # node.id, else broker.id (MetaProperties of version 0)
    directory_id: str | None = None

    @property
    def known(self) -> bool:
        return self != DirIdentity()

    def __str__(self) -> str:
        fields = (("cluster.id", self.cluster_id), ("node.id", self.node_id), ("directory.id", self.directory_id))
        said = [f"{key}={value}" for key, value in fields if value is not None]
        return " ".join(said) if said else "no identity (no meta.properties)"


def read_identity(data_dir: str) -> DirIdentity:
    """The identity in ``data_dir``'s ``meta.properties``; OSError (FileNotFoundError: none) or
    :class:`~mploader.broker_config.properties.PropertiesError` (a ValueError) when it cannot be read."""
    props = read_properties(os.path.join(data_dir, META_PROPERTIES))
    return DirIdentity(props.get("cluster.id"), props.get("node.id", props.get("broker.id")),
                       props.get("directory.id"))


def identity_or_none(data_dir: str) -> DirIdentity:
    """:func:`read_identity`, the empty identity where it cannot be read (the dir vouches for nothing)."""
    try:
        return read_identity(data_dir)
    except (OSError, ValueError):
        return DirIdentity()


__all__ = ["META_PROPERTIES", "DirIdentity", "identity_or_none", "read_identity"]
