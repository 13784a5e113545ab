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


@dataclass(frozen=True)
class _Method:
    request_type: type
    handler: Handler


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
        self._methods[method] = _Method(request_type, handler)

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
        out = CoalescingWriter(writer)
        handlers: set[asyncio.Task] = set()
        room = asyncio.Event()  # set when a handler finished and fewer than max_inflight run

        def finished(t: asyncio.Task) -> None:
            handlers.discard(t)
            if len(handlers) < self.max_inflight:
                room.set()

        buf = bytearray()
        try:
            while chunk := await reader.read(wire.READ_CHUNK):
                buf += chunk
                try:
                    frames = wire.split_frames(buf, self.max_frame)
                except RpcError as err:  # too large: answer once and hang up
                    self.stats["malformed"] += 1
                    out.write(wire.frame(wire.error_response(0, err)))
                    out.flush()
                    await out.drain()
                    return
                for data in frames:
                    while len(handlers) >= self.max_inflight:  # back-pressure: stop reading
                        room.clear()
                        await room.wait()
                    t = asyncio.create_task(self._answer(data, out))
                    handlers.add(t)
                    t.add_done_callback(finished)
            # EOF; a truncated last frame gets no answer
        except ConnectionError:
            pass  # peer went away or sent a truncated frame: nothing to answer
        except asyncio.CancelledError:
            pass
        finally:
            for t in handlers:
                t.cancel()
            out.flush()  # replies already made still go out (a half-closed peer reads them)
            writer.close()
            self._conns.discard(task)

    def _expire(self, task: asyncio.Task) -> None:
        if not task.done():
            self._expired.add(task)
            task.cancel()

    async def _answer(self, data: bytes, out: CoalescingWriter) -> None:
        call_id = 0
        try:
            try:
                req = wire.decode_request(data)
                call_id = req.call_id
                handler, body = self._route(req)
                task = asyncio.current_task()
                key = self._deadlines.add(task, req.timeout_ms / 1000)
                try:
                    resp = wire.ok_response(call_id, await handler(body))
                except asyncio.CancelledError:
                    if task not in self._expired:
                        raise  # the server is stopping or the connection closed
                    task.uncancel()
                    raise RpcError(ErrorCode.DEADLINE_EXCEEDED,
                                   f"{req.method} took over {req.timeout_ms} ms") from None
                finally:
                    self._deadlines.remove(task, key)
                    self._expired.discard(task)
            except RpcError as e:
                self.stats["errors"] += 1
                if e.code in (ErrorCode.MALFORMED, ErrorCode.UNSUPPORTED_VERSION):
                    self.stats["malformed"] += 1
                resp = wire.error_response(call_id, e)
            except Exception as e:  # a handler bug must not kill the connection
                log.exception("handler failed")
                self.stats["errors"] += 1
                resp = wire.error_response(call_id, RpcError(ErrorCode.REMOTE_ERROR, repr(e)))
            if not out.writer.is_closing():
                out.write(wire.frame(resp))
                await out.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass

    def _route(self, req: wire.Request) -> tuple[Handler, object]:
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
        return method.handler, wire.decode_body(req.body, method.request_type)
