"""What an experiment's runs show, in sentences: computed, for the reader to judge.

* :func:`findings`: per group of points that differ only in mploader's choice (the worker count, "auto",
  "adaptive", ``--partition-workers``), where the knee is (the fewest workers within 5% of the fastest load),
  whether more workers made the load slower, and each other choice against the fastest fixed count; per group
  of Kafka's runs, its loader by thread count against mploader's fastest choice; per rate-limited run, the rate
  it held.  Every figure is a point's median over its rounds (:mod:`.points`);
* :func:`agreement`: whether every run of a broker (each layout and restart, on each device) loaded the same as
  the first of Kafka's runs on it (or mploader's first, without Kafka): per partition the kind, log start and
  end offsets, recovery point, segments and leader epochs.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from mploader.experiments.kafka import compare
from mploader.experiments.points import Point, points
from mploader.experiments.run import RunResult

KNEE_SHARE = 0.95  # the knee: the fewest workers reaching this share of the best speed (1 / seconds)
HURT_SHARE = 0.90  # more workers "hurt" when the most workers reach less than this share of the best speed


def _load_key(p: Point) -> tuple[Any, ...]:
    s = p.spec
    return p.place, s.data_dirs, "dry run" if s.dry_run else "recover", s.restart, s.cache


def _describe(key: tuple[Any, ...]) -> str:
    place, dirs, mode, restart, cache = key[:5]
    text = f"{place}, {dirs} data dir{'s' if dirs > 1 else ''}, {restart} restart, {mode}, {cache} cache"
    return text + (f", {key[5]} recovery thread(s)" if len(key) > 5 else "")


def _speed(p: Point) -> str:
    mb = p.spread(lambda r: r.throughput / 1e6 if r.bytes_read else None)
    return f"{p.seconds:.2f} s" + (f" ({mb.median:.0f} MB/s)" if mb is not None else "")


def _mploader_line(key: tuple[Any, ...], group: list[Point]) -> str:
    fixed = sorted((p for p in group if isinstance(p.spec.workers, int) and p.spec.partition_workers is None),
                   key=lambda p: int(p.spec.workers or 0))
    if not fixed:
        best = min(group, key=lambda p: p.seconds)
        return f"{_describe(key)}: fastest {_speed(best)} with {best.spec.choice}"
    best = min(fixed, key=lambda p: p.seconds)
    knee = next(p for p in fixed if p.seconds * KNEE_SHARE <= best.seconds)
    most = fixed[-1]
    text = (f"{_describe(key)}: fastest {_speed(best)} with {best.spec.workers} worker(s); knee at "
            f"{knee.spec.workers} (the fewest within {100 - KNEE_SHARE * 100:.0f}% of the fastest)")
    if len(fixed) > 1:
        share = best.seconds / most.seconds if most.seconds else 1.0
        verdict = "slower: more workers hurt" if share < HURT_SHARE else "no real loss"
        text += f"; {most.spec.workers} workers: {_speed(most)}, {100 * share:.0f}% of the best speed ({verdict})"
    for p in group:
        if p not in fixed and p.seconds:
            text += f"; {p.spec.choice}: {_speed(p)}, {100 * best.seconds / p.seconds:.0f}% of the fastest fixed " \
                    f"count's speed"
    return text


def _kafka_line(key: tuple[Any, ...], kafka: list[Point], mine: list[Point]) -> str:
    cells = ", ".join(f"{p.seconds:.2f} s with {p.spec.recovery_threads}" for p in kafka)
    fastest = min(kafka, key=lambda p: p.seconds)
    text = (f"{_describe(key)}: Kafka's LogLoader {cells} recovery thread(s) (fastest with "
            f"{fastest.spec.recovery_threads})")
    if mine:
        best = min(mine, key=lambda p: p.seconds)
        text += (f"; mploader's fastest, {best.spec.choice}: {best.seconds:.2f} s, "
                 f"{best.seconds / fastest.seconds:.2f}x the time of Kafka's fastest" if fastest.seconds else "")
    return text


def findings(runs: Sequence[RunResult]) -> list[str]:
    """See the module docstring: a line per group of points, then one per rate-limited point."""
    mploader: dict[tuple[Any, ...], list[Point]] = {}
    kafka: dict[tuple[Any, ...], list[Point]] = {}
    pts = points(runs)
    for p in pts:
        if p.spec.loader == "kafka":
            kafka.setdefault(_load_key(p), []).append(p)
        elif p.spec.max_read_bytes_per_sec is None:
            mploader.setdefault((*_load_key(p), p.spec.recovery_threads), []).append(p)
    lines = [_mploader_line(key, group) for key, group in mploader.items()]
    for key, group in kafka.items():
        mine = [p for k, g in mploader.items() if k[:5] == key for p in g]
        lines.append(_kafka_line(key, sorted(group, key=lambda p: p.spec.recovery_threads), mine))
    for p in pts:
        rate = p.spec.max_read_bytes_per_sec
        if rate:
            scanned = statistics.median(r.throughput for r in p.runs)
            disk = p.spread(lambda r: r.mean("read_bytes_per_s"))
            lines.append(f"{p.place}, IO budget {rate / 1e6:.0f} MB/s with {p.spec.workers} worker(s): scanned "
                         f"{scanned / 1e6:.1f} MB/s, {100 * scanned / rate:.0f}% of the budget"
                         + ("" if disk is None else f"; the device read {disk.median / 1e6:.1f} MB/s while it ran"))
    return lines


def agreement(runs: Sequence[RunResult]) -> list[str]:
    """See the module docstring: a line per broker (device, layout, restart), and the differences found."""
    groups: dict[tuple[Any, ...], list[RunResult]] = {}
    for r in runs:
        if r.loaded and not r.spec.dry_run:
            groups.setdefault((r.place, r.spec.data_dirs, r.spec.restart), []).append(r)
    lines = []
    for (place, dirs, restart), group in groups.items():
        ref = next((r for r in group if r.spec.loader == "kafka"), group[0])
        ref_name = f"run {ref.id} ({ref.spec.choice})"
        bad = []
        for r in group:
            diffs = compare(ref.loaded, r.loaded, 5, ref_name, f"run {r.id} ({r.spec.choice})")
            if diffs:
                bad.append(f"MISMATCH: run {r.id} ({r.spec.choice}) differs from {ref_name}: " + "; ".join(diffs))
        head = f"{place}, {dirs} data dir(s), {restart} restart: "
        lines.append(head + (f"all {len(group)} runs loaded the same as {ref_name} ({len(ref.loaded)} partitions: "
                             f"kind, log start and end offsets, recovery point, segments, leader epochs)"
                             if not bad else f"{len(bad)} of {len(group)} runs differ"))
        lines += bad
    return lines


__all__ = ["HURT_SHARE", "KNEE_SHARE", "agreement", "findings"]
