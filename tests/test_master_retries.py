"""CreateTable, DeleteTable and a replica change are not idempotent, and an attempt can land
and still fail at the client: the master answers a create once the catalog holds the table and
it has asked each replica's server to create it (a paused server makes that ask outlast the
attempt's timeout), a replica change once the tablet's leader has committed it, and any reply
can be lost. The client's retry then reaches a catalog or a config that already shows the
attempt's effect. A create or a drop carries one token for all its attempts, so the master
tells its own retry from another user's call; a replica change's retry says it is one, and is
answered with the config when the change is made. Real processes on loopback: one master,
three tablet servers."""

import asyncio
import signal

import pytest

from node.client import TesseraClient
from node.rpc import ErrorCode, RpcClient, RpcError
from node.tools.local_cluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddl")
    c = LocalCluster(root / "lc", masters=1, tservers=3, flags=[f"--probes-file={root / 'hit'}"])
    c.up(timeout=60)
    try:
        yield c
    finally:
        for daemon in c.daemons:
            c.signal(daemon, signal.SIGCONT)
        c.down()


def _fired(c: LocalCluster) -> list[str]:
    return (c.root.parent / "hit").read_text().split()


class LoseFirstReply(RpcClient):
    """The first reply to `method` is lost after the master applied the call; `meanwhile`,
    another user's call, runs before the caller hears of the loss (and retries)."""

    def __init__(self, method: str, meanwhile=None):
        super().__init__()
        self.method, self.lost, self.meanwhile = method, 0, meanwhile
        self.sent: list = []

    async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
        res = await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                 timeout=timeout)
        self.sent.append((method, request))
        if method == self.method and not self.lost:
            self.lost += 1
            if self.meanwhile is not None:
                await self.meanwhile()
            raise RpcError(ErrorCode.DEADLINE_EXCEEDED, "reply lost", maybe_delivered=True)
        return res


def test_a_create_whose_first_reply_came_too_late_returns_the_table_it_made(cluster):
    """Before the token, the first user's create_table raised ALREADY_EXISTS for the table it
    had itself just made. A second user's create of the same name still gets ALREADY_EXISTS."""
    async def go():
        first = TesseraClient(cluster.master_addrs, timeout=30)
        other = TesseraClient(cluster.master_addrs, timeout=30)
        assert cluster.signal("t3", signal.SIGSTOP)
        try:
            attempt = first.attempt_timeout * 3  # one master attempt's timeout
            started = asyncio.get_running_loop().time()
            locs = await first.create_table("t", num_tablets=1, replication_factor=3)
            took = asyncio.get_running_loop().time() - started
        finally:
            cluster.signal("t3", signal.SIGCONT)
        assert took > attempt, (took, attempt)  # the first attempt's reply did come late
        assert locs.name == "t" and len(locs.tablets) == 1
        with pytest.raises(RpcError) as refused:
            await other.create_table("t", num_tablets=1, replication_factor=3)
        assert refused.value.code == ErrorCode.ALREADY_EXISTS
        await first.table("t").write("k", 1)
        assert await other.table("t").read("k") == 1
        await first.close()
        await other.close()
    asyncio.run(asyncio.wait_for(go(), 90))
    assert "master.create_table.retry_answered" in _fired(cluster)


def test_a_drop_whose_reply_was_lost_succeeds_on_its_retry(cluster):
    """Before the token, the retry of a drop that landed raised NOT_FOUND. Another user's drop
    of the dropped table still gets NOT_FOUND."""
    async def go():
        first = TesseraClient(cluster.master_addrs, timeout=30,
                              rpc=LoseFirstReply("master.delete_table"))
        other = TesseraClient(cluster.master_addrs, timeout=30)
        await first.create_table("gone", num_tablets=1, replication_factor=3)
        await first.delete_table("gone")
        assert first.rpc.lost == 1
        assert "gone" not in (await other.list_tables())
        with pytest.raises(RpcError) as refused:
            await other.delete_table("gone")
        assert refused.value.code == ErrorCode.NOT_FOUND
        await first.close()
        await other.close()
    asyncio.run(asyncio.wait_for(go(), 90))
    assert "master.delete_table.retry_answered" in _fired(cluster)


def test_a_drop_retried_after_another_user_re_created_the_name_leaves_the_new_table(cluster):
    """The master looked at the table before the drop's token: the retry dropped the table
    the other user had just made. Now it is answered as the drop it repeats."""
    async def go():
        other = TesseraClient(cluster.master_addrs, timeout=30)
        first = TesseraClient(cluster.master_addrs, timeout=30, rpc=LoseFirstReply(
            "master.delete_table",
            meanwhile=lambda: other.create_table("again", num_tablets=1, replication_factor=3)))
        await first.create_table("again", num_tablets=1, replication_factor=3)
        await first.delete_table("again")
        assert first.rpc.lost == 1
        assert "again" in (await other.list_tables())
        await other.table("again").write("k", 2)
        assert await other.table("again").read("k") == 2
        await first.close()
        await other.close()
    asyncio.run(asyncio.wait_for(go(), 90))


def test_a_create_retried_after_another_user_dropped_its_table_is_told_so(cluster):
    """The retry made the table a second time, bringing back what the other user dropped.
    Now it is told the table its create made was dropped since, and nothing is made."""
    async def go():
        other = TesseraClient(cluster.master_addrs, timeout=30)
        first = TesseraClient(cluster.master_addrs, timeout=30, rpc=LoseFirstReply(
            "master.create_table", meanwhile=lambda: other.delete_table("brief")))
        with pytest.raises(RpcError) as told:
            await first.create_table("brief", num_tablets=1, replication_factor=3)
        assert told.value.code == ErrorCode.NOT_FOUND and "dropped since" in told.value.message
        assert first.rpc.lost == 1
        assert "brief" not in (await other.list_tables())
        await first.close()
        await other.close()
    asyncio.run(asyncio.wait_for(go(), 90))
    assert "master.create_table.retry_found_dropped" in _fired(cluster)


def test_a_replica_change_whose_reply_was_lost_is_answered_on_its_retry(cluster):
    """Before a retry said it was one, the retry of a removal that landed was told "is not a
    member" and of an add "is already a member": the client raised for its own change. The
    master now answers a retry whose change is made with the committed config."""
    async def go():
        plain = TesseraClient(cluster.master_addrs, timeout=30)
        await plain.create_table("members", num_tablets=1, replication_factor=3)
        await plain.table("members").write("k", 3)
        tablet = (await plain.locations("members", refresh=True)).tablets[0]
        follower = next(p.uuid for p in tablet.replicas if p.uuid != tablet.leader)
        for op in ("remove", "add"):
            client = TesseraClient(cluster.master_addrs, timeout=30,
                                   rpc=LoseFirstReply("master.change_replica"))
            config = await client.change_replica(tablet.tablet_id, op, follower)
            assert client.rpc.lost == 1
            changes = [r for m, r in client.rpc.sent if m == "master.change_replica"]
            assert [c.retry for c in changes] == [False, True], changes
            assert (follower in {m[0] for m in config.members}) == (op == "add"), (op, config)
            await client.close()
        with pytest.raises(RpcError) as told:  # a first attempt on a config already as asked
            await plain.change_replica(tablet.tablet_id, "add", follower)
        assert TesseraClient.change_already_made(told.value, "add"), told.value
        assert await plain.table("members").read("k") == 3
        await plain.close()
    asyncio.run(asyncio.wait_for(go(), 90))
    assert "master.change_replica.retry_already_made" in _fired(cluster)

