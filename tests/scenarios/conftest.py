"""Shared setup for the docs/scenarios.md tests (tests/scenarios/test_*.py).

Append-friendly: add fixtures below; keep the sys.path block first.
"""

import os
import sys

# Make ``from tests.kafkadir import ...`` work however pytest was started (``pytest`` or
# ``python -m pytest``, with or without ``tests/__init__.py``): put the repository root on sys.path.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import pytest  # noqa: E402


@pytest.fixture
def metrics_registry():
    """A fresh MetricsRegistry (history of every gauge change)."""
    from mploader import MetricsRegistry

    return MetricsRegistry()
