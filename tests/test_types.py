"""The type checker, as `make lint` runs it: mypy from the repository root with pyproject.toml's
[tool.mypy], which checks node.consensus, node.wal and reports.checkers strictly and follows
the rest of the project silently."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_mypy_finds_no_type_errors():
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, (
        f"mypy exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
