"""A FAILED replica that is deleted leaves its files for an operator, whether it failed at
start-up (damaged files) or while it ran (a failed fsync, a safety check); a later CreateTablet
must not bring them back under a fresh superblock (the simulator's tombstone fault deleted a
replica FAILED by a flipped superblock bit, the master's create then ran its old WAL again, and
the tombstone invariant flagged the resurrection). Real tablet server on loopback, real files."""

from __future__ import annotations

import asyncio

import pytest
from tserver_helpers import (
    TABLET,
    create,
    sole_leader,
    sole_replica_with_rows,
    start_server,
    wait_for,
    write_rows,
)

from node import probes
from node.protocol import Ack, DeleteTablet
from node.rpc import ErrorCode, RpcError
from node.tablet.superblock import DataState, Superblock
from node.tserver.tablet_manager import TabletState


def test_a_deleted_failed_replicas_files_are_not_created_over(tmp_path):
    async def main():
        ts = await start_server(tmp_path / "a")
        await create(ts, [ts.me])
        await sole_leader(ts)
        await write_rows(ts, 3)
        await ts.stop()
        sb = ts.tablets.paths(TABLET).superblock
        data = bytearray(sb.read_bytes())
        data[-3] ^= 0x10  # media corruption in the superblock's payload
        sb.write_bytes(bytes(data))
        ts = await start_server(tmp_path / "a")
        try:
            assert ts.tablets.state(TABLET) == TabletState.FAILED
            assert not (await ts.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            assert ts.tablets.state(TABLET) is None  # gone from memory, its files left
            with pytest.raises(RpcError) as e:
                await create(ts, [ts.me])
            assert e.value.code == ErrorCode.ALREADY_EXISTS and "left for an operator" in str(e.value)
            assert TABLET not in ts.replicas and sb.read_bytes() == bytes(data)
        finally:
            await ts.stop()

    asyncio.run(main())


def _files(paths) -> dict[str, bytes]:
    """Every file of the tablet's, by path, with its bytes."""
    found = [paths.superblock, paths.consensus_meta]
    for folder in (paths.wal_dir, paths.snapshot_dir):
        found += [p for p in sorted(folder.rglob("*")) if p.is_file()] if folder.exists() else []
    return {str(p): p.read_bytes() for p in found if p.exists()}


async def _failed_while_running(root):
    """A server whose one replica, with rows, failed as it ran (an fsync's EIO)."""
    ts, r = await sole_replica_with_rows(root)

    def boom():
        raise OSError(5, "fsync failed: Input/output error")

    r._submit(boom)
    await wait_for(lambda: r.failed, "the replica to fail")
    return ts, r


def test_a_replica_that_failed_while_running_is_not_tombstoned_by_a_delete(tmp_path):
    """The master replaces a replica reporting FAILED and then deletes it with its config guard:
    a replica that failed at run time must keep its WAL and data as one that failed at start-up
    does, not lose them to a tombstone (the evidence of why it failed is in them)."""

    async def main():
        ts, r = await _failed_while_running(tmp_path / "a")
        try:
            assert ts.tablets.state(TABLET) == TabletState.FAILED
            paths = ts.tablets.paths(TABLET)
            before = _files(paths)
            assert not (await ts.service.on_delete_tablet(
                DeleteTablet(TABLET, cas_config_index=r.committed_config_index))).ok
            assert ts.tablets.state(TABLET) is None and TABLET not in ts.replicas
            after = _files(paths)  # nothing wiped or rewritten; a healthy WAL gets its footer
            assert after.keys() == before.keys()
            assert all(after[f].startswith(data) for f, data in before.items())
            sb = Superblock.load(paths.superblock, paths.disk)
            assert sb.data_state == DataState.READY and sb.tombstone_last_opid is None
            with pytest.raises(RpcError) as e:
                await create(ts, [ts.me])
            assert e.value.code == ErrorCode.ALREADY_EXISTS
        finally:
            await ts.stop()

    with probes.expect("replica.failed.while_running", "tablet.failed.forgotten"):
        asyncio.run(main())


async def _forgotten_with_damaged(root, damaged: str, lost: bool = False):
    """A server whose replica failed at start-up on a truncated (or, `lost`, deleted)
    superblock or consensus metadata (`damaged`) and was then deleted: forgotten, its files
    left as they were."""
    ts = await start_server(root)
    await create(ts, [ts.me])
    await sole_leader(ts)
    await write_rows(ts, 2, prefix="old")
    await ts.stop()
    path = getattr(ts.tablets.paths(TABLET), damaged)
    if lost:  # the simulator's damage fault: the file gone at a power loss
        path.unlink()
    else:  # or cut short
        path.write_bytes(path.read_bytes()[:43])
    ts = await start_server(root)
    assert ts.tablets.state(TABLET) == TabletState.FAILED
    assert not (await ts.service.on_delete_tablet(DeleteTablet(TABLET))).ok
    assert ts.tablets.state(TABLET) is None
    return ts, path


def test_a_copy_onto_a_forgotten_replica_whose_superblock_is_damaged_installs(tmp_path):
    """Found by the whole-stack simulator's follower-source copies (operator-copy bundle,
    seed 0): the copy's start, its abandonment after the source refused, and the votes a
    COPYING replica answers each loaded the damaged superblock and failed on it, so the
    operator saw an unexpected REMOTE_ERROR instead of the source's refusal, and no copy could
    ever land there. A damaged superblock proves no last OpId: the copy starts with it unknown,
    as over a forgotten replica's readable files."""
    from test_copy_guards import call_copy

    from node.protocol import StartTabletCopy

    async def main():
        dst, sb_path = await _forgotten_with_damaged(tmp_path / "dst", "superblock")
        src = await start_server(tmp_path / "src")
        empty = await start_server(tmp_path / "empty")
        try:
            with pytest.raises(RpcError) as e:  # a source without the tablet refuses
                await call_copy(dst, dst, StartTabletCopy(TABLET, empty.me, 1, "MISSING"))
            assert e.value.code != ErrorCode.REMOTE_ERROR and "TABLET_NOT_FOUND" in str(e.value), e.value
            assert len(sb_path.read_bytes()) == 43  # nothing was written: left as it was
            await create(src, [src.me])
            r = await sole_leader(src)
            await write_rows(src, 3, prefix="new")
            await call_copy(dst, dst, StartTabletCopy(TABLET, src.me, r.term, "MISSING"))
            assert dst.tablets.state(TABLET) == TabletState.RUNNING
            sb = Superblock.load(sb_path)
            assert sb.data_state == DataState.READY and sb.copied_from == src.me.uuid
            copied = dst.replicas[TABLET]  # the source's log, whole (no member: not applied)
            assert not copied.failed and copied.core.log.last_index() == r.core.log.last_index()
        finally:
            for ts in (dst, src, empty):
                await ts.stop()

    with probes.expect("copy.prepare.over_unreadable_superblock", "copy.install.completed"):
        asyncio.run(main())


@pytest.mark.parametrize("lost", [False, True], ids=["truncated", "deleted"])
def test_a_copy_onto_a_forgotten_replica_whose_consensus_metadata_is_damaged_is_refused(
        tmp_path, lost):
    """Its term and vote are lost: a copy merging into fresh metadata could vote twice in a
    term, so the copy is refused, clearly (ILLEGAL_STATE naming the file and the operator's
    tool), and the files stay. The deleted case is the whole-stack simulator's (swarm seed 76:
    a power loss lost the file, the masters replaced and deleted the FAILED replica, re-added
    the server, and its copy created fresh metadata: the replica forgot its vote in term 1)."""
    from test_copy_guards import call_copy

    from node.protocol import StartTabletCopy

    async def main():
        dst, cmeta_path = await _forgotten_with_damaged(tmp_path / "dst", "consensus_meta", lost)
        src = await start_server(tmp_path / "src")
        try:
            await create(src, [src.me])
            r = await sole_leader(src)
            with pytest.raises(RpcError) as e:
                await call_copy(dst, dst, StartTabletCopy(TABLET, src.me, r.term, "MISSING"))
            assert e.value.code == ErrorCode.ILLEGAL_STATE, e.value
            assert ("is gone" if lost else "does not read") in str(e.value)
            assert "votes it held are lost" in str(e.value) and "local-replica delete" in str(e.value)
            assert (not cmeta_path.exists() if lost else len(cmeta_path.read_bytes()) == 43)
            assert dst.tablets.state(TABLET) is None
        finally:
            for ts in (dst, src):
                await ts.stop()

    with probes.expect("copy.refused.votes_lost"):
        asyncio.run(main())


def test_a_failed_replica_whose_stop_fails_too_is_still_forgotten(tmp_path):
    """A replica that failed on its disk may fail again as it stops (closing its WAL writes a
    footer). The delete still forgets it, files left as they are, rather than answer the
    master with an error no guard handled and keep a stopped replica listed FAILED for ever."""

    async def main():
        ts, r = await _failed_while_running(tmp_path / "a")
        try:
            stop = r.stop

            async def failing_stop():
                await stop()
                raise OSError(28, "No space left on device")

            r.stop = failing_stop
            assert not (await ts.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            assert ts.tablets.state(TABLET) is None and TABLET not in ts.replicas
        finally:
            await ts.stop()

    with probes.expect("tablet.failed.forgotten", "tablet.failed.stop_failed"):
        asyncio.run(main())


def test_a_delete_of_a_replica_whose_superblock_was_lost_while_it_ran_fails_it_and_says_so(
        tmp_path):
    """A running replica's superblock loses its name (a file system check, a stray rm): the
    replica runs on from memory, and a delete cannot write its tombstone over a superblock it
    cannot read. The replica is FAILED and the caller told ILLEGAL_STATE with the cause; before,
    the FileNotFoundError went to the RPC layer as a handler failure (REMOTE_ERROR), found by
    the simulator's lost-files bundle. A second delete forgets the FAILED replica, its files
    left for an operator."""

    async def main():
        ts, _ = await sole_replica_with_rows(tmp_path / "a")
        try:
            paths = ts.tablets.paths(TABLET)
            paths.superblock.unlink()
            with probes.expect("tablet.tombstone.write_failed"), pytest.raises(RpcError) as e:
                await ts.rpc_client.call(ts.me.addr, "ts.delete_tablet", DeleteTablet(TABLET),
                                         Ack, to_uuid=ts.me.uuid, timeout=10.0)
            assert e.value.code == ErrorCode.ILLEGAL_STATE, e.value
            assert "cannot write the tombstone" in str(e.value), e.value
            assert ts.tablets.state(TABLET) == TabletState.FAILED
            assert not (await ts.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            assert ts.tablets.state(TABLET) is None and paths.wal_dir.exists()
        finally:
            await ts.stop()

    asyncio.run(main())
