"""The ``mploader`` command.

Subcommands live in :data:`COMMANDS`, a table of name -> :class:`Command` (help text, and the module with a
function that adds the subcommand's arguments and one that runs it and returns the exit code).  Adding one
means a module beside :mod:`.load` and :mod:`.generate` with those two functions, and one table entry;
:func:`main` needs no change.  Only the ``cli`` package prints.

Exit codes (:data:`mploader.cli.exit_codes.ALL_EXIT_CODES_HELP`; each command's own table in its ``--help``): 0 success,
1 failure while running, 2 usage error (bad arguments or configuration, a DIR that is not a data dir:
:mod:`.dirs`), 3 ``load --verify-after``'s check could not run, 4 acknowledged records lost (``load``, a dry run's
prediction, ``spark load``), 130 interrupted (Ctrl-C), 143 stopped by SIGTERM (handled as Ctrl-C,
:mod:`.failures`).  Every failure ends in a message; with ``--json``, a failure, a usage error included, prints a
JSON error document on stdout (:mod:`.output`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from mploader.cli.exit_codes import ALL_EXIT_CODES_HELP, EXIT_USAGE, UsageError
from mploader.cli.failures import failed, interrupt_exit_code, sigterm_as_interrupt, stop_reason
from mploader.cli.logs import setup_logging
from mploader.cli.output import error_document, fail, new_command, print_document, tool_version
from mploader.engine import ONE_BLAS_THREAD, worker_start

# --------------------------------------------------------------------------------------------
# The subcommand table


@dataclass(frozen=True, slots=True)
class Command:
    """A subcommand: its help, and the module ``mploader.cli.<module>`` that adds its arguments
    (``add_<module>_arguments``) and runs it (``run``, default ``run_<module>``).  Only the module of the
    subcommand given is imported: ``mploader load`` does not pay for Spark's or the experiments' imports."""

    help: str
    module: str
    run: str = ""

    def functions(self) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]:
        m = importlib.import_module(f"mploader.cli.{self.module}")
        return getattr(m, f"add_{self.module}_arguments"), getattr(m, self.run or f"run_{self.module}")


COMMANDS: dict[str, Command] = {
    "generate": Command("write realistic Kafka data dirs (with faults and a ground-truth manifest)", "generate"),
    "load": Command("load and recover data dirs as a Kafka broker's start-up does", "load"),
    "verify": Command("check every byte of every segment, index and checkpoint; read-only; say what a load would do",
                      "verify"),
    "dump": Command("show one file of a data dir (.log batches, an index, a snapshot, a checkpoint); read-only",
                    "dump"),
    "cleanup": Command("remove the shared memory that killed loads left in /dev/shm, and the devices and files "
                       "killed experiments left (safe while others run)",
                       "cleanup"),
    "spark": Command("verify or load many brokers' data dirs on a Spark cluster (Parquet inventory)", "spark"),
    "sweep": Command("load a broker with 1..N worker processes, sampling disk %%util, CPU and memory; plots and a "
                     "report", "sweep", run="run_sweep_command"),
    "experiment": Command("run a named experiment (hdd-vs-ssd: seed 002's restart on a disk, a throttled loop "
                          "device, seek-modelled HDD and SSD-like devices and tmpfs)", "experiment"),
}


def _one_blas_thread() -> None:
    """Before numpy is first imported: OpenBLAS starts one thread, not one per CPU (``engine.ONE_BLAS_THREAD``),
    unless the user's environment already says how many (a caller of :func:`main` keeps its environment)."""
    if "numpy" not in sys.modules:
        for name, value in ONE_BLAS_THREAD.items():
            os.environ.setdefault(name, value)


class _ArgumentError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    """Raises instead of printing and exiting, so that ``--json`` can answer a usage error in JSON."""

    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(self, message)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; only the subcommand named in ``argv`` (the first word that is one) gets its arguments."""
    parser = _Parser(
        prog="mploader", description="Load and recover Apache Kafka log directories, exactly as Kafka does.",
        epilog=ALL_EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"mploader {tool_version()}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log what a broker logs while loading (INFO; -vv: DEBUG)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = next((a for a in argv if a in COMMANDS), None)
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help.replace("%%", "%"))  # help is %-formatted
        if name == chosen:
            add_arguments, run = cmd.functions()
            add_arguments(p)
            p.set_defaults(_run=run, _prog=p.prog)  # _prog: "mploader load", in its messages (output.fail)
    return parser


def command() -> NoReturn:
    """The ``mploader`` command's process (the console script, ``python -m mploader``): :func:`main` on
    ``sys.argv``, in a process that is the command's alone.  Before: OpenBLAS gets one thread.  After: the process
    ends without the interpreter's teardown (freeing every module and object: ~20 ms, a sixth of a small load's
    process), once what a normal exit does for others is done: the non-daemon threads are waited for (as
    ``threading._shutdown``), the ``atexit`` functions run (logging's flush among them) and stdout and stderr are
    flushed.  What mploader writes is on disk already (``Disk.flush`` before the load returns); an uncaught
    exception exits as usual."""
    _one_blas_thread()
    code = main()
    _exit_without_teardown(code)


def _exit_without_teardown(code: int) -> NoReturn:
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx does first
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe: leave it to the interpreter's own exit, which reports it
        sys.exit(code)
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    new_command()
    with sigterm_as_interrupt():
        try:
            return _main(argv)
        except KeyboardInterrupt:  # while the command's modules were imported: it had not started
            message = f"{stop_reason()} before it started: nothing was done"
            if "--json" in argv:
                print_document(error_document("interrupted", message, exit_code=interrupt_exit_code()))
            else:
                print(f"mploader: {message}", file=sys.stderr)
            return interrupt_exit_code()


def _main(argv: list[str]) -> int:
    parser = build_parser(argv)
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
    # a dry run: mploader load --dry-run, mploader verify (its load's prediction), mploader spark load without --apply
    dry_run = bool(vars(args).get("dry_run")) or vars(args).get("apply") is False
    setup_logging(args.verbose + vars(args).get("sub_verbose", 0), dry_run=dry_run)
    try:  # a pool reads it when it starts, in the middle of a load: say it is wrong before any work
        worker_start()
    except ValueError as e:
        return fail(args, EXIT_USAGE, "usage", f"{e} (unset it for this platform's default)")
    try:
        run: Callable[[argparse.Namespace], int] = args._run  # set_defaults(_run=...) of the subcommand
        return run(args)
    except UsageError as e:
        return fail(args, EXIT_USAGE, "usage", str(e))
    except (Exception, KeyboardInterrupt) as e:  # what the command's own handlers did not name: one line, an exit code
        return failed(args, e)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
