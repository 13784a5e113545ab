"""A follower within its vote lease drops a late answer of a higher term (a VoteResponse,
AppendResponse or HeartbeatResponse) instead of taking its term.

Taking the term cleared `lead`, and with it the vote withholding (`_in_lease`), with no tick
passed: a refusal of a pre-vote the follower sent before it went back to its leader, arriving
after it acknowledged the leader's read round, let it grant a real vote in that term at once.
A new leader was elected while the old one still served lease reads resting on that
acknowledgement: stale reads. A restart's withholding (`boot_withhold_ticks`) was lost the same
way. A follower asked nothing that needs the answer: it learns the new term from the candidate
once its lease is out, or from the new leader."""

from __future__ import annotations

import random

import pytest

from harness.sim.script import ScriptCluster
from node import probes
from node.consensus import (
    AppendEntries,
    AppendResponse,
    CoreConfig,
    HardState,
    Heartbeat,
    HeartbeatResponse,
    Member,
    MemberType,
    PersistedState,
    RaftConfig,
    RaftCore,
    Role,
    VoteRequest,
    VoteResponse,
)
from node.replica.read_only import leader_lease_s

CONFIG3 = RaftConfig(0, tuple(Member(u, MemberType.VOTER) for u in ("n1", "n2", "n3")))
DROPPED = "raft.step.stale_answer_dropped_in_lease"


def _take(c: ScriptCluster, src: str, dst: str, typ: type):
    """Take the first queued `typ` from src to dst out of the queue: it is delayed."""
    for pos, (s, m) in enumerate(c.queue):
        if s == src and m.to_uuid == dst and isinstance(m, typ):
            del c.queue[pos]
            return m
    raise AssertionError(f"no {typ.__name__} {src}->{dst} queued: {c.queue}")


def _tick_until(c: ScriptCluster, uuid: str, role: Role) -> None:
    for _ in range(200):
        if c.core(uuid).role == role:
            return
        c.tick(uuid)
    raise AssertionError(f"{uuid} never became {role}")


def _core(hard: HardState) -> RaftCore:
    core = RaftCore(CoreConfig("n2"), random.Random(1), PersistedState(hard, CONFIG3))
    _drain(core)
    return core


def _drain(core: RaftCore) -> list:
    out = []
    while core.has_ready():
        rd = core.ready()
        core.advance(rd)
        out.extend(rd.messages)
    return out


def _granted(msgs: list) -> list:
    return [m for m in msgs if isinstance(m, VoteResponse) and m.granted]


def test_late_prevote_refusal_does_not_let_a_new_leader_in_under_the_lease():
    c = ScriptCluster()
    c.elect("n1")
    c.stabilize()
    assert c.core("n1").role == Role.LEADER and c.core("n1").term == 1
    c.isolate("n1")  # n1 is cut off for a while (it does not tick: it stays leader)
    n2, n3 = c.core("n2"), c.core("n3")
    c.tick("n2", n2.vote_lease_ticks())  # n2's lease on n1 has run out (not yet its timeout)
    assert n2.role == Role.FOLLOWER
    _tick_until(c, "n3", Role.PRE_CANDIDATE)  # n3 pre-votes for term 2: n2 grants
    c.deliver(src="n3", dst="n2", types=VoteRequest, limit=1)
    c.deliver(src="n2", dst="n3", types=VoteResponse, limit=1)
    assert n3.role == Role.CANDIDATE and n3.term == 2
    held_vote_req = _take(c, "n3", "n2", VoteRequest)  # the real vote request is delayed
    assert not held_vote_req.pre_vote
    # n2 times out too and pre-votes for term 2; n3 (a candidate in term 2) refuses: delayed
    _tick_until(c, "n2", Role.PRE_CANDIDATE)
    c.deliver(src="n2", dst="n3", types=VoteRequest, limit=1)
    held_refusal = _take(c, "n3", "n2", VoteResponse)
    assert held_refusal.term == 2 and held_refusal.pre_vote and not held_refusal.granted
    c.queue.clear()
    c.heal()
    # n1 (still leader of term 1) confirms a read: n2 acknowledges its round
    c.do("n1", "read_index", b"r1")
    c.deliver(src="n1", dst="n2", types=Heartbeat, limit=1)
    assert n2.role == Role.FOLLOWER and n2.lead == "n1" and n2.term == 1
    c.deliver(src="n2", dst="n1", types=HeartbeatResponse, limit=1)
    assert [rs.ctx for rs in c.read_states["n1"]] == [b"r1"]
    c.queue = [(s, m) for s, m in c.queue if s != "n1"]  # n1's later messages are slow
    # the lease n1 now holds (replica.read_only): positive, and n2 has not ticked since its ack
    assert leader_lease_s(c.core("n1").voters_lease_ticks(), 100, 0.05) > 0.5
    assert n2.election_elapsed == 0
    # the delayed refusal arrives, then the delayed vote request: no tick passes on n2
    with probes.expect(DROPPED):
        c.do("n2", "step", held_refusal)
    assert (n2.term, n2.lead) == (1, "n1")
    c.do("n2", "step", held_vote_req)
    c.deliver(src="n2", dst="n3", types=VoteResponse)
    assert c.core("n1").role == Role.LEADER and c.core("n1").lease_reads_allowed()
    assert n3.role != Role.LEADER, (
        f"n3 elected leader of term {n3.term} with n2's vote, n2 having acknowledged n1's read "
        f"round {n2.election_elapsed} ticks ago (vote lease {n2.vote_lease_ticks()} ticks): "
        f"n1 still serves lease reads")


def test_late_prevote_refusal_after_acknowledging_a_round_keeps_the_vote_withheld():
    """The same on one core with hand-built messages: a follower that just answered its
    leader's heartbeat gets a late refusal of its pre-vote, then a real vote request."""
    core = _core(HardState())
    core.step(AppendEntries(1, "n1", "n2", 0, 0, (), 0, 1))
    _drain(core)
    while core.role != Role.PRE_CANDIDATE:  # n1 went quiet: n2 pre-votes for term 2
        core.tick()
        _drain(core)
    core.step(Heartbeat(1, "n1", "n2", 0, b"read-ctx"))  # n1 is back: n2 acknowledges its round
    assert any(isinstance(m, HeartbeatResponse) for m in _drain(core))
    with probes.expect(DROPPED):
        core.step(VoteResponse(2, "n3", "n2", False, True))  # n3's late refusal of that pre-vote
    _drain(core)
    assert (core.term, core.lead, core.role) == (1, "n1", Role.FOLLOWER)
    core.step(VoteRequest(2, "n3", "n2", 0, 0))  # no tick since the acknowledgement
    assert not _granted(_drain(core)), (
        f"vote granted to n3 for term 2 {core.election_elapsed} ticks after acknowledging n1 "
        f"(vote lease {core.vote_lease_ticks()} ticks)")


@pytest.mark.parametrize("answer", [
    VoteResponse(3, "n3", "n2", False, True),
    VoteResponse(3, "n3", "n2", False, False),
    AppendResponse(3, "n3", "n2", False),
    HeartbeatResponse(3, "n3", "n2"),
], ids=lambda m: f"{type(m).__name__}-pre{getattr(m, 'pre_vote', '')}")
def test_any_late_higher_term_answer_is_dropped_in_lease(answer):
    """n2 follows n1 in term 2; n3, now in term 3, answers what n2 sent in an earlier term (a
    pre-vote, a vote, appends or heartbeats as a leader). n2 keeps following n1 and withholds
    its vote for term 3."""
    core = _core(HardState())
    core.step(Heartbeat(2, "n1", "n2", 0))
    _drain(core)
    assert (core.term, core.lead) == (2, "n1")
    with probes.expect(DROPPED):
        core.step(answer)
    _drain(core)
    assert (core.term, core.lead, core.role) == (2, "n1", Role.FOLLOWER)
    core.step(VoteRequest(3, "n3", "n2", 0, 0))
    assert not _granted(_drain(core))
    assert core.withheld_votes == 1


def test_late_refusal_of_a_pre_crash_prevote_keeps_the_restart_withholding():
    """A refusal of a pre-vote sent before the crash carries term 2; while boot_withhold_ticks
    runs it is dropped, and the vote for term 2 stays withheld."""
    core = _core(HardState(1, "n1", 0))
    assert core.boot_withhold_ticks > 0
    core.step(VoteRequest(2, "n3", "n2", 0, 0))  # withheld, as designed
    assert not _drain(core)
    with probes.expect(DROPPED):
        core.step(VoteResponse(2, "n3", "n2", False, True))  # late answer to a pre-crash pre-vote
    _drain(core)
    assert core.term == 1
    core.step(VoteRequest(2, "n3", "n2", 0, 0))
    assert not _granted(_drain(core)), (
        f"vote granted for term 2 with boot_withhold_ticks={core.boot_withhold_ticks} still running")


def test_a_higher_term_answer_after_the_lease_is_taken_as_before():
    """Out of the lease a higher-term answer still steps the term up: only the window that a
    leader's lease may rest on is guarded."""
    core = _core(HardState())
    core.step(Heartbeat(1, "n1", "n2", 0))
    _drain(core)
    for _ in range(core.vote_lease_ticks()):
        core.tick()
        _drain(core)
    assert core.role == Role.FOLLOWER and core.lead == "n1"
    with probes.counting() as counted:
        core.step(VoteResponse(2, "n3", "n2", False, True))
    _drain(core)
    assert not counted[DROPPED]
    assert (core.term, core.lead) == (2, None)
    core.step(VoteRequest(2, "n3", "n2", 0, 0))
    assert _granted(_drain(core))
