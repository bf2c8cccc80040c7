"""The experiments users run: process-count sweeps against disk IO utilisation, HDD vs SSD (seed 002).

* :mod:`.broker`     the broker to load: generated (clean, no faults) or the user's data dirs
* :mod:`.places`     the device classes: the machine's disk, a throttled loop device, seek-modelled
                     HDD and SSD-like devices, tmpfs (made, then removed)
* :mod:`.disk_model` the seek-modelled devices' arithmetic; :mod:`.seek_daemon` their FUSE daemon
* :mod:`.leftovers`  what a killed experiment left, found by its name and removed (``mploader cleanup``)
* :mod:`.cache`      a cold (drop_caches, or posix_fadvise per file) or warm page cache
* :mod:`.run`        one run: a fresh copy, the cache, the load in its own process (:mod:`.child`), sampled
* :mod:`.sampler`    %util, MB/s, IOPS, request size, queue depth; CPU per core; RSS; shared memory
* :mod:`.sweep`      1..N workers x recovery threads x recover/dry run x cold/warm
* :mod:`.hdd_vs_ssd` clean/unclean restart x 1/2/4/8 workers x device class
* :mod:`.report`     CSV, JSON and markdown with the machine's facts; :mod:`.plots` the PNG figures

The commands are ``mploader sweep`` and ``mploader experiment hdd-vs-ssd`` (:mod:`mploader.cli`); plots need
the ``experiments`` extra (matplotlib).
"""
