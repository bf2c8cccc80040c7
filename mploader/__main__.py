"""``python -m mploader``: the same as the ``mploader`` command."""

from mploader.cli.main import command

command()
