"""The error hierarchy of mploader.

Every error raised on purpose derives from :class:`MploaderError` and from the
built-in exception a caller would naturally catch (``OSError`` for what Kafka
treats as an ``IOException``, ``ValueError`` for unparsable text, ...).

Corrupt *log data* is not an error: Kafka recovers from it, and so do we (a
scan reports the byte position where the valid data ends).  The errors below
are for files whose content Kafka itself refuses, and for the outcomes that
make a Kafka broker fail its start-up.
"""

from __future__ import annotations

import errno
import os


class MploaderError(Exception):
    """Base class of every error raised by mploader.

    Picklable whatever a subclass's ``__init__`` takes (a load may run in another process, e.g. a Spark task:
    its error comes back pickled): rebuilt from its message and attributes, notes included."""

    def __reduce__(self) -> tuple[object, ...]:
        return _restore, (type(self), self.args, dict(self.__dict__))


def _restore(cls: type[MploaderError], args: tuple[object, ...], state: dict[str, object]) -> MploaderError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class CorruptFileError(MploaderError, ValueError):
    """A file's bytes cannot be parsed; names the file and the byte position."""

    def __init__(self, path: str | os.PathLike[str] | None, position: int | None, reason: str):
        self.path = os.fspath(path) if path is not None else None
        self.position = position
        self.reason = reason
        where = self.path or "<buffer>"
        if position is not None:
            where = f"{where} at byte {position}"
        super().__init__(f"{where}: {reason}")


class CorruptRecordError(CorruptFileError):
    """A record batch fails Kafka's validity check (size or CRC)."""


class InvalidRecordError(CorruptFileError):
    """A record inside a batch cannot be parsed (Kafka's InvalidRecordException)."""


class CorruptIndexError(CorruptFileError):
    """An index file fails Kafka's sanity check (Kafka's CorruptIndexException)."""


class CorruptSnapshotError(CorruptFileError):
    """A producer-state snapshot is unreadable (Kafka deletes it and tries an older one)."""


class MalformedCheckpointError(MploaderError, OSError):
    """A checkpoint file Kafka rejects with an IOException (bad version, count or line).

    Kafka reports the data directory offline for these.
    """

    def __init__(self, path: str | os.PathLike[str], line_number: int | None, reason: str):
        self.path = os.fspath(path)
        self.line_number = line_number
        where = self.path if line_number is None else f"{self.path} line {line_number}"
        OSError.__init__(self, errno.EINVAL, f"{where}: {reason}")

    def __str__(self) -> str:  # OSError's default rendering would show "[Errno 22]"
        return str(self.args[1])


class CheckpointNumberFormatError(MploaderError, ValueError):
    """A checkpoint entry with a non-numeric field (Kafka's NumberFormatException).

    Also raised for a negative entry count, which Kafka's reader turns into an
    IllegalArgumentException (``new ArrayList<>(-1)``): NumberFormatException is an
    IllegalArgumentException in Java and both are handled alike (a RuntimeException,
    not an IOException).  Kafka does not take the directory offline for these.
    """

    def __init__(self, path: str | os.PathLike[str], line_number: int, reason: str):
        self.path = os.fspath(path)
        self.line_number = line_number
        super().__init__(f"{self.path} line {line_number}: {reason}")


class InvalidPartitionDirError(MploaderError, ValueError):
    """A directory name that is not ``<topic>-<partition>`` (Kafka's KafkaException).

    In a data dir this makes a Kafka broker fail its start-up (e.g. ``lost+found``).
    """

    def __init__(self, path: str | os.PathLike[str], reason: str):
        self.path = os.fspath(path)
        super().__init__(
            f"{self.path}: not a topic-partition directory ({reason}); "
            "move it out of the data directory"
        )


class InvalidFileNameError(MploaderError, ValueError):
    """A segment-family file whose name does not start with a decimal offset."""

    def __init__(self, path: str | os.PathLike[str], reason: str):
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {reason}")


class StartupFailedError(MploaderError, RuntimeError):
    """Kafka's own broker would fail to start on this input (docs/loading.md §13).

    ``kafka_exception`` names the exception Kafka would throw.
    """

    def __init__(self, path: str | os.PathLike[str] | None, kafka_exception: str, reason: str):
        self.path = os.fspath(path) if path is not None else None
        self.kafka_exception = kafka_exception
        where = f"{self.path}: " if self.path else ""
        super().__init__(f"{where}{reason} (Kafka: {kafka_exception}, broker start-up fails)")


class LoadInterrupted(MploaderError, KeyboardInterrupt):
    """The load was interrupted (Ctrl-C): raised in the loading threads so that they stop at the next
    segment.  Whatever was written is what Kafka itself could have left: a rerun recovers it."""
