"""`make coverage-sim` (reports.coverage_sim): coverage.py's report grouped by the engine's
packages; and a real run of one short seed measures the spawned workers, not only the parent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reports.coverage_sim import per_package

ROOT = Path(__file__).resolve().parent.parent


def test_files_are_grouped_by_package_with_line_and_branch_percent():
    def f(statements, lines, branches, covered):
        return {"summary": {"num_statements": statements, "covered_lines": lines,
                            "num_branches": branches, "covered_branches": covered}}

    report = {"files": {str(ROOT / "node/wal/log.py"): f(100, 50, 10, 5),
                        str(ROOT / "node/wal/reader.py"): f(100, 100, 10, 10),
                        str(ROOT / "node/disk.py"): f(10, 1, 0, 0)},
              "totals": {"num_statements": 210, "covered_lines": 151, "num_branches": 20,
                         "covered_branches": 15}}
    out = per_package(report, ROOT)
    assert out["line_percent"] == 71.9 and out["branch_percent"] == 75.0
    assert out["packages"] == {"node": {"lines": 10.0, "branches": 100.0, "statements": 10},
                               "node.wal": {"lines": 75.0, "branches": 75.0, "statements": 200}}


@pytest.mark.slow
def test_one_short_seed_measures_the_servers_in_the_simulators_workers(tmp_path):
    out = subprocess.run([sys.executable, "-m", "reports.coverage_sim", "--seeds", "1",
                          "--seconds", "3", "--jobs", "1", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.splitlines()[-1])
    # the tablet servers and the WAL run only in the worker: measured there
    assert result["packages"]["node.tserver"]["lines"] > 20, result
    assert result["packages"]["node.wal"]["branches"] > 10, result
    assert (tmp_path / "html" / "index.html").is_file()


def test_bad_arguments_are_one_line_and_exit_254():
    out = subprocess.run([sys.executable, "-m", "reports.coverage_sim", "--seeds", "0"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 254 and "--seeds and --jobs must be at least 1" in out.stderr
