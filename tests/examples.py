"""How many examples a property test draws: the full count in CI (``CI`` set, or ``HYPOTHESIS_PROFILE=ci``), a
fifth of it locally (at least 10), so that the local loop stays quick; the profiles themselves are in conftest."""

from __future__ import annotations

import os

PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")


def examples(n: int) -> int:
    return n if PROFILE == "ci" else max(10, n // 5)


__all__ = ["PROFILE", "examples"]
