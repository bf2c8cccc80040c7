"""One load in a process of its own: ``python -m mploader.experiments.child SPEC_JSON``.

Each run of an experiment is a fresh process, as a broker's start is: nothing imported or cached by an
earlier run helps it, its memory is its own (the sampler reads its RSS and its workers'), and it can be put
in a cgroup before it reads anything.  ``SPEC_JSON`` holds ``dirs`` (the data dirs), ``config``
(:class:`mploader.config.LoaderConfig` fields), ``partition_workers`` (``--partition-workers``: N, "auto" or
null) and ``cgroup_procs`` (a ``cgroup.procs`` file to join first, or null); or, for Kafka's loader, ``oracle``
(the launcher) and ``threads`` instead of ``config`` (:func:`mploader.experiments.kafka.run_oracles`).  It prints
one JSON object on stdout: the load's wall seconds, its ``stats``, its offline dirs, what it loaded per partition
(``partitions``) and the adaptive pool's changes of worker count (``adaptive``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from typing import Any


def run(spec: dict[str, Any]) -> dict[str, Any]:
    procs = spec.get("cgroup_procs")
    if procs:  # before the first read of the data: every process this one starts inherits the cgroup
        with open(procs, "w") as f:
            f.write(f"{os.getpid()}\n")
    if spec.get("oracle"):
        from mploader.experiments.kafka import run_oracles

        return run_oracles(spec["oracle"], spec["dirs"], int(spec["threads"]))
    return _run_mploader(spec)


def _run_mploader(spec: dict[str, Any]) -> dict[str, Any]:
    from mploader.config import LoaderConfig
    from mploader.experiments.kafka import mploader_partitions
    from mploader.load_plan import whole_partitions
    from mploader.manager import load_logs

    cfg = LoaderConfig(**spec.get("config", {}))
    partitions = None if spec.get("partition_workers") is None else whole_partitions(spec["partition_workers"], cfg)
    decisions = _Collect()  # the adaptive pool's changes of worker count, for the report
    logging.getLogger("mploader.engine.adaptive").addHandler(decisions)
    logging.getLogger("mploader.engine.adaptive").setLevel(logging.INFO)
    t0 = time.perf_counter()
    result = load_logs(spec["dirs"], cfg, partitions=partitions)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "stats": result.stats.to_json(), "offline_dirs": result.offline_dirs,
            "segments_recovered": result.stats.segments_recovered,
            "partitions": mploader_partitions(result.to_json()["logs"]),
            "adaptive": [_step(r, t0) for r in decisions.records]}


_START = time.perf_counter() - time.time()  # LogRecord.created is wall time: this turns it into perf_counter


def _step(record: logging.LogRecord, t0: float) -> dict[str, Any]:
    """One change of the adaptive pool's worker count: when (seconds into the load), what it logged, and, from the
    log call's arguments (``adaptive workers: DIR: BEFORE -> AFTER ...``, mploader.engine.adaptive.DirMonitor), the
    data dir and the counts."""
    step: dict[str, Any] = {"t": round(record.created + _START - t0, 3), "message": record.getMessage()}
    args = record.args if isinstance(record.args, tuple) else ()
    if len(args) >= 3 and isinstance(args[1], int) and isinstance(args[2], int):
        step.update(data_dir=str(args[0]), workers_before=args[1], workers=args[2])
    return step


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def main(argv: list[str]) -> int:
    # a process started in the background by a shell inherits SIGINT ignored: the experiment stops a run with it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if len(argv) != 1:
        print("usage: python -m mploader.experiments.child SPEC_JSON", file=sys.stderr)
        return 2
    try:
        doc = run(json.loads(argv[0]))
    except KeyboardInterrupt:  # the experiment stops this run (end_child): the load has stopped its workers
        return 130
    print(json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
