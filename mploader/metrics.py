"""Gauges the load exposes while it runs, named as Kafka names them.

Kafka registers ``remainingLogsToRecover{dir}`` and
``remainingSegmentsToRecover{dir, threadNum}`` (group ``kafka.log``, type
``LogManager``) for the duration of ``loadLogs`` only; with more than one
Phase 1 worker per dir mploader adds the seed KIP's
``remainingSegmentsToLoad{dir, threadNum}``.  mploader's own, per data dir,
from the plan (:class:`mploader.progress.DirProgress`): ``totalBytesToRecover``
(absent where the dir was not planned), ``bytesRecovered`` and
``recoveryEtaSeconds`` (absent until something is done).  A
:class:`MetricsRegistry` keeps the current values and, for tests and harnesses,
every change in order; :mod:`mploader.prometheus` serves them over HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

REMAINING_LOGS_TO_RECOVER = "remainingLogsToRecover"
REMAINING_SEGMENTS_TO_RECOVER = "remainingSegmentsToRecover"
REMAINING_SEGMENTS_TO_LOAD = "remainingSegmentsToLoad"
TOTAL_BYTES_TO_RECOVER = "totalBytesToRecover"
BYTES_RECOVERED = "bytesRecovered"
RECOVERY_ETA_SECONDS = "recoveryEtaSeconds"

Tags = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class GaugeEvent:
    kind: str  # "register", "set" or "remove"
    name: str
    tags: Tags
    value: int | None


class MetricsRegistry:
    """Thread-safe gauges with a change history; ``listener`` sees every event as it happens.

    ``keep_history=False`` keeps only the current values (an exporter's registry: the progress gauges change
    several times per segment, so a history grows with the broker)."""

    def __init__(self, listener: Callable[[GaugeEvent], None] | None = None, *, keep_history: bool = True):
        self._lock = threading.Lock()
        self._values: dict[tuple[str, Tags], int | None] = {}
        self.history: list[GaugeEvent] = []
        self._keep_history = keep_history
        self._listener = listener

    @staticmethod
    def tags(**kv: object) -> Tags:
        return tuple(sorted((k, str(v)) for k, v in kv.items()))

    def _emit(self, event: GaugeEvent) -> None:
        if self._keep_history:
            self.history.append(event)
        if self._listener is not None:
            self._listener(event)

    def register(self, name: str, tags: Tags, value: int | None = None) -> None:
        with self._lock:
            self._values[(name, tags)] = value
            self._emit(GaugeEvent("register", name, tags, value))

    def set(self, name: str, tags: Tags, value: int) -> None:
        with self._lock:
            self._values[(name, tags)] = value
            self._emit(GaugeEvent("set", name, tags, value))

    def remove(self, name: str, tags: Tags) -> None:
        with self._lock:
            self._values.pop((name, tags), None)
            self._emit(GaugeEvent("remove", name, tags, None))

    def current(self) -> dict[tuple[str, Tags], int | None]:
        with self._lock:
            return dict(self._values)

    def values_of(self, name: str, **tags: object) -> list[int | None]:
        """Every value a gauge took, in order (for tests and progress displays)."""
        want = self.tags(**tags)
        return [e.value for e in self.history if e.name == name and e.tags == want and e.kind != "remove"]
