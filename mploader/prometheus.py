"""Serve a :class:`~mploader.metrics.MetricsRegistry` over HTTP, in Prometheus' text format, while a load runs.

::

    from mploader import MetricsRegistry, load_logs
    from mploader.prometheus import MetricsServer

    registry = MetricsRegistry()
    with MetricsServer(registry, port=9404):          # http://127.0.0.1:9404/metrics
        load_logs(dirs, metrics=registry)

Every gauge of the registry is one metric family, named as Kafka names it (``remainingLogsToRecover``,
``remainingSegmentsToRecover``, ``remainingSegmentsToLoad``) or as mploader names its own
(``totalBytesToRecover``, ``bytesRecovered``, ``recoveryEtaSeconds``), its tags (``dir``, ``threadNum``) as
labels.  The values are read at each scrape; a gauge without a value yet (Kafka's ``remainingSegmentsToRecover``
of a thread that has not started a partition) has no sample.  The gauges exist while the load runs: before
and after it a scrape answers with no sample.  The server answers in a daemon thread; :meth:`MetricsServer.stop`
(or leaving the ``with``) closes its port.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the registry is only read, through current()
    from mploader.metrics import MetricsRegistry

log = logging.getLogger(__name__)

DEFAULT_ADDRESS = "127.0.0.1"

_HELP = {
    "remainingLogsToRecover": "Kafka's kafka.log:type=LogManager,name=remainingLogsToRecover: partitions of the data "
                              "dir still to load",
    "remainingSegmentsToRecover": "Kafka's kafka.log:type=LogManager,name=remainingSegmentsToRecover: segments the "
                                  "recovery thread still has to recover in its current partition",
    "remainingSegmentsToLoad": "segments of the data dir the Phase 1 worker pool still has to hand to recovery",
    "totalBytesToRecover": "bytes of the segments the load reads whole in the data dir (the plan)",
    "bytesRecovered": "of totalBytesToRecover, the bytes done",
    "recoveryEtaSeconds": "seconds the data dir's load still needs at the average pace so far",
}


class _RegistryCollector:
    """A prometheus_client collector that reads the registry's current values at every scrape."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self.registry = registry

    def describe(self) -> list[Any]:  # no collect() at registration: the load may not have started yet
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
        for (name, tags), value in self.registry.current().items():
            if value is not None:
                by_name.setdefault(name, []).append((dict(tags), float(value)))
        for name in sorted(by_name):
            samples = sorted(by_name[name], key=lambda s: sorted(s[0].items()))
            labels = sorted({k for sample_tags, _ in samples for k in sample_tags})
            family = GaugeMetricFamily(name, _HELP.get(name, name), labels=labels)
            for sample_tags, sample in samples:
                family.add_metric([sample_tags.get(k, "") for k in labels], sample)
            yield family


class MetricsServer:
    """An HTTP server answering ``GET /metrics`` (any path, as prometheus_client does) with ``registry``'s
    gauges, on ``addr:port`` (``port=0``: a free port, see :attr:`port`).  ``start`` raises ``OSError`` when
    the port cannot be had; use it as a context manager, or call :meth:`start` and :meth:`stop`."""

    def __init__(self, registry: MetricsRegistry, port: int, addr: str = DEFAULT_ADDRESS) -> None:
        self.registry = registry
        self.addr = addr
        self.requested_port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsServer:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_RegistryCollector(self.registry))
        self._server, self._thread = start_http_server(self.requested_port, self.addr, registry=registry)
        log.info("serving the load's metrics on %s", self.url)
        return self

    @property
    def port(self) -> int:
        """The port served on (the one the system chose for ``port=0``)."""
        if self._server is None:
            raise RuntimeError("the metrics server is not running")
        return int(self._server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop answering and close the port (waits for a scrape in progress)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["DEFAULT_ADDRESS", "MetricsServer"]
