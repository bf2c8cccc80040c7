"""The Spark session mploader's jobs run in: the caller's, or one it makes (the master it is given, else the one
spark-submit or Spark's configuration set, else ``local[*]``).

Whatever the session, the jobs need classic Spark (not Spark Connect: the tasks are lists of file paths made
on the driver, read by the executors) and no speculative execution (a speculative copy of a Phase 1 task is
harmless, but two copies of one load writing the same partition are not: see :mod:`mploader.spark.phase2`).

A session this module starts is quiet unless asked (``verbosity``): its JVM's log4j2 configuration is
:data:`QUIET_LOG4J2` (errors only, from the JVM's first line on: Spark's default profile prints its WARN lines
and "Setting default log level" before ``setLogLevel`` could act), passed with ``spark.driver.extraJavaOptions``
(in ``local`` mode the executors run in that JVM too).  A session it did not start keeps its own log levels.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"  # Spark's own when nothing sets one (spark-submit, spark-defaults.conf)
#: the log4j2 configuration of a quiet session's JVM (package data: errors only, on stderr)
QUIET_LOG4J2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# Arrow batches between the JVM and the Python workers; no BLAS threads in the workers (mploader.engine.pool)
_CONF = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.speculation": "false",
    "spark.ui.showConsoleProgress": "false",
    **{f"spark.executorEnv.{v}": "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")},
}


def spark_log_level(verbosity: int) -> str | None:
    """Spark's log level for the command's ``-v`` count: 0 errors only, 1 Spark's own default (WARN, and the
    lines its default profile prints at start), 2 or more INFO; None: leave Spark's default."""
    return "ERROR" if verbosity <= 0 else None if verbosity == 1 else "INFO"


def under_spark_submit() -> bool:
    """Whether this process is spark-submit's Python driver: its JVM exists already (PySpark connects to its
    gateway), started with spark-submit's master and configuration."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(master: str | None = None, app_name: str = "mploader", verbosity: int = 0,
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """The active session, or a new one: at ``master`` if given, else the master something else set
    (spark-submit's ``--master``, ``spark.master`` in ``spark-defaults.conf``), else ``local[*]`` (Spark's own
    default).  The master is left to Spark unless given: it is known only once the JVM exists (under spark-submit
    the JVM is started already, otherwise PySpark starts it when the session is made), so it is never read here
    first.  ``conf``: Spark properties (``--conf key=value``), set on a new session after mploader's own.
    A local master runs the executors' Python with this interpreter (which has mploader) unless
    ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` names another.  The application is named ``app_name`` unless
    spark-submit was given a name (:func:`app_name_of`).
    A new session logs as :func:`spark_log_level` of ``verbosity`` says (0: only errors, its JVM started with
    :data:`QUIET_LOG4J2`); an active one keeps the levels it has.  Under spark-submit the JVM is started already
    (its configuration is spark-submit's), and only the level set once the session is made applies."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    submitted = None
    if under_spark_submit():  # its JVM holds its configuration: reached through the gateway, no context made
        SparkContext._ensure_initialized()
        submitted = SparkConf().get("spark.app.name")
    builder = SparkSession.builder.appName(app_name_of(app_name, submitted, sys.argv[0]))
    settings = {**_CONF, **(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    if master is not None:
        builder = builder.master(master)
    level = spark_log_level(verbosity)
    new = SparkContext._active_spark_context is None  # we make the context (and, unless spark-submit did, the JVM)
    if new and level == "ERROR" and not under_spark_submit():
        builder = builder.config(_JAVA_OPTIONS, quiet_java_options(settings.get(_JAVA_OPTIONS, "")))
    session = builder.getOrCreate()
    context = session.sparkContext
    if new and (context.master or "").startswith("local") and "PYSPARK_PYTHON" not in os.environ \
            and "spark.pyspark.python" not in settings:
        context.pythonExec = sys.executable  # the workers are forked on this host: this interpreter
    if new and level is not None:
        context.setLogLevel(level)
    return session


def app_name_of(ours: str, submitted: str | None, program: str) -> str:
    """The application's name: spark-submit's (its ``--name`` or ``spark.app.name``) where it was given one, else
    ``ours``.  spark-submit names an application it was given no name for after its Python file: ``program``'s
    base name is taken for no name.  ``--conf spark.app.name=...`` (mploader's) overrides both."""
    if submitted and submitted != os.path.basename(program):
        return submitted
    return ours


def parse_conf(pairs: Sequence[str]) -> dict[str, str]:
    """``--conf key=value`` arguments as Spark properties (a later key wins, as with spark-submit); ValueError
    names one without ``=``."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf {pair!r}: expected key=value (a Spark property)")
        out[key.strip()] = value
    return out


def quiet_java_options(options: str) -> str:
    """``options`` (the driver's extra Java options) with the JVM's log4j2 configuration :data:`QUIET_LOG4J2`,
    unless they name one already."""
    if "-Dlog4j2.configurationFile=" in options or "-Dlog4j.configurationFile=" in options:
        return options
    path = f'"{QUIET_LOG4J2}"' if any(c.isspace() for c in QUIET_LOG4J2) else QUIET_LOG4J2
    return f"{options} -Dlog4j2.configurationFile={path}".strip()


def check_session(spark: SparkSession) -> None:
    """Refuse a session the jobs cannot run in (see the module docstring), saying what to change."""
    if not hasattr(spark, "sparkContext") or type(spark).__module__.startswith("pyspark.sql.connect"):
        raise ValueError("mploader's Spark jobs need a classic Spark session (not Spark Connect)")
    if spark.sparkContext.getConf().get("spark.speculation", "false").lower() == "true":
        raise ValueError("spark.speculation is on: two copies of one task could recover the same partition; "
                         "set spark.speculation=false for mploader's jobs")


__all__ = ["DEFAULT_MASTER", "QUIET_LOG4J2", "app_name_of", "check_session", "parse_conf", "quiet_java_options",
           "spark_log_level", "spark_session", "under_spark_submit"]
