"""File for file: mploader against Kafka's own loader (the oracle of ../shared/kafka-oracle), on generated
brokers with faults, on the real corpus and on every load of the scenario tests.

    .venv/bin/python perf/files_vs_kafka.py [--families all] [--seeds 1-10] [--quick] [--oracle PATH]
        [--workers 1] [--partition-workers 0] [--kafka-threads 1] [--start-ms MS] [--only PARTITION,...]
        [--corpus-filter TEXT] [--tests PYTEST-ARGS] [--work DIR] [--keep] [--json-out F] [-v]

Each case is one data dir, made once (the "pristine" copy) and copied twice (sparse files kept sparse): Kafka's
``oracle datadir COPY --threads N`` loads one copy, ``mploader.load_logs`` (in this process, Phase 1 inline
with ``--workers 1``, one recovery thread, no ``now_ms``: the real clock, as the oracle's ``Time.SYSTEM``; with
``--partition-workers N``, whole partitions in N worker processes, the path ``auto`` takes on a big broker) the
other.  Then it compares:

* every file and directory under the data dir, by size and content (tests/fingerprint.py: holes read as zeros),
  top-level files included (both create the empty recovery-point / log-start checkpoints Kafka's
  ``OffsetCheckpointFile`` creates, take ``.lock`` and delete the clean-shutdown marker; neither writes a
  checkpoint after the load).  A differing ``.snapshot`` is decoded and the difference said in words (the same
  entries in another order, or which producers differ); another file gets its first differing byte;
* per partition, the oracle's JSON line against mploader's ``LoadResult`` (perf/kafka_compare.py's
  ``parse_kafka``, ``parse_mploader`` and ``compare``: kind, log start / end offsets, recovery point after
  ``UnifiedLog`` raised it, segments' bases and sizes, leader epochs) plus the loader's own recovery point;
* the outcome: loaded, start-up failed (``StartupFailedError`` against the oracle's ``startup_fails``) or the
  dir offline, and whether the dir had shut down cleanly.

Handled as artefacts of the comparison, not differences:

* ``*.deleted`` files in Kafka's copy: Kafka renames what it deletes and removes it ``file.delete.delay.ms``
  (60 s) later, which the oracle's halt never reaches; they are Kafka's pending deletes and count as absent
  (their number is printed).  A ``*.deleted`` file the load found (a stray-files fault) and left as it was is
  compared like any file, and so is every ``*.deleted`` file in mploader's copy (mploader deletes at once).
* The clock: both loaders expire producers (``producer.id.expiration.ms`` = 1 day) against the real clock at
  load.  The generator's default timestamps (October 2024) are all long expired, so every producer read from a
  snapshot is dropped at load; the ``fresh-*`` and ``producers-*`` families (but ``producers-old-rp0``) write
  timestamps an hour before
  ``--start-ms`` (default: the current hour) so that nothing expires and the snapshots carry every producer.
  Nothing is generated within minutes of the expiry boundary, where the two runs' clocks could disagree.
* A dir reported to Kafka's LogDirFailureChannel: LogManager takes it offline, but the oracle reports such a
  dir only where the exception reached loadLogs (``log_dir_offline``; ``ignored_log_not_loaded``, a
  KafkaStorageException whose code already reported the dir).  A malformed recovery-point or log-start
  checkpoint is reported to the channel and then swallowed (loadLogs resets it and loads everything): the
  oracle prints the channel's ERROR line on stderr, and that counts as ``log_dir_offline`` too.

Not an artefact, and compared as it is: after a start-up failure the oracle, like LogManager's pool (which
``shutdown()`` lets finish), loads every other partition of the dir; mploader raises its first failure after the
same.  A start-up failure that mploader's preflight finds changes no byte there, by design
(docs/architecture.md), while Kafka has taken ``.lock``, created the empty checkpoints and deleted the marker.

The families (``--families``, comma-separated, or ``all``):

* ``unclean``, ``unclean-rp0``, ``clean``, ``clean-nosnap``: tests/crash_points.py's ``SMALL_BROKER``
  (4 partitions of 2-4 segments, idempotent and transactional producers, leader epochs) with 8 faults: unclean
  with the recovery points as generated; unclean with the recovery-point checkpoint removed (every segment
  recovered: a damaged one cuts the log and deletes the segments after it); clean with ``CLEAN_FAULTS``; clean
  with two partitions' snapshots removed (Kafka's clean-start shortcut).
* ``fresh-unclean-rp0``, ``fresh-clean``: the same brokers with fresh timestamps (no producer expires).
* ``producers-rp0``, ``producers-unclean``, ``producers-clean``, ``producers-clean-nosnap``: brokers of many
  small batches from dozens to hundreds of producer ids per partition (the pool by seed % 6: 12, 24,
  48, 96, 200, 400 idempotent producers and a third as many transactional ones, and restarts give new ids),
  fresh timestamps, 6 faults: Java ``HashMap``s of producers past 16, 32, 64 ... 512 slots, where a
  snapshot's entry order depends on Kafka's maps.  ``producers-old-rp0``: the same with the generator's old
  timestamps (every producer a snapshot holds expires at load; only those of replayed segments remain).
  ``producers-churn-rp0``, ``producers-churn-clean``: a fifth of idempotent batches from a new producer id,
  half the transactions aborted, half ending in an epoch bump.
* ``codecs-rp0``: the small broker with compressed batches (gzip, snappy, lz4, zstd by seed, those installed),
  unclean, no recovery-point checkpoint.
* ``small-index-rp0``, ``small-index-clean``: the small broker with an offset-index entry every 256 bytes and
  1 KB offset indexes (room for 128 entries), given to the generator and to both loaders (Kafka's
  ``index.interval.bytes`` and ``segment.index.bytes`` via the oracle's ``--config``): recovery rebuilds indexes
  that fill up.  ``full-index-rp0``: the small broker as generated, loaded with ``index.interval.bytes`` 0 and
  ``segment.index.bytes`` 64, which its recovered segments overflow: the broker does not start (Kafka's
  ``startup_fails``), and the files are compared as each loader leaves them.
* ``odd-dirs``, ``odd-dirs-clean``: the small broker, unclean as generated or clean, its four partitions made
  into a ``-delete`` dir, a ``-future`` copy beside the current one, a dir without segments and a ``-stray``
  dir.
* ``odd-checkpoints``, ``odd-checkpoints-clean``: the small broker whose checkpoints give a log start offset
  and a recovery point far past the log end, and a log start offset of 0.
* ``corpus``, ``corpus-rp0``, ``corpus-unclean``: every broker data dir of the real corpus (shared/corpus/real,
  materialised with its materialize.py; the folder itself is never loaded) as given, with the recovery-point
  checkpoint removed, and (dirs that have a clean-shutdown marker only) with the marker removed too.
* ``scenarios``: every load of one data dir that the tests ``--tests`` make through tests/kafkadir.py's
  ``load`` (default: tests/scenarios, the docs/scenarios.md cases, and the other tests that load through it):
  the tests run under pytest with this module as a plugin, which compares a copy of each data dir just before
  the test's own load (the broker settings it passes given to both loaders; a load of several dirs, or with a
  setting the oracle has not, is skipped and counted).  The test's ``now_ms`` is not used: both loaders take
  the real clock.

``--only orders-0,...`` keeps only those partition dirs of each generated or corpus case: the way to reduce a
difference to one partition.

Prints a line per data dir (files, snapshots, Kafka's pending deletes, differences) with its differences
below it (the first 12) and the command that reproduces the case, then a summary by family; exit status 1 on any
difference, 0 otherwise and when the oracle is absent (then nothing is compared and it says so).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mploader.api import load_logs  # noqa: E402
from mploader.config import LoaderConfig  # noqa: E402
from mploader.errors import CorruptSnapshotError, StartupFailedError  # noqa: E402
from mploader.format import checkpoint, names  # noqa: E402
from mploader.format.checkpoint import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT  # noqa: E402
from mploader.format.compression import available_codecs  # noqa: E402
from mploader.format.snapshot import ProducerSnapshotEntry, parse_snapshot  # noqa: E402
from mploader.generate import FAULT_KINDS, GeneratorConfig, generate  # noqa: E402
from mploader.result import LoadResult  # noqa: E402
from mploader.runners import ProcessPartitions  # noqa: E402
from perf.kafka_compare import compare, find_oracle, parse_kafka, parse_mploader  # noqa: E402
from perf.trees import scratch_dir  # noqa: E402
from tests.conftest import _corpus_source, corpus_data_dirs, materialize_corpus  # noqa: E402
from tests.crash_points import CLEAN_FAULTS, SMALL_BROKER, copy_tree  # noqa: E402
from tests.fingerprint import changed, tree_state  # noqa: E402

HOUR_MS = 3_600_000
KAFKA_PENDING = names.DELETED_SUFFIX  # LogFileUtils.DELETED_FILE_SUFFIX: renamed, removed 60 s later


# ------------------------------------------------------------------------------------------------ the cases


@dataclass(frozen=True)
class Prep:
    """What is done to a data dir after it is made: the recovery-point checkpoint removed, the clean-shutdown
    marker removed, the producer snapshots of the first ``drop_snapshots`` partitions (by name) removed, the
    partitions made into other kinds of dirs (:func:`odd_dirs`), the checkpoints given odd offsets
    (:func:`odd_checkpoints`)."""

    no_recovery_points: bool = False
    no_marker: bool = False
    drop_snapshots: int = 0
    odd_dirs: bool = False
    odd_checkpoints: bool = False

    def apply(self, data: Path) -> None:
        if self.no_recovery_points:
            (data / RECOVERY_POINT_CHECKPOINT).unlink(missing_ok=True)
        if self.no_marker:
            (data / CLEAN_SHUTDOWN_MARKER).unlink(missing_ok=True)
        for part in partition_dirs(data)[:self.drop_snapshots]:
            for snap in part.glob("*" + names.SNAPSHOT_SUFFIX):
                snap.unlink()
        if self.odd_checkpoints:
            odd_checkpoints(data)
        if self.odd_dirs:
            odd_dirs(data)


def partition_dirs(data: Path) -> list[Path]:
    return sorted(p for p in data.iterdir() if p.is_dir())


def odd_dirs(data: Path) -> None:
    """The small broker's four partitions as four other cases of LogManager.loadLogs: the first marked for
    deletion (``-delete``), the second with a ``-future`` copy beside it (a replica move under way), the third
    without any segment (Kafka creates one at its log start offset), the fourth a ``-stray`` dir."""
    first, second, third, fourth = partition_dirs(data)[:4]
    first.rename(data / names.partition_dir_name(names.parse_partition_dir(first.name)[0], names.DirKind.DELETE,
                                                 uuid.UUID(int=1)))
    future = names.partition_dir_name(names.parse_partition_dir(second.name)[0], names.DirKind.FUTURE, uuid.UUID(int=2))
    copy_tree(second, data / future)
    for f in third.iterdir():
        if names.is_log_file(f.name) or names.is_index_file(f.name):
            f.unlink()
    fourth.rename(data / names.partition_dir_name(names.parse_partition_dir(fourth.name)[0], names.DirKind.STRAY,
                                                  uuid.UUID(int=4)))


def odd_checkpoints(data: Path) -> None:
    """Offsets no segment has: the first partition's log start offset and the second's recovery point far past
    the log end (2**40), the third's log start offset 0 (below its first segment when retention deleted some)."""
    parts = [names.parse_partition_dir(p.name)[0] for p in partition_dirs(data)]
    for name, changes in ((checkpoint.LOG_START_OFFSET_CHECKPOINT, {parts[0]: 2**40, parts[2]: 0}),
                          (RECOVERY_POINT_CHECKPOINT, {parts[1]: 2**40})):
        path = data / name
        offsets = checkpoint.read_offset_checkpoint(path) if path.exists() else {}
        path.write_bytes(checkpoint.offset_checkpoint_bytes({**offsets, **changes}))


def small_broker_config(seed: int, clean: bool) -> GeneratorConfig:
    """tests/crash_points.py's small broker with 8 faults (those a clean start survives when clean)."""
    return SMALL_BROKER.replace(seed=seed, clean_shutdown=clean, faults=8,
                                fault_kinds=CLEAN_FAULTS if clean else SMALL_BROKER.fault_kinds)


#: Idempotent producers per partition by seed (seed % 6): at or just past Java HashMap resize thresholds (12, 24, 48,
#: 96, 192, 384).
PRODUCER_POOLS = (12, 24, 48, 96, 200, 400)


def many_producers_config(seed: int, clean: bool) -> GeneratorConfig:
    """3 partitions of ~500 KB in 48 KB segments of ~400-byte batches: ~120 batches a segment, nearly all from
    idempotent or transactional producers drawn from a pool of ``PRODUCER_POOLS[seed % 6]`` idempotent and a
    third as many transactional ones, 1% of idempotent batches from a restarted producer (a new id)."""
    pool = PRODUCER_POOLS[seed % len(PRODUCER_POOLS)]
    return GeneratorConfig(
        data_dirs=1, topics=1, partitions_per_topic=3, total_bytes=1_500_000, segment_bytes=48 * 1024,
        batch_bytes=400, records_per_batch=2, idempotent_fraction=0.6, transactional_fraction=0.35,
        idempotent_producers=pool, transactional_producers=pool // 3 + 1, producer_restart_probability=0.01,
        max_transaction_batches=2, abort_fraction=0.3, leader_epoch_changes=2, faults=6,
        fault_kinds=CLEAN_FAULTS if clean else FAULT_KINDS, seed=seed, clean_shutdown=clean)


def producer_churn_config(seed: int, clean: bool) -> GeneratorConfig:
    """Many producers that keep changing: a fifth of idempotent batches from a restarted producer (a new id), half
    the transactions aborted and half ending in an epoch bump, up to 4 batches a transaction."""
    return many_producers_config(seed, clean).replace(producer_restart_probability=0.2, epoch_bump_probability=0.5,
                                                      abort_fraction=0.5, max_transaction_batches=4)


def codecs_config(seed: int, clean: bool) -> GeneratorConfig:
    """The small broker with compressed batches, the codec by seed among those installed here."""
    codecs = [c for c in available_codecs() if c != "none"]
    return small_broker_config(seed, clean).replace(compression=codecs[seed % len(codecs)])


#: A dense, small offset index: an entry every 256 bytes and room for 128 (a 32 KB segment needs about as many),
#: given to the generator and to both loaders (Kafka's index.interval.bytes and segment.index.bytes).
SMALL_INDEX = {"index_interval_bytes": 256, "max_index_size": 1024}
#: Given to the loaders only (the broker was written with the defaults): an index entry per batch and room for 8
#: offset entries and 4 time entries, which a recovered segment of the small broker overflows (Kafka's
#: IllegalArgumentException "Attempt to append to a full ... index": the broker does not start).
FULL_INDEX = {"index_interval_bytes": 0, "max_index_size": 64}
#: The broker settings a case may set, by LoaderConfig's (and GeneratorConfig's) names, as the oracle's --config.
KAFKA_CONFIGS: dict[str, Callable[[Any], str]] = {
    "index_interval_bytes": lambda v: f"index.interval.bytes={v}",
    "max_index_size": lambda v: f"segment.index.bytes={v}",
    "segment_bytes": lambda v: f"segment.bytes={v}",
    "preallocate": lambda v: f"preallocate={str(bool(v)).lower()}",
    "record_version": lambda v: f"message.format.version={('0.9.0', '0.10.2', '3.0')[v]}",
}


def small_index_config(seed: int, clean: bool) -> GeneratorConfig:
    return small_broker_config(seed, clean).replace(**SMALL_INDEX)


@dataclass(frozen=True)
class Generated:
    """A family of generated brokers: one per seed."""

    what: str
    config: Callable[[int, bool], GeneratorConfig]
    clean: bool
    prep: Prep = Prep()
    fresh: bool = False  # timestamps an hour before --start-ms (no producer expires) instead of October 2024
    settings: dict[str, Any] = field(default_factory=dict)  # broker settings (KAFKA_CONFIGS) for both loaders


@dataclass(frozen=True)
class Corpus:
    """A family of real corpus data dirs."""

    what: str
    prep: Prep
    only_with_marker: bool = False


FAMILIES: dict[str, Generated | Corpus] = {
    "unclean": Generated("small broker, unclean, recovery points as generated", small_broker_config, False),
    "unclean-rp0": Generated("small broker, unclean, no recovery-point checkpoint", small_broker_config, False,
                             Prep(no_recovery_points=True)),
    "clean": Generated("small broker, clean, CLEAN_FAULTS", small_broker_config, True),
    "clean-nosnap": Generated("small broker, clean, 2 partitions without snapshots", small_broker_config, True,
                              Prep(drop_snapshots=2)),
    "fresh-unclean-rp0": Generated("small broker, fresh timestamps, unclean, no recovery-point checkpoint",
                                   small_broker_config, False, Prep(no_recovery_points=True), fresh=True),
    "fresh-clean": Generated("small broker, fresh timestamps, clean, CLEAN_FAULTS", small_broker_config, True,
                             fresh=True),
    "producers-rp0": Generated("many producers, unclean, no recovery-point checkpoint", many_producers_config,
                               False, Prep(no_recovery_points=True), fresh=True),
    "producers-unclean": Generated("many producers, unclean, recovery points as generated", many_producers_config,
                                   False, fresh=True),
    "producers-old-rp0": Generated("many producers, October 2024 timestamps (all expired), unclean, no "
                                   "recovery-point checkpoint", many_producers_config, False,
                                   Prep(no_recovery_points=True)),
    "producers-churn-rp0": Generated("many changing producers, unclean, no recovery-point checkpoint",
                                     producer_churn_config, False, Prep(no_recovery_points=True), fresh=True),
    "producers-churn-clean": Generated("many changing producers, clean, CLEAN_FAULTS", producer_churn_config, True,
                                       fresh=True),
    "producers-clean": Generated("many producers, clean, CLEAN_FAULTS", many_producers_config, True, fresh=True),
    "producers-clean-nosnap": Generated("many producers, clean, 2 partitions without snapshots",
                                        many_producers_config, True, Prep(drop_snapshots=2), fresh=True),
    "codecs-rp0": Generated("small broker, compressed batches, unclean, no recovery-point checkpoint",
                            codecs_config, False, Prep(no_recovery_points=True)),
    "small-index-rp0": Generated("small broker, dense 1 KB offset indexes, unclean, no recovery-point checkpoint",
                                 small_index_config, False, Prep(no_recovery_points=True), settings=SMALL_INDEX),
    "small-index-clean": Generated("small broker, dense 1 KB offset indexes, clean, CLEAN_FAULTS",
                                   small_index_config, True, settings=SMALL_INDEX),
    "full-index-rp0": Generated("small broker, unclean, no recovery-point checkpoint, loaded with indexes too small "
                                "for its segments (start-up fails)", small_broker_config, False,
                                Prep(no_recovery_points=True), settings=FULL_INDEX),
    "odd-dirs": Generated("small broker, unclean, a -delete, a -future, a -stray and a segment-less dir",
                          small_broker_config, False, Prep(odd_dirs=True)),
    "odd-dirs-clean": Generated("small broker, clean, a -delete, a -future, a -stray and a segment-less dir",
                                small_broker_config, True, Prep(odd_dirs=True)),
    "odd-checkpoints": Generated("small broker, unclean, log start and recovery point past the log end, log start 0",
                                 small_broker_config, False, Prep(odd_checkpoints=True)),
    "odd-checkpoints-clean": Generated("small broker, clean, log start and recovery point past the log end, log "
                                       "start 0", small_broker_config, True, Prep(odd_checkpoints=True)),
    "corpus": Corpus("real corpus as given", Prep()),
    "corpus-rp0": Corpus("real corpus, no recovery-point checkpoint", Prep(no_recovery_points=True)),
    "corpus-unclean": Corpus("real corpus with a marker, marker and recovery-point checkpoint removed",
                             Prep(no_recovery_points=True, no_marker=True), only_with_marker=True),
}


@dataclass(frozen=True)
class Case:
    family: str
    label: str  # "seed N" or the corpus data dir's path inside the corpus
    make: Callable[[Path], Path]  # writes the pristine data dir under the given (new) directory; returns it
    reproduce: str  # the options of this script that run this case alone
    settings: dict[str, Any] = field(default_factory=dict)  # broker settings for both loaders (KAFKA_CONFIGS)


def fresh_start_ms(start_ms: int) -> int:
    """Where fresh timestamps start: an hour before ``start_ms``, far from the one-day expiry either way."""
    return start_ms - HOUR_MS


def generated_cases(key: str, fam: Generated, seeds: list[int], start_ms: int) -> list[Case]:
    def maker(seed: int) -> Callable[[Path], Path]:
        def make(dest: Path) -> Path:
            cfg = fam.config(seed, fam.clean)
            if fam.fresh:
                cfg = cfg.replace(start_timestamp_ms=fresh_start_ms(start_ms))
            generate(dest, cfg)
            fam.prep.apply(dest / "data-0")
            return dest / "data-0"
        return make

    extra = f" --start-ms {start_ms}" if fam.fresh else ""
    return [Case(key, f"seed {s}", maker(s), f"--families {key} --seeds {s}{extra}", fam.settings) for s in seeds]


def corpus_cases(key: str, fam: Corpus, corpus: Path, text: str | None) -> list[Case]:
    def maker(src: Path) -> Callable[[Path], Path]:
        def make(dest: Path) -> Path:
            dest.mkdir(parents=True)
            copy_tree(src, dest / src.name)
            fam.prep.apply(dest / src.name)
            return dest / src.name
        return make

    cases = []
    for d in corpus_data_dirs(corpus):
        rel = d.relative_to(corpus).as_posix()
        if text is not None and text not in rel or fam.only_with_marker and not (d / CLEAN_SHUTDOWN_MARKER).exists():
            continue
        cases.append(Case(key, rel, maker(d), f"--families {key} --corpus-filter {rel}"))
    return cases


# ------------------------------------------------------------------------------------------------ comparing


@dataclass
class FileDiff:
    path: str  # inside the data dir
    kafka_size: int | None  # None: absent (-1: a directory)
    mploader_size: int | None
    detail: str

    def line(self) -> str:
        def side(size: int | None) -> str:
            return "absent" if size is None else "dir" if size < 0 else f"{size:,} B"
        return f"{self.path}: Kafka {side(self.kafka_size)}, mploader {side(self.mploader_size)}" + (
            f"; {self.detail}" if self.detail else "")


@dataclass
class CaseResult:
    family: str
    label: str
    reproduce: str
    seconds: float = 0.0
    files: int = 0  # regular files in Kafka's copy, its pending deletes left out
    snapshots: int = 0
    kafka_pending_deletes: int = 0
    kafka_outcome: str = ""
    mploader_outcome: str = ""
    file_diffs: list[FileDiff] = field(default_factory=list)
    result_diffs: list[str] = field(default_factory=list)  # the JSON lines against LoadResult, the outcome

    @property
    def differs(self) -> bool:
        return bool(self.file_diffs or self.result_diffs)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "differs": self.differs}


def first_byte_difference(a: bytes, b: bytes) -> str:
    n = min(len(a), len(b))
    at = next((i for i in range(n) if a[i] != b[i]), None)
    if at is None:
        return f"one is a prefix of the other ({n:,} B in common)"
    return f"first difference at byte {at:,} (Kafka {a[at]:#04x}, mploader {b[at]:#04x})"


def snapshot_difference(a: bytes, b: bytes) -> str:
    """A differing producer snapshot in words: the same entries in another order, or which producers differ."""
    try:
        ka, mp = parse_snapshot(a, "Kafka's"), parse_snapshot(b, "mploader's")
    except CorruptSnapshotError as e:
        return f"unreadable: {e}; {first_byte_difference(a, b)}"
    if sorted(ka, key=_entry_key) == sorted(mp, key=_entry_key):
        at = next(i for i, (x, y) in enumerate(zip(ka, mp, strict=True)) if x != y)
        return (f"the same {len(ka)} entries in another order, from entry {at}: Kafka producer {ka[at].producer_id}, "
                f"mploader producer {mp[at].producer_id}")
    by_k, by_m = {e.producer_id: e for e in ka}, {e.producer_id: e for e in mp}
    parts = [f"{len(ka)} against {len(mp)} entries"]
    if by_k.keys() - by_m.keys():
        parts.append(f"producers only in Kafka's {sorted(by_k.keys() - by_m.keys())[:6]}")
    if by_m.keys() - by_k.keys():
        parts.append(f"producers only in mploader's {sorted(by_m.keys() - by_k.keys())[:6]}")
    changed = [pid for pid in sorted(by_k.keys() & by_m.keys()) if by_k[pid] != by_m[pid]]
    if changed:
        pid = changed[0]
        parts.append(f"{len(changed)} producers differ, first {pid}: Kafka {_fields(by_k[pid])} / mploader "
                     f"{_fields(by_m[pid])}")
    return "; ".join(parts)


def _entry_key(e: ProducerSnapshotEntry) -> tuple[int, ...]:
    return dataclasses.astuple(e)


def _fields(e: ProducerSnapshotEntry) -> str:
    return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(e).items() if k != "producer_id")


def file_difference(kafka: Path, mploader: Path) -> str:
    if kafka.is_dir() or mploader.is_dir():
        return ""
    a, b = kafka.read_bytes(), mploader.read_bytes()
    return snapshot_difference(a, b) if kafka.name.endswith(names.SNAPSHOT_SUFFIX) else first_byte_difference(a, b)


def compare_files(kafka_dir: Path, mploader_dir: Path, result: CaseResult,
                  pristine: dict[str, tuple[int, str]] | None = None) -> None:
    """Every file and directory of the two copies.  Kafka's ``*.deleted`` files are its pending deletes, except
    those the load found as they are (``pristine``: the tree before the load): Kafka deletes a ``*.deleted``
    file it finds at once, so one left in place is compared like any file."""
    ks, ms = tree_state(kafka_dir), tree_state(mploader_dir)
    before = pristine or {}
    pending = {p for p, v in ks.items() if p.endswith(KAFKA_PENDING) and before.get(p) != v}
    ks = {p: v for p, v in ks.items() if p not in pending}
    result.kafka_pending_deletes = len(pending)
    result.files = sum(1 for size, _ in ks.values() if size >= 0)
    result.snapshots = sum(1 for p in ks if p.endswith(names.SNAPSHOT_SUFFIX))
    for p in changed(ks, ms):
        k, m = ks.get(p), ms.get(p)
        detail = file_difference(kafka_dir / p, mploader_dir / p) if k and m else ""
        result.file_diffs.append(FileDiff(p, None if k is None else k[0], None if m is None else m[0], detail))


@dataclass
class Kafka:
    """What the oracle printed: its partitions (perf/kafka_compare.py's form), error lines, summary."""

    partitions: dict[str, dict[str, Any]]
    loader_recovery_points: dict[str, int]
    errors: list[dict[str, Any]]
    summary: dict[str, Any]
    reported_offline: str | None  # the first LogDirFailureChannel error line of the oracle's log, if any

    @classmethod
    def parse(cls, text: str, log: str) -> Kafka:
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        errors = [o for o in lines if o["type"] == "error"]
        loaded = "\n".join(json.dumps(o) for o in lines if o["type"] != "error")
        partitions, summary = parse_kafka(loaded)
        rps = {os.path.basename(o["dir"]): o["recovery_point"] for o in lines if o["type"] == "partition"}
        offline = next((line for line in log.splitlines() if FAILURE_CHANNEL in line), None)
        return cls(partitions, rps, errors, summary, offline)

    def outcome(self) -> str:
        """``startup_fails`` (any partition's), else ``log_dir_offline``: an IOException, or a KafkaStorageException
        caused by one (the oracle's ``ignored_log_not_loaded``: LogManager ignores it because the code that raised
        it has already reported the dir to the LogDirFailureChannel), or a report to the channel that LogManager
        survived (a malformed recovery-point or log-start checkpoint: loadLogs resets it to empty and goes on, the
        dir is offline all the same), else ``loaded``."""
        handlings = {e["kafka_handling"] for e in self.errors}
        if "startup_fails" in handlings:
            return "startup_fails"
        return "log_dir_offline" if handlings or self.reported_offline else "loaded"


#: How the oracle's log (stderr, at its default level or finer) shows a dir reported to the LogDirFailureChannel.
FAILURE_CHANNEL = "ERROR org.apache.kafka.storage.internals.log.LogDirFailureChannel"


def run_oracle(oracle: str, data: Path, threads: int, out: Path, settings: dict[str, Any]) -> Kafka:
    """The oracle on ``data``; its stdout and stderr are kept beside the copy (``out``.stdout, ``out``.stderr)."""
    configs = [arg for k, v in settings.items() for arg in ("--config", KAFKA_CONFIGS[k](v))]
    proc = subprocess.run([oracle, "datadir", str(data), "--threads", str(threads), *configs], capture_output=True,
                          text=True)
    out.with_suffix(".stdout").write_text(proc.stdout)
    out.with_suffix(".stderr").write_text(proc.stderr)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise RuntimeError(f"the oracle exited {proc.returncode}: {proc.stderr[-2000:]}")
    return Kafka.parse(proc.stdout, proc.stderr)


def run_mploader(data: Path, workers: int, settings: dict[str, Any],
                 partition_workers: int = 0) -> tuple[LoadResult | None, str]:
    """mploader on ``data`` (real clock); its result and outcome in the oracle's words, or None and the error.
    ``partition_workers``: whole partitions loaded in that many worker processes (0: in this one)."""
    config = LoaderConfig(num_recovery_threads_per_data_dir=1,
                          segment_scan_workers_per_data_dir=workers).replace(**settings)
    runner = ProcessPartitions(partition_workers) if partition_workers else None
    try:
        result = load_logs([str(data)], config, partitions=runner)
    except StartupFailedError as e:
        return None, f"startup_fails ({e})"
    except Exception as e:  # noqa: BLE001 - anything else mploader raises is a difference to report
        return None, f"raised {type(e).__name__}: {e}"
    return result, "log_dir_offline" if result.offline_dirs else "loaded"


def compare_results(kafka: Kafka, mploader: LoadResult | None, mploader_outcome: str, data: str,
                    result: CaseResult) -> None:
    """The outcome, the clean-shutdown flag, and per partition the oracle's line against the LoadResult."""
    result.kafka_outcome, result.mploader_outcome = kafka.outcome(), mploader_outcome
    if result.kafka_outcome != mploader_outcome.split(" (")[0]:
        first = kafka.errors[0]["message"][:300] if kafka.errors else (kafka.reported_offline or "")[:300]
        result.result_diffs.append(f"outcome: Kafka {result.kafka_outcome} {first} / mploader {mploader_outcome}")
    if mploader is None:
        return
    if "clean_shutdown" in kafka.summary and kafka.summary["clean_shutdown"] != mploader.clean_shutdown.get(data):
        result.result_diffs.append(f"clean shutdown: Kafka {kafka.summary['clean_shutdown']} / mploader "
                                   f"{mploader.clean_shutdown.get(data)}")
    doc = {**mploader.to_json(), "offline_dirs": {}}
    got, _ = parse_mploader(json.dumps(doc))
    for lg in mploader.all_logs():
        got[os.path.basename(lg.dir)]["loader_recovery_point"] = lg.loader_recovery_point
    ref = {name: {**p, "loader_recovery_point": kafka.loader_recovery_points[name]}
           for name, p in kafka.partitions.items()}
    failed = {os.path.basename(e["dir"]) for e in kafka.errors}
    result.result_diffs += compare(ref, {n: p for n, p in got.items() if n not in failed}, max_lines=20)


def run_case(case: Case, oracle: str, root: Path, *, workers: int = 1, kafka_threads: int = 1,
             only: list[str] | None = None, partition_workers: int = 0) -> CaseResult:
    """Make the case's data dir under ``root`` (a new directory), load a copy with each loader, compare.
    ``only``: the partition dirs kept (by name; the others are removed before the copies: a reduction)."""
    t0 = time.perf_counter()
    result = CaseResult(case.family, case.label, case.reproduce + (f" --only {','.join(only)}" if only else ""))
    data = case.make(root / "pristine")
    if only is not None:
        for part in partition_dirs(data):
            if part.name not in only:
                shutil.rmtree(part)
    compare_dir(data, root, oracle, case.settings, result, workers=workers, kafka_threads=kafka_threads,
                partition_workers=partition_workers)
    result.seconds = time.perf_counter() - t0
    return result


def compare_dir(data: Path, root: Path, oracle: str, settings: dict[str, Any], result: CaseResult, *,
                workers: int = 1, kafka_threads: int = 1, partition_workers: int = 0) -> None:
    """Copy the data dir ``data`` to ``root``/kafka and ``root``/mploader, load each with its loader (``settings``:
    the broker settings of both), compare into ``result``."""
    kafka_dir, mploader_dir = root / "kafka", root / "mploader"
    copy_tree(data, kafka_dir)
    copy_tree(data, mploader_dir)
    kafka = run_oracle(oracle, kafka_dir, kafka_threads, root / "oracle", settings)
    mp, outcome = run_mploader(mploader_dir, workers, settings, partition_workers)
    compare_results(kafka, mp, outcome, str(mploader_dir), result)
    compare_files(kafka_dir, mploader_dir, result, tree_state(data))


# ------------------------------------------------------------- the scenario tests' loads (a pytest plugin)

#: Set (JSON: oracle, work dir, output file, keep) in the environment of the pytest run that this module, loaded
#: as a plugin (``-p perf.files_vs_kafka``), turns into a comparison of every load of tests/kafkadir.py's ``load``.
SCENARIO_ENV = "FILES_VS_KAFKA_SCENARIOS"
SCENARIOS = "scenarios"  # the family of the scenario tests' loads
#: The tests that load through tests/kafkadir.py's ``load``: docs/scenarios.md's, the review findings, splits.
SCENARIO_TESTS = ("tests/scenarios tests/test_review_divergences.py tests/test_snapshot_tree_bin_order.py "
                  "tests/test_snappy.py tests/test_split.py")
#: kafkadir.load's own keywords: not broker settings.
_LOAD_KEYWORDS = ("now_ms", "metrics", "dry_run_first")


def pytest_configure(config: Any) -> None:
    """As a plugin of a run of the scenario tests: before every ``tests.kafkadir.load`` of one data dir, compare a
    copy of it loaded by Kafka with a copy loaded by mploader, and append the case to the output file as a JSON
    line; then the test's own load runs as it would."""
    spec = os.environ.get(SCENARIO_ENV)
    if not spec:
        return
    import tests.kafkadir as kafkadir

    job = json.loads(spec)
    original = kafkadir.load
    calls = collections.Counter[str]()

    def load(dirs: Any, **kw: Any) -> Any:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
        calls[test] += 1
        line = {"test": test, "load": calls[test]}
        settings = {"index_interval_bytes": kafkadir.I, "max_index_size": kafkadir.X,
                    **{k: v for k, v in kw.items() if k not in _LOAD_KEYWORDS}}
        paths = [dirs] if isinstance(dirs, (str, os.PathLike)) else list(dirs)
        unsupported = sorted(k for k in settings if k not in KAFKA_CONFIGS)
        if len(paths) != 1 or not os.path.isdir(paths[0]) or unsupported:
            line["skipped"] = (f"settings the oracle has not: {unsupported}" if unsupported else
                               f"{len(paths)} data dirs (the oracle loads one)" if len(paths) != 1 else "no data dir")
        else:
            where = Path(job["work"]) / f"{len(calls)}-{calls[test]}"
            where.mkdir(parents=True)
            result = CaseResult("scenarios", f"{test} load {calls[test]}", f"--families scenarios --tests '{test}'")
            t0 = time.perf_counter()
            compare_dir(Path(paths[0]), where, job["oracle"], settings, result)
            result.seconds = time.perf_counter() - t0
            line["result"] = result.to_json()
            if not job["keep"]:
                shutil.rmtree(where)
        with open(job["out"], "a") as f:
            f.write(json.dumps(line) + "\n")
        return original(dirs, **kw)

    kafkadir.load = load


def scenario_results(oracle: str, tests: str, root: Path, keep: bool) -> tuple[list[CaseResult], str]:
    """Run the scenario tests ``tests`` (pytest arguments) with this module as a plugin; the cases it compared,
    and a line on what it skipped and how the tests ended."""
    out = root / "scenarios.jsonl"
    env = {**os.environ, SCENARIO_ENV: json.dumps({"oracle": oracle, "work": str(root / "scenarios"),
                                                   "out": str(out), "keep": keep})}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "perf.files_vs_kafka", "-p", "no:cacheprovider",
                           *tests.split()], cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True,
                          text=True)
    lines = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    results = [case_result(x["result"]) for x in lines if "result" in x]
    skipped = collections.Counter(x["skipped"] for x in lines if "skipped" in x)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else f"pytest exited {proc.returncode}"
    return results, (f"scenario tests: {len(lines)} loads, {len(results)} compared, skipped: {dict(skipped)}; "
                     f"pytest: {tail}")


def case_result(doc: dict[str, Any]) -> CaseResult:
    fields = {k: v for k, v in doc.items() if k not in ("differs", "file_diffs")}
    return CaseResult(**fields, file_diffs=[FileDiff(**d) for d in doc["file_diffs"]])


# ------------------------------------------------------------------------------------------------ main


def parse_seeds(text: str) -> list[int]:
    """``1-10``, ``3`` or ``1,4,7-9``."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += range(int(lo), int(hi or lo) + 1)
    return seeds


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="all",
                    help=f"comma-separated, or all: {', '.join([*FAMILIES, SCENARIOS])}")
    ap.add_argument("--seeds", default="1-10", help="seeds of the generated families: 1-10, 3, 1,4,7-9")
    ap.add_argument("--quick", action="store_true",
                    help="seeds 1-2 and, of the corpus, the dirs as given only (the scenario tests run whole)")
    ap.add_argument("--oracle", help="Kafka oracle launcher (default: $KAFKA_ORACLE, ~/.cache/kafka-oracle/oracle)")
    ap.add_argument("--workers", type=int, default=1, help="mploader's Phase 1 workers per data dir (1: inline)")
    ap.add_argument("--partition-workers", type=int, default=0,
                    help="load whole partitions in this many worker processes (mploader.runners.processes; 0: in "
                         "this process, the default), as `mploader load --partition-workers N` does")
    ap.add_argument("--kafka-threads", type=int, default=1, help="the oracle's num.recovery.threads.per.data.dir")
    ap.add_argument("--start-ms", type=int, default=None,
                    help="fresh timestamps start an hour before this (default: the current hour, in ms); pass "
                         "the printed value to reproduce a fresh case within a day")
    ap.add_argument("--only", type=lambda t: t.split(","), help="keep only these partition dirs (comma-separated "
                    "names) of each case: to reduce a difference to one partition")
    ap.add_argument("--tests", default=SCENARIO_TESTS, help="the tests whose loads the scenarios family compares "
                    "(pytest arguments, e.g. a node id; default: %(default)s)")
    ap.add_argument("--corpus-filter", help="only corpus data dirs whose path inside the corpus contains this")
    ap.add_argument("--work", type=Path, help="where the scratch directory goes (default: the system's temporary "
                    "directory)")
    ap.add_argument("--keep", action="store_true", help="keep every case's copies (pristine, kafka, mploader, the "
                    "oracle's output) and print where")
    ap.add_argument("--json-out", type=Path, help="also write every case's figures and differences here")
    ap.add_argument("-v", "--verbose", action="store_true", help="let mploader's warnings through")
    return ap


def family_keys(text: str) -> list[str]:
    """The families asked for (``all``: every one, the scenario tests last); an unknown one is a usage error."""
    keys = [*FAMILIES, SCENARIOS] if text == "all" else text.split(",")
    unknown = [k for k in keys if k not in FAMILIES and k != SCENARIOS]
    if unknown:
        raise ValueError(f"unknown families {unknown}; known: {', '.join([*FAMILIES, SCENARIOS])}")
    return keys


def select_cases(args: argparse.Namespace, keys: list[str], start_ms: int, root: Path) -> list[Case]:
    seeds = [1, 2] if args.quick else parse_seeds(args.seeds)
    cases: list[Case] = []
    corpus: Path | None = None
    for key in keys:
        if key == SCENARIOS:
            continue
        fam = FAMILIES[key]
        if isinstance(fam, Generated):
            cases += generated_cases(key, fam, seeds, start_ms)
            continue
        if args.quick and key != "corpus":
            continue
        if corpus is None:
            source = _corpus_source()
            if source is None:
                print(f"{key}: the real corpus (shared/corpus/real) is not here: skipped", flush=True)
                continue
            corpus = materialize_corpus(source, root / "corpus")
        cases += corpus_cases(key, fam, corpus, args.corpus_filter)
    return cases


def report_case(r: CaseResult, index: int, total: int) -> None:
    pending = f", {r.kafka_pending_deletes} pending deletes in Kafka's" if r.kafka_pending_deletes else ""
    outcome = "" if r.kafka_outcome == "loaded" else f", Kafka: {r.kafka_outcome}"
    verdict = f"{len(r.file_diffs)} files differ, {len(r.result_diffs)} other differences" if r.differs else "same"
    print(f"[{index}/{total}] {r.family} {r.label}: {r.files} files, {r.snapshots} snapshots{pending}{outcome}: "
          f"{verdict} ({r.seconds:.1f} s)", flush=True)
    for d in r.file_diffs[:12]:
        print(f"    DIFF {d.line()}", flush=True)
    if len(r.file_diffs) > 12:
        print(f"    ... and {len(r.file_diffs) - 12} more files", flush=True)
    for line in r.result_diffs:
        print(f"    DIFF {line}", flush=True)
    if r.differs:
        print(f"    reproduce: .venv/bin/python perf/files_vs_kafka.py {r.reproduce} --keep", flush=True)


def summary(results: list[CaseResult]) -> list[str]:
    by_family: dict[str, list[CaseResult]] = collections.defaultdict(list)
    for r in results:
        by_family[r.family].append(r)
    lines = ["| family | data dirs | files | snapshots | Kafka's pending deletes | dirs differing | files differing |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for fam, rs in [*by_family.items(), ("all", results)]:
        lines.append(f"| {fam} | {len(rs)} | {sum(r.files for r in rs):,} | {sum(r.snapshots for r in rs):,} | "
                     f"{sum(r.kafka_pending_deletes for r in rs):,} | {sum(r.differs for r in rs)} | "
                     f"{sum(len(r.file_diffs) for r in rs)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        keys = family_keys(args.families)
    except ValueError as e:
        parser.error(str(e))
    oracle = find_oracle(args.oracle)
    if oracle is None:
        print("files_vs_kafka: SKIPPED, nothing compared: Kafka's oracle is not here (set KAFKA_ORACLE or --oracle, "
              "or build it with ../shared/kafka-oracle/build.sh)", flush=True)
        return 0
    if not args.verbose:
        logging.getLogger("mploader").setLevel(logging.ERROR)
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000) // HOUR_MS * HOUR_MS
    cmd = " ".join(["perf/files_vs_kafka.py", *(argv if argv is not None else sys.argv[1:])])
    print(f"`{cmd}`, {time.strftime('%Y-%m-%d %H:%M')}; oracle {oracle}; --start-ms {start_ms}", flush=True)
    t0 = time.perf_counter()
    results: list[CaseResult] = []
    with scratch_dir("mploader-files-vs-kafka-", args.work, args.keep) as root:
        cases = select_cases(args, keys, start_ms, root)
        for i, case in enumerate(cases, start=1):
            where = root / f"{case.family}-{i}"
            where.mkdir()
            results.append(run_case(case, oracle, where, workers=args.workers, kafka_threads=args.kafka_threads,
                                    only=args.only, partition_workers=args.partition_workers))
            report_case(results[-1], i, len(cases))
            if not args.keep:
                shutil.rmtree(where)
        if SCENARIOS in keys:
            print(f"scenarios: running {args.tests} with every load compared ...", flush=True)
            compared, note = scenario_results(oracle, args.tests, root, args.keep)
            for i, r in enumerate(compared, start=1):
                report_case(r, i, len(compared))
            print(note, flush=True)
            results += compared
    table = summary(results)
    print("\n" + "\n".join(table), flush=True)
    differing = sum(r.differs for r in results)
    print(f"\n{len(results)} data dirs compared in {time.perf_counter() - t0:.0f} s: "
          + (f"!!! {differing} DIFFER !!!" if differing else "no difference"), flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"command": cmd, "oracle": oracle, "start_ms": start_ms,
                                             "cases": [r.to_json() for r in results], "summary": table}, indent=1))
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
