"""Log lines as a Kafka broker prints them, and the warnings a ``--json`` document carries.

``-v`` shows the INFO lines a broker prints while it loads (per data dir, per partition), ``-vv`` adds
DEBUG; without either only warnings (truncations, deleted segments, rebuilt indexes, acknowledged records
lost) and errors reach stderr.  Only the command configures logging: the library only logs.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

_LEVEL = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN", logging.ERROR: "ERROR",
          logging.CRITICAL: "FATAL"}


#: The loggers of the load's changes to the data dirs (truncations, deleted segments and files, rebuilt indexes,
#: records lost).  The code that logs them runs the same in a dry run, so their past tense needs a mark there.
CHANGE_LOGGERS = ("mploader.manager", "mploader.recovery")


def _is_change_logger(name: str) -> bool:
    """Whether the logger ``name`` is one of :data:`CHANGE_LOGGERS` or below one."""
    return any(name == n or name.startswith(n + ".") for n in CHANGE_LOGGERS)


class KafkaFormatter(logging.Formatter):
    """``[2025-01-31 12:00:00,123] WARN message (mploader.recovery.loader)``, Kafka's log4j layout.  In a dry run
    the load's warnings about its changes (:data:`CHANGE_LOGGERS`) say what it would do in the past tense: they
    are marked ``(dry run, not done)``.  Other warnings (the command's advice, a worker retried) are true as
    they stand and are not marked."""

    def __init__(self, dry_run: bool = False) -> None:
        super().__init__()
        self.dry_run = dry_run

    def format(self, record: logging.LogRecord) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created)) + f",{int(record.msecs):03d}"
        mark = "(dry run, not done) " if self.dry_run and record.levelno == logging.WARNING and \
            _is_change_logger(record.name) else ""
        line = f"[{when}] {_LEVEL.get(record.levelno, record.levelname)} {mark}{record.getMessage()} ({record.name})"
        if record.exc_info and logging.getLogger().isEnabledFor(logging.DEBUG):
            line += "\n" + self.formatException(record.exc_info)
        return line


_handler: logging.StreamHandler[TextIO] | None = None


def setup_logging(verbosity: int, stream: TextIO | None = None, dry_run: bool = False) -> None:
    """0: warnings and errors; 1: INFO (what a broker prints while loading); 2 or more: DEBUG.  Replaces the
    handler an earlier call installed (the command may run more than once in a process, e.g. in tests).
    ``dry_run``: the command changes nothing (see :class:`KafkaFormatter`)."""
    global _handler
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(stream or sys.stderr)
    _handler.setFormatter(KafkaFormatter(dry_run))
    root.addHandler(_handler)
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    root.setLevel(level)
    _handler.setLevel(level)
    # the process pool's own chatter (loky, concurrent.futures) stays at WARNING below -vv
    for name in ("loky", "concurrent.futures"):
        logging.getLogger(name).setLevel(logging.DEBUG if verbosity >= 3 else logging.WARNING)


def set_log_stream(stream: TextIO) -> TextIO | None:
    """Send the command's log lines to ``stream`` from now on (e.g. through a progress display, so that a
    line logged while the bars are drawn appears above them); returns the stream they went to before."""
    if _handler is None:
        return None
    return _handler.setStream(stream)


@contextmanager
def quiet_unless_verbose(names: Sequence[str]) -> Iterator[None]:
    """Inside, the loggers ``names`` log only errors unless the command was given ``-v``: what they warn of, the
    command's report says already.  Their own levels are given back on the way out."""
    saved = {name: logging.getLogger(name).level for name in names}
    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        for name in names:
            logging.getLogger(name).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


class WarningCollector(logging.Handler):
    """Collects the text of every WARNING (or worse) that mploader logs while installed (``with``)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "mploader" or record.name.startswith("mploader."):
            self.messages.append(record.getMessage())

    def __enter__(self) -> WarningCollector:
        root = logging.getLogger()
        root.addHandler(self)
        if root.getEffectiveLevel() > logging.WARNING:
            root.setLevel(logging.WARNING)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)
