"""Record sections built once per record count and reused by every batch of that count.

Record offsets and timestamps inside a batch are deltas, so the same record bytes are valid in
every batch; a batch is only a fresh header in front of one of these sections."""

from __future__ import annotations

import random
from dataclasses import dataclass

from mploader.format import compression, records
from mploader.generate.config import GeneratorConfig


@dataclass(frozen=True, slots=True)
class _Template:
    """The records section of a batch of ``n`` records (maybe compressed); reused by every batch."""

    n: int
    payload: bytes
    size: int  # whole batch, header included
    ts_span: int  # max record timestamp delta


def _value_pool(rng: random.Random, size: int) -> bytes:
    """JSON-ish text, so that compressed batches compress like real events do."""
    words = ["click", "view", "order", "cart", "user", "session", "item", "price", "EUR", "USD", "ok", "retry",
             "mobile", "web", "eu-west-1", "us-east-2", "true", "false", "null", "checkout", "search", "login"]
    parts: list[str] = []
    n = 0
    while n < size:
        s = (f'{{"id":{rng.randint(1, 10**9)},"type":"{rng.choice(words)}","src":"{rng.choice(words)}",'
             f'"v":{rng.random():.6f},"tags":["{rng.choice(words)}","{rng.choice(words)}"]}}\n')
        parts.append(s)
        n += len(s)
    return "".join(parts).encode()[:size]


def _build_templates(cfg: GeneratorConfig, rng: random.Random) -> tuple[list[_Template], list[float]]:
    """Record sections for a few record counts, and the probability of each."""
    codec = compression.codec_id(cfg.compression)
    rpb = cfg.records_per_batch
    key_len = 8
    probe = len(records.encode_record(records.Record(rpb, rpb, b"k" * key_len, b"v" * 1000, (("trace", b"t" * 8),))))
    per_record = (cfg.batch_bytes - records.RECORD_BATCH_OVERHEAD) // rpb
    value_size = max(0, per_record - (probe - 1000))
    pool = _value_pool(rng, max(4096, 4 * value_size + 4096))
    counts = sorted({rpb, max(1, rpb // 2), max(1, rpb // 4), 1, rng.randint(1, rpb)}, reverse=True)
    templates = []
    for j, n in enumerate(counts):
        recs = []
        for i in range(n):
            start = (i * 7919 + j * 104729) % max(1, len(pool) - value_size)
            headers = (("trace", f"{i:08x}".encode()),) if j % 2 else ()
            recs.append(records.Record(i, i, f"k{(i * 31 + j) % 10**7:07d}".encode(), pool[start:start + value_size],
                                       headers))
        # keep within batch_bytes, like a producer filling batch.size
        encoded: list[bytes] = []
        room = cfg.batch_bytes - records.RECORD_BATCH_OVERHEAD
        for r in recs:
            e = records.encode_record(r)
            if encoded and len(e) > room:
                break
            encoded.append(e)
            room -= len(e)
        n = len(encoded)
        raw = b"".join(encoded)
        payload = compression.compress(codec, raw)
        templates.append(_Template(n, payload, records.RECORD_BATCH_OVERHEAD + len(payload), n - 1))
    # most batches are full; linger.ms sends the rest early
    weights = [0.7] + [0.3 / (len(templates) - 1)] * (len(templates) - 1) if len(templates) > 1 else [1.0]
    return templates, weights
