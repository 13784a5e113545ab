"""`tessera analyze` on a real local SparkSession over a small store: a valid run, a
non-linearizable run, a run with an Elle cycle and a run whose history.jsonl is truncated."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from reports.history import Op, write_jsonl
from reports.spark.synth import register_history, write_run

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def store(spark_store) -> dict[str, Path]:
    return spark_store


@pytest.fixture(scope="module")
def cli(spark_analyzed) -> subprocess.CompletedProcess:
    return spark_analyzed


@pytest.fixture(scope="module")
def spark():
    from reports.spark.job import session

    s = session("local[2]", app="tessera-tests")
    yield s
    s.stop()


def results(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def test_verdicts_per_run(store, cli):
    assert cli.returncode == 1, cli.stderr  # an invalid run makes the exit code 1
    assert results(store["valid"])["verdict"] == "valid"
    stale = results(store["stale"])
    assert stale["verdict"] == "invalid"
    assert [cx["key"] for cx in stale["counterexamples"]] == ["r0"]
    assert stale["counterexamples"][0]["paths"][0]["blocked_op"]["value"] == 99
    g1c = results(store["g1c"])
    assert g1c["verdict"] == "invalid" and g1c["checker"] == "list-append"
    assert [a["type"] for a in g1c["anomalies"]] == ["G1c"]


def test_unreadable_run_is_reported_and_does_not_stop_the_others(store, cli):
    corrupt = results(store["corrupt"])
    assert corrupt["verdict"] == "unknown" and corrupt["status"] == "unreadable"
    assert "unparseable" in corrupt["check"]["unreadable"]
    assert (store["corrupt"] / "report.html").is_file()
    assert all((store[k] / "report.html").is_file() for k in ("valid", "stale", "g1c"))


def test_results_carry_statistics_and_nemesis_coverage(store, cli):
    r = results(store["valid"])
    assert r["stats"]["counts"]["read"]["ok"] > 0
    assert r["nemesis"]["fired"] == {}  # 400 ops last < 2 s: the first kill is scheduled at 2 s
    assert r["nemesis"]["never_fired"] == ["kill"]
    assert r["checker_version"] and r["test"]["seed"] == 1


def test_cli_prints_each_report_oldest_first_then_the_index(store, cli):
    lines = cli.stdout.splitlines()
    order = ("valid", "stale", "corrupt", "g1c")  # by run timestamp, the newest last
    assert [line.split()[1] for line in lines[:-1]] == [str(store[k] / "report.html") for k in order]
    assert [line.split()[0] for line in lines[:-1]] == ["VALID", "INVALID", "UNKNOWN", "INVALID"]
    assert lines[-1] == str(store["root"] / "index.html")
    assert "units done" in cli.stderr and "invalid so far" in cli.stderr


def test_parquet_tables(store, cli, spark):
    runs = {r["run"]: r for r in (x.asDict() for x in spark.read.parquet(str(store["root"] / "analysis/runs.parquet")).collect())}
    assert {k: v["verdict"] for k, v in runs.items()} == {
        "register/20260101T000001": "valid", "register/20260101T000002": "invalid",
        "register/20260101T000003": "unknown", "append/20260101T000004": "invalid"}
    assert runs["register/20260101T000003"]["status"] == "unreadable"
    assert runs["append/20260101T000004"]["anomaly_types"] == "G1c"
    keys = spark.read.parquet(str(store["root"] / "analysis/keys.parquet"))
    invalid = {(r["run"], r["key"]) for r in keys.where("verdict = 'invalid'").collect()}
    assert invalid == {("register/20260101T000002", "r0"), ("append/20260101T000004", "")}
    assert keys.where("run = 'register/20260101T000001'").count() == 8  # one row per register


def test_incremental_skips_analyzed_runs_unless_forced(store, cli, spark):
    from reports.spark.job import analyze

    stamp = (store["valid"] / "results.json").stat().st_mtime_ns
    again = analyze([store["root"]], None, force=False, out=None, spark=spark)
    assert again["checked"] == 0 and all(r["skipped"] for r in again["runs"])
    assert (store["valid"] / "results.json").stat().st_mtime_ns == stamp
    new = write_run(store["root"], "20260101T000005", register_history(100, seed=5), seed=5)
    more = analyze([store["root"]], None, force=False, out=None, spark=spark)
    assert more["checked"] == 1 and results(new)["verdict"] == "valid"
    forced = analyze([store["valid"]], None, force=True, out=None, spark=spark)
    assert forced["checked"] == 1
    assert (store["valid"] / "results.json").stat().st_mtime_ns != stamp
    runs = spark.read.parquet(str(store["root"] / "analysis/runs.parquet")).count()
    assert runs == 5


def test_history_rows_are_read_with_an_explicit_schema(store, spark):
    from reports.spark.job import OP_FIELDS, schema

    df = spark.read.schema(schema(OP_FIELDS)).json(str(store["valid"] / "history.jsonl"))
    first = df.orderBy("index").first()
    assert df.schema == schema(OP_FIELDS)
    assert first["index"] == 0 and first["type"] == "invoke" and first["key"].startswith("r")


def test_store_path_with_spaces_and_a_hand_written_corrupt_line(tmp_path, spark):
    from reports.spark.job import analyze

    store = tmp_path / "my store"
    run = store / "register" / "20260101T000009"
    run.mkdir(parents=True)
    (run / "test.json").write_text(json.dumps({"workload": "register", "nemesis": []}))
    write_jsonl([Op(0, "invoke", 0, "read", None, key="a", time=1)], run / "history.jsonl")
    with open(run / "history.jsonl", "a") as fh:
        fh.write('{"index": 1, "type": "ok", "process"\n')
    good = write_run(store, "20260101T000010", register_history(50, seed=9), seed=9)
    out = analyze([store], None, force=False, out=None, spark=spark)
    assert [(r["verdict"], r["status"]) for r in out["runs"]] == [("unknown", "unreadable"), ("valid", "analyzed")]
    assert results(good)["check"]["results"][0]["keys"]  # the good run's units were found by path


def bank_history(read_total: int) -> list[Op]:
    """Initial balances, a transfer and a read summing to `read_total`, then the final read."""
    half = read_total // 2
    steps = [("init", [["w", "acct0", half], ["w", "acct1", read_total - half]]),
             ("transfer", {"from": 0, "to": 1, "amount": 5}),
             ("read", {"0": half - 5, "1": read_total - half + 5}),
             ("read", {"0": half - 5, "1": read_total - half + 5})]
    ops = []
    for p, (f, value) in enumerate(steps):
        ops.append(Op(len(ops), "invoke", p, f, None if f == "read" else value, time=2 * p * 1_000))
        ops.append(Op(len(ops), "ok", p, f, value, time=(2 * p + 1) * 1_000))
    return ops


def test_verdicts_never_pass_a_broken_run(tmp_path, spark):
    """The bank's total comes from test.json (never the first read), an f that never succeeded
    makes a run invalid, and a run the harness did not finish is unknown."""
    from reports.spark.job import analyze

    store = tmp_path / "store"
    runs = {
        "bank80": write_run(store, "20260101T000001", bank_history(80), seed=1, test="bank",
                            workload="bank", checker={"model": "bank", "options": {"total": 80}}, status="complete"),
        "bank100": write_run(store, "20260101T000002", bank_history(80), seed=2, test="bank",
                             workload="bank", checker={"model": "bank", "options": {"total": 100}}),
        "never_ok": write_run(store, "20260101T000003", register_history(10, seed=1), seed=3),
        "crashed": write_run(store, "20260101T000004", register_history(100, seed=5), seed=4,
                             status="crashed", error="RuntimeError: boom"),
    }
    out = analyze([store], None, force=False, out=None, spark=spark)
    assert [r["verdict"] for r in out["runs"]] == ["valid", "invalid", "invalid", "unknown"]
    wrong = results(runs["bank100"])["check"]["results"][0]
    assert wrong["total"] == 100 and {e["type"] for e in wrong["errors"]} == {"wrong-total"}
    never = results(runs["never_ok"])
    assert never["check"]["verdict"] == "valid" and never["stats"]["never_ok"] == ["cas"]
    assert [a["type"] for a in never["anomalies"]] == ["never-ok"]
    crashed = results(runs["crashed"])
    assert crashed["status"] == "incomplete" and "crashed: RuntimeError: boom" in crashed["error"]
    assert crashed["check"]["verdict"] == "valid"  # its partial history alone would have passed

    test = json.loads((runs["crashed"] / "test.json").read_text())
    (runs["crashed"] / "test.json").write_text(json.dumps({**test, "status": "complete"}))
    again = analyze([store], None, force=False, out=None, spark=spark)
    assert again["checked"] == 1 and results(runs["crashed"])["verdict"] == "valid"
