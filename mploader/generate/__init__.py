"""Realistic data dirs as a broker leaves them, with fault injection and a ground-truth manifest."""

from mploader.generate.config import DATA_FAULTS, FAULT_KINDS, GenerateSummary, GeneratorConfig
from mploader.generate.generator import generate
from mploader.generate.manifest import iter_manifest, read_manifest
from mploader.generate.progress import Callback

__all__ = ["DATA_FAULTS", "FAULT_KINDS", "Callback", "GenerateSummary", "GeneratorConfig", "generate", "iter_manifest",
           "read_manifest"]
