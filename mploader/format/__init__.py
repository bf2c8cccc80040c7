"""Kafka's on-disk formats: bytes in, values out, no policy.

One module per file kind, struct layouts written down once in each module's docstring:

* :mod:`.records`    record batches, magic v2, and control records
* :mod:`.legacy`     legacy message sets, magic v0/v1
* :mod:`.log`        how a ``.log`` file is cut into entries
* :mod:`.index`      ``.index`` / ``.timeindex`` / ``.txnindex`` as numpy views
* :mod:`.checkpoint` text checkpoints, ``partition.metadata``, the clean-shutdown marker
* :mod:`.snapshot`   producer-state ``.snapshot`` files
* :mod:`.names`      file and partition-directory names
"""

from . import checkpoint, compression, index, legacy, log, names, records, snapshot
from .names import DirKind, TopicPartition

__all__ = ["checkpoint", "compression", "index", "legacy", "log", "names", "records", "snapshot",
           "DirKind", "TopicPartition"]
