"""A broker's own configuration against Kafka's loader: ``mploader load --config server.properties --topic-config
FILE`` leaves a generated broker of three topics, each with its own configuration, file for file as Kafka's loader
(the oracle of ../shared/kafka-oracle) leaves it given the same configuration; loaded without the topics'
configs, it does not.

Kafka loads each partition with its topic's LogConfig (``LogManager.loadLog``: ``topicConfigOverrides.getOrElse(
topic, defaultConfig)``), the topic's overrides over the broker's ``log.*`` defaults.  The oracle takes one LogConfig
per data dir, so Kafka's side is loaded a topic at a time: a copy of the data dir per topic (the same top-level
checkpoints, no clean-shutdown marker, only that topic's partition dirs), each loaded with that topic's values in
effect, written out here by hand from the files below (not by mploader's merge), then the partition dirs gathered
into one tree.

The topics (the unclean broker has no recovery-point checkpoint: every segment is recovered, every index rebuilt):

* ``orders``: ``index.interval.bytes`` 256 and ``segment.index.bytes`` 2048 (``kafka-configs --describe`` output):
  the rebuilt ``.index``/``.timeindex`` entries, and the size the active segment's indexes are resized to;
* ``payments.v1``: ``segment.bytes`` and ``preallocate`` (a ``TOPIC.NAME=value`` file).  A load uses
  ``segment.bytes`` only for a segment it creates, preallocated to that size (``LogConfig.initFileSize``; 0 without
  ``preallocate``): where a partition has no segment left (``LogLoader.recoverLog``) or an offset overflow is split
  (``LocalLog.splitOverflowedSegment``).  One of its partitions has lost its segment files, so the load creates one;
  ``preallocate`` is set to make that size observable;
* ``user-events``: no override: the broker defaults of ``server.properties`` (``log.index.interval.bytes`` 1024,
  ``log.index.size.max.bytes`` 65536), not Kafka's own (4096, 10 MiB).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mploader.cli.main import main
from mploader.format import names
from mploader.format.checkpoint import RECOVERY_POINT_CHECKPOINT
from mploader.generate import GeneratorConfig, generate
from perf.files_vs_kafka import CaseResult, compare_files, run_oracle
from perf.kafka_compare import find_oracle
from tests.crash_points import copy_tree
from tests.fingerprint import changed, tree_state

ORACLE = find_oracle(None)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(ORACLE is None, reason="Kafka's oracle (~/.cache/kafka-oracle/oracle) is not built")]

#: Three topics of two partitions, ~200-byte batches in 32 KB segments (an index entry every batch or two at 256
#: bytes, every five at 1024, every twenty at Kafka's 4096), unclean, with faults.
BROKER = GeneratorConfig(data_dirs=1, topics=3, partitions_per_topic=2, total_bytes=600_000, segment_bytes=32 * 1024,
                         batch_bytes=200, records_per_batch=2, faults=4, seed=7)
ORDERS, PAYMENTS, USER_EVENTS = "orders", "payments.v1", "user-events"
#: The partition whose segment files are removed: the load creates a segment at its log start offset.
SEGMENTLESS = f"{PAYMENTS}-1"

SERVER_DEFAULTS = "log.index.interval.bytes=1024\nlog.index.size.max.bytes=65536\nlog.segment.bytes=524288\n"
DESCRIBE_ORDERS = """\
Dynamic configs for topic orders are:
  index.interval.bytes=256 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:index.interval.bytes=256, \
STATIC_BROKER_CONFIG:log.index.interval.bytes=1024, DEFAULT_CONFIG:log.index.interval.bytes=4096}
  segment.index.bytes=2048 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.index.bytes=2048, \
STATIC_BROKER_CONFIG:log.index.size.max.bytes=65536, DEFAULT_CONFIG:log.index.size.max.bytes=10485760}
"""
PAYMENTS_PROPERTIES = "payments.v1.segment.bytes=300000\npayments.v1.preallocate=true\n"

#: Each topic's LogConfig in effect (perf/files_vs_kafka.py's KAFKA_CONFIGS names, given to the oracle as
#: ``--config index.interval.bytes=...``): its overrides over the broker defaults above.
BROKER_DEFAULTS: dict[str, Any] = {"index_interval_bytes": 1024, "max_index_size": 65536, "segment_bytes": 524288}
IN_EFFECT: dict[str, dict[str, Any]] = {
    ORDERS: {**BROKER_DEFAULTS, "index_interval_bytes": 256, "max_index_size": 2048},
    PAYMENTS: {**BROKER_DEFAULTS, "segment_bytes": 300000, "preallocate": True},
    USER_EVENTS: BROKER_DEFAULTS,
}


def _partition_dirs(data: Path) -> list[Path]:
    return sorted(p for p in data.iterdir() if p.is_dir())


def _topic(part: Path) -> str:
    return names.parse_partition_dir(part.name)[0].topic


def _pristine(root: Path) -> Path:
    """The generated broker, without its recovery-point checkpoint, :data:`SEGMENTLESS` without segment files."""
    generate(root, BROKER)
    data = root / "data-0"
    assert sorted({_topic(p) for p in _partition_dirs(data)}) == sorted(IN_EFFECT)
    (data / RECOVERY_POINT_CHECKPOINT).unlink()
    for f in (data / SEGMENTLESS).iterdir():
        if names.is_log_file(f.name) or names.is_index_file(f.name):
            f.unlink()
    return data


def _kafka_load(pristine: Path, root: Path) -> Path:
    """Kafka's loader a topic at a time (module docstring); the gathered tree."""
    assert ORACLE is not None
    tree = root / "kafka"
    tree.mkdir()
    top_levels = []
    for topic, settings in IN_EFFECT.items():
        copy = root / f"kafka-{topic}"
        copy_tree(pristine, copy)
        for part in _partition_dirs(copy):
            if _topic(part) != topic:
                shutil.rmtree(part)
        kafka = run_oracle(ORACLE, copy, 1, root / f"oracle-{topic}", settings)
        assert kafka.outcome() == "loaded", (topic, kafka.errors, kafka.reported_offline)
        for part in _partition_dirs(copy):
            part.rename(tree / part.name)
        top_levels.append(tree_state(copy))
        for f in copy.iterdir():
            if not (tree / f.name).exists():
                f.rename(tree / f.name)
    assert top_levels[0] == top_levels[1] == top_levels[2]  # the same checkpoints, .lock, no marker
    return tree


@dataclass(frozen=True)
class Loaded:
    """The pristine broker, Kafka's load of it, and the files and settings mploader's loads are given."""

    pristine: Path
    kafka: Path
    server: Path  # server.properties: the broker defaults; log.dirs = ``log_dirs``
    log_dirs: Path  # where the load that takes its data dir from server.properties finds it
    describe: Path  # orders' overrides, kafka-configs --describe's output
    properties: Path  # payments.v1's, TOPIC.NAME=value

    def mploader(self, copy: Path, argv: list[str]) -> list[str]:
        """``mploader load`` (in this process) of a copy of the pristine broker at ``copy``; what differs from
        Kafka's load, file by file (``compare_files``: Kafka's pending ``*.deleted`` files count as absent)."""
        copy_tree(self.pristine, copy)
        rc = main(["load", *argv, "--no-progress"])
        assert rc in (0, 4), rc  # 4: acknowledged records lost (the faults' truncations), the load done all the same
        result = CaseResult("topic-configs", copy.name, "")
        compare_files(self.kafka, copy, result, tree_state(self.pristine))
        return [d.line() for d in result.file_diffs]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    root = tmp_path_factory.mktemp("topic-configs")
    pristine = _pristine(root / "pristine")
    kafka = _kafka_load(pristine, root)
    server, describe, properties = root / "server.properties", root / "orders.describe", root / "payments.properties"
    log_dirs = root / "with-configs"
    server.write_text(f"log.dirs={log_dirs}\n{SERVER_DEFAULTS}")
    describe.write_text(DESCRIBE_ORDERS)
    properties.write_text(PAYMENTS_PROPERTIES)
    return Loaded(pristine, kafka, server, log_dirs, describe, properties)


def test_kafka_load_did_what_each_topic_config_shapes(loaded: Loaded) -> None:
    """orders' indexes rebuilt, and a segment created for the segment-less partition, preallocated to payments.v1's
    ``segment.bytes``."""
    assert changed(tree_state(loaded.pristine / "orders-0"), tree_state(loaded.kafka / "orders-0"))
    [created] = (loaded.kafka / SEGMENTLESS).glob("*" + names.LOG_SUFFIX)
    assert created.stat().st_size == IN_EFFECT[PAYMENTS]["segment_bytes"]


def test_load_with_the_brokers_configuration_is_kafkas(loaded: Loaded) -> None:
    """No DIR named: the data dir is server.properties' ``log.dirs``."""
    argv = ["--config", str(loaded.server), "--topic-config", str(loaded.describe), "--topic-config",
            str(loaded.properties)]
    assert loaded.mploader(loaded.log_dirs, argv) == []


def test_load_without_the_topics_configs_differs(loaded: Loaded, tmp_path: Path) -> None:
    """Every topic with the broker defaults: orders' rebuilt indexes and their size, the created segment empty."""
    differing = loaded.mploader(tmp_path / "data", [str(tmp_path / "data"), "--config", str(loaded.server)])
    assert {d.split("/")[0] for d in differing} == {"orders-0", "orders-1", SEGMENTLESS}, differing
    assert any(d.startswith("orders-0/") and d.split(":")[0].endswith(names.INDEX_SUFFIX) for d in differing)
    assert any(d.startswith(f"{SEGMENTLESS}/") and "Kafka 300,000 B, mploader 0 B" in d for d in differing)


def test_load_without_the_broker_defaults_differs(loaded: Loaded, tmp_path: Path) -> None:
    """The topics' overrides over Kafka's defaults: the topics that take a broker default differ (an entry every
    4096 bytes, 10 MiB active indexes: the created segment's too), orders, whose overrides set both, does not."""
    argv = [str(tmp_path / "data"), "--topic-config", str(loaded.describe), "--topic-config", str(loaded.properties)]
    differing = loaded.mploader(tmp_path / "data", argv)
    assert {d.split("/")[0] for d in differing} == {f"{PAYMENTS}-0", SEGMENTLESS, f"{USER_EVENTS}-0",
                                                    f"{USER_EVENTS}-1"}, differing
