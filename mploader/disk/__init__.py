"""Every change Phase 2 makes to a data dir goes through a :class:`Disk` (see :mod:`.base`)."""

from mploader.disk.base import Disk
from mploader.disk.dry_run import DryRunDisk
from mploader.disk.real import RealDisk


def open_disk(dry_run: bool, check_lock: bool = True) -> Disk:
    """The disk of a load: :class:`DryRunDisk` for ``dry_run`` (nothing on disk changes), else :class:`RealDisk`.
    ``check_lock=False`` (a dry run only): do not check whether a broker holds a data dir's lock."""
    return DryRunDisk(check_lock) if dry_run else RealDisk()


__all__ = ["Disk", "DryRunDisk", "RealDisk", "open_disk"]
