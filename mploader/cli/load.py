"""``mploader load DIR...``: load and recover data dirs the way a Kafka broker's start-up does."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from mploader.cli.broker import add_config_arguments, config_setup, config_warnings, with_flags
from mploader.cli.dirs import data_dirs_problem
from mploader.cli.display import terminal_display
from mploader.cli.exit_codes import (
    EXIT_CODES_HELP,
    EXIT_FAILURE,
    EXIT_LOST,
    EXIT_OK,
    EXIT_UNVERIFIED,
    EXIT_USAGE,
    UsageError,
)
from mploader.cli.failures import describe, failed, interrupt_exit_code, stop_reason
from mploader.cli.filters import filter_problem, filtered_result
from mploader.cli.logs import WarningCollector
from mploader.cli.output import SCHEMA_VERSION, fail, print_document, tool, tool_version
from mploader.cli.units import format_bytes, parse_size, parse_workers
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
    p.add_argument("dirs", nargs="*", metavar="DIR", help="data directories (Kafka's log.dirs; default: --config's)")
    add_config_arguments(p)
    p.add_argument("--dry-run", action="store_true",
                   help="report everything recovery would do, with its impact on the data; change nothing")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document (docs/json-output.md), also on failure, instead of the summary")
    p.add_argument("--create-missing", action="store_true",
                   help="create a data dir that does not exist, as a Kafka broker does, or take an existing empty "
                        "one for a new data dir (default: refuse both: a mistyped path is not '0 partitions')")
    p.add_argument("--topic", action="append", default=[], dest="topics", metavar="TOPIC",
                   help="with --dry-run: report only this topic's partitions (repeat for more); the dry run still "
                        "reads every partition, as the load would. Refused without --dry-run (exit 2)")
    p.add_argument("--partition", action="append", default=[], type=int, dest="partitions", metavar="N",
                   help="with --dry-run: report only partition N (of every topic, or of --topic's; repeat for more)")
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
                   help="partitions loaded at once per data dir (num.recovery.threads.per.data.dir: --config's, "
                        "else 1)")
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
    p.add_argument("--index-interval-bytes", type=int, default=None, metavar="B",
                   help="log.index.interval.bytes (--config's, else 4096); a topic's index.interval.bytes wins")
    p.add_argument("--max-index-size", type=int, default=None, metavar="B",
                   help="log.index.size.max.bytes (--config's, else 10485760); a topic's segment.index.bytes wins")
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


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 segment``, ``2 segments``, ``0 segments`` (``words``: an irregular plural)."""
    return f"{n} {word if n == 1 else words or word + 's'}"


def _below_hw_notes(i: Impact) -> list[str]:
    notes = []
    if lost := i.acknowledged_removed:
        notes.append(f"{plural(len(lost), 'ACKNOWLEDGED offset')} LOST ({lost[0]}..{lost[-1]})")
    if missing := i.missing_below_high_watermark:
        notes.append(f"{plural(len(missing), 'acknowledged offset')} ({missing[0]}..{missing[-1]}) "
                     f"{'was' if len(missing) == 1 else 'were'} not on this disk before the load")
    return notes


def _impact_line(lg: LoadedLog, i: Impact) -> str:
    """One partition's impact.  Offsets removed: the log end before and after.  Only invalid bytes cut (a torn tail
    that held no complete batch: ``records_removed`` 0): no "before -> after", since the torn bytes were never a
    record, and the end Kafka's readNextOffset reads from a torn segment may even lie below the end after the cut
    (it stops at the last index entry's torn batch), which would read as offsets gained."""
    if i.records_removed:
        line = (f"    {_log_label(lg)}: log end offset {i.log_end_offset_before} -> {i.log_end_offset_after}; "
                f"{plural(i.records_removed, 'offset')}, {format_bytes(i.bytes_removed)} removed, "
                f"{plural(i.segments_deleted, 'segment')} deleted")
    elif i.changed_data:
        line = (f"    {_log_label(lg)}: log end offset {i.log_end_offset_after}; no record removed: "
                f"{format_bytes(i.bytes_removed)} of invalid bytes cut from its end (a torn tail, no complete batch: "
                f"never a record)" + (f", {plural(i.segments_deleted, 'segment')} without a record deleted"
                                      if i.segments_deleted else ""))
    else:
        line = f"    {_log_label(lg)}: log end offset {i.log_end_offset_after}; nothing removed"
    if i.high_watermark is not None:
        line += f"; high watermark {i.high_watermark}"
        if notes := _below_hw_notes(i):
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


def scanned_by(result: LoadResult) -> str:
    """Who scanned what, from the stats: the worker processes' share and this process's, not the pool's size alone
    ("with 2 worker processes" where the parent made every scan would say what did not happen)."""
    s = result.stats
    if s.loaded_by is not None:
        return f"where the partitions were loaded: {s.loaded_by}"
    if s.workers_per_dir <= 1:
        return "in this process"
    scans = s.segments_scanned
    here = min(scans, s.scans_in_parent + s.inline_fallbacks)
    started = f" ({s.worker_start}ed)" if s.worker_start else ""
    pool = f"{plural(s.workers_per_dir, 'worker process', 'worker processes')} per data dir{started}"
    if scans == 0:
        return f"(nothing to scan: the {pool} scanned none)"
    if here >= scans:
        return (f"in this process, all {plural(scans, 'segment scan')} (each reached before a worker took it: the "
                f"{pool} scanned none)")
    if here == 0:
        return f"by {pool}"
    return f"by {pool}, {here} of the {plural(scans, 'segment scan')} in this process"


def summary_lines(result: LoadResult, dry_run: bool = False, auto_chose_partition_workers: bool = False
                  ) -> list[str]:
    """The text summary.  ``auto_chose_partition_workers``: ``--workers auto`` chose to load whole partitions in
    worker processes (``stats.loaded_by``), which the summary says, since the command did not ask for it."""
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
        if data_dir not in result.offline_dirs and d["partitions"] == 0:
            state += ", but it holds no partition: a new, empty data dir (see the warning)"
        secs = result.stats.dir_seconds.get(data_dir, 0.0)
        lines.append(f"{data_dir}: {state}")
        if data_dir in result.offline_dirs:  # what loaded all the same is counted below
            lines.append("  a broker takes this dir offline (Kafka's LogDirFailureChannel): fix what the line above "
                         "names, then load again")
        lines.append(f"  {'clean' if clean else 'unclean'} shutdown; {plural(d['partitions'], 'partition')}, "
                     f"{plural(d['segments'], 'segment')}; {plural(d['recovered'], 'segment')} {verb}recovered, "
                     f"{format_bytes(d['truncated'])} {verb}truncated, {plural(d['deleted'], 'file')} {verb}deleted; "
                     f"{secs:.2f} s")
        logs = by_dir[data_dir]
        removed = [(lg, i) for lg, i in logs if i.records_removed]
        cut = [(lg, i) for lg, i in logs if i.changed_data and not i.records_removed]
        short = [(lg, i) for lg, i in logs if not i.changed_data and i.missing_below_high_watermark]
        if removed:
            lines.append(f"  records {verb}removed from {plural(len(removed), 'partition')}:")
            lines.extend(_impact_line(lg, i) for lg, i in removed)
        if cut:
            lines.append(f"  invalid bytes {verb}cut, no record removed, in {plural(len(cut), 'partition')}:")
            lines.extend(_impact_line(lg, i) for lg, i in cut)
        if short:  # nothing removed, yet acknowledged offsets not on the disk
            lines.append(f"  acknowledged offsets not on this disk, nothing removed, in "
                         f"{plural(len(short), 'partition')}:")
            lines.extend(_impact_line(lg, i) for lg, i in short)
        if strays := [lg for lg, _ in logs if lg.stray_reason is not None]:  # renamed, as a KRaft broker does
            lines.append(f"  stray logs (not this broker's in the cluster's metadata) {verb}renamed -stray, "
                         f"nothing deleted:")
            lines.extend(f"    {lg.topic_partition}: {lg.stray_reason} -> {lg.dir}" for lg in strays)
        if d["deleted"]:  # what the operator may want to look at, or back up, before the load (or what went)
            lines.append(f"  files {'that would be ' if dry_run else ''}deleted:")
            lines.extend(_deleted_lines([lg for lg, _ in logs if lg.deleted_files]))
    for data_dir, reason in result.offline_dirs.items():
        if data_dir not in result.clean_shutdown:
            lines.append(f"{data_dir}: OFFLINE: {reason}")
    lines.append(_impact_total_line(result, dry_run))
    s = result.stats
    if auto_chose_partition_workers:
        lines.append(f"--workers auto loaded whole partitions (their scans and their recovery) in {s.loaded_by}: "
                     f"this broker has many partitions to recover (--workers N scans for this process instead)")
    lines.append(f"total: {plural(s.partitions, 'partition')}, {plural(s.segments_recovered, 'segment')} "
                 f"{verb}recovered, {format_bytes(s.bytes_read)} scanned {scanned_by(result)}, "
                 f"{s.seconds.get('total', 0.0):.2f} s")
    return lines


def _impact_total_line(result: LoadResult, dry_run: bool) -> str:
    verb = ("would be " if dry_run else "")
    impacts = [lg.impact for lg in result.all_logs()]
    removed = [i for i in impacts if i.records_removed]
    cut = [i for i in impacts if i.changed_data and not i.records_removed]
    if removed:
        line = (f"impact: {plural(sum(i.records_removed for i in removed), 'offset')} and "
                f"{format_bytes(sum(i.bytes_removed for i in removed))} {verb}removed from "
                f"{plural(len(removed), 'partition')}, {plural(sum(i.segments_deleted for i in removed), 'segment')} "
                f"{verb}deleted")
    else:
        line = f"impact: no record {verb}removed"
    if cut:
        line += (f"{'; also' if removed else ';'} {format_bytes(sum(i.bytes_removed for i in cut))} of invalid bytes "
                 f"(torn tails, no complete batch) {verb}cut in {plural(len(cut), 'partition')}")
    if lost := sum(i.lost_below_high_watermark for i in impacts):
        line += (f"; {plural(lost, 'partition')} {'would lose' if dry_run else 'lost'} ACKNOWLEDGED records (below the "
                 f"high watermark)")
    return line


# --------------------------------------------------------------------------------------------
# What a script reads: structured warnings (--json), the exit code


def structured_warnings(result: LoadResult, before: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """What the load found that a script acts on, as objects (docs/json-output.md, ``structured_warnings``): derived
    from the result, not parsed from the log lines (``warnings`` keeps those as text).  ``before``: the command's own,
    made before the load (an option not used, more workers than CPUs)."""
    out: list[dict[str, Any]] = list(before or [])
    for data_dir, reason in result.offline_dirs.items():
        out.append({"kind": "data_dir_offline", "data_dir": data_dir, "message": reason})
    counts: dict[str, int] = defaultdict(int)
    for lg in result.all_logs():
        counts[lg.data_dir] += 1
    for d in result.clean_shutdown:
        if d not in result.offline_dirs and counts[d] == 0:
            out.append({"kind": "no_partitions", "data_dir": d,
                        "message": f"{d} holds no partition directory: a new, empty data dir"})
    for lg in sorted(result.all_logs(), key=lambda lg: (lg.topic, lg.partition, lg.dir)):
        i = lg.impact
        where = {"topic": lg.topic, "partition": lg.partition, "dir": lg.dir, "data_dir": lg.data_dir,
                 "log_kind": lg.kind.value}
        if lost := i.acknowledged_removed:
            out.append({"kind": "acknowledged_records_lost", **where, "first_offset": lost[0], "last_offset": lost[-1],
                        "offsets": len(lost), "high_watermark": i.high_watermark,
                        "log_end_offset_before": i.log_end_offset_before,
                        "log_end_offset_after": i.log_end_offset_after})
        if missing := i.missing_below_high_watermark:
            out.append({"kind": "acknowledged_offsets_missing", **where, "first_offset": missing[0],
                        "last_offset": missing[-1], "offsets": len(missing), "high_watermark": i.high_watermark,
                        "log_end_offset_before": i.log_end_offset_before,
                        "log_end_offset_after": i.log_end_offset_after})
        if i.records_removed:
            out.append({"kind": "records_removed", **where, "first_offset": i.log_end_offset_after,
                        "last_offset": i.log_end_offset_before - 1, "offsets": i.records_removed,
                        "bytes": i.bytes_removed, "segments_deleted": i.segments_deleted})
        elif i.changed_data:
            out.append({"kind": "invalid_bytes_cut", **where, "bytes": i.bytes_removed,
                        "segments_deleted": i.segments_deleted, "log_end_offset_after": i.log_end_offset_after})
        for check in lg.index_checks:
            out.append({"kind": "index_check", **where, "file": check["file"], "problem": check["problem"],
                        "action": check["action"]})
    return out


def lost_acknowledged(result: LoadResult) -> bool:
    return any(lg.impact.lost_below_high_watermark for lg in result.all_logs())


def load_exit_code(result: LoadResult, healthy: bool = True) -> int:
    """1 (a dir offline, or --verify-after found a problem) wins over 4 (acknowledged records lost), 4 over 0."""
    if result.offline_dirs or not healthy:
        return EXIT_FAILURE
    return EXIT_LOST if lost_acknowledged(result) else EXIT_OK


def _check_dirs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The command's own checks before a load: the data dirs (:func:`mploader.cli.dirs.data_dirs_problem`), the
    partition filter, the worker counts; a refusal raises :class:`_Refused` (exit 2), advice comes back as
    structured warnings (logged before the load)."""
    if (why := data_dirs_problem(args.dirs, create_missing=args.create_missing, can_create=True)) is not None:
        raise _Refused(why)
    if args.topics or args.partitions:
        if not args.dry_run:
            raise _Refused("--topic and --partition choose what a dry run reports: a real load recovers every "
                           "partition of its data dirs, as a broker does (a subset would leave the others unrecovered "
                           "once the clean-shutdown marker is gone); add --dry-run, or drop the filter")
        if (why := filter_problem(args.dirs, args.topics, args.partitions)) is not None:
            raise _Refused(why)
    return workers_warnings(args.workers, args.partition_workers, len(args.dirs))


def workers_warnings(workers: int | str, partition_workers: int | str | None, n_dirs: int) -> list[dict[str, Any]]:
    """More worker processes than usable CPUs, said before the load starts them."""
    from mploader.host.cpus import usable_cpus

    cpus = usable_cpus()
    out = []
    if isinstance(workers, int) and workers > cpus and partition_workers is None:
        out.append({"kind": "workers_exceed_cpus", "option": "--workers", "workers": workers, "cpus": cpus,
                    "message": f"--workers {workers} starts up to {workers} scanning processes per data dir "
                               f"({workers * n_dirs} for {plural(n_dirs, 'data dir')}) on {plural(cpus, 'usable CPU')}:"
                               f" more than the CPUs only adds processes to switch between; 'auto' (the default) "
                               f"shares the CPUs among the data dirs"})
    if isinstance(partition_workers, int) and partition_workers > cpus:
        out.append({"kind": "workers_exceed_cpus", "option": "--partition-workers", "workers": partition_workers,
                    "cpus": cpus,
                    "message": f"--partition-workers {partition_workers} starts up to {partition_workers} loading "
                               f"processes on {plural(cpus, 'usable CPU')}: 'auto' starts one per CPU"})
    return out


class _Refused(Exception):
    """A usage error found by the command's own checks (exit 2)."""


def _after_load_warnings(result: LoadResult) -> list[str]:
    counts: dict[str, int] = defaultdict(int)
    for lg in result.all_logs():
        counts[lg.data_dir] += 1
    return [f"{d} holds no partition directory: a new, empty data dir (--create-missing), as a broker's first start "
            f"finds it"
            for d in result.clean_shutdown if d not in result.offline_dirs and counts[d] == 0]


def result_document(result: LoadResult, dry_run: bool, warnings: list[str],
                    before: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    doc = result.to_json()
    return {"schema": SCHEMA_VERSION, "tool": tool(), "command": "load", "dry_run": dry_run,
            "warnings": warnings, "structured_warnings": structured_warnings(result, before),
            **{k: v for k, v in doc.items() if k != "warnings"}}


def run_load(args: argparse.Namespace) -> int:
    try:
        setup = config_setup(args)  # the broker's configuration (--config): the data dirs when none is named
        cfg = with_flags(setup.config, args).replace(
            segment_scan_workers_per_data_dir=args.workers,
            dry_run=args.dry_run, read_ahead_bytes=args.read_ahead, index_check=args.index_check,
            max_read_bytes_per_sec=args.max_read_rate, persist_recovery_points=args.resumable,
        )
        before = config_warnings(setup) + _check_dirs(args)
    except (ValueError, _Refused, UsageError) as e:
        return fail(args, EXIT_USAGE, "usage", str(e))
    extra: dict[str, Any] = {"strays": setup.strays}
    if args.partition_workers is not None:
        if args.max_read_rate is not None:
            return fail(args, EXIT_USAGE, "usage", "--max-read-rate paces the scanning workers; it cannot be honoured "
                                                   "with --partition-workers: choose one")
        from mploader.load_plan import whole_partitions

        extra["partitions"] = whole_partitions(args.partition_workers, cfg)
        if args.workers != "auto":
            before.append({"kind": "option_not_used", "option": "--workers",
                           "message": f"--workers {args.workers} is not used with --partition-workers: each partition "
                                      f"worker scans the partitions it loads itself"})
        if args.recovery_threads is not None:
            before.append({"kind": "option_not_used", "option": "--recovery-threads",
                           "message": f"--recovery-threads {args.recovery_threads} is not used with "
                                      f"--partition-workers: the partition workers load the partitions, as many at "
                                      f"once as there are workers"})
    server = None
    if args.metrics_port is not None:
        registry = extra["metrics"] = MetricsRegistry(keep_history=False)  # served, no history stored
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
                log.warning("%s", w["message"])
            try:
                result = load_logs(args.dirs, cfg, args.now_ms, **extra)
            finally:
                if display is not None:
                    display.close()
                if server is not None:
                    server.stop()  # the load ended: so does the endpoint
            after = _after_load_warnings(result)
            for text in after:
                log.warning("%s", text)
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
    whole = result
    result = filtered_result(result, args.topics, args.partitions)
    doc = result_document(result, args.dry_run, sorted(set(collected.messages)), before) if args.json else None
    if doc is not None and result is not whole:
        doc["filter"] = {"topics": list(args.topics), "partitions": list(args.partitions),
                         "partitions_loaded": len(whole.all_logs())}
    if doc is None:
        if args.dry_run:
            print("dry run: nothing on disk was changed; this is what the load would do")
        auto_chose = whole.stats.loaded_by is not None and args.partition_workers is None
        print("\n".join(summary_lines(result, args.dry_run, auto_chose_partition_workers=auto_chose)), flush=True)
        if result is not whole:
            print(f"filtered (--topic/--partition): {plural(len(result.all_logs()), 'partition')} shown of the "
                  f"{len(whole.all_logs())} the dry run loaded (it read every partition of the data dirs; the totals "
                  f"above are of the whole dry run)")
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
    return load_exit_code(result, healthy)


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
    code = interrupt_exit_code() if stopped else load_exit_code(result)
    if code == EXIT_OK:
        code = EXIT_UNVERIFIED
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
