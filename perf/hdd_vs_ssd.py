"""``mploader experiment hdd-vs-ssd`` run from perf/: seed 002's restart of a broker of one and two data dirs on
the machine's disk, a throttled loop device with HDD-like limits (root), the seek-modelled HDD and SSD-like devices
(root, FUSE) and tmpfs, loaded by mploader (1/2/4/8 workers, auto, adaptive, --partition-workers auto) and by
Kafka's own loader (1/2/4 recovery threads, the oracle of shared/kafka-oracle), every point repeated.

    .venv/bin/python perf/hdd_vs_ssd.py --quick --out perf/results/hdd-vs-ssd-quick

Every option of ``mploader experiment hdd-vs-ssd --help`` applies; docs/experiments.md says what the report and
its figures show; perf/README.md has the committed runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mploader.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["experiment", "hdd-vs-ssd", *sys.argv[1:]]))
