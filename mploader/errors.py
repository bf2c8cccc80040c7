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
from typing import TypeGuard


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


class MetadataRecordError(CorruptFileError):
    """A KRaft metadata record Kafka cannot read or replay (its MetadataParseException, or what its MetadataDelta
    refuses); names the file, the byte position of the batch and, in the reason, the record's offset."""


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

    ``kafka_exception`` names the exception Kafka would throw; ``written_dirs``, for a failure found once the load
    had begun writing, the directories it had changed (sorted; None: found before the first write, or not known).
    """

    def __init__(self, path: str | os.PathLike[str] | None, kafka_exception: str, reason: str):
        self.path = os.fspath(path) if path is not None else None
        self.kafka_exception = kafka_exception
        self.written_dirs: list[str] | None = None
        where = f"{self.path}: " if self.path else ""
        super().__init__(f"{where}{reason} (Kafka: {kafka_exception}, broker start-up fails)")


class LoadInterrupted(MploaderError, KeyboardInterrupt):
    """The load was interrupted (Ctrl-C): raised in the loading threads so that they stop at the next
    segment.  Whatever was written is what Kafka itself could have left: a rerun recovers it."""


class EnvironmentFailure(MploaderError, OSError):
    """An error of the environment, not of the bytes (docs/loading.md, "Errors of the environment"): a
    permission, a limit, a special file, a link, a full or failing device.  Raised where Kafka's ``recoverLog``
    would take the ``IOException`` for corruption and cut valid data: mploader stops the partition instead (its
    data dir goes offline, as Kafka's ``LogDirFailureChannel`` takes it), with nothing truncated or deleted,
    naming the file, the error and what to fix; a load after the fix finishes the recovery."""

    def __init__(self, path: str | os.PathLike[str] | None, err: int, what: str, fix: str):
        self.path = os.fspath(path) if path is not None else None
        self.fix = fix
        OSError.__init__(self, err, what, self.path)

    def __reduce__(self) -> tuple[object, ...]:
        return EnvironmentFailure, (self.path, self.errno, self.strerror, self.fix)

    def __str__(self) -> str:
        code = errno.errorcode.get(self.errno or 0, str(self.errno))
        where = f"{self.path}: " if self.path else ""
        return f"{where}{self.strerror} ({code}); nothing was truncated or deleted: {self.fix}"


# errno -> what the operator should do; the default covers the rest
_FIXES = {
    errno.EACCES: "give the loading user write access to it (owner, mode, ACL) and load again",
    errno.EPERM: "it is immutable or append-only (lsattr), or not this user's: clear the attribute "
                 "(chattr -i/-a) or fix its owner, and load again",
    errno.EMFILE: "too many open files for this process: raise the limit (ulimit -n) or load with fewer "
                  "workers and recovery threads, and load again",
    errno.ENFILE: "the system's open-file table is full: close other programs' files (fs.file-max) and load again",
    errno.EISDIR: "a directory stands where a file belongs: move it out of the partition directory and load again",
    errno.ENOTDIR: "a file stands where a directory belongs: move it out of the data dir and load again",
    errno.ELOOP: "a symbolic link stands where a file belongs: mploader never follows links out of a data dir; "
                 "replace the link by the file itself",
    errno.EROFS: "the file system is mounted read-only: remount it read-write (or use --dry-run) and load again",
    errno.ENOMEM: "out of memory: free memory or load with fewer workers, and load again",
    errno.EAGAIN: "a resource was temporarily unavailable: load again",
    errno.ENOSPC: "the file system is full: free space on it and load again",
    errno.EDQUOT: "the user's disk quota is used up: raise it or free space, and load again",
    errno.EIO: "the device failed to read or write it: copy the data dir to a healthy disk (e.g. ddrescue) and "
               "load the copy; the bytes were not read, so nothing says they are invalid",
    errno.ENXIO: "a special file (a device or a FIFO) stands where a file belongs: move it out of the data dir",
}


def of_the_environment(error: BaseException) -> TypeGuard[OSError]:
    """The one rule: whether ``error`` says something about the environment rather than about the bytes.  An
    ``OSError`` raised by the operating system is the environment's (EIO too: unread bytes say nothing); the
    ``OSError``s mploader raises for content Kafka refuses with an IOException (a malformed checkpoint) are the
    bytes'.  Only errors of the bytes may lead to a cut (Kafka's ``recoverLog``)."""
    if isinstance(error, EnvironmentFailure):
        return True
    return isinstance(error, OSError) and not isinstance(error, MploaderError)


def environment_failure(error: OSError, path: str | os.PathLike[str] | None = None) -> EnvironmentFailure:
    """``error`` (an error of the environment) as an :class:`EnvironmentFailure` naming its file (``path`` where
    the system call named none, e.g. a write's ``ENOSPC``) and what to fix."""
    if isinstance(error, EnvironmentFailure):
        return error
    err = error.errno or errno.EIO
    named = error.filename if error.filename is not None else path
    fix = fix_for(err) or "fix the cause and load again"
    return EnvironmentFailure(named, err, error.strerror or os.strerror(err), fix)


def fix_for(err: int | None) -> str | None:
    """What an operator does about an error of the environment with errno ``err`` (None: nothing specific)."""
    return _FIXES.get(err) if err is not None else None


def hard_linked(path: str | os.PathLike[str], links: int) -> EnvironmentFailure:
    """The refusal to change ``path``, a file with ``links`` names: a write or a cut would change it under its
    other names too, which may lie outside the data dir."""
    return EnvironmentFailure(path, errno.EMLINK, f"the file has {links} hard links; mploader changes no file that "
                              "another name shares", "replace it by a copy of its own (cp -p FILE FILE.copy && "
                              "mv FILE.copy FILE) and load again")
