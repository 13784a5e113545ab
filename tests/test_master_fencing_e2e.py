"""The fencing in Kudu's multi-master design (its Appendix A) on real processes: the DeleteReplica
cases a master decides from its own catalog, where a stale catalog must not destroy data.

- Case 1, no record of the tablet at all: never deleted. A deposed leader master is shown,
  by the tablet servers' heartbeats, the tablets its successor created; it must leave them.
- Case 2, a deleted record: deleted (test_cluster_e2e's delete-table test).
- Cases 3 and 4, a replica its committed config left out: deleted under a compare-and-set on
  the committed config's opid index, so a member re-added since is not wiped.
- A leader master acts only while it leads: it steps down when it loses its quorum.
"""

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import until_async

from node.client import TesseraClient
from node.protocol import (
    Ack,
    ConfigState,
    DeleteTablet,
    Empty,
    MasterInfo,
    RemoveMaster,
    ServerStatus,
    TableList,
)
from node.rpc import ErrorCode, RpcError
from node.tools.local_cluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent

# Heartbeats every tick and 30 missed ones before an election: a leader's check-quorum then
# looks back over 3 s, long enough for a paused and resumed leader master to act on the
# tablet servers' reports (every 250 ms) in its reconciler (every 250 ms) before it notices.
FAST = ["--raft-heartbeat-interval-ms=100", "--leader-failure-max-missed-heartbeat-periods=30",
        "--heartbeat-interval-ms=250", "--catalog-manager-bg-task-wait-ms=250"]


def run(coro, timeout=240):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(masters: int, tservers: int, flags=()) -> LocalCluster:
        made.append(LocalCluster(tmp_path / "lc", masters=masters, tservers=tservers,
                                 flags=list(flags)))
        made[-1].up(timeout=90)
        return made[-1]

    yield make
    for c in made:
        c.down()


def _names(cluster, kind):
    return [n for n, d in cluster.daemons.items() if d.kind == kind]


async def _call(client, cluster, name, method, request, reply):
    d = cluster.daemons[name]
    return await client.rpc.call((d.host, d.port), method, request, reply, to_uuid="", timeout=3)


async def _leader_master(client, cluster, among):
    """The name of the master in `among` that says it leads, if exactly one does."""
    leaders = []
    for name in among:
        try:
            info = await _call(client, cluster, name, "master.info", Empty(), MasterInfo)
        except RpcError:
            continue
        if info.role == "LEADER":
            leaders.append(name)
    return leaders[0] if len(leaders) == 1 else None


async def _replica_states(client, cluster, tablet):
    """tserver name -> (uuid, its report of `tablet` or None)."""
    out = {}
    for name in _names(cluster, "tserver"):
        st = await _call(client, cluster, name, "ts.status", Empty(), ServerStatus)
        out[name] = (st.uuid, next((t for t in st.tablets if t.tablet_id == tablet), None))
    return out


def test_a_deposed_leader_master_leaves_the_tablets_its_successor_created(tmp_path):
    """In a network namespace of its own (unshare), where iptables can cut the leader master
    off from the other two, by address, without touching the host's rules."""
    proc = subprocess.run(["unshare", "--net", "--", sys.executable, __file__, "deposed",
                           str(tmp_path)], capture_output=True, text=True, timeout=400,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "deposed leader kept every replica" in proc.stdout
    assert "deposed leader, LEADER by its own account, answered" in proc.stdout, proc.stdout


def _iptables(action: str, a: str, others: list[str]) -> None:
    for b in others:
        for src, dst in ((a, b), (b, a)):
            subprocess.run(["iptables", action, "INPUT", "-s", src, "-d", dst, "-j", "DROP"],
                           check=True)


def _deposed_scenario(root: Path) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    # Check-quorum looks back over 6 s here, so the resumed old leader has at least that long.
    flags = [f for f in FAST if "missed" not in f] + [
        "--leader-failure-max-missed-heartbeat-periods=60"]
    cluster = LocalCluster(root / "lc", masters=3, tservers=3, flags=flags, own_addresses=True)
    try:
        cluster.up(timeout=120)
        asyncio.run(asyncio.wait_for(_deposed(cluster), 300))
    finally:
        cluster.down()


async def _deposed(cluster: LocalCluster) -> None:
    masters = _names(cluster, "master")
    client = TesseraClient(cluster.master_addrs, timeout=30)
    await client.create_table("before", num_tablets=1, replication_factor=3)
    old = await until_async(lambda: _leader_master(client, cluster, masters), "a leader master")
    others = [m for m in masters if m != old]
    host = {n: d.host for n, d in cluster.daemons.items()}

    # Cut off from the other masters (the tablet servers still reach it) and paused at once,
    # so it cannot notice: it still leads, by its own account, when it resumes.
    _iptables("-A", host[old], [host[m] for m in others])
    cluster.signal(old, signal.SIGSTOP)
    await until_async(lambda: _leader_master(client, cluster, others), "a new leader master")
    tablet = (await client.create_table("after", num_tablets=1,
                                        replication_factor=3)).tablets[0].tablet_id
    await client.table("after").write("k", 1)

    async def all_running():
        reps = await _replica_states(client, cluster, tablet)
        return all(r is not None and r.state == "RUNNING" for _, r in reps.values())
    await until_async(all_running, "every replica of the new table")

    # Resumed, the old leader's reconciler is shown the new tablet, of which its catalog has
    # no record, by the tablet servers' heartbeats.
    cluster.signal(old, signal.SIGCONT)
    old_log = cluster.root / f"{old}.log"

    async def reconciled_with_the_report():
        reps = await _replica_states(client, cluster, tablet)
        assert [r.state for _, r in reps.values()] == ["RUNNING"] * 3, reps
        return f"tablet {tablet} reported by" in old_log.read_text()
    await until_async(reconciled_with_the_report, "the old leader's reconciler to see the tablet")

    # Still leading by its own account, it must not answer a membership fact from its config
    # (a tool takes "not a member" for a removal already done): it confirms its leadership
    # first, which it cannot.
    info = await _call(client, cluster, old, "master.info", Empty(), MasterInfo)
    with pytest.raises(RpcError) as unconfirmed:
        await _call(client, cluster, old, "master.remove_master", RemoveMaster("no-such-master"),
                    ConfigState)
    assert info.role != "LEADER" or unconfirmed.value.code in (
        ErrorCode.NOT_LEADER, ErrorCode.DEADLINE_EXCEEDED), (info.role, unconfirmed.value)
    print(f"deposed leader, {info.role} by its own account, answered {unconfirmed.value.code.name}")

    async def stepped_down():
        info = await _call(client, cluster, old, "master.info", Empty(), MasterInfo)
        return info.role != "LEADER"
    await until_async(stepped_down, "the old leader to notice it lost its quorum")
    reps = await _replica_states(client, cluster, tablet)
    assert [r.state for _, r in reps.values()] == ["RUNNING"] * 3, reps

    _iptables("-D", host[old], [host[m] for m in others])
    assert await client.table("after").read("k") == 1
    await client.table("after").write("k2", 2)
    assert await client.table("after").read("k2") == 2
    await client.close()
    print("deposed leader kept every replica")


def test_a_stale_eviction_cannot_wipe_a_re_added_member(make_cluster):
    cluster = make_cluster(masters=1, tservers=4)

    async def go():
        client = TesseraClient(cluster.master_addrs, timeout=30)
        tablet = (await client.create_table("t", num_tablets=1,
                                            replication_factor=3)).tablets[0].tablet_id
        table = client.table("t")
        for i in range(50):
            await table.write(f"k{i}", i)
        reps = await _replica_states(client, cluster, tablet)
        member = next(n for n, (_, r) in reps.items() if r is not None and r.role == "FOLLOWER")
        member_uuid = reps[member][0]

        # Removed: the master evicts the replica (its DeleteTablet carries the CAS).
        removal = await client.change_replica(tablet, "remove", member_uuid)

        async def tombstoned():
            rep = (await _replica_states(client, cluster, tablet))[member][1]
            return rep is not None and rep.state == "TOMBSTONED"
        await until_async(tombstoned, "the master to evict the removed replica")

        # Re-added: copied back and promoted.
        await client.change_replica(tablet, "add", member_uuid)

        async def voter_again():
            reps = await _replica_states(client, cluster, tablet)
            leader = next((r for _, r in reps.values() if r and r.role == "LEADER"), None)
            mine = reps[member][1]
            return (leader is not None and mine is not None and mine.state == "RUNNING"
                    and [member_uuid, "VOTER"] in leader.committed_config
                    and mine.committed_config_index > removal.opid_index
                    # The promotion committed on the member too, not only on the leader: a
                    # member that still reports the learner config's index would refuse the
                    # delete below as stale.
                    and mine.committed_config_index == leader.committed_config_index)
        await until_async(voter_again, "the re-added replica to be a voter")

        # The eviction decided from the removal's config arrives late (a stale heartbeat, a
        # slow RPC): refused, and the member keeps its data.
        with pytest.raises(RpcError) as refused:
            await _call(client, cluster, member, "ts.delete_tablet",
                        DeleteTablet(tablet, cas_config_index=removal.opid_index), Ack)
        assert refused.value.code == ErrorCode.ILLEGAL_STATE
        assert "re-added" in refused.value.message
        rep = (await _replica_states(client, cluster, tablet))[member][1]
        assert rep.state == "RUNNING" and rep.applied >= 50

        # The same call with the current config's index is not stale, and deletes.
        ack = await _call(client, cluster, member, "ts.delete_tablet",
                          DeleteTablet(tablet, cas_config_index=rep.committed_config_index), Ack)
        assert ack.ok is True
        assert (await _replica_states(client, cluster, tablet))[member][1].state == "TOMBSTONED"
        await client.close()
    run(go())


def test_a_leader_master_that_loses_its_quorum_steps_down(make_cluster):
    cluster = make_cluster(masters=3, tservers=3, flags=FAST)
    masters = _names(cluster, "master")

    async def go():
        client = TesseraClient(cluster.master_addrs, timeout=30)
        await client.create_table("t", num_tablets=1, replication_factor=3)
        leader = await until_async(lambda: _leader_master(client, cluster, masters), "a leader master")
        followers = [m for m in masters if m != leader]
        for m in followers:
            cluster.signal(m, signal.SIGSTOP)

        async def stepped_down():
            info = await _call(client, cluster, leader, "master.info", Empty(), MasterInfo)
            return info.role != "LEADER"
        await until_async(stepped_down, "the leader master to step down")
        # It no longer changes the catalog.
        with pytest.raises(RpcError) as refused:
            await _call(client, cluster, leader, "master.list_tables", Empty(), TableList)
        assert refused.value.code == ErrorCode.NOT_LEADER

        for m in followers:
            cluster.signal(m, signal.SIGCONT)
        await until_async(lambda: _leader_master(client, cluster, masters), "a leader master again")
        await client.create_table("t2", num_tablets=1, replication_factor=3)
        assert sorted(await client.list_tables()) == ["t", "t2"]
        await client.close()
    run(go())


if __name__ == "__main__" and sys.argv[1:2] == ["deposed"]:
    _deposed_scenario(Path(sys.argv[2]))
