"""A FAILED replica that is deleted leaves its files for an operator; a later CreateTablet must
not bring them back under a fresh superblock (issue 32: the simulator's tombstone fault deleted
a replica FAILED by a flipped superblock bit, the master's create then ran its old WAL again,
and the tombstone invariant flagged the resurrection at swarm seed 145). Real tablet server on
loopback, real files."""

from __future__ import annotations

import asyncio

import pytest
from tserver_helpers import TABLET, create, sole_leader, start_server, write_rows

from node.protocol import DeleteTablet
from node.rpc import ErrorCode, RpcError
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
