"""mploader: load and recover Kafka broker log directories with Kafka's exact outcome, on every core.

Public API::

    from mploader import load_logs, LoaderConfig, TopicPartition
    result = load_logs(["/data1/kafka", "/data2/kafka"], LoaderConfig(), now_ms=None)
    log = result.logs[TopicPartition("orders", 3)]

The names below are imported on first use (PEP 562): a Phase 1 worker process imports
:mod:`mploader.engine.worker` and what a scan needs, not the loader, the manager or the pool's parent side
(0.12 s instead of 0.30 s of start-up per worker, perf/README.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mploader._version import __version__

_ORIGIN = {  # public name -> the module that defines it
    "load_logs": "api", "verify_logs": "verify", "VerifyReport": "verify",
    "BackgroundVerification": "verify.background",
    "LoaderConfig": "config", "TopicConfig": "config",
    "TopicPartition": "format.names", "DirKind": "format.names",
    "LoadResult": "result", "LoadedLog": "result", "LoadStats": "result", "SegmentInfo": "result",
    "ProducerInfo": "result", "Impact": "result",
    "MetricsRegistry": "metrics", "Progress": "progress", "DirProgress": "progress", "MetricsServer": "prometheus",
    "broker_setup": "broker_config",
    "ProcessPartitions": "runners", "PartitionRunner": "runners", "RunEvents": "runners",
    **{name: "errors" for name in (
        "MploaderError", "CorruptFileError", "CorruptRecordError", "CorruptIndexError", "CorruptSnapshotError",
        "MalformedCheckpointError", "CheckpointNumberFormatError", "InvalidPartitionDirError",
        "StartupFailedError")},
}

__all__ = [*_ORIGIN, "__version__"]


def __getattr__(name: str) -> Any:
    module = _ORIGIN.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    """The public API only (not the helpers of this module, nor the subpackages imported so far)."""
    return sorted(__all__)


if TYPE_CHECKING:
    from mploader.api import load_logs
    from mploader.broker_config import broker_setup
    from mploader.config import LoaderConfig, TopicConfig
    from mploader.errors import (
        CheckpointNumberFormatError,
        CorruptFileError,
        CorruptIndexError,
        CorruptRecordError,
        CorruptSnapshotError,
        InvalidPartitionDirError,
        MalformedCheckpointError,
        MploaderError,
        StartupFailedError,
    )
    from mploader.format.names import DirKind, TopicPartition
    from mploader.metrics import MetricsRegistry
    from mploader.progress import DirProgress, Progress
    from mploader.prometheus import MetricsServer
    from mploader.result import Impact, LoadedLog, LoadResult, LoadStats, ProducerInfo, SegmentInfo
    from mploader.runners import PartitionRunner, ProcessPartitions, RunEvents
    from mploader.verify import VerifyReport, verify_logs
    from mploader.verify.background import BackgroundVerification
