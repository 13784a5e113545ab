"""The RPC client: one multiplexed connection per peer address, reused across callers."""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections.abc import Callable

from node.probes import probe
from node.rpc import wire
from node.rpc.coalesce import CoalescingWriter
from node.rpc.deadlines import DeadlineWheel
from node.rpc.errors import ErrorCode, RpcError
from node.security import pki
from node.security.tls import subject

# Server-side codes after which the request may have taken effect.
_MAYBE_APPLIED = {ErrorCode.DEADLINE_EXCEEDED, ErrorCode.REMOTE_ERROR, ErrorCode.SHUTTING_DOWN}


def _call_error(e: BaseException, timeout: float) -> BaseException:
    """What a call raises when its response future failed with `e` (RpcErrors pass)."""
    if isinstance(e, (_Expired, TimeoutError)):
        return RpcError(ErrorCode.DEADLINE_EXCEEDED, f"no reply within {timeout:.3f}s",
                        maybe_delivered=True)
    if isinstance(e, ConnectionError):
        return RpcError(ErrorCode.NETWORK, str(e), maybe_delivered=True)
    return e


def _response(resp: wire.Response, method: str, response_type: type) -> object:
    """A response's body, or the RpcError it carries."""
    if resp.code != ErrorCode.OK:
        code = ErrorCode(resp.code) if resp.code in ErrorCode._value2member_map_ else ErrorCode.REMOTE_ERROR
        raise RpcError(code, resp.message, maybe_delivered=code in _MAYBE_APPLIED,
                       detail=resp.detail)
    try:
        return wire.decode_body(resp.body, response_type)
    except RpcError as e:  # the server acted but answered in a shape we cannot read
        raise RpcError(ErrorCode.MALFORMED, f"bad {method} reply: {e.message}",
                       maybe_delivered=True) from None


class _Expired(Exception):
    """A call's deadline passed (set on its future by the client's DeadlineWheel)."""


# Calls past their deadline whose reply a caller still takes (`late`), per connection: the
# oldest is forgotten beyond this (a peer cut off for minutes, one a few seconds).
LATE_KEPT = 1024


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(_Expired())


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_frame: int,
                 max_inflight: int, deadlines: DeadlineWheel):
        self.reader, self.writer = reader, writer
        self.out = CoalescingWriter(writer)
        self.max_frame = max_frame
        self.max_inflight = max_inflight
        self.deadlines = deadlines
        self.pending: dict[int, asyncio.Future] = {}
        self.late: dict[int, Callable[[wire.Response], None]] = {}  # expired, reply still taken
        # replies read in the turn their call's deadline fired, before the call ended (its
        # callback, or its coroutine, runs a turn later): `take_late` hands them on
        self.early: dict[int, wire.Response] = {}
        self.room = asyncio.Event()  # set when a call ends (callers over max_inflight wait)
        self.closed = False
        self.reader_task = asyncio.create_task(self._read_loop())

    async def _read_loop(self) -> None:
        reason = "connection closed by peer"
        buf = bytearray()
        try:
            while chunk := await self.reader.read(wire.READ_CHUNK):
                buf += chunk
                for data in wire.split_frames(buf, self.max_frame):
                    resp = wire.decode_response(data)
                    if resp.call_id == 0 and resp.code:
                        probe("rpc.client.peer_hung_up_with_reason")
                        # The server's last word before it hangs up (a frame over its limit):
                        # what every call still pending fails with.
                        reason = f"closed by peer: code {resp.code}: {resp.message}"
                    fut = self.pending.pop(resp.call_id, None)
                    if fut is not None:
                        if not fut.done():
                            fut.set_result(resp)
                        else:  # expired in this very turn: the call has not ended yet
                            self.early[resp.call_id] = resp
                    elif self.late:
                        take = self.late.pop(resp.call_id, None)
                        if take is not None:
                            take(resp)
        except (ConnectionError, RpcError) as e:
            reason = str(e) or reason
        except asyncio.CancelledError:
            reason = "client closed"
        finally:
            self._fail_all(reason)

    def _fail_all(self, reason: str) -> None:
        self.closed = True
        self.writer.close()
        self.late.clear()
        self.early.clear()
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(RpcError(ErrorCode.NETWORK, reason, maybe_delivered=True))
        self.pending.clear()

    def send(self, call_id: int, data: bytes, timeout: float) -> tuple[asyncio.Future, int]:
        """Send one request now: the future of its response (failed with _Expired after
        `timeout`) and its deadline key. The caller makes room first (`wait_for_room`) and
        calls `ended` with both once done."""
        loop = self.out.loop  # the connection's: looking up the running one is a system call
        fut = loop.create_future()
        self.pending[call_id] = fut
        key = self.deadlines.add(fut, timeout, loop)
        self.out.write(data)
        return fut, key

    def ended(self, call_id: int, fut: asyncio.Future, key: int) -> None:
        self.pending.pop(call_id, None)
        self.deadlines.remove(fut, key)
        self.room.set()

    def take_late(self, call_id: int, fut: asyncio.Future, method: str, response_type: type,
                  late: Callable[[object], None] | None) -> None:
        """A call that ended past its deadline: its reply, if it still comes, goes to
        `late(body)` (an error reply, or one that does not decode, goes nowhere). Every call
        whose future ended without a result comes here, so a reply read in the turn its
        deadline fired (`early`) is taken or dropped here too."""
        early = self.early.pop(call_id, None) if self.early else None
        if late is None or self.closed or fut.cancelled() or not isinstance(fut.exception(), _Expired):
            return
        if len(self.late) >= LATE_KEPT:
            probe("rpc.client.late_reply_forgotten")
            del self.late[next(iter(self.late))]

        def take(resp: wire.Response) -> None:
            try:
                body = _response(resp, method, response_type)
            except RpcError:
                return
            probe("rpc.client.late_reply_taken")
            late(body)

        if early is not None:
            probe("rpc.client.reply_in_its_deadline_turn_taken")
            take(early)
            return
        self.late[call_id] = take

    async def wait_for_room(self, timeout: float) -> float:
        """Wait while max_inflight calls are in flight; the time left of `timeout`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            async with asyncio.timeout_at(deadline):
                while len(self.pending) >= self.max_inflight:
                    self.room.clear()
                    await self.room.wait()
        except TimeoutError:
            raise RpcError(ErrorCode.DEADLINE_EXCEEDED, f"not sent within {timeout:.3f}s: "
                           f"{self.max_inflight} calls in flight") from None
        return deadline - loop.time()

    async def close(self) -> None:
        self.reader_task.cancel()
        await asyncio.gather(self.reader_task, return_exceptions=True)


def _check_server(addr: tuple[str, int], writer: asyncio.StreamWriter) -> None:
    """The server at `addr` must be one of the cluster's daemons: a user's certificate from the
    same CA would otherwise let its holder pose as a server and read what clients send."""
    name, kind = subject(writer.get_extra_info("peercert") or {})
    if kind != pki.SERVICE:
        writer.close()
        raise RpcError(ErrorCode.NOT_AUTHORIZED, f"{addr[0]}:{addr[1]} presented {name!r}, "
                                                 "not a service certificate of the cluster CA")


def _too_large(method: str, size: int, limit: int) -> RpcError:
    """A request over the frame limit is refused here, unsent: the server would answer
    TOO_LARGE and hang up, failing every other call on the connection."""
    return RpcError(ErrorCode.TOO_LARGE, f"{method} request of {size - wire.LENGTH.size} bytes "
                                         f"exceeds the {limit}-byte frame limit")


class RpcClient:
    def __init__(self, *, connect_timeout: float = 3.0, max_frame: int = wire.DEFAULT_MAX_FRAME,
                 max_inflight_per_conn: int = 1024, local_host: str | None = None,
                 tls: ssl.SSLContext | None = None):
        """`local_host`: the address to connect from (the simulator names hosts this way).
        `tls`: connect with TLS in this context (node.security.tls.client_context): the
        server must then show a service certificate of the same CA."""
        self.tls = tls
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self.max_inflight = max_inflight_per_conn
        self._local_addr = None if local_host is None else (local_host, 0)
        self._conns: dict[tuple[str, int], _Connection] = {}
        self._connecting: dict[tuple[str, int], asyncio.Lock] = {}
        self._ids = itertools.count(1)
        self._deadlines = DeadlineWheel(_expire)

    async def _connection(self, addr: tuple[str, int]) -> _Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connecting.setdefault(addr, asyncio.Lock())
        async with lock:
            conn = self._conns.get(addr)
            if conn is not None and not conn.closed:
                return conn
            try:
                async with asyncio.timeout(self.connect_timeout):
                    reader, writer = await asyncio.open_connection(
                        *addr, local_addr=self._local_addr, ssl=self.tls,
                        server_hostname="" if self.tls else None)
            except ssl.SSLError as e:
                # A peer that went away mid-handshake (killed, partitioned) is the network's
                # failure, to retry; any other TLS failure is a refusal that will not change.
                gone = isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError))
                raise RpcError(ErrorCode.NETWORK if gone else ErrorCode.NOT_AUTHORIZED,
                               f"TLS with {addr[0]}:{addr[1]} failed: {e.reason or e}") from None
            except (OSError, TimeoutError) as e:
                raise RpcError(ErrorCode.NETWORK, f"cannot connect to {addr[0]}:{addr[1]}: {e}") from None
            if self.tls is not None:
                _check_server(addr, writer)
            conn = _Connection(reader, writer, self.max_frame, self.max_inflight, self._deadlines)
            self._conns[addr] = conn
            return conn

    async def call(self, addr: tuple[str, int], method: str, request: object, response_type: type,
                   *, to_uuid: str, timeout: float,
                   late: Callable[[object], None] | None = None) -> object:
        """Call `method` on the server at `addr` that must be `to_uuid`; raises RpcError.
        `late(body)`: takes the reply if it comes after the deadline (the call has raised
        DEADLINE_EXCEEDED by then), for a message that is still worth having, such as a Raft
        answer (node.server.daemon.Outbox)."""
        if timeout <= 0:
            raise RpcError(ErrorCode.DEADLINE_EXCEEDED, "deadline already passed")
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            # Connecting counts against the call's timeout, waiting behind other callers'
            # connects to the same (maybe dead) host included; nothing was sent if it runs out.
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                async with asyncio.timeout(timeout):
                    conn = await self._connection(addr)
            except TimeoutError:
                raise RpcError(ErrorCode.DEADLINE_EXCEEDED, f"no connection to {addr[0]}:{addr[1]} "
                               f"within {timeout:.3f}s") from None
            timeout -= loop.time() - started
            if timeout <= 0:
                raise RpcError(ErrorCode.DEADLINE_EXCEEDED, "deadline passed while connecting")
        call_id = next(self._ids)
        req = wire.Request(wire.WIRE_VERSION, call_id, method, max(1, int(timeout * 1000)), to_uuid,
                           request)  # encoded in place (wire.Request)
        if len(conn.pending) >= conn.max_inflight:
            probe("rpc.client.waited_for_room")
            timeout = await conn.wait_for_room(timeout)
        if conn.closed:
            raise RpcError(ErrorCode.NETWORK, "connection closed")
        data = wire.frame(req)
        if len(data) - wire.LENGTH.size > self.max_frame:
            probe("rpc.client.too_large_refused")
            raise _too_large(method, len(data), self.max_frame)
        fut, key = conn.send(call_id, data, timeout)
        try:
            if conn.out.must_drain():  # rare: the socket is not taking our bytes
                async with asyncio.timeout(timeout):
                    await conn.out.drain()
            resp = await fut
        except BaseException as e:
            if isinstance(e, TimeoutError):  # the deadline passed while the socket was full
                _expire(fut)
            if fut.done():
                conn.take_late(call_id, fut, method, response_type, late)
            raise _call_error(e, timeout) from None
        finally:
            conn.ended(call_id, fut, key)
        return _response(resp, method, response_type)

    def call_nowait(self, addr: tuple[str, int], method: str, request: object,
                    response_type: type, *, to_uuid: str, timeout: float,
                    done: Callable[[object, BaseException | None], None],
                    late: Callable[[object], None] | None = None) -> bool:
        """`call` without a coroutine, for a connection already open with room: the request
        is queued at once and `done(response, None)` or `done(None, RpcError)` runs when it
        ends. False, with nothing sent, when it cannot: then `call`, which connects or waits.
        Raft's messages go this way, a loop turn sooner than through a sender task. `late`:
        as `call`'s."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed or len(conn.pending) >= conn.max_inflight or timeout <= 0:
            return False
        call_id = next(self._ids)
        req = wire.Request(wire.WIRE_VERSION, call_id, method, max(1, int(timeout * 1000)), to_uuid,
                           request)
        data = wire.frame(req)
        if len(data) - wire.LENGTH.size > self.max_frame:  # answered from the loop, not inline
            probe("rpc.client.too_large_refused_nowait")
            conn.out.loop.call_soon(done, None, _too_large(method, len(data), self.max_frame))
            return True
        fut, key = conn.send(call_id, data, timeout)

        def ended(f: asyncio.Future) -> None:
            conn.ended(call_id, f, key)
            try:
                body = _response(f.result(), method, response_type)
            except BaseException as e:
                conn.take_late(call_id, f, method, response_type, late)
                done(None, _call_error(e, timeout))
                return
            done(body, None)

        fut.add_done_callback(ended)
        return True

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
