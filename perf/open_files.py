"""The lowest limit on open files a load passes under, against the estimate the preflight holds it to.

    python perf/open_files.py [--cases 1x1,1x4,2x4,4x4,8x1]

Each case is WORKERSxTHREADS (``--workers``, ``--recovery-threads``).  A broker of 16 partitions (2 MB, every segment
recovered, one data dir) is loaded in fresh processes under limits from 6 up, once with the preflight's check
(``mploader.disk.environment.open_files_problem``) and once without it: the first limit each passes under is the
estimate and what the load really needs.  Figures: perf/README.md, "The preflight's estimate of open files".
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mploader.generate import GeneratorConfig, generate  # noqa: E402

CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
import logging
logging.disable(logging.WARNING)
from mploader import LoaderConfig, load_logs
import mploader.disk.environment as environment
if sys.argv[5] == "unchecked":
    environment.open_files_problem = lambda *a: None
try:
    r = load_logs([sys.argv[4]], LoaderConfig(segment_scan_workers_per_data_dir=int(sys.argv[2]),
                                             num_recovery_threads_per_data_dir=int(sys.argv[3])), now_ms=0)
    print(json.dumps(r.offline_dirs == {}))
except Exception:
    print(json.dumps(False))
"""


def lowest_limit(src: Path, work: Path, workers: int, threads: int, mode: str) -> int | None:
    for limit in range(6, 64):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(src, work)
        p = subprocess.run([sys.executable, "-c", CHILD, str(limit), str(workers), str(threads), str(work / "data-0"),
                            mode], capture_output=True, text=True)
        if p.stdout.strip().endswith("true"):
            return limit
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="1x1,1x4,2x4,4x4,8x1")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        generate(src, GeneratorConfig(data_dirs=1, topics=2, partitions_per_topic=8, total_bytes=2_000_000,
                                      segment_bytes=20_000, batch_bytes=200, records_per_batch=1, faults=0, seed=4))
        for cp in src.glob("data-*/recovery-point-offset-checkpoint"):
            cp.unlink()
        print("| workers | recovery threads | lowest limit that loads | the estimate |")
        print("|---:|---:|---:|---:|")
        for case in args.cases.split(","):
            workers, threads = (int(x) for x in case.split("x"))
            needs = lowest_limit(src, Path(tmp) / "b", workers, threads, "unchecked")
            estimate = lowest_limit(src, Path(tmp) / "b", workers, threads, "checked")
            print(f"| {workers} | {threads} | {needs} | {estimate} |", flush=True)


if __name__ == "__main__":
    main()
