"""mploader on a Spark cluster: a load's two phases on the executors (each partition by a Spark task); verify's
audits there too, and the scans of its prediction (a dry-run load), whose Phase 2 runs in the driver.

* :mod:`.session`  the session the jobs run in (``local[*]`` unless told; classic Spark, no speculation)
* :mod:`.tasks`    pieces of work (segments, chunks of big ones) packed into Spark partitions by bytes
* :mod:`.arrow`    a scan's batch table, its recovery draft and a segment audit as Arrow rows, both ways
* :mod:`.phase1`   what the executors run: ``mapInArrow`` over pieces, reading the files through their paths
* :mod:`.engine`   :class:`.engine.SparkEngine`, the third engine of :mod:`mploader.engine.base` (verify's audits
                   and the scans of its prediction)
* :mod:`.identity` what a task checks before it reads or writes: the data the driver planned, or WrongDataError
* :mod:`.jobs`     a Spark job run and watched (its executors' exception, the watchdog, job groups)
* :mod:`.phase2`   a load's partitions recovered by Spark tasks (the manager's ``partitions=`` runner)
* :mod:`.attempt`  one attempt of such a task, first or retried: a retry answers what its dead attempt recorded
* :mod:`.rows`     a load's rows of the fleet history, made by the tasks that loaded the partitions
* :mod:`.gathering` a fleet's brokers' calls of one phase gathered into one Spark job
* :mod:`.fleet`    :func:`.fleet.load` and :func:`.fleet.verify` over many brokers' data dirs
* :mod:`.output`   the fleet history: the Parquet segment inventory and per-partition summary, appended

Needs the ``spark`` extra (pyspark 4, pandas, pyarrow) and Java 17; importing this package imports none of
them (the submodules do).
"""
