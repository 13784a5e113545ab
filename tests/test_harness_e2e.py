"""`tessera test` end to end as a user runs it: netns hosts, deploy over SSH, a register
workload with kills, the store's contents, Jepsen's exit codes (0 valid, 1 invalid, 254 bad
arguments, 255 crashed), and `cluster down` leaving the machine as it was."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from netns_run import tessera

from harness.cluster.netns import _namespaces
from reports.history import read_history, read_jsonl

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.netns]


def test_register_with_kills_records_a_complete_history(no_netns_cluster, env, tmp_path):
    """--leave-db-running leaves the daemons up: the cluster goes down after it."""
    store = tmp_path / "store"
    # Spark hidden: `tessera test` draws its run's report.html itself, so a user needs no Spark
    hidden = tmp_path / "no-spark" / "pyspark"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('pyspark is hidden by this test')\n")
    env = {**env, "PYTHONPATH": str(hidden.parent)}
    out = tessera("test", "--workload", "register", "--nemesis", "kill", "--time-limit", "20",
                  "--nemesis-interval", "5", "--seed", "42", "--store", str(store),
                  "--leave-db-running", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "leaving the daemons running" in out.stderr
    # --leave-db-running: the tablet servers still answer after the run, for a post-mortem,
    # to the operator's certificate the run's store keeps (README "Security")
    import asyncio

    from harness.systems.tessera.deployment import TSERVER_PORT
    from node.protocol import Empty, ServerStatus
    from node.rpc import RpcClient
    from node.security.tls import client_tls

    run_dir = out.stdout.strip().splitlines()[-1]

    async def alive():
        rpc = RpcClient(tls=client_tls(os.path.join(run_dir, "tls", "certs", "admin.pem")))
        try:
            return await rpc.call(("10.77.0.11", TSERVER_PORT), "ts.status", Empty(), ServerStatus,
                                  to_uuid="", timeout=5)
        finally:
            await rpc.close()
    assert asyncio.run(alive()).tablets
    assert os.path.realpath(store / "latest") == os.path.realpath(run_dir)
    for f in ("test.json", "history.jsonl", "history.edn", "results.json", "control.log",
              "report.html", "plots/latency.png", "timeline/1.html"):
        assert os.path.exists(os.path.join(run_dir, f)), f
    report = open(os.path.join(run_dir, "report.html")).read()
    assert 'id="verdict" class="verdict valid"' in report and "Throughput" in report
    test = json.load(open(os.path.join(run_dir, "test.json")))  # the plan, written once
    assert test["seed"] == 42 and test["nemesis"] == ["kill"] and "status" not in test
    outcome = json.load(open(os.path.join(run_dir, "outcome.json")))  # what became of it
    assert outcome["status"] == "complete" and outcome["started_at"] > 0
    assert "ops" in outcome["final"] and "ops" not in test["final"]
    for h in ("n1", "n2", "n3", "n4", "n5"):
        assert os.path.getsize(os.path.join(run_dir, "nodes", h, "tserver.log")) > 0
    assert os.path.exists(os.path.join(run_dir, "nodes", "n1", "master.log"))

    ops = read_jsonl(os.path.join(run_dir, "history.jsonl"))  # validates invoke/completion pairing
    client = [o for o in ops if o.process != "nemesis"]
    completions = [o for o in client if o.type != "invoke"]
    assert sum(o.type == "ok" for o in completions) > 100
    # each completion names the host whose replica answered (or was tried last)
    assert all(o.node in {"n1", "n2", "n3", "n4", "n5"} for o in completions if o.type == "ok")
    open_, retired = {}, set()
    for o in client:
        if o.type == "invoke":
            assert o.process not in retired, f"process {o.process} reused after info"
            open_[o.process] = o
        else:
            open_.pop(o.process)
            if o.type == "info":
                retired.add(o.process)
    assert not open_, "an invoke never completed"
    nemesis = [o for o in ops if o.process == "nemesis"]
    started = [o for o in nemesis if o.f == "start-kill" and o.value]
    assert started and all(o.value["killed"] for o in started)
    assert any(o.f == "stop-kill" and o.value for o in nemesis)
    # the EDN export reads back to the same client history
    edn = read_history(os.path.join(run_dir, "history.edn"))
    assert [(o.type, o.f, o.process) for o in edn if o.process != "nemesis"] == \
        [(o.type, o.f, o.process) for o in client]
    results = json.load(open(os.path.join(run_dir, "results.json")))
    assert results["nemesis"]["fired"]["kill"] >= 1 and not results["nemesis"]["never_fired"]
    assert results["stats"]["verdict"] == "valid", results["stats"]  # every f succeeded sometimes
    assert results["verdict"] == "valid", results["check"]
    # every daemon named the code probes it fired (its --probes-file, collected with its log):
    # a leader was elected somewhere, a killed server's replicas recovered on restart
    fired = results["probes"]["by_daemon"]
    assert {f"n{i}/tserver" for i in range(1, 6)} <= set(fired) and "n1/master" in fired
    assert results["probes"]["hit"] > 0 and 'id="probes"' in report


def test_bad_input_is_one_clear_line_and_exit_254(no_netns_cluster, env, tmp_path):
    """With no cluster up, bad input brings none up."""
    cases = [
        (["--workload", "nope"], "unknown workload 'nope'"),
        (["--nemesis", "kill,meteor"], "unknown nemesis 'meteor'"),
        (["--time-limit", "0"], "--time-limit must be > 0"),
        (["--wheelhouse", str(tmp_path)], "no tessera wheel in"),
        (["--flag", "novalue"], "--flag wants KEY=VALUE"),
    ]
    for argv, message in cases:
        out = tessera("test", "--store", str(tmp_path / "s"), *argv, env=env)
        assert out.returncode == 254, (argv, out.stderr)
        assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert out.stdout == "" and not (tmp_path / "s").exists()  # no run was made
    assert not _namespaces() - {n for n in _namespaces() if not n.startswith("tessera-")}


def _crashed_run(out) -> dict:
    """A crashed test exits 255, still names its run, and the run's record says it crashed."""
    from reports.spark.runs import read_record

    assert out.returncode == 255, out.stderr[-3000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    test = read_record(Path(run_dir))
    assert test["status"] == "crashed", test
    return test


def test_unreachable_host_and_wrong_key(env, tmp_path):
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(f'[[host]]\naddress = "127.0.0.1"\nport = 1\nkey = "{key}"\n')
    out = tessera("test", "--provider", "hosts", "--hosts-file", str(hosts), "--time-limit", "5",
                  "--store", str(tmp_path / "s"), env=env)
    assert "unreachable over SSH" in out.stderr and "unreachable" in _crashed_run(out)["error"]
    up = tessera("cluster", "up", "--hosts", "1", env=env)
    assert up.returncode == 0, up.stderr
    hosts.write_text(f'[[host]]\naddress = "10.77.0.11"\nkey = "{key}"\n')
    out = tessera("test", "--provider", "hosts", "--hosts-file", str(hosts), "--time-limit", "5",
                  "--store", str(tmp_path / "s"), env=env)
    assert "authentication failed" in out.stderr and "authentication" in _crashed_run(out)["error"]


@pytest.mark.parametrize("fsync,expect", [("false", "invalid"), ("true", "valid")])
def test_lose_unfsynced_writes_shows_why_fsync_matters(env, tmp_path, fsync, expect):
    """A power loss of every tablet server on lazyfs: with log_force_fsync_all=false acknowledged
    adds vanish and the set checker says so; with the default true nothing is lost."""
    store = tmp_path / "store"
    out = tessera("test", "--workload", "set", "--nemesis", "lose-unfsynced", "--nemesis-interval",
                  "8", "--time-limit", "20", "--seed", "3", "--flag", f"log_force_fsync_all={fsync}",
                  "--store", str(store), env=env)
    assert out.returncode == {"invalid": 1, "valid": 0}[expect], out.stderr[-3000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.load(open(os.path.join(run_dir, "results.json")))
    (final,) = results["final"]["ops"]  # the final read was retried until it succeeded
    assert final["f"] == "read" and final["outcome"] == "ok", final
    ops = read_jsonl(os.path.join(run_dir, "history.jsonl"))
    (loss,) = [o for o in ops if o.f == "start-lose-unfsynced" and o.value]
    dropped = sum(loss.value["unsynced_bytes_dropped"].values())
    (set_result,) = [r for r in results["check"]["results"] if r.get("checker") == "set"]
    assert results["verdict"] == expect, set_result
    if fsync == "false":  # the terminal says which checker failed and why
        (why,) = [line for line in out.stderr.splitlines() if line.startswith("why: ")]
        assert "set: " in why and "lost" in why, why
        assert dropped > 0 and set_result["lost"], (dropped, set_result)
    else:
        # Bytes may still be dropped: the kill can land between a WAL group's write and its
        # fsync (116 bytes on one host in one run from a clean clone), but nobody was told
        # those writes were durable, so no acknowledged add is lost.
        assert not set_result["lost"], (dropped, set_result)
    # no FUSE mount is left on any host after the run
    from harness.cluster.netns import NetnsCluster
    from harness.control import Remote

    for h in NetnsCluster(5, state_dir=env["TESSERA_NETNS_STATE"]).hosts():
        r = Remote(h)
        assert "fuse" not in r.run(["cat", "/proc/mounts"]).stdout, h.name
        r.close()


def test_a_failing_disk_a_restart_on_its_cache_and_a_power_loss_leave_the_run_valid(env, tmp_path):
    """failing-disk on real processes: a tablet leader's syncs fail with EIO on lazyfs (its
    replicas FAIL, loudly: expected in the logs), the server is killed and restarted on what
    its page cache still shows, and the host loses power at the stop. The engine writes the
    recovered tail again before trusting it, so nothing is lost and no file is corrupt. With
    that rewrite taken out, the same command was invalid (the logs checker: corrupt data no
    nemesis damaged, on the power-lost host: docs/status.md); tests/test_lazyfs_mount.py holds
    both directions for the WAL on a real mount."""
    out = tessera("test", "--workload", "set", "--nemesis", "failing-disk", "--nemesis-interval",
                  "6", "--time-limit", "25", "--seed", "3", "--store", str(tmp_path / "s"), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.load(open(os.path.join(run_dir, "results.json")))
    assert results["verdict"] == "valid", results["check"]
    ops = read_jsonl(os.path.join(run_dir, "history.jsonl"))
    starts = [o.value for o in ops if o.f == "start-failing-disk" and o.value and "observed" in o.value]
    assert starts and all(s["observed"]["ok"] and s["dropped_bytes"] > 0 for s in starts), starts
    losses = [o.value for o in ops if o.f == "stop-failing-disk" and o.value]
    assert losses and all(v["observed"]["ok"] for v in losses), losses
    logs = next(r for r in results["check"]["results"] if r["checker"] == "logs")
    assert any("failing-disk" in e["explanation"] for e in logs["expected"]), logs


def _cut_run(env, tmp_path, package: str, interval: int):
    """A 30 s run of the cut `package` alone (seed 3, fast failure detection, `interval` s
    cuts, twelve tablets), valid: every start seen in force on the hosts, and at least one cut
    a server holding a replica led from another host (`followed`), where a misjudgment can
    come. Its nemesis ops and the probes each daemon fired.

    Twelve tablets, not the register's four: leaders gather on some hosts, and with four
    tablets every replica on a cut host was once led from its own host (`followed` 0 on every
    start)."""
    out = tessera("test", "--nemesis", package, "--time-limit", "30", "--nemesis-interval",
                  str(interval), "--seed", "3", "--fast-failure-detection",
                  "--workload-option", "tablets=12",
                  "--store", str(tmp_path / "store"), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.load(open(os.path.join(run_dir, "results.json")))
    schedule = json.load(open(os.path.join(run_dir, "schedule.json")))
    starts = [s for s in schedule["executed"] if s["action"] == "start"]
    assert starts and all(s["observed"]["ok"] for s in starts), starts
    ops = [o for o in read_jsonl(os.path.join(run_dir, "history.jsonl"))
           if o.f in (f"start-{package}", f"stop-{package}") and o.value]
    assert any(o.value["followed"] for o in ops if o.f == f"start-{package}"), starts
    return ops, results["probes"]["by_daemon"]


def test_a_master_cut_off_from_some_servers_moves_no_replica(env, tmp_path):
    """master-cut on real processes and iptables: every master stops hearing the tablet servers
    of one or two hosts without a master, for 10 s, twice the silence limit of fast failure
    detection. The tablets' leaders hear every member throughout, so no replica may be replaced:
    the masters must say so (master.rereplication.silent_but_leader_hears) and none may count a
    member silent (replace_silent) or start a copy. Before the masters asked the leaders, they
    replaced each replica on a cut server, a copy each."""
    _, fired = _cut_run(env, tmp_path, "master-cut", 10)
    moved = {where: [n for n in names if n in ("master.rereplication.replace_silent",
                                                "copy.started")]
             for where, names in fired.items()}
    assert not any(moved.values()), moved
    masters = {n for where, names in fired.items() if where.endswith("/master") for n in names}
    assert "master.rereplication.silent_but_leader_hears" in masters, sorted(masters)


def test_a_server_cut_off_from_the_other_servers_has_its_members_replaced(env, tmp_path):
    """server-cut on real processes and iptables: one host's tablet server cut off from the
    other hosts' for 20 s, four times the silence limit of fast failure detection, the masters
    still hearing it. The leaders elsewhere of its replicas stop hearing them, so the masters
    must replace those members (master.rereplication.replace_unreachable_from_leader), a copy
    each, and the cut, judged at its stop, finds no tablet that kept its voter there without a
    replacement under way (reports.checkers.faults.check_fault_findings). Before, no member
    was replaced while the masters heard its server, and the run was invalid on that."""
    ops, fired = _cut_run(env, tmp_path, "server-cut", 20)
    judged = [o.value for o in ops if o.f == "stop-server-cut" and "found" in o.value]
    assert judged and not any(v["found"] for v in judged), judged
    masters = {n for where, names in fired.items() if where.endswith("/master") for n in names}
    assert "master.rereplication.replace_unreachable_from_leader" in masters, sorted(masters)
    assert any("copy.started" in names for where, names in fired.items()
               if where.endswith("/tserver")), fired


def test_nemesis_all_fires_every_fault_and_leaves_no_trace(env, tmp_path):
    out = tessera("test", "--nemesis", "all", "--time-limit", "20", "--nemesis-interval", "5",
                  "--seed", "11", "--store", str(tmp_path / "store"), env=env)
    assert out.returncode in (0, 1), out.stderr[-3000:]  # 1: invalid, judged below
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.load(open(os.path.join(run_dir, "results.json")))
    assert out.returncode == (results["verdict"] != "valid"), results["verdict"]
    fired = results["nemesis"]["fired"]
    assert set(fired) == {"partition", "packet", "clock", "pause", "kill", "membership", "disk",
                          "lose-unfsynced", "failing-disk", "session-intruder", "master-cut"}
    # Membership may be declined each time, and rightly: with a replica of every tablet left
    # FAILED by the disk fault (the damage stays for the run) no removal keeps a live majority,
    # and the leader refuses one that races the damage (a skip, with its reason in the history).
    # A failing disk on a leader whose writes the other faults stalled fails no sync: a skip.
    counts = results["nemesis"]["counts"]
    assert all(n >= 1 for name, n in fired.items() if name not in ("membership", "failing-disk")), fired
    for name in ("membership", "failing-disk"):
        assert fired[name] + counts.get(f"start-{name}-skipped", 0) >= 1, counts
        assert not counts.get(f"start-{name}-failed"), counts
    if not fired["membership"]:
        ops = read_jsonl(os.path.join(run_dir, "history.jsonl"))
        assert all("skipped" in o.value for o in ops if o.f == "start-membership" and o.value)
    # Every check holds. Under all ten faults for 20 s the register's compare-and-sets can all
    # fail or time out, and Jepsen's stats rule then calls the run invalid, rightly, since it
    # proved nothing of cas; this test is about the faults, so only that starvation is let
    # through, and reads and writes must still succeed
    assert results["check"]["verdict"] == "valid", results["check"]
    assert set(results["stats"]["never_ok"]) <= {"cas"}, results["stats"]
    # A fault not in force would pass a run it never tested: every start carries what a look
    # at the hosts saw right after it, and the faults check counts them; a clean run has none
    # failed or out of force
    schedule = json.load(open(os.path.join(run_dir, "schedule.json")))
    starts = [s for s in schedule["executed"] if s["action"] == "start"]
    errored = [s for s in schedule["executed"] if "error" in s]
    assert starts and not errored, errored
    for s in starts:
        seen = s.get("observed")
        assert "skipped" in s or (isinstance(seen, dict) and seen["ok"]), s
        # the session intruder's attack was answered: one no server answered (the run's own
        # kills can have every one down) is tried again until its stop, or skipped
        if s["package"] == "session-intruder" and "skipped" not in s:
            assert seen["answered"] > 0, s
    faults = next(r for r in results["check"]["results"] if r["checker"] == "faults")
    assert faults["verdict"] == "valid" and not faults["errors"]
    observed = sum("observed" in s for s in starts)
    # every fault has a check, and every start that ran was seen in force
    assert faults["starts"]["verified"] == observed >= 8
    assert faults["starts"]["unchecked"] == 0, faults
    report = open(os.path.join(run_dir, "report.html")).read()
    assert f"Faults: {faults['starts']['verified']} start(s) seen in force" in report
    from netns_run import FAULT_KINDS, counts

    from harness.cluster.netns import NetnsCluster
    from harness.control import Remote

    for h in NetnsCluster(5, state_dir=env["TESSERA_NETNS_STATE"]).hosts():
        r = Remote(h)
        left = counts(r, FAULT_KINDS)
        r.close()
        assert not any(left.values()), (h.name, left)


def test_a_fault_that_cannot_start_on_one_host_makes_the_run_unknown(env, tmp_path):
    """iptables broken on one host alone (/bin/false bound over it in n2's own mount
    namespace), so every partition that gives n2 a grudge fails to start. The history is
    fine, but it was not made under the faults the run claims: unknown (exit 2), the
    partition named, never valid."""
    from harness.cluster.netns import NetnsCluster
    from harness.control import Remote

    up = tessera("cluster", "up", env=env)
    assert up.returncode == 0, up.stderr
    n2 = Remote(next(h for h in NetnsCluster(5, state_dir=env["TESSERA_NETNS_STATE"]).hosts()
                     if h.name == "n2"))
    n2.sh("mount --bind /bin/false $(readlink -f /usr/sbin/iptables)")
    try:
        out = tessera("test", "--nemesis", "partition", "--time-limit", "15",
                      "--nemesis-interval", "3", "--seed", "6", "--store", str(tmp_path / "store"),
                      env=env)
    finally:
        n2.sh("umount $(readlink -f /usr/sbin/iptables)")
        n2.close()
    assert out.returncode == 2, out.stderr[-3000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.load(open(os.path.join(run_dir, "results.json")))
    faults = next(r for r in results["check"]["results"] if r["checker"] == "faults")
    assert results["verdict"] == "unknown" and results["history_verdict"] == "valid"
    # every partition the plan drew that cuts a link of n2's fails to start; any other is in force
    plan = json.load(open(os.path.join(run_dir, "schedule.json")))
    drawn = [s["choice"]["drops"] for s in plan["steps"] if s["action"] == "start"]
    grudges = sum("n2" in drops or any("n2" in cut for cut in drops.values()) for drops in drawn)
    assert grudges >= 2, drawn  # the run's seed must draw at least two such partitions
    assert faults["starts"]["failed"] == grudges
    assert faults["starts"]["verified"] == len(drawn) - grudges
    assert {e["fault"] for e in faults["errors"]} == {"partition"}
    assert "faults: fault-failed" in out.stderr  # the why on the terminal
    report = open(os.path.join(run_dir, "report.html")).read()
    assert "failed to start</b>" in report and "start-partition at" in report


def _grouped_writes_run(env, tmp_path, options: list[str], concurrency: int, rate: int,
                        seed: int, workload: str = "list-append", seconds: int = 25):
    """A `seconds` run of `workload` with the arguments `options` (--writes and its batch size)
    under kills and partitions: judged valid by the checkers, replicas and logs, every fault
    fired, each op invoked and completed on its own in the history, and every answered write
    tied to its own request (the replies checker). Its record (test.json with outcome.json) and
    the code probes it fired (results.json's)."""
    out = tessera("test", "--workload", workload, *options,
                  "--nemesis", "kill,partition", "--time-limit", str(seconds),
                  "--nemesis-interval", "4",
                  "--concurrency", str(concurrency), "--rate", str(rate), "--seed", str(seed),
                  "--store", str(tmp_path / "store"), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.load(open(os.path.join(run_dir, "results.json")))
    assert results["verdict"] == "valid", results["check"]
    assert all(n >= 1 for n in results["nemesis"]["fired"].values()), results["nemesis"]
    ops = [o for o in read_jsonl(os.path.join(run_dir, "history.jsonl"))
           if o.process != "nemesis"]
    invoked = sum(o.type == "invoke" for o in ops)
    assert invoked > 100 and invoked == sum(o.type != "invoke" for o in ops)
    # every ok write went in a client session, and says as what: session, seq and batch (a
    # transaction of reads only is a read)
    writes = [o for o in ops if o.type == "ok" and o.f != "read" and not (
        o.f == "txn" and all(m[0] == "r" for m in o.value))]
    assert writes and all(o.sent for o in writes), "a write without sent"
    replies = [r for r in results["check"]["results"] if r["checker"] == "replies"]
    assert replies and replies[0]["compared"] > 0 and replies[0]["verdict"] == "valid", replies
    from reports.spark.runs import read_record

    # the plan with its outcome (the batching it reports)
    return read_record(Path(run_dir)), results["probes"]


BUFFERED = {("register", "shared"), ("register", "session-manual")}
# whose workers close and replace their node's shared session under load (Workload.session_ops)
# while the node's other workers are mid-apply: every 20 writes, or with a client and a session
# per write (Workload.fresh_clients), as a program run once per unit of work
RENEWED = {("register", "session-background"): ["session_ops=1", "fresh_clients=true"],
           ("list-append", "session-manual"): ["session_ops=20"]}


@pytest.mark.parametrize("workload,writes", [
    ("register", "session-sync"), ("register", "shared"), ("register", "session-background"),
    ("register", "session-manual"), ("list-append", "own"), ("list-append", "session-manual")])
def test_every_write_mode_under_kills_and_partitions_stays_valid(env, tmp_path, workload,
                                                                 writes):
    """Each way users' writes reach the client (a handle each, a shared handle whose writes
    coalesce, a background-flush session, a manual-flush session, a sync session each: Kudu's
    default flush mode) under kills and partitions, with cas on the registers: valid, and the
    mode is what test.json records. (list-append with shared and session-background: the two
    tests below; register with own handles: every nemesis test.) The shared handle and the
    manual session write zero-padded values handed over in buffers the workers overwrite at
    once (value_buffers), as an application reusing one buffer does: a client that sent the
    buffer as it was later writes bytes no worker wrote. Two close and replace their shared
    sessions under load, one every 20 writes, one with a new client per write (RENEWED). The client's own probes (it runs in the harness's
    process) are collected with the daemons'."""
    buffers = ["--workload-option", "value_sizes=zeros", "--workload-option",
               "value_buffers=true"] if (workload, writes) in BUFFERED else []
    renewed = [x for o in RENEWED.get((workload, writes), []) for x in ("--workload-option", o)]
    test, fired = _grouped_writes_run(env, tmp_path, ["--writes", writes, *buffers, *renewed],
                                      20, 0 if writes == "shared" else 200, 57, workload, 20)
    assert test["writes"] == writes
    if renewed:  # every session renewed is counted; none raised an alarm (the run is valid)
        assert test["batches"]["renewed"] >= 5, test["batches"]
        assert test["batches"]["sessions"] >= test["batches"]["renewed"] + 1
    client = set(fired["by_daemon"].get("client", ()))
    if "fresh_clients=true" in renewed:  # a new client's apply waited for its lookup while
        # another worker's write closed the session: refused, never buffered unsent
        assert "client.session.apply_closed_while_locating" in client, sorted(client)
    if buffers:
        assert "client.op.value_copied" in client, sorted(client)
    if writes == "shared":
        assert "client.batch.coalesced_sent" in client, sorted(client)
    if writes == "session-sync":  # a session per worker, and the rows went through them
        assert test["sessions"]["sessions"] >= 20 and test["sessions"]["rows_ok"] > 100


def test_batched_sessions_under_kills_and_partitions_stay_valid(env, tmp_path):
    """The harness drives AUTO_FLUSH_BACKGROUND sessions on the real cluster; ops
    share batches (one Raft entry each), each op is still its own in the history, and the run
    under kills and partitions is judged valid by the checkers, replicas and logs."""
    test, _ = _grouped_writes_run(env, tmp_path, ["--writes", "session-background",
                                                  "--workload-option", "batch=8"], 40, 400, 15)
    batches = test["batches"]
    assert test["writes"] == "session-background" and batches["mode"] == "session-background"
    assert batches["batches"] > 0 and batches["mean_ops_per_batch"] > 1, batches


def test_coalesced_writes_in_bursts_stay_valid_and_a_misrouting_client_is_caught(env, tmp_path):
    """With --writes shared the workers sharing a client share its sessions, and the writes
    they issue in one loop turn leave as one ts.write_batch. Paced as test-all may draw it (100
    ops/s in bursts, the application's client that goes to the leader, list-append): many
    requests carry several writes, each write its own op of the history, and the run under
    kills and partitions is valid. The same run with a client that hands a batch's results to
    its callers one place off (TESSERA_CLIENT_FAULTS=misroute) is invalid: a wrong-reply. The
    matrix's runs before it drew the client and the pacing (bound to nodes, evenly paced) let
    this client pass two of three seeds: list-append's key sets put no two workers of one
    tablet on one node, and evenly paced workers seldom share a turn."""
    options = ["--writes", "shared", "--client", "smart", "--pacing", "bursts"]
    test, _ = _grouped_writes_run(env, tmp_path / "fixed", options, 10, 100, 1, seconds=15)
    coalesced = test["coalesced"]
    assert (test["writes"], test["client"], test["pacing"]) == ("shared", "smart", "bursts")
    assert coalesced["requests_with_several"] > 0, coalesced
    assert coalesced["writes"] > coalesced["requests"], coalesced
    out = tessera("test", "--workload", "list-append", *options, "--nemesis", "kill,partition",
                  "--time-limit", "15", "--nemesis-interval", "4", "--rate", "100",
                  "--seed", "1", "--store", str(tmp_path / "broken"),
                  env={**env, "TESSERA_CLIENT_FAULTS": "misroute"})
    assert out.returncode == 1, out.stderr[-3000:]
    results = json.load(open(os.path.join(out.stdout.strip().splitlines()[-1], "results.json")))
    replies = [r for r in results["check"]["results"] if r["checker"] == "replies"]
    assert replies[0]["verdict"] == "invalid", replies


def test_masters_grow_to_five_and_back_to_three_while_the_test_runs(env, tmp_path):
    """The catalog's voters change under load and kills (the leader master among the
    targets); the history stays valid, the masters end agreeing on the three they began with,
    and the added masters' logs are collected and checked with the others."""
    out = tessera("test", "--workload", "register", "--nemesis", "master-membership,kill",
                  "--time-limit", "40", "--nemesis-interval", "4", "--seed", "5",
                  "--store", str(tmp_path / "store"), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    ops = read_jsonl(os.path.join(run_dir, "history.jsonl"))
    steps = [o.value for o in ops if o.process == "nemesis" and o.type != "invoke"
             and "master-membership" in o.f and o.value]
    counts = [s["masters"] for s in steps if "masters" in s]
    assert 5 in counts and counts[-1] == 3, steps  # grew to five, healed back to three
    assert any("added" in s for s in steps) and any("removed" in s for s in steps)
    results = json.load(open(os.path.join(run_dir, "results.json")))
    assert results["verdict"] == "valid", results["check"]
    masters = next(r for r in results["check"]["results"] if r.get("checker") == "masters")
    assert masters["verdict"] == "valid" and len(masters["masters"]) == 3, masters
    for added in {s.get("added") for s in steps} - {None}:
        assert os.path.getsize(os.path.join(run_dir, "nodes", added, "master.log")) > 0


def test_pysyncobj_loses_acknowledged_adds_to_a_power_loss(env, tmp_path):
    """A second system under test. PySyncObj's journal is an mmap it never syncs, so a power
    loss of every node (lose-unfsynced on lazyfs) takes acknowledged adds with it: the set
    checker must find them lost, and the run must say invalid. Its nodes still agree after the
    loss (they all lost the same writes), and nothing in their logs is an error."""
    store = tmp_path / "store"
    out = tessera("test", "--db", "pysyncobj", "--workload", "set", "--nemesis", "lose-unfsynced",
                  "--nemesis-interval", "8", "--time-limit", "20", "--seed", "3",
                  "--store", str(store), env=env)
    assert out.returncode == 1, out.stderr[-3000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    test = json.load(open(os.path.join(run_dir, "test.json")))
    assert test["db"] == "pysyncobj" and test["log_rules"], test
    results = json.load(open(os.path.join(run_dir, "results.json")))
    (final,) = results["final"]["ops"]
    assert final["f"] == "read" and final["outcome"] == "ok", final
    by_checker = {r["checker"]: r for r in results["check"]["results"]}
    assert results["verdict"] == "invalid"
    assert by_checker["set"]["verdict"] == "invalid" and by_checker["set"]["lost_count"] > 0
    assert by_checker["convergence"]["verdict"] == "valid", by_checker["convergence"]
    assert by_checker["logs"]["verdict"] == "valid", by_checker["logs"]
    ops = read_jsonl(os.path.join(run_dir, "history.jsonl"))
    (loss,) = [o for o in ops if o.f == "start-lose-unfsynced" and o.value]
    assert sum(loss.value["unsynced_bytes_dropped"].values()) > 0, loss.value
    assert sorted(os.listdir(os.path.join(run_dir, "nodes", "n1"))) == ["data-dir.txt", "node.log"]


def test_inline_nodes_as_jepsens_cli_takes_them(env, tmp_path):
    """`--nodes/--username/--ssh-private-key`: three of the netns hosts given inline, reached
    over real SSH with the cluster's key; the run records them as n1..n3 by address."""
    up = tessera("cluster", "up", env=env)
    assert up.returncode == 0, up.stderr
    key = os.path.join(env["TESSERA_NETNS_STATE"], "id_ed25519")
    out = tessera("test", "--nodes", "10.77.0.13,10.77.0.14:22,10.77.0.15", "--username", "root",
                  "--ssh-private-key", key, "--db", "pysyncobj", "--workload", "register",
                  "--time-limit", "5", "--seed", "1", "--store", str(tmp_path / "store"), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    test = json.load(open(os.path.join(out.stdout.strip().splitlines()[-1], "test.json")))
    assert test["provider"] == "hosts" and test["ssh_private_key"] == key
    assert test["inline_nodes"] == ["10.77.0.13", "10.77.0.14:22", "10.77.0.15"]
    assert test["nodes"] == [{"name": f"n{i}", "address": f"10.77.0.{12 + i}"} for i in (1, 2, 3)]


def test_hosts_on_another_python_get_wheels_built_for_it(no_netns_cluster, env, tmp_path):
    """Hosts whose python3 is not the control machine's. On each netns host, pyenv's
    Python 3.12 bin dir is bind-mounted on /usr/local/bin (first on root's PATH) in the host's
    own mount namespace; `tessera test` finds the hosts on 3.12, builds a wheelhouse with this
    machine's pyenv 3.12, and the engine runs there. The hosts keep 3.12: the cluster goes down
    after it."""
    from pathlib import Path

    from harness.cluster.netns import NetnsCluster
    from harness.control import Remote

    bins = sorted(Path.home().glob(".pyenv/versions/3.12.*/bin"))
    if not bins:
        pytest.skip("no pyenv Python 3.12 on this machine to give the hosts")
    up = tessera("cluster", "up", env=env)
    assert up.returncode == 0, up.stderr
    for h in NetnsCluster(5, state_dir=env["TESSERA_NETNS_STATE"]).hosts():
        r = Remote(h)
        out = r.sh(f"mount --bind {bins[-1]} /usr/local/bin && "
                   "python3 -c 'import sys; print(*sys.version_info[:2])'").stdout
        r.close()
        assert out.split() == ["3", "12"], (h.name, out)
    store = tmp_path / "store"
    out = tessera("test", "--workload", "register", "--time-limit", "5", "--seed", "2",
                  "--store", str(store), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "the hosts run Python 3.12" in out.stderr
    from harness.wheelhouse import wheel_dir

    assert any("cp312" in w.name for w in wheel_dir("3.12").glob("*.whl"))
    h = NetnsCluster(5, state_dir=env["TESSERA_NETNS_STATE"]).hosts()[0]
    r = Remote(h)
    venv = r.run(["/opt/tessera/venv/bin/python", "-c", "import sys; print(*sys.version_info[:2])"])
    r.close()
    assert venv.stdout.split() == ["3", "12"]


def test_copy_race_and_leader_transfers_with_lease_reads_stay_valid_and_copy(env, tmp_path):
    """The copy-race package on real hosts, with lease reads (the matrix's raft@lease
    cells): a tablet's leader is cut from one voter while another is tombstoned, so the leader
    copies the tablet to it during the other's campaign. The fixed engine keeps the history
    valid, and the nemesis really tombstoned a voter and the leader really copied it back.
    Leaders of tablets and of the masters are handed over meanwhile (leader-transfer), and each
    handover was seen on the old leader's server (verified, or skipped as abandoned). The seed
    draws two abrupt step-downs among its four transfers: a graceful one is abandoned when its
    target does not win within an election timeout, as all three of a graceful-only draw once
    were on a loaded machine, while a step-down always takes effect."""
    import glob

    out = tessera("test", "--workload", "register", "--nemesis", "copy-race,kill,leader-transfer",
                  "--flag", "read-mode=lease", "--time-limit", "30", "--nemesis-interval", "4",
                  "--seed", "50", "--store", str(tmp_path / "store"), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.load(open(os.path.join(run_dir, "results.json")))
    assert results["verdict"] == "valid", results["check"]
    starts = [o.value for o in read_jsonl(os.path.join(run_dir, "history.jsonl"))
              if o.process == "nemesis" and o.f == "start-copy-race" and isinstance(o.value, dict)
              and o.value.get("delete") == "ok"]
    assert starts, "no copy-race start tombstoned a voter"
    faults = next(r for r in results["check"]["results"] if r["checker"] == "faults")
    assert faults["by_fault"]["leader-transfer"]["verified"] >= 1, faults
    logs = "".join(open(p, errors="replace").read()
                   for p in glob.glob(os.path.join(run_dir, "**", "*.log"), recursive=True))
    assert "tablet copy finished" in logs


def _etcd_results(out):
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.load(open(os.path.join(run_dir, "results.json")))
    return run_dir, results, {r["checker"]: r for r in results["check"]["results"]}


@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd-server is not installed")
def test_etcd_register_under_kills_and_partitions_is_valid(env, tmp_path):
    """etcd under the harness. Register on five etcd members (Debian's etcd-server)
    through the v3 JSON gateway, members killed and partitioned, one removed and added back
    (etcd's member API), leadership moved to a drawn member (MoveLeader, seen on the old
    leader after): linearizable, all five members' KV hashes agree at the end, and their
    logs hold no fatal line; as Jepsen found for 3.4.3. (No disk fault here: a bit flipped in
    bbolt's db may go unnoticed and diverge the member, an etcd finding, docs/findings/etcd.)"""
    out = tessera("test", "--db", "etcd", "--workload", "register", "--nemesis",
                  "kill,partition,membership,leader-transfer", "--nemesis-interval", "5",
                  # 30 s: three transfers, each waiting for a leader a majority follows
                  "--time-limit", "30", "--seed", "1", "--store", str(tmp_path / "store"), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir, results, by = _etcd_results(out)
    assert results["verdict"] == "valid" and by["linearizability"]["verdict"] == "valid"
    assert by["convergence"]["verdict"] == "valid" and len(by["convergence"]["members"]) == 5
    assert by["logs"]["verdict"] == "valid" and results["counts"].get("write:ok", 0) > 0
    ops = read_jsonl(os.path.join(run_dir, "history.jsonl"))
    assert {o.f for o in ops if o.process == "nemesis"} >= {
        "start-kill", "start-partition", "start-membership", "start-leader-transfer"}
    assert by["faults"]["by_fault"]["leader-transfer"]["verified"] >= 1, by["faults"]
    assert os.path.getsize(os.path.join(run_dir, "nodes", "n1", "etcd.log")) > 0


@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd-server is not installed")
def test_etcd_lock_set_loses_adds_under_pauses(env, tmp_path):
    """Jepsen's lock-set. A lock on a 2 s lease guards a set in the harness's
    memory; members paused for longer than the lease let a second client take the lock while
    the first still works under it, and adds are lost: invalid. Three runs at most (an overlap
    needs a pause to catch a holder's member mid-work, a matter of timing): the first run
    showed lost adds in 3 of 3 tries one day, in 1 of 2 another (2 adds lost)."""
    for seed in (6, 7, 8):
        out = tessera("test", "--db", "etcd", "--workload", "lock-set", "--nemesis", "pause",
                      "--nemesis-interval", "3", "--time-limit", "45", "--seed", str(seed),
                      "--store", str(tmp_path / "store"), env=env)
        if out.returncode == 1:
            break
    assert out.returncode == 1, out.stderr[-3000:]
    _, results, by = _etcd_results(out)
    assert results["verdict"] == "invalid" and by["set"]["verdict"] == "invalid"
    assert by["set"]["lost_count"] > 0 and by["convergence"]["verdict"] == "valid"
