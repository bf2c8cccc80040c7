"""LoaderConfig: Kafka's configuration names, as Python fields, validated."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

_T = TypeVar("_T")
_C = TypeVar("_C")

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024
IndexCheck = Literal["kafka", "sanity", "full"]  # LoaderConfig.index_check (mploader.recovery.index_check)
INDEX_CHECKS: tuple[IndexCheck, ...] = get_args(IndexCheck)
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
# UnifiedLog.isRemoteLogEnabled: never for internal topics (Topic.isInternal), the remote-log metadata
# topic or the cluster metadata topic (nor for compacted topics: TopicConfig.compact, LoaderConfig.compact)
NO_REMOTE_STORAGE_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state",
                                      "__remote_log_metadata", "__cluster_metadata"})

@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Per-topic values (Kafka's topic-level overrides); None = the broker default."""

    index_interval_bytes: int | None = None
    max_index_size: int | None = None  # segment.index.bytes
    segment_bytes: int | None = None
    preallocate: bool | None = None
    record_version: int | None = None  # 2 unless an old message.format.version applies
    remote_storage_enable: bool | None = None
    compact: bool | None = None  # cleanup.policy holds "compact" (no remote storage for the topic then)

    def __post_init__(self) -> None:  # a topic's override has the broker default's bounds, as in Kafka
        _check_topic_values(self.index_interval_bytes, self.max_index_size, self.record_version)


def _check_topic_values(index_interval_bytes: int | None, max_index_size: int | None,
                        record_version: int | None) -> None:
    """The bounds of the values a topic may override (None: not given)."""
    if index_interval_bytes is not None and index_interval_bytes < 0:
        raise ValueError("index_interval_bytes must be >= 0")
    if max_index_size is not None and max_index_size < 4:
        raise ValueError("max_index_size (segment.index.bytes) must be >= 4")
    if record_version is not None and record_version not in (0, 1, 2):
        raise ValueError("record_version must be 0, 1 or 2")


@dataclass(frozen=True, slots=True)
class EffectiveConfig:
    """The values that apply to one partition, every default resolved."""

    index_interval_bytes: int
    max_index_size: int
    segment_bytes: int
    preallocate: bool
    record_version: int
    remote_storage: bool
    producer_id_expiration_ms: int


# LoaderConfig's former field names, still accepted with a DeprecationWarning: {old: new}
RENAMED_FIELDS = {"num_segment_loading_threads_per_data_dir": "segment_scan_workers_per_data_dir"}


def _current_names(changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` with each former field name (:data:`RENAMED_FIELDS`) replaced by its current one."""
    for old, new in RENAMED_FIELDS.items():
        if old in changes:
            warnings.warn(f"LoaderConfig.{old} is now {new}", DeprecationWarning, stacklevel=3)
            if new in changes:
                raise TypeError(f"LoaderConfig: {old} and {new} are the same field; give one")
            changes[new] = changes.pop(old)
    return changes


def _accepting_former_names(cls: type[_C]) -> type[_C]:
    """``cls`` whose constructor also takes the former field names (the dataclass's own ``__init__``, wrapped)."""
    init: Callable[..., None] = cls.__init__

    @functools.wraps(init)
    def __init__(self: _C, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **_current_names(kwargs))

    # mypy goes on checking calls against the dataclass's own signature: the current names only
    cls.__init__ = __init__  # type: ignore[method-assign, assignment]
    return cls


@_accepting_former_names
@dataclass(frozen=True, slots=True)
class LoaderConfig:
    """Configuration of :func:`mploader.load_logs`; field names follow Kafka's config names.

    ``num_recovery_threads_per_data_dir``       num.recovery.threads.per.data.dir
    ``segment_scan_workers_per_data_dir``        ``--workers``: how many worker processes per data dir scan its
                                                 segments in Phase 1 (1: the scans run in the loading process, no
                                                 worker), or "auto" (default; see
                                                 :func:`mploader.load_plan.workers_per_dir`), or "adaptive"
                                                 (:mod:`mploader.engine.adaptive`: as many as pay, from the
                                                 measured throughput and the device's %util).  Processes, not
                                                 threads: formerly ``num_segment_loading_threads_per_data_dir``,
                                                 a name still accepted (constructor, :meth:`replace`, attribute)
                                                 with a DeprecationWarning
    ``index_interval_bytes``                     log.index.interval.bytes
    ``max_index_size``                           log.index.size.max.bytes / segment.index.bytes
    ``segment_bytes``                            log.segment.bytes
    ``preallocate``                              log.preallocate
    ``producer_id_expiration_ms``                producer.id.expiration.ms
    ``remote_log_storage_system_enable``         remote.log.storage.system.enable
    ``topic_overrides``                          {topic: TopicConfig}
    ``compact``                                  log.cleanup.policy holds "compact" (a compacted topic has no
                                                 remote storage: UnifiedLog.isRemoteLogEnabled)
    ``dry_run``                                  compute and report everything; change no byte on disk
    ``read_ahead_bytes``                         per data dir, the most bytes of planned scans asked of the
                                                 disk ahead of Phase 1 (:mod:`mploader.engine.readahead`); 0: off;
                                                 "auto" (default): see :func:`mploader.engine.readahead.auto_window`
    ``index_check``                              "kafka" (default: Kafka's outcome), "sanity" or "full": check the
                                                 indexes of segments the load does not recover, rebuild what fails
                                                 (:mod:`mploader.recovery.index_check`)
    ``max_read_bytes_per_sec``                   per data dir, the most bytes Phase 1 scans per second (an IO
                                                 budget: :mod:`mploader.engine.throttle`); None (default): no limit
    ``persist_recovery_points``                  advance each partition's recovery-point-offset-checkpoint entry to
                                                 its log end offset once its recovered files are durable, so that a
                                                 killed load or the broker's next start does not recover it again
                                                 (:mod:`mploader.recovery.resume`); False (default): as Kafka's load
    ``worker_start``                             the start method asked for a pool's worker processes: "fork"
                                                 (copies of the loading process, nothing to import; a caller that
                                                 writes much of a big heap while the load runs pays copy-on-write for
                                                 it), "spawn" (loky's fresh interpreters); None (default): the
                                                 environment variable ``MPLOADER_WORKER_START``, else "fork" on Linux.
                                                 The function :func:`mploader.engine.worker_start` resolves this
                                                 choice; :attr:`mploader.result.LoadStats.worker_start` reports the
                                                 method a load's pool did use (None: no pool)
    """

    num_recovery_threads_per_data_dir: int = 1
    segment_scan_workers_per_data_dir: int | Literal["auto", "adaptive"] = "auto"
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    max_index_size: int = DEFAULT_MAX_INDEX_SIZE
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    preallocate: bool = False
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    remote_log_storage_system_enable: bool = False
    record_version: int = 2
    topic_overrides: Mapping[str, TopicConfig] = field(default_factory=dict)
    dry_run: bool = False
    read_ahead_bytes: int | Literal["auto"] = "auto"
    index_check: IndexCheck = "kafka"
    max_read_bytes_per_sec: int | None = None
    persist_recovery_points: bool = False
    worker_start: Literal["fork", "spawn"] | None = None
    compact: bool = False
    # what for_topic gives a topic without overrides (the same for every such topic), made once: it is asked twice
    # per partition (the preflight, the load), ~7 us each made anew
    _plain: EffectiveConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.num_recovery_threads_per_data_dir < 1:
            raise ValueError("num_recovery_threads_per_data_dir must be >= 1")
        n = self.segment_scan_workers_per_data_dir
        if n not in ("auto", "adaptive") and (not isinstance(n, int) or n < 1):
            raise ValueError('segment_scan_workers_per_data_dir must be "auto", "adaptive" or an int >= 1')
        if self.max_read_bytes_per_sec is not None and self.max_read_bytes_per_sec < 1:
            raise ValueError("max_read_bytes_per_sec must be >= 1 (None: no limit)")
        r = self.read_ahead_bytes
        if r != "auto" and (not isinstance(r, int) or r < 0):
            raise ValueError('read_ahead_bytes must be "auto" or an int >= 0 (0: no read-ahead)')
        if self.worker_start not in (None, "fork", "spawn"):
            raise ValueError('worker_start must be "fork", "spawn" or None')
        if self.index_check not in INDEX_CHECKS:
            raise ValueError(f"index_check must be one of {', '.join(map(repr, INDEX_CHECKS))}")
        _check_topic_values(self.index_interval_bytes, self.max_index_size, self.record_version)
        object.__setattr__(self, "_plain", self._effective(TopicConfig(), ""))

    def for_topic(self, topic: str) -> EffectiveConfig:
        o = self.topic_overrides.get(topic)
        if o is None:
            return self._plain  # an override-free topic's values do not depend on its name (remote storage: off)
        return self._effective(o, topic)

    def _effective(self, o: TopicConfig, topic: str) -> EffectiveConfig:
        def pick(name: str, default: _T) -> _T:
            v: _T | None = getattr(o, name)
            return default if v is None else v

        return EffectiveConfig(
            index_interval_bytes=int(pick("index_interval_bytes", self.index_interval_bytes)),
            max_index_size=int(pick("max_index_size", self.max_index_size)),
            segment_bytes=int(pick("segment_bytes", self.segment_bytes)),
            preallocate=bool(pick("preallocate", self.preallocate)),
            record_version=int(pick("record_version", self.record_version)),
            remote_storage=bool(self.remote_log_storage_system_enable and pick("remote_storage_enable", False)
                                and not pick("compact", self.compact) and topic not in NO_REMOTE_STORAGE_TOPICS),
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )

    @property
    def num_segment_loading_threads_per_data_dir(self) -> int | Literal["auto", "adaptive"]:
        """Deprecated: :attr:`segment_scan_workers_per_data_dir` (they are worker processes, not threads)."""
        warnings.warn("LoaderConfig.num_segment_loading_threads_per_data_dir is now "
                      "segment_scan_workers_per_data_dir", DeprecationWarning, stacklevel=2)
        return self.segment_scan_workers_per_data_dir

    def replace(self, **changes: Any) -> LoaderConfig:
        return dataclasses.replace(self, **_current_names(changes))
