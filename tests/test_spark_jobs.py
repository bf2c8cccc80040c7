"""No silent fallback, and the cluster path as documented (docs/spark.md), with real Spark:

* executors whose Python has no mploader (a real worker interpreter without it): ``spark verify`` and ``spark load``
  fail with the executors' ``ModuleNotFoundError`` in the message; with ``driver_fallback`` the driver does the
  work, the outcome is the single-host one, and the counts say it ran in the driver;
* a standalone master with no worker (pyspark's ``bin/spark-class``): the watchdog ends the job after
  ``--executor-timeout``, the command fails saying so;
* ``spark-submit --master local[1]``: the job runs on spark-submit's master (not ``local[*]``), ``--conf`` reaches
  the session, and the ``--json`` document on stdout and ``--json-out``'s file parse.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from mploader import LoaderConfig, load_logs  # noqa: E402
from mploader.generate import GeneratorConfig, generate  # noqa: E402
from mploader.verify import verify_logs  # noqa: E402
from tests.crashy_worker import result_digest  # noqa: E402
from tests.spark_session import executor_python, spark  # noqa: E402, F401

NOW = 1_730_000_000_000 + 600_000
_BROKER = GeneratorConfig(data_dirs=1, topics=1, partitions_per_topic=2, total_bytes=120_000, segment_bytes=32 * 1024,
                          batch_bytes=4096, records_per_batch=8, faults=2, seed=5)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("broker")
    generate(root / "b", _BROKER)
    return root / "b" / "data-0"


def _pyspark_bin(name: str) -> str:
    pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")
    path = os.path.join(os.path.dirname(pyspark.__file__), "bin", name)
    if not os.access(path, os.X_OK):
        pytest.skip(f"pyspark ships no bin/{name}")
    return path


@pytest.fixture
def python_without_mploader(spark: Any, tmp_path: Path) -> Iterator[None]:  # noqa: F811
    """The executors' Python made one that has pyspark and pyarrow but not mploader (what a cluster whose
    executors lack the package runs): this interpreter with the environment's packages as a plain path (no
    ``.pth``, so no editable mploader), no PYTHONPATH, another working directory."""
    wrapper = tmp_path / "python-without-mploader"
    wrapper.write_text(f"#!/bin/sh\ncd {tmp_path}\n"  # not the worktree: ``python -m`` puts the cwd on sys.path
                       f"PYTHONPATH={sysconfig.get_paths()['purelib']} exec {sys.executable} -S \"$@\"\n")
    wrapper.chmod(0o755)
    with executor_python(spark, wrapper):
        yield


@pytest.mark.usefixtures("python_without_mploader")
def test_a_failed_job_fails_with_the_executors_exception_unless_driver_fallback(spark: Any,  # noqa: F811
                                                                                 broker: Path) -> None:
    from mploader.spark import fleet
    from mploader.spark.jobs import SparkJobFailed

    dirs = [str(broker)]
    for run in (fleet.verify, fleet.load):
        with pytest.raises(SparkJobFailed, match=r"ModuleNotFoundError: No module named 'mploader'"):
            run(spark, dirs, LoaderConfig(), now_ms=NOW)
    policy = fleet.JobPolicy(driver_fallback=True)
    verified = fleet.verify(spark, dirs, LoaderConfig(), now_ms=NOW, policy=policy)
    assert verified.reports[0][1].to_json()["partitions"] == verify_logs(dirs, now_ms=NOW).to_json()["partitions"]
    ran = fleet.where_it_ran(verified.engines)
    assert ran["on_executors"] == 0 and ran["in_driver"] > 0
    loaded = fleet.load(spark, dirs, LoaderConfig(), now_ms=NOW, policy=policy)
    (_, result), = loaded.results
    assert result_digest(result, broker) == result_digest(  # type: ignore[arg-type]
        load_logs(dirs, LoaderConfig(dry_run=True), now_ms=NOW), broker)
    assert fleet.where_it_ran(loaded.engines) == {"on_executors": 0, "in_driver": _BROKER.partitions_per_topic}


def test_where_it_ran_counts_executor_work(spark: Any, broker: Path) -> None:  # noqa: F811
    from mploader.spark import fleet

    loaded = fleet.load(spark, [str(broker)], LoaderConfig(), now_ms=NOW)
    assert fleet.where_it_ran(loaded.engines) == {"on_executors": _BROKER.partitions_per_topic, "in_driver": 0}


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(_ROOT), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("PYSPARK_GATEWAY_PORT", None)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def master_without_workers(tmp_path: Path) -> Iterator[str]:
    """A standalone master on 127.0.0.1 (pyspark's ``bin/spark-class``) that no worker joins."""
    spark_class = _pyspark_bin("spark-class")
    port = _free_port()
    log = (tmp_path / "master.log").open("w")
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(_free_port())],
                              stdout=log, stderr=subprocess.STDOUT, env=_env())
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert master.poll() is None, (tmp_path / "master.log").read_text()
                time.sleep(0.5)
        yield f"spark://127.0.0.1:{port}"
    finally:
        master.terminate()
        master.wait(30)
        log.close()


def test_a_job_without_executors_is_ended_by_the_watchdog(master_without_workers: str, broker: Path,
                                                           tmp_path: Path) -> None:
    t0 = time.monotonic()
    got = subprocess.run([sys.executable, "-m", "mploader", "spark", "verify", str(broker), "--out",
                          str(tmp_path / "out"), "--master", master_without_workers, "--executor-timeout", "3",
                          "--json-out", str(tmp_path / "doc.json"), "--conf", "spark.cores.max=1"],
                         capture_output=True, text=True, env=_env(), timeout=300)
    assert got.returncode == 1, (got.stdout, got.stderr)
    assert "no executor ran a task of it for 3 s" in got.stderr, got.stderr
    doc = json.loads((tmp_path / "doc.json").read_text())
    assert doc["error"]["exit_code"] == 1 and "no executor" in doc["error"]["message"]
    assert time.monotonic() - t0 < 200


def test_spark_submit_master_conf_and_json(broker: Path, tmp_path: Path) -> None:
    """spark-submit's ``--master local[1]`` and ``--name`` are the job's, mploader's ``--conf`` reaches the session,
    stdout and the file hold one JSON document each (spark-submit copies the Python driver's stderr to its
    stdout)."""
    submit = _pyspark_bin("spark-submit")
    from mploader.cli import spark_submit as app

    got = subprocess.run([submit, "--master", "local[1]", "--name", "fleet-check", str(app.__file__), "spark",
                          "verify", str(broker),
                          "--out", str(tmp_path / "out"), "--now-ms", str(NOW), "--json",
                          "--json-out", str(tmp_path / "doc.json"), "--conf", "spark.sql.shuffle.partitions=3"],
                         capture_output=True, text=True, env=_env(), timeout=300)
    assert got.returncode == 1, (got.stdout[-2000:], got.stderr[-2000:])  # the faulty broker is not healthy
    doc = json.loads(got.stdout)
    assert json.loads((tmp_path / "doc.json").read_text()) == doc
    assert doc["spark"]["master"] == "local[1]" and doc["spark"]["app_name"] == "fleet-check"
    assert doc["spark"]["conf"] == {"spark.sql.shuffle.partitions": "3"}
    assert doc["spark"]["on_executors"] > 0 and doc["spark"]["in_driver"] == 0


def test_the_application_is_named_by_spark_submit_where_it_was_given_a_name() -> None:
    from mploader.spark.session import app_name_of

    assert app_name_of("mploader spark load", "nightly-fleet", "/opt/x/spark_submit.py") == "nightly-fleet"
    # spark-submit names an unnamed application after its Python file: that is no name
    assert app_name_of("mploader spark load", "spark_submit.py", "/opt/x/spark_submit.py") == "mploader spark load"
    assert app_name_of("mploader spark load", None, "mploader") == "mploader spark load"


def test_executor_error_names_the_workers_exception() -> None:
    from mploader.spark.jobs import executor_error

    class PythonException(Exception):
        pass

    text = ("\n  An exception was thrown from the Python worker. Please see the stack trace below.\n"
            "Traceback (most recent call last):\n  File \"worker.py\", line 1, in main\n"
            "ModuleNotFoundError: No module named 'mploader'\n")
    assert executor_error(PythonException(text)).startswith("ModuleNotFoundError: No module named 'mploader' "
                                                            "(on the executors; PythonException: ")
    assert executor_error(ValueError("plain")) == "ValueError: plain"
