"""Writes too large to replicate: refused at the leader with TOO_LARGE, and
the tablet keeps committing; AppendEntries batches and Outbox batches stay within the frame;
a request over the frame is refused unsent and the connection lives on.

Real tablet servers on loopback with a 1 MiB frame limit, so the sizes stay small.
"""

import asyncio

import pytest
from tserver_helpers import TABLET, create_on_all, start_server, wait_for

from node.consensus.messages import AppendEntries, Heartbeat
from node.disk import RealDisk
from node.entry import Entry, EntryType
from node.protocol import Ack, Consensus, OpResult, Peer, Write
from node.rpc import ErrorCode, RpcClient, RpcError, RpcServer
from node.rpc.wire import ENVELOPE_RESERVE, MIN_MAX_FRAME
from node.server.daemon import Outbox, PeerBook
from node.tablet.ops import OpenSession
from node.tablet.ops import Write as Put

FRAME = MIN_MAX_FRAME
MAX_ENTRY = FRAME - ENVELOPE_RESERVE


def test_a_write_too_large_to_replicate_is_refused_and_the_tablet_keeps_committing(tmp_path):
    """Before the fix the leader proposed a write whose request just fit the frame; the
    AppendEntries carrying it did not, every follower refused it and hung up, and nothing
    committed after it. Now it is refused with TOO_LARGE before it is proposed; a write just
    under the limit replicates to every follower (the envelope fits), and so do the writes after."""

    async def main():
        servers = [await start_server(tmp_path / n, rpc_max_message_size=FRAME) for n in "abc"]
        rpc = RpcClient(max_frame=FRAME)
        try:
            leader = await create_on_all(servers)

            async def write(op, seq=0):
                return await rpc.call(leader.me.addr, "ts.write", Write(TABLET, op, session,
                                                                          seq=seq),
                                      OpResult, to_uuid=leader.uuid, timeout=5)

            session = 0
            session = (await write(OpenSession())).result.value
            # its request fits the frame (~170 bytes of envelope), its AppendEntries (~440) not
            too_big = "x" * (FRAME - 300)
            with pytest.raises(RpcError) as e:
                await write(Put("big", too_big), seq=1)
            assert e.value.code == ErrorCode.TOO_LARGE and not e.value.maybe_delivered
            assert "too large to replicate" in e.value.message
            assert f"{MAX_ENTRY}-byte limit" in e.value.message

            near = "y" * (MAX_ENTRY - 1024)  # its entry is just under the limit
            assert (await write(Put("near", near), seq=2)).result.ok
            for i in range(3, 8):
                assert (await write(Put(f"k{i}", i), seq=i)).result.ok
            r = leader.replicas[TABLET]
            await wait_for(lambda: all(s.replicas[TABLET].commit_index == r.commit_index
                                       and s.replicas[TABLET].state.data.get("k7") == 7
                                       for s in servers), "every replica to apply k7")
            assert all(s.replicas[TABLET].state.data["near"] == near for s in servers)
            assert "big" not in r.state.data
            # no follower ever refused a frame (each refusal hung up the shared connection)
            assert [s.server.stats["malformed"] for s in servers] == [0, 0, 0]
        finally:
            await rpc.close()
            for s in servers:
                await s.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_request_over_the_frame_is_refused_unsent_and_the_connection_lives_on():
    """Sent, the server would answer TOO_LARGE and hang up, failing every other call on the
    shared connection; refused at the sender, nothing is lost."""

    async def main():
        srv = RpcServer("p1", max_frame=FRAME)
        seen = []

        def on_consensus(req, reply):
            seen.append(len(req.messages))
            reply(Ack(True), None)

        srv.register_direct("consensus", Consensus, on_consensus)
        addr = await srv.start("127.0.0.1", 0)
        rpc = RpcClient(max_frame=FRAME)
        big = Consensus("t", [Heartbeat(1, "me", "p1", 0, b"x" * FRAME)], [])
        small = Consensus("t", [Heartbeat(1, "me", "p1", 0)], [])
        try:
            assert (await rpc.call(addr, "consensus", small, Ack, to_uuid="p1", timeout=5)).ok
            with pytest.raises(RpcError) as e:
                await rpc.call(addr, "consensus", big, Ack, to_uuid="p1", timeout=5)
            assert e.value.code == ErrorCode.TOO_LARGE and not e.value.maybe_delivered
            assert "frame limit" in e.value.message
            answers = []
            assert rpc.call_nowait(addr, "consensus", big, Ack, to_uuid="p1", timeout=5,
                                   done=lambda v, err: answers.append(err))
            assert not answers  # never answered inline, from inside the caller
            await wait_for(lambda: answers, "the refusal")
            assert answers[0].code == ErrorCode.TOO_LARGE
            assert (await rpc.call(addr, "consensus", small, Ack, to_uuid="p1", timeout=5)).ok
            assert seen == [1, 1] and srv.stats["malformed"] == 0
        finally:
            await rpc.close()
            await srv.stop()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_appendentries_queued_for_a_slow_peer_leave_in_rpcs_within_the_frame(tmp_path):
    """Several AppendEntries, each near the frame alone, queue while one RPC is in flight;
    they leave one RPC each (in order), never one RPC the peer would refuse."""

    async def main():
        srv = RpcServer("p1", max_frame=FRAME)
        batches, replies = [], []

        def on_consensus(req, reply):
            batches.append([m.commit for m in req.messages])
            replies.append(reply)

        srv.register_direct("consensus", Consensus, on_consensus)
        host, port = await srv.start("127.0.0.1", 0)
        book = PeerBook(tmp_path / "peers", RealDisk())
        await book.learn([Peer("p1", host, port)])
        rpc = RpcClient(max_frame=FRAME)
        out = Outbox(rpc, book, Peer("me", "127.0.0.1", 1))

        def append(n: int, size: int) -> AppendEntries:
            return AppendEntries(1, "me", "p1", n, 1, (Entry(1, n + 1, EntryType.REPLICATE,
                                                             b"e" * size),), n)

        def answer():
            for r in replies:
                r(Ack(True), None)
            replies.clear()

        try:
            out.send("t", "p1", [Heartbeat(1, "me", "p1", 0)])
            await wait_for(lambda: replies, "the first call")
            out.send("t", "p1", [append(1, MAX_ENTRY - 100)])
            out.send("t", "p1", [Heartbeat(1, "me", "p1", 2), append(3, MAX_ENTRY // 2)])
            out.send("t", "p1", [append(4, MAX_ENTRY // 2)])
            for n in range(2, 5):
                answer()
                await wait_for(lambda n=n: len(batches) == n, f"batch {n}")
            assert batches == [[0], [1], [2, 3], [4]]
            assert srv.stats["malformed"] == 0
        finally:
            await out.close()
            await rpc.close()
            await srv.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
