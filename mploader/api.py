"""The public ``load_logs``: the manager's load, and, on request, KIP-263's lazy start done safely.

``load_logs(..., verify_in_background=True)`` returns as soon as the load does (the ``kafka`` mode's cost),
with ``result.background`` auditing the segments the load left unread
(:class:`mploader.verify.background.BackgroundVerification`).  Everything else is
:func:`mploader.manager.load_logs`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from mploader.config import LoaderConfig
from mploader.manager import load_logs as _load_logs
from mploader.progress import Progress
from mploader.result import LoadResult
from mploader.verify.background import BackgroundVerification, Order, newest_first


def load_logs(
    data_dirs: Sequence[str | os.PathLike[str]],
    config: LoaderConfig | None = None,
    now_ms: int | None = None,
    *,
    verify_in_background: bool = False,
    verify_order: Order = newest_first,
    verify_progress: Progress | None = None,
    **options: Any,
) -> LoadResult:
    """Load every partition of ``data_dirs`` as a Kafka 4.x broker does at start-up
    (:func:`mploader.manager.load_logs`, which takes ``options``: ``metrics``, ``progress``, ``engine``,
    ``partitions``, ``mutations``; the result, or :class:`~mploader.errors.StartupFailedError` where Kafka's broker
    would fail to start).  With ``verify_in_background``, ``result.background`` then audits the inactive segments
    the load did not read, in ``verify_order`` (default newest first), reporting to ``verify_progress``; a dry run
    verifies too (it writes nothing either way)."""
    result = _load_logs(data_dirs, config, now_ms, **options)
    if verify_in_background:
        result.background = BackgroundVerification(result, config, order=verify_order, progress=verify_progress)
    return result


__all__ = ["load_logs"]
