"""The ``mploader`` command: one module per sub-command (:mod:`.load`, :mod:`.generate`)."""

from mploader.cli.main import main

__all__ = ["main"]
