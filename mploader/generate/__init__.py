"""Realistic data dirs as a broker leaves them, with fault injection and a ground-truth manifest."""

from mploader.generate.core import (DATA_FAULTS, FAULT_KINDS, Callback, GenerateSummary, GeneratorConfig, generate,
                                    iter_manifest, read_manifest)

__all__ = ["DATA_FAULTS", "FAULT_KINDS", "Callback", "GenerateSummary", "GeneratorConfig", "generate", "iter_manifest",
           "read_manifest"]
