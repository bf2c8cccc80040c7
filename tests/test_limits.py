"""Limits of the host: open files, and a full disk.

* **Open files**: a load holds a bounded number of descriptors, whatever the number of segments.  A broker of
  1,600 tiny segments, every one recovered (no recovery-point checkpoint), loads in a child process whose soft
  limit on open files is 16 (the ratio of the 100,000 segments under 1,024 that perf/limits.py loads; figures in
  perf/README.md), inline and with 2 workers (which inherit the limit).
* **A full disk**: ENOSPC while a partition's indexes are rebuilt (a real ext4 file system on a loop device,
  filled up: root only) fails that partition, keeps every byte of its segments, takes its data dir offline
  with the partition named, and the partitions of the other data dir load; once there is room again, a load
  reaches exactly the outcome of a load that never ran out of space.  (Kafka's ``LogLoader.recoverLog`` takes
  an IOException of a recovery for corruption: it cuts the segment to its base offset and deletes the later
  ones.  mploader never cuts for an error of the environment: ``mploader.errors.of_the_environment``.)  The same
  where the full disk tears a load-time recovery's rebuilt ``.index`` (a mutation hook raising ENOSPC, any user):
  the torn file is not put in place.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mploader import LoaderConfig, load_logs
from mploader.disk.mutations import CallingHook
from mploader.generate import GeneratorConfig, generate
from tests.crash_points import GEN_NOW, copy_tree, final_outcome, outcome_difference, recorded_load, small_broker
from tests.fingerprint import changed, tree_state

REPO = Path(__file__).resolve().parents[1]

MANY = GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=4, total_bytes=275_000, segment_bytes=200,
                       batch_bytes=100, records_per_batch=1, faults=0, seed=4)
OPEN_FILES = 16

CHILD = """
import json, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
import logging
logging.disable(logging.WARNING)
from mploader import LoaderConfig, load_logs
r = load_logs([sys.argv[3]], LoaderConfig(segment_scan_workers_per_data_dir=int(sys.argv[2])), now_ms=0)
print(json.dumps({"offline": r.offline_dirs, "segments": sum(len(lg.segments) for lg in r.logs.values()),
                  "recovered": sum(len(lg.recovered_segments) for lg in r.logs.values()),
                  "limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))
"""


@pytest.fixture(scope="module")
def many_segments(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("many_segments")
    summary = generate(root, MANY)
    assert summary.segments >= 100 * OPEN_FILES
    for cp in root.glob("data-*/recovery-point-offset-checkpoint"):
        cp.unlink()  # every segment recovered: each one opened, mapped and scanned
    return root


@pytest.mark.parametrize("workers", [1, 2])
def test_many_segments_load_under_a_small_open_files_limit(many_segments: Path, tmp_path: Path,
                                                           workers: int) -> None:
    broker = tmp_path / "broker"
    shutil.copytree(many_segments, broker)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(OPEN_FILES), str(workers), str(broker / "data-0")],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    generated = sum(1 for _ in many_segments.glob("data-0/*/*.log"))
    assert figures == {"offline": {}, "segments": generated, "recovered": generated, "limit": OPEN_FILES}


def test_the_open_files_limit_is_real(tmp_path: Path) -> None:
    """The child's limit binds: the same child cannot hold more files open than it allows."""
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (16, "
            "resource.getrlimit(resource.RLIMIT_NOFILE)[1])); "
            "fs = [open(sys.argv[1], 'rb') for _ in range(40)]")
    (tmp_path / "f").write_bytes(b"x")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "f")], capture_output=True, text=True)
    assert proc.returncode != 0 and "Too many open files" in proc.stderr


# ---- a full disk ------------------------------------------------------------------------------------------

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mkfs.ext4") is None or shutil.which("mount") is None,
    reason="needs root and mkfs.ext4 (a small ext4 file system on a loop device)")

FULL = GeneratorConfig(data_dirs=2, topics=1, partitions_per_topic=4, total_bytes=8_000_000,
                       segment_bytes=1024 * 1024, batch_bytes=256, records_per_batch=1, faults=0, seed=3)


@pytest.fixture
def small_file_system(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB ext4 file system on a loop device, mounted under tmp_path; unmounted (and detached) after."""
    image, mount_point = tmp_path / "fs.img", tmp_path / "mnt"
    with open(image, "wb") as f:
        f.truncate(48 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    mount_point.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mount_point)], check=True, capture_output=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False, capture_output=True)


def fill(directory: Path) -> Path:
    """Take every free block of ``directory``'s file system (root's reserved ones too)."""
    filler = directory / "filler"
    with open(filler, "wb") as f:
        block = b"\xff" * (1 << 16)
        for size in (1 << 16, 4096):
            try:
                while True:
                    f.write(block[:size])
                    f.flush()
                    os.fsync(f.fileno())
            except OSError:
                continue
    return filler


def logs_of(root: Path) -> dict[str, tuple[int, str]]:
    return {k: v for k, v in tree_state(root).items() if k.endswith(".log")}


def outcome(result: object) -> dict[str, object]:
    logs = result.logs  # type: ignore[attr-defined]
    return {str(tp): (lg.log_start_offset, lg.log_end_offset, lg.segments, lg.leader_epochs) for tp, lg in
            logs.items()}


@needs_root
def test_a_full_disk_fails_the_partition_and_keeps_its_data(tmp_path: Path, small_file_system: Path) -> None:
    source = tmp_path / "source"
    generate(source, FULL)
    reference = tmp_path / "reference"
    shutil.copytree(source, reference)
    for broker in (source, reference):  # every segment recovered and its indexes rebuilt, an entry per batch
        for cp in broker.glob("data-*/recovery-point-offset-checkpoint"):
            cp.unlink()
    full, other = small_file_system / "data-0", tmp_path / "data-1"
    subprocess.run(["cp", "-a", "--sparse=always", str(source / "data-0"), str(full)], check=True)
    shutil.copytree(source / "data-1", other)
    config = LoaderConfig(index_interval_bytes=1, segment_scan_workers_per_data_dir=1)
    before = logs_of(full)
    filler = fill(small_file_system)

    result = load_logs([str(full), str(other)], config, now_ms=0)

    assert list(result.offline_dirs) == [str(full)]
    reason = result.offline_dirs[str(full)]
    assert "No space left on device" in reason and str(full) + os.sep in reason  # the partition is named
    assert re.search(re.escape(str(full)) + r"/[^/ ]+-\d+/\d{20}\.\w+", reason), reason  # and the file it wrote
    in_other = {p.name for p in other.iterdir() if p.is_dir()}
    assert in_other and in_other <= {str(tp) for tp in result.logs}  # the other data dir's partitions loaded
    assert logs_of(full) == before  # not a byte of segment data lost

    filler.unlink()  # room again: the next load finishes the recovery
    again = load_logs([str(full), str(other)], config, now_ms=0)
    expected = load_logs([str(reference / "data-0"), str(reference / "data-1")], config, now_ms=0)
    assert again.offline_dirs == {}
    assert outcome(again) == outcome(expected)
    assert logs_of(full) == logs_of(reference / "data-0")


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_a_full_disk_that_tears_a_rebuilt_index_leaves_its_segment_to_recover_again(tmp_path: Path,
                                                                                  clean: bool) -> None:
    """ENOSPC half-way through the write of a load-time recovery's rebuilt ``.index``, written under its pending
    name (``<base>.index.deleted``, renamed into place last: docs/crash-safety.md), for every such recovery of a
    broker with missing indexes: the partition fails and its dir goes offline, the torn index stays pending and
    the segment has no ``.index``; the next load, with room, recovers the segment again and leaves every byte and
    the outcome of a load that never ran out of space (a clean dir keeps its marker: the load after the fix is clean
    again, docs/loading.md §18).  Put in place, the torn index was trusted by that load.
    The full disk is a mutation hook raising ENOSPC at the write's torn point (mploader.disk.mutations)."""
    pristine, work = tmp_path / "pristine", tmp_path / "work"
    small_broker(pristine, seed=5, clean=clean, faults=10)
    config = LoaderConfig(segment_scan_workers_per_data_dir=1)
    copy_tree(pristine, work)
    reference, points = recorded_load([str(work / "data-0")], config, GEN_NOW)
    expected = final_outcome(reference)
    expected_tree = tree_state(work)
    pending = [os.path.relpath(path, work) for op, path in points
               if op == "write:rest" and path.endswith(".index.deleted")]
    assert len(pending) >= 2, "the broker has too few load-time recoveries"
    for torn in pending:
        copy_tree(pristine, work)

        def full_disk(op: str, path: str, torn: str = str(work / torn)) -> None:
            if op == "write:rest" and path == torn:
                raise OSError(errno.ENOSPC, "No space left on device (a mutation hook)", path)

        failed = load_logs([str(work / "data-0")], config, now_ms=GEN_NOW, mutations=CallingHook(full_disk))
        assert list(failed.offline_dirs) == [str(work / "data-0")], torn
        assert "No space left on device" in failed.offline_dirs[str(work / "data-0")]
        assert (work / torn).exists() and not (work / torn.removesuffix(".deleted")).exists(), torn
        again = load_logs([str(work / "data-0")], config, now_ms=GEN_NOW)
        assert changed(expected_tree, tree_state(work)) == [], torn
        assert outcome_difference(expected, final_outcome(again)) is None, torn
