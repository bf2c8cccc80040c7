"""``mploader spark verify|load DIR... [--master URL] --out PATH``: the fleet job (mploader.spark.fleet).

Prints what the single-host command prints, broker by broker (``verify``: one report; ``--json``: the same
document as ``mploader verify --json``, plus a ``"spark"`` member with the run's id), and appends the segment
inventory and the per-partition summary to the fleet history under ``--out`` (Parquet, partitioned by run date;
an ``--out`` holding the unpartitioned output of an earlier mploader is refused, exit 2).  ``load`` is a dry run
unless ``--apply``.
Exit codes (:data:`mploader.cli.exit_codes.SPARK_EXIT_CODES_HELP`): 0 healthy / loaded, 1 something is wrong (verify) or
a broker would not start (load), 2 usage (the data dirs are checked as ``mploader load`` checks them, before Spark
starts), 4 a load lost (would lose) acknowledged records.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from mploader.cli.broker import add_config_arguments, config_setup, log_config_warnings
from mploader.cli.dirs import data_dirs_problem
from mploader.cli.exit_codes import EXIT_FAILURE, EXIT_LOST, EXIT_OK, EXIT_USAGE, SPARK_EXIT_CODES_HELP
from mploader.cli.failures import interrupted
from mploader.cli.load import lost_acknowledged, result_document, summary_lines
from mploader.cli.logs import CHANGE_LOGGERS, quiet_unless_verbose
from mploader.cli.output import SCHEMA_VERSION, error_document, fail, print_document, tool, tool_version
from mploader.cli.verify import report_lines
from mploader.errors import MploaderError
from mploader.spark.jobs import EXECUTOR_TIMEOUT

# what verify's predictions (dry-run loads) log: their warnings are in the report already (-v shows them); a load
# logs its WARN lines as `mploader load` does
_QUIET_LOGGERS = {"verify": (*CHANGE_LOGGERS, "py4j"), "load": ("py4j",)}


def add_spark_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = SPARK_EXIT_CODES_HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = p.add_subparsers(dest="spark_command", metavar="verify|load", required=True)
    for name, text in (("verify", "audit every segment of every broker's dirs on Spark (read-only)"),
                       ("load", "load every broker's dirs with Phase 1 on Spark (a dry run unless --apply)")):
        q = sub.add_parser(name, help=text, description=text, epilog=SPARK_EXIT_CODES_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        q.set_defaults(_prog=q.prog)  # "mploader spark verify" in its messages (output.fail)
        q.add_argument("dirs", nargs="*", metavar="DIR", help="data directories of one or more brokers (grouped "
                       "by their meta.properties' node.id); the executors must see them at the same paths, which "
                       "each task checks (default: --config's log.dirs)")
        add_config_arguments(q)
        q.add_argument("--master", metavar="URL", default=None,
                       help="Spark master (default: spark-submit's, else local[*])")
        q.add_argument("--out", metavar="PATH", required=True,
                       help="the fleet history to append this run to: inventory/ and summary/ (Parquet, partitioned by "
                            "run_date; a path the driver's Spark can write)")
        q.add_argument("--json", action="store_true", help="print one JSON document instead of the summary")
        q.add_argument("--json-out", metavar="PATH", default=None,
                       help="also write the JSON document to PATH (under spark-submit, whose Python driver's stderr "
                            "Spark copies to stdout with its stdout, the document to parse)")
        q.add_argument("--conf", metavar="KEY=VALUE", action="append", default=[],
                       help="a Spark property for the session mploader makes (repeatable; as spark-submit's --conf)")
        q.add_argument("--driver-fallback", action="store_true",
                       help="when a Spark job fails, do its work in the driver (default: the command fails)")
        q.add_argument("--executor-timeout", type=float, default=EXECUTOR_TIMEOUT, metavar="S",
                       help=f"end a Spark job none of whose tasks runs or completes for S seconds (no executor); "
                            f"0: wait forever (default: {EXECUTOR_TIMEOUT:g})")
        q.add_argument("--now-ms", type=int, default=None, metavar="MS",
                       help="wall clock for producer expiry (default: now)")
        q.add_argument("-v", "--verbose", action="count", dest="sub_verbose", default=argparse.SUPPRESS,
                       help="-v: INFO lines and Spark's own log (WARN); -vv: DEBUG and Spark's INFO")
        if name == "load":
            q.add_argument("--apply", action="store_true",
                           help="recover the dirs (default: a dry run that changes nothing)")


def run_spark(args: argparse.Namespace) -> int:
    setup = config_setup(args)  # every broker is loaded with this configuration
    if (why := data_dirs_problem(args.dirs)) is not None:
        return _fail(args, EXIT_USAGE, "usage", why)
    try:
        from mploader.spark import fleet
        from mploader.spark.output import history_problem
        from mploader.spark.session import parse_conf, spark_session
    except ImportError as e:
        return _fail(args, EXIT_USAGE, "usage", f"{e}: install the spark extra (pip install 'mploader[spark]')")
    try:
        conf = parse_conf(args.conf)
    except ValueError as e:
        return _fail(args, EXIT_USAGE, "usage", str(e))
    policy = fleet.JobPolicy(args.driver_fallback, args.executor_timeout or None)
    log_config_warnings(setup)
    t0 = time.perf_counter()
    try:
        with quiet_unless_verbose(_QUIET_LOGGERS[args.spark_command]):
            spark = spark_session(args.master, f"mploader spark {args.spark_command}",
                                  verbosity=args.verbose + vars(args).get("sub_verbose", 0), conf=conf)
            if (why := history_problem(spark, args.out)) is not None:  # before any work (a load that applied)
                return _fail(args, EXIT_USAGE, "usage", why)
            if args.spark_command == "verify":
                run = fleet.verify(spark, args.dirs, setup.config, now_ms=args.now_ms, policy=policy)
                tables = run.tables
                ran: dict[str, Any] = {**fleet.where_it_ran(run.engines), "brokers": len(run.reports),
                                       "spark_jobs": run.spark_jobs,
                                       "predictions": fleet.where_it_ran(run.predictions)}
            else:
                loaded = fleet.load(spark, args.dirs, setup.config, apply=args.apply, now_ms=args.now_ms,
                                    policy=policy)
                tables = loaded.tables
                ran = {**fleet.where_it_ran(loaded.engines), "brokers": len(loaded.results),
                       "spark_jobs": loaded.spark_jobs}
            paths = tables.write(args.out)
            master, app = spark.sparkContext.master, spark.sparkContext.appName
            held = spark.sparkContext.getConf()
            given = {key: held.get(key) for key in conf}  # --conf as the session has it
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM
        return interrupted(args, "run it again (verify and a dry run change nothing; an applied load is finished "
                                 "by a rerun)")
    except (OSError, ValueError, MploaderError) as e:  # e.g. SparkJobFailed: a rerun completes an applied load
        return _fail(args, EXIT_FAILURE, "error", str(e))
    unit = "segment(s) or chunk(s)" if args.spark_command == "verify" else "partition(s)"
    spark_info = {"run_id": tables.run.run_id, "run_time": tables.run.run_time.isoformat(), "master": master,
                  "app_name": app, "conf": given, "seconds": time.perf_counter() - t0, "inventory": paths[0],
                  "summary": paths[1], "inventory_rows": tables.inventory_rows, "summary_rows": tables.summary_rows,
                  "unit": unit.replace("(s)", "s"), **ran}
    if tables.made_by:  # a load: its partitions' rows made by the tasks that loaded them, or by the driver
        spark_info["rows_made_by"] = tables.made_by
    wrote = (f"run {tables.run.run_id}: appended {tables.inventory_rows} inventory rows to {paths[0]} and "
             f"{tables.summary_rows} summary rows to {paths[1]} (Spark {master}, {spark_info['seconds']:.1f} s, "
             f"{ran['spark_jobs']} Spark job(s) for {ran['brokers']} broker(s); {ran['on_executors']} {unit} on the "
             f"executors, {ran['in_driver']} in the driver)")
    if args.spark_command == "verify":
        report = run.report
        report.tool_version = tool_version()
        _answer(args, {**report.to_json(), "command": "verify", "spark": spark_info},
                [*report_lines(report), wrote])
        return EXIT_OK if report.healthy else EXIT_FAILURE
    return _print_load(args, loaded, spark_info, wrote)


def _fail(args: argparse.Namespace, code: int, kind: str, message: str) -> int:
    """:func:`mploader.cli.output.fail`, and its error document to ``--json-out``'s file."""
    if args.json_out is not None:
        _write_json(args.json_out, error_document(kind, message, exit_code=code))
    return fail(args, code, kind, message)


def _write_json(path: str, doc: dict[str, Any]) -> None:
    """``doc`` to ``path``, whole or not at all (written beside it, then renamed)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        print_document(doc, f)
    os.replace(tmp, path)


def _answer(args: argparse.Namespace, doc: dict[str, Any], lines: list[str]) -> None:
    """The document on stdout (``--json``) or the lines; and the document to ``--json-out``'s file."""
    if args.json_out is not None:
        _write_json(args.json_out, doc)
    if args.json:
        print_document(doc)
    else:
        print("\n".join(lines))


def _print_load(args: argparse.Namespace, loaded: Any, spark_info: dict[str, Any], wrote: str) -> int:
    dry_run = not args.apply
    failed = lost = False
    docs: list[dict[str, Any]] = []
    lines = [] if args.apply else ["dry run: nothing on disk was changed; this is what the load would do"]
    for (dirs, result), warnings in zip(loaded.results, loaded.warnings, strict=True):
        if isinstance(result, Exception):
            failed = True
            message = f"a Kafka broker would fail to start on this input: {result}"
            docs.append({"dirs": dirs, "error": {"kind": "startup_failed", "message": message,
                                                 "kafka_exception": getattr(result, "kafka_exception", None)}})
            lines.append(f"broker {', '.join(dirs)}: {message}")
            continue
        failed = failed or bool(result.offline_dirs)
        lost = lost or lost_acknowledged(result)
        docs.append({"dirs": dirs, **result_document(result, dry_run, warnings)})
        lines.extend(summary_lines(result, dry_run))
    _answer(args, {"schema": SCHEMA_VERSION, "tool": tool(), "command": "spark load", "dry_run": dry_run,
                   "brokers": docs, "spark": spark_info}, [*lines, wrote])
    return EXIT_FAILURE if failed else EXIT_LOST if lost else EXIT_OK


__all__ = ["add_spark_arguments", "run_spark"]
