"""The whole broker: :func:`generate` writes realistic Kafka data dirs, injects faults, writes the manifest.

Why it exists: mploader must leave exactly what Kafka's own start-up leaves, on anything from a
few kilobytes (tests) to tens of gigabytes (perf).  Real broker data with a known ground truth is
rare, so :func:`generate` writes what a Kafka 3.x/4.x broker leaves on disk -- several data dirs,
rolled segments with trimmed indexes, idempotent and transactional producers, commit/abort
markers and ``.txnindex`` entries, changing leader epochs, producer snapshots, checkpoints -- ends
it cleanly or uncleanly, injects faults from a seed, and records in ``manifest.jsonl`` where every
batch is and where valid data ends after each fault.

Everything streams: one partition at a time is written (:mod:`mploader.generate.writer`) and
damaged (:mod:`mploader.generate.faults`); this module holds the broker-wide part around them:
data dirs, ``meta.properties``, the offset checkpoints, the clean-shutdown marker.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import random
import shutil
import time
from pathlib import Path

from mploader.format import checkpoint, names
from mploader.generate.config import Fault, GenerateSummary, GeneratorConfig
from mploader.generate.faults import _FaultInjector
from mploader.generate.files import _write_file
from mploader.generate.manifest import (
    BATCH_FIELDS,
    MANIFEST_FORMAT,
    MANIFEST_JSON,
    MANIFEST_LINES,
    MANIFEST_VERSION,
    _is_generator_output,
    _Manifest,
)
from mploader.generate.progress import Callback
from mploader.generate.templates import _build_templates
from mploader.generate.writer import _PartitionWriter

logger = logging.getLogger(__name__)

TOPIC_NAMES = (
    "orders", "payments.v1", "user-events", "clickstream_raw", "inventory", "audit.log",
    "sensor-readings", "notifications", "billing_invoices", "search.queries", "shipments", "metrics-1m",
)


class _Generator:
    def __init__(self, out_dir: Path, cfg: GeneratorConfig, callback: Callback) -> None:
        self.out_dir = out_dir
        self.cfg = cfg
        self.callback = callback
        self.rng = random.Random(f"{cfg.seed}:broker")
        self.templates, weights = _build_templates(cfg, random.Random(f"{cfg.seed}:records"))
        # draw a template with one random(): a table holding each template in proportion to its weight
        self.template_table = [t for t, w in zip(self.templates, weights) for _ in range(round(w * 1000))]
        self.mean_batch_size = sum(t.size for t in self.template_table) / len(self.template_table)
        self.manifest = _Manifest(out_dir)
        self.segments = 0
        self.batches = 0
        self.records = 0
        self.log_bytes = 0
        self.faults: list[Fault] = []
        self.dir_names = [f"data-{i}" for i in range(cfg.data_dirs)]
        self.dir_offsets: dict[str, dict[str, dict[names.TopicPartition, int]]] = {
            d: {"recovery": {}, "log_start": {}, "replication": {}} for d in self.dir_names
        }
        self.fault_rng = random.Random(f"{cfg.seed}:faults")

    def progress(self, n: int) -> None:
        self.callback.relative_update(n)

    def partition_done(self, pw: _PartitionWriter, log_start: int, recovery_point: int, high_watermark: int) -> None:
        offsets = self.dir_offsets[pw.dir_name]
        offsets["recovery"][pw.tp] = recovery_point
        offsets["replication"][pw.tp] = high_watermark
        if log_start > pw.first_base:  # LogManager writes only log start offsets above the first base
            offsets["log_start"][pw.tp] = log_start
        self.batches += pw.batches
        self.records += pw.records
        self.log_bytes += pw.written

    def run(self) -> None:
        cfg = self.cfg
        rng = self.rng
        topics = [TOPIC_NAMES[i] if i < len(TOPIC_NAMES) else f"topic-{i}" for i in range(cfg.topics)]
        topic_ids = {t: _nonzero_uuid(rng) for t in topics}
        cluster_id = _b64(_nonzero_uuid(rng))
        tps = [names.TopicPartition(t, p) for t in topics for p in range(cfg.partitions_per_topic)]
        weights = [rng.uniform(0.5, 1.5) for _ in tps]
        total_w = sum(weights)
        budgets = [int(cfg.total_bytes * w / total_w) for w in weights]
        # faults: which partition gets which, decided up front from their own random stream
        planned: dict[int, list[str]] = {}
        for _ in range(cfg.faults):
            planned.setdefault(self.fault_rng.randrange(len(tps)), []).append(self.fault_rng.choice(cfg.fault_kinds))
        self.callback.set_size(sum(budgets))
        self.topics = topics
        for d in self.dir_names:
            path = self.out_dir / d
            os.makedirs(path)
            dir_id = _b64(_nonzero_uuid(rng))
            _write_file(path / "meta.properties", _meta_properties(cfg, cluster_id, dir_id))
            self.manifest.line({"type": "data_dir", "dir": d, "cluster_id": cluster_id, "directory_id": dir_id,
                                "node_id": cfg.node_id, "clean_shutdown": cfg.clean_shutdown})
        for gi, tp in enumerate(tps):
            d = self.dir_names[gi % cfg.data_dirs]  # LogManager spreads new partitions over the dirs
            pw = _PartitionWriter(self, d, self.out_dir / d, tp, gi, budgets[gi], topic_ids[tp.topic])
            pw.write()
            if gi in planned:
                injector = _FaultInjector(self.fault_rng, pw)
                for kind in planned[gi]:
                    f = injector.inject(kind)
                    if f is not None:
                        self.faults.append(f)
                        self.manifest.line({"type": "fault", **f.to_dict()})
                        logger.info("injected %s into %s/%s: %s", f.kind, d, tp, f.detail)
        for d in self.dir_names:
            path = self.out_dir / d
            offsets = self.dir_offsets[d]
            _write_file(path / checkpoint.RECOVERY_POINT_CHECKPOINT,
                        checkpoint.offset_checkpoint_bytes(offsets["recovery"]))
            _write_file(path / checkpoint.LOG_START_OFFSET_CHECKPOINT,
                        checkpoint.offset_checkpoint_bytes(offsets["log_start"]))
            _write_file(path / checkpoint.REPLICATION_OFFSET_CHECKPOINT,
                        checkpoint.offset_checkpoint_bytes(offsets["replication"]))
            if cfg.clean_shutdown:
                _write_file(path / checkpoint.CLEAN_SHUTDOWN_MARKER,
                            checkpoint.clean_shutdown_marker_bytes(cfg.broker_epoch))
        self.manifest.close()


def _nonzero_uuid(rng: random.Random) -> bytes:
    while True:
        b = rng.randbytes(16)
        if b != bytes(16):
            return b


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


def _meta_properties(cfg: GeneratorConfig, cluster_id: str, dir_id: str) -> bytes:
    when = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(cfg.start_timestamp_ms / 1000))
    return (f"#\n#{when}\nnode.id={cfg.node_id}\ndirectory.id={dir_id}\nversion=1\n"
            f"cluster.id={cluster_id}\n").encode()


def generate(out_dir: str | os.PathLike[str], config: GeneratorConfig | None = None, *,
             callback: Callback | None = None, overwrite: bool = False) -> GenerateSummary:
    """Write a broker's data dirs under ``out_dir`` (``data-0``, ``data-1``, ...), with
    ``manifest.json`` and ``manifest.jsonl`` beside them.

    ``out_dir`` must be absent or empty; with ``overwrite=True`` an earlier output of this
    function (recognised by its ``manifest.json``) is removed first.
    """
    cfg = config or GeneratorConfig()
    callback = callback or Callback()
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{out} exists and is not empty")
        if not _is_generator_output(out):
            raise FileExistsError(f"{out} is not empty and holds no {MANIFEST_JSON} of mploader generate; "
                                  "refusing to delete it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    header = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "complete": False, "config": cfg.to_dict()}
    _write_file(out / MANIFEST_JSON, json.dumps(header, indent=1).encode())
    logger.info("generating %d partitions (%d bytes, %s shutdown) into %s", cfg.partitions, cfg.total_bytes,
                "clean" if cfg.clean_shutdown else "unclean", out)
    gen = _Generator(out, cfg, callback)
    try:
        gen.run()
    finally:
        callback.close()
    elapsed = time.perf_counter() - started
    summary = GenerateSummary(
        out_dir=str(out), data_dirs=tuple(str(out / d) for d in gen.dir_names), topics=tuple(gen.topics),
        partitions=cfg.partitions, segments=gen.segments, batches=gen.batches, records=gen.records,
        log_bytes=gen.log_bytes, clean_shutdown=cfg.clean_shutdown, faults=tuple(gen.faults), seed=cfg.seed,
        elapsed_s=elapsed, manifest=str(out / MANIFEST_JSON),
    )
    doc = {
        **header, "complete": True, "manifest_lines": MANIFEST_LINES, "batch_fields": list(BATCH_FIELDS),
        "data_dirs": list(gen.dir_names), "topics": list(gen.topics), "clean_shutdown": cfg.clean_shutdown,
        "totals": {"partitions": cfg.partitions, "segments": gen.segments, "batches": gen.batches,
                   "records": gen.records, "log_bytes": gen.log_bytes},
        "faults": [f.to_dict() for f in gen.faults],
    }
    _write_file(out / MANIFEST_JSON, json.dumps(doc, indent=1).encode())
    logger.info("generated %d segments, %d batches, %d bytes in %.1f s", gen.segments, gen.batches,
                gen.log_bytes, elapsed)
    return summary


__all__ = ["TOPIC_NAMES", "generate"]
