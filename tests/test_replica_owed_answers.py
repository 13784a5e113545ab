"""A replica that stops or fails answers everything its driver had not run yet, at once and for
certain (node.replica.inbox, node.replica.leader_gate): a write it never proposed did not happen, so its caller may try
elsewhere, and a request or read it never served is refused. A write it proposed may still be
committed by the next leader, and says so. Before, those callers got no answer: each waited
out its RPC deadline and recorded a write that never reached any log as "maybe applied"."""

from __future__ import annotations

import asyncio
import errno

import pytest

from node import probes
from node.consensus import Role
from node.consensus.messages import AppendResponse, HeartbeatResponse
from node.errors import ReplicaError
from node.tablet.ops import Batch, Read, Write
from tests.replica_net import Net, read_waiting_for_next_entry
from tests.test_replica_lifecycle import leading_with_session, single_replica

ANSWERED_S = 5  # real seconds: an answer comes in the same turn; none would come at all before


class Calls:
    """Done callbacks that record their answers."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple] = {}

    def done(self, name: str):
        return lambda result, error: self.answers.setdefault(name, (result, error))

    async def all_of(self, *names: str) -> None:
        for _ in range(ANSWERED_S * 100):
            if all(n in self.answers for n in names):
                return
            await asyncio.sleep(0.01)
        missing = [n for n in names if n not in self.answers]
        raise AssertionError(f"never answered: {missing}")

    def refused(self, name: str, maybe_applied: bool = False) -> str:
        result, error = self.answers[name]
        assert result is None and isinstance(error, ReplicaError), (name, result, error)
        assert error.maybe_applied is maybe_applied, (name, error)
        return str(error)


def hold_next_ready(r) -> asyncio.Event:
    """The driver's next Ready waits for the returned gate: what is handed in meanwhile stays
    in the inbox, unrun."""
    gate, real = asyncio.Event(), r._handle

    async def held(rd):
        await gate.wait()
        await real(rd)

    r._handle = held
    return gate


def test_a_stopping_replica_refuses_what_it_never_ran_and_says_a_proposed_write_may_apply(
        tmp_path):
    async def main():
        r = single_replica(tmp_path)
        session = await leading_with_session(r)
        calls = Calls()
        hold_next_ready(r)
        r.submit(Write("k", "proposed"), session, 1, 0, calls.done("proposed"))
        for _ in range(100):  # the driver proposes it, then holds its Ready
            if r._waiters:
                break
            await asyncio.sleep(0.01)
        assert r._waiters, "the first write was not proposed"
        r.submit(Write("k", "a"), session, 2, 0, calls.done("a"))  # one group, unrun
        r.submit(Write("k", "b"), session, 3, 0, calls.done("b"))
        r.submit(Batch((Write("k", "c"),)), session, 4, 0, calls.done("batch"))
        awaited = asyncio.create_task(r.write(Write("k", "d"), session=session, seq=5,
                                              acked_below=0))
        stepping = asyncio.create_task(r.step_down(None))
        await asyncio.sleep(0.05)  # both handed in, behind the held Ready
        with probes.expect("replica.inbox.refused_unrun"):
            await r.stop()
            await calls.all_of("proposed", "a", "b", "batch")
        assert "shutting down" in calls.refused("proposed", maybe_applied=True)
        for name in ("a", "b", "batch"):
            assert "shutting down" in calls.refused(name)
        for task in (awaited, stepping):
            with pytest.raises(ReplicaError) as e:
                await asyncio.wait_for(task, ANSWERED_S)
            assert not e.value.maybe_applied
        # and what comes after is refused at once
        with pytest.raises(ReplicaError, match="shutting down"):
            r.submit(Write("k", "e"), session, 6, 0, calls.done("late"))

    asyncio.run(main())


def test_a_failing_replica_refuses_the_writes_behind_the_failure(tmp_path):
    async def main():
        r = single_replica(tmp_path)
        session = await leading_with_session(r)
        calls = Calls()
        r.fail(OSError(errno.EIO, "fsync failed"))  # run first in the driver's next turn
        r.submit(Write("k", "a"), session, 1, 0, calls.done("a"))
        r.submit(Batch((Write("k", "b"),)), session, 2, 0, calls.done("batch"))
        await calls.all_of("a", "batch")
        assert r.failed
        for name in ("a", "batch"):
            assert "replica failed" in calls.refused(name)
        await r.stop()

    asyncio.run(main())


def test_a_read_waiting_to_apply_is_refused_when_the_replica_stops(tmp_path):
    async def main():
        r = single_replica(tmp_path)
        await leading_with_session(r)
        reading = await read_waiting_for_next_entry(r)
        await r.stop()
        with pytest.raises(ReplicaError, match="shutting down"):
            await asyncio.wait_for(reading, ANSWERED_S)

    asyncio.run(main())


class Unacknowledged(Net):
    """Votes flow and acknowledgements of appends and heartbeats do not: a leader is elected
    but never applies an entry of its term (so is never ready), and check-quorum then steps it
    down."""

    def _sender(self, src):
        def send(dst, messages):
            messages = [m for m in messages
                        if not isinstance(m, (AppendResponse, HeartbeatResponse))]
            if messages and dst in self.replicas:
                self.replicas[dst].step(messages)
        return send


async def waiting_at_a_new_leaders_gate(net: Net):
    """A leader not ready yet, and a write and a read waiting for it to be (what the tablet
    server does with a request that reaches such a leader)."""
    for _ in range(ANSWERED_S * 100):
        leader = next((r for r in net.replicas.values()
                       if r.role == Role.LEADER and not r.leader_ready), None)
        if leader is not None:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("no leader elected")
    write = asyncio.create_task(leader.write(Write("k", 1), session=1, seq=1, acked_below=0))
    read = asyncio.create_task(leader.read(Read("k")))
    await asyncio.sleep(0)
    assert not write.done() and not read.done()
    return leader, write, read


async def refused_at_once(*tasks: asyncio.Task) -> list[ReplicaError]:
    """Each task's refusal; never maybe applied, since nothing reached a log."""
    errors = []
    for task in tasks:
        with pytest.raises(ReplicaError) as e:
            await asyncio.wait_for(task, ANSWERED_S)
        assert not e.value.maybe_applied
        errors.append(e.value)
    return errors


def test_requests_waiting_for_a_new_leader_are_refused_when_it_steps_down(tmp_path):
    """Before, nothing woke them: each waited out its RPC deadline and a write that reached no
    log was recorded as maybe applied, where NOT_LEADER was known at the step-down."""
    async def main():
        net = Unacknowledged(tmp_path)
        net.start()
        try:
            with probes.expect("replica.leader_gate.waiter_refused"):
                leader, write, read = await waiting_at_a_new_leaders_gate(net)
                for error in await refused_at_once(write, read):
                    assert "not the leader" in str(error)
            assert leader.role != Role.LEADER
        finally:
            await net.stop()

    asyncio.run(main())


def test_requests_waiting_for_a_new_leader_are_refused_when_it_stops(tmp_path):
    async def main():
        net = Unacknowledged(tmp_path)
        net.start()
        try:
            leader, write, read = await waiting_at_a_new_leaders_gate(net)
            await leader.stop()
            for error in await refused_at_once(write, read):
                assert "shutting down" in str(error)
        finally:
            await net.stop()

    asyncio.run(main())


def test_requests_waiting_for_a_new_leader_are_refused_as_soon_as_it_starts_stopping(tmp_path):
    """A stop waits for any save still running in a thread (a slow disk can hold one for
    seconds); the gate's waiters are refused when the stop begins, not when it ends."""
    async def main():
        net = Unacknowledged(tmp_path)
        net.start()
        try:
            leader, write, read = await waiting_at_a_new_leaders_gate(net)
            save = asyncio.get_running_loop().create_future()  # a save still in its thread
            leader._threads.add(save)
            save.add_done_callback(leader._threads.discard)
            stopping = asyncio.create_task(leader.stop())
            try:
                for error in await refused_at_once(write, read):
                    assert "shutting down" in str(error)
                assert not stopping.done()  # the stop still waits for the save
            finally:
                save.set_result(None)  # the save ends; so does the stop
                await stopping
        finally:
            await net.stop()

    asyncio.run(main())
