"""The one Spark session of a test session (``local[2]``: starting one costs seconds), for the Spark tests.

Skips when pyspark (the ``spark`` extra) or Java is missing, saying what to install."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        pytest.skip("java not found: install Java 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME")
    from mploader.spark.session import spark_session

    session = spark_session("local[2]", "mploader-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@contextlib.contextmanager
def executor_python(session: Any, wrapper: os.PathLike[str]) -> Iterator[None]:
    """While open, the session's new Python workers run ``wrapper`` (what ``spark.pyspark.python`` sets)."""
    context = session.sparkContext
    saved, context.pythonExec = context.pythonExec, os.fspath(wrapper)
    try:
        yield
    finally:
        context.pythonExec = saved
