"""A removal that would leave no live majority is refused (Kudu's SafeToEvict), on real tablet
servers over loopback. Found by the harness under `--nemesis all`: one replica's WAL was damaged
(its tablet FAILED, so it answered nothing), then the membership fault removed a running
replica; the new config {failed, leader} could never commit, and the tablet never had a leader
again. The convergence check now fails such a tablet; this test holds the engine to refusing
the removal in the first place."""

from __future__ import annotations

import asyncio

import pytest
from tserver_helpers import TABLET, create_on_all, start_server, wait_for, write_rows

from node import probes
from node.protocol import ChangeConfig
from node.rpc import ErrorCode, RpcError


def test_removing_a_live_replica_beside_a_silent_one_is_refused_and_the_tablet_keeps_serving(
        tmp_path):
    async def main():
        servers = [await start_server(tmp_path / n) for n in "abc"]
        try:
            leader = await create_on_all(servers)
            await write_rows(leader, 3)
            silent, live = [s for s in servers if s is not leader]
            await silent.stop()
            core = leader.replicas[TABLET].core
            # two check-quorum rounds: the leader has not heard from `silent` in either
            await asyncio.sleep(3 * core.cfg.election_timeout_ticks * 0.010)
            cas = leader.replicas[TABLET].committed_config_index
            with (probes.expect("raft.config_change.refused_unsafe_removal"),
                  pytest.raises(RpcError) as e):
                # accepted, it would wait forever for a commit: a timeout fails the test
                await asyncio.wait_for(leader.service.on_change_config(
                    ChangeConfig(TABLET, "remove", live.me, cas)), 10)
            assert e.value.code == ErrorCode.ILLEGAL_STATE and "UnsafeChange" in str(e.value)
            assert "only 1 of the 2 remaining voters" in str(e.value)
            await write_rows(leader, 3, prefix="after")  # the quorum {leader, live} still commits
            # removing the silent one is safe: {leader, live} both answer
            await leader.service.on_change_config(ChangeConfig(TABLET, "remove", silent.me, cas))
            await wait_for(lambda: set(leader.replicas[TABLET].committed_members())
                           == {leader.me.uuid, live.me.uuid}, "the removal to commit")
        finally:
            for s in servers:
                await s.stop()

    asyncio.run(main())
