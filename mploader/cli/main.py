"""The ``mploader`` command.

Subcommands live in :data:`COMMANDS`, a table of name -> :class:`Command` (help text, a function
that adds the subcommand's arguments, a function that runs it and returns the exit code).  Adding
one means a module beside :mod:`.load` and :mod:`.generate` with those two functions, and one table
entry; :func:`main` needs no change.  Only the ``cli`` package prints.

Exit codes (:data:`mploader.cli.units.EXIT_CODES_HELP`): 0 success, 1 failure while running, 2 usage error
(bad arguments or configuration), 130 interrupted.  With ``--json`` a failure, a usage error included, prints a
JSON error document on stdout (:mod:`.output`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from mploader.cli.cleanup import add_cleanup_arguments, run_cleanup
from mploader.cli.experiment import add_experiment_arguments, run_experiment
from mploader.cli.generate import add_generate_arguments, run_generate
from mploader.cli.load import add_load_arguments, run_load
from mploader.cli.logs import setup_logging
from mploader.cli.output import error_document, print_document, tool_version
from mploader.cli.spark import add_spark_arguments, run_spark
from mploader.cli.sweep import add_sweep_arguments, run_sweep_command
from mploader.cli.units import EXIT_CODES_HELP, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, UsageError
from mploader.cli.verify import add_verify_arguments, run_verify

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
        add_generate_arguments, run_generate,
    ),
    "load": Command("load and recover data dirs as a Kafka broker's start-up does", add_load_arguments, run_load),
    "verify": Command("check every byte of every segment, index and checkpoint; read-only; say what a load would do",
                      add_verify_arguments, run_verify),
    "cleanup": Command("remove the shared memory that killed loads left in /dev/shm (safe while others run)",
                       add_cleanup_arguments, run_cleanup),
    "spark": Command("verify or load many brokers' data dirs with Phase 1 on a Spark cluster (Parquet inventory)",
                     add_spark_arguments, run_spark),
    "sweep": Command("load a broker with 1..N worker processes, sampling disk %%util, CPU and memory; plots and a "
                     "report", add_sweep_arguments, run_sweep_command),
    "experiment": Command("run a named experiment (hdd-vs-ssd: seed 002's restart on a disk, a throttled loop "
                          "device and tmpfs)", add_experiment_arguments, run_experiment),
}


class _ArgumentError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    """Raises instead of printing and exiting, so that ``--json`` can answer a usage error in JSON."""

    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(self, message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mploader", description="Load and recover Apache Kafka log directories, exactly as Kafka does.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"mploader {tool_version()}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log what a broker logs while loading (INFO; -vv: DEBUG)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help.replace("%%", "%"))  # help is %-formatted
        cmd.add_arguments(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    except _ArgumentError as e:
        if "--json" in argv:
            print_document(error_document("usage", str(e), exit_code=EXIT_USAGE))
        else:
            e.parser.print_usage(sys.stderr)
            print(f"{e.parser.prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    # -v before or after the sub-command: both count (the sub-command's own -v must not reset the global one)
    setup_logging(args.verbose + vars(args).get("sub_verbose", 0))
    try:
        run: Callable[[argparse.Namespace], int] = args._run  # set_defaults(_run=...) of the subcommand
        return run(args)
    except UsageError as e:
        print(f"mploader {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        print(f"mploader {args.command}: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"mploader {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
