"""The host a load runs on, as the kernel describes it: no policy, no mploader imports.

* :mod:`.devices`  which block devices hold a path: through its mount, partitions, loop devices and their
  backing files, device-mapper and md arrays; tmpfs has none
* :mod:`.iostat`   the figures ``iostat -x`` shows (%util, read MB/s, IOPS, request size, queue depth) and CPU
  busy per core, as pure functions of two counter snapshots
* :mod:`.cpus`     the CPUs this process may use (affinity, cgroup quota)
* :mod:`.cgroup`   the block IO limits a cgroup puts on this process (``blkio.throttle`` or ``io.max``)

The engine uses them to watch the device of a data dir (adaptive workers); the experiments to sample and
describe the machine.
"""
