"""The ``mploader`` command.

Subcommands live in :data:`COMMANDS`, a table of name -> :class:`Command` (help text, a function
that adds the subcommand's arguments, a function that runs it and returns the exit code).  Adding
one means a module beside :mod:`.load` and :mod:`.generate` with those two functions, and one table
entry; :func:`main` needs no change.  Only the ``cli`` package prints.

Exit codes: 0 success, 1 failure while running, 2 usage error (bad arguments or configuration).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mploader.cli.generate import add_generate_arguments, run_generate
from mploader.cli.load import add_load_arguments, run_load
from mploader.cli.units import EXIT_FAILURE, EXIT_USAGE, UsageError

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
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
