"""mploader's version, written once: the package metadata (pyproject.toml, a dynamic version), ``mploader.__version__``
and the ``--json`` documents' ``tool.version`` all read it from here."""

__version__ = "0.1.0"
