"""Writes a handle's callers issue in one turn of the loop go out as one `ts.write_batch`
(TesseraClient._corked), each keeping its own seq and result; a lone write goes out alone as
`ts.write`. On a real loopback cluster, with a spy on the client's RPCs: the oracle is what each
op would return on its own (the rows read back, each cas's verdict). One scripted server stands
for a tablet that breaks the protocol."""

import asyncio

import pytest
from loopback_cluster import loopback_cluster

from node import probes
from node.client import CONNECT_TIMEOUT, TesseraClient
from node.client.session import MAX_BATCH_OPS
from node.errors import OpUnknown
from node.protocol import BatchResult, OpResult, Peer, TableLocations, TabletLocation
from node.rpc import RpcClient
from node.tablet.ops import Result
from node.tablet.superblock import KeyRange


def real_cluster(test):
    """The marks of a test on the loopback cluster (the scripted one runs in the quick set)."""
    return pytest.mark.e2e(pytest.mark.slow(test))


class SpyRpc(RpcClient):
    """Records (method, ops carried) of every write RPC; can hold every write batch back."""

    def __init__(self, **kw):
        super().__init__(connect_timeout=CONNECT_TIMEOUT, **kw)
        self.writes: list[tuple[str, int]] = []
        self.batches: list[tuple[int, int]] = []  # (session, first seq) of every batch sent
        self.gate: asyncio.Event | None = None

    async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
        if method == "ts.write_batch":
            self.writes.append((method, len(request.ops)))
            self.batches.append((request.session, request.seq))
            if self.gate is not None:
                await self.gate.wait()
        elif method == "ts.write" and request.session:  # opening a session is not a row's write
            self.writes.append((method, 1))
        return await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                  timeout=timeout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from loopback_cluster(tmp_path_factory, "cork")


def run(cluster, table, body, **rpc):
    async def go():
        spy = SpyRpc(**rpc)
        client = TesseraClient(cluster.master_addrs, timeout=10, rpc=spy)
        try:
            await client.create_table(table, num_tablets=1, replication_factor=3)
            await client.table(table).write("warm", 0)  # the session is open, the leader known
            spy.writes.clear()
            return await body(client, client.table(table), spy)
        finally:
            await client.close()
    return asyncio.run(asyncio.wait_for(go(), 60))


@real_cluster
def test_one_turns_writes_are_one_batch_and_each_gets_its_own_result(cluster):
    async def body(client, t, spy):
        await t.write("c", 1)
        assert spy.writes == [("ts.write", 1)]  # alone: the plain single write
        spy.writes.clear()
        ops = [t.write(f"k{i}", i) for i in range(20)]
        ops += [t.cas("c", 1, 2), t.cas("c", 7, 8), t.append("l", "x")]
        out = await asyncio.gather(*ops)
        assert spy.writes == [("ts.write_batch", 23)]
        assert out[20:22] == [True, False]  # each cas judged on its own, in issue order
        assert [await t.read(f"k{i}") for i in range(20)] == list(range(20))
        assert await t.read("c") == 2 and await t.read("l") == ["x"]
        assert all(isinstance(ts, int) and ts > 0 for ts in out[:20])  # each its hybrid time
    run(cluster, "one_turn", body)


@real_cluster
def test_a_batch_holds_at_most_max_batch_ops_and_handles_do_not_share(cluster):
    async def body(client, t, spy):
        other = client.table("bounds")
        n = MAX_BATCH_OPS + 10
        await asyncio.gather(*(t.write(f"a{i}", i) for i in range(n)),
                             *(other.write(f"b{i}", i) for i in range(3)))
        assert sorted(spy.writes) == sorted([("ts.write_batch", MAX_BATCH_OPS),
                                             ("ts.write_batch", 10), ("ts.write_batch", 3)])
        assert [await t.read(f"a{i}") for i in range(n)] == list(range(n))
    run(cluster, "bounds", body)


@real_cluster
def test_a_caller_that_gives_up_leaves_the_others_answered(cluster):
    async def body(client, t, spy):
        spy.gate = asyncio.Event()
        tasks = [asyncio.ensure_future(t.write(f"g{i}", i)) for i in range(5)]
        while not spy.writes:
            await asyncio.sleep(0.01)
        tasks[2].cancel()  # its op was sent: it may apply, as any abandoned write may
        spy.gate.set()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(done[2], asyncio.CancelledError)
        assert all(isinstance(x, int) for i, x in enumerate(done) if i != 2)
        assert [await t.read(f"g{i}") for i in (0, 1, 3, 4)] == [0, 1, 3, 4]
    run(cluster, "give_up", body)


@real_cluster
def test_a_batch_over_the_frame_goes_out_op_by_op(cluster):
    big = "x" * 3000

    async def body(client, t, spy):
        out = await asyncio.gather(*(t.write(f"f{i}", big + str(i)) for i in range(4)))
        assert all(isinstance(x, int) for x in out)
        # the batch was refused unsent (over this client's 8 KiB frame), then each went alone
        assert spy.writes == [("ts.write_batch", 4)] + [("ts.write", 1)] * 4
        assert [await t.read(f"f{i}") for i in range(4)] == [big + str(i) for i in range(4)]
    run(cluster, "frame", body, max_frame=8192)



@real_cluster
def test_batches_retried_across_a_leader_kill_apply_each_write_once(cluster):
    """64 writers append unique elements to one key through one handle, so every batch carries
    many callers' ops, while the tablet's leader is killed: a batch in flight is retried on the
    new leader with the same session and seqs. The list read back holds every acknowledged
    element exactly once, and none whose write certainly failed."""
    from node.errors import OpFailed

    async def body(client, t, spy):
        tablet = (await client.locations("kill")).tablets[0].tablet_id
        leader = await cluster.tablet_leader(client.rpc, tablet, timeout=10)
        ok, failed, stop = set(), set(), asyncio.Event()

        async def writer(w: int):
            n = 0
            while not stop.is_set():
                element = f"{w}-{n}"
                try:
                    await t.append("l", element)
                    ok.add(element)
                except OpFailed:
                    failed.add(element)
                except OpUnknown:
                    pass
                n += 1

        writers = [asyncio.ensure_future(writer(w)) for w in range(64)]
        await asyncio.sleep(1.0)
        before = len(ok)
        cluster.kill(leader)
        await asyncio.sleep(4.0)
        stop.set()
        await asyncio.gather(*writers)
        try:
            assert before > 0 and len(ok) > before  # writes went on under the new leader
            assert max(n for _, n in spy.writes) > 1  # they went in shared batches
            assert len(set(spy.batches)) < len(spy.batches)  # and some were sent again
            final = await t.read("l")
            assert len(final) == len(set(final)), "an element applied twice"
            assert ok <= set(final), sorted(ok - set(final))[:5]
            assert not failed & set(final), sorted(failed & set(final))[:5]
        finally:
            cluster.start(leader)
    run(cluster, "kill", body)


class ShortAnswers:
    """A tablet server that answers a batch of n writes with n - 1 results."""

    async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
        if method == "master.table_locations":
            peers = [Peer("A", "a", 1)]
            return TableLocations("t", "id", [TabletLocation("tab", KeyRange(), peers, "A")])
        if method == "ts.write":  # opening the session
            return OpResult(Result(True, 1))
        return BatchResult([Result(True, None)] * (len(request.ops) - 1))

    async def close(self):
        pass


def test_a_tablet_that_answers_too_few_results_leaves_no_caller_waiting():
    async def go():
        client = TesseraClient([("m", 1)], timeout=2, rpc=ShortAnswers())
        t = client.table("t")
        done = await asyncio.gather(*(t.write(f"k{i}", i) for i in range(3)),
                                    return_exceptions=True)
        assert all(isinstance(e, OpUnknown) and "2 results came back for 3" in str(e)
                   for e in done), done
    with probes.expect("client.batch.coalesced_sent", "client.answered.result_count_mismatch"):
        asyncio.run(asyncio.wait_for(go(), 10))
