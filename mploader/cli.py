"""The ``mploader`` command.

Subcommands live in :data:`COMMANDS`, a table of name -> :class:`Command` (help text, a function
that adds the subcommand's arguments, a function that runs it and returns the exit code).  Adding
one (e.g. ``load``) means writing those two functions and one table entry; :func:`main` needs no
change.  This is the only module that prints.

Exit codes: 0 success, 1 failure while running, 2 usage error (bad arguments or configuration).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass
from typing import Callable, Sequence, TextIO

from .cli_load import add_load_arguments, run_load
from .format.compression import CODEC_NAMES, UnsupportedCodecError, available_codecs
from .generate import FAULT_KINDS, Callback, GenerateSummary, GeneratorConfig, generate

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad arguments found after parsing (exit code 2)."""


# --------------------------------------------------------------------------------------------
# Helpers shared by subcommands

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)b?\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"10GB"`` -> 10_000_000_000, ``"256KiB"`` -> 262144, ``"4096"`` -> 4096 (B optional)."""
    m = _SIZE.fullmatch(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 4096, 256KiB, 60MB, 10GB)")
    number, unit, binary = m.groups()
    power = "kmgtp".find(unit.lower()) + 1 if unit else 0
    value = float(number) * (1024 if binary else 1000) ** power
    return int(value)


def format_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError


class ProgressBar(Callback):
    """A one-line progress bar on a stream (stderr), redrawn at most every 0.2 s."""

    def __init__(self, stream: TextIO, label: str) -> None:
        super().__init__()
        self.stream = stream
        self.label = label
        self._started = time.monotonic()
        self._last = 0.0

    def call(self) -> None:
        self._draw(final=False)

    def close(self) -> None:
        self._draw(final=True)

    def _draw(self, final: bool) -> None:
        now = time.monotonic()
        if not final and now - self._last < 0.2:
            return
        self._last = now
        value, size = self.value, self.size
        rate = value / max(now - self._started, 1e-9)
        if size:
            frac = min(1.0, value / size)
            line = (f"\r{self.label} [{'#' * int(frac * 30):<30}] {frac * 100:5.1f}% "
                    f"{format_bytes(value)} / {format_bytes(size)}")
        else:
            line = f"\r{self.label} {format_bytes(value)}"
        self.stream.write(f"{line}  {format_bytes(rate)}/s ")
        if final:
            self.stream.write("\n")
        self.stream.flush()


# --------------------------------------------------------------------------------------------
# generate


def _add_generate_arguments(p: argparse.ArgumentParser) -> None:
    d = GeneratorConfig()
    p.add_argument("out_dir", metavar="OUT_DIR",
                   help="where to write the data dirs (data-0, data-1, ...) and manifest.json; "
                        "must be absent or empty")
    p.add_argument("--dirs", type=int, dest="data_dirs", metavar="N",
                   help=f"number of data dirs (log.dirs) [{d.data_dirs}]")
    p.add_argument("--topics", type=int, metavar="N", help=f"number of topics [{d.topics}]")
    p.add_argument("--partitions", type=int, dest="partitions_per_topic", metavar="N",
                   help=f"partitions per topic [{d.partitions_per_topic}]")
    p.add_argument("--size", type=parse_size, dest="total_bytes", metavar="SIZE",
                   help=f"total .log bytes, e.g. 60MB, 10GB, 2GiB [{format_bytes(d.total_bytes)}]")
    p.add_argument("--segment-bytes", type=parse_size, metavar="SIZE",
                   help=f"log.segment.bytes [{d.segment_bytes}]")
    p.add_argument("--batch-bytes", type=parse_size, metavar="SIZE",
                   help=f"size of a full producer batch [{d.batch_bytes}]")
    p.add_argument("--records-per-batch", type=int, metavar="N",
                   help=f"records in a full batch [{d.records_per_batch}]")
    p.add_argument("--index-interval-bytes", type=parse_size, metavar="SIZE",
                   help=f"log.index.interval.bytes [{d.index_interval_bytes}]")
    p.add_argument("--compression", choices=list(CODEC_NAMES.values()),
                   help=f"producer compression.type [{d.compression}]")
    ending = p.add_mutually_exclusive_group()
    ending.add_argument("--clean", dest="clean_shutdown", action="store_true", default=None,
                        help="end with a clean shutdown (marker, trimmed indexes, snapshot at the log end)")
    ending.add_argument("--unclean", dest="clean_shutdown", action="store_false",
                        help="end as after a crash (the default)")
    p.add_argument("--faults", type=int, metavar="N", help=f"number of faults to inject [{d.faults}]")
    p.add_argument("--fault-kinds", metavar="KINDS", type=_fault_kinds,
                   help=f"comma-separated subset of: {', '.join(FAULT_KINDS)}")
    p.add_argument("--seed", type=int, metavar="N", help=f"seed of every random choice [{d.seed}]")
    p.add_argument("--start-time-ms", type=int, dest="start_timestamp_ms", metavar="MS",
                   help=f"CreateTime of the first batches, ms since the epoch [{d.start_timestamp_ms}]")
    p.add_argument("--overwrite", action="store_true",
                   help="replace OUT_DIR if it holds an earlier output of mploader generate")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the text summary")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", action="store_true", default=None, help="show a progress bar on stderr")
    prog.add_argument("--no-progress", dest="progress", action="store_false",
                      help="no progress bar (default when stderr is not a terminal)")


def _fault_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown fault kinds {', '.join(unknown)}; known: {', '.join(FAULT_KINDS)}")
    return kinds


_GENERATE_FIELDS = (
    "data_dirs", "topics", "partitions_per_topic", "total_bytes", "segment_bytes", "batch_bytes",
    "records_per_batch", "index_interval_bytes", "compression", "clean_shutdown", "faults", "fault_kinds",
    "seed", "start_timestamp_ms",
)


def _run_generate(args: argparse.Namespace) -> int:
    changes = {k: getattr(args, k) for k in _GENERATE_FIELDS if getattr(args, k) is not None}
    try:
        config = GeneratorConfig(**changes)
    except UnsupportedCodecError as e:
        raise UsageError(f"{e} (available here: {', '.join(available_codecs())})") from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    show_progress = args.progress if args.progress is not None else sys.stderr.isatty()
    bar = ProgressBar(sys.stderr, "generating") if show_progress else None
    try:
        summary = generate(args.out_dir, config, callback=bar, overwrite=args.overwrite)
    except FileExistsError as e:
        raise UsageError(f"{e} (use --overwrite to replace an earlier output of mploader generate)") from None
    if args.json:
        print(json.dumps(summary.to_dict(), indent=1))
    else:
        _print_generate_summary(summary)
    return EXIT_OK


def _print_generate_summary(s: GenerateSummary) -> None:
    ending = "a clean" if s.clean_shutdown else "an unclean"
    print(f"Generated a broker with {ending} shutdown in {s.out_dir} (seed {s.seed}) "
          f"in {s.elapsed_s:.1f} s ({format_bytes(s.bytes_per_s)}/s)")
    print(f"  data dirs    {len(s.data_dirs)}: {', '.join(s.data_dirs)}")
    print(f"  topics       {len(s.topics)}: {', '.join(s.topics)}; {s.partitions} partitions")
    print(f"  segments     {s.segments:,}   batches {s.batches:,}   records {s.records:,}")
    print(f"  log bytes    {format_bytes(s.log_bytes)} ({s.log_bytes:,})")
    print(f"  faults       {len(s.faults)}")
    for f in s.faults:
        where = f"{f.dir}/{f.topic}-{f.partition}/{f.file}"
        end = f"; valid data ends at byte {f.valid_end}" if f.valid_end is not None else ""
        print(f"    {f.kind:<16} {where}: {f.detail}{end}")
    print(f"  manifest     {s.manifest} (+ manifest.jsonl)")


# --------------------------------------------------------------------------------------------
# The subcommand table


@dataclass(frozen=True, slots=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {
    "generate": Command(
        "write realistic Kafka data dirs (with faults and a ground-truth manifest)",
        _add_generate_arguments, _run_generate,
    ),
    "load": Command("load and recover data dirs as a Kafka broker's start-up does", add_load_arguments, run_load),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mploader")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mploader", description="Load and recover Apache Kafka log directories, exactly as Kafka does.")
    parser.add_argument("--version", action="version", version=f"mploader {_version()}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.add_arguments(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: 2 on bad usage, 0 for --help/--version
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if args.verbose:
        import logging

        logging.basicConfig(level=logging.DEBUG if args.verbose > 1 else logging.INFO,
                            format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return args._run(args)
    except UsageError as e:
        print(f"mploader {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        print(f"mploader {args.command}: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"mploader {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
