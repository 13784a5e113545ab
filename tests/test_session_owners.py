"""A session belongs to the identity that opened it (README "Security").

Session ids are small and guessable (the OpenSession entry's log index), and a user's
certificate used to reach any session: another user could write into seqs the owner had not
used yet, so the owner's coming writes were answered from those results and never applied, or
close everyone's sessions, or flood the table so everyone's dedup records were evicted. The
owner is the identity the leader's RPC layer authenticated (Command.owner), replicated with the
command, so every replica refuses the same ops."""

from __future__ import annotations

from node import probes
from node.entry import Entry, EntryType
from node.tablet.ops import (
    Batch,
    CloseSession,
    Group,
    Member,
    OpenSession,
    Read,
    Rejection,
    Write,
    encode_command,
)
from node.tablet.state import Limits, StateMachine


class Log:
    def __init__(self, limits: Limits | None = None):
        self.sm = StateMachine("t", limits)
        self.index = 0

    def apply(self, op, owner="", session=0, seq=0):
        self.index += 1
        payload = encode_command(op, session=session, seq=seq, owner=owner)
        return self.sm.apply(Entry(2, self.index, EntryType.REPLICATE, payload))

    def open(self, owner):
        return self.apply(OpenSession(), owner).value

    def read(self, key):
        return self.sm.query(Read(key)).value


def test_another_identity_cannot_write_close_or_batch_into_a_session():
    log = Log()
    alice = log.open("alice")
    with probes.expect("tablet.session.not_owner"):
        refused = log.apply(Write("k", "mallory"), "mallory", alice, 1)
    assert refused.error == Rejection.NOT_OWNER and log.read("k") is None
    batch = log.apply(Batch([Write(f"m{i}", i) for i in range(5)]), "mallory", alice, 1)
    assert [r.error for r in batch] == [Rejection.NOT_OWNER] * 5
    assert log.apply(CloseSession(), "mallory", alice, 2).error == Rejection.NOT_OWNER
    # the owner's own seqs 1 and 2 were left untouched: they apply, nothing answered from a
    # result the intruder left there
    assert log.apply(Write("k", "alice"), "alice", alice, 1).ok and log.read("k") == "alice"
    assert log.apply(Write("k", "alice-2"), "alice", alice, 2).ok and log.read("k") == "alice-2"
    assert log.apply(CloseSession(), "alice", alice, 3).ok
    assert log.apply(Write("k", "x"), "alice", alice, 4).error == Rejection.NO_SESSION


def test_a_group_refuses_only_its_members_in_sessions_of_another_identity():
    log = Log()
    alice, mallory = log.open("alice"), log.open("mallory")
    results = log.apply(Group([Member(Write("a", 1), alice, 1, 0, "alice"),
                               Member(Write("b", 2), alice, 2, 0, "mallory"),
                               Member(Write("c", 3), mallory, 1, 0, "mallory")]))
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].error == Rejection.NOT_OWNER
    assert (log.read("a"), log.read("b"), log.read("c")) == (1, None, 3)
    assert log.apply(Write("b", 9), "alice", alice, 2).ok and log.read("b") == 9


def test_one_identity_flooding_opens_evicts_only_its_own_sessions():
    log = Log(Limits(max_sessions=1024, max_sessions_per_owner=8))
    alice = log.open("alice")
    assert log.apply(Write("k", 1), "alice", alice, 1).ok
    flood = [log.open("mallory") for _ in range(50)]
    mine = [s for s in log.sm.sessions.values() if s.owner == "mallory"]
    assert [s.session_id for s in mine] == flood[-8:]  # its newest 8, the rest evicted
    assert alice in log.sm.sessions
    assert log.apply(Write("k", 1), "alice", alice, 1) == log.sm.sessions[alice].results[1]


def test_owners_survive_a_snapshot_and_unauthenticated_callers_share_one_pool():
    log = Log(Limits(max_sessions=4, max_sessions_per_owner=2))
    alice = log.open("alice")
    again = StateMachine.from_snapshot(log.sm.snapshot())
    assert again.sessions[alice].owner == "alice"
    anon = [log.open("") for _ in range(3)]  # "" is not bounded per owner, only in all
    assert [s for s in anon if s in log.sm.sessions] == anon
    log.open("")
    assert alice not in log.sm.sessions  # the table's own bound: least recently used first
