"""The operator tools (`tessera master list`, `tserver list`, `tablet leader-step-down`,
`tablet move-replica`) as an operator runs them: the real CLI against a real local cluster."""

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import until

from node.client import TesseraClient
from node.protocol import Empty, ServerStatus
from node.tools.local_cluster import LocalCluster, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("admin") / "lc", masters=3, tservers=4)
    c.up(timeout=90)
    yield c
    c.down()


def tessera(cluster, *args, masters=None):
    env = {**os.environ, "TESSERA_MASTERS": masters or ",".join(
        f"{h}:{p}" for h, p in cluster.master_addrs)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=400, stdin=subprocess.DEVNULL)


async def _reports(cluster, tablet):
    """uuid -> that live server's report of `tablet` (None if it has no replica)."""
    client = TesseraClient(cluster.master_addrs)
    out = {}
    try:
        for d in cluster.daemons.values():
            if d.kind == "tserver" and cluster.alive(d.name):
                st = await client.rpc.call((d.host, d.port), "ts.status", Empty(), ServerStatus,
                                           to_uuid="", timeout=5)
                out[st.uuid] = next((t for t in st.tablets if t.tablet_id == tablet), None)
    finally:
        await client.close()
    return out


def _table(cluster, name="t"):
    async def go():
        client = TesseraClient(cluster.master_addrs, timeout=30)
        locs = await client.create_table(name, num_tablets=1, replication_factor=3)
        for i in range(100):
            await client.table(name).write(f"k{i}", i)
        await client.close()
        return locs.tablets[0].tablet_id
    return asyncio.run(go())


def _read_all(cluster):
    async def go():
        client = TesseraClient(cluster.master_addrs, timeout=30)
        values = [await client.table("t").read(f"k{i}") for i in range(100)]
        await client.close()
        return values
    return asyncio.run(go())


def test_master_and_tserver_list(cluster):
    out = tessera(cluster, "master", "list")
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines()[1:]]
    assert len(rows) == 3 and all(r[4] == "yes" for r in rows)
    assert [r[2] for r in rows].count("LEADER") == 1

    out = tessera(cluster, "tserver", "list")
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines()[1:]]
    assert len(rows) == 4 and all(r[2] == "yes" for r in rows)

    # An unreachable master is listed as such, and the listing exits 1.
    addrs = ",".join(f"{h}:{p}" for h, p in cluster.master_addrs) + f",127.0.0.1:{free_port()}"
    out = tessera(cluster, "master", "list", "--timeout", "2", masters=addrs)
    assert out.returncode == 1
    assert out.stdout.count("\tyes") == 3 and "\tno (" in out.stdout


def test_a_tablet_server_enters_and_exits_maintenance(cluster):
    """Kudu's `kudu tserver state enter_maintenance | exit_maintenance`, through the leader
    master into the catalog (what the masters then leave alone: tests/
    test_reconciler_rereplication.py and the simulator's maintenance seeds)."""
    out = tessera(cluster, "tserver", "list")
    uuid = out.stdout.splitlines()[1].split("\t")[1]
    out = tessera(cluster, "tserver", "state", "enter_maintenance", uuid)
    assert out.returncode == 0 and f"tablet server {uuid} entered maintenance" in out.stdout, out.stderr
    out = tessera(cluster, "tserver", "state", "exit_maintenance", uuid)
    assert out.returncode == 0 and "left maintenance" in out.stdout, out.stderr
    out = tessera(cluster, "tserver", "state", "enter_maintenance", "no-such-uuid")
    assert out.returncode == 1 and "no tablet server no-such-uuid" in out.stderr
    assert "Traceback" not in out.stderr
    out = tessera(cluster, "tserver", "state", "enter_maintainance", uuid)  # a typo
    assert out.returncode == 254 and "invalid choice" in out.stderr


def test_leader_step_down_and_move_replica(cluster):
    tablet = _table(cluster)
    reps = asyncio.run(_reports(cluster, tablet))
    leader = next(u for u, r in reps.items() if r is not None and r.role == "LEADER")
    follower = next(u for u, r in reps.items() if r is not None and r.role == "FOLLOWER")
    spare = next(u for u, r in reps.items() if r is None)

    out = tessera(cluster, "tablet", "leader-step-down", tablet, "--new-leader", follower)
    assert out.returncode == 0, out.stderr
    assert f"leader {leader}" in out.stdout

    def new_leader():
        r = asyncio.run(_reports(cluster, tablet))[follower]
        return r is not None and r.role == "LEADER"
    until(new_leader, "the named follower to take over")

    # Move the old leader's replica (now a follower) to the spare server.
    members = {u for u, r in reps.items() if r is not None}
    out = tessera(cluster, "tablet", "move-replica", tablet, leader, spare)
    assert out.returncode == 0, out.stderr
    reps = asyncio.run(_reports(cluster, tablet))
    config = next(r for r in reps.values() if r is not None and r.role == "LEADER").committed_config
    assert sorted(config) == sorted([u, "VOTER"] for u in members - {leader} | {spare})
    assert _read_all(cluster) == list(range(100))

    # Run again, as an operator does when the first answer timed out: the config is as asked
    out = tessera(cluster, "tablet", "add-replica", tablet, spare)
    assert out.returncode == 0 and f"{spare} is a member of {tablet} already" in out.stdout, out
    out = tessera(cluster, "tablet", "remove-replica", tablet, leader)
    assert out.returncode == 0 and f"{leader} is not a member of {tablet} already" in out.stdout


def test_bad_requests_fail_with_a_reason(cluster):
    out = tessera(cluster, "tablet", "move-replica", "some-tablet", "a", "a")
    assert out.returncode == 1 and "same server" in out.stderr
    out = tessera(cluster, "tablet", "leader-step-down", "no-such-tablet")
    assert out.returncode == 1 and "no live server reports leading it" in out.stderr
    out = tessera(cluster, "tablet", "frobnicate")
    assert out.returncode == 254 and "invalid choice" in out.stderr  # bad arguments
    # ksck with no master answering cannot decide: exit 2, naming why
    out = tessera(cluster, "cluster", "ksck", "--timeout", "1",
                  masters=f"127.0.0.1:{free_port()}")
    assert out.returncode == 2 and "no master answered as the leader" in out.stdout
    assert out.stdout.endswith("could not decide\n")


def test_ksck_healthy_then_names_the_tablet_and_replica_a_kill_took(cluster):
    tablet = _table(cluster, "k")
    # Right after the move above the catalog may still list the removed replica: a settled
    # cluster is healthy.
    until(lambda: tessera(cluster, "cluster", "ksck").returncode == 0, "a healthy ksck")
    out = tessera(cluster, "cluster", "ksck")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.endswith("healthy\n") and "0 under-replicated, 0 unavailable" in out.stdout
    masters = out.stdout.split("leader master:")[0]
    assert masters.count(" LEADER ") == 1 and masters.count(" FOLLOWER ") == 2

    assert f"k tablet {tablet}: HEALTHY" in out.stdout
    reps = asyncio.run(_reports(cluster, tablet))
    victim_uuid = next(u for u, r in reps.items() if r is not None and r.role == "FOLLOWER")
    victim = next(n for n, d in cluster.daemons.items() if d.kind == "tserver"
                  and asyncio.run(_status_uuid(cluster, n)) == victim_uuid)
    cluster.kill(victim)
    out = tessera(cluster, "cluster", "ksck", "--timeout", "3")
    assert out.returncode == 1, out.stdout + out.stderr
    addr = cluster.daemons[victim].addr
    assert (f"problem: tablet {tablet} of k (UNDER_REPLICATED): replica {addr} "
            f"({victim_uuid[:8]}) UNREACHABLE") in out.stdout, out.stdout
    assert f"k tablet {tablet}: UNDER_REPLICATED" in out.stdout
    assert " 0 under-replicated" not in out.stdout  # (table t may have lost its leader there)
    assert out.stdout.endswith("problems found\n")


def test_unsafe_change_config_recovers_a_tablet_whose_majority_was_destroyed(tmp_path):
    c = LocalCluster(tmp_path / "lc", masters=1, tservers=3)
    c.up(timeout=90)
    try:
        tablet = _table(c)
        reps = asyncio.run(_reports(c, tablet))
        leader = next(u for u, r in reps.items() if r.role == "LEADER")
        commit = reps[leader].commit
        survivor = next(u for u, r in reps.items() if r.role == "FOLLOWER")
        until(lambda: asyncio.run(_reports(c, tablet))[survivor].applied >= commit,
               "the survivor to apply every write")
        # Two of three replicas destroyed: processes killed, disks wiped.
        names = {asyncio.run(_status_uuid(c, n)): n for n, d in c.daemons.items()
                 if d.kind == "tserver"}
        for uuid, name in names.items():
            if uuid != survivor:
                c.kill(name)
                shutil.rmtree(c.root / name)

        refused = tessera(c, "tablet", "unsafe-change-config", tablet, "--voters", survivor)
        assert refused.returncode == 1 and "Rerun with --force" in refused.stderr
        assert len(asyncio.run(_reports(c, tablet))[survivor].config) == 3  # nothing changed

        out = tessera(c, "tablet", "unsafe-change-config", tablet, "--voters", survivor, "--force")
        assert out.returncode == 0, out.stderr

        def leads_alone():
            r = asyncio.run(_reports(c, tablet))[survivor]
            return r.role == "LEADER" and r.committed_config == [[survivor, "VOTER"]]
        until(leads_alone, "the survivor to lead a config of one")
        assert _read_all(c) == list(range(100))  # every acknowledged write is still there
    finally:
        c.down()


async def _status_uuid(cluster, name):
    d = cluster.daemons[name]
    client = TesseraClient(cluster.master_addrs)
    try:
        st = await client.rpc.call((d.host, d.port), "ts.status", Empty(), ServerStatus,
                                   to_uuid="", timeout=5)
    finally:
        await client.close()
    return st.uuid
