"""Shared fixtures. `lazy`: a lazyfs mount (a disk that forgets unsynced writes on `lose`), for
the lazyfs tests and the fault-flag tests."""

from __future__ import annotations

import subprocess

import pytest
from lazyfs_helpers import DEADLINE, Mount, mounted, start_lazyfs, unmount, wait_until


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
