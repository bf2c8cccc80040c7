"""``mploader generate``: write realistic Kafka data dirs with faults and a ground-truth manifest."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TextIO

from mploader.cli.exit_codes import EXIT_OK, UsageError
from mploader.cli.units import format_bytes, parse_size
from mploader.format.compression import CODEC_NAMES, UnsupportedCodecError, available_codecs
from mploader.generate import FAULT_KINDS, Callback, GenerateSummary, GeneratorConfig, generate


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


def _after_failure(args: argparse.Namespace) -> str:
    """What a generate that stopped half-way left (:func:`mploader.cli.failures.failed`)."""
    return f"{args.out_dir} holds an incomplete broker: once that is fixed, run it again with --overwrite"


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    d = GeneratorConfig()
    p.set_defaults(_after_failure=_after_failure)
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


def run_generate(args: argparse.Namespace) -> int:
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
