"""What the commands ``mploader sweep`` (:mod:`.sweep`) and ``mploader experiment`` (:mod:`.experiment`)
share: the data and output options, the scratch directory, a line per run on stderr (and ``--refuse-busy``: a
run on a busy host stops the command), the report at the end, and SIGTERM handled as a Ctrl-C, SIGINT taken
even where a shell started the command with it ignored (so that every device, mount and cgroup an experiment
made is removed when it is stopped either way)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from mploader.cli.dirs import data_dirs_problem
from mploader.cli.exit_codes import EXIT_BUSY, UsageError
from mploader.cli.output import SCHEMA_VERSION, fail, print_document, tool
from mploader.cli.units import format_bytes, parse_size
from mploader.experiments.broker import Broker, generated_broker, given_broker
from mploader.experiments.cache import METHODS
from mploader.experiments.findings import findings
from mploader.experiments.host_load import BUSY_CPU_PERCENT, BUSY_READ_SHARE
from mploader.experiments.leftovers import scratch_base
from mploader.experiments.places import HDD_LIKE
from mploader.experiments.points import points
from mploader.experiments.report import Report
from mploader.experiments.run import RunResult
from mploader.host.cgroup import ReadLimits

DEFAULT_REPEAT = 3


class BusyHost(Exception):
    """``--refuse-busy``: a run's host was too busy with other work to trust it (experiments.host_load)."""


def worker_counts(text: str, words: tuple[str, ...] = ("auto", "adaptive"),
                  empty: bool = False) -> tuple[int | str, ...]:
    """``"1-4"``, ``"1,2,4,8"``, ``"1,2,auto,adaptive"`` -> counts (and the ``words``); ``empty``: "" is none."""
    out: list[int | str] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            if part in words:
                out.append(part)
            elif "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a list of counts: {text!r} (examples: 1-4, 1,2,4,8, "
                                             f"1,2,{','.join(words) or '3'})") from None
    if (not out and not empty) or any(isinstance(n, int) and n < 1 for n in out):
        raise argparse.ArgumentTypeError(f"counts must be >= 1: {text!r}")
    return tuple(out)


def counts(text: str, empty: bool = False) -> tuple[int, ...]:
    values = worker_counts(text, (), empty)
    if any(not isinstance(v, int) for v in values):
        raise argparse.ArgumentTypeError(f"numbers only: {text!r}")
    return tuple(int(v) for v in values)


def sizes(text: str) -> tuple[int, ...]:
    """``"50MB,200MB"`` -> the sizes; ``""``: none."""
    return tuple(parse_size(p.strip()) for p in text.split(",") if p.strip())


def choices(allowed: tuple[str, ...]) -> Any:
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(v.strip() for v in text.split(",") if v.strip())
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(allowed)} (comma-separated)")
        return values
    return parse


def add_throttle_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """``--read-bps`` and ``--read-iops``: the throttled device's read limits (``what``: for the help)."""
    p.add_argument("--read-bps", type=parse_size, default=HDD_LIKE.bytes_per_s, metavar="SIZE",
                   help=f"{what}: read bytes per second (default {format_bytes(HDD_LIKE.bytes_per_s or 0)})")
    p.add_argument("--read-iops", type=int, default=HDD_LIKE.iops, metavar="N",
                   help=f"{what}: read requests per second (default {HDD_LIKE.iops})")


def limits_of(args: argparse.Namespace) -> ReadLimits:
    return ReadLimits(args.read_bps, args.read_iops)


def interval_of(args: argparse.Namespace) -> float:
    """``--interval``, or its default: 0.1 s with ``--quick``, else 0.2 s."""
    return float(args.interval or (0.1 if args.quick else 0.2))


def add_common_arguments(p: argparse.ArgumentParser, default_out: str) -> None:
    p.add_argument("--quick", action="store_true", help="a small broker and few runs: a few minutes on 2 CPUs")
    p.add_argument("--size", type=parse_size, metavar="SIZE", help="the generated broker's .log bytes")
    p.add_argument("--segment-bytes", type=parse_size, metavar="SIZE", help="the generated broker's segment size")
    p.add_argument("--partitions", type=int, metavar="N", help="the generated broker's partitions")
    p.add_argument("--out", type=Path, default=Path(default_out), metavar="DIR",
                   help=f"where the report, CSV, JSON and PNG files go (default {default_out})")
    p.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                   help="scratch space on the disk to measure, for the broker and each run's copy (default: the "
                        "system's temporary directory, e.g. /var/tmp); removed at the end")
    p.add_argument("--interval", type=float, default=None, metavar="SECONDS",
                   help="sampling interval (default 0.1 with --quick, else 0.2)")
    p.add_argument("--cache-method", choices=METHODS, default="auto",
                   help="how a cold cache is made: drop_caches (root), fadvise (DONTNEED per file), or auto "
                        "(default: drop_caches where permitted)")
    p.add_argument("--repeat", type=lambda t: counts(t)[0], default=DEFAULT_REPEAT, metavar="N",
                   help=f"rounds: every run N times, in the same order (default {DEFAULT_REPEAT}); the findings and "
                        f"plots take each point's median, the plots with bars from the lowest to the highest round")
    p.add_argument("--refuse-busy", action="store_true",
                   help=f"stop with exit status {EXIT_BUSY} at the first run on a busy host (other processes using "
                        f"more than {BUSY_CPU_PERCENT:.0f}%% of a core, or reading more than "
                        f"{100 * BUSY_READ_SHARE:.0f}%% of what the run's devices read), instead of flagging it in "
                        f"the report")
    p.add_argument("--json", action="store_true", help="print one JSON document at the end (runs and findings)")


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def scratch(args: argparse.Namespace) -> Iterator[Path]:
    """A scratch directory, removed at the end; SIGTERM is a Ctrl-C meanwhile."""
    base = args.work_dir or scratch_base()
    if not base.is_dir():
        raise UsageError(f"--work-dir {base} is not a directory")
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    # a command started in the background by a shell inherits SIGINT ignored; this one must stop (and remove what
    # it made) on a SIGINT however it was started
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    d = Path(tempfile.mkdtemp(prefix=f"mploader-exp-{os.getpid()}-", dir=base))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def broker_for(args: argparse.Namespace, work: Path, size: int, segment_bytes: int, partitions: int,
               data_dirs: int = 1, brokers: int = 1) -> Broker:
    """The DIRs given, else a broker generated in ``work`` (``data_dirs`` data dirs; ``brokers``: how many will
    be generated there, for the room check)."""
    dirs = getattr(args, "dirs", None)
    if dirs:
        if (why := data_dirs_problem(dirs)) is not None:  # as mploader load refuses them
            raise UsageError(why)
        try:
            return given_broker(dirs)
        except FileNotFoundError as e:
            raise UsageError(str(e)) from None
    size = args.size or size
    if shutil.disk_usage(work).free < (2 + brokers) * size:
        raise UsageError(f"not enough room in {work} for {brokers} broker(s) of {format_bytes(size)} and their "
                         f"copies: use --work-dir or a smaller --size")
    say(f"generating a {format_bytes(size)} broker of {data_dirs} data dir(s) in {work} ...")
    return generated_broker(work / f"broker-{data_dirs}", size, args.segment_bytes or segment_bytes,
                            args.partitions or partitions, data_dirs=data_dirs)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_line(r: RunResult, done: int, total: int) -> None:
    s = r.spec
    util = r.busy()
    busy = "" if util is None else f", device {util:.0f}% busy"
    rate = f", budget {format_bytes(s.max_read_bytes_per_sec)}/s" if s.max_read_bytes_per_sec else ""
    host = r.busy_host()
    threads = "" if s.loader == "kafka" else f", {s.recovery_threads} recovery thread(s)"
    say(f"run {done}/{total} [{r.place}, {s.data_dirs} data dir(s)] {s.choice}{threads}, {s.restart}, "
        f"{'dry run' if s.dry_run else 'recover'}, {s.cache} cache ({r.cache_method}){rate}: "
        f"{r.seconds:.2f} s (process {r.process_seconds:.2f} s)"
        + (f", {r.throughput / 1e6:.0f} MB/s" if r.bytes_read else "") + busy
        + (f"; BUSY HOST: {'; '.join(host)}" if host else ""))


def on_run(args: argparse.Namespace) -> Callable[[RunResult, int, int], None]:
    """A line per run; with ``--refuse-busy``, BusyHost at the first run on a busy host."""
    def told(r: RunResult, done: int, total: int) -> None:
        run_line(r, done, total)
        why = r.busy_host()
        if why and args.refuse_busy:
            raise BusyHost(f"run {done} ({r.place}, {r.spec.choice}): {'; '.join(why)}")
    return told


def refused(args: argparse.Namespace, e: BusyHost) -> int:
    return fail(args, EXIT_BUSY, "busy_host", f"the host is busy with other work: {e}; refused (--refuse-busy): "
                                              f"nothing reported, the devices and copies removed; run it again on a "
                                              f"quiet machine, or without --refuse-busy to flag such runs")


def command_line(name: str) -> str:
    """The command as typed, written as ``mploader NAME ...`` also when a perf/ wrapper ran it."""
    argv, words = sys.argv[1:], name.split()
    for i in range(len(argv)):
        if argv[i:i + len(words)] == words:
            argv = argv[i + len(words):]
            break
    return " ".join(["mploader", name, *(shlex.quote(a) for a in argv)])


def finish(args: argparse.Namespace, report: Report) -> int:
    files = report.write(args.out)
    if args.json:
        print_document({"schema": SCHEMA_VERSION, "tool": tool(), "command": report.name,
                        "files": [str(f) for f in files], "findings": findings(report.runs),
                        "points": [p.to_json() for p in points(report.runs)],
                        "runs": [r.row() for r in report.runs]})
    else:
        print(f"{report.title}: {len(report.runs)} runs in {report.seconds:.0f} s")
        for line in findings(report.runs):
            print(f"  {line}")
        print(f"report: {args.out / (report.name + '.md')} (and {len(files) - 1} more files in {args.out})")
    return 0


__all__ = ["DEFAULT_REPEAT", "BusyHost", "add_common_arguments", "add_throttle_arguments", "broker_for", "choices",
           "command_line", "counts", "finish", "interval_of", "limits_of", "on_run", "refused", "run_line", "say",
           "scratch", "sizes", "worker_counts"]
