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


@pytest.fixture
def env(tmp_path):
    """For a netns end-to-end test: the environment its CLI runs get, with a netns state dir of
    its own; at the end `tessera cluster down`, and the machine's namespaces, links and host
    processes as they were before."""
    from netns_run import tessera

    from harness.cluster.netns import _links, _namespaces, _our_host_pids

    if any(ns.startswith("tessera-") for ns in _namespaces()):
        pytest.fail("a tessera netns cluster is already up: `tessera cluster down` first")
    state = f"/run/tessera-netns-e2e-{os.getpid()}"
    e = dict(os.environ, TESSERA_NETNS_STATE=state)
    before = (sorted(_namespaces()), sorted(_links()))
    yield e
    down = tessera("cluster", "down", env=e)
    assert down.returncode == 0, down.stderr
    assert (sorted(_namespaces()), sorted(_links())) == before
    assert not _our_host_pids(state) and not os.path.exists(state)
