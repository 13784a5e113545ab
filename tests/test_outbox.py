"""The Outbox over real TCP on loopback: one consensus RPC in flight per (peer, tablet), what
queues meanwhile leaves as one batch when it is answered, the first call connects, and a
peer's refusal reaches on_refused. Also RpcClient.call_nowait, which it sends with."""

import asyncio

import pytest

from node.consensus.messages import Heartbeat
from node.disk import RealDisk
from node.protocol import Ack, Consensus, Peer
from node.rpc import ErrorCode, RpcClient, RpcError, RpcServer
from node.server.daemon import Outbox, PeerBook


def _m(n: int) -> Heartbeat:
    """Raft message number `n`."""
    return Heartbeat(1, "me", "p1", n)


class _Peer:
    """A consensus server that records each batch (as message numbers) and answers when the
    test says so."""

    def __init__(self, reason: str = ""):
        self.batches: list[list] = []
        self.replies: list = []
        self.reason = reason

    def on_consensus(self, req: Consensus, reply) -> None:
        self.batches.append([m.commit for m in req.messages])
        self.replies.append(reply)

    def answer_all(self) -> None:
        replies, self.replies = self.replies, []
        for r in replies:
            r(Ack(not self.reason, self.reason), None)


async def _until(pred, what: str) -> None:
    for _ in range(500):
        if pred():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def _serve(peer: _Peer, tmp_path) -> tuple[RpcServer, PeerBook]:
    """`peer` serving consensus as "p1", and a peer book that knows where."""
    srv = RpcServer("p1")
    srv.register_direct("consensus", Consensus, peer.on_consensus)
    host, port = await srv.start("127.0.0.1", 0)
    book = PeerBook(tmp_path / "peers", RealDisk())
    await book.learn([Peer("p1", host, port)])
    return srv, book


def test_one_rpc_in_flight_and_what_queues_meanwhile_leaves_as_one_batch(tmp_path):
    async def go():
        peer = _Peer()
        srv, book = await _serve(peer, tmp_path)
        rpc = RpcClient()
        out = Outbox(rpc, book, Peer("me", "127.0.0.1", 1))
        try:
            out.send("t1", "p1", [_m(0)])  # no connection yet: the coroutine way connects
            await _until(lambda: len(peer.batches) == 1, "the first batch")
            out.send("t1", "p1", [_m(1)])
            out.send("t1", "p1", [_m(2), _m(3)])
            out.send("t2", "p1", [_m(23)])  # another tablet has its own RPC in flight
            await _until(lambda: len(peer.batches) == 2, "the other tablet's batch")
            await asyncio.sleep(0.05)
            assert peer.batches == [[0], [23]]  # t1's next waits for its answer
            peer.answer_all()
            await _until(lambda: len(peer.batches) == 3, "the queued batch")
            assert peer.batches[2] == [1, 2, 3]  # everything queued, in order, at once
            peer.answer_all()
            await asyncio.sleep(0.05)
            assert len(peer.batches) == 3 and not out._busy  # nothing more to send
            out.send("t1", "p1", [_m(4)])  # connected and idle: leaves from this turn
            await _until(lambda: len(peer.batches) == 4, "a batch on the open connection")
        finally:
            await out.close()
            await rpc.close()
            await srv.stop()
    asyncio.run(asyncio.wait_for(go(), 30))


def test_a_refusal_reaches_on_refused_and_a_failed_call_frees_the_peer(tmp_path):
    async def go():
        peer = _Peer(reason="tombstoned")
        srv, book = await _serve(peer, tmp_path)
        rpc = RpcClient()
        refused = []
        out = Outbox(rpc, book, Peer("me", "127.0.0.1", 1), timeout=0.3,
                     on_refused=lambda *a: refused.append(a))
        try:
            out.send("t1", "p1", [_m(0)])
            await _until(lambda: peer.replies, "the first call")
            peer.answer_all()
            await _until(lambda: refused, "the refusal")
            assert refused == [("t1", "p1", "tombstoned")]
            out.send("t1", "p1", [_m(1)])  # never answered: its deadline frees the peer
            await _until(lambda: len(peer.batches) == 2, "the second call")
            out.send("t1", "p1", [_m(2)])
            await _until(lambda: len(peer.batches) == 3, "the batch after the timeout")
            assert peer.batches[2] == [2] and len(refused) == 1
        finally:
            await out.close()
            await rpc.close()
            await srv.stop()
    asyncio.run(asyncio.wait_for(go(), 30))


def test_call_nowait_needs_an_open_connection_and_reports_like_call():
    async def go():
        peer = _Peer()
        srv = RpcServer("p1")
        srv.register_direct("consensus", Consensus, peer.on_consensus)
        addr = await srv.start("127.0.0.1", 0)
        rpc = RpcClient()
        results = []

        def nowait(to_uuid="p1", timeout=5.0):
            return rpc.call_nowait(addr, "consensus", Consensus("t", [], []), Ack,
                                   to_uuid=to_uuid, timeout=timeout,
                                   done=lambda v, e: results.append((v, e)))
        try:
            assert not nowait()  # nothing sent: no connection yet
            call = asyncio.create_task(rpc.call(addr, "consensus", Consensus("t", [], []), Ack,
                                                to_uuid="p1", timeout=5))
            await _until(lambda: peer.replies, "the connecting call")
            peer.answer_all()
            assert (await call).ok
            assert nowait()
            await _until(lambda: peer.replies, "the nowait call")
            peer.answer_all()
            await _until(lambda: results, "its answer")
            assert results.pop() == (Ack(True, ""), None)
            assert nowait(to_uuid="someone-else")  # refused by the server: an RpcError
            await _until(lambda: results, "the refusal")
            value, error = results.pop()
            assert value is None and error.code == ErrorCode.WRONG_SERVER_UUID
            assert nowait(timeout=0.2)  # never answered: its deadline
            await _until(lambda: results, "the deadline")
            value, error = results.pop()
            assert isinstance(error, RpcError) and error.code == ErrorCode.DEADLINE_EXCEEDED
            assert error.maybe_delivered
            conn = next(iter(rpc._conns.values()))
            assert conn.pending == {}
        finally:
            await rpc.close()
            await srv.stop()
    asyncio.run(asyncio.wait_for(go(), 30))


@pytest.mark.parametrize("known", [True, False])
def test_peer_book_knows_only_peers_at_the_address_it_has(tmp_path, known):
    async def go():
        book = PeerBook(tmp_path / "peers", RealDisk())
        await book.learn([Peer("p1", "127.0.0.1", 7000)])
        asked = Peer("p1", "127.0.0.1", 7000 if known else 7001)
        assert book.knows([asked]) is known
        assert book.knows([])
    asyncio.run(go())
