"""The RPC transport over real TCP on loopback: typed calls, refusals, deadlines, bad bytes."""

import asyncio
import socket
import struct

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from node.rpc import ErrorCode, RpcClient, RpcError, RpcServer, wire
from node.security.acl import ALL_ROLES

# This file's own methods, open to every caller (the engine's are in node.security.acl.RULES).
RULES = {m: ALL_ROLES for m in ("echo", "stuck", "direct")}


class Echo(msgspec.Struct):
    text: str
    delay: float = 0.0


class EchoReply(msgspec.Struct):
    text: str


async def _echo(req: Echo) -> EchoReply:
    if req.delay:
        await asyncio.sleep(req.delay)
    if req.text == "boom":
        raise ValueError("handler bug")
    return EchoReply(req.text.upper())


async def _server(uuid="srv-1", **kw):
    srv = RpcServer(uuid, rules=RULES, **kw)
    srv.register("echo", Echo, _echo)
    addr = await srv.start("127.0.0.1", 0)
    return srv, addr


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_round_trip_and_out_of_order_multiplexing():
    async def go():
        srv, addr = await _server()
        cli = RpcClient()
        try:
            calls = [cli.call(addr, "echo", Echo(f"m{i}", delay=0.05 * (5 - i)), EchoReply,
                              to_uuid="srv-1", timeout=5) for i in range(5)]
            replies = await asyncio.gather(*calls)
            assert [r.text for r in replies] == [f"M{i}" for i in range(5)]
            assert len(cli._conns) == 1  # one reused connection
        finally:
            await cli.close()
            await srv.stop()
    run(go())


@pytest.mark.parametrize("method,body,to_uuid,code,maybe", [
    ("echo", Echo("x"), "someone-else", ErrorCode.WRONG_SERVER_UUID, False),
    ("nope", Echo("x"), "srv-1", ErrorCode.NO_SUCH_METHOD, False),
    ("echo", {"wrong": 1}, "srv-1", ErrorCode.INVALID_REQUEST, False),
    ("echo", Echo("boom"), "srv-1", ErrorCode.REMOTE_ERROR, True),
    ("echo", Echo("slow", delay=2), "srv-1", ErrorCode.DEADLINE_EXCEEDED, True),
])
def test_refusals_say_whether_the_request_may_have_applied(method, body, to_uuid, code, maybe):
    async def go():
        srv, addr = await _server()
        cli = RpcClient()
        try:
            with pytest.raises(RpcError) as ei:
                await cli.call(addr, method, body, EchoReply, to_uuid=to_uuid, timeout=0.3)
            assert ei.value.code == code
            assert ei.value.maybe_delivered is maybe
            # only a handler's own unhandled error is counted as one (the simulator fails on it)
            failed = code == ErrorCode.REMOTE_ERROR
            assert srv.stats["handler_failed"] == int(failed)
            assert (srv.handler_failure is not None) == failed, srv.handler_failure
            # the connection and server survive every refusal
            r = await cli.call(addr, "echo", Echo("ok"), EchoReply, to_uuid="srv-1", timeout=5)
            assert r.text == "OK"
        finally:
            await cli.close()
            await srv.stop()
    run(go())


def test_the_server_cancels_a_handler_past_its_own_deadline():
    """The request's deadline (timeout_ms) is enforced by the server itself, not only by the
    calling client: a raw request whose deadline passes gets DEADLINE_EXCEEDED and its handler
    is cancelled, within one bucket of the deadline."""
    cancelled = asyncio.Event()

    async def stuck(req: Echo) -> EchoReply:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return EchoReply("never")

    async def go():
        srv = RpcServer("srv-1", rules=RULES)
        srv.register("stuck", Echo, stuck)
        host, port = await srv.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(host, port)
        loop = asyncio.get_running_loop()
        try:
            started = loop.time()
            writer.write(wire.frame(wire.Request(wire.WIRE_VERSION, 9, "stuck", 100, "srv-1",
                                                 Echo("x"))))
            (length,) = struct.unpack(">I", await reader.readexactly(4))
            reply = wire.decode_response(await reader.readexactly(length))
            took = loop.time() - started
            assert reply.call_id == 9 and reply.code == ErrorCode.DEADLINE_EXCEEDED
            assert cancelled.is_set()
            assert 0.1 <= took < 5  # not before the deadline; bounded after it
            assert not srv._expired  # nothing kept once answered
        finally:
            writer.close()
            await srv.stop()
    run(go())


def test_calls_over_the_in_flight_limits_wait_and_all_complete():
    """Back-pressure on both sides: a server running max_inflight_per_conn handlers stops
    reading, and a client over its own limit waits to send; nothing is refused or lost."""
    async def go():
        srv, addr = await _server(max_inflight_per_conn=2)
        cli = RpcClient(max_inflight_per_conn=3)
        try:
            calls = [cli.call(addr, "echo", Echo(f"m{i}", delay=0.02), EchoReply, to_uuid="srv-1",
                              timeout=10) for i in range(12)]
            replies = await asyncio.gather(*calls)
            assert [r.text for r in replies] == [f"M{i}" for i in range(12)]
            conn = next(iter(cli._conns.values()))
            assert conn.pending == {}
            assert all(not b for b in cli._deadlines._buckets.values())  # deadlines removed
        finally:
            await cli.close()
            await srv.stop()
    run(go())


class _Direct:
    """Direct handlers (RpcServer.register_direct): answer now, answer later, raise, fall back
    to an awaitable, or never answer."""

    def __init__(self):
        self.later: list = []  # replies of "later" calls, for the test to answer
        self.ran_slow = False

    def handle(self, req: Echo, reply) -> object:
        if req.text == "now":
            reply(EchoReply("NOW"), None)
        elif req.text == "later":
            self.later.append(reply)
        elif req.text == "refuse":
            raise RpcError(ErrorCode.INVALID_ARGUMENT, "refused at once")
        elif req.text == "bug":
            raise ValueError("direct handler bug")
        elif req.text == "slow":
            return self._slow(req)
        elif req.text == "slow-then-crash":  # the server's tasks end in the turn it arrived
            asyncio.get_running_loop().call_soon(self._crash)  # before the call's task starts
            return self._slow(req)
        elif req.text == "answer-then-raise":
            reply(EchoReply("FIRST"), None)
            raise ValueError("raised after answering")
        return None  # "never": only its deadline answers

    @staticmethod
    def _crash() -> None:
        """The server's tasks all cancelled at once, as a crashing host's (the simulator's)."""
        for task in asyncio.all_tasks():
            if task.get_coro().__qualname__.startswith("RpcServer."):
                task.cancel()

    async def _slow(self, req: Echo) -> EchoReply:
        self.ran_slow = True
        await asyncio.sleep(0.01)
        return EchoReply("SLOW")

    async def serve(self, max_inflight: int) -> tuple[RpcServer, tuple[str, int]]:
        srv = RpcServer("srv-1", max_inflight_per_conn=max_inflight, rules=RULES)
        srv.register_direct("direct", Echo, self.handle)
        return srv, await srv.start("127.0.0.1", 0)


def test_direct_handlers_answer_once_by_reply_error_fallback_or_deadline():
    async def go():
        d = _Direct()
        srv, addr = await d.serve(max_inflight=4)
        cli = RpcClient()

        async def call(text, timeout=5.0):
            return await cli.call(addr, "direct", Echo(text), EchoReply, to_uuid="srv-1",
                                  timeout=timeout)
        try:
            assert (await call("now")).text == "NOW"
            assert (await call("slow")).text == "SLOW" and d.ran_slow
            assert (await call("answer-then-raise")).text == "FIRST"
            for text, code in (("refuse", ErrorCode.INVALID_ARGUMENT),
                               ("bug", ErrorCode.REMOTE_ERROR)):
                with pytest.raises(RpcError) as e:
                    await call(text)
                assert e.value.code == code
            # Answered later, out of order: each caller gets its own answer.
            calls = [asyncio.create_task(call("later")) for _ in range(3)]
            while len(d.later) < 3:
                await asyncio.sleep(0.01)
            for i, reply in reversed(list(enumerate(d.later))):
                reply(EchoReply(f"L{i}"), None)
            assert [(await c).text for c in calls] == ["L0", "L1", "L2"]
            # The server's own deadline answers a call its handler never does; a reply after
            # that is dropped, and the call no longer counts against the connection's limit.
            d.later.clear()
            loop = asyncio.get_running_loop()
            reader, writer = await asyncio.open_connection(*addr)
            started = loop.time()
            writer.write(wire.frame(wire.Request(wire.WIRE_VERSION, 5, "direct", 100, "srv-1",
                                                 Echo("later"))))
            (length,) = struct.unpack(">I", await reader.readexactly(4))
            reply = wire.decode_response(await reader.readexactly(length))
            assert reply.call_id == 5 and reply.code == ErrorCode.DEADLINE_EXCEEDED
            assert 0.1 <= loop.time() - started < 5
            d.later[0](EchoReply("too late"), None)  # ignored: answered once already
            writer.write(wire.frame(wire.Request(wire.WIRE_VERSION, 6, "direct", 1000, "srv-1",
                                                 Echo("now"))))
            (length,) = struct.unpack(">I", await reader.readexactly(4))
            assert wire.decode_response(await reader.readexactly(length)).call_id == 6
            writer.close()
            # Calls never answered hold the connection's room only until their deadlines.
            with pytest.raises(RpcError) as e:
                await asyncio.gather(*(call("never", timeout=0.2) for _ in range(6)))
            assert e.value.code == ErrorCode.DEADLINE_EXCEEDED
            assert (await call("now")).text == "NOW"
        finally:
            await cli.close()
            await srv.stop()
    run(go())


def test_a_call_cancelled_before_its_task_starts_leaves_no_coroutine_unawaited():
    """A call whose task is cancelled before its first step (its server crashing or stopping in
    the turn the call arrived) never awaited its handler's coroutine, and Python warned
    "coroutine ... was never awaited" (the simulator's seeds printed it when a host crashed as
    a request arrived). The server closes it now."""
    import gc
    import warnings

    async def go():
        d = _Direct()
        srv, addr = await d.serve(max_inflight=4)
        try:
            reader, writer = await asyncio.open_connection(*addr)
            writer.write(wire.frame(wire.Request(wire.WIRE_VERSION, 1, "direct", 1000, "srv-1",
                                                 Echo("slow-then-crash"))))
            assert await reader.read() == b""  # hung up, unanswered
            writer.close()
        finally:
            await srv.stop()
        return d

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        d = run(go())
        gc.collect()
    assert not d.ran_slow
    assert not [w for w in seen if "never awaited" in str(w.message)], [str(w.message) for w in seen]


def test_direct_calls_count_against_the_in_flight_limit():
    """A connection with max_inflight_per_conn direct calls unanswered stops reading: the next
    request waits until one is answered, and nothing is lost."""
    async def go():
        d = _Direct()
        srv, addr = await d.serve(max_inflight=2)
        cli = RpcClient()
        try:
            calls = [asyncio.create_task(cli.call(addr, "direct", Echo("later"), EchoReply,
                                                  to_uuid="srv-1", timeout=10))
                     for _ in range(5)]
            await asyncio.sleep(0.2)
            assert len(d.later) == 2  # the reader waits for room
            answered = 0
            while answered < 5:
                while len(d.later) <= answered:
                    await asyncio.sleep(0.01)
                d.later[answered](EchoReply(f"L{answered}"), None)
                answered += 1
            assert sorted(r.text for r in await asyncio.gather(*calls)) == [f"L{i}" for i in range(5)]
        finally:
            await cli.close()
            await srv.stop()
    run(go())


def test_connect_refused_is_definitely_not_delivered():
    async def go():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nobody listens here now
        cli = RpcClient()
        with pytest.raises(RpcError) as ei:
            await cli.call(("127.0.0.1", port), "echo", Echo("x"), EchoReply, to_uuid="a", timeout=2)
        assert ei.value.code == ErrorCode.NETWORK and not ei.value.maybe_delivered
        await cli.close()
    run(go())


def test_server_stop_mid_call_is_maybe_delivered_and_clean():
    async def go():
        srv, addr = await _server()
        cli = RpcClient()
        call = asyncio.create_task(
            cli.call(addr, "echo", Echo("x", delay=10), EchoReply, to_uuid="srv-1", timeout=20))
        await asyncio.sleep(0.2)
        await srv.stop()
        with pytest.raises(RpcError) as ei:
            await call
        assert ei.value.code == ErrorCode.NETWORK and ei.value.maybe_delivered
        await cli.close()
    run(go())


def _raw_exchange(addr, payload: bytes, read_reply: bool) -> bytes:
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(payload)
        if not read_reply:
            return b""
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def _decode_replies(data: bytes) -> list[wire.Response]:
    out = []
    while len(data) >= 4:
        (n,) = struct.unpack(">I", data[:4])
        out.append(wire.decode_response(data[4:4 + n]))
        data = data[4 + n:]
    return out


class _Live:
    """A server running on its own loop thread, so sync tests can hit it with raw sockets."""

    def __init__(self, **kw):
        import threading
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.srv, self.addr = asyncio.run_coroutine_threadsafe(_server(**kw), self.loop).result(10)

    def ping(self) -> str:
        async def go():
            cli = RpcClient()
            try:
                return (await cli.call(self.addr, "echo", Echo("ping"), EchoReply,
                                       to_uuid="srv-1", timeout=5)).text
            finally:
                await cli.close()
        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(10)

    def close(self):
        asyncio.run_coroutine_threadsafe(self.srv.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def live():
    s = _Live(max_frame=1 << 16)
    yield s
    s.close()


def test_malformed_envelope_gets_error_reply_and_stream_stays_usable(live):
    good = wire.frame(wire.Request(1, 7, "echo", 1000, "srv-1", Echo("a")))
    garbage = struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1"
    replies = _decode_replies(_raw_exchange(live.addr, garbage + good, read_reply=True))
    codes = sorted(r.code for r in replies)
    assert codes == [ErrorCode.OK, ErrorCode.MALFORMED]


def test_unknown_wire_version_is_refused(live):
    bad = wire.frame(wire.Request(99, 3, "echo", 1000, "srv-1", Echo("a")))
    (reply,) = _decode_replies(_raw_exchange(live.addr, bad, read_reply=True))
    assert reply.code == ErrorCode.UNSUPPORTED_VERSION and reply.call_id == 0


def test_oversized_frame_is_refused_and_closed(live):
    data = _raw_exchange(live.addr, struct.pack(">I", 1 << 30) + b"x" * 100, read_reply=True)
    (reply,) = _decode_replies(data)
    assert reply.code == ErrorCode.TOO_LARGE
    assert live.ping() == "PING"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.one_of(
    st.binary(max_size=300),
    st.binary(max_size=200).map(lambda b: struct.pack(">I", len(b) + 50) + b),  # truncated frame
    st.binary(max_size=200).map(lambda b: struct.pack(">I", len(b)) + b),  # framed garbage
))
def test_fuzz_random_bytes_never_crash_or_hang_the_server(live, junk):
    _raw_exchange(live.addr, junk, read_reply=False)
    assert live.ping() == "PING"


@example(b"\x96\x00\x00\xa1\x80")  # bad UTF-8 in a str field (found by this test)
@example(b"\x94\x00\x00\xa1\x80")
@given(st.binary(max_size=200))
def test_fuzz_decoders_raise_only_rpc_errors(data):
    for decode in (wire.decode_request, wire.decode_response):
        try:
            decode(data)
        except RpcError as e:
            assert e.code in (ErrorCode.MALFORMED, ErrorCode.UNSUPPORTED_VERSION)


@given(bodies=st.lists(st.binary(max_size=40), max_size=12), cuts=st.lists(st.integers(0, 600)))
def test_frames_split_back_out_of_any_chunking_of_the_stream(bodies, cuts):
    stream = b"".join(struct.pack(">I", len(b)) + b for b in bodies)
    edges = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    buf, got = bytearray(), []
    for a, b in zip(edges, edges[1:], strict=False):
        buf += stream[a:b]
        got += wire.split_frames(buf, max_frame=64)
    assert got == bodies and buf == b""


def test_a_frame_over_the_limit_is_refused_before_its_body_arrives():
    buf = bytearray(struct.pack(">I", 65) + b"x")
    with pytest.raises(RpcError) as e:
        wire.split_frames(buf, max_frame=64)
    assert e.value.code == ErrorCode.TOO_LARGE


def test_an_rpc_error_survives_pickling_whole():
    """A simulator worker's exception crosses a process boundary; an RpcError that could not be
    rebuilt there hung the pool."""
    import pickle

    e = RpcError(ErrorCode.NOT_LEADER, "not me", maybe_delivered=True, detail="leader-b")
    back = pickle.loads(pickle.dumps(e))
    assert (type(back), back.code, back.message, back.maybe_delivered, back.detail, str(back)) == (
        RpcError, e.code, "not me", True, "leader-b", str(e))
