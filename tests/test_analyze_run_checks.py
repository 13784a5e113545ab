"""The analysis keeps the run's checks beyond its history (no Spark): the convergence result the
harness recorded in convergence.json and the node logs, checked again from the run directory,
join the check results and the verdict (invalid beats unknown beats valid)."""

import json

from reports.checkers.check import check_history
from reports.history import read_jsonl
from reports.spark.results import build
from reports.spark.runs import Run
from reports.spark.synth import register_history, write_run


def analyzed(tmp_path, convergence=None, log="tserver ready\n"):
    path = write_run(tmp_path, "20260101T000001", register_history(300, seed=11), seed=11)
    if convergence is not None:
        (path / "convergence.json").write_text(json.dumps(convergence))
    (path / "nodes" / "n1" / "extra.log").write_text(log)  # beside the synthetic node logs
    run = Run(path)
    ops = read_jsonl(run.history)
    return build(run, check_history([o for o in ops if o.process != "nemesis"], "cas-register"),
                 ops, None, "test")


def checkers(results):
    return {r["checker"]: r["verdict"] for r in results["check"]["results"]}


def test_a_clean_run_stays_valid_with_both_checks_listed(tmp_path):
    r = analyzed(tmp_path, {"checker": "convergence", "verdict": "valid", "errors": []})
    assert r["verdict"] == "valid"
    assert checkers(r)["convergence"] == "valid" and checkers(r)["logs"] == "valid"


def test_a_diverged_replica_recorded_by_the_run_makes_the_analysis_invalid(tmp_path):
    diverged = {"checker": "convergence", "verdict": "invalid",
                "errors": [{"type": "diverged", "explanation": "tablet t1: n2 differs at index 40"}]}
    r = analyzed(tmp_path, diverged)
    assert r["verdict"] == "invalid" and r["check"]["verdict"] == "invalid"
    assert any(a["checker"] == "convergence" and "n2 differs" in a["explanation"] for a in r["anomalies"])


def test_node_logs_are_checked_again_from_the_run_dir(tmp_path):
    r = analyzed(tmp_path, log="2026-11-22 10:00:00,000 tserver ERROR x: SAFETY: two leaders in term 3\n")
    assert r["verdict"] == "invalid" and checkers(r)["logs"] == "invalid"
    assert "convergence" not in checkers(r)  # recorded before the check existed: nothing to add
