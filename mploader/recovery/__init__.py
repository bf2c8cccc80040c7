"""Phase 2, one partition at a time, in the parent: the only code that decides what changes on disk.

* :mod:`.loader`           one partition directory (Kafka's ``UnifiedLog.apply`` + ``LogLoader.load``)
* :mod:`.segment_recovery` one segment (``LogSegment.recover``): indexes (as Phase 1 prepared them, else here),
  epochs, producer state, truncation
* :mod:`.segment`          index lookups and the segment helpers the loader needs
* :mod:`.producer_state`   Kafka's ``ProducerStateManager``; :mod:`.producer_apply` a segment's batches at once
* :mod:`.epoch_cache`      Kafka's ``LeaderEpochFileCache``
* :mod:`.split`            the offset-overflow split of legacy segments (``LogLoader.retryOnOffsetOverflow``)
* :mod:`.preflight`        what the loader would refuse in a partition, known before anything is written

It reads segments only through a scan source (Phase 1) and writes only through a :class:`mploader.disk.Disk`.
"""
