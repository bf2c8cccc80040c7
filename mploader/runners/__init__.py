"""Where partitions load: one interface (:class:`PartitionRunner`), three runners.

::

    base.py        PartitionRunner, RunEvents (what a runner tells the manager), Outcome
    threads.py     LoadingThreads: Kafka's recovery threads in this process, scans from a Phase 1 engine
    processes/     ProcessPartitions: worker processes loading whole partitions (typed messages, one pool state)
    here.py        PartitionsHere: partitions loaded one after another in this process (a worker's group, a
                   Spark task), and what carries their log records and errors to another process

The Spark tasks' runner is :class:`mploader.spark.phase2.SparkPartitions`, in the Spark layer.
"""

from mploader.runners.base import NO_EVENTS, Outcome, PartitionRunner, RunEvents
from mploader.runners.here import PartitionsHere
from mploader.runners.processes import ProcessPartitions
from mploader.runners.threads import LoadingThreads

__all__ = ["NO_EVENTS", "LoadingThreads", "Outcome", "PartitionRunner", "PartitionsHere", "ProcessPartitions",
           "RunEvents"]
