"""Every sub-command's exit codes, their ``--help`` tables, and the usage error (exit code 2)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_UNVERIFIED = 3  # load --verify-after: the load succeeded, the check after it could not run
EXIT_LOST = 4  # acknowledged records (below the high watermark) were lost, or would be in a dry run
EXIT_BUSY = 5  # sweep, experiment --refuse-busy: a run's host was busy with other work (nothing reported)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM: stopped as by Ctrl-C (mploader.cli.failures)

_JSON_FAILURE = ('with --json, a failure prints {"schema": 1, "error": {"kind", "message", ...}} on stdout, same '
                 'exit status')

#: ``mploader load``'s table (``--help``); the README's exit-code table says the same.
EXIT_CODES_HELP = f"""exit status:
  0    every data dir loaded, no acknowledged record lost
  1    a data dir went offline, a Kafka broker would fail to start on this input, an I/O error (a
       full disk, too many open files: the message names the file and what to do) or out of memory
       (a start-up failure found before recovery changes nothing; the message says so, or names the
       directories a failure found during recovery had already changed); with --verify-after, the
       check found a problem
  2    usage error: bad arguments (--topic/--partition without --dry-run), or a DIR that is not a
       data dir: one that does not exist (without --create-missing), a file, a partition directory
       (the message names its data dir), a folder that holds data dirs, or a directory with no
       partition and none of a data dir's files (meta.properties, a checkpoint, .lock; an empty one
       is a new data dir with --create-missing); nothing is read or written
  3    --verify-after: the load succeeded, but the check after it could not run (the message says
       why; mploader verify checks the data dirs later)
  4    ACKNOWLEDGED RECORDS LOST: the load removed (--dry-run: would remove) offsets below a
       partition's high watermark, records the cluster had acknowledged to producers; the summary
       names them, --json's structured_warnings too (kind "acknowledged_records_lost"); when
       several apply, 1 wins over 4 and 4 over 3
  130  interrupted (Ctrl-C): what was written is what a broker itself could have left; load again
  143  stopped by SIGTERM: as 130, the load stopped at a safe point; load again
{_JSON_FAILURE}"""

#: ``mploader verify``'s table.
VERIFY_EXIT_CODES_HELP = f"""exit status:
  0    every partition healthy
  1    something is wrong (the report says what; a load's predicted loss of acknowledged records is
       one of the problems, which mploader load --dry-run answers with exit 4), an I/O error (the
       message names the file and what to do) or out of memory
  2    usage error: bad arguments, or a DIR that is not a data dir: one that does not exist, a file,
       a partition directory (the message names its data dir), a folder that holds data dirs, or a
       directory with no partition and none of a data dir's files (meta.properties, a checkpoint,
       .lock); a --topic/--partition that matches no partition; nothing is read
  130  interrupted (Ctrl-C): verify changes nothing; run it again
  143  stopped by SIGTERM: as 130
{_JSON_FAILURE}"""

#: ``mploader spark``'s table (verify and load).
SPARK_EXIT_CODES_HELP = f"""exit status:
  0    verify: every partition of every broker healthy; load: every broker's data dirs loaded
       (without --apply: would be), no acknowledged record lost
  1    verify: something is wrong; load: a broker would fail to start, or a data dir went offline;
       either: the Spark job failed (a rerun completes an applied load), an I/O error
  2    usage error: bad arguments, no DIR, pyspark not installed, or a DIR that is not a data dir
       (as mploader verify refuses it: missing, a file, a partition directory, a folder of data
       dirs, a directory with no partition and no data dir's file); nothing is read or written
  4    load: ACKNOWLEDGED RECORDS LOST in a broker's load (without --apply: would be): offsets
       below a partition's high watermark removed; 1 wins over 4
  130  interrupted (Ctrl-C): verify and a dry run change nothing; an applied load is finished by a rerun
  143  stopped by SIGTERM: as 130
{_JSON_FAILURE}"""

#: ``mploader sweep`` and ``mploader experiment``: they load fresh copies, never the DIRs given.
EXPERIMENT_EXIT_CODES_HELP = """exit status:
  0    every run done; the report and its plots written (the runs' own outcomes are in the report)
  1    a run failed, an I/O error (the message names the file) or out of memory
  2    usage error: bad arguments, a DIR that is not a data dir (as mploader load refuses it), no room
       for the broker and its copies, or a device class that cannot be made here (e.g. throttled: root)
  5    --refuse-busy: a run's host was busy with other work (other processes above the thresholds);
       nothing reported, the copies and devices removed
  130  interrupted (Ctrl-C): the copies and devices made for the runs are removed
  143  stopped by SIGTERM: as 130
""" + _JSON_FAILURE

#: ``mploader --help``: every command's codes in one table (each command's --help has its own).
ALL_EXIT_CODES_HELP = """exit status:
  0    success (generate: written; verify: healthy; load: loaded, no acknowledged record lost)
  1    failure while running: a data dir offline, a broker would fail to start, verify found a
       problem, an I/O error, out of memory
  2    usage error: bad arguments, or a DIR that is not a data dir; nothing is read or written
  3    load --verify-after: the load succeeded, the check after it could not run
  4    load, load --dry-run, spark load: acknowledged records lost (or would be, in a dry run)
  5    sweep, experiment --refuse-busy: a run's host was busy with other work
  130  interrupted (Ctrl-C)
  143  stopped by SIGTERM (handled as Ctrl-C)
each command's --help has its own table, with what each code means for it
""" + _JSON_FAILURE


class UsageError(Exception):
    """Bad arguments found after parsing (exit code 2)."""
