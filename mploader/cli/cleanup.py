"""``mploader cleanup``: remove what killed loads left in /dev/shm (safe while other loads run)."""

from __future__ import annotations

import argparse

from mploader.cli.exit_codes import EXIT_OK
from mploader.engine.cleanup import remove_orphaned_blocks


def add_cleanup_arguments(p: argparse.ArgumentParser) -> None:
    """No arguments: a load's shared memory is named after its process, so dead loads are told from live ones."""


def run_cleanup(args: argparse.Namespace) -> int:
    removed = remove_orphaned_blocks()
    print(f"removed {len(removed.blocks)} shared-memory entries and {len(removed.semaphores)} semaphores "
          f"left by loads that were killed")
    for name in [*removed.blocks, *removed.semaphores]:
        print(f"  /dev/shm/{name}")
    if removed.locked:
        print(f"left {len(removed.locked)} that look dead but are still locked by a running load: "
              + ", ".join(removed.locked))
    return EXIT_OK
