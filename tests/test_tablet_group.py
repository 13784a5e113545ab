"""Group entries: the single row ops a leader takes in one turn of its driver are
replicated as ONE entry, and each is applied exactly as the command it would have been alone.

The oracle for the state machine is the old path itself: the same members applied as one
Group entry and as one entry each (at the same timestamp) must give the same results, rows and
session records, whatever the sessions, seqs (repeats and stale ones included) and ops. On
real tablet servers: writes submitted in one turn take one log index and each gets its own
answer, the followers apply the group to the same state, a lone write stays a plain command,
and a group too large for one entry is proposed op by op."""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tablet_state import Log
from tserver_helpers import (
    TABLET,
    create,
    create_on_all,
    sole_leader,
    start_server,
    ts_write,
    wait_for,
)

from node.entry import Entry, EntryType
from node.protocol import Write
from node.replica.replica import MAX_GROUP
from node.rpc.wire import ENVELOPE_RESERVE, MIN_MAX_FRAME
from node.tablet.ops import (
    Append,
    Cas,
    Group,
    Member,
    MicroOp,
    OpenSession,
    Rejection,
    Txn,
    decode_command,
    encode_command,
)
from node.tablet.ops import Write as Put
from node.tablet.state import Limits

KEYS = ["a", "b", "l"]
ops = st.one_of(
    st.builds(Put, st.sampled_from(KEYS), st.integers(0, 3)),
    st.builds(Cas, st.sampled_from(KEYS), st.one_of(st.none(), st.integers(0, 3)), st.integers(0, 3)),
    st.builds(Append, st.sampled_from(KEYS), st.integers(0, 3)),
    st.builds(lambda k, v: Txn([MicroOp("r", k), MicroOp("w", k, v)]), st.sampled_from(KEYS),
              st.integers(0, 3)),
)


def _two_logs(limits):
    """Two state machines with the same three sessions open (ids 1, 2, 3)."""
    logs = [Log(limits), Log(limits)]
    for log in logs:
        for _ in range(3):
            log.session()
    return logs


def _apply_group(log, members, timestamp):
    log.index += 1
    payload = encode_command(Group(members), timestamp=timestamp)
    return log.sm.apply(Entry(2, log.index, EntryType.REPLICATE, payload))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from([1, 2, 3, 99]), st.integers(0, 8), ops,
                                   st.integers(0, 6)), min_size=1, max_size=12),
                min_size=1, max_size=4),
       st.booleans(), st.integers(0, 8))
def test_a_group_applies_exactly_as_its_members_applied_one_entry_each(groups, tight, ack_gap):
    """99 is a session nobody opened (NO_SESSION); seqs repeat within and across groups (first
    results come back), and acked_below forgets results (STALE_SEQ); with `tight` a session
    keeps only two results, so the bound evicts between members of one group too. Seq 0 means
    the session's next fresh seq (acknowledging up to `ack_gap` below it), so whole groups of
    first attempts, the one-pass path, come up as often as retries do."""
    limits = Limits(max_results_per_session=2) if tight else Limits()
    grouped, alone = _two_logs(limits)
    top: dict[int, int] = {}
    for g, members in enumerate(groups):
        ts = 100 + g
        batch = []
        for s, seq, op, acked in members:
            if seq == 0:
                seq = top.get(s, 8) + 1
                acked = max(0, seq - ack_gap)
            top[s] = max(top.get(s, 8), seq)
            batch.append(Member(op, s, seq, acked))
        got = _apply_group(grouped, batch, ts)
        want = [alone.apply(m.session, m.seq, m.op, acked_below=m.acked_below, timestamp=ts)
                for m in batch]
        assert got == want
    assert grouped.sm.data == alone.sm.data
    assert grouped.sm.sessions == alone.sm.sessions  # OrderedDicts: the LRU order too
    assert {k: v for k, v in grouped.sm._seqs.items() if v} == \
        {k: v for k, v in alone.sm._seqs.items() if v}
    for sid, session in grouped.sm.sessions.items():  # no seq outlives its result
        assert sorted(session.results) == grouped.sm._seqs.get(sid, sorted(session.results))


def test_a_group_of_first_attempts_takes_the_one_pass_path(monkeypatch):
    """Interleaved members of two sessions, every seq fresh: `_fresh_group` applies them, with
    the same results, rows and records as member by member (the test above holds that in
    general); one stale member sends the whole group member by member."""
    from node.tablet.state import StateMachine

    calls = []
    real = StateMachine._fresh_group
    monkeypatch.setattr(StateMachine, "_fresh_group",
                        lambda self, *a: calls.append(len(a[0])) or real(self, *a))
    grouped, alone = _two_logs(Limits(max_results_per_session=3))
    batch = [Member(Put(k, i), s, seq, max(0, seq - 2))
             for i, (k, s, seq) in enumerate([("a", 1, 1), ("b", 2, 1), ("a", 1, 2),
                                              ("l", 2, 2), ("b", 1, 3), ("a", 2, 3)])]
    assert _apply_group(grouped, batch, 7) == [
        alone.apply(m.session, m.seq, m.op, acked_below=m.acked_below, timestamp=7) for m in batch]
    assert calls == [6]
    stale = [Member(Put("a", 9), 1, 4, 2), Member(Put("b", 9), 1, 1, 2)]
    assert _apply_group(grouped, stale, 8) == [
        alone.apply(m.session, m.seq, m.op, acked_below=m.acked_below, timestamp=8) for m in stale]
    assert calls == [6]
    # A member that acknowledges past a later member's seq forgets it, member by member: the
    # later one is STALE_SEQ, so this group is not one of first attempts either.
    ahead = [Member(Put("l", 1), 3, 3, 6), Member(Put("l", 2), 3, 5, 0)]
    got = _apply_group(grouped, ahead, 9)
    assert got == [alone.apply(m.session, m.seq, m.op, acked_below=m.acked_below, timestamp=9)
                   for m in ahead]
    assert got[1].error == Rejection.STALE_SEQ and calls == [6]
    assert (grouped.sm.data, grouped.sm.sessions) == (alone.sm.data, alone.sm.sessions)


def test_a_group_survives_the_payload_round_trip_and_refuses_to_be_empty():
    members = [Member(Put("k", 1), 3, 4, 2), Member(Append("l", "x"), 5, 1)]
    command = decode_command(encode_command(Group(members), timestamp=9))
    assert command.op == Group(members) and command.timestamp == 9
    with pytest.raises(ValueError, match="at least one member"):
        Group([])


def _submit_all(r, session, writes):
    """Submit every write in this same turn of the loop (no await between): futures of their
    (result, error)."""
    loop = asyncio.get_running_loop()
    futs = []
    for seq, op in writes:
        fut = loop.create_future()
        r.submit(op, session, seq, 0, lambda res, err, fut=fut: fut.set_result((res, err)))
        futs.append(fut)
    return futs


def test_writes_of_one_turn_take_one_entry_each_answered_and_the_followers_agree(tmp_path):
    async def main():
        servers = [await start_server(tmp_path / n, clock_max_error_us=0) for n in "abc"]
        try:
            leader = await create_on_all(servers)
            r = leader.replicas[TABLET]
            session = (await ts_write(leader, Write(TABLET, OpenSession()))).result.value
            before = r.core.log.last_index()
            n = MAX_GROUP + 3
            writes = [(i + 1, Append("l", i) if i % 5 else Put(f"k{i}", i)) for i in range(n)]
            answers = await asyncio.gather(*_submit_all(r, session, writes))
            assert all(err is None for _, err in answers)
            results = [res for res, _ in answers]
            assert all(res.ok for res in results)
            assert r.state.data["l"] == [i for i in range(n) if i % 5]  # applied in order
            entries = r.core.log.slice(before + 1, r.core.log.last_index() + 1)
            assert len(entries) == 2  # MAX_GROUP ops, then the 3 that did not fit
            groups = [decode_command(e.payload).op for e in entries]
            assert [len(g.members) for g in groups] == [MAX_GROUP, 3]
            assert [m.seq for g in groups for m in g.members] == [seq for seq, _ in writes]
            stamps = {res.timestamp for res in results if res.ok}
            assert len(stamps) == 2  # one hybrid time per entry
            await wait_for(lambda: all(s.replicas[TABLET].state.last_applied_index
                                       == r.state.last_applied_index for s in servers),
                           "the followers to apply the groups")
            for s in servers:
                assert s.replicas[TABLET].state.data == r.state.data
                assert s.replicas[TABLET].state.sessions == r.state.sessions

            # a lone write stays the plain command it always was
            (res, err), = await asyncio.gather(*_submit_all(r, session, [(n + 1, Put("z", 1))]))
            assert err is None and res.ok
            last = r.core.log.slice(r.core.log.last_index(), r.core.log.last_index() + 1)[0]
            assert decode_command(last.payload).op == Put("z", 1)
        finally:
            for s in servers:
                await s.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_group_too_large_for_one_entry_is_proposed_op_by_op(tmp_path):
    async def main():
        ts = await start_server(tmp_path / "a", clock_max_error_us=0,
                                rpc_max_message_size=MIN_MAX_FRAME)
        try:
            await create(ts, [ts.me])
            r = await sole_leader(ts)
            session = (await ts_write(ts, Write(TABLET, OpenSession()))).result.value
            big = (MIN_MAX_FRAME - ENVELOPE_RESERVE) // 2 + 1024  # two do not fit one entry
            before = r.core.log.last_index()
            answers = await asyncio.gather(*_submit_all(
                r, session, [(1, Put("x", "x" * big)), (2, Put("y", "y" * big))]))
            assert all(err is None and res.ok for res, err in answers)
            entries = r.core.log.slice(before + 1, r.core.log.last_index() + 1)
            assert [decode_command(e.payload).op.key for e in entries] == ["x", "y"]
        finally:
            await ts.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
