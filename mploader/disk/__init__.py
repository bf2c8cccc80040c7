"""Every change Phase 2 makes to a data dir goes through a :class:`Disk`."""

from mploader.disk.base import Disk

__all__ = ["Disk"]
