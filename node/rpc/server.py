"""The RPC server: decodes frames, checks recipient and deadline, dispatches to typed handlers.

A connection never takes the server down: bad bytes get an error reply (the stream stays in sync
because the length prefix was honoured) and only an oversized or truncated frame closes the
connection, since the stream can no longer be trusted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from node.rpc import wire
from node.rpc.coalesce import CoalescingWriter
from node.rpc.deadlines import DeadlineWheel
from node.rpc.errors import ErrorCode, RpcError

log = logging.getLogger(__name__)

Handler = Callable[[object], Awaitable[object]]
# A direct handler answers through `reply(value, error)`, exactly once, now or later; or it
# returns an awaitable, which is then run and answered as a Handler's would be.
Reply = Callable[[object, BaseException | None], None]
DirectHandler = Callable[[object, Reply], Awaitable[object] | None]


@dataclass(frozen=True)
class _Method:
    request_type: type
    handler: Handler | DirectHandler
    direct: bool


class _Conn:
    """One client connection's replies and its count of calls in flight."""

    __slots__ = ("out", "inflight", "room", "tasks")

    def __init__(self, writer: asyncio.StreamWriter):
        self.out = CoalescingWriter(writer)
        self.inflight = 0
        self.room = asyncio.Event()  # set when a call ends (the reader waits while full)
        self.tasks: set[asyncio.Task] = set()  # handlers running as tasks: cancelled at close

    def answer(self, resp: wire.Response) -> None:
        if not self.out.writer.is_closing():
            self.out.write(wire.frame(resp))

    def ended(self) -> None:
        self.inflight -= 1
        self.room.set()


class _DirectCall:
    """A direct handler's `reply`: answers once, whichever comes first of the handler and the
    call's deadline."""

    __slots__ = ("server", "conn", "call_id", "what", "key")

    def __init__(self, server: RpcServer, conn: _Conn, call_id: int, what: str):
        self.server, self.conn, self.call_id, self.what = server, conn, call_id, what
        self.key = -1

    def __call__(self, value: object, error: BaseException | None = None) -> None:
        conn = self.conn
        if conn is None:
            return  # answered already (its deadline passed first)
        self.conn = None
        self.server._deadlines.remove(self, self.key)
        try:
            resp = (wire.ok_response(self.call_id, value) if error is None
                    else self.server._error_response(self.call_id, error))
            conn.answer(resp)
        except Exception as e:  # a reply we cannot encode is still an answer
            log.exception("encoding the reply to %s failed", self.what)
            conn.answer(wire.error_response(self.call_id,
                                            RpcError(ErrorCode.REMOTE_ERROR, repr(e))))
        conn.ended()

    def expire(self) -> None:
        self(None, RpcError(ErrorCode.DEADLINE_EXCEEDED, f"{self.what} took too long"))


class RpcServer:
    def __init__(self, uuid: str, *, max_frame: int = wire.DEFAULT_MAX_FRAME,
                 max_inflight_per_conn: int = 256):
        self.uuid = uuid
        self.max_frame = max_frame
        self.max_inflight = max_inflight_per_conn
        self._methods: dict[str, _Method] = {}
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task] = set()
        self._deadlines = DeadlineWheel(self._expire)
        self._expired: set[asyncio.Task] = set()  # handlers cancelled by their deadline
        self.stats = {"requests": 0, "errors": 0, "wrong_uuid": 0, "malformed": 0}

    def register(self, method: str, request_type: type, handler: Handler) -> None:
        """`handler(body)` runs as a task of its own; what it returns is the answer."""
        self._methods[method] = _Method(request_type, handler, False)

    def register_direct(self, method: str, request_type: type, handler: DirectHandler) -> None:
        """`handler(body, reply)` runs in the connection's reader, with no task: the per-op path
        (a task, a deadline task and a coroutine chain per call were a fifth of a loaded
        leader's CPU). It calls `reply(value, None)` or `reply(None, error)` once, or returns
        an awaitable for its slow path. An exception it raises is the answer at once."""
        self._methods[method] = _Method(request_type, handler, True)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve_conn, host, port)
        return self._server.sockets[0].getsockname()[:2]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._conns.add(task)
        conn = _Conn(writer)
        buf = bytearray()
        try:
            while chunk := await reader.read(wire.READ_CHUNK):
                buf += chunk
                try:
                    frames = wire.split_frames(buf, self.max_frame)
                except RpcError as err:  # too large: answer once and hang up
                    self.stats["malformed"] += 1
                    conn.answer(wire.error_response(0, err))
                    conn.out.flush()
                    await conn.out.drain()
                    return
                for data in frames:
                    while conn.inflight >= self.max_inflight:  # back-pressure: stop reading
                        conn.room.clear()
                        await conn.room.wait()
                    self._dispatch(data, conn)
            # EOF; a truncated last frame gets no answer
        except ConnectionError:
            pass  # peer went away or sent a truncated frame: nothing to answer
        except asyncio.CancelledError:
            pass
        finally:
            for t in conn.tasks:
                t.cancel()
            conn.out.flush()  # replies already made still go out (a half-closed peer reads them)
            writer.close()
            self._conns.discard(task)

    def _dispatch(self, data: bytes, conn: _Conn) -> None:
        """Answer one request: at once if refused, else through its handler."""
        call_id = 0
        try:
            req = wire.decode_request(data)
            call_id = req.call_id
            method, body = self._route(req)
            conn.inflight += 1
            if method.direct:
                call = _DirectCall(self, conn, call_id, req.method)
                try:
                    slow = method.handler(body, call)
                except Exception as e:
                    call(None, e)  # its answer, unless it answered before raising
                    return
                if slow is None:
                    if call.conn is not None:  # not answered yet
                        call.key = self._deadlines.add(call, req.timeout_ms / 1000)
                    return
                call.conn = None
                work = slow
            else:
                work = method.handler(body)
            t = asyncio.ensure_future(self._answer(req, work, conn))
            conn.tasks.add(t)
            t.add_done_callback(conn.tasks.discard)
        except Exception as e:
            conn.answer(self._error_response(call_id, e))

    def _error_response(self, call_id: int, e: BaseException) -> wire.Response:
        self.stats["errors"] += 1
        if isinstance(e, RpcError):
            if e.code in (ErrorCode.MALFORMED, ErrorCode.UNSUPPORTED_VERSION):
                self.stats["malformed"] += 1
            return wire.error_response(call_id, e)
        log.error("handler failed", exc_info=e)  # a handler bug must not kill the connection
        return wire.error_response(call_id, RpcError(ErrorCode.REMOTE_ERROR, repr(e)))

    def _expire(self, item: object) -> None:
        if isinstance(item, _DirectCall):
            item.expire()
        elif not item.done():  # type: ignore[attr-defined]
            self._expired.add(item)  # type: ignore[arg-type]
            item.cancel()  # type: ignore[attr-defined]

    async def _answer(self, req: wire.Request, work: Awaitable[object], conn: _Conn) -> None:
        try:
            task = asyncio.current_task()
            key = self._deadlines.add(task, req.timeout_ms / 1000)
            try:
                resp = wire.ok_response(req.call_id, await work)
            except asyncio.CancelledError:
                if task not in self._expired:
                    raise  # the server is stopping or the connection closed
                task.uncancel()
                resp = self._error_response(req.call_id, RpcError(
                    ErrorCode.DEADLINE_EXCEEDED, f"{req.method} took over {req.timeout_ms} ms"))
            except Exception as e:
                resp = self._error_response(req.call_id, e)
            finally:
                self._deadlines.remove(task, key)
                self._expired.discard(task)
            conn.answer(resp)
            await conn.out.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            conn.ended()

    def _route(self, req: wire.Request) -> tuple[_Method, object]:
        """The handler and decoded body for `req`, or the RpcError that refuses it."""
        self.stats["requests"] += 1
        if req.to_uuid and req.to_uuid != self.uuid:
            self.stats["wrong_uuid"] += 1
            raise RpcError(ErrorCode.WRONG_SERVER_UUID,
                           f"request for {req.to_uuid} reached {self.uuid}")
        method = self._methods.get(req.method)
        if method is None:
            raise RpcError(ErrorCode.NO_SUCH_METHOD, req.method)
        if req.timeout_ms <= 0:
            raise RpcError(ErrorCode.DEADLINE_EXCEEDED, "deadline passed before dispatch")
        return method, wire.decode_body(req.body, method.request_type)
