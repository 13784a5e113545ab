"""Shared fixtures. `lazy`: a lazyfs mount (a disk that forgets unsynced writes on `lose`), for
the lazyfs tests and the fault-flag tests; `env`: a netns end-to-end test's environment. Every
test, and every `tessera` it starts, shares one wheel cache of the session's own
(harness.wheelhouse.cache_dir), so the suite builds the hosts' wheels once and leaves nothing in
the user's ~/.cache."""

from __future__ import annotations

import os
import subprocess

import pytest
from lazyfs_helpers import DEADLINE, Mount, mounted, start_lazyfs, unmount, wait_until


@pytest.fixture(scope="session", autouse=True)
def _session_wheel_cache(tmp_path_factory):
    os.environ["TESSERA_CACHE_DIR"] = str(tmp_path_factory.mktemp("tessera-cache"))


@pytest.fixture(scope="session")
def spark_store(tmp_path_factory) -> dict:
    """The Spark tests' store (tests/spark_store.py): {"root": its path, run name: run dir}."""
    from spark_store import write_store

    root = tmp_path_factory.mktemp("spark-store")
    return {"root": root, **write_store(root)}


@pytest.fixture(scope="session")
def spark_analyzed(spark_store):
    """`tessera analyze --master local[2]` of spark_store, once for the session."""
    from spark_store import analyze

    return analyze(spark_store["root"], "local[2]", timeout=300)


@pytest.fixture
def lazy(tmp_path):
    proc, backing, mnt = start_lazyfs(tmp_path)
    try:
        wait_until(lambda: mounted(str(mnt)) or proc.poll() is not None, "the mount")
        assert proc.poll() is None, "lazyfs exited instead of mounting"
        yield Mount(str(backing), str(mnt))
    finally:
        try:
            unmount(str(mnt))
            assert proc.wait(timeout=DEADLINE) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                subprocess.run(["fusermount3", "-uz", str(mnt)], check=False)
    assert not mounted(str(mnt))


@pytest.fixture
def batch_sizes(monkeypatch):
    """Ops per ts.write_batch the client sent: a spy on the real method."""
    from collections import Counter

    import node.client as client_module

    sizes = Counter()
    original = client_module.TesseraClient.write_batch

    async def spy(self, table, t, ops, *args, **kwargs):
        sizes[len(ops)] += 1
        return await original(self, table, t, ops, *args, **kwargs)

    monkeypatch.setattr(client_module.TesseraClient, "write_batch", spy)
    return sizes


@pytest.fixture(scope="session")
def netns_machine():
    """The machine before the first netns test; at the session's end the shared cluster
    (netns_run) goes down and the machine's namespaces, links and host processes must be as
    they were."""
    from netns_run import STATE, cluster_down, cluster_up

    from harness.cluster.netns import _links, _namespaces, _our_host_pids

    if cluster_up():
        pytest.fail("a tessera netns cluster is already up: `tessera cluster down` first")
    before = (sorted(_namespaces()), sorted(_links()))
    yield
    cluster_down()
    assert (sorted(_namespaces()), sorted(_links())) == before
    assert not _our_host_pids(STATE) and not os.path.exists(STATE)


@pytest.fixture
def env(netns_machine, request):
    """For a netns end-to-end test: the environment its CLI runs get, on the cluster the netns
    tests share (netns_run). Afterwards its hosts must hold no trace of the test; if one does,
    the cluster goes down (the next test starts clean) and this test fails, naming it. (A test
    that also asks for no_netns_cluster leaves the hosts as they are: they go down after it.)"""
    from netns_run import cluster_down, netns_env, traces

    yield netns_env()
    if "no_netns_cluster" in request.fixturenames:
        return
    left = traces()
    if left:
        cluster_down()
        pytest.fail(f"the test left traces on the netns hosts: {left}")


@pytest.fixture
def no_netns_cluster(netns_machine):
    """For a netns test that makes its own cluster or changes the hosts for good: the shared
    cluster down before it and after it."""
    from netns_run import cluster_down

    cluster_down()
    yield
    cluster_down()
