"""The ``mploader`` command: one module per sub-command (:mod:`.load`, :mod:`.generate`)."""

from mploader.cli.main import command, main

__all__ = ["command", "main"]
