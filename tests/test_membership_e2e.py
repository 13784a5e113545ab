"""Membership change on real processes (Kudu's Raft configuration-change and tablet-copy
designs): a replica added to a running tablet is auto-vivified by tablet copy from the leader,
promoted to voter once caught up, and can carry the quorum; a removed replica is tombstoned by
the master and the catalog follows."""

import asyncio

import pytest
from waiting import until_async

from node.client import TesseraClient
from node.protocol import Empty, ServerStatus
from node.rpc import RpcError
from node.tools.local_cluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def run(coro, timeout=180):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture
def make_cluster(tmp_path):
    """A local cluster of one master and `tservers` tablet servers; snapshots every `every`
    applied entries keeping only `retain` entries of log, so a peer missing more must be copied."""
    made = []

    def make(tservers: int, every: int, retain: int, flags: tuple = ()) -> LocalCluster:
        made.append(LocalCluster(tmp_path / "lc", masters=1, tservers=tservers, flags=[
            f"--snapshot-interval-entries={every}", f"--log-retain-entries={retain}", *flags]))
        made[-1].up(timeout=60)
        return made[-1]

    yield make
    for c in made:
        c.down()


async def _status(client, cluster, name) -> ServerStatus:
    return await client.rpc.call(("127.0.0.1", cluster.daemons[name].port), "ts.status", Empty(),
                                 ServerStatus, to_uuid="", timeout=5)


async def _reports(client, cluster, tablet):
    """daemon name -> (uuid, that server's report of `tablet` or None), for live tservers."""
    out = {}
    for name, d in cluster.daemons.items():
        if d.kind == "tserver" and cluster.alive(name):
            try:
                st = await _status(client, cluster, name)
            except RpcError:  # restarting: not listening yet
                continue
            out[name] = (st.uuid, next((t for t in st.tablets if t.tablet_id == tablet), None))
    return out


async def _one_tablet_table(cluster):
    """(client, tablet id, table handle) of a new one-tablet table "t" with three replicas."""
    client = TesseraClient(cluster.master_addrs, timeout=15)
    locs = await client.create_table("t", num_tablets=1, replication_factor=3)
    return client, locs.tablets[0].tablet_id, client.table("t")


def test_added_replica_is_copied_promoted_and_carries_the_quorum_after_a_removal(make_cluster):
    # The leader cannot replay the tablet's history to the new member, which must be copied.
    cluster = make_cluster(tservers=4, every=200, retain=20)

    async def go():
        client, tablet, table, reports = await _loaded(cluster, 600)
        newcomer = next(name for name, (_, rep) in reports.items() if rep is None)
        new_uuid = reports[newcomer][0]
        config = await client.change_replica(tablet, "add", new_uuid)
        assert [new_uuid, "NON_VOTER"] in config.members

        async def promoted_and_caught_up():
            reps = await _reports(client, cluster, tablet)
            leader = next((r for _, r in reps.values() if r and r.role == "LEADER"), None)
            mine = reps[newcomer][1]
            return (leader is not None and mine is not None and mine.state == "RUNNING"
                    and [new_uuid, "VOTER"] in leader.committed_config
                    and mine.applied >= 600)
        await until_async(promoted_and_caught_up, "the new replica to be copied and promoted")
        # It was copied, not replayed: its log starts after a snapshot.
        assert list((cluster.root / newcomer / "data" / tablet).glob("snapshot-*"))

        # Remove one original follower; the master tombstones it and updates the catalog.
        reps = await _reports(client, cluster, tablet)
        doomed = next(name for name, (_, r) in reps.items()
                      if name != newcomer and r is not None and r.role != "LEADER")
        doomed_uuid = reps[doomed][0]
        leader_now = next(r for _, r in reps.values() if r and r.role == "LEADER")
        config = await client.change_replica(tablet, "remove", doomed_uuid)
        assert doomed_uuid not in {u for u, _ in config.members}
        assert len(config.members) == 3

        async def tombstoned():
            rep = (await _reports(client, cluster, tablet))[doomed][1]
            return rep is not None and rep.state == "TOMBSTONED"
        await until_async(tombstoned, "the master to tombstone the removed replica")

        async def catalog_follows():
            client._locations.pop("t", None)
            replicas = {p.uuid for p in (await client.locations("t")).tablets[0].replicas}
            return new_uuid in replicas and doomed_uuid not in replicas
        await until_async(catalog_follows, "the catalog to follow the config change")

        # Kill the remaining original follower: leader + newcomer are the majority now, so
        # writes go on and every key is there.
        other = next(name for name, (uuid, r) in reps.items()
                     if name not in (newcomer, doomed) and r is not None
                     and uuid != leader_now.leader)
        cluster.kill(other)
        for i in range(600, 650):
            await table.write(f"k{i}", i)
        for i in range(650):
            assert await table.read(f"k{i}") == i
        await client.close()
    run(go())


def test_a_follower_behind_the_retained_log_is_caught_up_by_tablet_copy(make_cluster):
    cluster = make_cluster(tservers=3, every=100, retain=10)

    async def go():
        client, tablet, table = await _one_tablet_table(cluster)
        await table.write("k0", 0)
        reps = await _reports(client, cluster, tablet)
        laggard = next(name for name, (_, r) in reps.items() if r.role != "LEADER")
        cluster.kill(laggard)
        for i in range(1, 400):  # several snapshots: the leader drops what the laggard lacks
            await table.write(f"k{i}", i)
        cluster.start(laggard)

        async def caught_up():
            rep = (await _reports(client, cluster, tablet)).get(laggard, (None, None))[1]
            return rep is not None and rep.state == "RUNNING" and rep.applied >= 400
        await until_async(caught_up, "the laggard to be copied and catch up")
        log_text = (cluster.root / f"{laggard}.log").read_text()
        assert "tablet copy finished" in log_text  # by a tablet copy, not by replaying the log
        await table.write("after-copy", 1)
        # A copied replica restarts from its snapshot plus the log written after it.
        cluster.kill(laggard)
        cluster.start(laggard)
        await until_async(caught_up, "the copied replica to restart")
        # The copy holds the data: with the leader gone, the laggard and the other
        # follower elect a leader and serve every key.
        leader = next(name for name, (_, r) in (await _reports(client, cluster, tablet)).items()
                      if r.role == "LEADER")
        cluster.kill(leader)
        for i in range(400):
            assert await table.read(f"k{i}") == i
        assert await table.read("after-copy") == 1
        await client.close()
    run(go())


async def _loaded(cluster, rows: int):
    """A new one-tablet table with `rows` rows: (client, tablet, table, `_reports` of it)."""
    client, tablet, table = await _one_tablet_table(cluster)
    for i in range(rows):
        await table.write(f"k{i}", i)
    return client, tablet, table, await _reports(client, cluster, tablet)


async def _loaded_with_a_spare(cluster, rows: int = 300):
    """A new one-tablet table with `rows` rows on a 4-server cluster: (client, tablet, table,
    uuids by daemon name, the spare server holding no replica, a follower)."""
    client, tablet, table, reps = await _loaded(cluster, rows)
    spare = next(name for name, (_, r) in reps.items() if r is None)
    follower = next(name for name, (_, r) in reps.items() if r is not None and r.role != "LEADER")
    return client, tablet, table, {name: uuid for name, (uuid, _) in reps.items()}, spare, follower


async def _replaced_then_carries_the_quorum(client, cluster, tablet, table, gone: str,
                                            gone_uuid: str, spare_uuid: str, what: str,
                                            rows: int = 300, also=None) -> None:
    """Wait until the leader's settled config has the spare as a voter and not `gone_uuid`, run
    `also` (more waiting, if any), then kill the other original follower: the replacement must
    carry the quorum with the leader, and every row must still be there."""
    async def replaced():
        reps = await _reports(client, cluster, tablet)
        leader = next((r for _, r in reps.values() if r and r.role == "LEADER"), None)
        return (leader is not None and leader.config == leader.committed_config
                and gone_uuid not in {u for u, _ in leader.committed_config}
                and [spare_uuid, "VOTER"] in leader.committed_config)
    await until_async(replaced, what, timeout=90)
    if also is not None:
        await also()
    reps = await _reports(client, cluster, tablet)
    other = next(name for name, (uuid, r) in reps.items()
                 if name != gone and uuid != spare_uuid and r is not None and r.role != "LEADER")
    cluster.kill(other)
    await table.write("after", 1)
    assert [await table.read(f"k{i}") for i in range(rows)] == list(range(rows))
    await client.close()


def test_the_master_replaces_the_replica_of_a_failed_server(make_cluster):
    cluster = make_cluster(tservers=4, every=100, retain=10,
                           flags=("--follower-unavailable-considered-failed-sec=3",))

    async def go():
        client, tablet, table, uuids, spare, dead = await _loaded_with_a_spare(cluster)
        cluster.kill(dead)
        await _replaced_then_carries_the_quorum(
            client, cluster, tablet, table, dead, uuids[dead], uuids[spare],
            "the master to replace the failed server's replica")
    run(go())


def test_the_master_replaces_a_replica_that_reports_failed_and_deletes_it(make_cluster):
    """A replica whose metadata is damaged refuses to start and reports FAILED while its server
    heartbeats on. It never recovers by itself, so the master replaces it at once (no silence
    to wait out), add before remove, and then deletes it, as Kudu's master does for a peer its
    leader reports FAILED_UNRECOVERABLE (here the server forgets it and leaves its files). The
    default failure timeout (300 s) is left alone: only the FAILED report can make this happen
    inside the test's time."""
    cluster = make_cluster(tservers=4, every=100, retain=10)

    async def damage():
        client, tablet, _, uuids, spare, bad = await _loaded_with_a_spare(cluster)
        await client.close()
        return tablet, uuids, spare, bad
    tablet, uuids, spare, bad = run(damage())
    cluster.kill(bad)
    cmeta = cluster.root / bad / "consensus-meta" / tablet
    data = bytearray(cmeta.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cmeta.write_bytes(bytes(data))
    cluster.start(bad)

    async def go():
        client = TesseraClient(cluster.master_addrs, timeout=15)

        async def report():
            reps = await _reports(client, cluster, tablet)
            return reps[bad][1] if bad in reps else "unanswered"

        async def failed():
            return getattr(await report(), "state", None) == "FAILED"
        await until_async(failed, "the damaged replica to start and report FAILED", timeout=60)

        async def forgotten():
            return await report() is None

        async def deleted():  # its server forgets it; the damaged files stay for an operator
            await until_async(forgotten, "the master to delete the FAILED replica", timeout=60)
            assert cmeta.exists()
        await _replaced_then_carries_the_quorum(
            client, cluster, tablet, client.table("t"), bad, uuids[bad], uuids[spare],
            "the master to replace the FAILED replica", also=deleted)
    run(go())


class _LocalTablets:
    """The part of the harness's Tessera deployment that `TabletMembers` calls, on a local
    cluster's tablet servers: what the membership nemesis asks there goes over real RPCs."""

    time_scale = 1.0

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self.hosts = [n for n, d in cluster.daemons.items() if d.kind == "tserver"]
        self.master_addrs = cluster.master_addrs

    def tls(self, name: str = "admin"):
        return None

    def ask_each(self, hosts, daemon, method, reply, request=None) -> dict:
        async def ask():
            client, out = TesseraClient(self.master_addrs, timeout=5), {}
            try:
                for name in hosts:
                    try:
                        out[name] = await client.rpc.call(
                            ("127.0.0.1", self.cluster.daemons[name].port), method,
                            request or Empty(), reply, to_uuid="", timeout=2)
                    except RpcError:
                        pass
                return out
            finally:
                await client.close()
        return asyncio.run(ask())


def test_a_change_to_a_tablet_with_most_voters_failed_gives_up_before_its_timeout(make_cluster):
    """Two of a tablet's three replicas damaged (their metadata), so they report FAILED: no
    leader can be elected until an operator steps in, and the master answers every replica
    change with "no leader". The membership nemesis's change gives up on such a tablet after a
    few looks (`Stranded`, saying why) instead of asking until its timeout: a matrix cell's
    membership start, stop and heal once spent a minute and more that way."""
    from harness.systems.tessera.members import TabletMembers
    from nemeses.membership import Stranded

    cluster = make_cluster(tservers=3, every=100, retain=10)

    async def load():
        client, tablet, _, reps = await _loaded(cluster, 50)
        await client.close()
        return tablet, {name: uuid for name, (uuid, _) in reps.items()}
    tablet, uuids = run(load())
    damaged = sorted(uuids)[:2]
    for name in uuids:
        cluster.kill(name)
    for name in damaged:
        cmeta = cluster.root / name / "consensus-meta" / tablet
        data = bytearray(cmeta.read_bytes())
        data[len(data) // 2] ^= 0xFF
        cmeta.write_bytes(bytes(data))
    for name in uuids:
        cluster.start(name)

    async def both_failed():
        client = TesseraClient(cluster.master_addrs, timeout=15)
        try:
            reps = await _reports(client, cluster, tablet)
            return all(getattr(reps.get(n, (None, None))[1], "state", None) == "FAILED"
                       for n in damaged)
        finally:
            await client.close()
    run(until_async(both_failed, "the damaged replicas to start and report FAILED", timeout=60))

    members = TabletMembers(_LocalTablets(cluster))
    with pytest.raises(Stranded) as given_up:
        members.change(tablet, "remove", uuids[damaged[0]], timeout=120.0)
    assert "no replica leads" in str(given_up.value)
    for name in damaged:
        assert uuids[name] in str(given_up.value)
