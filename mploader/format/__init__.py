"""Kafka's on-disk formats: bytes in, values out, no policy.

One module per file kind, struct layouts written down once in each module's docstring:

* :mod:`.records`    record batches, magic v2, and control records
* :mod:`.legacy`     legacy message sets, magic v0/v1
* :mod:`.log`        how a ``.log`` file is cut into entries
* :mod:`.index`      ``.index`` / ``.timeindex`` / ``.txnindex`` as numpy views
* :mod:`.checkpoint` text checkpoints, ``partition.metadata``, the clean-shutdown marker
* :mod:`.snapshot`   producer-state ``.snapshot`` files
* :mod:`.metadata_records` KRaft metadata records; :mod:`.metadata_image` a broker's metadata image read from
  its ``__cluster_metadata-0`` (snapshot + log), and Kafka's stray-replica test against it
* :mod:`.names`      file and partition-directory names
* :mod:`.files`      a data dir's file opened safely (never a link or a special file), read with the fewest calls
* :mod:`.java_hashmap`, :mod:`.hashmap_order`  the order Kafka's ``HashMap<Long, V>`` writes snapshots in

The modules are imported on first use (PEP 562), so that importing one (a worker imports
:mod:`.records` and :mod:`.log`) does not import them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_MODULES = ("checkpoint", "compression", "files", "index", "legacy", "log", "metadata_image", "metadata_records",
            "names", "records", "snapshot")

__all__ = [*_MODULES, "DirKind", "TopicPartition"]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)  # the import binds it in this package
    if name in ("DirKind", "TopicPartition"):
        value = getattr(importlib.import_module(".names", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from mploader.format import (
        checkpoint,
        compression,
        index,
        legacy,
        log,
        metadata_image,
        metadata_records,
        names,
        records,
        snapshot,
    )
    from mploader.format.names import DirKind, TopicPartition
