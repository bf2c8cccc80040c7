"""``mploader verify DIR...``: is this data dir healthy?  Read-only; exit 0 healthy, 1 not, 2 usage
(:data:`mploader.cli.exit_codes.VERIFY_EXIT_CODES_HELP`)."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from typing import Any

from mploader.cli.broker import add_config_arguments, config_setup, log_config_warnings
from mploader.cli.dirs import data_dirs_problem
from mploader.cli.display import terminal_display
from mploader.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, VERIFY_EXIT_CODES_HELP
from mploader.cli.failures import failed
from mploader.cli.filters import filter_problem
from mploader.cli.logs import CHANGE_LOGGERS, quiet_unless_verbose
from mploader.cli.output import fail, print_document, tool_version
from mploader.cli.units import format_bytes, parse_workers
from mploader.scan.audit import SegmentAudit
from mploader.verify import PartitionReport, VerifyReport, verify_logs
from mploader.verify.report import Finding, segment_healthy

AFTER_FAILURE = "verify changes nothing: run it again"


def add_verify_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = VERIFY_EXIT_CODES_HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("dirs", nargs="*", metavar="DIR", help="data directories (Kafka's log.dirs; default: --config's)")
    add_config_arguments(p)
    p.add_argument("--json", action="store_true",
                   help="print one JSON document (docs/verify-output.md) instead of the report")
    p.add_argument("--workers", type=parse_workers, default="auto", metavar="N|auto",
                   help="audit worker processes per data dir: N (1: in this process), or 'auto' (default)")
    p.add_argument("--no-predict", action="store_true",
                   help="do not tell what a load would do (skips the dry run, which re-reads what recovery reads)")
    p.add_argument("--all", action="store_true", help="list healthy partitions too")
    p.add_argument("--topic", action="append", default=[], dest="topics", metavar="TOPIC",
                   help="report only this topic's partitions (repeat for more); every partition is still audited "
                        "(the data dirs' checks and the prediction need them all)")
    p.add_argument("--partition", action="append", default=[], type=int, dest="partitions", metavar="N",
                   help="report only partition N (of every topic, or of --topic's; repeat for more)")
    p.add_argument("--now-ms", type=int, default=None, metavar="MS",
                   help="wall clock for the dry run's producer expiry (default: now)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    p.add_argument("-v", "--verbose", action="count", dest="sub_verbose", default=argparse.SUPPRESS,
                   help="also log what the dry run's load logs (-vv: debug); same as mploader -v")
    p.set_defaults(dry_run=True)  # what the load logs is what it would do: its warnings are marked (cli.logs)
    p.set_defaults(_after_failure=AFTER_FAILURE)  # mploader.cli.failures.failed


def run_verify(args: argparse.Namespace) -> int:
    setup = config_setup(args)  # a usage error raises: main answers it (exit 2)
    why = data_dirs_problem(args.dirs)
    if why is None and (args.topics or args.partitions):
        why = filter_problem(args.dirs, args.topics, args.partitions)
    if why is not None:
        return fail(args, EXIT_USAGE, "usage", why)
    log_config_warnings(setup)
    display = terminal_display(args)
    extra: dict[str, Any] = {} if display is None else {"progress": display}
    try:
        with quiet_unless_verbose(CHANGE_LOGGERS):  # the dry run's warnings (no -v: the report says them)
            cfg = setup.config.replace(segment_scan_workers_per_data_dir=args.workers)
            report = verify_logs(args.dirs, cfg, now_ms=args.now_ms, predict=not args.no_predict, **extra)
    except (KeyboardInterrupt, OSError) as e:  # Ctrl-C or SIGTERM; an I/O error, its file and what to do
        return failed(args, e)
    finally:
        if display is not None:
            display.close()
    report.tool_version = tool_version()
    audited = len(report.partitions)
    report = filtered_report(report, args.topics, args.partitions)
    if args.json:
        doc = {**report.to_json(), "command": "verify"}
        if args.topics or args.partitions:
            doc["filter"] = {"topics": list(args.topics), "partitions": list(args.partitions),
                             "partitions_audited": audited}
        print_document(doc)
    else:
        print("\n".join(report_lines(report, show_all=args.all)))
        if args.topics or args.partitions:
            print(f"filtered (--topic/--partition): {len(report.partitions)} of the {audited} partitions audited "
                  f"are shown and judged; the data dirs' own findings still count")
    return EXIT_OK if report.healthy else EXIT_FAILURE


def filtered_report(report: VerifyReport, topics: list[str], partitions: list[int]) -> VerifyReport:
    """Only the partitions --topic/--partition choose; the data dirs' findings and a start-up failure stay (they
    concern every partition)."""
    if not topics and not partitions:
        return report
    return replace(report, partitions=[p for p in report.partitions if (not topics or p.topic in topics)
                                       and (not partitions or p.partition in partitions)])


# --------------------------------------------------------------------------------------------
# What the operator reads


def report_lines(report: VerifyReport, show_all: bool = False) -> list[str]:
    total = report.seconds.get("total", 0.0)
    segments = sum(len(p.segments) for p in report.partitions)
    rate = f", {format_bytes(report.bytes / report.seconds['audit'])}/s" if report.seconds.get("audit") else ""
    workers = report.workers_per_dir
    lines = [f"verified {len(report.data_dirs)} data dir(s): {len(report.partitions)} partitions, {segments} segments, "
             f"{format_bytes(report.bytes)} in {total:.2f} s{rate} ({workers} worker{'s' * (workers > 1)} per dir)"]
    for d in report.data_dirs:
        lines += [_finding_line(d.path, f) for f in d.findings]
    if report.startup_failure is not None:
        lines.append(f"a Kafka broker would fail to start on these dirs: {report.startup_failure['message']}")
    bad = [p for p in report.partitions if not p.healthy]
    for p in report.partitions:
        if show_all or not p.healthy:
            lines += partition_lines(p)
    if report.healthy and not report.partitions:  # not "HEALTHY" with nothing checked, without saying why
        lines.append(f"HEALTHY, with nothing to check: the data dir(s) hold no partition directory (a new, empty data "
                     f"dir); its own files were checked: {', '.join(d.path for d in report.data_dirs)}")
    elif report.healthy:
        n = len(report.partitions)
        lines.append(f"HEALTHY: every byte of every segment checked in {n} partition{'s' * (n != 1)}: nothing wrong")
    else:
        problems = []
        if dirs_bad := sum(1 for d in report.data_dirs if d.findings):  # a checkpoint, a dir a load takes offline
            problems.append(f"{dirs_bad} of {len(report.data_dirs)} data dir(s)")
        if bad or not dirs_bad:
            problems.append(f"{len(bad)} of {len(report.partitions)} partitions")
        lines.append(f"NOT HEALTHY: {' and '.join(problems)} have problems (listed above)")
    return lines


def _finding_line(data_dir: str, f: Finding) -> str:
    """A data dir's finding, its file named once (a reason that starts with the file's path, or a finding about the
    dir itself, does not repeat it)."""
    what = f.reason if f.file == data_dir or f.reason.startswith(f.file) else f"{f.file}: {f.reason}"
    return f"{data_dir}: {what}"


def partition_lines(p: PartitionReport) -> list[str]:
    state = "ok" if p.healthy else "PROBLEMS"
    lines = [f"{p.topic}-{p.partition} [{state}] ({p.dir}): log end offset {p.log_end_offset}, "
             f"{len(p.segments)} segments, {format_bytes(p.bytes)}"]
    for s in p.segments:
        if not segment_healthy(s):
            lines.append(f"  segment {s.base_offset}: " + "; ".join(_segment_problems(s)))
    lines += [f"  {os.path.basename(f.file)}: {f.reason}" for f in p.findings]
    if p.recovery is not None:
        lines.append("  a load would: " + _recovery_text(p.recovery))
        lines += _left_by_the_load(p, p.recovery)
    return lines


def _left_by_the_load(p: PartitionReport, r: dict[str, Any]) -> list[str]:
    """The damaged segments the predicted load does not touch, and what does fix them, so that "a load would"
    is not read as "a load would fix this"."""
    touched = {*r["recovered_segments"], *r["deleted_segments"], *(t["base_offset"] for t in r["truncated_segments"])}
    left = [s for s in p.segments if not segment_healthy(s) and s.base_offset not in touched]
    # a missing .timeindex is created by the load itself (a missing .index has its segment recovered: touched)
    indexes = [str(s.base_offset) for s in left if s.first_invalid_position is None
               and (s.index not in ("ok", "missing") or s.timeindex not in ("ok", "missing"))]
    records = [str(s.base_offset) for s in left if s.first_invalid_position is not None]
    out = []
    if indexes:
        out.append(f"  a load leaves the .index / .timeindex of segment(s) {', '.join(indexes)} as they are (at "
                   f"start-up Kafka rebuilds an index only where it recovers the segment or finds its .index "
                   f"missing): `mploader load --index-check full` rebuilds them")
    if records:
        out.append(f"  a load leaves segment(s) {', '.join(records)} as they are: Kafka's start-up does not read them")
    return out


def _segment_problems(s: SegmentAudit) -> list[str]:
    out = []
    if s.first_invalid_position is not None:
        out.append(f"invalid from byte {s.first_invalid_position} of {s.size_bytes} ({s.reason})")
    for name, verdict in ((".index", s.index), (".timeindex", s.timeindex), (".txnindex", s.txnindex)):
        if verdict != "ok" and not (name == ".txnindex" and verdict == "missing"):
            out.append(f"{name} {verdict}")
    return out


def _recovery_text(r: dict[str, Any]) -> str:
    parts = []
    if r["recovered_segments"]:
        parts.append(f"recover {len(r['recovered_segments'])} segment(s)")
    parts += [f"truncate segment {t['base_offset']} from {t['from_bytes']} to {t['to_bytes']} bytes"
              for t in r["truncated_segments"]]
    if r["deleted_segments"]:
        parts.append(f"delete segment(s) {', '.join(map(str, r['deleted_segments']))}")
    impact = r["impact"]
    if impact["records_removed"]:
        parts.append(f"log end offset {impact['log_end_offset_before']} -> {impact['log_end_offset_after']} "
                     f"({impact['records_removed']} offsets removed)")
    if impact["lost_below_high_watermark"]:
        parts.append(f"ACKNOWLEDGED RECORDS LOST below the high watermark {impact['high_watermark']}")
    return ", ".join(parts) if parts else "change no data"


__all__ = ["add_verify_arguments", "report_lines", "run_verify"]
