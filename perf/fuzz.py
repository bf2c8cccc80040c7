#!/usr/bin/env python3
"""Fuzz every parser of mploader (tests/fuzz_targets.py): only typed errors, no hang, no runaway memory.

Two engines, each target in a process of its own:

* ``atheris`` (the default where it is installed: ``pip install atheris``): libFuzzer's coverage-guided
  mutation over mploader's instrumented Python code, seeded with each target's valid inputs.  A finding is
  libFuzzer's: an uncaught exception other than a typed error (``crash-*``), an input that runs longer than
  ``--timeout`` (``timeout-*``), or a process above ``--rss-limit-mb`` (``oom-*``); the run of that target ends
  there and its input is kept in the artifacts directory.  Each child's address space is capped
  (``--address-space-mb``): an allocation a length field asks for fails there even when it is never touched.
* ``random`` (where atheris is not installed): coverage-blind, seeded random mutations of the seeds and of
  earlier inputs (tests.fuzz_targets.mutate); a finding is an exception other than a typed error, an input over
  ``--timeout`` (a SIGALRM stops it), or the process's peak RSS above ``--rss-limit-mb``; it goes on after one
  (each distinct finding kept once).

``--all-in-one`` fuzzes every target in one process (the input's first byte picks the target): the short run
tests/test_fuzz.py makes.  Prints a table (``--json``: the figures as JSON); ``--report perf/README.md`` writes
it into that file's fuzzing section.

Usage: perf/fuzz.py [--engine auto|atheris|random] [--seconds 60] [--slice 60] [--target NAME ...] [--all-in-one]
                    [--timeout 5] [--rss-limit-mb 2048] [--address-space-mb 4096] [--artifacts DIR] [--seed 1]
                    [--json] [--report FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.report import publish  # noqa: E402

ALL = "all"


def atheris_available() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


# ---- the child: one target (or all of them) fuzzed in this process ----------------------------------------

def _load_targets(use_atheris: bool) -> Any:
    """tests.fuzz_targets, with mploader's modules instrumented for coverage when atheris runs."""
    if use_atheris:
        import atheris

        with atheris.instrument_imports(include=["mploader"]):
            import tests.fuzz_targets as targets
        return targets
    import tests.fuzz_targets as targets

    return targets


def _dispatch(targets: Any, name: str) -> tuple[Any, list[bytes], int]:
    """The function to fuzz, its seeds and its input size limit; ``all``: the first byte picks the target."""
    if name != ALL:
        t = targets.TARGETS[name]
        return (lambda data: targets.exercise(t, data)), t.seeds(), t.max_size
    table = list(targets.TARGETS.values())

    def run(data: bytes) -> None:
        if data:
            targets.exercise(table[data[0] % len(table)], data[1:])

    seeds = [bytes([i]) + s for i, t in enumerate(table) for s in t.seeds()]
    return run, seeds, max(t.max_size for t in table) + 1


class Hang(Exception):
    """An input ran longer than --timeout (raised by SIGALRM in the random engine)."""


def _artifact(directory: Path, kind: str, data: bytes) -> str:
    path = directory / f"{kind}-{hashlib.sha1(data).hexdigest()}"
    path.write_bytes(data)
    return str(path)


def _child_random(args: argparse.Namespace, targets: Any) -> dict[str, Any]:
    run, seeds, max_size = _dispatch(targets, args.child)
    rng = random.Random(args.seed)
    artifacts = Path(args.artifacts)

    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"input ran longer than {args.timeout} s")

    signal.signal(signal.SIGALRM, alarm)
    findings: dict[str, dict[str, Any]] = {}
    pool = list(seeds)
    executions, slowest = 0, 0.0
    deadline = time.monotonic() + args.seconds
    rss_limit_kb = args.rss_limit_mb * 1024
    inputs = iter(seeds)
    while time.monotonic() < deadline:
        data = next(inputs, None)
        if data is None:
            data = targets.mutate(rng, rng.choice(pool), pool, max_size)
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, args.timeout)
        try:
            run(data)
        except Exception as e:  # noqa: BLE001 - anything that is not a typed error is what we look for
            frame = traceback.extract_tb(e.__traceback__)[-1]
            key = f"{type(e).__name__} at {Path(frame.filename).name}:{frame.lineno}"
            if key not in findings:
                kind = "timeout" if isinstance(e, Hang) else "crash"
                findings[key] = {"kind": kind, "what": f"{key}: {str(e)[:200]}",
                                 "artifact": _artifact(artifacts, kind, data)}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        slowest = max(slowest, time.perf_counter() - t0)
        executions += 1
        if resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > rss_limit_kb and "oom" not in findings:
            findings["oom"] = {"kind": "oom", "what": f"peak RSS above {args.rss_limit_mb} MB",
                               "artifact": _artifact(artifacts, "oom", data)}
        if len(pool) < 1000 and rng.random() < 0.02:  # keep a few mutants to mutate further
            pool.append(data)
    return {"executions": executions, "slowest_ms": round(slowest * 1000, 1), "corpus": len(pool),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "findings": list(findings.values())}


def _child_atheris(args: argparse.Namespace, targets: Any) -> None:
    import atheris

    run, seeds, max_size = _dispatch(targets, args.child)
    corpus = Path(args.corpus)
    for s in seeds:
        (corpus / hashlib.sha1(s).hexdigest()).write_bytes(s)
    flags = [f"-max_total_time={args.seconds}", f"-timeout={args.timeout}", f"-rss_limit_mb={args.rss_limit_mb}",
             f"-max_len={max_size}", f"-seed={args.seed}", "-print_final_stats=1", "-print_pcs=0",
             f"-artifact_prefix={args.artifacts}/"]
    atheris.Setup([sys.argv[0], *flags, str(corpus)], run)
    atheris.Fuzz()


def child(args: argparse.Namespace) -> None:
    logging.disable(logging.CRITICAL)  # the loader's WARNINGs about the inputs it recovers
    # an allocation a length field asks for is seldom touched, so RSS never shows it: the address space does
    # (a codec's Rust or C code aborts the process where it fails, a finding; Python raises MemoryError)
    resource.setrlimit(resource.RLIMIT_AS, (args.address_space_mb << 20, resource.getrlimit(resource.RLIMIT_AS)[1]))
    targets = _load_targets(args.engine == "atheris")
    if args.engine == "atheris":
        _child_atheris(args, targets)
    else:
        print("FIGURES " + json.dumps(_child_random(args, targets)), flush=True)


# ---- the parent: one child per target, figures collected ---------------------------------------------------

def _parse_libfuzzer(output: str, artifacts: Path, before: set[str]) -> dict[str, Any]:
    stats = dict(re.findall(r"stat::(\w+):\s+(\d+)", output))
    cov = re.findall(r"cov: (\d+) ft: (\d+)", output)
    findings = []
    for path in sorted(set(os.listdir(artifacts)) - before):
        kind = path.split("-", 1)[0]
        what = ""
        if kind == "crash":
            m = re.search(r"=== Uncaught Python exception: ===\n(.*?)\n==\d+== ERROR", output, re.S)
            native = [line.strip() for line in output.splitlines()
                      if "ERROR: libFuzzer" in line or "memory allocation of" in line]
            what = m.group(1).strip().splitlines()[-1] if m else "; ".join(native[:2]) or output[-300:]
        findings.append({"kind": kind, "what": what, "artifact": str(artifacts / path)})
    return {"executions": int(stats.get("number_of_executed_units", 0)),
            "coverage": {"cov": int(cov[-1][0]), "ft": int(cov[-1][1])} if cov else None,
            "corpus_added": int(stats.get("new_units_added", 0)), "peak_rss_mb": int(stats.get("peak_rss_mb", 0)),
            "findings": findings}


def _run_slice(name: str, args: argparse.Namespace, artifacts: Path, corpus: str, seconds: int,
               seed: int) -> tuple[dict[str, Any], float]:
    """One child process fuzzing ``name`` for ``seconds``: its figures and wall time."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--engine", args.engine,
           "--seconds", str(seconds), "--timeout", str(args.timeout), "--rss-limit-mb", str(args.rss_limit_mb),
           "--address-space-mb", str(args.address_space_mb),
           "--artifacts", str(artifacts), "--corpus", corpus, "--seed", str(seed)]
    before = set(os.listdir(artifacts))
    t0 = time.monotonic()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="fuzz-scratch-", dir=shm) as scratch:  # the child's files (see scratch())
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=dict(os.environ, FUZZ_SCRATCH=scratch),
                              timeout=seconds + 10 * args.timeout + 120)
    elapsed = time.monotonic() - t0
    output = proc.stdout + proc.stderr
    if args.engine == "atheris":
        figures = _parse_libfuzzer(output, artifacts, before)
    else:
        line = next((s for s in proc.stdout.splitlines() if s.startswith("FIGURES ")), None)
        if line is None:
            figures = {"executions": 0, "findings": [{"kind": "crash", "what": output[-2000:], "artifact": None}]}
        else:
            figures = json.loads(line[len("FIGURES "):])
    if proc.returncode != 0 and not figures["findings"]:  # the child itself failed: say how
        figures["findings"].append({"kind": "error", "what": output[-2000:], "artifact": None})
    return figures, elapsed


def run_target(name: str, args: argparse.Namespace, artifacts: Path) -> dict[str, Any]:
    """``name`` fuzzed for ``--seconds`` in slices of ``--slice`` seconds, a fresh process each, over one corpus
    directory (atheris keeps the inputs that found new coverage there, so a slice goes on where the last one
    stopped).  Fresh processes because atheris's instrumented comparisons leak the numpy arrays they compare
    (about 0.5 KB per execution of the numpy-heavy targets), which would reach --rss-limit-mb in a long run."""
    total: dict[str, Any] = {"executions": 0, "findings": [], "peak_rss_mb": 0, "slices": 0}
    elapsed = 0.0
    with tempfile.TemporaryDirectory(prefix="fuzz-corpus-") as corpus:
        while elapsed < args.seconds and not total["findings"]:
            seconds = max(1, min(args.slice, round(args.seconds - elapsed)))
            figures, took = _run_slice(name, args, artifacts, corpus, seconds, args.seed + total["slices"])
            elapsed += took
            total["slices"] += 1
            total["executions"] += figures.pop("executions")
            total["findings"] += figures.pop("findings")
            total["peak_rss_mb"] = max(total["peak_rss_mb"], figures.pop("peak_rss_mb", 0))
            for key, value in figures.items():  # coverage grows slice by slice: the last one's is the run's
                total[key] = total.get(key, 0) + value if key == "corpus_added" else value
    return {"target": name, "engine": args.engine, "seconds": round(elapsed, 1),
            "executions_per_s": round(total["executions"] / max(elapsed, 1.0)), **total}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=["auto", "atheris", "random"], default="auto")
    ap.add_argument("--seconds", type=int, default=60, help="per target (default 60)")
    ap.add_argument("--target", action="append", help="a target of tests/fuzz_targets.py (default: every one)")
    ap.add_argument("--all-in-one", action="store_true", help="every target in one process, the first byte picks")
    ap.add_argument("--timeout", type=int, default=5, help="seconds an input may take (default 5)")
    ap.add_argument("--slice", type=int, default=60, help="seconds per child process (default 60, see run_target)")
    ap.add_argument("--rss-limit-mb", type=int, default=2048)
    ap.add_argument("--address-space-mb", type=int, default=4096, help="each child's RLIMIT_AS (default 4096)")
    ap.add_argument("--artifacts", help="where inputs of findings are kept (default: a new temporary directory)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--report", type=Path, help="write the table into this markdown file's fuzzing section")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.engine == "auto":
        args.engine = "atheris" if atheris_available() else "random"
    if args.child:
        child(args)
        return 0
    from tests.fuzz_targets import TARGETS

    names = [ALL] if args.all_in_one else (args.target or list(TARGETS))
    unknown = [n for n in names if n != ALL and n not in TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {unknown}; known: {', '.join(TARGETS)}")
    artifacts = Path(args.artifacts or tempfile.mkdtemp(prefix="fuzz-artifacts-"))
    artifacts.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        results.append(run_target(name, args, artifacts))
        if not args.json:
            r = results[-1]
            print(f"{name}: {r['executions']:,} executions in {r['seconds']} s, {len(r['findings'])} finding(s)",
                  file=sys.stderr, flush=True)
    if not args.artifacts and not os.listdir(artifacts):
        artifacts.rmdir()  # nothing found: no empty directory left behind
    publish({"engine": args.engine, "artifacts": str(artifacts), "targets": results}, table(results, args),
            as_json=args.json, report=args.report, section="fuzz")
    return 1 if any(r["findings"] for r in results) else 0


def table(results: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    total = sum(r["executions"] for r in results)
    lines = [f"`perf/fuzz.py --engine {args.engine} --seconds {args.seconds} --slice {args.slice}` on "
             f"{platform.machine()}, Python "
             f"{platform.python_version()}: {total:,} executions in all, "
             f"{sum(len(r['findings']) for r in results)} finding(s).", "",
             "| target | executions | per second | coverage (cov / ft) | peak RSS MB | findings |",
             "|---|---:|---:|---:|---:|---|"]
    for r in results:
        cov = f"{r['coverage']['cov']} / {r['coverage']['ft']}" if r.get("coverage") else "-"
        found = "; ".join(f"{f['kind']}: {f['what'][:80]}" for f in r["findings"]) or "none"
        lines.append(f"| {r['target']} | {r['executions']:,} | {r['executions_per_s']:,} | {cov} | "
                     f"{r.get('peak_rss_mb', '-')} | {found} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
