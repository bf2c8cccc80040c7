"""Benchmark of the Phase 1 engines against this machine's own limits, measured side by side in one run.

    .venv/bin/python perf/engine.py [--size 600MB] [--batch-bytes 1024] [--workers 1,2] [--clean-segments 100000]

Builds its data with ``mploader generate`` (one data dir, ~1 KiB batches, every segment past the
recovery point: a full unclean recovery), warms the page cache, then measures in this order:

* in each of ``--repeat`` rounds: the ceiling (bare processes walking the same files with one
  ``unpack_from`` per header and CRC-32C per batch: 1 process, then N processes splitting the files), the
  same with the compiled walk where it is built (``mploader.scan._walk.walk_v2``: the ceiling without any
  per-batch Python, 1 and N processes), then mploader N=1 (inline) and N=k (process pool); every figure is the
  best of its rounds;
* a thread-pool engine (the seed KIP's design, in Python) and a serial loop over kafka-python's reader;
* optionally (``--cold``) the same with an empty page cache: the disk's read bandwidth (1 and N
  readers) and mploader N=1 / N=k with and without the read-ahead, each after
  ``echo 3 > /proc/sys/vm/drop_caches``;
* optionally a clean-shutdown load of many small segments (seconds and parent memory per segment).

It prints a Markdown table; ``--report perf/README.md`` replaces the section between the
``<!-- engine:begin -->`` / ``<!-- engine:end -->`` markers with it.
"""

from __future__ import annotations

import argparse
import gc
import mmap
import os
import shutil
import struct
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing import Pool
from pathlib import Path

import psutil
from crc32c import crc32c

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from report import Lines, replace_section  # noqa: E402 - perf/report.py, beside this script

import mploader.manager.load as manager  # noqa: E402
from mploader import LoaderConfig, load_logs  # noqa: E402
from mploader.cli.units import parse_size  # noqa: E402
from mploader.engine import worker_start  # noqa: E402
from mploader.engine.base import Engine  # noqa: E402
from mploader.engine.plan import DirPlan, Partition  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from mploader.runners import ProcessPartitions  # noqa: E402
from mploader.scan import (  # noqa: E402
    SegmentScan,
    SegmentTask,
    scan_segment,
    walk as walk_mod,  # noqa: E402
)

HEADER = struct.Struct(">qiibI")


# --------------------------------------------------------------------------------------------
# The ceiling: the least Python can do per batch


def bare_walk(paths: list[str]) -> tuple[int, int]:
    """Walk + CRC-32C every v2 batch of the files; returns (batches, bytes)."""
    batches = nbytes = 0
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        mv = memoryview(data)
        p, end = 0, len(data)
        up = HEADER.unpack_from
        while p < end - 17:
            _, size, _, _, crc = up(data, p)
            total = size + 12
            if crc32c(mv[p + 21 : p + total]) != crc:
                raise SystemExit(f"{path}: bad CRC at {p} in the benchmark data")
            p += total
            batches += 1
        nbytes += end
    return batches, nbytes


def bare_walk_compiled(paths: list[str]) -> tuple[int, int]:
    """The same walk by the compiled loop (``mploader.scan._walk.walk_v2``, CRC checked, its batch-table rows
    written) over a mapping of each file: the machine's own ceiling once the per-batch Python is gone.  Markers
    are not parsed (control batches are taken as data batches are); an entry where that loop stops anyway is
    stepped over."""
    from mploader.scan import _walk  # type: ignore[attr-defined]

    batches = nbytes = 0
    for path in paths:
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # as a scan maps its segment: no copy
        p, end = 0, len(data)
        while p < end - 17:
            p, rows = _walk.walk_v2(data, p, end, True, False)
            batches += len(rows) // _walk.ROW_BYTES
            if p < end - 17:  # one step over it
                p += HEADER.unpack_from(data, p)[1] + 12
                batches += 1
        data.close()
        nbytes += end
    return batches, nbytes


def bare_parallel(paths: list[str], n: int, walk: Callable[[list[str]], tuple[int, int]] = bare_walk) -> float:
    """Seconds for n processes to walk all the files (split by size, pool started beforehand)."""
    groups: list[list[str]] = [[] for _ in range(n)]
    sizes = [0] * n
    for p in sorted(paths, key=os.path.getsize, reverse=True):
        i = sizes.index(min(sizes))
        groups[i].append(p)
        sizes[i] += os.path.getsize(p)
    with Pool(n) as pool:
        pool.map(abs, range(n))  # start the workers before timing
        t0 = time.perf_counter()
        pool.map(walk, groups)
        return time.perf_counter() - t0


# --------------------------------------------------------------------------------------------
# The KIP's design in Python: a thread pool scanning segments ahead of Phase 2


class ThreadEngine(Engine):
    workers_per_dir = 2

    def __init__(self, stats, threads: int):  # type: ignore[no-untyped-def]
        super().__init__(stats)
        self.pool = ThreadPoolExecutor(threads)
        self.futures: dict[str, Future[SegmentScan]] = {}

    def prefetch(self, dirs: Sequence[DirPlan]) -> dict[str, list[Partition]]:
        order = {}
        for plan in dirs:  # the same plan and order as the process pool
            planned = self.plan(plan)
            order[plan.data_dir] = [part for part, _ in planned]
            for _, tasks in planned:
                for task in tasks:
                    self.futures[task.path] = self.pool.submit(scan_segment, task)
        return order

    def scan(self, data_dir: str, task: SegmentTask) -> SegmentScan:
        fut = self.futures.pop(task.path, None)
        if fut is None or task.end is not None or task.start:
            return self.inline_source(data_dir).scan(task)
        return fut.result()

    def close(self, kill: bool = False) -> None:
        self.pool.shutdown()


def load_with_threads(dirs: list[str], threads: int) -> float:
    original = manager.make_engine
    manager.make_engine = lambda cfg, d, stats, metrics=None, progress=None: ThreadEngine(stats, threads)
    try:
        t0 = time.perf_counter()
        load_logs(dirs, LoaderConfig())
        return time.perf_counter() - t0
    finally:
        manager.make_engine = original


def kafka_python_serial(paths: list[str], budget_s: float) -> tuple[float, int]:
    """Seconds per byte-budget of kafka-python's reader validating every batch CRC (serial)."""
    from kafka.record.memory_records import MemoryRecords

    nbytes = 0
    t0 = time.perf_counter()
    for path in paths:
        data = Path(path).read_bytes()
        records = MemoryRecords(data)
        while True:
            batch = records.next_batch()
            if batch is None:
                break
            if not batch.validate_crc():
                raise SystemExit(f"kafka-python finds a bad CRC in {path}")
        nbytes += len(data)
        if time.perf_counter() - t0 > budget_s:
            break
    return time.perf_counter() - t0, nbytes


# --------------------------------------------------------------------------------------------


def warm(paths: list[str]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def timed_load(dirs: list[str], workers: int | str, read_ahead: int | str = "auto",
               start: str | None = None, whole_partitions: bool = False) -> tuple[float, dict]:
    """One in-process load; ``start``: how a pool's workers start (``LoaderConfig.worker_start``);
    ``whole_partitions``: ``workers`` processes load whole partitions (``mploader.runners.processes``)."""
    gc.collect()
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=workers, read_ahead_bytes=read_ahead,
                       worker_start=start)
    runner = ProcessPartitions(int(workers), start) if whole_partitions else None
    t0 = time.perf_counter()
    r = load_logs(dirs, cfg, partitions=runner)
    dt = time.perf_counter() - t0
    return dt, {"scan": r.stats.scan_seconds, "draft": r.stats.draft_seconds, "wait": r.stats.wait_seconds,
                "bytes": r.stats.bytes_read, "recovered": r.stats.segments_recovered, "pickled": r.stats.pickled_bytes,
                "scanned": r.stats.segments_scanned}


def reset_recovery_points(data_dirs: list[str]) -> None:
    """Recovery point 0 everywhere (an empty checkpoint): every byte is recovered."""
    for d in data_dirs:
        Path(d, "recovery-point-offset-checkpoint").write_text("0\n0\n")
        Path(d, ".kafka_cleanshutdown").unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=parse_size, default=parse_size("600MB"))
    ap.add_argument("--batch-bytes", type=parse_size, default=1024)
    ap.add_argument("--segment-bytes", type=parse_size, default=parse_size("64MiB"))
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--workers", default="1,2", help="comma-separated process counts; the first is the baseline")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--starts", default=worker_start(),
                    help="comma-separated ways the pool's workers start (fork, spawn), each measured side by side; "
                         "default: the one a load gets here")
    ap.add_argument("--cold", action="store_true", help="also measure with an empty page cache (needs root)")
    ap.add_argument("--clean-segments", type=int, default=0, help="also time a clean load of this many segments")
    ap.add_argument("--clean-partitions", type=int, default=3000)
    ap.add_argument("--out", default=str(ROOT / "perf" / "out" / "engine"))
    ap.add_argument("--report", default=None, help="write the table into this Markdown file")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    starts = [s.strip() for s in args.starts.split(",") if s.strip()]
    loads = [(w, None) for w in workers[:1]] + [(w, s) for w in workers[1:] for s in starts]
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    printed = Lines()
    say, lines = printed.say, printed.lines

    cmd = "python perf/engine.py " + " ".join(sys.argv[1:])
    say(f"`{cmd}` on {psutil.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")
    t0 = time.perf_counter()
    gen = generate(out / "unclean", GeneratorConfig(
        data_dirs=1, topics=1, partitions_per_topic=args.partitions, total_bytes=args.size,
        segment_bytes=args.segment_bytes, batch_bytes=args.batch_bytes, records_per_batch=1,
        idempotent_fraction=0.3, transactional_fraction=0.1, nonzero_start_fraction=0.0,
        delete_records_fraction=0.0, clean_shutdown=False, faults=0, seed=1))
    dirs = list(gen.data_dirs)
    reset_recovery_points(dirs)
    paths = sorted(str(p) for d in dirs for p in Path(d).rglob("*.log"))
    total = sum(os.path.getsize(p) for p in paths)
    say(f"data: {gen.batches:,} batches in {len(paths)} segments, {total / 1e9:.2f} GB "
        f"(generated in {time.perf_counter() - t0:.1f} s), every segment recovered")
    say("")
    say("| what | seconds | GB/s | us/batch | vs baseline |")
    say("|---|---|---|---|---|")
    # every repetition measures the ceiling and the loads one after the other, so that a slow moment of
    # this shared VM hits both; each figure is the best of its repetitions
    bare1_runs: list[float] = []
    bare_runs: dict[int, list[float]] = {n: [] for n in workers[1:]}
    compiled = walk_mod.COMPILED  # the compiled ceiling too, where the compiled walk is built
    compiled_runs: dict[int, list[float]] = {n: [] for n in workers} if compiled else {}
    results: dict[tuple[int, str | None], list[tuple[float, dict]]] = {ws: [] for ws in loads}
    whole: dict[tuple[int, str | None], list[float]] = {ws: [] for ws in loads[1:]}  # partitions in workers
    batches = 0
    for _ in range(args.repeat):
        warm(paths)
        t = time.perf_counter()
        batches, _ = bare_walk(paths)
        bare1_runs.append(time.perf_counter() - t)
        for n in workers[1:]:
            warm(paths)
            bare_runs[n].append(bare_parallel(paths, n))
        for n in compiled_runs:
            warm(paths)
            compiled_runs[n].append(bare_parallel(paths, n, bare_walk_compiled))
        for w, start in loads:
            warm(paths)
            results[w, start].append(timed_load(dirs, w, start=start))
        for w, start in whole:
            warm(paths)
            whole[w, start].append(timed_load(dirs, w, start=start, whole_partitions=True)[0])
    if compiled and bare_walk_compiled(paths)[0] != batches:  # both ceilings walk the same batches
        raise SystemExit("the compiled walk counted other batches than the Python walk")
    bare1 = min(bare1_runs)
    say(f"| bare walk+CRC, 1 process | {bare1:.2f} | {total / bare1 / 1e9:.2f} | {bare1 / batches * 1e6:.2f} | 1.00x |")
    bare_n = {n: min(runs) for n, runs in bare_runs.items()}
    for n in workers[1:]:
        say(f"| bare walk+CRC, {n} processes (the ceiling) | {bare_n[n]:.2f} | {total / bare_n[n] / 1e9:.2f} | | "
            f"{bare1 / bare_n[n]:.2f}x |")
    compiled_n = {n: min(runs) for n, runs in compiled_runs.items()}
    for n, t in compiled_n.items():
        say(f"| compiled walk+CRC (mploader.scan._walk), {n} process{'es' if n > 1 else ''} | {t:.2f} | "
            f"{total / t / 1e9:.2f} | {t / batches * 1e6:.2f} | {compiled_n[workers[0]] / t:.2f}x the 1-process one |")
    base = min(r[0] for r in results[loads[0]])
    for w, start in loads:
        best, info = min(results[w, start], key=lambda r: r[0])
        label = "inline" if w == 1 else f"{w} worker processes, {start}ed"
        say(f"| mploader load, {label} | {best:.2f} | {total / best / 1e9:.2f} | {best / batches * 1e6:.2f} | "
            f"{base / best:.2f}x |")
        if w == 1:
            scan = info["scan"]
            say(f"| - of which Phase 1 scans | {scan:.2f} | {total / scan / 1e9:.2f} | {scan / batches * 1e6:.2f} | "
                f"{scan / bare1:.2f}x the bare walk |")
            walk, draft = scan - info["draft"], info["draft"]
            say(f"| -- the walk and batch table | {walk:.2f} | {total / walk / 1e9:.2f} | {walk / batches * 1e6:.2f} | "
                f"{walk / bare1:.2f}x the bare walk |")
            say(f"| -- the recovery draft (Phase 2 work done in Phase 1) | {draft:.2f} | | "
                f"{draft / batches * 1e6:.2f} | {draft / scan:.0%} of Phase 1 |")
            say(f"| - of which Phase 2 + fixed costs | {best - scan:.2f} | | | {(best - scan) / scan:.1%} of Phase 1 |")
        else:
            say(f"| - Phase 2 waiting for Phase 1 | {info['wait']:.2f} | | | pickled {info['pickled']} B in all "
                f"({info['scanned']} segments scanned, the parent's own among them) |")
    for (n, start), runs in whole.items():
        best = min(runs)
        say(f"| mploader load, whole partitions in {n} worker processes, {start}ed (--partition-workers) | "
            f"{best:.2f} | {total / best / 1e9:.2f} | {best / batches * 1e6:.2f} | {base / best:.2f}x |")
    kinds = [(n, f"{n} workers ({start}ed)", min(r[0] for r in results[n, start])) for n, start in loads[1:]]
    kinds += [(n, f"{n} partition workers ({start}ed)", min(runs)) for (n, start), runs in whole.items()]
    for n, n_label, best in kinds:
        say(f"| mploader {n_label} vs ceiling of {n} bare processes | | | | "
            f"{(base / best) / (bare1 / bare_n[n]):.0%} of the ceiling's speed-up |")
        if compiled_n:
            c1, cn = compiled_n[workers[0]], compiled_n[n]
            say(f"| mploader {n_label} vs {n} compiled-walk processes | | | | "
                f"{(base / best) / (c1 / cn):.0%} of their speed-up ({c1 / cn:.2f}x) |")
        say(f"| mploader {n_label} vs {n} x the 1-process bare rate (cores x single-process walk+CRC) | | "
            f"{total / best / 1e9:.2f} | | {(total / best) / (n * total / bare1):.0%} of "
            f"{n * total / bare1 / 1e9:.2f} GB/s |")
    threads = max(workers)
    warm(paths)
    tt = min(load_with_threads(dirs, threads) for _ in range(args.repeat))
    best_n = min(r[0] for (w, _), rs in results.items() if w == max(workers) for r in rs)
    say(f"| thread-pool engine, {threads} threads (KIP design) | {tt:.2f} | {total / tt / 1e9:.2f} | | "
        f"mploader {max(workers)} workers is {tt / best_n:.2f}x faster |")
    kp_s, kp_bytes = kafka_python_serial(paths, budget_s=20.0)
    kp_full = kp_s * total / kp_bytes
    say(f"| serial kafka-python reader (extrapolated from {kp_bytes / 1e6:.0f} MB) | {kp_full:.2f} | "
        f"{kp_bytes / kp_s / 1e9:.3f} | | mploader {max(workers)} workers is {kp_full / best_n:.1f}x faster |")
    if args.cold:
        say("")
        cold_loads(dirs, paths, total, workers, total / bare1, args.repeat, say)
    if args.clean_segments:
        say("")
        clean_load(out, args, workers, say)
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    if args.report:
        replace_section(Path(args.report), "engine", lines)


def drop_caches() -> bool:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def read_files(paths: list[str]) -> int:
    nbytes = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while chunk := f.read(8 << 20):
                nbytes += len(chunk)
    return nbytes


def disk_read_seconds(paths: list[str], readers: int) -> float:
    """Seconds for ``readers`` processes to read all files (split by size) from an empty page cache."""
    groups: list[list[str]] = [[] for _ in range(readers)]
    for i, p in enumerate(sorted(paths, key=os.path.getsize, reverse=True)):
        groups[i % readers].append(p)
    with Pool(readers) as pool:
        pool.map(abs, range(readers))
        drop_caches()
        t0 = time.perf_counter()
        pool.map(read_files, groups)
        return time.perf_counter() - t0


def cold_loads(dirs: list[str], paths: list[str], total: int, workers: list[int], cached_rate: float,
               repeat: int, say) -> None:  # type: ignore[no-untyped-def]
    """The loads with an empty page cache, against min(disk bandwidth, cores x the cached 1-process rate),
    with the read-ahead (the default) and without it, alternately; each figure is the best of its rounds."""
    if not drop_caches():
        say("cold: skipped (writing /proc/sys/vm/drop_caches needs root)")
        return
    disk = {n: total / disk_read_seconds(paths, n) for n in workers}  # the disk with as many readers as workers
    say(f"cold page cache: disk read {', '.join(f'{r / 1e9:.2f} GB/s with {n} reader(s)' for n, r in disk.items())}")
    say("")
    say("| workers | read-ahead | seconds | GB/s | limit: min(disk with that many readers, workers x cached "
        "1-process rate) | share of the limit |")
    say("|---|---|---|---|---|---|")
    runs: dict[tuple[int, int | str], list[float]] = {}
    for _ in range(repeat):
        for w in workers:
            for read_ahead in ("auto", 0):
                reset_recovery_points(dirs)
                drop_caches()
                runs.setdefault((w, read_ahead), []).append(timed_load(dirs, w, read_ahead)[0])
    for (w, read_ahead), times in runs.items():
        dt = min(times)
        limit = min(disk[w], w * cached_rate)
        say(f"| {w} | {'auto' if read_ahead else 'off'} | {dt:.2f} | {total / dt / 1e9:.2f} | {limit / 1e9:.2f} GB/s "
            f"| {total / dt / limit:.0%} |")


def clean_load(out: Path, args: argparse.Namespace, workers: list[int], say) -> None:  # type: ignore[no-untyped-def]
    n_seg = args.clean_segments
    parts = args.clean_partitions
    topics = max(1, parts // 100)
    t0 = time.perf_counter()
    gen = generate(out / "clean", GeneratorConfig(
        data_dirs=1, topics=topics, partitions_per_topic=parts // topics, total_bytes=n_seg * 300,
        segment_bytes=300, batch_bytes=200, records_per_batch=1, clean_shutdown=True, faults=0, seed=2,
        idempotent_fraction=0.0, transactional_fraction=0.0))
    dirs = list(gen.data_dirs)
    say(f"clean-shutdown load: {gen.segments:,} segments in {gen.partitions:,} partitions "
        f"(generated in {time.perf_counter() - t0:.0f} s)")
    say("")
    say("| workers | seconds | segments/s | parent RSS growth per segment | descriptor bytes per segment |")
    say("|---|---|---|---|---|")
    marker = Path(dirs[0], ".kafka_cleanshutdown")
    content = marker.read_bytes()
    for w in workers:
        marker.write_bytes(content)
        gc.collect()
        rss0 = psutil.Process().memory_info().rss
        t = time.perf_counter()
        r = load_logs(dirs, LoaderConfig(segment_scan_workers_per_data_dir=w))
        dt = time.perf_counter() - t
        rss = psutil.Process().memory_info().rss - rss0
        segs = sum(len(lg.segments) for lg in r.logs.values())
        say(f"| {w} | {dt:.2f} | {segs / dt:,.0f} | {max(rss, 0) / segs:.0f} B | "
            f"{r.stats.pickled_bytes / segs:.0f} B (no scans: nothing to describe) |")
        del r


if __name__ == "__main__":
    main()
