"""MariaDB under the harness on the netns cluster (Debian's mariadb-server 10.11 and galera-4),
beside Jepsen's MySQL 8.0.34 and MariaDB Galera Cluster analyses: real mariadbd processes on
the namespace hosts, list-append and rw-register in SQL, each history judged against the model the test claims
(`--consistency-model`). README.md's MariaDB table gives the commands and Jepsen's results."""

from __future__ import annotations

import json
import os

import pytest
from netns_run import tessera

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.netns]


def _run(env, tmp_path, *argv, workload="list-append"):
    """`tessera test --db mariadb --workload WORKLOAD ARGV`: (exit code, results, the
    workload checker's result, run dir)."""
    out = tessera("test", "--db", "mariadb", "--workload", workload,
                  "--store", str(tmp_path / "store"), *argv, env=env, timeout=900)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    print(out.stderr[-3000:])  # the run's progress and its why, shown when a test fails
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.load(open(os.path.join(run_dir, "results.json")))
    by = {r["checker"]: r for r in results["check"]["results"]}
    return out.returncode, results, by[workload], run_dir


def _replicas_run(env, tmp_path, seed: int, seconds: int, concurrency: int, *argv):
    """A primary at SERIALIZABLE with a binlog replica on each of the two other hosts, workers
    unpaced, read-only transactions on the worker's own host, judged serializable."""
    return _run(env, tmp_path, "--netns-hosts", "3", "--time-limit", str(seconds),
                "--concurrency", str(concurrency), "--rate", "0", "--seed", str(seed),
                "--flag", "topology=replicas", "--flag", "isolation=serializable",
                "--consistency-model", "serializable", *argv)


def test_repeatable_read_on_one_server_shows_what_jepsen_found(env, tmp_path):
    """Jepsen's MySQL 8.0.34 analysis (MariaDB alike): REPEATABLE READ, the default, allows
    G-single, G2-item and lost update, so it is not even Adya's repeatable read. Judged
    against repeatable-read, one server, no faults, 60 s: invalid, naming them."""
    code, results, la, _ = _run(env, tmp_path, "--netns-hosts", "1", "--time-limit", "60",
                                "--concurrency", "10", "--rate", "200", "--seed", "1",
                                "--consistency-model", "repeatable-read")
    assert code == 1 and results["verdict"] == "invalid"
    assert la["consistency_model"] == "repeatable-read"
    assert {"G-single", "lost-update"} & set(la["anomaly_types"]), la["anomaly_types"]
    assert results["counts"]["txn:ok"] > 1000


def test_serializable_on_one_server_is_valid(env, tmp_path):
    """The same workload at SERIALIZABLE (InnoDB: every read takes a shared lock), judged
    against serializable: valid, as Jepsen found."""
    code, results, la, _ = _run(env, tmp_path, "--netns-hosts", "1", "--time-limit", "60",
                                "--concurrency", "10", "--rate", "200", "--seed", "1",
                                "--flag", "isolation=serializable",
                                "--consistency-model", "serializable")
    assert code == 0 and results["verdict"] == "valid", la.get("anomaly_types")
    assert results["counts"]["txn:ok"] > 1000


def test_binlog_replicas_read_from_keep_serializability_but_not_a_clients_own_writes(env, tmp_path):
    """A primary at SERIALIZABLE with two binlog replicas, read-only transactions on the
    replicas. Jepsen found AWS RDS MySQL clusters violating serializability; MariaDB 10.11's
    replicas apply the binlog in the primary's commit order, so every replica read sees a prefix
    of a serial order: serializable holds. What fails is a client's view of its own writes: a
    process appends on the primary, then reads the stale replica (strong session
    serializability, ruled out). The stale read needs a replica behind at that moment, which
    a run of 14,000 transactions can miss: up to three seeds for it, each of them serializable."""
    for seed in (1, 2, 3):
        code, results, la, run_dir = _replicas_run(env, tmp_path / f"seed{seed}", seed, 20, 9)
        assert code == 0, la.get("anomaly_types")
        history = os.path.join(run_dir, "history.jsonl")
        assert {"n2", "n3"} <= {json.loads(line).get("node") for line in open(history)}
        out = tessera("check", "--model", "list-append", "--consistency-model",
                      "strong-session-serializable", history, env=env)
        if out.returncode == 1:
            break
    assert out.returncode == 1, out.stdout[-2000:]
    assert "-process" in out.stdout  # the cycle runs through a process's own order


def test_binlog_replicas_applying_clients_domains_out_of_order_violate_serializability(
        env, tmp_path):
    """Jepsen's RDS finding's class on MariaDB: the same primary and replicas, with each
    client's transactions in a GTID domain of its own (`SET SESSION gtid_domain_id`), which a
    replica with parallel workers applies out of order. A replica read then sees one client's
    transaction without another's that the primary committed before it: serializability is
    lost (G-single or G2-item, each cycle through a replica read). Four of four seeds at this
    load were invalid when measured, and the same load without per-client domains valid (seed
    1; the test above runs the default setup): up to three seeds for it. A seed can also end
    invalid only on the end check, a replica's table diverged with no read showing a cycle
    (seen in a clean-clone run; README: the replica diverged unlogged): the next seed goes."""
    for seed in (1, 2, 3):
        code, results, la, run_dir = _replicas_run(env, tmp_path / f"seed{seed}", seed, 30, 15,
                                                   "--flag", "gtid_domains=per-client",
                                                   "--flag", "slave_parallel_threads=4")
        if code == 1 and {"G-single", "G2-item"} & set(la["anomaly_types"]):
            break  # a seed invalid only on the end check (a replica's table diverged) goes on
    assert code == 1 and results["verdict"] == "invalid", la.get("anomaly_types")
    assert {"G-single", "G2-item"} & set(la["anomaly_types"]), la["anomaly_types"]
    history = os.path.join(run_dir, "history.jsonl")
    assert {"n2", "n3"} <= {json.loads(line).get("node") for line in open(history)}


def test_galera_loses_acknowledged_appends_without_flush_on_commit(env, tmp_path):
    """Jepsen's Galera finding: with the flush on commit turned off (as Galera's docs
    recommend: innodb_flush_log_at_trx_commit=0), a power loss of every node loses committed
    transactions. lose-unfsynced kills all three nodes at once and drops what their data dirs
    had not fsynced: an acknowledged append vanishes, and a later read shows another element in
    its place (incompatible-order, Elle's name; an aborted read, so even read committed is
    broken). The workers keep their keys for the whole run (ops_per_key): a read must meet the
    key again after the nodes are back, and with keys retired after 400 transactions the
    workload had often moved on to fresh ones by then, so a clean-clone run saw only the nodes'
    tables differ (the end check) in three seeds of three; with the keys kept, two of two seeds
    showed the lost appends. Up to three seeds for the loss (it needs a commit in the last
    second before a power loss); a seed invalid only because the tables diverged tries the next.

    Not asserted: that innodb_flush_log_at_trx_commit=1 keeps every acknowledged append. It
    usually does (no read missed one in 18 runs on this machine, 7 of them beside a busy
    core), but Jepsen found Galera still loses commits now and then with it, and so did this
    harness: one of those 18 runs' nodes diverged with no read showing it, one CI run's
    reads saw two orders of one key, and one 60 s run of five showed G0 (README, the MariaDB
    table; both kept runs are judged again in tests/test_mariadb_findings.py)."""
    common = ("--netns-hosts", "3", "--time-limit", "30", "--nemesis", "lose-unfsynced",
              "--nemesis-interval", "6", "--concurrency", "9", "--flag", "topology=galera",
              "--workload-option", "ops_per_key=100000", "--consistency-model", "read-committed")
    for seed in (1, 2, 3):
        code, results, la, _ = _run(env, tmp_path, *common, "--seed", str(seed),
                                    "--flag", "innodb_flush_log_at_trx_commit=0")
        if code == 1 and "incompatible-order" in la["anomaly_types"]:
            break
    assert code == 1 and "incompatible-order" in la["anomaly_types"], la["anomaly_types"]
    assert results["nemesis"]["fired"].get("lose-unfsynced", 0) >= 1


def test_galera_without_faults_loses_updates(env, tmp_path):
    """Jepsen's Galera finding with no faults at all: two transactions read one version of a
    register and both overwrite it, and both commit (certification passes what snapshot
    isolation's first-committer-wins forbids): lost update, so Galera is not the snapshot
    isolation it claims. rw-register shows it directly (a list-append in SQL appends without
    reading). Three nodes, every node writable, up to three seeds."""
    for seed in (1, 2, 3):
        code, results, la, _ = _run(env, tmp_path, "--netns-hosts", "3", "--time-limit", "30",
                                    "--concurrency", "9", "--rate", "0", "--seed", str(seed),
                                    "--flag", "topology=galera",
                                    "--consistency-model", "snapshot-isolation",
                                    workload="rw-register")
        if code == 1:
            break
    assert code == 1 and "lost-update" in la["anomaly_types"], la["anomaly_types"]
