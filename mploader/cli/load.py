"""``mploader load DIR...``: load and recover data dirs the way a Kafka broker's start-up does."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from mploader.cli.dirs import looks_like_partition_dir, refuse_data_dir_parents
from mploader.cli.display import terminal_display
from mploader.cli.failures import describe, failed, interrupt_exit_code, stop_reason
from mploader.cli.logs import WarningCollector
from mploader.cli.output import SCHEMA_VERSION, fail, print_document, tool, tool_version
from mploader.cli.units import (
    EXIT_CODES_HELP,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_UNVERIFIED,
    EXIT_USAGE,
    format_bytes,
    parse_size,
    parse_workers,
)
from mploader.config import INDEX_CHECKS, LoaderConfig
from mploader.errors import CorruptFileError, MploaderError, StartupFailedError
from mploader.format.names import DirKind
from mploader.manager import load_logs, written_dirs
from mploader.metrics import MetricsRegistry
from mploader.prometheus import DEFAULT_ADDRESS, MetricsServer
from mploader.result import Impact, LoadedLog, LoadResult

if TYPE_CHECKING:  # --verify-after's modules are imported when it is asked for (start-up time of every load)
    from mploader.verify import VerifyReport

log = logging.getLogger("mploader.cli")


def _port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--metrics-port takes a port number, not {text!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError("--metrics-port must be between 0 and 65535")
    return n


def _workers(text: str) -> int | str:
    return parse_workers(text, words=("auto", "adaptive"))


def _read_ahead(text: str) -> int | str:
    if text == "auto":
        return "auto"
    return parse_size(text)


def after_failure(args: argparse.Namespace) -> str:
    """What a load that stopped half-way left, and what to do (the command's failures end with it)."""
    if args.dry_run:
        return "a dry run changes nothing: run it again"
    return ("what the load wrote before it stopped is what a Kafka broker itself could have left: load again to "
            "finish the recovery")


def add_load_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXIT_CODES_HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.set_defaults(_after_failure=after_failure)  # mploader.cli.failures.failed
    p.add_argument("dirs", nargs="+", metavar="DIR", help="data directories (Kafka's log.dirs)")
    p.add_argument("--dry-run", action="store_true",
                   help="report everything recovery would do, with its impact on the data; change nothing")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document (docs/json-output.md), also on failure, instead of the summary")
    p.add_argument("--create-missing", action="store_true",
                   help="create a data dir that does not exist, as a Kafka broker does (default: refuse it)")
    p.add_argument("--workers", type=_workers, default="auto", metavar="N|auto|adaptive",
                   help="scan worker processes per data dir: N (1 scans in this process), or 'auto' (default): the "
                        "usable CPUs divided among the data dirs, in this process when a dir has too little to scan "
                        "for them to pay for their start and its segments (under ~0.7 GB for 2 workers, 0.4 GB for 16, "
                        "more in small segments or over several dirs); 'adaptive': up "
                        "to twice that many (at least 2), as many as raise the throughput while the dir's device is "
                        "under 90%% busy, fewer when it is saturated")
    p.add_argument("--partition-workers", type=lambda t: parse_workers(t, "--partition-workers"), default=None,
                   metavar="N|auto",
                   help="load whole partitions, their scans and their recovery, in N worker processes ('auto': one "
                        "per usable CPU) instead of scanning in workers for this process's recovery: for brokers of "
                        "many partitions to recover, where recovering one partition after another is most of the "
                        "load (--workers and --recovery-threads then do not apply)")
    p.add_argument("--max-read-rate", type=parse_size, default=None, metavar="SIZE",
                   help="per data dir, the most bytes scanned per second (e.g. 200MB), so that recovery on a live "
                        "host leaves its disks to the other tenants; default: no limit")
    p.add_argument("--recovery-threads", type=int, default=None, metavar="N",
                   help="partitions loaded at once per data dir (num.recovery.threads.per.data.dir, default 1)")
    p.add_argument("--read-ahead", type=_read_ahead, default="auto", metavar="SIZE|auto",
                   help="per data dir, how far ahead of the scans the disk is asked to read (e.g. 512MiB); 0: off; "
                        "'auto' (default): 256 MiB beyond what the workers hold, at most a quarter of free memory")
    p.add_argument("--verify-after", action="store_true",
                   help="after the load, audit every segment it did not read (mploader verify's checks, newest "
                        "first) and report what is wrong; changes nothing (KIP-263's lazy start, done safely)")
    p.add_argument("--resumable", action="store_true",
                   help="advance each partition's entry in recovery-point-offset-checkpoint to its log end offset "
                        "once its recovered files are on disk, so that a load killed half-way, or the broker's next "
                        "start, does not recover it again (Kafka's own load leaves the recovery points where they "
                        "were)")
    p.add_argument("--index-check", choices=INDEX_CHECKS, default="kafka",
                   help="indexes of the segments the load does not recover: 'kafka' (default) leaves them unread, as "
                        "Kafka does; 'sanity' runs older brokers' index sanity checks, 'full' mploader verify's "
                        "checks against the batches (it reads every segment); an index that fails is rebuilt from "
                        "its log, the data stays Kafka's")
    p.add_argument("--index-interval-bytes", type=int, default=4096, metavar="B", help="log.index.interval.bytes")
    p.add_argument("--max-index-size", type=int, default=10485760, metavar="B", help="log.index.size.max.bytes")
    p.add_argument("--now-ms", type=int, default=None, metavar="MS",
                   help="wall clock for producer expiry (default: now)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars on stderr (there are none when stderr is not a terminal, or with --json)")
    p.add_argument("--metrics-port", type=_port, default=None, metavar="PORT",
                   help="while the load runs, serve its gauges (Kafka's remainingLogsToRecover, "
                        "remainingSegmentsToRecover, remainingSegmentsToLoad; bytes to recover, recovered, ETA) "
                        "for Prometheus on http://ADDRESS:PORT/metrics (0: a free port, logged)")
    p.add_argument("--metrics-address", default=DEFAULT_ADDRESS, metavar="ADDRESS",
                   help=f"the address --metrics-port listens on (default {DEFAULT_ADDRESS}; 0.0.0.0: every interface)")
    p.add_argument("-v", "--verbose", action="count", dest="sub_verbose", default=argparse.SUPPRESS,
                   help="log what the loader does as a broker logs it (-vv: debug); same as mploader -v")


# --------------------------------------------------------------------------------------------
# What the operator reads


def _log_label(lg: LoadedLog) -> str:
    """The partition, and which of its dirs when it is not the live one (a -future or -delete dir)."""
    return f"{lg.topic_partition}{'' if lg.kind is DirKind.LIVE else f' ({lg.kind.value})'}"


def _impact_line(lg: LoadedLog, i: Impact) -> str:
    line = (f"    {_log_label(lg)}: log end offset "
            f"{i.log_end_offset_before} -> {i.log_end_offset_after}; {i.records_removed} offsets, "
            f"{format_bytes(i.bytes_removed)} removed, {i.segments_deleted} segments deleted")
    if i.high_watermark is not None:
        line += f"; high watermark {i.high_watermark}"
        notes = []
        if lost := i.acknowledged_removed:
            notes.append(f"{len(lost)} ACKNOWLEDGED offsets LOST ({lost[0]}..{lost[-1]})")
        if missing := i.missing_below_high_watermark:
            notes.append(f"{len(missing)} acknowledged offsets ({missing[0]}..{missing[-1]}) were not on this disk "
                         f"before the load")
        if notes:
            line += ": " + "; ".join(notes)
    return line


SHOWN_DELETES = 6  # file names shown a partition (--json lists every one)
SHOWN_PARTITIONS = 20  # partitions whose deletes are shown a data dir


def _deleted_lines(logs: list[LoadedLog]) -> list[str]:
    lines = []
    for lg in logs[:SHOWN_PARTITIONS]:
        names_ = sorted(lg.deleted_files)
        more = f" and {len(names_) - SHOWN_DELETES} more" if len(names_) > SHOWN_DELETES else ""
        lines.append(f"    {_log_label(lg)}: {', '.join(names_[:SHOWN_DELETES])}{more}")
    if len(logs) > SHOWN_PARTITIONS:
        lines.append(f"    ... and in {len(logs) - SHOWN_PARTITIONS} more partitions (--json lists every file)")
    return lines


def summary_lines(result: LoadResult, dry_run: bool = False) -> list[str]:
    per_dir: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_dir: dict[str, list[tuple[LoadedLog, Impact]]] = defaultdict(list)
    for lg in sorted(result.all_logs(), key=lambda lg: (lg.topic, lg.partition, lg.dir)):
        d = per_dir[lg.data_dir]
        d["partitions"] += 1
        d["segments"] += len(lg.segments)
        d["recovered"] += len(lg.recovered_segments)
        d["truncated"] += lg.truncated_bytes
        d["deleted"] += len(lg.deleted_files)
        by_dir[lg.data_dir].append((lg, lg.impact))
    verb = ("would be " if dry_run else "")
    lines = []
    for data_dir, clean in result.clean_shutdown.items():
        d = per_dir[data_dir]
        state = "OFFLINE: " + result.offline_dirs[data_dir] if data_dir in result.offline_dirs else "loaded"
        secs = result.stats.dir_seconds.get(data_dir, 0.0)
        lines.append(f"{data_dir}: {state}")
        if data_dir in result.offline_dirs:  # what loaded all the same is counted below
            lines.append("  a broker takes this dir offline (Kafka's LogDirFailureChannel): fix what the line above "
                         "names, then load again")
        lines.append(f"  {'clean' if clean else 'unclean'} shutdown; {d['partitions']} partitions, "
                     f"{d['segments']} segments; {d['recovered']} segments {verb}recovered, "
                     f"{format_bytes(d['truncated'])} {verb}truncated, {d['deleted']} files {verb}deleted; "
                     f"{secs:.2f} s")
        logs = by_dir[data_dir]
        changed = [(lg, i) for lg, i in logs if i.changed_data]
        short = [(lg, i) for lg, i in logs if not i.changed_data and i.missing_below_high_watermark]
        if changed:
            lines.append(f"  data {verb}removed from {len(changed)} partition(s):")
            lines.extend(_impact_line(lg, i) for lg, i in changed)
        if short:  # nothing removed, yet acknowledged offsets not on the disk
            lines.append(f"  acknowledged offsets not on this disk, nothing removed, in {len(short)} partition(s):")
            lines.extend(_impact_line(lg, i) for lg, i in short)
        if dry_run and d["deleted"]:  # what the operator may want to look at, or back up, before the load
            lines.append("  files that would be deleted:")
            lines.extend(_deleted_lines([lg for lg, _ in logs if lg.deleted_files]))
    for data_dir, reason in result.offline_dirs.items():
        if data_dir not in result.clean_shutdown:
            lines.append(f"{data_dir}: OFFLINE: {reason}")
    t = result.impact_total()
    if t["partitions_changed"]:
        impact = (f"impact: {t['records_removed']} offsets and {format_bytes(t['bytes_removed'])} {verb}removed from "
                  f"{t['partitions_changed']} partition(s), {t['segments_deleted']} segments {verb}deleted")
        if t["partitions_lost_below_high_watermark"]:
            impact += (f"; {t['partitions_lost_below_high_watermark']} partition(s) "
                       f"{'would lose' if dry_run else 'lost'} ACKNOWLEDGED records (below the high watermark)")
        lines.append(impact)
    else:
        lines.append(f"impact: no record {verb}removed")
    s = result.stats
    how = ("in this process" if s.workers_per_dir <= 1
           else f"with {s.workers_per_dir} worker processes per data dir"
           + (f" ({s.worker_start}ed)" if s.worker_start else ""))
    if s.loaded_by is not None:
        how = f"where the partitions were loaded: {s.loaded_by}"
    lines.append(f"total: {s.partitions} partitions, {s.segments_recovered} segments {verb}recovered, "
                 f"{format_bytes(s.bytes_read)} scanned {how}, {s.seconds.get('total', 0.0):.2f} s")
    return lines


def _check_dirs(args: argparse.Namespace) -> list[str]:
    """The command's own checks before a load (:mod:`mploader.cli.dirs`): a data dir that does not exist is refused
    (a broker would create it; ``--create-missing`` does too), and so is the parent of data dirs; one that looks like
    a partition directory is warned about."""
    missing = [d for d in args.dirs if not os.path.lexists(d)]
    if missing and not args.create_missing:
        raise _Refused(f"no such data directory: {', '.join(missing)} (a Kafka broker would create it, empty; "
                       f"to do that too, add --create-missing)")
    if (why := refuse_data_dir_parents(args.dirs)) is not None:
        raise _Refused(why)
    warnings = []
    for d in args.dirs:
        if looks_like_partition_dir(d):
            warnings.append(f"{os.path.abspath(d)} looks like a partition directory, not a data dir (log.dirs): "
                            f"did you mean {os.path.dirname(os.path.abspath(os.path.normpath(d)))}?")
    return warnings


class _Refused(Exception):
    """A usage error found by the command's own checks (exit 2)."""


def _after_load_warnings(result: LoadResult) -> list[str]:
    counts: dict[str, int] = defaultdict(int)
    for lg in result.all_logs():
        counts[lg.data_dir] += 1
    return [f"{d} holds no partition directory: is it a Kafka data dir (log.dirs)?"
            for d in result.clean_shutdown if d not in result.offline_dirs and counts[d] == 0]


def result_document(result: LoadResult, dry_run: bool, warnings: list[str]) -> dict[str, Any]:
    doc = result.to_json()
    return {"schema": SCHEMA_VERSION, "tool": tool(), "command": "load", "dry_run": dry_run,
            "warnings": warnings, **{k: v for k, v in doc.items() if k != "warnings"}}


def run_load(args: argparse.Namespace) -> int:
    try:
        cfg = LoaderConfig(
            num_recovery_threads_per_data_dir=1 if args.recovery_threads is None else args.recovery_threads,
            num_segment_loading_threads_per_data_dir=args.workers,
            index_interval_bytes=args.index_interval_bytes, max_index_size=args.max_index_size,
            dry_run=args.dry_run, read_ahead_bytes=args.read_ahead, index_check=args.index_check,
            max_read_bytes_per_sec=args.max_read_rate, persist_recovery_points=args.resumable,
        )
        before = _check_dirs(args)
    except (ValueError, _Refused) as e:
        return fail(args, EXIT_USAGE, "usage", str(e))
    extra: dict[str, Any] = {}
    if args.partition_workers is not None:
        if args.max_read_rate is not None:
            return fail(args, EXIT_USAGE, "usage", "--max-read-rate paces the scanning workers; it cannot be kept "
                                                   "with --partition-workers: choose one")
        from mploader.engine.select import usable_cpus
        from mploader.partition_pool import ProcessPartitions

        n = args.partition_workers
        extra["partitions"] = ProcessPartitions(usable_cpus() if n == "auto" else n)
        if args.workers != "auto":
            before.append(f"--workers {args.workers} is not used with --partition-workers: each partition worker "
                          f"scans the partitions it loads itself")
        if args.recovery_threads is not None:
            before.append(f"--recovery-threads {args.recovery_threads} is not used with --partition-workers: the "
                          f"partition workers load the partitions, as many at once as there are workers")
    server = None
    if args.metrics_port is not None:
        registry = extra["metrics"] = MetricsRegistry(keep_history=False)  # served, not kept
        try:
            server = MetricsServer(registry, args.metrics_port, args.metrics_address).start()
        except OSError as e:
            return fail(args, EXIT_USAGE, "usage", f"cannot serve metrics on {args.metrics_address} port "
                                                   f"{args.metrics_port}: {e}")
        if args.metrics_port == 0:  # the port the system chose: say which
            print(f"mploader load: serving metrics on {server.url}", file=sys.stderr)
    display = terminal_display(args)
    if display is not None:
        extra["progress"] = display
    try:
        with WarningCollector() as collected:
            for w in before:
                log.warning("%s", w)
            try:
                result = load_logs(args.dirs, cfg, args.now_ms, **extra)
            finally:
                if display is not None:
                    display.close()
                if server is not None:
                    server.stop()  # the load ended: so does the endpoint
            after = _after_load_warnings(result)
            for w in after:
                log.warning("%s", w)
    except StartupFailedError as e:
        notes = getattr(e, "__notes__", [])
        message = "; ".join([f"a Kafka broker would fail to start on this input: {e}", *notes])
        if not args.dry_run and written_dirs(e) is None:
            message += " (found before the load wrote anything: nothing was changed)"
        return fail(args, EXIT_FAILURE, "startup_failed", message, kafka_exception=e.kafka_exception,
                    path=e.path, written_dirs=written_dirs(e))
    except CorruptFileError as e:
        return fail(args, EXIT_FAILURE, "corrupt_file", str(e), path=e.path, position=e.position)
    except (KeyboardInterrupt, MploaderError, OSError) as e:  # Ctrl-C, SIGTERM; an error: its file, what to do
        return failed(args, e)
    doc = result_document(result, args.dry_run, sorted(set(collected.messages))) if args.json else None
    if doc is None:
        if args.dry_run:
            print("dry run: nothing on disk was changed; this is what the load would do")
        print("\n".join(summary_lines(result, args.dry_run)), flush=True)
    healthy = True
    if args.verify_after:
        try:
            report = _verify_after(args, result, cfg)
        except (Exception, KeyboardInterrupt) as e:  # the load stands: its result, and why it is not verified
            return _unverified(args, result, doc, e)
        healthy = report.healthy
        if doc is not None:
            doc["verification"] = {**report.to_json(), "seconds": {"load": result.stats.seconds.get("total", 0.0),
                                                                     "verify": report.seconds.get("total", 0.0)}}
        else:
            print("\n".join(_verification_lines(result, report)))
    if doc is not None:
        print_document(doc)
    return EXIT_FAILURE if result.offline_dirs or not healthy else EXIT_OK


def _verify_after(args: argparse.Namespace, result: LoadResult, cfg: LoaderConfig) -> VerifyReport:
    """``--verify-after``: the inactive segments audited in the background, waited for with a progress display."""
    from mploader.verify.background import BackgroundVerification

    display = terminal_display(args)
    background = BackgroundVerification(result, cfg, progress=display)
    try:
        report = background.wait()
    except BaseException:
        background.cancel()
        raise
    finally:
        if display is not None:
            display.close()
    assert report is not None
    report.tool_version = tool_version()
    return report


def _unverified(args: argparse.Namespace, result: LoadResult, doc: dict[str, Any] | None,
                error: BaseException) -> int:
    """``--verify-after`` could not run, or was stopped: the load's result (``--json``: the document, with a
    ``verification_error``; else the summary printed already) and why the check did not run.  Exit 3, or 130/143
    when a signal stopped it (a data dir offline makes it 1 instead of 3)."""
    stopped = isinstance(error, KeyboardInterrupt)
    code = interrupt_exit_code() if stopped else EXIT_FAILURE if result.offline_dirs else EXIT_UNVERIFIED
    kind, why, path = ("interrupted", stop_reason(), None) if stopped else describe(error)
    verify = shlex.join(["mploader", "verify", *(["--workers", "1"] if kind == "io_error" else []), *args.dirs])
    message = (f"the load finished and its result stands{'' if doc is not None else ' (above)'}, but the check "
               f"after it (--verify-after) did not complete: {why}; to check the data dirs later: {verify}")
    if doc is None:
        print(f"{args._prog}: {message}", file=sys.stderr)
    else:
        doc["verification_error"] = {"kind": kind, "message": message, "path": path, "exit_code": code}
        print_document(doc)
    return code


def _verification_lines(result: LoadResult, report: VerifyReport) -> list[str]:
    from mploader.cli.verify import partition_lines

    segments = sum(len(p.segments) for p in report.partitions)
    took = result.stats.seconds.get("total", 0.0)
    lines = [f"verified after the load: {segments} segments the load did not read, {format_bytes(report.bytes)} "
             f"in {report.seconds.get('total', 0.0):.2f} s (the load took {took:.2f} s)"]
    lines += [line for p in report.partitions if not p.healthy for line in partition_lines(p)]
    lines.append("verification: nothing wrong" if report.healthy else
                 f"verification: PROBLEMS in {sum(not p.healthy for p in report.partitions)} partition(s) (above); "
                 "the load did not act on them (Kafka would not either)")
    return lines
