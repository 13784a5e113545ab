"""The MariaDB results README.md sets beside Jepsen's, checked again from their archived runs
(docs/findings/mariadb: each run's test.json and schedule.json, which `tessera replay` takes,
its results.json and its history). A result stands only if the project's checker, judging the
history against the model the run claimed, finds again exactly the anomalies it recorded."""

import gzip
import json
from pathlib import Path

import pytest

from reports.history import read_jsonl
from workloads.base import Checker

FINDINGS = Path(__file__).resolve().parent.parent / "docs" / "findings" / "mariadb"
RUNS = sorted(str(p.parent.relative_to(FINDINGS)) for p in FINDINGS.glob("*/*/test.json"))


def _recorded(run: str) -> tuple[dict, dict]:
    """The run's test.json, and the result of its workload's checker as recorded."""
    src = FINDINGS / run
    test = json.loads((src / "test.json").read_text())
    results = json.loads((src / "results.json").read_text())
    by = {r["checker"]: r for r in results["check"]["results"]}
    return test, by[test["checker"]["model"]]


def _again(run: str, tmp_path, **options) -> dict:
    """The workload's checker on the archived history, with the run's options (and `options`)."""
    test, _ = _recorded(run)
    history = tmp_path / "history.jsonl"
    history.write_bytes(gzip.decompress((FINDINGS / run / "history.jsonl.gz").read_bytes()))
    checker = Checker(test["checker"]["model"], {**test["checker"]["options"], **options})
    return next(r for r in checker.check(read_jsonl(history))["results"]
                if r["checker"] == test["checker"]["model"])


def _named(result: dict) -> list:
    """What a result names: Elle's anomaly types, or the bank's errors."""
    if "anomaly_types" in result:
        return sorted(result["anomaly_types"])
    return sorted(e["explanation"] for e in result.get("errors") or [])


def test_there_are_findings():
    assert len(RUNS) >= 6, RUNS


@pytest.mark.parametrize("run", RUNS)
def test_each_run_is_judged_again_as_it_was(run, tmp_path):
    test, recorded = _recorded(run)
    assert test["db"] == "mariadb"
    again = _again(run, tmp_path)
    assert (again["verdict"], _named(again)) == (recorded["verdict"], _named(recorded))


@pytest.mark.parametrize("run", RUNS)
def test_every_finding_can_be_replayed(run):
    from harness.replay import load

    spec, _ = load(FINDINGS / run)
    assert spec.db == "mariadb" and spec.store == str(FINDINGS)


# run -> (the flags that make the finding, the verdict for the model it claimed, anomalies named)
EXPECTED = {
    "list-append/single-repeatable-read": (
        {"isolation": None}, "invalid", {"G-single", "G2-item"}),
    "list-append/single-serializable": ({"isolation": "serializable"}, "valid", set()),
    "list-append/single-snapshot-isolation": (
        {"innodb_snapshot_isolation": "ON"}, "valid", set()),
    "list-append/replicas-serializable": (
        {"topology": "replicas", "isolation": "serializable"}, "valid", set()),
    "list-append/replicas-gtid-domains": (
        {"topology": "replicas", "isolation": "serializable", "gtid_domains": "per-client",
         "slave_parallel_threads": 4}, "invalid", {"G-single"}),
    "list-append/galera-no-faults": ({"topology": "galera"}, "invalid", {"lost-update"}),
    "list-append/galera-lose-unfsynced-flush-0": (
        {"topology": "galera", "innodb_flush_log_at_trx_commit": 0}, "invalid",
        {"incompatible-order"}),
    "list-append/galera-lose-unfsynced-flush-1": (
        {"topology": "galera", "innodb_flush_log_at_trx_commit": 1}, "valid", set()),
    "list-append/replicas-lose-unfsynced-sync-binlog-0": (
        {"topology": "replicas", "isolation": "serializable", "sync_binlog": None}, "invalid",
        {"incompatible-order"}),
    "list-append/replicas-lose-unfsynced-sync-binlog-1": (
        {"topology": "replicas", "isolation": "serializable", "sync_binlog": 1}, "valid", set()),
    "list-append/galera-lose-unfsynced-flush-1-diverged": (
        {"topology": "galera", "innodb_flush_log_at_trx_commit": 1}, "valid", set()),
    "list-append/galera-lose-unfsynced-flush-1-g0": (
        {"topology": "galera", "innodb_flush_log_at_trx_commit": 1}, "invalid", {"G0"}),
}


@pytest.mark.parametrize("run", sorted(EXPECTED))
def test_each_finding_says_what_the_readme_says(run):
    flags, verdict, named = EXPECTED[run]
    test, recorded = _recorded(run)
    for key, value in flags.items():
        assert test["flags"].get(key) == value, (key, test["flags"])
    assert recorded["verdict"] == verdict
    assert named <= set(recorded.get("anomaly_types", ())), recorded.get("anomaly_types")


def test_binlog_replicas_do_not_show_a_client_its_own_writes(tmp_path):
    """Serializable holds on the replicas; strong session serializability does not: a process
    appends on the primary and then reads its replica, which has not applied the append yet."""
    again = _again("list-append/replicas-serializable", tmp_path,
                   consistency_model="strong-session-serializable")
    assert again["verdict"] == "invalid"
    assert any(t.endswith("-process") for t in again["anomaly_types"]), again["anomaly_types"]


def test_out_of_order_replicas_break_serializability_and_one_diverged_unlogged():
    """Each client in a GTID domain of its own, replicas applying the domains in parallel: a
    replica commits one client's transaction before another's the primary committed first, so a
    read there sees a state no serial order passed through (G-single); and after the run n2's
    table differed from the primary's and n3's for the whole minute the end check waited, with
    no error in its log."""
    src = FINDINGS / "list-append/replicas-gtid-domains"
    results = json.loads((src / "results.json").read_text())
    by = {r["checker"]: r for r in results["check"]["results"]}
    sums = by["convergence"]["checksums"]
    assert by["convergence"]["verdict"] == "invalid"
    assert sums["n1"] == sums["n3"] != sums["n2"], sums
    assert by["logs"]["verdict"] == "valid"


def test_snapshot_isolation_on_keeps_updates_but_is_not_serializable(tmp_path):
    """innodb_snapshot_isolation=ON turns REPEATABLE READ's lost updates into errors; what is left
    is write skew, which snapshot isolation allows and serializability does not."""
    _, recorded = _recorded("list-append/single-snapshot-isolation")
    assert "lost-update" not in recorded["anomaly_types"]
    again = _again("list-append/single-snapshot-isolation", tmp_path,
                   consistency_model="serializable")
    assert again["verdict"] == "invalid" and "G2-item" in again["anomaly_types"], again


def test_read_committed_transfers_let_a_read_see_a_wrong_total(tmp_path):
    """The bank at READ COMMITTED: a read of every balance in one transaction sees some
    transfers and not others (read skew, which read committed allows), so a total is off; the
    checker names each such read."""
    _, recorded = _recorded("bank/single-read-committed")
    assert recorded["verdict"] == "invalid"
    assert all("sums to" in e["explanation"] for e in recorded["errors"])


def test_after_power_losses_with_flush_on_commit_one_galera_node_diverged_unseen():
    """Every read the clients made was consistent (list-append valid), yet after the heal one
    node's table checksum differed from the other two's for the whole minute the check waited:
    the cluster diverged and Galera did not notice. The run's verdict is invalid by that check
    alone."""
    src = FINDINGS / "list-append/galera-lose-unfsynced-flush-1-diverged"
    results = json.loads((src / "results.json").read_text())
    by = {r["checker"]: r for r in results["check"]["results"]}
    assert results["verdict"] == "invalid" and by["list-append"]["verdict"] == "valid"
    sums = by["convergence"]["checksums"]
    assert by["convergence"]["verdict"] == "invalid" and len(set(sums.values())) == 2, sums
    assert results["nemesis"]["fired"]["lose-unfsynced"] == 2
