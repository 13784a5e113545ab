"""`tessera analyze --master spark://...` against a real Spark standalone cluster: a master and
two workers started from the installed pyspark (its bin/spark-class), on loopback, with the
store on a path the driver and both workers see. The results must equal local mode's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from spark_store import analyze, write_store

from node.tools.local_cluster import free_port

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parent.parent


def _alive_workers(ui_port: int) -> list[dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            return [w for w in json.load(r)["workers"] if w["state"] == "ALIVE"]
    except (OSError, ValueError):  # not up yet, or another server's page on the port
        return []


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """spark://127.0.0.1:PORT with two one-core workers; every JVM stopped at the end."""
    import pyspark

    home = Path(pyspark.__file__).parent
    work = tmp_path_factory.mktemp("spark")
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(work / "logs"), "SPARK_NO_DAEMONIZE": "1"}
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = [str(home / "bin" / "spark-class")]
    procs = [subprocess.Popen(
        [*spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui)], env=env, start_new_session=True,
        stdout=open(work / "master.log", "w"), stderr=subprocess.STDOUT)]
    for i in (1, 2):
        procs.append(subprocess.Popen(
            [*spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
             "--cores", "1", "--memory", "2g", "--webui-port", "0",
             "--work-dir", str(work / f"worker{i}")], env=env, start_new_session=True,
            stdout=open(work / f"worker{i}.log", "w"), stderr=subprocess.STDOUT))
    try:
        deadline = time.monotonic() + 120
        while len(_alive_workers(ui)) < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "\n".join((work / f).read_text()[-2000:]
                                 for f in ("master.log", "worker1.log", "worker2.log"))
                pytest.fail(f"the standalone cluster did not come up:\n{logs}")
            time.sleep(0.5)
        yield {"url": url, "ui": ui, "work": work}
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _store(root: Path) -> Path:
    write_store(root, corrupt=False)
    return root


# What differs between two analyses of the same run by design: when and how fast.
_TIMING = {"analyzed_at", "seconds", "elapsed_s", "analysis_seconds", "wall_s"}


def _comparable(value):
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items() if k not in _TIMING}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def test_standalone_cluster_gives_local_modes_results(standalone, spark_store, spark_analyzed,
                                                     tmp_path):
    """The readable runs of the Spark tests' store (spark_store), analyzed on the cluster, give
    what local mode gave for them (spark_analyzed, the local tests' own analysis)."""
    local = spark_store["root"]
    cluster = _store(tmp_path / "cluster")
    shipped = set(Path(tempfile.gettempdir()).glob("tessera-ship-*"))
    by_cluster = analyze(cluster, standalone["url"])
    # the reports zip the executors were sent is gone with the analysis that made it
    assert set(Path(tempfile.gettempdir()).glob("tessera-ship-*")) <= shipped
    assert spark_analyzed.returncode != 0, spark_analyzed.stderr[-3000:]  # the stale run
    assert by_cluster.returncode == 1, by_cluster.stderr[-3000:]  # the stale run is invalid
    # the work really ran on the standalone workers: each keeps its executors' directories
    apps = [d for i in (1, 2) for d in (standalone["work"] / f"worker{i}").glob("app-*")]
    assert apps, "no application ran on the standalone workers"
    runs = sorted(p.parent.relative_to(cluster) for p in cluster.rglob("history.jsonl"))
    assert len(runs) == 3
    for run in runs:
        mine = json.loads((cluster / run / "results.json").read_text())
        theirs = json.loads((local / run / "results.json").read_text())
        assert _comparable(mine) == _comparable(theirs), run
        assert (cluster / run / "report.html").is_file()
    verdicts = {json.loads((cluster / r / "results.json").read_text())["verdict"] for r in runs}
    assert verdicts == {"valid", "invalid"}


def test_spark_submit_as_the_docs_show_it(standalone, tmp_path):
    """docs/analysis.md's spark-submit line against the same cluster: the venv's spark-submit,
    the reports zip as --py-files, `harness/cli.py analyze STORE --master ''`."""
    store = _store(tmp_path / "store")
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    zipped = subprocess.run([sys.executable, "-c", "from reports.spark.ship import package_zip; "
                             "print(package_zip())"], capture_output=True, text=True, env=env,
                            cwd=ROOT, check=True).stdout.strip()
    try:
        out = subprocess.run([str(venv_bin / "spark-submit"), "--master", standalone["url"],
                              "--py-files", zipped, "harness/cli.py", "analyze", str(store),
                              "--master", ""], capture_output=True, text=True, env=env,
                             cwd=ROOT, timeout=600, stdin=subprocess.DEVNULL)
    finally:  # the docs' zip is the user's to keep; the test's is removed
        shutil.rmtree(Path(zipped).parent, ignore_errors=True)
    assert out.returncode == 1, out.stderr[-3000:]  # the stale run is invalid
    verdicts = sorted(json.loads(p.read_text())["verdict"] for p in store.rglob("results.json"))
    assert verdicts == ["invalid", "invalid", "valid"], verdicts
