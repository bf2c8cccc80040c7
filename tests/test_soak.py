"""The short soak (tests/soak.py): a few random, fault-injected brokers through load, verify, load again, with
random worker counts; no mismatch with the first load's outcome, nothing leaked.  perf/soak.py runs 200 (figures
in perf/README.md, "Soak")."""

from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.soak import SHM_DIR, Footprint, random_config, soak_one, warm_up

# chosen to cover: pools in every step (0: 2, 3 and 2 workers; 21: 3, 2, 1), clean brokers whose marker the
# first load removes (4, 7, 21), snappy, zstd and no compression, and faults in each
SEEDS = [0, 4, 7, 21]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("soak")
    warm_up()
    return root


@pytest.fixture(autouse=True)
def quiet_loader() -> Iterator[None]:
    logging.disable(logging.WARNING)  # every fault is a WARNING of the loader
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def test_the_seeds_cover_what_they_say() -> None:
    import random

    configs = [random_config(random.Random(s), s) for s in SEEDS]
    assert [c.clean_shutdown for c in configs] == [False, True, True, True]
    assert all(c.faults for c in configs)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_soak_round(work: Path, seed: int) -> None:
    r = soak_one(seed, work)
    assert r.segments and r.workers
    assert os.listdir(work) == []  # the round removed its broker


def test_the_leak_check_sees_leaks(tmp_path: Path) -> None:
    """Footprint names a process, a descriptor and a shared-memory block left behind."""
    before = Footprint.now()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    read_end, write_end = os.pipe()
    block = Path(SHM_DIR, f"mploader-{os.getpid()}-1-999-1")
    block.write_bytes(b"")
    try:
        leaks = Footprint.now().leaks_since(before)
        assert f"process {child.pid}" in leaks and f"shared memory {block.name}" in leaks
        assert any(f"descriptor {fd} -> pipe:" in leak for fd in (read_end, write_end) for leak in leaks)
    finally:
        child.kill()
        child.wait()
        os.close(read_end)
        os.close(write_end)
        block.unlink()
    assert Footprint.now().leaks_since(before) == []


def test_a_failed_start_keeps_no_segment_open(tmp_path: Path) -> None:
    """A clean dir whose active segment ends in zeros: Kafka's readNextOffset meets a size field of 0 in an
    unrecovered segment, a CorruptRecordException that fails the start.  The exception comes back to the caller
    with nothing of the segment still open (soak seed 102: its traceback kept the segment mapped, and its
    descriptor open, until the garbage collector ran)."""
    from mploader import LoaderConfig, StartupFailedError, load_logs
    from tests.kafkadir import B, PartitionBuilder, data_dir

    d = data_dir(tmp_path, clean=True)
    part = PartitionBuilder(d).segment(0, B(0), B(1))
    with open(part.file(0, ".log"), "ab") as f:
        f.write(bytes(40))
    gc_was = gc.isenabled()
    gc.disable()  # what is freed must be freed by the load itself, not by a collection that happens to run
    try:
        before = set(os.listdir("/proc/self/fd"))
        with pytest.raises(StartupFailedError) as info:
            load_logs([str(d)], LoaderConfig(segment_scan_workers_per_data_dir=1), now_ms=0)
        assert info.value.kafka_exception == "CorruptRecordException"
        opened = {os.readlink(f"/proc/self/fd/{fd}") for fd in set(os.listdir("/proc/self/fd")) - before
                  if os.path.exists(f"/proc/self/fd/{fd}")}
        assert not {p for p in opened if p.startswith(str(d))}, opened
    finally:
        if gc_was:
            gc.enable()
