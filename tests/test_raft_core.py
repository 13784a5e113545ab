"""Behaviours of the core that are not whole scenarios: the Ready contract, message addressing,
the wire format, vote withholding, back-off, ReadIndex, leadership transfer, tablet-copy
reporting."""

import dataclasses
import random

import msgspec
import pytest

from harness.sim.script import ScriptCluster
from node import probes
from node.consensus import (
    AppendEntries,
    CoreConfig,
    HardState,
    Heartbeat,
    InvalidChange,
    Member,
    MemberType,
    Message,
    NotLeader,
    PersistedState,
    RaftConfig,
    RaftCore,
    Role,
    VoteRequest,
    VoteResponse,
)
from node.entry import Entry, EntryType

CONFIG3 = RaftConfig(0, tuple(Member(u, MemberType.VOTER) for u in ("n1", "n2", "n3")))


def fresh_core(uuid="n1", **kw) -> RaftCore:
    return RaftCore(CoreConfig(uuid, **kw), random.Random(1), PersistedState(HardState(), CONFIG3))


def drain(core):
    rd = core.ready()
    core.advance(rd)
    return rd


def elected() -> ScriptCluster:
    c = ScriptCluster()
    c.elect("n1")
    c.stabilize()
    return c


def test_no_input_is_accepted_while_a_ready_is_outstanding():
    core = fresh_core()
    rd = core.ready()
    with pytest.raises(RuntimeError):
        core.tick()
    core.advance(rd)
    core.tick()
    with pytest.raises(RuntimeError):
        core.advance(rd)


def test_vote_is_in_the_same_ready_as_the_response_that_reveals_it():
    core = fresh_core("n2")
    drain(core)
    core.step(VoteRequest(1, "n1", "n2", 0, 0))
    rd = drain(core)
    assert rd.hard_state == HardState(1, "n1", 0)
    assert rd.messages == [VoteResponse(1, "n2", "n1", True)]


def test_message_for_another_uuid_is_ignored_and_counted():
    core = fresh_core("n2")
    drain(core)
    core.step(VoteRequest(5, "n1", "n2-old-incarnation", 0, 0))
    assert core.term == 0 and not core.has_ready()
    assert core.status().misaddressed == 1


def test_messages_round_trip_through_msgpack_as_tagged_union():
    c = elected()
    c.do("n1", "propose", b"payload")
    for _, msg in c.queue:
        assert msgspec.msgpack.decode(msgspec.msgpack.encode(msg), type=Message) == msg
    assert any(isinstance(m, AppendEntries) and m.entries for _, m in c.queue)


def test_restart_recovers_term_vote_and_log_while_commit_restarts_at_the_snapshot():
    c = elected()
    c.do("n1", "propose", b"x")
    c.stabilize()
    c.tick("n1")  # the commit index reaches a follower with the next append or tick
    c.stabilize()
    before = c.core("n2")
    assert before.commit == c.disks["n2"]["hard"].commit == 2
    c.crash("n2")
    c.restart("n2")
    after = c.core("n2")
    assert (after.term, after.voted_for, after.log.last_index()) == (before.term, before.voted_for, before.log.last_index())
    # like Replica.open(): no snapshot here, so commit and applied start at 0 ...
    assert (after.commit, after.applied) == (0, 0) and c.applied["n2"] == []
    c.tick("n1", 5)  # ... and the leader's next heartbeat teaches the commit index again
    c.stabilize()
    assert after.commit == 2 and [e.index for e in c.applied["n2"]] == [1, 2]
    # from a snapshot, they start at the snapshot index
    c.crash("n2")
    c.restart_from_copy("n2", 1, 1, c.disks["n2"]["log"][1:], c.disks["n2"]["config"])
    assert (c.core("n2").commit, c.core("n2").applied) == (1, 1)


def test_votes_are_withheld_while_a_leader_is_live_then_granted():
    c = elected()
    request = VoteRequest(2, "n3", "n2", 10, 1, pre_vote=True)
    with probes.expect("raft.vote.withheld_in_lease"):
        c.core("n2").step(request)
    assert c.core("n2").withheld_votes == 1 and not c.core("n2").has_ready()
    c.tick("n2", c.core("n2").vote_lease_ticks())
    c.core("n2").step(request)
    assert c.core("n2").ready().messages == [VoteResponse(2, "n2", "n3", True, True)]


def test_transfer_vote_ignores_the_lease():
    c = elected()
    c.core("n2").step(VoteRequest(2, "n3", "n2", 10, 1, transfer=True))
    assert c.core("n2").term == 2 and c.core("n2").voted_for == "n3"


def test_failed_elections_back_off_exponentially_up_to_a_bound():
    c = ScriptCluster()
    c.isolate("n1")
    timeouts = []
    for _ in range(6):
        c.do("n1", "campaign")
        timeouts.append(c.core("n1").randomized_timeout)
        c.tick("n1", c.core("n1").randomized_timeout)
    base = c.core("n1").cfg.election_timeout_ticks
    assert timeouts[0] <= base * 1.25 and timeouts[2] >= base * 2 * 0.75
    assert max(timeouts) <= base * 8 * 1.25 + 1
    c.heal()
    c.elect("n2")
    c.stabilize()
    assert c.core("n1").failed_elections == 0  # hearing from a leader resets the back-off


def test_read_index_confirms_leadership_with_a_heartbeat_round():
    c = elected()
    c.do("n1", "read_index", b"r1")
    assert c.read_states["n1"] == []  # not before a quorum acknowledged
    c.stabilize()
    [rs] = c.read_states["n1"]
    assert (rs.ctx, rs.index) == (b"r1", c.core("n1").commit)


def _heartbeats_queued(c: ScriptCluster) -> list[bytes]:
    return [m.ctx for s, m in c.queue if s == "n1" and isinstance(m, Heartbeat)]


def test_reads_that_arrive_while_rounds_are_out_share_the_next_round():
    c = elected()
    assert c.core("n1").cfg.max_read_rounds == 2
    c.do("n1", "read_index", b"r1")
    c.do("n1", "read_index", b"r2")  # a second round goes out at once (pipelined) ...
    for ctx in (b"r3", b"r4", b"r5"):
        c.do("n1", "read_index", ctx)  # ... but no third: r3..r5 wait for the next
    assert _heartbeats_queued(c) == [b"r1", b"r1", b"r2", b"r2"]
    c.deliver(types=Heartbeat)  # both rounds reach both followers
    assert c.read_states["n1"] == []
    c.deliver(src="n2", limit=1)  # n2's answer to r1: a quorum for r1 ...
    assert [r.ctx for r in c.read_states["n1"]] == [b"r1"]
    assert _heartbeats_queued(c) == [b"r5", b"r5"]  # ... and the round for r3..r5 goes out
    c.stabilize()
    assert [r.ctx for r in c.read_states["n1"]] == [b"r1", b"r2", b"r3", b"r4", b"r5"]
    assert all(r.index == c.core("n1").commit for r in c.read_states["n1"])


def test_a_later_round_confirms_the_reads_of_an_earlier_one():
    c = elected()
    c.do("n1", "read_index", b"r1")
    c.do("n1", "read_index", b"r2")
    # r1's round is lost, r2's is not
    c.queue = [(s, m) for s, m in c.queue if not (isinstance(m, Heartbeat) and m.ctx == b"r1")]
    c.stabilize()
    assert [r.ctx for r in c.read_states["n1"]] == [b"r1", b"r2"]
    c.do("n1", "read_index", b"r3")  # no round is left out: r3 gets one at once
    assert _heartbeats_queued(c) == [b"r3", b"r3"]


def test_a_lost_read_round_is_redone_by_the_next_heartbeat_tick():
    c = elected()
    c.do("n1", "read_index", b"r1")
    c.do("n1", "read_index", b"r2")
    c.drop("n1")  # the round never arrives
    c.stabilize()
    assert c.read_states["n1"] == []
    c.tick("n1", c.core("n1").cfg.heartbeat_interval_ticks)
    c.stabilize()
    assert [r.ctx for r in c.read_states["n1"]] == [b"r1", b"r2"]


def test_read_index_on_an_isolated_leader_never_completes():
    c = elected()
    c.isolate("n1")
    c.do("n1", "read_index", b"r1")
    c.tick("n1", 5)
    c.stabilize()
    assert c.read_states["n1"] == []


def test_read_index_waits_for_the_first_commit_of_the_term():
    c = ScriptCluster()
    c.elect("n1")  # NO_OP appended, not committed yet
    c.do("n1", "read_index", b"early")
    assert c.core("n1").commit == 0
    c.stabilize()
    assert [(r.ctx, r.index) for r in c.read_states["n1"]] == [(b"early", 1)]


def test_followers_refuse_proposals_and_name_the_leader():
    c = elected()
    with pytest.raises(NotLeader) as err:
        c.do("n2", "propose", b"x")
    assert err.value.leader == "n1"


def test_transfer_leadership_on_request():
    c = elected()
    c.isolate("n3")
    c.do("n1", "propose", b"x")
    c.stabilize()
    c.heal()
    c.do("n1", "transfer_leadership", "n3")  # n3 is behind: caught up first, then TimeoutNow
    with pytest.raises(NotLeader):
        c.do("n1", "propose", b"during transfer")
    c.stabilize()
    c.tick("n1", 5)  # the heartbeat round resumes replication to n3 (its last request was lost)
    c.stabilize()
    assert c.core("n3").role == Role.LEADER and c.core("n1").role == Role.FOLLOWER


def test_step_down_leaves_the_cluster_to_elect_again():
    c = elected()
    c.do("n1", "step_down")
    assert c.core("n1").role == Role.FOLLOWER
    c.elect("n2")
    assert c.core("n2").term == 2


def test_follower_behind_the_compaction_point_is_reported_for_tablet_copy():
    c = elected()
    c.isolate("n3")
    for i in range(5):
        c.do("n1", "propose", b"w%d" % i)
    c.stabilize()
    c.do("n1", "compact", 4)
    assert c.core("n1").log.first_index() == 5
    c.heal()
    for _ in range(3):
        c.tick("n1", 5)
        c.stabilize()
    peers = c.core("n1").status().peers
    assert peers["n3"].needs_tablet_copy and not peers["n2"].needs_tablet_copy
    assert c.core("n3").log.last_index() == 1
    # a copy of the leader's state (here: its log from the compaction point) lets it catch up
    src = c.core("n1").log
    c.disks["n3"]["log"] = []
    c.crash("n3")
    c.restart_from_copy("n3", src.offset, src.offset_term, list(src.entries), c.disks["n1"]["config"])
    c.tick("n1", 5)
    c.stabilize()
    assert not c.core("n1").status().peers["n3"].needs_tablet_copy
    assert c.core("n3").log.last_index() == c.core("n1").log.last_index()


def test_heartbeat_commit_never_exceeds_the_follower_log():
    core = fresh_core("n2")
    drain(core)
    core.step(Heartbeat(1, "n1", "n2", commit=50))
    assert core.commit == 0


def test_config_entries_take_effect_when_appended_and_roll_back_when_truncated():
    core = fresh_core("n2")
    drain(core)
    new = RaftConfig(2, CONFIG3.members + (Member("n4", MemberType.NON_VOTER, True),))
    entries = (
        Entry(1, 1, EntryType.NO_OP),
        Entry(1, 2, EntryType.CONFIG_CHANGE, msgspec.msgpack.encode(new)),
    )
    core.step(AppendEntries(1, "n1", "n2", 0, 0, entries, commit=0))
    assert core.active_config == new and core.committed_config == CONFIG3
    drain(core)
    core.step(AppendEntries(2, "n3", "n2", 1, 1, (Entry(2, 2, EntryType.NO_OP),), commit=0))
    assert core.active_config == CONFIG3


def test_unsafe_change_config_lets_the_survivor_of_a_lost_majority_lead_alone():
    c = elected()
    c.do("n1", "propose", b"before")
    c.stabilize()
    committed = c.core("n2").commit
    c.crash("n1")
    c.crash("n3")  # the majority is gone for good
    core = c.core("n2")
    with pytest.raises(InvalidChange):
        c.do("n2", "unsafe_change_config", ("n1", "n3"))  # we must be a voter of it
    with pytest.raises(InvalidChange):
        c.do("n2", "unsafe_change_config", ("n2", "n2"))
    last = core.log.last_index()
    index = c.do("n2", "unsafe_change_config", ("n2",))
    assert index == last + 1 and core.log.term_at(index) == core.term
    assert core.active_config.voters() == ["n2"] and core.committed_config == CONFIG3
    c.tick("n2", 100)  # a lone voter elects itself and commits its config
    c.stabilize()
    assert core.role == Role.LEADER and core.committed_config.voters() == ["n2"]
    assert core.committed_config.opid_index == index and core.commit > index >= committed
    with pytest.raises(InvalidChange):
        c.do("n2", "unsafe_change_config", ("n2",))  # a leader changes its config the safe way


def test_the_leader_lease_is_kept_within_the_shortest_vote_lease_among_the_voters():
    """Each voter withholds votes for its own vote lease, set by its own flags: n3's election
    timeout configured shorter than the leader's (2 missed heartbeats, not 3) must shorten the
    leader's lease too, or a new leader could be elected under it, once n3 has said so in an
    answer (a round its answer confirms carries it)."""
    c = elected()
    n1, n3 = c.core("n1"), c.core("n3")
    c.tick("n1", n1.cfg.heartbeat_interval_ticks)
    c.stabilize()
    assert n1.voters_lease_ticks() == n1.vote_lease_ticks()
    n3.cfg = dataclasses.replace(n3.cfg, leader_failure_max_missed_heartbeat_periods=2)
    assert n3.vote_lease_ticks() < n1.vote_lease_ticks()
    c.tick("n1", n1.cfg.heartbeat_interval_ticks)
    c.stabilize()
    assert n1.voters_lease_ticks() == n3.vote_lease_ticks()


def test_a_commit_sends_no_append_of_its_own_and_the_next_write_leaves_at_once():
    """A risen commit index is not sent in an append of its own: it rides on the next write's
    append, which leaves at once for the follower whose answer committed the last write (an
    append only for the index put that follower IN_FLIGHT, and the next write's append to it
    waited for the answer: docs/decisions/commit-index-at-tick.md). With no next write, the
    leader's next tick tells it."""
    c = elected()
    c.do("n1", "propose", b"x")
    c.deliver("n1", "n2", limit=1)
    c.deliver("n2", "n1", limit=1)  # n2's answer commits x; n3's append is still queued
    assert c.core("n1").commit == 2
    assert not [m for s, m in c.queue if s == "n1" and m.to_uuid == "n2"]
    c.do("n1", "propose", b"y")
    to_n2 = [m for s, m in c.queue if s == "n1" and m.to_uuid == "n2"]
    assert [(type(m), [e.payload for e in m.entries], m.commit) for m in to_n2] == [
        (AppendEntries, [b"y"], 2)]
    c.stabilize()
    assert c.core("n2").commit == 2  # told with y's append; y's commit waits for the tick
    with probes.expect("raft.leader.commit_told_at_tick"):
        c.tick("n1")
    c.stabilize()
    assert c.core("n2").commit == c.core("n3").commit == c.core("n1").commit == 3


def test_a_leader_reports_how_long_each_peer_has_been_silent_to_it():
    """What the masters judge a member's silence by, beside their own view (a master cut off
    from some servers moved their data when it judged alone): the leader's ticks since each
    peer last answered, counted from its own start for a peer it never heard."""
    c = elected()
    c.partition(("n1", "n2"), ("n3",))
    for _ in range(12):
        c.tick("n1")
        c.stabilize()
    peers = c.core("n1").status().peers
    assert peers["n3"].silent_ticks >= 12
    assert peers["n2"].silent_ticks <= c.core("n1").cfg.heartbeat_interval_ticks
    c.heal()
    for _ in range(3):
        c.tick("n1")
        c.stabilize()
    assert c.core("n1").status().peers["n3"].silent_ticks <= c.core("n1").cfg.heartbeat_interval_ticks
