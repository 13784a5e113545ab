"""A restarted replica withholds its (pre-)votes for a vote lease from its start, as if it had
just heard from a leader: before the crash it may have acknowledged a leader round that the
leader's lease read counts on, and that promise is not on disk. It still campaigns by its own
election timer, and still steps up its term on higher-term messages."""

from __future__ import annotations

import random

import pytest

from node.consensus import (
    CoreConfig,
    HardState,
    Heartbeat,
    Member,
    MemberType,
    PersistedState,
    RaftConfig,
    RaftCore,
    Role,
    VoteCast,
    VoteRequest,
    VoteResponse,
)
from node.entry import Entry, EntryType

CONFIG3 = RaftConfig(0, tuple(Member(u, MemberType.VOTER) for u in ("n1", "n2", "n3")))
LOG = (Entry(1, 1, EntryType.NO_OP, b""), Entry(1, 2, EntryType.REPLICATE, b"x"))


def restarted(uuid: str = "n2", seed: int = 1, **kw) -> RaftCore:
    """n2 as it comes back up: it followed n1 in term 1 and acknowledged both entries."""
    persisted = PersistedState(HardState(1, "n1", 0), CONFIG3, LOG, applied=0)
    core = RaftCore(CoreConfig(uuid, **kw), random.Random(seed), persisted)
    while core.has_ready():
        core.advance(core.ready())
    return core


def ask(core: RaftCore, pre_vote: bool) -> list:
    """An up-to-date candidate n3 asks for a (pre-)vote in term 2; returns the messages sent."""
    core.step(VoteRequest(2, "n3", core.id, 1, 2, pre_vote=pre_vote))
    if not core.has_ready():
        return []
    rd = core.ready()
    core.advance(rd)
    return rd.messages


def tick(core: RaftCore, n: int) -> None:
    for _ in range(n):
        core.tick()
        while core.has_ready():
            core.advance(core.ready())


@pytest.mark.parametrize("pre_vote", [True, False])
def test_restarted_core_refuses_votes_for_a_vote_lease_then_grants(pre_vote):
    core = restarted()
    lease = core.vote_lease_ticks()
    assert lease >= 1 and core.lead is None and core.role == Role.FOLLOWER
    for k in range(lease):
        assert ask(core, pre_vote) == [], f"granted after {k} of {lease} ticks"
        assert core.term == 1  # a withheld request does not step the term up
        tick(core, 1)
    assert core.withheld_votes == lease
    assert core.role == Role.FOLLOWER  # its own election timer has not fired yet
    assert ask(core, pre_vote) == [VoteResponse(2, "n2", "n3", True, pre_vote)]
    if not pre_vote:
        assert (core.term, core.voted_for) == (2, "n3")


def test_the_withheld_vote_is_reported_with_the_reason():
    core = restarted()
    core.step(VoteRequest(2, "n3", "n2", 1, 2, pre_vote=True))
    events = [e for e in core.ready().events if isinstance(e, VoteCast)]
    assert [(e.granted, e.reason) for e in events] == [(False, "withheld: restarted within a vote lease")]


def test_a_transfer_vote_is_not_withheld_after_a_restart():
    core = restarted()
    core.step(VoteRequest(2, "n3", "n2", 1, 2, transfer=True))
    assert (core.term, core.voted_for) == (2, "n3")


def test_a_brand_new_replica_votes_at_once():
    """Term 0: it never acknowledged a leader (a term is persisted before any acknowledgement)."""
    core = RaftCore(CoreConfig("n2"), random.Random(1), PersistedState(HardState(), CONFIG3))
    core.advance(core.ready())
    core.step(VoteRequest(1, "n1", "n2", 0, 0, pre_vote=True))
    assert core.ready().messages == [VoteResponse(1, "n2", "n1", True, True)]


@pytest.mark.parametrize("seed", range(5))
def test_restarted_core_still_campaigns_by_its_election_timer(seed):
    core = restarted(seed=seed)
    timeout = core.randomized_timeout
    assert timeout > core.vote_lease_ticks()
    tick(core, timeout - 1)
    assert core.role == Role.FOLLOWER
    tick(core, 1)
    assert core.role == Role.PRE_CANDIDATE


def test_restarted_core_steps_up_its_term_and_follows_a_leader_within_the_window():
    core = restarted()
    core.step(Heartbeat(3, "n3", "n2", 0))
    core.advance(core.ready())
    assert (core.term, core.lead, core.role) == (3, "n3", Role.FOLLOWER)
    # now withholding for the leader it heard from, as before
    core.step(VoteRequest(4, "n1", "n2", 1, 2, pre_vote=True))
    assert not core.has_ready() and core.withheld_votes == 1
