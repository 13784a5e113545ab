"""Kudu's two external consistency modes on real tablet servers over loopback TCP (no mocks):
a write's propagated timestamp is witnessed before the leader assigns one, a CLIENT_PROPAGATED
write is answered without commit-wait while a COMMIT_WAIT one waits out the max clock error, a
timestamp propagated an hour ahead is refused before anything is proposed, and the client
sends each write with the highest timestamp its sessions observed, in its mode."""

import asyncio

import pytest
from tserver_helpers import TABLET, create_on_all, start_server

from node.clock import make, physical_us
from node.protocol import (
    CLIENT_PROPAGATED,
    COMMIT_WAIT,
    EXTERNAL_CONSISTENCY,
    OpResult,
    Write,
)
from node.rpc import ErrorCode, RpcClient, RpcError
from node.tablet.ops import OpenSession
from node.tablet.ops import Write as Put

MAX_ERROR_US = 300_000  # a commit-wait this long cannot hide behind a loopback round trip


def test_the_modes_and_the_propagated_timestamp_on_real_tablet_servers(tmp_path):
    async def main():
        servers = [await start_server(tmp_path / n, clock_max_error_us=MAX_ERROR_US)
                   for n in "abc"]
        rpc = RpcClient()
        try:
            leader = await create_on_all(servers)
            r = leader.replicas[TABLET]

            async def write(op, seq=0, **kw):
                return (await rpc.call(leader.me.addr, "ts.write",
                                       Write(TABLET, op, session, seq=seq, **kw), OpResult,
                                       to_uuid=leader.uuid, timeout=10)).result

            session = 0
            session = (await write(OpenSession())).value
            waits = r.stats["commit_waits"]
            plain = await write(Put("a", 1), seq=1)  # a request naming no mode: COMMIT_WAIT
            assert plain.ok and r.stats["commit_waits"] == waits + 1
            ahead = make(physical_us(plain.timestamp) + 60_000_000)  # another clock, a minute on
            fast = await write(Put("b", 2), seq=2, propagated_timestamp=ahead,
                               external_consistency=CLIENT_PROPAGATED)
            assert fast.ok and fast.timestamp > ahead
            assert r.stats["commit_waits"] == waits + 1  # answered without waiting
            forged = make(physical_us(ahead) + 3600 * 1_000_000)
            with pytest.raises(RpcError) as e:
                await write(Put("c", 3), seq=3, propagated_timestamp=forged,
                            external_consistency=CLIENT_PROPAGATED)
            assert e.value.code == ErrorCode.INVALID_ARGUMENT and "ahead" in e.value.message
            assert "c" not in r.state.data  # refused before it was proposed
            with pytest.raises(RpcError) as e:  # a mode the server does not know
                await rpc.call(leader.me.addr, "ts.write", {"tablet_id": TABLET,
                               "op": {"type": "write", "key": "d", "value": 4},
                               "session": session, "seq": 4,
                               "external_consistency": "EVENTUAL"}, OpResult,
                               to_uuid=leader.uuid, timeout=10)
            assert e.value.code == ErrorCode.INVALID_REQUEST  # refused by the schema
            assert "external_consistency" in e.value.message
        finally:
            await rpc.close()
            for s in servers:
                await s.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_the_client_refuses_a_mode_it_does_not_know():
    from node.client import TesseraClient
    from node.client.session import SessionOptions

    assert set(EXTERNAL_CONSISTENCY.values()) == {CLIENT_PROPAGATED, COMMIT_WAIT}
    assert TesseraClient([]).external_consistency == CLIENT_PROPAGATED  # Kudu's default
    with pytest.raises(ValueError, match="CLIENT_PROPAGATED or COMMIT_WAIT"):
        TesseraClient([], external_consistency="commit-wait")
    with pytest.raises(ValueError, match="CLIENT_PROPAGATED or COMMIT_WAIT"):
        SessionOptions(external_consistency="EVENTUAL")


class SpyRpc(RpcClient):
    """Records (propagated timestamp, mode) of every row write the client sends."""

    def __init__(self):
        super().__init__()
        self.sent: list[tuple[int, str]] = []

    async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
        if method == "ts.write_batch" or (method == "ts.write" and request.session):
            self.sent.append((request.propagated_timestamp, request.external_consistency))
        return await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                  timeout=timeout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from loopback_cluster import loopback_cluster

    yield from loopback_cluster(tmp_path_factory, "modes")


@pytest.mark.e2e
@pytest.mark.slow
def test_each_write_carries_the_highest_timestamp_its_writer_observed_in_its_mode(cluster):
    """Through TesseraClient on a real cluster: a handle's writes, across four tablets, each
    carry the timestamp its previous write was given; another handle of the same client keeps
    its own (Sessions); a session asked for COMMIT_WAIT sends its batches so."""
    from node.client import TesseraClient
    from node.client.session import FlushMode, SessionOptions

    async def go():
        spy = SpyRpc()
        client = TesseraClient(cluster.master_addrs, timeout=10, rpc=spy)
        try:
            await client.create_table("modes", num_tablets=4, replication_factor=3)
            t, other = client.table("modes"), client.table("modes")
            stamps = [await t.write(f"k{i}", i) for i in range(8)]
            assert all(a < b for a, b in zip(stamps, stamps[1:], strict=False)), stamps
            assert [p for p, _ in spy.sent] == [0, *stamps[:-1]]
            assert {m for _, m in spy.sent} == {CLIENT_PROPAGATED}
            spy.sent.clear()
            await other.write("o", 1)
            assert spy.sent == [(0, CLIENT_PROPAGATED)]  # its own writer: nothing observed yet
            spy.sent.clear()
            session = t.new_session(SessionOptions(mode=FlushMode.MANUAL_FLUSH,
                                                   external_consistency=COMMIT_WAIT))
            futures = [await session.apply(f"s{i}", Put(f"s{i}", i)) for i in range(4)]
            await session.flush()
            assert all(row[0].ok for row in await asyncio.gather(*futures))
            assert spy.sent and {m for _, m in spy.sent} == {COMMIT_WAIT}
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(go(), 60))
