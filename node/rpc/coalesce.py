"""Frames written to one connection in the same turn of the event loop leave in ONE write.

A leader under load answers hundreds of requests per turn of its loop, and a client sends as
many; one write() each is one send() system call each, the largest single cost of the
single-op path (docs/benchmarks.md). Order on the connection is the order of `write` calls.
"""

from __future__ import annotations

import asyncio

from node.probes import probe

DRAIN_ABOVE = 64 << 10  # asyncio's default high-water mark for a transport's buffer


class CoalescingWriter:
    def __init__(self, writer: asyncio.StreamWriter):
        """Made on the loop the writer's connection runs on (asked once: the lookup is a
        system call)."""
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self._frames: list[bytes] = []

    def write(self, frame: bytes) -> None:
        if not self._frames:
            self.loop.call_soon(self.flush)
        self._frames.append(frame)

    def flush(self) -> None:
        frames, self._frames = self._frames, []
        if frames and not self.writer.is_closing():
            self.writer.write(frames[0] if len(frames) == 1 else b"".join(frames))

    def must_drain(self) -> bool:
        """The transport holds more than its high-water mark: the socket is not taking our
        bytes. Frames of this turn are not counted yet; they are at most one turn's worth."""
        return self.writer.transport.get_write_buffer_size() > DRAIN_ABOVE

    async def drain(self) -> None:
        """Back-pressure: wait while `must_drain`. Below the mark there is nothing to wait
        for, so no call."""
        if self.must_drain():
            probe("rpc.drain.waited")
            await self.writer.drain()
