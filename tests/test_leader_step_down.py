"""Kudu's LeaderStepDown over real RPC between tablet servers on loopback: a graceful transfer
makes the named voter leader in a later term, an abrupt one leaves the tablet to elect, and a
follower or a non-voter target is refused with a clear error."""

from __future__ import annotations

import asyncio

import pytest
from tserver_helpers import TABLET, create, start_server, wait_for, write_rows

from node.consensus import Role
from node.protocol import Ack, LeaderStepDown
from node.rpc import ErrorCode, RpcError


async def step_down(caller, target, req: LeaderStepDown) -> Ack:
    return await caller.rpc_client.call(target.me.addr, "consensus.leader_step_down", req, Ack,
                                        to_uuid=target.me.uuid, timeout=10.0)


def _leader(servers):
    return next((s for s in servers if s.replicas[TABLET].leader_ready), None)


def test_graceful_and_abrupt_step_down_move_leadership(tmp_path):
    async def main():
        servers = [await start_server(tmp_path / n) for n in "abc"]
        try:
            peers = [s.me for s in servers]
            for s in servers:
                await create(s, peers)
            old = await wait_for(lambda: _leader(servers), "a leader", timeout=15)
            await write_rows(old, 2)
            term = old.replicas[TABLET].term
            follower = next(s for s in servers if s is not old)
            with pytest.raises(RpcError) as e:
                await step_down(old, follower, LeaderStepDown(TABLET, old.me.uuid))
            assert e.value.code == ErrorCode.NOT_LEADER
            with pytest.raises(RpcError) as e:
                await step_down(follower, old, LeaderStepDown(TABLET, "no-such-voter"))
            assert e.value.code == ErrorCode.ILLEGAL_STATE and "not a voter" in str(e.value)

            await step_down(follower, old, LeaderStepDown(TABLET, follower.me.uuid))
            await wait_for(lambda: follower.replicas[TABLET].leader_ready, "the named voter to lead",
                           timeout=15)
            assert follower.replicas[TABLET].term > term
            # The successor may win on the third voter's vote before the old leader has read a
            # message of the new term: it leads on (its proposals refused) until it does.
            await wait_for(lambda: old.replicas[TABLET].role != Role.LEADER,
                           "the old leader to hear of the later term", timeout=15)

            term = follower.replicas[TABLET].term
            await step_down(old, follower, LeaderStepDown(TABLET))
            new = await wait_for(lambda: (s := _leader(servers)) and s.replicas[TABLET].term > term
                                 and s, "a leader of a later term", timeout=20)
            await write_rows(new, 1, prefix="after")
        finally:
            for s in servers:
                await s.stop()

    asyncio.run(main())
