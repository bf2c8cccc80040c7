"""Phase 2, one partition at a time (in the loading process, in the worker process that loads the partition
with ``--partition-workers``, or in the Spark task that does with ``mploader spark load``): the only code that
decides what changes on disk.

* :mod:`.loader`           one partition directory (Kafka's ``UnifiedLog.apply`` + ``LogLoader.load``)
* :mod:`.segment_recovery` one segment (``LogSegment.recover``): indexes (as Phase 1 prepared them, else here),
  epochs, producer state, truncation
* :mod:`.segment`          index lookups and the segment helpers the loader needs
* :mod:`.producer_state`   Kafka's ``ProducerStateManager``; :mod:`.producer_apply` a segment's batches at once;
  :mod:`.producer_map` its producer map, held in its snapshot's rows; :mod:`.producer_entry` one producer
* :mod:`.snapshot_files`   a partition's producer snapshot files, by offset (the manager's ``snapshots`` map)
* :mod:`.epoch_cache`      Kafka's ``LeaderEpochFileCache``
* :mod:`.split`            the offset-overflow split of legacy segments (``LogLoader.retryOnOffsetOverflow``)
* :mod:`.preflight`        what the loader would refuse in a partition, known before anything is written
* :mod:`.index_check`      the index checks beyond Kafka's (``LoaderConfig.index_check``)
* :mod:`.impact`           what a partition held before the load changed it (the impact report)
* :mod:`.journal`          the partition journal a killed clean load leaves its rerun
* :mod:`.attempts`         the attempt record a Spark task leaves a retry of it: what a partition's load reported
* :mod:`.resume`           ``--resumable``: recovery points advanced as partitions finish
* :mod:`.job`              one partition's load as a self-contained job (for worker processes and Spark tasks)

It reads segments only through a scan source (Phase 1) and writes only through a :class:`mploader.disk.Disk`.
"""
