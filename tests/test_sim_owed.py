"""The whole-stack simulator's watch on answers owed (harness.sim.stack_owed), on a real
replica: requests wait at a new leader's gate, the leader steps down, and the watch is asked
twice. With the gate as it is, they are refused at once and the watch says nothing; with a gate
that does not wake them (the code before the review's fix), it names them."""

from __future__ import annotations

import asyncio

import pytest

from harness.sim.stack_owed import Owed
from node.consensus import Role
from node.replica.leader_gate import LeaderGate
from tests.test_replica_owed_answers import (
    ANSWERED_S,
    Unacknowledged,
    waiting_at_a_new_leaders_gate,
)


async def _stepped_down(leader) -> None:
    for _ in range(ANSWERED_S * 100):
        if leader.role != Role.LEADER:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the leader never stepped down")


async def _watched(tmp_path) -> list[str | None]:
    """What the watch says of a new leader's gate: while it leads with requests waiting, then
    at two checks after it stepped down."""
    net = Unacknowledged(tmp_path)
    net.start()
    try:
        leader, write, read = await waiting_at_a_new_leaders_gate(net)
        watch, key = Owed(), ("h1", leader.tablet_id)
        said = [watch.left_waiting(*key, leader, 1.0)]
        await _stepped_down(leader)
        await asyncio.sleep(0)  # a woken waiter runs in the loop's next turn
        said += [watch.left_waiting(*key, leader, 2.0), watch.left_waiting(*key, leader, 2.1)]
        for task in (write, read):
            task.cancel()
        await asyncio.gather(write, read, return_exceptions=True)
        return said
    finally:
        await net.stop()


def test_a_gate_that_wakes_its_waiters_owes_nothing(tmp_path):
    assert asyncio.run(_watched(tmp_path)) == [None, None, None]


def test_requests_left_at_the_gate_of_a_replica_that_stepped_down_are_named(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setattr(LeaderGate, "lost", lambda self: self._open.clear())  # wakes no one
    leading, first, second = asyncio.run(_watched(tmp_path))
    assert leading is None and first is None  # still leading, then first seen owing
    assert second is not None and "answer owed: 2 request(s)" in second
    assert "no longer leads" in second


@pytest.mark.parametrize("state, why", [("failed", "it failed"), ("stopping", "is stopping")])
def test_a_failed_or_stopping_replica_owes_its_waiters_too(state, why):
    class Replica:  # what the watch reads of a replica
        uuid, role, term, failed, stopping = "u", Role.LEADER, 3, None, False
        gate = LeaderGate()

    r = Replica()
    r.gate.waiting = 1
    setattr(r, state, "disk gone" if state == "failed" else True)
    watch = Owed()
    assert watch.left_waiting("h", "t", r, 1.0) is None
    assert why in watch.left_waiting("h", "t", r, 1.1)
    r.gate.waiting = 0  # answered: forgotten
    assert watch.left_waiting("h", "t", r, 1.2) is None
