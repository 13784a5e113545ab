"""Helpers for tests on real lazyfs FUSE mounts (the lose-unfsynced-writes filesystem)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from nemeses.lazyfs import CONTROL_NAME, control_command, unmount_command

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEADLINE = 30.0  # seconds to wait for a mount to appear or go: only a hang guard


def mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def wait_until(predicate, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def unmount(mnt: str) -> None:
    if mounted(mnt):
        subprocess.run(unmount_command(mnt), shell=True, check=True)


class Mount:
    def __init__(self, backing: str, mnt: str) -> None:
        self.backing, self.mnt = backing, mnt
        self.control = os.path.join(mnt, CONTROL_NAME)

    def path(self, name: str) -> str:
        return os.path.join(self.mnt, name)

    def backing_bytes(self, name: str) -> bytes:
        with open(os.path.join(self.backing, name), "rb") as f:
            return f.read()

    def command(self, cmd: str) -> None:
        subprocess.run(control_command(self.mnt, cmd), shell=True, check=True)

    def stats(self) -> dict:
        with open(self.control) as f:
            return json.load(f)


def start_lazyfs(tmp_path):
    """(process, backing dir, mount point) of a lazyfs run in the foreground."""
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nemeses.lazyfs", str(backing), str(mnt), "--foreground"], cwd=REPO
    )
    return proc, backing, mnt
