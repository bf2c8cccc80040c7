"""One run of an experiment: a fresh copy of the broker (its data dirs on one device, or each on a device of its
own), the page cache made cold or warm, the load in a process of its own (:mod:`.child`: mploader's, or Kafka's
loader, :mod:`.kafka`), sampled while it runs (:mod:`.sampler`, :mod:`.host_load`), the copy removed after.

Every run starts from a fresh copy because a real recovery changes the data dir (a dry run would not, but
copying every run keeps the runs alike: the copy's pages and the files' layout on the device).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mploader.experiments.cache import make_cold, make_warm
from mploader.experiments.host_load import busy_reasons
from mploader.experiments.kafka import Partitions
from mploader.experiments.sampler import Sample, Sampler
from mploader.format import checkpoint
from mploader.host.cgroup import ReadLimits
from mploader.host.devices import Storage

KILL_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class Place:
    """Where runs put their copies: a directory, the storage under it, and what limits its reads."""

    label: str  # what every output calls it, e.g. "throttled loop device (HDD-like limits)"
    dir: Path
    storage: Storage
    cgroup_procs: str | None = None  # runs join this cgroup (the throttle) before they read
    limits: ReadLimits = ReadLimits()
    renew: Callable[[], None] | None = None  # makes its file system afresh before each run (see throttled_loop)
    figures: Callable[[], dict[str, Any]] | None = None  # a modelled device's own request figures (seek_daemon)
    profile: str = ""  # what the device is, in a line for the figures and the report (e.g. the disk model's)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """What one run does."""

    workers: int | str | None  # segment_scan_workers_per_data_dir: N, "auto" or "adaptive"; None: Kafka's loader
    recovery_threads: int = 1  # num.recovery.threads.per.data.dir (Kafka's loader: its threads)
    dry_run: bool = False
    cache: str = "cold"  # "cold" or "warm"
    restart: str = "unclean"  # "unclean" (everything past recovery point 0 recovered), "clean", or "as given"
    max_read_bytes_per_sec: int | None = None
    partition_workers: int | str | None = None  # --partition-workers N or "auto" (whole partitions in workers)
    loader: str = "mploader"  # or "kafka": Kafka's LogLoader (the oracle, :mod:`.kafka`)
    data_dirs: int = 1  # how many data dirs the broker has (each on a device of its own in hdd-vs-ssd)

    @property
    def choice(self) -> str:
        """The loader and its setting the run measures: "N=2", "auto", "adaptive", "P=auto" (``--partition-workers
        auto``) or "Kafka, 2 threads"."""
        if self.loader == "kafka":
            return f"Kafka, {self.recovery_threads} thread{'s' if self.recovery_threads > 1 else ''}"
        if self.partition_workers is not None:
            return f"P={self.partition_workers}"
        return f"N={self.workers}" if isinstance(self.workers, int) else str(self.workers)

    def config(self) -> dict[str, Any]:
        """mploader's :class:`~mploader.config.LoaderConfig` fields for the run."""
        out: dict[str, Any] = {"segment_scan_workers_per_data_dir": self.workers or "auto",
                               "num_recovery_threads_per_data_dir": self.recovery_threads, "dry_run": self.dry_run}
        if self.max_read_bytes_per_sec is not None:
            out["max_read_bytes_per_sec"] = self.max_read_bytes_per_sec
        return out


@dataclass(slots=True)
class RunResult:
    id: int
    place: str
    spec: RunSpec
    cache_method: str  # how the cache was made cold or warm ("drop_caches", "fadvise", "read once")
    seconds: float  # the load in the child: mploader's load_logs call, Kafka's loadLogs (its slowest data dir)
    process_seconds: float  # the child process, start to exit (imports, pool start-up, JVMs and exit included)
    bytes_read: int  # mploader's count of the bytes it scanned (Kafka's loader does not say: 0)
    segments_recovered: int
    workers_per_dir: int
    device: str | None  # the device whose figures are the run's "util" (the first data dir's file system's)
    disk: str | None  # the disk under it, if another
    samples: list[Sample] = field(default_factory=list)
    # the adaptive pool's changes of worker count: {"t", "message"}, and "data_dir", "workers_before", "workers"
    adaptive: list[dict[str, Any]] = field(default_factory=list)
    devices: tuple[str, ...] = ()  # every data dir's device (two data dirs on two devices: both)
    loaded: Partitions = field(default_factory=dict)  # what the load loaded, per partition (:mod:`.kafka`)

    @property
    def throughput(self) -> float:
        """Bytes scanned per second of the load."""
        return self.bytes_read / self.seconds if self.seconds > 0 else 0.0

    @property
    def all_devices(self) -> tuple[str, ...]:
        return self.devices or ((self.device,) if self.device else ())

    def mean(self, what: str, device: str | None = None) -> float | None:
        """The mean of a per-sample figure over the run: a DiskRates field of ``device`` (default: the
        run's device), "cpu" (the machine's, mean over cores), "load_cpu" (the load's processes, 100 = one
        core), "others_cpu" (other processes', 100 = one core), "throttle_use"."""
        values = [v for s in self.samples if (v := _figure(s, what, device or self.device)) is not None]
        return sum(values) / len(values) if values else None

    def busy(self) -> float | None:
        """How busy the run's devices were, in percent (the mean over its data dirs' devices): the share of a
        cgroup's read limit where one throttles it (its own %util stays low while readers wait on the throttle),
        else iostat's %util; None: no device."""
        each = [v for d in self.all_devices if (v := self._busy(d)) is not None]
        return sum(each) / len(each) if each else None

    def _busy(self, device: str) -> float | None:
        use = self.mean("throttle_use", device)
        return use if use is not None else self.mean("util_percent", device)

    def device_reads(self) -> int:
        """Bytes the run's devices read while it ran (whoever read them)."""
        return int(sum(s.disks[d].read_bytes_per_s * s.disks[d].seconds
                       for s in self.samples for d in self.all_devices if d in s.disks))

    def others_reads(self) -> int | None:
        """Bytes other processes read of the run's devices while it ran (:mod:`.host_load`); None: not
        measurable (no device, no per-process I/O accounting)."""
        own = [s.load_read_bytes for s in self.samples]
        if not self.all_devices or not own or any(b is None for b in own):
            return None
        return max(0, self.device_reads() - sum(b for b in own if b is not None))

    def busy_host(self) -> list[str]:
        """Why the host was too busy with other work to trust this run (empty: it was not; :mod:`.host_load`)."""
        return busy_reasons(self.mean("others_cpu"), self.others_reads(), self.device_reads())

    def peak(self, what: str) -> int:
        """The largest "rss_parent", "rss_workers" (their sum) or "shm_bytes" seen."""
        values = [_memory(s, what) for s in self.samples]
        return max(values, default=0)

    def worker_counts(self) -> dict[str, list[list[float]]]:
        """The adaptive pool's worker count over time, per data dir: [[seconds into the load, count], ...] from
        the count it started with (what its first change left)."""
        out: dict[str, list[list[float]]] = {}
        for step in self.adaptive:
            if "workers" in step:
                series = out.setdefault(step["data_dir"], [[0.0, step["workers_before"]]])
                series.append([step["t"], step["workers"]])
        return out

    def row(self) -> dict[str, Any]:
        """The run's figures, flat (a CSV row)."""
        def r(v: float | None, n: int = 1) -> float | None:
            return None if v is None else round(v, n)

        others = self.others_reads()
        return {
            "run": self.id, "place": self.place, "data_dirs": self.spec.data_dirs, "loader": self.spec.loader,
            "choice": self.spec.choice, "workers": self.spec.workers, "partition_workers": self.spec.partition_workers,
            "recovery_threads": self.spec.recovery_threads, "mode": "dry run" if self.spec.dry_run else "recover",
            "restart": self.spec.restart, "cache": self.spec.cache, "cache_method": self.cache_method,
            "max_read_bytes_per_sec": self.spec.max_read_bytes_per_sec, "workers_per_dir": self.workers_per_dir,
            "seconds": round(self.seconds, 3), "process_seconds": round(self.process_seconds, 3),
            "bytes_read": self.bytes_read, "throughput_mb_s": round(self.throughput / 1e6, 1),
            "segments_recovered": self.segments_recovered, "device": self.device,
            "devices": " ".join(self.all_devices),
            "util_mean": r(self.mean("util_percent")), "read_mb_s_mean": r(_mb(self.mean("read_bytes_per_s"))),
            "read_iops_mean": r(self.mean("read_iops")), "queue_depth_mean": r(self.mean("queue_depth"), 2),
            "throttle_use_mean": r(self.mean("throttle_use")), "disk": self.disk,
            "disk_util_mean": r(self.mean("util_percent", self.disk)) if self.disk else None,
            "cpu_mean": r(self.mean("cpu")), "load_cpu_mean": r(self.mean("load_cpu")),
            "others_cpu_mean": r(self.mean("others_cpu")),
            "others_read_mb": None if others is None else round(others / 1e6, 1),
            "busy_host": bool(self.busy_host()),
            "rss_parent_peak_mb": round(self.peak("rss_parent") / 1e6, 1),
            "rss_workers_peak_mb": round(self.peak("rss_workers") / 1e6, 1),
            "shm_peak_mb": round(self.peak("shm_bytes") / 1e6, 1), "samples": len(self.samples),
        }

    def to_json(self) -> dict[str, Any]:
        return {**self.row(), "busy_host_reasons": self.busy_host(), "adaptive": self.adaptive,
                "worker_counts": self.worker_counts(),
                "log_end_offsets": {p: lg["log_end_offset"] for p, lg in sorted(self.loaded.items())},
                "samples": [s.to_json() for s in self.samples]}


def _mb(v: float | None) -> float | None:
    return None if v is None else v / 1e6


def _figure(s: Sample, what: str, device: str | None) -> float | None:
    if what == "cpu":
        return sum(s.cpu_percent) / len(s.cpu_percent) if s.cpu_percent else None
    if what == "load_cpu":
        return s.load_cpu_percent
    if what == "others_cpu":
        return s.others_cpu_percent
    if what == "throttle_use":
        return s.throttle_use.get(device) if device else None
    rates = s.disks.get(device) if device else None
    return None if rates is None else getattr(rates, what)


def _memory(s: Sample, what: str) -> int:
    if what == "rss_workers":
        return sum(s.rss_workers.values())
    value = getattr(s, what)
    return int(value) if value is not None else 0


def make_unclean(data_dirs: Sequence[Path]) -> None:
    """As after a crash before anything was flushed: no clean-shutdown marker and recovery point 0 for every
    partition (an empty checkpoint), so recovery reads every byte (seed 002's worst case)."""
    for d in data_dirs:
        (d / checkpoint.RECOVERY_POINT_CHECKPOINT).write_text("0\n0\n")
        (d / checkpoint.CLEAN_SHUTDOWN_MARKER).unlink(missing_ok=True)


def copy_sparse(src: str, dst: str) -> None:
    """Copy a file's data ranges only, leaving its holes holes (``cp --sparse``), then its times and mode.

    Kafka preallocates an active segment's indexes with ``setLength``: 10 MB each, sparse.  ``shutil``'s copy writes
    their zeros, so a copy holds 20 MB of real blocks per partition, and the load's trim of each (10 MB to a few
    entries) frees them: ~4-5 ms a file on ext4 against ~5 us for a hole, a cost no broker's own files have."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        i, o = fi.fileno(), fo.fileno()
        size = os.fstat(i).st_size
        pos = 0
        while pos < size:
            try:
                start = os.lseek(i, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:  # nothing but a hole up to the end
                    break
                if pos == 0 and e.errno in (errno.EINVAL, errno.EOPNOTSUPP):  # a file system without SEEK_DATA
                    fo.close()
                    shutil.copy2(src, dst)
                    return
                raise
            end = os.lseek(i, start, os.SEEK_HOLE)
            os.lseek(o, start, os.SEEK_SET)
            while start < end:
                n = os.sendfile(o, i, start, end - start)  # what shutil copies with, from the page cache
                if n == 0:  # the file shrank meanwhile
                    break
                start += n
            pos = end
        fo.truncate(size)
    shutil.copystat(src, dst)


def copy_broker(sources: Sequence[Path], dests: Sequence[Path], restart: str) -> list[Path]:
    """A fresh copy of the data dirs (preallocated indexes still sparse), made unclean if asked: data dir ``i``
    under ``dests[i % len(dests)]`` (one destination: all of them; one per data dir: each on its own device), in
    a subdirectory of its own."""
    for d in dests:
        d.mkdir(parents=True)
    copies = []
    for i, src in enumerate(sources):
        copy = dests[i % len(dests)] / f"{i}-{src.name}"
        shutil.copytree(src, copy, symlinks=True, copy_function=copy_sparse)
        copies.append(copy)
    if restart == "unclean":
        make_unclean(copies)
    return copies


def _start_child(spec: Mapping[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "mploader.experiments.child", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # a Ctrl-C reaches the experiment, which ends the child


def end_child(proc: subprocess.Popen[str]) -> None:
    """Stop a run's process and its workers (SIGINT first: the load stops as on a Ctrl-C; then SIGKILL)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def _child_spec(places: Sequence[Place], copies: Sequence[Path], spec: RunSpec,
                oracle: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"dirs": [str(c) for c in copies], "cgroup_procs": places[0].cgroup_procs}
    if spec.loader == "kafka":
        if oracle is None:
            raise ValueError("a run of Kafka's loader needs the oracle's launcher")
        doc.update(oracle=oracle, threads=spec.recovery_threads)
    else:
        doc.update(config=spec.config(), partition_workers=spec.partition_workers)
    return doc


def _sampler(places: Sequence[Place], interval: float) -> Sampler:
    """Every place's devices (each once), a throttled one's limits with it."""
    sampled = list(dict.fromkeys(n for p in places for n in p.storage.sampled()))
    limits = {p.storage.device.name: p.limits for p in places if p.storage.device is not None}
    return Sampler(sampled, interval, limits)


def _load(run_id: int, places: Sequence[Place], child: Mapping[str, Any], spec: RunSpec,
          interval: float) -> tuple[dict[str, Any], list[Sample], float]:
    """The load in a child process, sampled: its document, the samples, the process's seconds."""
    sampler = _sampler(places, interval)
    t0 = time.perf_counter()
    proc = _start_child(child)
    sampler.start(proc.pid)
    try:
        out, err = proc.communicate()
    finally:
        end_child(proc)
        samples = sampler.stop()
    process_seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"run {run_id} ({places[0].label}, {spec}) failed with exit status {proc.returncode}: "
                           f"{err.strip()[-2000:]}")
    return json.loads(out), samples, process_seconds


def run_once(run_id: int, places: Sequence[Place], sources: Sequence[Path], spec: RunSpec, interval: float,
             cache_method: str = "auto", oracle: str | None = None) -> RunResult:
    """Copy (data dir ``i`` onto ``places[i % len(places)]``), prepare the cache, load in a child process while
    sampling (mploader, or Kafka's loader with the ``oracle``); the copies are removed whatever happens."""
    dests = [p.dir / f"run-{run_id}" for p in places]
    for p in places:
        if p.renew is not None:
            p.renew()
    try:
        copies = copy_broker(sources, dests, spec.restart)
        method = make_cold(copies, cache_method) if spec.cache == "cold" else make_warm(copies)
        doc, samples, process_seconds = _load(run_id, places, _child_spec(places, copies, spec, oracle), spec, interval)
    finally:
        for d in dests:
            shutil.rmtree(d, ignore_errors=True)
    stats = doc["stats"]
    storage = places[0].storage
    device, disks = storage.device, storage.disks
    return RunResult(run_id, places[0].label, spec, method, doc["seconds"], process_seconds, stats["bytes_read"],
                     stats["segments_recovered"], stats["workers_per_dir"], device.name if device else None,
                     disks[-1].name if disks and device and disks[-1].name != device.name else None, samples,
                     doc.get("adaptive", []), tuple(p.storage.device.name for p in places if p.storage.device),
                     doc.get("partitions", {}))


__all__ = ["Place", "RunResult", "RunSpec", "copy_broker", "copy_sparse", "end_child", "make_unclean", "run_once"]
