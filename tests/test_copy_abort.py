"""A tablet copy can be aborted: a DeleteTablet that reaches a replica while it is being copied
cancels the transfer, removes what it wrote and leaves a tombstone, and the leader's
StartTabletCopy gets a clear error rather than waiting. Real tablet server on loopback; the
source is a bare RPC server that begins a session and then sends nothing."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from tserver_helpers import TABLET, start_server, wait_for

from node import probes
from node.consensus import Member, MemberType, RaftConfig, encode_config
from node.protocol import (
    BeginCopySession,
    CopyChunk,
    CopyFile,
    CopySession,
    DeleteTablet,
    FetchCopyChunk,
    Peer,
    StartTabletCopy,
    TabletCopyResult,
)
from node.rpc import ErrorCode, RpcError, RpcServer
from node.tablet.superblock import DataState, KeyRange, OpId, Superblock
from node.tserver.tablet_manager import TabletState


class StallingSource:
    def __init__(self):
        self.server = RpcServer("src")
        self.fetching = asyncio.Event()
        self.server.register("ts.begin_copy_session", BeginCopySession, self._begin)
        self.server.register("ts.fetch_copy_chunk", FetchCopyChunk, self._fetch)

    async def _begin(self, req: BeginCopySession) -> CopySession:
        config = encode_config(RaftConfig(0, (Member("src", MemberType.VOTER),)))
        return CopySession("s-1", "tbl", KeyRange(), 3, config,
                           [CopyFile("wal", "wal-000000001", 64 << 20)], 600.0)

    async def _fetch(self, req: FetchCopyChunk) -> CopyChunk:
        self.fetching.set()
        await asyncio.sleep(3600)  # never answers
        raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def _server_and_source(root, source_kind):
    """A real tablet server, a bare copy source (`source_kind`) beside it, and the leader's
    StartTabletCopy naming that source; both stopped at the end."""
    ts, src = await start_server(root), source_kind()
    try:
        host, port = await src.server.start("127.0.0.1", 0)
        yield ts, src, StartTabletCopy(TABLET, Peer("src", host, port), 3, "MISSING")
    finally:
        await src.server.stop()
        await ts.stop()


@contextlib.asynccontextmanager
async def _leader_and_receiver(root):
    """Two real tablet servers: `src` leads the tablet alone, five rows written; `dst` holds no
    replica of it yet. Yields (src, dst, src's replica); both stopped at the end."""
    from tserver_helpers import create, sole_leader, write_rows

    src, dst = await start_server(root / "src"), await start_server(root / "dst")
    try:
        await create(src, [src.me])
        r = await sole_leader(src)
        await write_rows(src, 5)
        yield src, dst, r
    finally:
        await dst.stop()
        await src.stop()


async def _copy_under_way(ts, src, req) -> asyncio.Task:
    """The leader's StartTabletCopy to `ts`, running: the tablet is COPYING and the source has
    been asked for its first chunk (which it never sends)."""
    copy = asyncio.create_task(ts.rpc_client.call(ts.me.addr, "ts.start_tablet_copy", req,
                                                  TabletCopyResult, to_uuid=ts.uuid, timeout=60))
    await asyncio.wait_for(src.fetching.wait(), 10)
    await wait_for(lambda: ts.tablets.state(TABLET) == TabletState.COPYING, "copying")
    return copy


def test_a_delete_aborts_a_copy_under_way_and_leaves_a_tombstone(tmp_path):
    async def main():
        async with _server_and_source(tmp_path / "a", StallingSource) as (ts, src, req):
            copy = await _copy_under_way(ts, src, req)
            paths = ts.tablets.paths(TABLET)
            assert Superblock.load(paths.superblock).data_state == DataState.COPYING
            assert (await ts.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            with pytest.raises(RpcError) as e:
                await asyncio.wait_for(copy, 10)  # answered at once, not at the timeout
            assert e.value.code == ErrorCode.ILLEGAL_STATE and "aborted" in e.value.message
            assert ts.tablets.state(TABLET) == TabletState.TOMBSTONED
            sb = Superblock.load(paths.superblock)
            assert sb.data_state == DataState.TOMBSTONED and sb.copied_from is None
            assert not paths.wal_dir.exists()  # what the copy wrote is gone

    asyncio.run(main())


def test_a_delete_with_a_config_index_waits_for_a_copy_under_way(tmp_path):
    """The master's delete of an evicted replica carries the config index it was decided on.
    A copy under way is installing a config this replica does not know yet (it may be a
    re-add newer than that index), so such a delete is refused and the copy goes on; it once
    aborted the copy of a member re-added since, which then waited for another. A plain delete
    (an operator's) still aborts it."""
    async def main():
        async with _server_and_source(tmp_path / "a", StallingSource) as (ts, src, req):
            copy = await _copy_under_way(ts, src, req)
            with probes.expect("tablet.delete.cas_refused_while_copying"), \
                    pytest.raises(RpcError) as refused:
                await ts.service.on_delete_tablet(DeleteTablet(TABLET, cas_config_index=0))
            assert refused.value.code == ErrorCode.ILLEGAL_STATE, refused.value
            assert ts.tablets.state(TABLET) == TabletState.COPYING and not copy.done()
            assert (await ts.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            with pytest.raises(RpcError):
                await asyncio.wait_for(copy, 10)
            assert ts.tablets.state(TABLET) == TabletState.TOMBSTONED

    asyncio.run(main())


def test_a_delete_racing_a_copys_install_leaves_memory_and_disk_agreeing(tmp_path, monkeypatch):
    """A DeleteTablet once cancelled the copy's task while the copy's install ran
    in a thread. The thread went on and wrote READY while the copy's cleanup, run beside it,
    tombstoned: memory said TOMBSTONED over a READY superblock, so the tablet came back at the
    next start (and voted from the wrong last OpId meanwhile). Now a copy's file steps finish
    before a cancellation goes through, and a delete that lands during the install finds the
    replica RUNNING and tombstones it properly. The install is slowed (a real thread sleeping
    before the real complete_install) to hold the race open; two real tablet servers."""
    import threading
    import time

    import node.tserver.tablet_manager as tm

    real, installing = tm.complete_install, threading.Event()

    def slow_install(*args):
        installing.set()
        time.sleep(0.5)
        real(*args)

    monkeypatch.setattr(tm, "complete_install", slow_install)

    async def main():
        async with _leader_and_receiver(tmp_path) as (src, dst, r):
            req = StartTabletCopy(TABLET, src.me, r.term, "MISSING")
            copy = asyncio.create_task(dst.copy_service.on_start_tablet_copy(req))
            await asyncio.wait_for(asyncio.to_thread(installing.wait, 10), 15)
            assert (await dst.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            await asyncio.gather(copy, return_exceptions=True)
            sb = Superblock.load(dst.tablets.paths(TABLET).superblock)
            assert dst.tablets.state(TABLET) == TabletState.TOMBSTONED
            assert sb.data_state == DataState.TOMBSTONED, sb
            assert sb.tombstone_last_opid is not None and sb.tombstone_last_opid.index >= 6, sb

    asyncio.run(main())


class FailingSource(StallingSource):
    """Begins a session, then says the session is gone (it restarted): the copy fails itself."""

    async def _fetch(self, req: FetchCopyChunk) -> CopyChunk:
        raise RpcError(ErrorCode.NOT_FOUND, "no such session")


def _slowed(monkeypatch, name: str):
    """tablet_manager's blocking step `name` slowed by half a second (a slow disk's fsyncs),
    in a real thread before the real step; the event is set when it begins."""
    import threading
    import time

    import node.tserver.tablet_manager as tm

    real, began = getattr(tm, name), threading.Event()

    def slow(*args):
        began.set()
        time.sleep(0.5)
        return real(*args)

    monkeypatch.setattr(tm, name, slow)
    return began


def test_a_delete_during_a_failed_copys_cleanup_leaves_a_tombstone_that_takes_copies(
        tmp_path, monkeypatch):
    """A copy that failed on its own (its source lost the session) cleans up in a thread; a
    DeleteTablet that came meanwhile cancelled the cleanup halfway: the disk said TOMBSTONED,
    the tablet stayed COPYING with no copy under way, and every later StartTabletCopy was
    refused "a copy is in progress" and every delete answered not ok, until a restart (the
    master never replaces a COPYING replica). The cleanup now runs to its end."""
    cleaning = _slowed(monkeypatch, "abandon_copy")

    async def main():
        async with _server_and_source(tmp_path / "a", FailingSource) as (ts, src, req):
            copy = asyncio.create_task(ts.copy_service.on_start_tablet_copy(req))
            await asyncio.wait_for(asyncio.to_thread(cleaning.wait, 10), 15)
            assert (await ts.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            failed = (await asyncio.gather(copy, return_exceptions=True))[0]
            assert isinstance(failed, RpcError), failed
            sb = Superblock.load(ts.tablets.paths(TABLET).superblock)
            assert ts.tablets.state(TABLET) == TabletState.TOMBSTONED
            assert sb.data_state == DataState.TOMBSTONED, sb
            assert (await ts.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            with pytest.raises(RpcError) as again:  # a new copy is tried, not refused as busy
                await ts.copy_service.on_start_tablet_copy(req)
            assert "in progress" not in again.value.message, again.value

    asyncio.run(main())


def test_a_delete_whose_handler_is_cancelled_mid_tombstone_still_tombstones(tmp_path, monkeypatch):
    """The RPC server cancels a handler at its caller's deadline (the master's delete waits
    5 s) or when the connection closes. A DeleteTablet cancelled while its tombstone was
    written left the replica stopped and listed RUNNING (reported to the master as the
    tablet's leader, never replaced) over a TOMBSTONED superblock, and the next delete failed
    the replica (no transition TOMBSTONED -> TOMBSTONED). The tombstone now runs to its end."""
    from tserver_helpers import create, sole_leader, write_rows

    writing = _slowed(monkeypatch, "tombstone")

    async def main():
        ts = await start_server(tmp_path / "a")
        try:
            await create(ts, [ts.me])
            await sole_leader(ts)
            await write_rows(ts, 3)
            handler = asyncio.create_task(ts.service.on_delete_tablet(DeleteTablet(TABLET)))
            await asyncio.wait_for(asyncio.to_thread(writing.wait, 10), 15)
            handler.cancel()
            await asyncio.gather(handler, return_exceptions=True)
            sb = Superblock.load(ts.tablets.paths(TABLET).superblock)
            assert ts.tablets.state(TABLET) == TabletState.TOMBSTONED
            assert sb.data_state == DataState.TOMBSTONED, sb
            assert TABLET not in ts.tablets.replicas
            assert (await ts.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            assert ts.tablets.state(TABLET) == TabletState.TOMBSTONED
        finally:
            await ts.stop()

    asyncio.run(main())


def _full_disk(*args):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_copy_whose_cleanup_fails_on_a_full_disk_leaves_the_tablet_failed(tmp_path, monkeypatch):
    """Found by the whole-stack simulator (a swarm seed filling the disk): a failed copy's
    cleanup failed itself (ENOSPC) and left the tablet COPYING with no copy under way,
    refusing every later copy and delete. It is FAILED now, as a tombstone that cannot be
    written is; the master's FAILED path takes it from there."""
    import node.tserver.tablet_manager as tm

    monkeypatch.setattr(tm, "abandon_copy", _full_disk)

    async def main():
        async with _server_and_source(tmp_path / "a", FailingSource) as (ts, src, req):
            with pytest.raises(OSError):
                await ts.copy_service.on_start_tablet_copy(req)
            assert ts.tablets.state(TABLET) == TabletState.FAILED
            assert "No space left" in ts.tablets.get(TABLET).reason

    asyncio.run(main())


def test_a_replica_that_cannot_close_its_files_at_its_tombstone_is_failed(tmp_path):
    """Found by the whole-stack simulator (a swarm seed filling the disk): closing the WAL of
    a replica being tombstoned writes its newest segment's footer, which failed (ENOSPC); the
    stopped replica stayed listed RUNNING, reported so to the master and never replaced. It is
    FAILED now."""
    from tserver_helpers import create, sole_leader

    async def main():
        ts = await start_server(tmp_path / "a")
        try:
            await create(ts, [ts.me])
            r = await sole_leader(ts)
            stop = r.stop

            async def failing_stop():
                await stop()
                _full_disk()

            r.stop = failing_stop
            with pytest.raises(RpcError) as e:  # the cause told, not the raw error
                await ts.service.on_delete_tablet(DeleteTablet(TABLET))
            assert e.value.code == ErrorCode.ILLEGAL_STATE and "No space left" in str(e.value)
            assert ts.tablets.state(TABLET) == TabletState.FAILED
            assert TABLET not in ts.tablets.replicas
        finally:
            await ts.stop()

    asyncio.run(main())


def test_a_copy_ending_behind_the_tombstones_last_op_is_refused_and_the_tombstone_kept(tmp_path):
    """A tombstone's last OpId is what the replica votes with. A leader writing behind (its
    followers commit entries its own WAL has not synced) copies only what its WAL has synced,
    so a follower tombstoned just then got a log ending before entries it had acknowledged,
    and voted for logs without them: with the leader's crash, committed entries were gone
    (the whole-stack simulator's copy-behind fault). Here the tombstone logged five more
    entries of the source's term than the source has: the copy is refused, the tablet stays a
    tombstone with its last OpId, and a copy from a source that caught up installs."""
    from tserver_helpers import write_rows

    from node.tablet.cmeta import ConsensusMetadata

    async def main():
        async with _leader_and_receiver(tmp_path) as (src, dst, r):
            last_term, last = r.last_logged()
            paths = dst.tablets.paths(TABLET)
            config = encode_config(RaftConfig(0, (Member(src.uuid, MemberType.VOTER),
                                                  Member(dst.uuid, MemberType.VOTER))))
            ConsensusMetadata.create(paths.consensus_meta, TABLET, config, paths.disk).update(
                (r.term, src.uuid))
            ahead = OpId(last_term, last + 5)
            Superblock(TABLET, "tbl", KeyRange(), DataState.TOMBSTONED,
                       tombstone_last_opid=ahead).save(paths.superblock, paths.disk)
            dst.tablets.open_existing(TABLET)
            req = StartTabletCopy(TABLET, src.me, r.term, "TOMBSTONED")
            with pytest.raises(RpcError, match="behind the last op this replica logged"):
                await dst.copy_service.on_start_tablet_copy(req)
            sb = Superblock.load(paths.superblock)
            assert dst.tablets.state(TABLET) == TabletState.TOMBSTONED
            assert sb.data_state == DataState.TOMBSTONED and sb.tombstone_last_opid == ahead
            await write_rows(src, 6, prefix="more")
            assert r.last_logged() > (ahead.term, ahead.index)
            await dst.copy_service.on_start_tablet_copy(req)
            assert dst.tablets.state(TABLET) == TabletState.RUNNING
            assert dst.tablets.replica(TABLET).last_logged() >= (ahead.term, ahead.index)

    asyncio.run(main())


def test_a_copy_whose_caller_left_first_fails_without_an_unhandled_exception():
    """Found by the batched-writes chaos test: a copy's source was killed after the leader that
    asked for the copy had gone, so the shielded copy task failed with nobody awaiting it, and
    asyncio logged the failure (already logged as a warning) as an unhandled exception."""
    import asyncio
    import gc
    import types

    from node.tserver.copy_service import TabletCopyService

    errors = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: errors.append(ctx))
        holder = types.SimpleNamespace(_copies=set())

        async def copy():
            raise RuntimeError("no tablet copy session")

        task = asyncio.create_task(copy())
        holder._copies.add(task)
        task.add_done_callback(lambda t: TabletCopyService._copy_ended(holder, t))
        await asyncio.sleep(0.01)  # nobody awaits the task: its caller is gone
        assert not holder._copies
        del task
        gc.collect()

    asyncio.run(main())
    assert errors == []
