"""The public names resolve lazily, and a Phase 1 worker imports only what a scan needs."""

from __future__ import annotations

import importlib
import subprocess
import sys

import mploader
import mploader.format


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


def test_a_worker_imports_neither_the_loader_nor_the_parents_engine() -> None:
    """Each worker process of the pool imports mploader.engine.worker when its first task arrives: the loader,
    the manager and the pool's parent side would add ~0.1 s of start-up per worker."""
    code = ("import sys, mploader.engine.worker; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('mploader'))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    assert "mploader.engine.worker" in loaded and "mploader.scan.walk" in loaded
    heavy = {"mploader.manager", "mploader.recovery.loader", "mploader.engine.pool", "mploader.engine.base",
             "mploader.recovery.segment_recovery", "mploader.recovery.producer_state", "mploader.engine.select",
             "mploader.disk", "mploader.generate", "mploader.cli"}
    assert not loaded & heavy, sorted(loaded & heavy)


def test_mploader_load_imports_no_verification_unless_asked() -> None:
    """``mploader load`` without ``--verify-after`` imports neither the verify command nor the verification
    (~40 ms of every load's start-up, perf/README.md)."""
    code = ("import sys, mploader.cli.main, mploader.cli.load; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('mploader'))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    assert "mploader.manager" in loaded
    assert not {m for m in loaded if m.startswith(("mploader.verify", "mploader.cli.verify"))}, sorted(loaded)


def test_a_load_imports_the_optional_codecs_and_psutil_only_when_it_uses_them() -> None:
    """Every process that loads (the CLI, each pool worker) would pay ~30 ms for packages most loads never use:
    the codecs register on the first decompression, psutil is imported by the read-ahead thread."""
    optional = ("psutil", "lz4", "zstandard", "cramjam")
    code = ("import sys, mploader.cli.main, mploader.cli.load, mploader.engine.worker; "
            f"print(' '.join(m for m in {optional!r} if m in sys.modules)); "
            "from mploader.format import compression; compression.decompress(compression.LZ4, "
            "compression.compress(compression.LZ4, b'x')); "
            f"print(' '.join(m for m in {optional!r} if m in sys.modules))")
    before, after = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   check=True).stdout.split("\n")[:2]
    assert before == "" and "lz4" in after.split()
