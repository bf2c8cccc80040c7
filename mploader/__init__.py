"""mploader: load and recover Kafka broker log directories with Kafka's exact outcome, on every core.

Public API::

    from mploader import load_logs, LoaderConfig, TopicPartition
    result = load_logs(["/data1/kafka", "/data2/kafka"], LoaderConfig(), now_ms=None)
    log = result.logs[TopicPartition("orders", 3)]
"""

from .config import LoaderConfig, TopicConfig
from .errors import (
    CheckpointNumberFormatError, CorruptFileError, CorruptIndexError, CorruptRecordError, CorruptSnapshotError,
    InvalidPartitionDirError, MalformedCheckpointError, MploaderError, StartupFailedError,
)
from .format.names import DirKind, TopicPartition
from .manager import load_logs
from .metrics import MetricsRegistry
from .result import LoadedLog, LoadResult, LoadStats, ProducerInfo, SegmentInfo

__version__ = "0.1.0"

__all__ = [
    "load_logs", "LoaderConfig", "TopicConfig", "TopicPartition", "DirKind", "LoadResult", "LoadedLog",
    "LoadStats", "SegmentInfo", "ProducerInfo", "MetricsRegistry",
    "MploaderError", "CorruptFileError", "CorruptRecordError", "CorruptIndexError", "CorruptSnapshotError",
    "MalformedCheckpointError", "CheckpointNumberFormatError", "InvalidPartitionDirError", "StartupFailedError",
    "__version__",
]
