"""The experiments users run: process-count sweeps against disk IO utilisation, HDD vs SSD (seed 002).

* :mod:`.broker`     the broker to load: generated (clean, no faults) or the user's data dirs
* :mod:`.places`     the device classes: the machine's disk, a throttled loop device, seek-modelled
                     HDD and SSD-like devices, tmpfs (made, then removed)
* :mod:`.disk_model` the seek-modelled devices' arithmetic; :mod:`.seek_daemon` their FUSE daemon
* :mod:`.leftovers`  what a killed experiment left, found by its name and removed (``mploader cleanup``)
* :mod:`.cache`      a cold (drop_caches, or posix_fadvise per file) or warm page cache
* :mod:`.run`        one run: a fresh copy, the cache, the load in its own process (:mod:`.child`), sampled
* :mod:`.kafka`      Kafka's own loader (the oracle) for a run, and what each loader loaded, compared
* :mod:`.sampler`    %util, MB/s, IOPS, request size, queue depth; CPU per core; RSS; shared memory
* :mod:`.host_load`  how busy the host was with other work (others' CPU, others' reads), the busy-host thresholds
* :mod:`.sweep`      1..N workers x recovery threads x recover/dry run x cold/warm
* :mod:`.hdd_vs_ssd` clean/unclean restart x 1 or 2 data dirs x mploader's choices and Kafka's threads x device
* :mod:`.points`     a spec's rounds as one point: median, min, max; :mod:`.findings` what the points show
* :mod:`.report`     CSV, JSON and markdown with the machine's facts; :mod:`.plots` the PNG figures and their data

The commands are ``mploader sweep`` and ``mploader experiment hdd-vs-ssd`` (:mod:`mploader.cli`); plots need
the ``experiments`` extra (matplotlib).
"""
