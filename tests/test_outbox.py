"""The Outbox over real TCP on loopback: one consensus RPC in flight per (peer, tablet), what
queues meanwhile leaves as one batch when it is answered, the first call connects, and a
peer's refusal reaches on_refused. Also RpcClient.call_nowait, which it sends with."""

import asyncio

import pytest
from tserver_helpers import TABLET, create_on_all, start_server, wait_for, write_rows

from node import probes
from node.consensus.messages import Heartbeat
from node.disk import RealDisk
from node.protocol import Ack, Consensus, ConsensusReply, Peer
from node.rpc import ErrorCode, RpcClient, RpcError, RpcServer, wire
from node.rpc.client import _expire as expire
from node.server.daemon import MESSAGE_OVERHEAD, Outbox, PeerBook
from node.tserver.tablet_manager import TabletState


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


class _Node:
    """An RPC server and an Outbox, as a server has them, whose consensus handler holds the
    reply as ConsensusService's does; its "replica" records what it is given (requests and
    what replies carried) and answers when the test says so."""

    def __init__(self, uuid: str, tmp_path, budget: int | None = None):
        self.uuid, self.tmp_path, self.budget = uuid, tmp_path, budget
        self.stepped: list[list[int]] = []  # message numbers, per request received
        self.delivered: list[list[int]] = []  # message numbers, per reply that carried any

    async def start(self) -> None:
        self.srv = RpcServer(self.uuid)
        self.srv.register_direct("consensus", Consensus, self._on_consensus)
        host, port = await self.srv.start("127.0.0.1", 0)
        self.me = Peer(self.uuid, host, port)
        self.rpc = RpcClient()
        self.book = PeerBook(self.tmp_path / f"peers-{self.uuid}", RealDisk())
        self.out = Outbox(self.rpc, self.book, self.me,
                          deliver=lambda t, ms: self.delivered.append([m.commit for m in ms]))
        if self.budget is not None:
            self.out.budget = self.budget

    def _on_consensus(self, req: Consensus, reply) -> None:
        sender = req.messages[0].from_uuid
        self.out.hold(req.tablet_id, sender, reply)
        self.stepped.append([m.commit for m in req.messages])
        self.out.held(req.tablet_id, sender)

    def message(self, to: "_Node", n: int) -> Heartbeat:
        return Heartbeat(1, self.uuid, to.uuid, n)

    async def stop(self) -> None:
        await self.out.close()
        await self.rpc.close()
        await self.srv.stop()


async def _pair(tmp_path, budget: int | None = None) -> tuple[_Node, _Node]:
    a, b = _Node("a", tmp_path), _Node("b", tmp_path, budget)
    for n in (a, b):
        await n.start()
    for n in (a, b):
        await n.book.learn([a.me, b.me])
    return a, b


def test_an_answer_rides_back_in_the_reply_and_the_peer_sends_no_rpc_of_its_own(tmp_path):
    """Kudu's UpdateConsensus answers in its response: b's answer to a's message (sent once
    b's replica is ready, as a follower's after its WAL sync) reaches a's replica in the reply
    a was waiting for, and b makes no consensus RPC; a's next message then leaves at once."""
    async def go():
        a, b = await _pair(tmp_path)
        try:
            a.out.send("t1", "b", [a.message(b, 1)])
            await _until(lambda: b.stepped, "b to receive")
            await asyncio.sleep(0.01)  # b's "WAL sync": the reply waits for the answer
            assert not a.delivered and a.out._busy
            b.out.send("t1", "a", [b.message(a, 101)])
            await _until(lambda: a.delivered, "the answer in the reply")
            assert a.delivered == [[101]] and not a.stepped  # a received no RPC
            assert b.srv.stats["requests"] == 1 and a.srv.stats["requests"] == 0
            assert not a.out._busy and not b.out._held
            a.out.send("t1", "b", [a.message(b, 2)])  # idle: leaves from this turn
            await _until(lambda: len(b.stepped) == 2, "the next message")
        finally:
            await a.stop()
            await b.stop()
    asyncio.run(asyncio.wait_for(go(), 30))


def test_a_reply_with_nothing_to_carry_goes_empty_after_hold_s_and_frees_the_sender(tmp_path):
    """A message its receiver does not answer (an answer itself) holds its sender's next
    batch for HOLD_S at most; what is sent after that goes as an RPC of its own."""
    async def go():
        a, b = await _pair(tmp_path)
        try:
            with probes.counting() as seen:
                a.out.send("t1", "b", [a.message(b, 1)])
                a.out.send("t1", "b", [a.message(b, 2)])  # queued behind the first
                await _until(lambda: len(b.stepped) == 2, "the queued message, once freed")
            assert seen["rpc.outbox.held_reply_released_empty"] == 1
            assert b.stepped == [[1], [2]] and not a.delivered
            await _until(lambda: not b.out._held, "the second reply's release")
            b.out.send("t1", "a", [b.message(a, 101)])  # nothing held: an RPC of its own
            await _until(lambda: a.stepped, "b's RPC")
            assert a.stepped == [[101]]
        finally:
            await a.stop()
            await b.stop()
    asyncio.run(asyncio.wait_for(go(), 30))


def test_a_reply_carries_what_queued_first_and_no_more_than_the_budget(tmp_path):
    """Two RPCs that cross are each held. What b queued behind its own RPC leaves in the
    reply it holds at once, and what would take a reply over the budget leaves as an RPC."""
    async def go():
        a, b = await _pair(tmp_path, budget=3 * MESSAGE_OVERHEAD)  # three messages a batch
        try:
            a.out.send("t1", "b", [a.message(b, 1)])
            b.out.send("t1", "a", [b.message(a, 100)])  # crosses a's: an RPC too
            b.out.send("t1", "a", [b.message(a, 101)])  # queued behind it
            await _until(lambda: a.delivered, "b's queued message in the reply it holds")
            assert a.delivered == [[101]] and a.stepped == [[100]] and b.stepped == [[1]]
            await _until(lambda: not (a.out._held or b.out._held or a.out._busy or b.out._busy),
                         "a's held reply to go empty")
            a.out.send("t1", "b", [a.message(b, 2)])
            await _until(lambda: len(b.stepped) == 2, "a's next RPC")
            b.out.send("t1", "a", [b.message(a, n) for n in range(102, 107)])
            await _until(lambda: len(a.stepped) == 2, "what the reply did not take")
            await _until(lambda: len(a.delivered) == 2, "the reply")
            assert a.delivered == [[101], [102, 103, 104]] and a.stepped == [[100], [105, 106]]
        finally:
            await a.stop()
            await b.stop()
    asyncio.run(asyncio.wait_for(go(), 30))


def test_a_lone_writers_messages_go_half_in_rpcs_and_half_in_their_replies(tmp_path):
    """On real tablet servers: a write's append goes to each follower, and the follower's
    answer (after its WAL sync) comes back, in one RPC and its reply. Which way round depends
    on who held a reply when (an answer that went as an RPC holds the leader's reply for the
    next append). Before, every batch of messages was an RPC of its own, answered by an Ack:
    4 frames where 2 now do. A reply whose hold ran out (a sync slower than HOLD_S on a slow
    disk) went out empty, and is counted."""
    async def go():
        servers = [await start_server(tmp_path / n) for n in "abc"]
        try:
            leader = await create_on_all(servers)
            await write_rows(leader, 3, prefix="warm")
            batches = []
            for s in servers:
                s.outbox.observe = lambda tablet, to, messages: batches.append(to)
            with probes.counting() as seen:
                before = sum(s.server.stats["requests"] for s in servers)
                await write_rows(leader, 30)
                rpcs = sum(s.server.stats["requests"] for s in servers) - before
            late = seen["rpc.outbox.held_reply_released_empty"]
            # Each write (one at a time) needs an append to a follower and its answer. A slow
            # follower's append and answer may ride with the next write's, so 4 a write is
            # what an idle machine shows, not a floor.
            assert len(batches) >= 2 * 30
            assert rpcs <= len(batches) / 2 + late + 3, (rpcs, len(batches), late)
            await wait_for(lambda: all(s.replicas[TABLET].state.data.get("k29") == 29
                                       for s in servers), "every replica to apply the last")
        finally:
            for s in servers:
                await s.stop()
    asyncio.run(asyncio.wait_for(go(), 60))


def test_an_answer_in_the_reply_of_an_rpc_given_up_on_still_reaches_the_replica(tmp_path):
    """After a partition heals, RPCs the sender gave up on long ago (their deadline) arrive
    at once, and the receiver answers in their replies. Dropped as replies to no call, those
    answers were lost: a leader never heard that a follower had failed, and never copied it
    (found by the whole-stack simulator's maintenance mix). The client keeps taking them,
    on the way that connects first and on the open connection's way alike. The peer here
    answers each request 0.3 s after it came, as the late burst does."""
    async def late_peer(reader, writer):
        buf = bytearray()
        while chunk := await reader.read(65536):
            buf += chunk
            for data in wire.split_frames(buf, wire.DEFAULT_MAX_FRAME):
                req = wire.decode_request(data)
                await asyncio.sleep(0.3)
                n = wire.decode_body(req.body, Consensus).messages[0].commit
                writer.write(wire.frame(wire.ok_response(req.call_id, ConsensusReply(
                    messages=[Heartbeat(1, "p1", "me", 100 + n)]))))

    async def go():
        server = await asyncio.start_server(late_peer, "127.0.0.1", 0)
        book = PeerBook(tmp_path / "peers", RealDisk())
        await book.learn([Peer("p1", *server.sockets[0].getsockname()[:2])])
        rpc = RpcClient()
        delivered, failed = [], []
        out = Outbox(rpc, book, Peer("me", "127.0.0.1", 1), timeout=0.1,
                     deliver=lambda t, ms: delivered.append((t, [m.commit for m in ms])))
        out.on_refused = lambda *a: failed.append(a)
        try:
            with probes.counting() as seen:
                out.send("t1", "p1", [_m(1)])  # connects first: the coroutine way
                await _until(lambda: not out._busy, "the first deadline")
                out.send("t1", "p1", [_m(2)])  # the open connection's way
                await _until(lambda: len(delivered) == 2, "both late answers")
            assert delivered == [("t1", [101]), ("t1", [102])] and not failed
            assert seen["rpc.client.late_reply_taken"] == 2
            assert seen["rpc.outbox.late_reply_delivered"] == 2
        finally:
            await out.close()
            await rpc.close()
            server.close()
    asyncio.run(asyncio.wait_for(go(), 30))


def test_a_reply_read_in_the_turn_its_deadline_fired_is_still_a_late_one(tmp_path):
    """The deadline wheel fails a call's future in one turn of the loop and the call ends in
    a later one (its callback, or its coroutine, resumes). A reply read in between, from the
    same poll, found a failed future and was dropped, and the late taker the call then left
    waited for a reply that had come: a Raft answer lost. Both ways of calling are driven
    into that turn here, and both answers reach the caller's replica."""
    async def silent(reader, writer):
        while await reader.read(65536):
            pass

    async def go():
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()[:2]
        book = PeerBook(tmp_path / "peers", RealDisk())
        await book.learn([Peer("p1", *addr)])
        rpc = RpcClient()
        delivered = []
        out = Outbox(rpc, book, Peer("me", "127.0.0.1", 1),
                     deliver=lambda t, ms: delivered.append((t, [m.commit for m in ms])))
        try:
            with probes.counting() as seen:
                for n, tablet in enumerate(("t1", "t2"), start=1):
                    # t1 connects first (the coroutine way), t2 rides the open connection
                    out.send(tablet, "p1", [_m(n)])
                    conn = await _connection_with_a_call(rpc, addr)
                    call_id, fut = next(iter(conn.pending.items()))
                    conn.reader.feed_data(wire.frame(wire.ok_response(call_id, ConsensusReply(
                        messages=[Heartbeat(1, "p1", "me", 100 + n)]))))
                    expire(fut)  # the wheel, in the same turn as the read
                    await _until(lambda: not out._busy, f"{tablet}'s call to end")
            assert delivered == [("t1", [101]), ("t2", [102])]
            assert seen["rpc.client.reply_in_its_deadline_turn_taken"] == 2
            assert not conn.late and not conn.early  # nothing left waiting for what came
        finally:
            await out.close()
            await rpc.close()
            server.close()
    asyncio.run(asyncio.wait_for(go(), 30))


async def _connection_with_a_call(rpc: RpcClient, addr):
    """The client's connection to `addr` once a call is pending on it."""
    for _ in range(500):
        conn = rpc._conns.get(tuple(addr))
        if conn is not None and conn.pending:
            return conn
        await asyncio.sleep(0.005)
    raise AssertionError("no call pending")


def test_an_answer_for_a_held_reply_whose_connection_closed_leaves_as_an_rpc(tmp_path):
    """b holds the reply to a's message when the connection between them drops (a reset, a
    peer's hang-up). b's answer, made after that, went into the dead reply and was lost
    without a trace, though the Outbox could have sent it; it now leaves as an RPC on a
    connection of its own."""
    async def go():
        a, b = await _pair(tmp_path)
        try:
            a.out.send("t1", "b", [a.message(b, 1)])
            await _until(lambda: b.stepped, "b to receive")
            next(iter(a.rpc._conns.values())).writer.transport.abort()
            await _until(lambda: not a.out._busy, "a's call to fail")
            await asyncio.sleep(0.01)  # b's side sees the connection close
            with probes.counting() as seen:
                b.out.send("t1", "a", [b.message(a, 101)])  # within HOLD_S
                await _until(lambda: a.stepped, "b's answer as an RPC")
            assert a.stepped == [[101]] and not b.out._held
            assert seen["rpc.outbox.held_reply_dead_sent_as_rpc"] == 1
        finally:
            await a.stop()
            await b.stop()
    asyncio.run(asyncio.wait_for(go(), 30))


def test_an_error_taking_the_messages_a_reply_carried_is_reported_not_lost(tmp_path):
    """Messages a reply carried for a replica that does not run take the awaited way in a task
    of their own, which no RPC answers: an error there was dropped with the task. It is now
    the server's handler failure, as an error in a request's handler is (the whole-stack
    simulator fails a seed on one)."""
    from types import SimpleNamespace

    from node.tserver.service import ConsensusService

    class Copying:
        def get(self, tablet_id):
            return SimpleNamespace(state=TabletState.COPYING)

        async def vote_as_tombstone(self, tablet_id, messages):
            raise RuntimeError("a bug on the tombstone's way")

    async def go():
        srv = RpcServer("me")
        service = ConsensusService(Copying(), PeerBook(tmp_path / "peers", RealDisk()))
        service.register(srv)
        service.deliver("t1", [_m(1)])
        await _until(lambda: not service._tasks, "the awaited way to end")
        assert "a bug on the tombstone's way" in (srv.handler_failure or "")
        assert srv.stats["handler_failed"] == 1
    asyncio.run(asyncio.wait_for(go(), 10))
