"""A real cluster: master and tablet-server processes on loopback, real TCP, real fsync.

Kills are SIGKILL; nothing acknowledged may be lost, and a corrupt replica must refuse to start
while the rest of its server keeps serving.
"""

import asyncio
import signal
import time

import pytest

from node.client import TesseraClient
from node.errors import OpFailed, OpUnknown
from node.protocol import Empty, ServerStatus
from node.rpc import ErrorCode, RpcError
from node.tools.local_cluster import LocalCluster, LocalClusterError

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path / "lc", masters=1, tservers=3)
    c.up(timeout=60)
    yield c
    c.down()


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def _status(client: TesseraClient, c: LocalCluster, name: str) -> ServerStatus:
    d = c.daemons[name]
    return await client.rpc.call(("127.0.0.1", d.port), "ts.status", Empty(), ServerStatus,
                                 to_uuid="", timeout=5)


class Writer:
    """Writes distinct keys in a loop and remembers which were acknowledged."""

    def __init__(self, table):
        self.table, self.acked, self.unknown, self.failed, self.n = table, {}, set(), 0, 0
        self.stop = False

    async def run(self):
        while not self.stop:
            key = f"w{self.n}"
            self.n += 1
            try:
                await self.table.write(key, self.n)
                self.acked[key] = self.n
            except OpUnknown:
                self.unknown.add(key)
            except OpFailed:
                self.failed += 1


def test_writes_survive_leader_kill_and_restart(cluster):
    async def go():
        client = TesseraClient(cluster.master_addrs, timeout=10)
        locs = await client.create_table("t", num_tablets=1, replication_factor=3)
        tablet = locs.tablets[0].tablet_id
        table = client.table("t")
        w = Writer(table)
        task = asyncio.create_task(w.run())
        for _ in range(600):
            if len(w.acked) >= 20:
                break
            await asyncio.sleep(0.05)
        before = len(w.acked)
        victim = await cluster.tablet_leader(client.rpc, tablet)
        cluster.kill(victim)
        new_leader = await cluster.tablet_leader(client.rpc, tablet, exclude={victim})
        assert new_leader != victim
        t0 = len(w.acked)
        for _ in range(300):  # writes continue under the new leader
            if len(w.acked) > t0 + 50:
                break
            await asyncio.sleep(0.05)
        assert len(w.acked) > t0 + 50, "no progress after the leader was killed"
        cluster.start(victim)  # the old leader comes back and catches up
        await asyncio.sleep(0.5)
        w.stop = True
        await task
        assert before > 0
        # every acknowledged write is readable, with its value
        for key, value in w.acked.items():
            assert await table.read(key) == value, key
        # the restarted replica caught up to the leader's commit index
        leader_status = await _status(client, cluster, new_leader)
        commit = next(t.commit for t in leader_status.tablets if t.tablet_id == tablet)
        rep = None
        for _ in range(300):
            try:
                st = await _status(client, cluster, victim)
            except RpcError as e:  # start() does not wait for the daemon to listen: on a
                assert e.code == ErrorCode.NETWORK, e  # loaded machine it may not be yet
                await asyncio.sleep(0.1)
                continue
            rep = next((t for t in st.tablets if t.tablet_id == tablet), None)
            if rep is not None and rep.applied >= commit:
                break
            await asyncio.sleep(0.1)
        assert rep is not None and rep.applied >= commit, (rep, commit)
        await client.close()
    run(go())


def test_majority_loss_stalls_writes_then_they_resume(cluster):
    async def go():
        client = TesseraClient(cluster.master_addrs, timeout=10)
        await client.create_table("t", num_tablets=1, replication_factor=3)
        table = client.table("t")
        await table.write("before", 1)
        cluster.kill("t1")
        cluster.kill("t2")
        short = TesseraClient(cluster.master_addrs, timeout=2)
        with pytest.raises((OpUnknown, OpFailed)):
            await short.table("t").write("during", 2)
        await short.close()
        cluster.start("t1")
        cluster.start("t2")
        await table.write("after", 3)  # resumes once a majority is back
        assert await table.read("before") == 1
        assert await table.read("after") == 3
        await client.close()
    run(go())


def test_whole_cluster_restart_keeps_every_acknowledged_write(cluster):
    async def go():
        client = TesseraClient(cluster.master_addrs, timeout=10)
        await client.create_table("t", num_tablets=3, replication_factor=3)
        table = client.table("t")
        acked = {}
        for i in range(300):
            await table.write(f"k{i}", i)
            acked[f"k{i}"] = i
        await table.append("list", "a")
        await client.close()
        return acked
    acked = run(go())
    for name in list(cluster.daemons):
        cluster.kill(name)
    cluster.up(timeout=60)

    async def check():
        client = TesseraClient(cluster.master_addrs, timeout=15)
        table = client.table("t")
        for key, value in acked.items():
            assert await table.read(key) == value, key
        assert await table.read("list") == ["a"]
        await client.close()
    run(check())


def _flip_middle_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _corrupt_cmeta(root, tablet):
    path = root / "consensus-meta" / tablet
    _flip_middle_byte(path)
    return path


def _corrupt_closed_wal_segment(root, tablet):
    segments = sorted(p for p in (root / "wals" / tablet).iterdir() if not p.name.startswith("."))
    assert len(segments) >= 2, segments  # the first one is closed: damage there is never a torn tail
    _flip_middle_byte(segments[0])
    return segments[0]


@pytest.mark.parametrize("corrupt", [_corrupt_cmeta, _corrupt_closed_wal_segment])
def test_corrupt_replica_refuses_to_start_and_the_server_serves_its_other_tablets(tmp_path, corrupt):
    cluster = LocalCluster(tmp_path / "lc", masters=1, tservers=3,
                           flags=["--log-segment-size-mb=0.005", "--log-preallocate-segments=false"])
    cluster.up(timeout=60)
    try:
        _check_corrupt_replica_isolated(cluster, corrupt)
    finally:
        cluster.down()


def _check_corrupt_replica_isolated(cluster, corrupt):
    async def go():
        client = TesseraClient(cluster.master_addrs, timeout=10)
        await client.create_table("a", num_tablets=1, replication_factor=3)
        await client.create_table("b", num_tablets=1, replication_factor=3)
        for i in range(200):
            await client.table("a").write(f"k{i}", "x" * 50)
            await client.table("b").write(f"k{i}", i)
        locs = await client.locations("a", refresh=True)
        await client.close()
        return locs.tablets[0].tablet_id
    tablet_a = run(go())
    cluster.signal("t1", signal.SIGTERM)
    for _ in range(100):
        if not cluster.alive("t1"):
            break
        time.sleep(0.1)
    bad = corrupt(cluster.root / "t1", tablet_a)
    cluster.start("t1")
    cluster.wait_ready(60)

    async def check():
        client = TesseraClient(cluster.master_addrs, timeout=10)
        st = await _status(client, cluster, "t1")
        by_id = {t.tablet_id: t for t in st.tablets}
        assert by_id[tablet_a].state == "FAILED"
        assert str(bad) in by_id[tablet_a].error
        others = [t for t in st.tablets if t.tablet_id != tablet_a]
        assert others and all(t.state == "RUNNING" for t in others)
        # the table with a corrupt replica still works through its other two replicas
        assert await client.table("a").read("k3") == "x" * 50
        assert await client.table("b").read("k3") == 3
        await client.close()
    run(check())
    log = (cluster.root / "t1.log").read_text()
    assert "corruption in" in log and str(bad) in log


def test_snapshots_collect_the_log_and_restart_from_snapshot_plus_log(tmp_path):
    cluster = LocalCluster(tmp_path / "lc", masters=1, tservers=3, flags=[
        "--snapshot-interval-entries=300", "--log-retain-entries=50",
        "--log-segment-size-mb=0.01", "--log-preallocate-segments=false"])
    cluster.up(timeout=60)
    try:
        async def load():
            client = TesseraClient(cluster.master_addrs, timeout=10)
            locs = await client.create_table("t", num_tablets=1, replication_factor=3)
            table = client.table("t")
            # one write at a time: each is an entry of its own (concurrent writes would share
            # group entries, and the intervals below count entries)
            for i in range(2000):
                await table.write(f"k{i % 400}", i)
            await client.close()
            return locs.tablets[0].tablet_id
        tablet = run(load())
        wal_bytes = sum(p.stat().st_size for p in (cluster.root / "t1" / "wals" / tablet).iterdir())
        assert list((cluster.root / "t1" / "data" / tablet).glob("snapshot-*"))
        # 2000 writes of ~60 bytes would be >100 KB of log; GC kept only the recent part
        assert wal_bytes < 60_000, wal_bytes
        for name in list(cluster.daemons):
            cluster.kill(name)
        cluster.up(timeout=60)

        async def check():
            client = TesseraClient(cluster.master_addrs, timeout=15)
            table = client.table("t")
            for k in range(400):
                v = await table.read(f"k{k}")
                assert v is not None and v % 400 == k
            await client.close()
        run(check())
    finally:
        cluster.down()


def test_status_and_metrics_endpoints(cluster):
    import json
    import re
    import urllib.request

    async def go():
        client = TesseraClient(cluster.master_addrs, timeout=10)
        await client.create_table("t", num_tablets=1, replication_factor=3)
        await client.table("t").write("k", 1)
        await client.close()
    run(go())
    log = (cluster.root / "t1.log").read_text()
    http_port = int(re.search(r"ready on \S+ http (\d+)", log).group(1))
    base = f"http://127.0.0.1:{http_port}"
    status = json.loads(urllib.request.urlopen(f"{base}/status", timeout=5).read())
    assert status["kind"] == "tserver" and len(status["tablets"]) == 1
    (tablet,) = status["tablets"].values()
    assert tablet["role"] in ("LEADER", "FOLLOWER") and tablet["term"] >= 1
    metrics = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
    for name in ("tessera_raft_term", "tessera_wal_append_seconds_count", "tessera_ops_applied_total",
                 "tessera_leader_changes_total"):
        assert name in metrics, name


def test_delete_table_tombstones_every_replica_and_keeps_its_consensus_metadata(cluster):
    async def go():
        client = TesseraClient(cluster.master_addrs, timeout=10)
        locs = await client.create_table("gone", num_tablets=1, replication_factor=3)
        tablet = locs.tablets[0].tablet_id
        await client.table("gone").write("k", 1)
        await client.delete_table("gone")
        assert "gone" not in await client.list_tables()
        for _ in range(300):  # the leader master's reconciler deletes the orphaned replicas
            states = []
            for name, d in cluster.daemons.items():
                if d.kind == "tserver":
                    st = await _status(client, cluster, name)
                    states += [t.state for t in st.tablets if t.tablet_id == tablet]
            if states == ["TOMBSTONED"] * 3:
                break
            await asyncio.sleep(0.1)
        assert states == ["TOMBSTONED"] * 3, states
        await client.close()
        return tablet
    tablet = run(go())
    for name in ("t1", "t2", "t3"):
        root = cluster.root / name
        assert not (root / "wals" / tablet).exists() and not (root / "data" / tablet).exists()
        assert (root / "consensus-meta" / tablet).exists()  # votes are never forgotten


def test_an_up_that_fails_leaves_none_of_its_daemons_running(tmp_path):
    c = LocalCluster(tmp_path / "lc", masters=1, tservers=3)
    with pytest.raises(LocalClusterError, match="not ready"):
        c.up(timeout=0.01)  # no daemon can even import its code that fast
    assert c.daemons and not any(c.alive(n) for n in c.daemons)
