"""`tessera check`: verdicts, exit codes, JSON output and unreadable input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from reports.checkers.generate import corrupt_one_read, list_append_history, register_history
from reports.history import write_edn, write_jsonl

KNOSSOS = Path(__file__).parents[2] / "shared/data/knossos"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["check", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_valid_invalid_and_unknown_exit_codes(capsys, tmp_path):
    assert KNOSSOS.is_dir(), f"knossos reference histories missing at {KNOSSOS}"
    code, out, _ = run(capsys, KNOSSOS / "cas-register/good/memstress3-0.edn", "--model", "cas-register")
    assert code == 0 and out.startswith("VALID")
    code, out, _ = run(capsys, KNOSSOS / "cas-register/bad/rethink-fail-minimal.edn", "--model", "cas-register")
    assert code == 1 and out.startswith("INVALID") and "read 3" in out
    heavy = tmp_path / "heavy.jsonl"
    write_jsonl(corrupt_one_read(register_history(0, 100, processes=10, pending=20), 0), heavy)
    code, out, _ = run(capsys, heavy, "--model", "cas-register", "--max-states", "10")
    assert code == 2 and out.startswith("UNKNOWN") and "key None: unknown (more than 10 states)" in out


def test_json_output_is_one_object(capsys, tmp_path):
    path = tmp_path / "history.edn"
    write_edn(list_append_history(1, 200, keys=3), path)
    code, out, _ = run(capsys, path, "--model", "list-append", "--json")
    result = json.loads(out)
    assert code == 0 and result["verdict"] == "valid" and result["results"][0]["checker"] == "list-append"
    write_edn(list_append_history(3, 400, processes=8, keys=3, corrupt=True), path)
    code, out, _ = run(capsys, path, "--model", "list-append", "--json")
    assert code == 1 and json.loads(out)["results"][0]["anomalies"]


def test_multi_register_initial_values(capsys):
    path = KNOSSOS / "multi-register/good/multi-register.edn"
    code, _, _ = run(capsys, path, "--model", "multi-register", "--initial", '{"x": 0, "y": 0}')
    assert code == 0


@pytest.mark.parametrize(
    "text, line",
    [
        ("[{:process 1 :type :invoke :f :read}\n {:process 1 :type :ok :f :read", 2),
        ("{:process 1 :type :invoke :f :read}\n{:process 2 :type :ok :f :read :value 1}\n", 2),
        ("{:process 1 :type :invoke :f :read}\n{:process 1 :type :timeout :f :read}\n", 2),
    ],
)
def test_malformed_history_exits_2_naming_the_line(capsys, tmp_path, text, line):
    path = tmp_path / "bad.edn"
    path.write_text(text)
    code, out, err = run(capsys, path, "--model", "register")
    assert code == 2 and out == ""
    assert f"bad.edn:{line}:" in err


def test_missing_file_is_a_bad_argument(capsys, tmp_path):
    code, _, err = run(capsys, tmp_path / "nope.jsonl", "--model", "register")
    assert code == 254 and "nope.jsonl" in err


def test_console_script(tmp_path):
    path = tmp_path / "history.jsonl"
    write_jsonl(register_history(2, 50, keys=3, cas=False), path)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "check", str(path), "--model", "register", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "valid"


def test_a_run_directory_is_judged_by_the_checker_its_test_json_records(capsys, tmp_path):
    """`tessera check RUN_DIR`: the model (and its options) come from test.json, nemesis ops
    are left out as the harness leaves them out, and --model still overrides."""
    from reports.history import Op

    run_dir = tmp_path / "store" / "register" / "20261124T000000"
    run_dir.mkdir(parents=True)
    ops = register_history(0, 60, processes=3)
    nemesis = [Op(index=len(ops), type="info", f="start-kill", value={"killed": ["n1"]},
                  process="nemesis")]
    write_jsonl(ops + nemesis, run_dir / "history.jsonl")
    (run_dir / "test.json").write_text(json.dumps({"checker": {"model": "cas-register",
                                                               "options": {}}}))
    code, out, _ = run(capsys, run_dir)
    assert code == 0 and out.startswith("VALID  (cas-register")
    write_jsonl(corrupt_one_read(ops, 0) + nemesis, run_dir / "history.jsonl")
    code, out, _ = run(capsys, run_dir)
    assert code == 1 and out.startswith("INVALID")
    code, _, err = run(capsys, run_dir, "--model", "register")  # an explicit model wins,
    assert code == 2 and "register knows no f='cas'" in err  # and a plain register has no cas
    code, _, err = run(capsys, run_dir / "history.jsonl")  # a bare file names no model
    assert code == 254 and "--model is required" in err
    code, _, err = run(capsys, tmp_path)  # a directory that is no run
    assert code == 254 and "not a run directory" in err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("tessera ")


def test_nil_reads_are_a_value_by_default_and_unknown_as_knossos_reads_them(capsys, tmp_path):
    """After an acknowledged write of 1, an ok read of nil is stale if nil is a value (a Tessera
    read of an absent key), and says nothing under Knossos's semantics."""
    path = tmp_path / "history.edn"
    path.write_text("{:process 0 :type :invoke :f :write :value 1 :index 0}\n"
                    "{:process 0 :type :ok :f :write :value 1 :index 1}\n"
                    "{:process 1 :type :invoke :f :read :value nil :index 2}\n"
                    "{:process 1 :type :ok :f :read :value nil :index 3}\n")
    code, out, _ = run(capsys, path, "--model", "cas-register")
    assert code == 1 and out.startswith("INVALID")
    code, out, _ = run(capsys, path, "--model", "cas-register", "--nil-reads", "unknown")
    assert code == 0 and out.startswith("VALID")
