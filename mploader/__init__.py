"""mploader: load and recover Kafka broker log directories with Kafka's exact outcome, on every core."""

from .errors import (
    CorruptFileError, CorruptIndexError, CorruptRecordError, CorruptSnapshotError, InvalidPartitionDirError,
    MalformedCheckpointError, MploaderError, StartupFailedError,
)
from .format.names import TopicPartition

__version__ = "0.1.0"

__all__ = [
    "CorruptFileError", "CorruptIndexError", "CorruptRecordError", "CorruptSnapshotError",
    "InvalidPartitionDirError", "MalformedCheckpointError", "MploaderError", "StartupFailedError",
    "TopicPartition", "__version__",
]
