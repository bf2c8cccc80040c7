"""``--config server.properties`` and ``--topic-config FILE`` (``load``, ``verify``, ``spark load|verify``): the
broker's own configuration, read as the broker reads it (:mod:`mploader.broker_config`).

The data dirs are the DIRs named on the command line, else the file's ``log.dirs`` (``log.dir``); a flag given
(``--recovery-threads``, ``--index-interval-bytes``, ``--max-index-size``) overrides the file's value; a value a
broker refuses is a usage error (exit 2, Kafka's message); what a broker would warn about (an unknown ``log.*`` key)
is a warning.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mploader.broker_config import (
    BrokerConfig,
    ConfigException,
    LoaderSetup,
    PropertiesError,
    broker_config,
    loader_setup,
    merge_topic_configs,
    read_properties,
    read_topic_configs,
)
from mploader.cli.exit_codes import UsageError
from mploader.config import LoaderConfig
from mploader.errors import MetadataRecordError
from mploader.format.metadata_image import MetadataImage, read_metadata_image
from mploader.format.names import CLUSTER_METADATA_TOPIC
from mploader.manager.strays import NO_STRAYS, KraftStrayLogs, StrayLogs

log = logging.getLogger("mploader.cli")
_T = TypeVar("_T")


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", default=None,
                   help="the broker's server.properties: its data dirs (log.dirs, when no DIR is given), "
                        "num.recovery.threads.per.data.dir and its log defaults (log.index.interval.bytes, "
                        "log.index.size.max.bytes, log.segment.bytes, log.preallocate, ...: docs/cli.md); a flag "
                        "given overrides the file's value")
    p.add_argument("--topic-config", action="append", default=[], dest="topic_configs", metavar="FILE",
                   help="topics' own configs (index.interval.bytes, segment.index.bytes, ...), over the broker's "
                        "defaults: kafka-configs.sh --describe --entity-type topics output (--all or not), or "
                        "TOPIC.NAME=value lines (TOPIC/NAME=value where a topic name ends like a config name); "
                        "repeat for more files, a later file's value winning")


@dataclass(frozen=True, slots=True)
class CommandSetup:
    """The broker's configuration as a command uses it: the load's (:class:`LoaderSetup`), the stray logs its
    metadata image says (a KRaft broker's; none otherwise), and what a broker would warn about."""

    loader: LoaderSetup
    strays: StrayLogs = NO_STRAYS
    image_warnings: tuple[str, ...] = ()

    @property
    def config(self) -> LoaderConfig:
        return self.loader.config

    @property
    def data_dirs(self) -> list[str]:
        return self.loader.data_dirs

    @property
    def broker(self) -> BrokerConfig:
        return self.loader.broker

    @property
    def warnings(self) -> list[str]:
        return [*self.loader.warnings, *self.image_warnings]


def config_setup(args: argparse.Namespace) -> CommandSetup:
    """The broker's configuration the command was given (Kafka's defaults without ``--config``); the data dirs from
    it when none was named (``args.dirs`` set).  A KRaft broker's (``process.roles``) metadata log, in its
    ``metadata.log.dir``, gives its topics' configs (under ``--topic-config``'s) and the stray logs
    (:mod:`mploader.manager.strays`).  :class:`UsageError` for a file that cannot be read or a value a broker
    refuses, naming the file."""
    path = args.config
    broker = _read(f"--config {path}", lambda: broker_config(read_properties(path) if path is not None else {}))
    files = [_read(f"--topic-config {f}", functools.partial(read_topic_configs, f)) for f in args.topic_configs]
    image, image_warnings = _metadata_image(broker) if path is not None and broker.kraft else (None, ())
    setup = _read(f"--topic-config {', '.join(args.topic_configs)}" if files else f"the metadata log of {path}",
                  lambda: loader_setup(broker, image_topic_configs=None if image is None else image.topic_configs,
                                       files_topic_configs=merge_topic_configs(*files)))
    if not args.dirs and args.config is not None:
        args.dirs = setup.data_dirs
    strays = NO_STRAYS if image is None else KraftStrayLogs(image, broker.node_id)
    return CommandSetup(setup, strays, image_warnings)


def _metadata_image(broker: BrokerConfig) -> tuple[MetadataImage | None, tuple[str, ...]]:
    """The metadata image in the broker's metadata log dir, as its metadata loader reads it at start-up; none (and
    a warning saying what is then not known) where there is no metadata log or no ``node.id``."""
    where = os.path.join(broker.metadata_log_dir, f"{CLUSTER_METADATA_TOPIC}-0")
    if not os.path.isdir(where):
        return None, (f"no KRaft metadata log at {where}: the topics' configs and the stray logs the cluster's "
                      f"metadata says are not known (give topic configs with --topic-config)",)
    try:
        image = read_metadata_image(where)
    except (MetadataRecordError, OSError) as e:
        raise UsageError(f"the metadata log {where}: {e}") from None
    if broker.node_id < 0:
        return image, ("node.id is not set: no log is taken for a stray (LogManager.isStrayKraftReplica needs it)",)
    return image, ()


def _read(source: str, read: Callable[[], _T]) -> _T:
    """``read()``; what a broker refuses, or a file that cannot be read, as a usage error naming ``source``."""
    try:
        return read()
    except (ConfigException, PropertiesError) as e:
        raise UsageError(f"{source}: {e}") from None
    except OSError as e:
        raise UsageError(f"{source}: cannot read {e.filename}: {e.strerror}") from None


def with_flags(cfg: LoaderConfig, args: argparse.Namespace) -> LoaderConfig:
    """The flags given over the file's values (None: not given)."""
    given = {"num_recovery_threads_per_data_dir": vars(args).get("recovery_threads"),
             "index_interval_bytes": vars(args).get("index_interval_bytes"),
             "max_index_size": vars(args).get("max_index_size")}
    return cfg.replace(**{k: v for k, v in given.items() if v is not None})


def config_warnings(setup: CommandSetup) -> list[dict[str, Any]]:
    """What a broker would warn about in its configuration, as the command's structured warnings (``option``: the
    file's)."""
    from_config = {*setup.broker.warnings, *setup.image_warnings}  # the file's own, and its metadata log's
    return [{"kind": "config", "option": "--config" if w in from_config else "--topic-config", "message": w}
            for w in setup.warnings]


def log_config_warnings(setup: CommandSetup) -> None:
    for w in setup.warnings:
        log.warning("%s", w)
