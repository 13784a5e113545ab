"""A test is a value: `tessera test`'s arguments become one `TestSpec`, which test.json stores
and a replay reads back unchanged."""

import argparse
import itertools
import random

import msgspec
import pytest

from harness.chaos_cli import configure, spec_from_args
from harness.spec import FAST_FAILURE_DETECTION, TestSpec
from reports.checkers.check import check_history
from reports.history import Op


def spec_of(*argv) -> TestSpec:
    p = argparse.ArgumentParser()
    configure(p)
    return spec_from_args(p.parse_args(list(argv)))


def test_arguments_become_a_spec_that_survives_test_json():
    spec = spec_of("--workload", "bank", "--workload-option", "total=80", "--nemesis", "kill,clock",
                   "--seed", "9", "--client", "smart", "--flag", "log_force_fsync_all=false",
                   "--time-limit", "12")
    assert (spec.workload, spec.workload_options, spec.nemesis, spec.seed, spec.client) == \
        ("bank", {"total": 80}, ["kill", "clock"], 9, "smart")
    assert spec.flags == {"log_force_fsync_all": False} and spec.time_limit == 12
    recorded = {**spec.to_dict(), "status": "complete", "started_at": 1.0}  # test.json: plus facts
    assert TestSpec.from_dict(recorded) == spec


def test_a_random_seed_is_drawn_once_and_kept_in_the_spec():
    a, b = spec_of(), spec_of()
    assert isinstance(a.seed, int) and a.seed != b.seed
    assert TestSpec.from_dict(a.to_dict()).seed == a.seed


@pytest.mark.parametrize("argv, message", [
    (["--workload-option", "no_such=1"], "bad --workload-option for register"),
    (["--workload-option", "novalue"], "--workload-option wants KEY=VALUE"),
    (["--nemesis", "kill,meteor"], "unknown nemesis 'meteor'"),
    (["--nemesis-interval", "0"], "--nemesis-interval must be > 0"),
    (["--time-scale", "0.5"], "--time-scale must be between 1 and 100, got 0.5"),
    (["--op-timeout", "0"], "--op-timeout > 0"),
    (["--consistency-model", "serializable"], "--workload register has a model of its own"),
    (["--workload", "list-append", "--consistency-model", "acid"],
     "--consistency-model 'acid': not one of"),
])
def test_bad_arguments_are_one_clear_error(argv, message):
    with pytest.raises(ValueError, match=message):
        spec_of(*argv)


def test_fast_failure_detection_flags_are_daemon_flags_and_explicit_flags_win():
    from node.consensus import TICK_MS
    from node.server.daemon_cli import FLAGS

    for key in FAST_FAILURE_DETECTION:
        assert key.replace("_", "-") in FLAGS, key  # a key the daemons' config accepts
    assert FAST_FAILURE_DETECTION["raft_heartbeat_interval_ms"] % TICK_MS == 0
    spec = spec_of("--fast-failure-detection", "--flag", "heartbeat_interval_ms=500")
    assert spec.daemon_flags() == {**FAST_FAILURE_DETECTION, "heartbeat_interval_ms": 500}
    assert spec_of().daemon_flags() == FAST_FAILURE_DETECTION  # fast by default, as test-all
    assert spec_of("--no-fast-failure-detection").daemon_flags() == {}


def test_time_scale_multiplies_every_timing_of_the_run_and_explicit_values_win():
    """--time-scale (slow hosts, TCG guests): the daemons' timing flags, from the fast set or
    the engine's own defaults, the op timeout unless given, and test.json keeps it."""
    from node.consensus import TICK_MS
    from node.server.daemon_cli import FLAGS, OPTION, option_default

    def default(key):
        d = FLAGS[key.replace("_", "-")][1]
        return option_default(key.replace("_", "-")) if d is OPTION else d

    fast = spec_of("--time-scale", "10")
    flags = fast.daemon_flags()
    assert flags["raft_heartbeat_interval_ms"] == 10 * FAST_FAILURE_DETECTION[
        "raft_heartbeat_interval_ms"] and flags["raft_heartbeat_interval_ms"] % TICK_MS == 0
    assert flags["follower_unavailable_considered_failed_sec"] == 50.0
    assert flags["catalog_manager_bg_task_wait_ms"] == 10 * default("catalog_manager_bg_task_wait_ms")
    assert flags["leader_failure_max_missed_heartbeat_periods"] == 3  # a count, not a time
    assert fast.op_timeout == 50 and TestSpec.from_dict(fast.to_dict()).time_scale == 10
    kudu = spec_of("--no-fast-failure-detection", "--time-scale", "3", "--op-timeout", "7",
                   "--flag", "heartbeat_interval_ms=1234")
    assert kudu.daemon_flags()["raft_heartbeat_interval_ms"] == 3 * default(
        "raft_heartbeat_interval_ms")
    assert kudu.daemon_flags()["heartbeat_interval_ms"] == 1234 and kudu.op_timeout == 7
    odd = spec_of("--time-scale", "1.25").daemon_flags()["raft_heartbeat_interval_ms"]
    assert odd % TICK_MS == 0 and odd >= TICK_MS
    assert spec_of().time_scale == 1 and spec_of().op_timeout == 5


def test_the_claimed_consistency_model_is_what_the_history_is_judged_against():
    """A G2-item history (write skew: each transaction reads the key the other writes) breaks
    serializability and not snapshot isolation: the run's verdict follows the model the test
    claims, recorded with the checker in test.json."""
    spec = spec_of("--workload", "list-append", "--consistency-model", "snapshot-isolation")
    assert spec.workload_options == {"consistency_model": "snapshot-isolation"}
    checker = spec.make_workload().checker
    assert checker.to_json() == {"model": "list-append",
                                 "options": {"consistency_model": "snapshot-isolation"}}
    assert spec_of("--workload", "list-append").make_workload().checker.to_json() == \
        {"model": "list-append", "options": {}}  # the default: as runs recorded before it
    ops = []
    for i, (proc, txn, done) in enumerate([
            (0, [["r", "x", None], ["append", "y", 1]], [["r", "x", []], ["append", "y", 1]]),
            (1, [["r", "y", None], ["append", "x", 1]], [["r", "y", []], ["append", "x", 1]]),
            (2, [["r", "x", None], ["r", "y", None]], [["r", "x", [1]], ["r", "y", [1]]])]):
        ops.append(Op(process=proc, type="invoke", f="txn", value=txn, index=2 * i))
        ops.append(Op(process=proc, type="ok", f="txn", value=done, index=2 * i + 1))
    assert checker.check(ops)["verdict"] == "valid"
    judged = spec_of("--workload", "list-append", "--consistency-model", "serializable")
    assert judged.make_workload().checker.check(ops)["verdict"] == "invalid"


def test_rw_register_writes_registers_and_orders_versions_by_each_transactions_read():
    """rw-register draws list-append's transactions with `w` for `append`, and tells its checker,
    as Jepsen's MySQL suite tells Elle, that a transaction's write of a key follows its own read
    of it: so two transactions that read one version and both overwrite it are a lost update,
    recorded with the checker in test.json, and `tessera check --wfr-keys` judges alike."""
    spec = spec_of("--workload", "rw-register", "--consistency-model", "serializable")
    workload = spec.make_workload()
    assert workload.checker.to_json() == {"model": "rw-register", "options": {
        "wfr_keys": True, "consistency_model": "serializable"}}
    txns = itertools.islice(workload.ops(0, 5, random.Random(1)), 200)
    fs = {m[0] for inv in txns for m in inv.value}
    assert fs == {"r", "w"}
    ops = []
    for i, (proc, txn, done) in enumerate([
            (0, [["w", "x", 1]], [["w", "x", 1]]),
            (1, [["r", "x", None], ["w", "x", 2]], [["r", "x", 1], ["w", "x", 2]]),
            (2, [["r", "x", None], ["w", "x", 3]], [["r", "x", 1], ["w", "x", 3]])]):
        ops.append(Op(process=proc, type="invoke", f="txn", value=txn, index=2 * i))
        ops.append(Op(process=proc, type="ok", f="txn", value=done, index=2 * i + 1))
    out = workload.checker.check(ops)
    assert out["verdict"] == "invalid" and "lost-update" in out["results"][0]["anomaly_types"]
    assert check_history(ops[:4], "rw-register", wfr_keys=True)["verdict"] == "valid"


@pytest.mark.parametrize("argv, model", [
    (["--db", "mariadb"], "repeatable-read"),  # MariaDB's default level, not strict
    (["--db", "mariadb", "--flag", "isolation=serializable"], "serializable"),
    (["--db", "mariadb", "--flag", "isolation=read-committed"], "read-committed"),
    (["--db", "mariadb", "--flag", "topology=galera"], "snapshot-isolation"),
    (["--db", "mariadb", "--flag", "topology=galera", "--flag", "isolation=read-committed"],
     "read-committed"),  # Galera's certification lifts no weaker level
    (["--db", "mariadb", "--flag", "topology=replicas", "--flag", "isolation=serializable"],
     "serializable"),
    (["--db", "mariadb", "--consistency-model", "strict-serializable"], "strict-serializable"),
    (["--db", "etcd"], None),  # strict serializability: the default, left unwritten
    ([], None),
])
def test_a_transactional_history_is_judged_by_what_its_system_claims_with_its_flags(argv, model):
    """Without --consistency-model a list-append or rw-register run is judged by the model
    the system claims with its flags, recorded in the spec (so replay and Spark judge alike):
    a MariaDB run at REPEATABLE READ is invalid only for what repeatable read forbids, not for
    breaking a strict serializability MariaDB never claimed."""
    for workload in ("list-append", "rw-register"):
        if workload == "rw-register" and "etcd" in argv:
            continue  # etcd runs no rw-register
        spec = spec_of(*argv, "--workload", workload)
        assert spec.workload_options.get("consistency_model") == model
        assert TestSpec.from_dict(spec.to_dict()) == spec
    assert spec_of("--db", "mariadb", "--workload", "bank").workload_options == {}


def test_innodb_snapshot_isolation_claims_snapshot_isolation_at_repeatable_read_only():
    from harness.systems.mariadb.deployment import MariaDB

    assert MariaDB.claimed_model({"innodb_snapshot_isolation": "ON"}) == "snapshot-isolation"
    assert MariaDB.claimed_model({"innodb_snapshot_isolation": "OFF"}) == "repeatable-read"
    assert MariaDB.claimed_model({"innodb_snapshot_isolation": "ON",
                                  "isolation": "read-uncommitted"}) == "read-uncommitted"


def test_external_consistency_is_tesseras_and_test_all_draws_every_mode():
    """`--external-consistency` reaches Tessera's workload (and so its client); another system
    refuses it before any host; test-all's default draws a mode per run from its seed: Kudu's
    two, or both mixed among the workers."""
    from harness.matrix import DRAWN, run_external_consistency

    assert spec_of().make_workload().external_consistency is None  # the client's default
    spec = spec_of("--external-consistency", "commit-wait")
    assert spec.make_workload().external_consistency == "commit-wait"
    assert TestSpec.from_dict(spec.to_dict()).external_consistency == "commit-wait"
    with pytest.raises(ValueError, match="--db etcd has no such mode"):
        spec_of("--db", "etcd", "--workload", "register", "--external-consistency", "commit-wait")
    drawn = TestSpec(external_consistency=DRAWN)
    assert {run_external_consistency(drawn, s) for s in range(20)} == {"client-propagated",
                                                                      "commit-wait", "mixed"}
    assert spec_of("--external-consistency", "mixed").make_workload().external_consistency == "mixed"
    with pytest.raises(SystemExit):  # argparse's choices: one line and exit 2
        spec_of("--external-consistency", "eventual")
    assert run_external_consistency(TestSpec(db="etcd", external_consistency=DRAWN), 1) is None
    assert run_external_consistency(spec, 1) == "commit-wait"


def test_pacing_reaches_the_runner_and_test_all_draws_it_per_run():
    """`--pacing bursts` is recorded in the spec (so replay paces alike); bursts with --rate 0,
    which paces nothing, is refused before any host, as is a pacing that does not exist (also
    in a recorded test.json); test-all's default draws even or bursts per run from its seed,
    and a run at --rate 0 stays even."""
    from harness.matrix import DRAWN, run_pacing
    from harness.validate import check

    assert spec_of().pacing == "even"
    spec = spec_of("--pacing", "bursts")
    assert spec.pacing == "bursts" and TestSpec.from_dict(spec.to_dict()).pacing == "bursts"
    assert TestSpec.from_dict({k: v for k, v in spec.to_dict().items()
                               if k != "pacing"}).pacing == "even"  # a run recorded before
    with pytest.raises(ValueError, match="--rate 0 starts each op as soon as its worker is free"):
        spec_of("--pacing", "bursts", "--rate", "0")
    with pytest.raises(ValueError, match="--pacing 'waves': not one of even, bursts"):
        check(msgspec.structs.replace(spec, pacing="waves"))
    with pytest.raises(SystemExit):  # argparse's choices: one line and exit 2
        spec_of("--pacing", "waves")
    drawn = TestSpec(pacing=DRAWN)
    assert {run_pacing(drawn, s) for s in range(20)} == {"even", "bursts"}
    assert {run_pacing(TestSpec(pacing=DRAWN, db="etcd"), s) for s in range(20)} == {"even",
                                                                                     "bursts"}
    assert {run_pacing(TestSpec(pacing=DRAWN, rate=0), s) for s in range(20)} == {"even"}
    assert run_pacing(spec, 3) == "bursts"
