"""ReadIndex reads that arrive together share one request to the core (node.replica.read_only.ReadOnly):
real replicas over the in-memory network of tests/replica_net.py."""

from __future__ import annotations

import asyncio
import functools

import pytest

from node.consensus import NotLeader
from node.errors import ReplicaError
from node.tablet.ops import Read, Write
from tests.replica_net import Net, open_session


def _count_read_index(r) -> list[bytes]:
    calls: list[bytes] = []
    real = r.core.read_index

    def counted(ctx):
        calls.append(ctx)
        return real(ctx)

    r.core.read_index = counted
    return calls


async def _leader_holding_k(net: Net, value: int):
    """The elected leader, once it committed k = value."""
    net.start()
    leader = await net.leader()
    session = await open_session(leader)
    await leader.write(Write("k", value), session=session, seq=1, acked_below=0)
    return leader


def test_reads_of_one_turn_share_one_request_and_each_sees_the_committed_write(tmp_path):
    async def main():
        net = Net(tmp_path)
        try:
            leader = await _leader_holding_k(net, 7)
            calls = _count_read_index(leader)
            results = await asyncio.gather(*(leader.read(Read("k")) for _ in range(50)))
            assert [r.value for r in results] == [7] * 50
            assert len(calls) == 1, "50 reads in one turn of the loop: one ReadIndex request"
            # A read that arrives after the group was handed to the core starts a new one.
            await leader.read(Read("k"))
            assert len(calls) == 2
            assert not leader.reads.groups and not leader.reads.round_sent, "nothing left behind"
        finally:
            await net.stop()

    asyncio.run(main())


def test_a_reader_that_gives_up_leaves_its_group_waiting(tmp_path):
    """The core holds the group's request; one reader's deadline passes, the other of its group
    is still waiting and is answered once the core takes the request. (Usually both readers
    share one request; if the driver hands the first group to the core before the second
    reader arrives, each has its own, and the patient one is still answered.)"""

    async def main():
        net = Net(tmp_path)
        try:
            leader = await _leader_holding_k(net, 1)
            real, held = leader.core.read_index, []
            leader.core.read_index = held.append
            impatient = asyncio.create_task(asyncio.wait_for(leader.read(Read("k")), 0.05))
            patient = asyncio.create_task(leader.read(Read("k")))
            with pytest.raises(TimeoutError):
                await impatient
            assert len(held) in (1, 2) and not patient.done()
            leader.core.read_index = real
            for ctx in held:
                leader._submit(functools.partial(real, ctx))
            assert (await asyncio.wait_for(patient, 10)).value == 1
        finally:
            await net.stop()

    asyncio.run(main())


def test_a_group_the_core_refuses_fails_its_readers_at_once(tmp_path):
    async def main():
        net = Net(tmp_path)
        net.start()
        try:
            leader = await net.leader()

            def refuse(ctx):
                raise NotLeader("not leader")

            leader.core.read_index = refuse
            with pytest.raises(ReplicaError, match="read refused"):
                await asyncio.wait_for(leader.read(Read("k")), 5)
            assert not leader.reads.groups and leader.reads.open_group is None
        finally:
            await net.stop()

    asyncio.run(main())
