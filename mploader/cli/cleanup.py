"""``mploader cleanup``: remove what killed loads left in /dev/shm, and what killed experiments left (mounts, loop
devices, disk model daemons, cgroups, scratch files: :mod:`mploader.experiments.leftovers`); safe while other
loads and experiments run."""

from __future__ import annotations

import argparse

from mploader.cli.exit_codes import EXIT_OK
from mploader.engine.cleanup import remove_orphaned_blocks
from mploader.experiments.leftovers import remove_leftovers


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
    cleaned = remove_leftovers()
    print(f"removed {len(cleaned.removed)} things left by experiments that were killed")
    for what in cleaned.removed:
        print(f"  {what}")
    for what in cleaned.failed:
        print(f"could not remove {what}")
    return EXIT_OK
