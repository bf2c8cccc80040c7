"""A real standalone Spark cluster on 127.0.0.1 for the tests: a master and two workers (1 core each), started with
pyspark's own ``bin/spark-class``, once per test session (:func:`spark_cluster`; :func:`cluster` gives each test
the workers it asks for with :meth:`SparkCluster.reset`, whatever the test before it killed or replaced).

Everything the cluster writes (the workers' work dirs, the daemons' logs, Spark's scratch dirs, its own
``SPARK_CONF_DIR``, whose ``spark-defaults.conf`` is :data:`SPARK_DEFAULTS`: no configuration of the machine's
applies) lies under the session's temporary directory; its ports are chosen free.  Every process of the cluster,
and every driver :meth:`SparkCluster.run` starts, carries the cluster's marker in its environment (:data:`MARKER`):
the teardown ends the drivers' and the daemons' process groups, then any process still carrying the marker (an
executor's JVM or Python), by its id, so that no JVM outlives the session, even when a test failed.

The executors run this interpreter (``PYSPARK_PYTHON``, set for every driver) with ``PYTHONPATH`` the tree under
test (the workers' environment, which their executors and Python workers inherit): not the ``mploader`` an
editable install of another checkout would give.  A worker may be started in its own mount namespace with other
directories bind-mounted over some paths (:meth:`SparkCluster.start_worker` ``view``): it sees other files at the
driver's paths, as a worker of a real cluster with a wrongly mounted volume would.

Skips (with what to install) where pyspark or Java is missing, and the views where ``unshare`` cannot make a
mount namespace (it needs root).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKER = "MPLOADER_TEST_SPARK_CLUSTER"  # environment variable naming the cluster a process belongs to
WORKERS = 2
STARTUP_SECONDS = 180.0  # a daemon's JVM on a busy 2-CPU machine: seconds, not minutes
# small JVMs: the daemons' heap, and the memory a worker offers (Spark's default executor asks for 1g of it)
DAEMON_MEMORY = "256m"
WORKER_MEMORY = "512m"
# short-lived JVMs on a 2-CPU machine: the JIT's first tier only, one collector thread (less CPU spent starting)
JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
# the applications' defaults (spark-defaults.conf of the cluster's SPARK_CONF_DIR, which spark-submit reads, and so
# every driver): an executor fits a worker; no web UI unless a test asks for one (spark.ui.enabled=true)
SPARK_DEFAULTS = {"spark.executor.memory": WORKER_MEMORY, "spark.ui.enabled": "false",
                  **{f"spark.{jvm}.defaultJavaOptions": JVM_OPTIONS for jvm in ("driver", "executor")},
                  # every application waits for an executor on each worker before its first job (it takes a task on
                  # each); a test that runs fewer workers says so with spark.cores.max
                  "spark.cores.max": str(WORKERS), "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                  "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{STARTUP_SECONDS:g}s"}
# mount --bind SOURCE TARGET for each pair of arguments before "--", then the command after it, in the namespace
# unshare made (private propagation: the mounts stay in it)
_BIND_THEN_EXEC = 'while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 125; shift 2; done; shift; exec "$@"'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pyspark_bin(name: str) -> str:
    """pyspark's ``bin/NAME`` (``spark-class``, ``spark-submit``); skips where pyspark or Java is missing."""
    pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        pytest.skip("java not found: install Java 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME")
    path = os.path.join(os.path.dirname(pyspark.__file__), "bin", name)
    if not os.access(path, os.X_OK):
        pytest.skip(f"pyspark ships no bin/{name}")
    return path


def can_unshare() -> str | None:
    """Why a worker cannot have its own view of the paths here (None: it can)."""
    if shutil.which("unshare") is None:
        return "no unshare (util-linux) on this machine"
    got = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    return None if got.returncode == 0 else f"unshare --mount fails here (needs root): {got.stderr.strip()}"


def get_json(url: str, timeout: float = 5) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 - a daemon of ours on 127.0.0.1
        return json.load(answer)


@dataclass
class Daemon:
    """A master or worker JVM (the leader of its own process group) and where it logs."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    webui_port: int
    log: Path
    view: dict[str, str] = field(default_factory=dict)  # path -> the directory a worker sees there

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"


class SparkCluster:
    """A standalone master and its workers under ``root`` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.spark_class = pyspark_bin("spark-class")
        self.conf_dir = root / "conf"  # ours: no configuration of the machine's Spark applies
        self.conf_dir.mkdir(parents=True)
        (self.conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in SPARK_DEFAULTS.items()))
        self.workers: list[Daemon] = []
        self.drivers: list[subprocess.Popen[str]] = []  # started by run(): a failed test may leave one running
        self._started = 0
        self.master = self._start("master", ["org.apache.spark.deploy.master.Master"])
        self.master_url = f"spark://127.0.0.1:{self.master.port}"

    def env(self) -> dict[str, str]:
        """Every process's environment: Spark's, this interpreter for the executors, the tree under test on the
        path, the marker."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")}
        path = [str(ROOT), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
        env.update(PYTHONPATH=os.pathsep.join(dict.fromkeys(path)), PYSPARK_PYTHON=sys.executable,
                   PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_CONF_DIR=str(self.conf_dir),
                   SPARK_LOCAL_DIRS=str(self.root / "local"), SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
                   SPARK_DAEMON_JAVA_OPTS=JVM_OPTIONS,
                   **{MARKER: str(self.root)})
        return env

    def _start(self, name: str, command: Sequence[str], view: dict[str, str] | None = None) -> Daemon:
        port, webui = free_port(), free_port()
        log = self.root / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [self.spark_class, *command, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)]
        if view:
            pairs = [p for target, source in view.items() for p in (source, target)]
            argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _BIND_THEN_EXEC, "sh",
                    *pairs, "--", *argv]
        with log.open("wb") as out:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       env=self.env(), cwd=self.root, start_new_session=True)
        return Daemon(name, process, port, webui, log, dict(view or {}))

    def start_worker(self, view: Mapping[str, str | os.PathLike[str]] | None = None) -> Daemon:
        """A new worker (1 core) registering with the master; ``view``: path -> a directory bind-mounted over it in
        the worker's own mount namespace (its executors see that directory's files at the path)."""
        self._started += 1
        name = f"worker-{self._started}"
        work = self.root / name
        work.mkdir()
        worker = self._start(name, ["org.apache.spark.deploy.worker.Worker", "--cores", "1", "--memory",
                                    WORKER_MEMORY, "--work-dir", str(work), self.master_url],
                             _view(view))
        self.workers.append(worker)
        return worker

    def stop_worker(self, worker: Daemon, sig: int = signal.SIGTERM) -> None:
        """Ends ``worker`` and its executors (its process group), SIGKILL after ``sig`` if it lingers."""
        _end_group(worker.process, sig)
        self.workers.remove(worker)

    def state(self) -> Any:
        """The master's JSON (``workers``, ``activeapps``, ``completedapps``...)."""
        return get_json(f"http://127.0.0.1:{self.master.webui_port}/json")

    def wait_for_workers(self, timeout: float = STARTUP_SECONDS) -> None:
        """Until the master holds every worker of ours ALIVE, and no other; fails with the logs of a daemon that
        died."""
        deadline = time.monotonic() + timeout
        while True:
            for daemon in (self.master, *self.workers):
                assert daemon.alive(), f"{daemon.name} exited {daemon.process.returncode}:\n{daemon.log_tail()}"
            try:
                state = self.state()
                alive = {w["port"] for w in state["workers"] if w["state"] == "ALIVE"}
                if alive == {w.port for w in self.workers}:
                    return
            except OSError:  # the master's web UI is not up yet
                pass
            assert time.monotonic() < deadline, f"workers not registered in {timeout:g} s:\n{self.master.log_tail()}"
            time.sleep(0.3)

    def reset(self, *views: Mapping[str, str | os.PathLike[str]], workers: int = WORKERS) -> list[Daemon]:
        """``workers`` workers, all registered: one with each of ``views`` (:meth:`start_worker`), the others plain;
        a running worker with the view asked for is kept (a killed one is replaced), the others are stopped.  The
        drivers of the test before are ended first.  Returns the workers with ``views``, in their order."""
        self.end_drivers()
        wanted = [_view(v) for v in views] + [{}] * (workers - len(views))
        kept: list[Daemon] = []
        for worker in [w for w in self.workers if w.alive()]:
            if worker.view in wanted:
                wanted.remove(worker.view)
                kept.append(worker)
        for worker in [w for w in self.workers if w not in kept]:
            self.stop_worker(worker)
        for view in wanted:
            self.start_worker(view)
        self.wait_for_workers()
        return [next(w for w in self.workers if w.view == _view(v)) for v in views]

    def run(self, argv: Sequence[str]) -> subprocess.Popen[str]:
        """A driver process (``argv``) in its own process group with the cluster's environment (output piped);
        :func:`finish` waits for it."""
        driver = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=self.env(), cwd=ROOT,
                                  start_new_session=True)
        self.drivers.append(driver)
        return driver

    def end_drivers(self) -> None:
        """Kills what is left of the drivers :meth:`run` started (their process groups)."""
        for driver in self.drivers:
            if driver.poll() is None:  # still its group's leader: the group is ours
                _end_group(driver, signal.SIGKILL)
                driver.communicate()
        self.drivers.clear()

    def stop(self) -> None:
        """The drivers, every worker, the master, then whatever process still carries the marker (by its id)."""
        self.end_drivers()
        for worker in list(self.workers):
            self.stop_worker(worker)
        _end_group(self.master.process, signal.SIGTERM)
        for pid in _still_marked(str(self.root), 30):  # an executor's JVM or Python its worker did not take along
            _kill(pid)
        _still_marked(str(self.root), 10)


def _view(view: Mapping[str, str | os.PathLike[str]] | None) -> dict[str, str]:
    return {str(k): os.fspath(v) for k, v in (view or {}).items()}


def finish(process: subprocess.Popen[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``process``'s output once it exits; past ``timeout`` its group is killed and the test fails."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(process, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"{process.args} ran past {timeout:g} s:\n{out[-3000:]}\n{err[-3000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _end_group(process: subprocess.Popen[Any], sig: int, grace: float = 15) -> None:
    """``sig`` to ``process``'s group (it leads one), SIGKILL to the group if the leader lingers past ``grace``;
    then SIGKILL to whatever of the group is left (a child the signal left running)."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        process.wait()
    _kill_group(process.pid)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _still_marked(mark: str, seconds: float) -> list[int]:
    """The processes still marked ``mark`` after waiting up to ``seconds`` for them to end."""
    deadline = time.monotonic() + seconds
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def marked_processes(mark: str) -> list[int]:
    """The live processes whose environment says ``MARKER=mark`` (ours: the cluster's and its drivers')."""
    needle = f"{MARKER}={mark}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                zombie = f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:  # gone, or not ours to read
            continue
        if needle in environ and not zombie:
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """The session's cluster: a master and :data:`WORKERS` workers starting (:meth:`SparkCluster.reset` waits until
    they are registered: the module's other fixtures run meanwhile); stopped at the end."""
    pyspark_bin("spark-class")  # skips first, before any directory is made
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        for _ in range(WORKERS):
            cluster.start_worker()
        yield cluster
    finally:
        cluster.stop()
    assert not marked_processes(str(cluster.root)), "processes of the cluster outlived it"


@pytest.fixture
def cluster(spark_cluster: SparkCluster) -> Iterator[SparkCluster]:
    """The session's cluster, for a test that first says which workers it needs (:meth:`SparkCluster.reset`: a test
    before may have killed one or started one of its own); the drivers the test started are ended after it."""
    yield spark_cluster
    spark_cluster.end_drivers()
