"""Kudu's TabletCopyService: both ends of a tablet copy, as RPCs. The leader's
StartTabletCopy makes this server the receiver (node.tserver.copy_client fetches, the
TabletManager guards and installs); the session RPCs make it a source
(node.tserver.copy_source). Masters have it too: a master added to the catalog's config is
brought in by a copy of the catalog."""

from __future__ import annotations

import asyncio

from node.probes import probe
from node.protocol import (
    BeginCopySession,
    CopySessionId,
    FetchCopyChunk,
    StartTabletCopy,
    TabletCopyResult,
)
from node.rpc import ErrorCode, RpcClient, RpcError, RpcServer
from node.tablet.superblock import OpId
from node.tserver.copy_client import CHUNK_BYTES, STALL_LIMIT_S, CopyClient
from node.tserver.copy_source import CopySourceSessions
from node.tserver.tablet_manager import TabletManager

IDLE_TIMEOUT_S = 600.0  # Kudu's tablet_copy_idle_timeout_sec


class TabletCopyService:
    def __init__(self, tablets: TabletManager, rpc_client: RpcClient, *,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, chunk_bytes: int = CHUNK_BYTES,
                 stall_limit_s: float = STALL_LIMIT_S):
        self.tablets, self.rpc_client, self.chunk_bytes = tablets, rpc_client, chunk_bytes
        self.stall_limit_s = stall_limit_s
        self.sources = CopySourceSessions(tablets, idle_timeout_s)
        self._expiry: asyncio.Task | None = None
        self._copies: set[asyncio.Task] = set()  # copies this server is receiving

    def register(self, s: RpcServer) -> None:
        s.register("ts.start_tablet_copy", StartTabletCopy, self.on_start_tablet_copy)
        s.register("ts.begin_copy_session", BeginCopySession, self.sources.begin)
        s.register("ts.fetch_copy_chunk", FetchCopyChunk, self.sources.fetch)
        s.register("ts.end_copy_session", CopySessionId, self.sources.on_end)

    def start(self) -> None:
        self._expiry = asyncio.create_task(self.sources.expire())

    async def stop(self) -> None:
        tasks = [t for t in (self._expiry, *self._copies) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.sources.end_all()

    async def on_start_tablet_copy(self, req: StartTabletCopy) -> TabletCopyResult:
        """Seed 05's StartTabletCopy. The copy runs on if the caller goes away (its connection
        drops, it crashes): the copy has its own way to fail, and a new leader's request meets
        "a copy is in progress" until it ends, then finds the replica running or tombstoned."""
        task = asyncio.create_task(self._copy(req), name=f"copy-{req.tablet_id}")
        self._copies.add(task)
        task.add_done_callback(self._copy_ended)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():
                raise  # this server is stopping, or the caller's connection closed
            probe("copy.aborted_by_delete")
            raise RpcError(ErrorCode.ILLEGAL_STATE, f"tablet {req.tablet_id}: the copy was "
                           "aborted (the tablet was deleted meanwhile)") from None

    def _copy_ended(self, task: asyncio.Task) -> None:
        """A copy outlives its caller (shielded): when the caller is gone first, its failure
        has nobody to be raised to. `_copy` logged it as a warning; retrieving it here keeps
        asyncio from logging the same failure again as an unhandled exception."""
        self._copies.discard(task)
        if not task.cancelled():
            task.exception()

    async def _copy(self, req: StartTabletCopy) -> TabletCopyResult:
        """Guarded (TabletManager.begin_copy), then the files are fetched from `source` and
        the replica started on them. Any failure part-way leaves a tombstone (or the state the
        tablet was in, if nothing was written yet)."""
        tid = req.tablet_id
        before = await self.tablets.begin_copy(req)
        tlog = self.tablets.log(tid)
        started = asyncio.get_running_loop().time()
        client = CopyClient(self.rpc_client, req.source, tid, self.tablets.uuid, tlog,
                            chunk_bytes=self.chunk_bytes, stall_limit_s=self.stall_limit_s)
        try:
            session = await client.begin()
            await self.tablets.prepare_copy(tid, session)
            nbytes = await client.download(self.tablets.paths(tid))
            fetched = asyncio.get_running_loop().time()
            replica = await self.tablets.finish_copy(tid, session, req.source.uuid)
        except BaseException as e:  # cancelled too: the server is stopping
            probe("copy.failed")
            tlog.warning("tablet copy from %s failed after %d bytes: %s: %s", req.source.uuid,
                         client.received, type(e).__name__, e)
            raise
        finally:
            await self.tablets.abandon_copy(tid, before)
            await client.end()
        probe("copy.finished")
        (start_term, start), (last_term, last) = replica.log_bounds()
        seconds = asyncio.get_running_loop().time() - started
        tlog.info("tablet copy finished: %d bytes from %s in %.2fs (%.0f MB/s; fetching %.2fs, "
                  "opening %.2fs; %d fetches resumed), snapshot at index %d, log to (%d, %d)",
                  nbytes, req.source.uuid, seconds, nbytes / seconds / 1e6, fetched - started,
                  asyncio.get_running_loop().time() - fetched, client.resumed, start, last_term, last)
        return TabletCopyResult(OpId(start_term, start), OpId(last_term, last), nbytes, seconds)
