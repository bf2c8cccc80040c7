"""All data dirs: Kafka's LogManager start-up (docs/loading.md §2-§4) around the per-partition loader.

::

    load_logs(data_dirs, config)                                          load.py
      preflight: every data dir read, nothing written (start-up failures,   preflight.py
                 the environment's refusals: docs/loading.md §18)
      per dir:   create, lock, checkpoints, marker (LogManager's constructor) dirs.py
      one LoadPlan (mploader.load_plan), one PartitionRunner (mploader.runners:  load.py
                  loading threads, worker processes, Spark tasks); each
                  outcome taken once: an OSError takes its dir offline,
                  another fails the load                                    report.py (failed)
      flush, commit (the markers go last), recovery points                  dirs.py
      the report: impact warnings, log lines, gauges                        report.py

An ``OSError`` inside a partition takes only that partition out and the dir offline once all its partitions
finished; a :class:`~mploader.errors.StartupFailedError` fails the whole load.  Every room logs as
``mploader.manager`` (Kafka's LogManager).
"""

from mploader.manager.dirs import written_dirs
from mploader.manager.load import load_logs, predict_recovery
from mploader.manager.strays import NO_STRAYS, KraftStrayLogs, StrayLogs

__all__ = ["NO_STRAYS", "KraftStrayLogs", "StrayLogs", "load_logs", "predict_recovery", "written_dirs"]
