"""How a command ends when something stops it: a signal, or an error no handler of the command names.

* **SIGTERM** (a service manager's stop, ``kill``) stops a command as Ctrl-C does: :func:`sigterm_as_interrupt`
  raises ``KeyboardInterrupt`` in the main thread, so the load stops at its next safe point by the very path
  Ctrl-C takes (``mploader.manager``: loading threads stop at their next segment, the workers go); the command
  then exits 143 (128 + SIGTERM, as a shell reports it) instead of 130.
* **An error of the environment** (``OSError``: a full disk or /dev/shm, too many open files, a read-only file
  system; ``MemoryError``) ends in one line that names the file when the error has one, and what to do;
  anything else is a bug: its traceback, then the same one line.  Exit 1; with ``--json``, an error document.

:func:`failed` is that answer, for the top-level handler (:func:`mploader.cli.main.main`) and for a command's
own handlers; :func:`describe` its words, for an error that does not end the command (``load --verify-after``).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import resource
import shutil
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from types import FrameType

from mploader.cli.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_TERMINATED
from mploader.cli.output import fail
from mploader.cli.units import format_bytes
from mploader.errors import MploaderError, fix_for

_stopped_by: list[int] = []  # the signal that stopped the command (empty: none, or Ctrl-C's KeyboardInterrupt)

SHM = "/dev/shm"
OUT_OF_MEMORY = "out of memory: run it where more memory is free, or with fewer worker processes (--workers)"


# --------------------------------------------------------------------------------------------
# Signals


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the command runs, SIGTERM raises ``KeyboardInterrupt`` in the main thread, as Ctrl-C does.  Only the
    first: a second SIGTERM while the command stops is ignored, since cutting the stop short could leave a loading
    thread writing after the data dirs' locks are released (SIGKILL still ends it; a rerun recovers that too)."""
    _stopped_by.clear()
    if (threading.current_thread() is not threading.main_thread()  # only the main thread may set handlers
            or signal.getsignal(signal.SIGTERM) == signal.SIG_IGN):  # whoever started it wants SIGTERM ignored
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if _stopped_by:  # already stopping
        return
    _stopped_by.append(signum)
    raise KeyboardInterrupt


def interrupt_exit_code() -> int:
    """130 after Ctrl-C, 143 after SIGTERM."""
    return EXIT_TERMINATED if _stopped_by else EXIT_INTERRUPTED


def stop_reason() -> str:
    return "stopped by SIGTERM" if _stopped_by else "interrupted"


def interrupted(args: argparse.Namespace, next_step: str) -> int:
    """A command stopped by Ctrl-C or SIGTERM: what stopped it, then ``next_step`` (what was left, what to do)."""
    return fail(args, interrupt_exit_code(), "interrupted", f"{stop_reason()}; {next_step}")


# --------------------------------------------------------------------------------------------
# Errors


def failed(args: argparse.Namespace, error: BaseException) -> int:
    """Any exception that ends a command, answered as the command was asked (:func:`mploader.cli.output.fail`), with
    the command's word on what the failure left (``set_defaults(_after_failure=...)``: a text, or a function of the
    arguments)."""
    after = getattr(args, "_after_failure", None)
    next_step = after(args) if callable(after) else after
    if isinstance(error, KeyboardInterrupt):
        return interrupted(args, next_step or "run it again")
    kind, message, path = describe(error)
    return fail(args, EXIT_FAILURE, kind, f"{message}; {next_step or 'fix the cause and run it again'}", path=path)


def describe(error: BaseException) -> tuple[str, str, str | None]:
    """(kind, message, path) of an error: ``io_error`` (an ``OSError``: its text, its file, what to do),
    ``out_of_memory``, ``error`` (mploader's own, which says what it is) or ``internal_error`` (a bug: its
    traceback goes to stderr first, for the report)."""
    if isinstance(error, MploaderError) and not isinstance(error, OSError):
        path = getattr(error, "path", None)
        return "error", str(error), path if isinstance(path, str) else None
    if isinstance(error, OSError):
        path = error.filename if isinstance(error.filename, str) else None
        return "io_error", _os_error_text(error, path), path
    if isinstance(error, MemoryError):
        return "out_of_memory", OUT_OF_MEMORY, None
    traceback.print_exception(error, file=sys.stderr)
    return "internal_error", (f"internal error ({type(error).__name__}: {error}): a bug in mploader; please report "
                              f"it with the traceback above"), None


def _os_error_text(error: OSError, path: str | None) -> str:
    if error.strerror is None or type(error).__str__ is not OSError.__str__:  # mploader's own: it says what to do
        return str(error)
    text = error.strerror + (f": {path}" if path else "")
    hint = _what_to_do(error.errno, path)
    return f"{text} ({hint})" if hint else text


def _what_to_do(code: int | None, path: str | None) -> str | None:
    """What to do about an error of the environment: mploader.errors' one list, with what only the command can add
    (which file system is full, the limit on open files in force)."""
    if code in (errno.ENOSPC, errno.EDQUOT) and path is None and (shm := _shm_full()) is not None:
        return shm
    if code == errno.EMFILE:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return f"this process may open only {soft} files: raise the limit with ulimit -n or systemd's LimitNOFILE"
    if code == errno.ENOMEM:
        return OUT_OF_MEMORY
    return fix_for(code)


def _shm_full() -> str | None:
    """Words for a full /dev/shm, where worker processes keep their semaphores and shared memory (an ``ENOSPC``
    that names no file is most likely that), or None when it has room."""
    try:
        usage = shutil.disk_usage(SHM)
    except OSError:
        return None
    if usage.free >= max(usage.total // 100, 1 << 20):  # room left: the full file system is another one
        return None
    return (f"{SHM} is full, {format_bytes(usage.free)} free of {format_bytes(usage.total)}: worker processes keep "
            f"their semaphores and shared memory there; free it, e.g. with `mploader cleanup` for what killed loads "
            f"left, or mount it larger, e.g. docker run --shm-size")


__all__ = ["SHM", "describe", "failed", "interrupt_exit_code", "interrupted", "sigterm_as_interrupt", "stop_reason"]
