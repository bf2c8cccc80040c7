"""The Spark session mploader's jobs run in: the caller's, or one it makes (``local[*]`` unless told).

Whatever the session, the jobs need classic Spark (not Spark Connect: the tasks are lists of file paths made
on the driver, read by the executors) and no speculative execution (a speculative copy of a Phase 1 task is
harmless, but two copies of one load writing the same partition are not: see :mod:`mploader.spark.phase2`).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
# Arrow batches between the JVM and the Python workers; no BLAS threads in the workers (mploader.engine.pool)
_CONF = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.speculation": "false",
    "spark.ui.showConsoleProgress": "false",
    **{f"spark.executorEnv.{v}": "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")},
}


def spark_session(master: str | None = None, app_name: str = "mploader") -> SparkSession:
    """The active session, or a new one: at ``master`` if given, else the master spark-submit set, else
    :data:`DEFAULT_MASTER`.  A local master runs the executors' Python with this interpreter (which has mploader)."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in _CONF.items():
        builder = builder.config(key, value)
    chosen = master or SparkConf().get("spark.master", DEFAULT_MASTER)
    builder = builder.master(chosen)
    if chosen.startswith("local"):  # the workers are forked on this host: this interpreter, unless told otherwise
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return builder.getOrCreate()


def check_session(spark: SparkSession) -> None:
    """Refuse a session the jobs cannot run in (see the module docstring), saying what to change."""
    if not hasattr(spark, "sparkContext") or type(spark).__module__.startswith("pyspark.sql.connect"):
        raise ValueError("mploader's Spark jobs need a classic Spark session (not Spark Connect)")
    if spark.sparkContext.getConf().get("spark.speculation", "false").lower() == "true":
        raise ValueError("spark.speculation is on: two copies of one task could recover the same partition; "
                         "set spark.speculation=false for mploader's jobs")


__all__ = ["DEFAULT_MASTER", "check_session", "spark_session"]
