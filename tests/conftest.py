"""Shared fixtures. `lazy`: a lazyfs mount (a disk that forgets unsynced writes on `lose`), for
the lazyfs tests and the fault-flag tests. Every test, and every `tessera` it starts, shares one
wheel cache of the session's own (harness.db.cache_dir), so the suite builds the hosts' wheels
once and leaves nothing in the user's ~/.cache."""

from __future__ import annotations

import os
import subprocess

import pytest
from lazyfs_helpers import DEADLINE, Mount, mounted, start_lazyfs, unmount, wait_until


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Tests marked netns take turns on the machine's one netns test cluster: under xdist
    (`make test` runs `-n 2 --dist loadgroup`) they all go to one worker, in order, and the
    other tests run beside them on both workers."""
    for item in items:
        if item.get_closest_marker("netns"):
            item.add_marker(pytest.mark.xdist_group("netns"))


@pytest.fixture(scope="session", autouse=True)
def _session_wheel_cache(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # one cache for the workers (its builds are locked)
        base = base.parent
    cache = base / "tessera-cache"
    cache.mkdir(exist_ok=True)
    os.environ["TESSERA_CACHE_DIR"] = str(cache)


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
