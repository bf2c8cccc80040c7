"""All data dirs (Kafka's LogManager.loadLogs)."""
from __future__ import annotations
def load_logs(*args, **kwargs):  # replaced by the real implementation
    raise NotImplementedError("load_logs is being written")
