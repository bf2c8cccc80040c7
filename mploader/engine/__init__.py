"""Where Phase 1 runs, behind one interface (:class:`mploader.engine.base.Engine`).

* :mod:`.base`      the interface, the per-dir scan plan, and the choice of engine (:func:`make_engine`)
* :mod:`.inline`    Phase 1 in the calling thread (the reference engine)
* :mod:`.pool`      N loky worker processes per data dir, results through shared memory
* :mod:`.worker`    what a worker process runs, and the shared-memory block layout
* :mod:`.chunks`    cutting a big segment at confirmed index positions, and stitching the pieces
* :mod:`.readahead` asks the kernel for the planned ranges ahead of the scans (cold page cache)

This package's ``__init__`` imports nothing: a worker process imports :mod:`.worker` alone.
"""
