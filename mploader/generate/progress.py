"""The progress hook :func:`~mploader.generate.generate` reports written ``.log`` bytes to."""

from __future__ import annotations


class Callback:
    """Progress hook in the style of fsspec's ``Callback``: :meth:`set_size` once with the expected
    number of ``.log`` bytes, then :meth:`relative_update` as bytes are written.  Subclasses
    override :meth:`call`, which runs after every change."""

    def __init__(self) -> None:
        self.size: int | None = None
        self.value = 0

    def set_size(self, size: int) -> None:
        self.size = size
        self.call()

    def relative_update(self, inc: int = 1) -> None:
        self.value += inc
        self.call()

    def absolute_update(self, value: int) -> None:
        self.value = value
        self.call()

    def call(self) -> None:
        """Called after every update; does nothing here."""

    def close(self) -> None:
        """Called once when the work is done."""


__all__ = ["Callback"]
