"""``mploader spark`` on a real standalone cluster (a master and two 1-core workers on 127.0.0.1:
tests/spark_cluster.py), against the single-host commands on copies of one generated fleet of two brokers (one
unclean with injected faults, one unclean):

* ``spark verify`` (submitted with ``spark-submit --master spark://...``), ``spark load`` (a dry run, and
  ``--apply``, with ``--master spark://...``) give the single-host documents partition for partition and, applied,
  the single-host load's files;
* spark-submit's master is the job's (not ``local[*]``): the cluster's master lists the application;
* a worker killed (SIGKILL to its JVM, its executor's and their Python) while a task of an applied load runs on it,
  after the task recovered a partition: Spark runs the task again on the other worker, and the files and the
  report (what the first attempt did included) are the single-host load's;
* a worker in its own mount namespace sees other files at the driver's paths; ``spark load --apply`` on such a worker
  must refuse the other data and change none of it.

One cluster for the session (it takes seconds to start), and as few applications as the checks allow (each costs
seconds of JVMs: the one spark-submit run serves two tests, one viewing worker the two view tests); each test says
which workers it needs (``SparkCluster.reset``).  The tests run in scripts/test's first pass only (``one_pass``), in
one pytest-xdist worker (``xdist_group``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from mploader.generate import GeneratorConfig, generate  # noqa: E402
from tests import cli_json  # noqa: E402
from tests.crashy_worker import tree_digest  # noqa: E402
from tests.spark_cluster import SparkCluster, can_unshare, cluster, finish, pyspark_bin, spark_cluster  # noqa: E402, F401

pytestmark = [pytest.mark.slow, pytest.mark.one_pass, pytest.mark.xdist_group("spark-cluster")]

NOW = 1_730_000_000_000 + 600_000
_BASE = GeneratorConfig(data_dirs=2, topics=2, partitions_per_topic=2, total_bytes=400_000, segment_bytes=32 * 1024,
                        batch_bytes=4096, records_per_batch=8, faults=0, seed=31)
FLEET = {"b1": _BASE.replace(node_id=1, faults=6), "b2": _BASE.replace(node_id=2, seed=32)}
PARTITIONS = len(FLEET) * _BASE.topics * _BASE.partitions_per_topic
_TIMING = ("stats", "seconds")  # keys whose values are how long things took, or counters of the engine that ran


def make_fleet(root: Path, seed_offset: int = 0) -> Path:
    for name, cfg in FLEET.items():
        generate(root / name, cfg.replace(seed=cfg.seed + seed_offset))
    return root


def copy(template: Path, dest: Path) -> Path:
    subprocess.run(["cp", "-a", "--sparse=always", str(template), str(dest)], check=True)
    return dest


def broker_dirs(root: Path, broker: str) -> list[str]:
    return [str(d) for d in sorted((root / broker).glob("data-*"))]


def fleet_dirs(root: Path) -> list[str]:
    return [d for b in sorted(FLEET) for d in broker_dirs(root, b)]


def normalised(doc: Any, root: Path) -> Any:
    """``doc`` without its timings, its paths relative to the copy ``root`` it was made on."""
    if isinstance(doc, dict):
        return {normalised(k, root): normalised(v, root) for k, v in doc.items() if k not in _TIMING}
    if isinstance(doc, list):
        return [normalised(v, root) for v in doc]
    return doc.replace(str(root), "<root>") if isinstance(doc, str) else doc


def verify_partitions(doc: dict[str, Any], root: Path) -> list[Any]:
    return sorted(normalised(doc["partitions"], root), key=lambda p: p["dir"])


def load_document(doc: dict[str, Any], root: Path) -> dict[str, Any]:
    """A broker's ``load`` document as both commands write it (``spark load`` adds the broker's ``dirs``); the
    warnings sorted (the tasks' log records reach the driver in the order their tasks end)."""
    out = {k: v for k, v in normalised(doc, root).items() if k != "dirs"}
    return {**out, "warnings": sorted(out["warnings"])}


@dataclass(frozen=True)
class SingleHost:
    """The single-host commands' answers on copies of the fleet, broker by broker."""

    verify: list[Any]  # every broker's partitions (mploader verify --json), normalised
    verify_exit: int
    dry: list[dict[str, Any]]  # mploader load --dry-run --json, per broker (load_document)
    applied: list[dict[str, Any]]  # mploader load --json
    load_exit: int  # the worst of the brokers' (as spark load's)
    tree: dict[str, Any]  # the applied copy's files (tests.crashy_worker.tree_digest)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fleet(tmp_path_factory.mktemp("cluster-fleet"))


@pytest.fixture(scope="module")
def single_host(fleet: Path, tmp_path_factory: pytest.TempPathFactory) -> SingleHost:
    verify, dry, applied, codes = [], [], [], set()
    ref = copy(fleet, tmp_path_factory.mktemp("single-host") / "fleet")
    verify_codes = set()
    for broker in sorted(FLEET):
        got = cli_json.run("verify", *broker_dirs(fleet, broker), "--json", "--now-ms", str(NOW))
        verify.extend(verify_partitions(json.loads(got.stdout), fleet))
        verify_codes.add(got.returncode)
        for args, docs in ((["--dry-run"], dry), ([], applied)):
            got = cli_json.run("load", *broker_dirs(ref, broker), *args, "--json", "--now-ms", str(NOW))
            assert got.returncode in (0, 4), got.stderr
            docs.append(load_document(json.loads(got.stdout), ref))
            codes.add(got.returncode)
    return SingleHost(sorted(verify, key=lambda p: p["dir"]), max(verify_codes), dry, applied, max(codes),
                      tree_digest(ref))


def spark_command(on: SparkCluster, command: str, dirs: Sequence[str], out: Path, *args: str) -> list[str]:
    """``python -m mploader spark COMMAND`` on the cluster's master, the document to ``out``/doc.json."""
    return [sys.executable, "-m", "mploader", "spark", command, *dirs, "--master", on.master_url,
            "--out", str(out / "tables"), "--json-out", str(out / "doc.json"), "--now-ms", str(NOW), *args]


def answer(got: subprocess.CompletedProcess[str], out: Path) -> dict[str, Any]:
    """The command's ``--json-out`` document (a failure's error document too)."""
    assert (out / "doc.json").is_file(), (got.returncode, got.stdout[-3000:], got.stderr[-3000:])
    doc: dict[str, Any] = json.loads((out / "doc.json").read_text())
    return doc


def ran_on(on: SparkCluster, doc: dict[str, Any], pieces: int | None = None) -> None:
    """The document's job ran on the cluster's executors (``pieces`` of them: load's partitions)."""
    spark = doc["spark"]
    assert spark["master"] == on.master_url and spark["in_driver"] == 0
    assert spark["on_executors"] > 0 if pieces is None else spark["on_executors"] == pieces


def spark_run(on: SparkCluster, command: str, dirs: Sequence[str], out: Path, *args: str
              ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    got = finish(on.run(spark_command(on, command, dirs, out, *args)))
    return got, answer(got, out)


@dataclass(frozen=True)
class Submitted:
    """``spark verify`` of the fleet as docs/spark.md submits it: ``spark-submit --master spark://...`` of mploader's
    application file (one run for the module: an application costs seconds of JVMs)."""

    returncode: int
    doc: dict[str, Any]
    apps: list[Any]  # the master's completed applications that the run added


@pytest.fixture(scope="module")
def submitted(spark_cluster: SparkCluster, fleet: Path,  # noqa: F811
              tmp_path_factory: pytest.TempPathFactory) -> Submitted:
    from mploader.cli import spark_submit as app

    spark_cluster.reset()
    out = tmp_path_factory.mktemp("submitted")
    before = {a["id"] for a in spark_cluster.state()["completedapps"]}
    argv = [pyspark_bin("spark-submit"), "--master", spark_cluster.master_url, "--conf", "spark.speculation=false",
            str(app.__file__), "spark", "verify", *fleet_dirs(fleet), "--out", str(out / "tables"),
            "--json-out", str(out / "doc.json"), "--now-ms", str(NOW)]
    got = finish(spark_cluster.run(argv))
    return Submitted(got.returncode, answer(got, out),
                     [a for a in spark_cluster.state()["completedapps"] if a["id"] not in before])


def test_spark_verify_and_load_on_the_cluster_are_the_single_host_commands(
        cluster: SparkCluster, fleet: Path, single_host: SingleHost, submitted: Submitted,  # noqa: F811
        tmp_path: Path) -> None:
    """``spark verify`` (spark-submit's run), ``spark load`` and ``spark load --apply`` (``--master``)."""
    assert submitted.returncode == single_host.verify_exit
    ran_on(cluster, submitted.doc)
    assert verify_partitions(submitted.doc, fleet) == single_host.verify
    cluster.reset()
    root = copy(fleet, tmp_path / "fleet")
    for args, expected, out in (([], single_host.dry, "dry"), (["--apply"], single_host.applied, "apply")):
        got, doc = spark_run(cluster, "load", fleet_dirs(root), tmp_path / out, *args)
        assert got.returncode == single_host.load_exit, got.stderr[-3000:]
        ran_on(cluster, doc, PARTITIONS)
        assert [load_document(b, root) for b in doc["brokers"]] == expected
        if not args:
            assert tree_digest(root) == tree_digest(fleet), "a dry run changed files"
    assert tree_digest(root) == single_host.tree


def test_spark_submit_runs_the_job_on_its_master(cluster: SparkCluster, submitted: Submitted) -> None:  # noqa: F811
    """``spark-submit --master spark://...`` (docs/spark.md): the session mploader makes is spark-submit's, on the
    cluster, not ``local[*]``; the master lists the application, finished, with the cluster's two cores."""
    ran_on(cluster, submitted.doc)
    assert [(a["name"], a["state"], a["cores"]) for a in submitted.apps] == \
        [(submitted.doc["spark"]["app_name"], "FINISHED", 2)]


def wait_for(path: Path, driver: subprocess.Popen[str], timeout: float = 300) -> None:
    """Until ``path`` exists; fails if the driver ends first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert driver.poll() is None, f"the driver ended before {path} existed: {driver.communicate()}"
        assert time.monotonic() < deadline, f"no {path} in {timeout:g} s"
        time.sleep(0.05)


# the sitecustomize of the load's Python on the executors (spark.executorEnv.PYTHONPATH; no daemon: each task's
# Python imports it): the first task's Python to go on after recording what its load did to a partition (the next
# open of another file, once mploader-attempt was written) writes its work dir into the flag and stops (SIGSTOP),
# in the middle of its task, for the test to kill its worker
_STOP_AFTER_A_RECORD = """import os
import signal
import sys

recorded = []


def _hook(event, args):
    if event != "open" or not isinstance(args[0], str) or args[0] == {flag!r} or recorded == ["done"]:
        return
    if args[0].endswith("mploader-attempt") and (args[2] or 0) & (os.O_WRONLY | os.O_RDWR):
        recorded.append(args[0])
    elif recorded:
        try:
            fd = os.open({flag!r}, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:  # another task's Python stopped first
            recorded[:] = ["done"]
            return
        os.write(fd, os.getcwd().encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGSTOP)


sys.addaudithook(_hook)
"""


def test_a_worker_killed_mid_load_the_other_runs_its_task(cluster: SparkCluster, fleet: Path,  # noqa: F811
                                                           single_host: SingleHost, tmp_path: Path) -> None:
    """SIGKILL to a worker (its JVM, its executor's, their Python) while a task of an applied load runs on it, after
    the task recovered a partition: Spark runs the task again on the other worker, whose attempt finds that
    partition recovered and answers what the first attempt recorded of it (spark.attempt): the load completes with
    the single-host outcome, its files and its report (what each partition's load did, its WARN lines)."""
    cluster.reset()
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    flag = tmp_path / "stopped"
    (hooks / "sitecustomize.py").write_text(_STOP_AFTER_A_RECORD.format(flag=str(flag)))
    root = copy(fleet, tmp_path / "fleet")
    driver = cluster.run(spark_command(cluster, "load", fleet_dirs(root), tmp_path, "--apply",
                                       "--conf", f"spark.executorEnv.PYTHONPATH={hooks}{os.pathsep}{_ROOT}",
                                       "--conf", "spark.python.use.daemon=false"))
    wait_for(flag, driver)  # a task recorded a partition and stopped in the middle of its next one
    stopped_in = flag.read_text()
    victim, = (w for w in cluster.workers if stopped_in.startswith(str(cluster.root / w.name) + os.sep))
    cluster.stop_worker(victim, signal.SIGKILL)
    got = finish(driver)
    assert got.returncode == single_host.load_exit, got.stderr[-5000:]  # its task ran again: the load completed
    doc = answer(got, tmp_path)
    ran_on(cluster, doc, PARTITIONS)
    assert tree_digest(root) == single_host.tree
    assert [load_document(b, root) for b in doc["brokers"]] == single_host.applied
    assert not list(root.rglob("mploader-attempt"))  # the driver removed its run's records
    assert [w["state"] for w in cluster.state()["workers"] if w["port"] == victim.port] == ["DEAD"]


@dataclass(frozen=True)
class Views:
    """What the driver sees (``planned``) and what a worker with :attr:`view` sees at the same paths: a file
    ``which`` saying whose it is, and ``fleet``: the fleet, and another one (other seeds: the same topics and
    partitions, other segments)."""

    planned: Path
    other: Path

    @property
    def view(self) -> dict[str, str]:
        return {str(self.planned): str(self.other)}


@pytest.fixture(scope="module")
def views(fleet: Path, tmp_path_factory: pytest.TempPathFactory) -> Views:
    """The two views, one worker with the other for both tests (one worker started for them)."""
    if (why := can_unshare()) is not None:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("views")
    planned, other = root / "planned", root / "other"
    for d, text in ((planned, "the driver's"), (other, "another")):
        d.mkdir()
        (d / "which").write_text(text)
    copy(fleet, planned / "fleet")
    make_fleet(other / "fleet", seed_offset=100)
    return Views(planned, other)


# a driver that runs 8 tasks; each answers its worker's work dir, the file at argv[2] as its executor sees it, and
# the mploader the executor's Python imports.  Both executors are registered before the job (the cluster's
# spark-defaults), so each takes a task in Spark's first round of offers.
_WHO_SEES_WHAT = """
import json, os, sys
from pyspark import SparkContext
context, path = SparkContext(sys.argv[1], "views"), sys.argv[2]
def look(_):
    import mploader
    with open(path) as f:
        yield os.getcwd(), f.read(), mploader.__file__
print(json.dumps(sorted(set(context.parallelize(range(8), 8).mapPartitions(look).collect()))))
context.stop()
"""


def test_a_worker_in_its_own_mount_namespace_sees_other_files(cluster: SparkCluster,  # noqa: F811
                                                              views: Views) -> None:
    """A plain worker and one with the other view: a job's tasks read one path, each worker's executor reads its
    own view's file there (and imports the tree under test)."""
    viewer, = cluster.reset(views.view)
    plain, = (w for w in cluster.workers if w is not viewer)
    got = finish(cluster.run([sys.executable, "-c", _WHO_SEES_WHAT, cluster.master_url,
                              str(views.planned / "which")]))
    assert got.returncode == 0, got.stderr[-3000:]
    seen = {Path(cwd).relative_to(cluster.root).parts[0]: (text, module)
            for cwd, text, module in json.loads(got.stdout.strip().splitlines()[-1])}
    tree = str(_ROOT / "mploader" / "__init__.py")  # the tree under test, whatever else the venv would import
    assert seen == {plain.name: ("the driver's", tree), viewer.name: ("another", tree)}
    assert (views.planned / "which").read_text() == "the driver's"  # the mount stayed in the worker's namespace


def test_spark_load_refuses_a_worker_that_sees_other_data(cluster: SparkCluster, views: Views,  # noqa: F811
                                                          tmp_path: Path) -> None:
    """The driver plans on its view of the dirs; the only worker sees the other fleet at those paths.  Right data
    or nothing: the tasks refuse it, the command fails saying so, and no file of the other fleet changes."""
    before = tree_digest(views.other / "fleet")
    cluster.reset(views.view, workers=1)
    got, doc = spark_run(cluster, "load", fleet_dirs(views.planned / "fleet"), tmp_path, "--apply",
                         "--conf", "spark.cores.max=1")  # one worker
    assert tree_digest(views.other / "fleet") == before, "the load changed the other view's files"
    assert got.returncode == 1, got.stderr[-3000:]
    message = doc["error"]["message"]
    assert "WrongDataError" in message or "differ" in message, message
