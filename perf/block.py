"""What handing a scan over through a block costs (mploader.engine.block): the transport of the pool engine alone.

    .venv/bin/python perf/block.py DATA_DIR [--rounds 5]

In one process, every ``.log`` of ``DATA_DIR`` (a data dir of ``mploader generate``, page-cached) is scanned from
byte 0 as Phase 2 asks for it (``scan_segment``, the index draft included), then, in the same round, scanned again
the way a pool worker and the parent hand it over: a block sized as the parent sizes it, ``worker_scan`` (the scan
and its write into the block), ``arrays_from_block`` and the unlink.  The difference of the two is the
transport; the parent's part (read-back and unlink) is what Phase 2's thread pays.  Prints a line a round and
the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from mploader.engine.block import Block
from mploader.engine.chunks import MIN_ENTRY_BYTES
from mploader.engine.worker import SLOT_BYTES, Scanned, arrays_from_block, worker_scan
from mploader.scan import SegmentTask, scan_segment


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--index-interval", type=int, default=4096)
    args = ap.parse_args()
    logs = sorted(args.data_dir.glob("*/*.log"))
    tasks = [SegmentTask(str(p), int(p.name[:20]), index_interval=args.index_interval) for p in logs]
    total = sum(p.stat().st_size for p in logs)
    print(f"{len(tasks)} segments, {total / 1e9:.2f} GB")
    alone, through, parent = [], [], []
    for r in range(args.rounds):
        t0 = time.perf_counter()
        for task in tasks:
            scan_segment(task)
        alone.append(time.perf_counter() - t0)
        back = 0.0
        t0 = time.perf_counter()
        for i, task in enumerate(tasks):
            capacity = os.path.getsize(task.path) // MIN_ENTRY_BYTES + 1
            block = Block.create(f"mploader-perf-{os.getpid()}-{i}", capacity * SLOT_BYTES)
            try:
                got = worker_scan(task, block.name, capacity)
                assert isinstance(got, Scanned), got
                t1 = time.perf_counter()
                arrays_from_block(block, got.rows, got.draft)
            finally:
                block.unlink()
            back += time.perf_counter() - t1
        through.append(time.perf_counter() - t0)
        parent.append(back)
        print(f"round {r + 1}: scans alone {alone[-1]:.3f} s, through blocks {through[-1]:.3f} s "
              f"(+{through[-1] - alone[-1]:.3f}; the parent's read-back and unlink {back:.3f})", flush=True)
    med = statistics.median
    transport = med(t - a for t, a in zip(through, alone))
    print(f"medians: alone {med(alone):.3f} s, through blocks {med(through):.3f} s, transport {transport:.3f} s "
          f"({transport / total * 1e12:.0f} ms a GB), the parent's part {med(parent):.3f} s")

if __name__ == "__main__":
    main()
