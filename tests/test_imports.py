"""The public names resolve lazily, and a Phase 1 worker imports only what a scan needs."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import mploader
import mploader.format
from mploader.cli.main import COMMANDS


def test_every_public_name_resolves_to_the_object_of_its_module() -> None:
    for package in (mploader, mploader.format):
        for name in package.__all__:
            value = getattr(package, name)
            assert value is not None, name
        ns: dict[str, object] = {}
        exec(f"from {package.__name__} import *", ns)  # noqa: S102 - the star import of the curated names
        assert set(package.__all__) <= set(ns)
    assert mploader.load_logs is importlib.import_module("mploader.api").load_logs  # manager's + verify_in_background
    assert mploader.StartupFailedError is importlib.import_module("mploader.errors").StartupFailedError
    assert mploader.format.records is importlib.import_module("mploader.format.records")


def _modules_after(*steps: str) -> list[set[str]]:
    """The modules a fresh interpreter holds after each of ``steps`` (Python statements, run in turn)."""
    report = "print('modules:', *sorted(sys.modules))"
    code = "\n".join(["import sys", *(f"{step}\n{report}" for step in steps)])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return [set(line.split()[1:]) for line in out.splitlines() if line.startswith("modules: ")]


def _mploader_load(data_dir: Path) -> str:
    """The statements of ``mploader load --no-progress DATA_DIR`` through the command's own entry point (an empty
    ``DATA_DIR``: a new data dir, which the command takes with ``--create-missing`` only)."""
    return (f"from mploader.cli.main import main\n"
            f"assert main(['load', '--no-progress', '--create-missing', {str(data_dir)!r}]) == 0")


def test_a_worker_imports_neither_the_loader_nor_the_parents_engine() -> None:
    """Each worker process of the pool imports mploader.engine.worker when its first task arrives: the loader,
    the manager and the pool's parent side would add ~0.1 s of start-up per worker."""
    (loaded,) = _modules_after("import mploader.engine.worker")
    assert "mploader.engine.worker" in loaded and "mploader.scan.walk" in loaded
    heavy = {"mploader.manager", "mploader.recovery.loader", "mploader.engine.pool", "mploader.engine.base",
             "mploader.recovery.segment_recovery", "mploader.recovery.producer_state", "mploader.load_plan",
             "mploader.disk", "mploader.generate", "mploader.cli"}
    assert not loaded & heavy, sorted(loaded & heavy)


def test_mploader_load_imports_no_other_command_and_no_verification_unless_asked(tmp_path: Path) -> None:
    """``mploader load`` without ``--verify-after`` imports neither the other commands (the parser adds only the
    chosen one's arguments) nor the verification (~40 ms of every load's start-up, perf/README.md)."""
    (loaded,) = _modules_after(_mploader_load(tmp_path))
    assert "mploader.manager" in loaded and "mploader.cli.load" in loaded
    others = ("mploader.verify", "mploader.spark", "mploader.experiments", "mploader.generate", "pyspark",
              *(f"mploader.cli.{name}" for name in COMMANDS if name != "load"))
    imported = sorted(m for m in loaded if m.startswith(others))
    assert not imported, imported


def test_a_load_imports_the_optional_codecs_and_psutil_only_when_it_uses_them(tmp_path: Path) -> None:
    """Every process that loads (the CLI, each pool worker) would pay ~30 ms for packages most loads never use:
    the codecs register on the first decompression (checked), and psutil is not imported by a load of an empty dir
    (the read-ahead thread, which runs only where there is something to read, sets its I/O class without it)."""
    optional = {"psutil", "lz4", "zstandard", "cramjam"}
    loaded, decompressed = _modules_after(
        f"{_mploader_load(tmp_path)}\nimport mploader.engine.worker",
        "from mploader.format import compression\n"
        "compression.decompress(compression.LZ4, compression.compress(compression.LZ4, b'x'))")
    assert not loaded & optional, sorted(loaded & optional)
    assert "lz4" in decompressed


def test_a_load_with_the_compiled_walk_imports_neither_the_crc32c_package_nor_importlib_metadata(tmp_path: Path,
                                                                                                 ) -> None:
    """The crc32c package's ``__init__`` imports ``importlib.metadata`` (~30 ms of every start-up); the compiled
    walk's own CRC-32C serves a load (mploader.format.crc), and the version comes from mploader._version.  A load
    that recovers a segment writes and reads snapshots (their CRC), which is where the package was used."""
    from mploader.generate import GeneratorConfig, generate
    from mploader.scan import walk

    if not walk.COMPILED:
        import pytest

        pytest.skip("the compiled walk is not built (or MPLOADER_PURE_PYTHON=1): the package serves the CRC")
    out = generate(str(tmp_path / "gen"), GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=1,
                                                          total_bytes=60_000, segment_bytes=16 * 1024,
                                                          batch_bytes=1024, faults=0, seed=5))
    data = Path(out.data_dirs[0])
    (data / "recovery-point-offset-checkpoint").write_text("0\n0\n")  # every segment recovered
    (loaded,) = _modules_after(f"{_mploader_load(data)}\nimport mploader.engine.worker")
    assert "mploader.recovery.producer_state" in loaded
    assert not loaded & {"crc32c", "importlib.metadata"}, sorted(loaded & {"crc32c", "importlib.metadata"})


def test_a_pool_load_imports_loky_only_when_it_starts_workers(tmp_path: Path) -> None:
    """``--workers 2`` where the parent scans every segment itself (the head of the order, here all of it) starts no
    pool, and imports no loky (26 ms of the command's start); with no head, the same load starts one and imports it."""
    from mploader.generate import GeneratorConfig, generate

    out = generate(str(tmp_path / "gen"), GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=2,
                                                          total_bytes=60_000, segment_bytes=16 * 1024,
                                                          batch_bytes=1024, faults=0, seed=5))
    data = Path(out.data_dirs[0])
    (data / "recovery-point-offset-checkpoint").write_text("0\n0\n")  # every segment recovered
    load = (f"from mploader.cli.main import main\n"
            f"assert main(['load', '--no-progress', '--json', '--workers', '2', {str(data)!r}]) == 0")
    (head_only,) = _modules_after(load)
    (pool,) = _modules_after(f"from mploader.engine.pool import PoolEngine\nPoolEngine.parent_head_bytes = 0\n{load}")

    def loky(modules: set[str]) -> list[str]:
        return sorted(m for m in modules if m == "loky" or m.startswith("loky."))

    assert "mploader.engine.pool" in head_only and not loky(head_only), loky(head_only)
    assert "loky.process_executor" in pool


def test_the_command_starts_no_blas_threads(tmp_path: Path) -> None:
    """numpy's import starts OpenBLAS's thread pool, one thread per CPU; the command never calls BLAS, so its
    process (``cli.main.command``) asks for one thread before numpy is imported (engine.ONE_BLAS_THREAD): ~0.09 s
    less CPU a load on 2 CPUs.  A caller of ``main(argv)`` keeps its own environment, and so does a user who set
    the variables."""
    import os

    if (os.cpu_count() or 1) < 2:
        import pytest

        pytest.skip("OpenBLAS starts no extra thread with one CPU")
    argv = ["load", "--json", "--no-progress", "--create-missing", str(tmp_path)]  # an empty dir: a new data dir
    report = ("import atexit, os, sys\n"  # command() runs the atexit functions before it ends the process
              "atexit.register(lambda: print(os.environ.get('OPENBLAS_NUM_THREADS'),"
              " len(os.listdir('/proc/self/task')), 'numpy' in sys.modules))\n")
    code = report + f"sys.argv = ['mploader', *{argv!r}]\nfrom mploader.cli.main import command\ncommand()"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                                "MKL_NUM_THREADS")}

    def last_line(source: str, extra: dict[str, str] | None = None) -> list[str]:
        out = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                             env={**env, **(extra or {})})
        return out.stdout.splitlines()[-1].split()

    assert last_line(code) == ["1", "1", "True"]
    assert last_line(code, {"OPENBLAS_NUM_THREADS": "2"})[:2] == ["2", "2"]  # the user's choice stays
    caller = report + f"from mploader.cli.main import main\nmain({argv!r})"
    variable, tasks, _ = last_line(caller)  # a caller's main(argv) leaves the environment alone
    assert variable == "None" and int(tasks) > 1
