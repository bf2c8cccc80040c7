"""``mploader sweep`` run from perf/ (the command is the tool; this is where the benchmarks live).

    .venv/bin/python perf/sweep.py --quick --out perf/results/sweep-quick

Every option of ``mploader sweep --help`` applies; perf/README.md has the committed runs and what they show.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mploader.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["sweep", *sys.argv[1:]]))
