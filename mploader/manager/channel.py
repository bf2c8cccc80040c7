"""Kafka's ``LogDirFailureChannel``: the data dirs a load takes offline, each once, with why.

Kafka's broker adds a dir when an ``IOException`` meets it (``maybeAddOfflineLogDir``); a load here does too, and
tells two more things the channel keeps with the dir:

* *after its loads*: a dir whose checkpoint could not be read still loads its partitions (with an empty map, as
  Kafka's loadLogs does) and is reported offline once they are loaded;
* *foreseen*: the preflight foresees that a write LogManager makes first will fail there; the write is made
  (and fails) as in Kafka, and until then the preflight leaves the dir's partitions unchecked;
* *the marker kept*: an error of the environment took the dir offline, so its clean-shutdown marker stays and the
  load after the fix is clean again (docs/loading.md §18).
"""

from __future__ import annotations


class LogDirFailureChannel:
    """The offline data dirs of one load (see the module docstring); first reason wins."""

    def __init__(self) -> None:
        self._offline: dict[str, str] = {}
        self._after_load: dict[str, str] = {}
        self._foreseen: dict[str, str] = {}
        self._keep_marker: set[str] = set()

    def add(self, data_dir: str, reason: str, keep_marker: bool = False) -> None:
        """``data_dir`` goes offline now (a second reason is not kept)."""
        self._offline.setdefault(data_dir, reason)
        if keep_marker:
            self._keep_marker.add(data_dir)

    def add_after_load(self, data_dir: str, reason: str) -> None:
        """``data_dir`` goes offline once its partitions are loaded (:meth:`settle`)."""
        self._after_load.setdefault(data_dir, reason)

    def settle(self, data_dir: str) -> None:
        """``data_dir``'s loads are done: offline now if it was to go offline after them."""
        if data_dir in self._after_load:
            self.add(data_dir, self._after_load[data_dir])

    def foresee(self, data_dir: str, reason: str) -> None:
        self._foreseen.setdefault(data_dir, reason)

    def foreseen(self, data_dir: str) -> str | None:
        """Why a write to come in ``data_dir`` will fail, as the preflight foresees it (None: none foreseen)."""
        return self._foreseen.get(data_dir)

    def __contains__(self, data_dir: object) -> bool:
        return data_dir in self._offline

    def reason(self, data_dir: str) -> str | None:
        return self._offline.get(data_dir)

    def goes_offline(self, data_dir: str) -> bool:
        """Offline now, or once its partitions are loaded."""
        return data_dir in self._offline or data_dir in self._after_load

    def keeps_marker(self, data_dir: str) -> bool:
        return data_dir in self._keep_marker

    @property
    def offline_dirs(self) -> dict[str, str]:
        """Every dir offline now, in the order they went, with why."""
        return dict(self._offline)


__all__ = ["LogDirFailureChannel"]
