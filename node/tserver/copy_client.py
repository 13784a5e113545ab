"""Tablet copy, the receiving side's transfer: Kudu's TabletCopyClient.

Files come in chunks of `chunk_bytes`, a few in flight at once so the network and the disk
overlap, each checked against its CRC before it is written at its offset. A fetch that fails
in transit (connection dropped, timeout, source busy) is asked again from the same offset of
the same session, so a copy survives a dropped connection without starting over; it gives up
once nothing arrived for `stall_limit_s`, or at once when the source has no such session any
more (it restarted, or expired it): the caller tombstones, and the leader starts a new copy.
"""

from __future__ import annotations

import asyncio
import collections

import crc32c

from node.logfmt import TabletLog
from node.probes import probe
from node.protocol import (
    BeginCopySession,
    CopyChunk,
    CopyFile,
    CopySession,
    CopySessionId,
    Empty,
    FetchCopyChunk,
    Peer,
)
from node.rpc import ErrorCode, RpcClient, RpcError
from node.tablet.paths import TabletPaths
from node.tserver.copy import FileWriter, destination, uninterrupted
from node.wal.segment import restore_preallocation

CHUNK_BYTES = 4 << 20  # Kudu's tablet_copy_transfer_chunk_size_bytes
IN_FLIGHT = 4  # chunks asked for ahead of the one being written
FETCH_TIMEOUT_S = 60.0  # one chunk, even over a throttled link
STALL_LIMIT_S = 60.0  # no chunk for this long: the copy fails
RETRYABLE = {ErrorCode.NETWORK, ErrorCode.DEADLINE_EXCEEDED, ErrorCode.SERVER_BUSY}


class CopyClient:
    def __init__(self, rpc: RpcClient, source: Peer, tablet_id: str, requestor: str,
                 tlog: TabletLog, *, chunk_bytes: int = CHUNK_BYTES,
                 stall_limit_s: float = STALL_LIMIT_S):
        self.rpc, self.source, self.tablet_id, self.requestor = rpc, source, tablet_id, requestor
        self.log, self.chunk_bytes, self.stall_limit_s = tlog, chunk_bytes, stall_limit_s
        self.session: CopySession | None = None
        self.received = 0
        self.resumed = 0  # fetches that succeeded after a failed attempt at the same offset
        self._progress_at = 0.0  # the loop's time of the last chunk (set as the download starts)

    async def begin(self) -> CopySession:
        self.session = await self._call("ts.begin_copy_session",
                                        BeginCopySession(self.tablet_id, self.requestor),
                                        CopySession, FETCH_TIMEOUT_S)
        return self.session

    async def download(self, paths: TabletPaths) -> int:
        """Fetch every file of the session into `paths`; the bytes received."""
        assert self.session is not None
        total = sum(f.size for f in self.session.files)
        self._progress_at = _now()
        reported = self._progress_at
        for i, f in enumerate(self.session.files):
            writer = await uninterrupted(asyncio.to_thread(FileWriter, paths,
                                                           destination(paths, f)))
            offsets = collections.deque(range(0, f.size, self.chunk_bytes))
            ahead: collections.deque[asyncio.Task[CopyChunk]] = collections.deque()
            done = False
            try:
                while offsets or ahead:
                    while offsets and len(ahead) < IN_FLIGHT:
                        ahead.append(asyncio.create_task(self._fetch(i, f, offsets.popleft())))
                    chunk = await ahead.popleft()
                    await uninterrupted(asyncio.to_thread(writer.write, chunk.offset, chunk.data))
                    self.received += len(chunk.data)
                    if _now() - reported >= 5.0:
                        reported = _now()
                        self.log.info("tablet copy from %s: %d of %d MiB", self.source.uuid,
                                      self.received >> 20, total >> 20)
                done = True
            finally:
                for t in ahead:
                    t.cancel()
                await asyncio.gather(*ahead, return_exceptions=True)
                await uninterrupted(asyncio.to_thread(writer.close, done))
            if f.kind == "wal":
                await uninterrupted(asyncio.to_thread(
                    restore_preallocation, str(destination(paths, f)), paths.disk))
        return self.received

    async def end(self) -> None:
        """Release the source's pins now rather than at its idle timeout; best effort."""
        if self.session is None:
            return
        try:
            await self._call("ts.end_copy_session", CopySessionId(self.session.session_id),
                             Empty, 5.0)
        except RpcError as e:
            self.log.info("could not end tablet copy session %s: %s", self.session.session_id, e)

    async def _fetch(self, file: int, f: CopyFile, offset: int) -> CopyChunk:
        assert self.session is not None
        want = min(self.chunk_bytes, f.size - offset)
        req = FetchCopyChunk(self.session.session_id, file, offset, want)
        failures = 0
        while True:
            try:
                chunk = await self._call("ts.fetch_copy_chunk", req, CopyChunk, FETCH_TIMEOUT_S)
                problem = _check(chunk, offset, want)
                if problem is None:
                    break
                probe("copy.fetch.bad_chunk")
                err: Exception = ValueError(f"{f.name} at offset {offset}: {problem}")
            except RpcError as e:
                if e.code not in RETRYABLE:
                    raise
                err = e
            failures += 1
            stalled = _now() - self._progress_at
            if stalled > self.stall_limit_s:
                probe("copy.fetch.stalled_gave_up")
                raise RpcError(ErrorCode.DEADLINE_EXCEEDED, f"tablet copy from "
                               f"{self.source.uuid} stalled for {stalled:.0f}s: {err}")
            probe("copy.fetch.retrying")
            self.log.info("tablet copy: fetching %s at offset %d failed (%s); asking again",
                          f.name, offset, err)
            await asyncio.sleep(min(2.0, 0.1 * 2 ** min(failures, 5)))
        if failures:
            probe("copy.fetch.resumed")
            self.resumed += 1
            self.log.info("tablet copy resumed: %s at offset %d after %d failed attempts",
                          f.name, offset, failures)
        self._progress_at = _now()
        return chunk

    async def _call(self, method: str, req: object, resp_type: type, timeout: float):
        return await self.rpc.call(self.source.addr, method, req, resp_type,
                                   to_uuid=self.source.uuid, timeout=timeout)


def _now() -> float:
    """The loop's clock, not time.monotonic(): the same clock in a daemon (asyncio's loop reads
    time.monotonic), and the virtual one under the simulator, whose seeds run many times faster
    than the wall clock, so a stall measured on the wall clock never reached the limit there,
    and when it did would depend on the machine's speed (not replayable)."""
    return asyncio.get_running_loop().time()


def _check(chunk: CopyChunk, offset: int, want: int) -> str | None:
    if chunk.offset != offset or len(chunk.data) != want:
        return f"got {len(chunk.data)} bytes at offset {chunk.offset}, asked {want} at {offset}"
    if crc32c.crc32c(chunk.data) != chunk.crc32c:
        return "CRC mismatch"
    return None
