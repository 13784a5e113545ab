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
from node.protocol import DeleteTablet
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


def test_a_replica_that_failed_while_running_is_not_tombstoned_by_a_delete(tmp_path):
    """The master replaces a replica reporting FAILED and then deletes it with its config guard:
    a replica that failed at run time must keep its WAL and data as one that failed at start-up
    does, not lose them to a tombstone (the evidence of why it failed is in them)."""

    async def main():
        ts, r = await sole_replica_with_rows(tmp_path / "a")
        try:

            def boom():
                raise OSError(5, "fsync failed: Input/output error")

            r._submit(boom)
            await wait_for(lambda: r.failed, "the replica to fail")
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
