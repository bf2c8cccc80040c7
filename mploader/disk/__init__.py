"""Every change Phase 2 makes to a data dir goes through a :class:`Disk` (see :mod:`.base`)."""

from mploader.disk.base import Disk, DiskReader
from mploader.disk.dry_run import DryRunDisk
from mploader.disk.mutations import NO_HOOK, MutationHook
from mploader.disk.real import RealDisk


def open_disk(dry_run: bool, check_lock: bool = True, mutations: MutationHook = NO_HOOK) -> Disk:
    """The disk of a load: :class:`DryRunDisk` for ``dry_run`` (nothing on disk changes), else :class:`RealDisk`,
    which tells ``mutations`` of each change (a dry run makes none).  ``check_lock=False`` (a dry run only): do not
    check whether a broker holds a data dir's lock."""
    return DryRunDisk(check_lock) if dry_run else RealDisk(mutations)


__all__ = ["NO_HOOK", "Disk", "DiskReader", "DryRunDisk", "MutationHook", "RealDisk", "open_disk"]
