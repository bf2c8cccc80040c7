"""``mploader experiment hdd-vs-ssd`` run from perf/: seed 002's restart on the machine's disk, a throttled loop
device with HDD-like limits (root) and tmpfs.

    .venv/bin/python perf/hdd_vs_ssd.py --quick --out perf/results/hdd-vs-ssd-quick

Every option of ``mploader experiment hdd-vs-ssd --help`` applies; perf/README.md has the committed runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mploader.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["experiment", "hdd-vs-ssd", *sys.argv[1:]]))
