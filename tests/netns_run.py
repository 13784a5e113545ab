"""The netns end-to-end tests' way to run the CLI as a user does: `python -m harness.cli ...`
with no standard input. Their `env` fixture (conftest.py) brings the cluster down after each."""

from __future__ import annotations

import subprocess
import sys


def tessera(*argv, env, timeout=600):
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)
