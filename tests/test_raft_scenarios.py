"""Raft scenarios as little scripts over a hand-driven cluster (etcd/raft interaction-test style).

Each script is a list of steps `(op, *args)`; `expect` steps check one fact about one node.
"""

import pytest

from harness.sim.script import ScriptCluster
from node import probes
from node.consensus import (
    AppendEntries,
    AppendResponse,
    CasMismatch,
    ChangeOp,
    ChangePending,
    ConfigChange,
    FollowerLostEntries,
    Heartbeat,
    HeartbeatResponse,
    MemberType,
    Role,
    SteppingDown,
    UnsafeChange,
    VoteCast,
    VoteResponse,
)
from node.consensus.core import RaftCore

ADD, PROMOTE, REMOVE = ChangeOp.ADD_NON_VOTER, ChangeOp.PROMOTE, ChangeOp.REMOVE


def _fact(c: ScriptCluster, uuid: str, what: str):
    core = c.cores[uuid]
    return {
        "role": lambda: core.role,
        "term": lambda: core.term,
        "commit": lambda: core.commit,
        "max_commit": lambda: c.max_commit[uuid],
        "leader": lambda: core.lead,
        "log_terms": lambda: c.log_terms(uuid),
        "voters": lambda: core.active_config.voters(),
        "learners": lambda: [
            m.uuid for m in core.active_config.members if m.member_type == MemberType.NON_VOTER
        ],
        "committed_voters": lambda: c.disks[uuid]["config"].voters(),
        "committed_config_index": lambda: c.disks[uuid]["config"].opid_index,
        "disk_term": lambda: c.disks[uuid]["hard"].term,
        "disk_vote": lambda: c.disks[uuid]["hard"].voted_for,
    }[what]()


def _change(c, uuid, op, target, cas, promote=True):
    return c.do(uuid, "propose_config_change", ConfigChange(op, target, promote), cas)


OPS = {
    "elect": lambda c, u: c.elect(u),
    "stabilize": lambda c: c.stabilize(),
    "deliver": lambda c, src, dst, n: c.deliver(src, dst, limit=n),
    "drop": lambda c, u: c.drop(u),
    "tick": lambda c, u, n: c.tick(u, n),
    "isolate": lambda c, u: c.isolate(u),
    "heal": lambda c: c.heal(),
    "crash": lambda c, u: c.crash(u),
    "restart": lambda c, u: c.restart(u),
    "add_node": lambda c, u: c.add_node(u),
    "propose": lambda c, u, payload: c.do(u, "propose", payload),
    "change": _change,
}


def run(c: ScriptCluster, script) -> None:
    for n, (op, *args) in enumerate(script):
        if op == "expect":
            uuid, what, want = args
            got = _fact(c, uuid, what)
            assert got == want, f"step {n}: {uuid} {what} is {got!r}, expected {want!r}"
        elif op == "refused":
            uuid, error, inner, *rest = args
            with pytest.raises(error):
                OPS[inner](c, uuid, *rest)
        else:
            OPS[op](c, *args)


ELECTED = [("elect", "n1"), ("stabilize",), ("expect", "n1", "commit", 1)]

# A node cut off from the cluster times out again and again. With pre-vote it never bumps its
# term, so when it comes back the leader of term 1 carries on.
PARTITIONED_NODE = ELECTED + [
    ("isolate", "n3"),
    ("tick", "n3", 300),
    ("stabilize",),
    ("heal",),
    ("tick", "n1", 5),  # a heartbeat round
    ("stabilize",),
]


def test_pre_vote_keeps_a_partitioned_node_from_disrupting_the_cluster():
    c = ScriptCluster()
    run(c, PARTITIONED_NODE + [
        ("expect", "n3", "term", 1),
        ("expect", "n1", "role", Role.LEADER),
        ("expect", "n1", "term", 1),
        ("expect", "n3", "leader", "n1"),
    ])


def test_without_pre_vote_the_same_partition_deposes_the_leader():
    c = ScriptCluster(pre_vote=False)
    run(c, PARTITIONED_NODE)
    assert c.core("n3").term > 2
    assert not (c.core("n1").role == Role.LEADER and c.core("n1").term == 1)


# Raft figure 8 with three nodes and one-entry batches. n1 (term 3) re-replicates its term-1
# entry at index 2 to n2: a majority holds it, but it must not count as committed, because n3
# (last entry of term 2) can still win and overwrite it.
FIGURE_8 = ELECTED + [
    ("isolate", "n1"), ("propose", "n1", b"x"), ("stabilize",),  # index 2, term 1: only on n1
    ("crash", "n1"), ("heal",),
    ("elect", "n3"), ("drop", "n3"),  # term 2: n3's NO_OP at index 2 never leaves n3
    ("crash", "n3"), ("restart", "n1"),
    ("elect", "n1"),  # term 3
    ("expect", "n1", "term", 3),
    ("deliver", "n1", "n2", 1), ("deliver", "n2", "n1", 1),  # probe rejected, back off
    ("deliver", "n1", "n2", 1), ("deliver", "n2", "n1", 1),  # index 2 (term 1) acknowledged
    ("expect", "n2", "log_terms", [1, 1]),
    ("expect", "n1", "commit", 0),  # restarted at 0; index 2 is majority-replicated, yet not committed
    ("crash", "n1"), ("restart", "n3"),
    ("elect", "n3"), ("stabilize",),
    ("expect", "n2", "log_terms", [1, 2, 4]),  # the term-1 entry is legitimately overwritten
    ("tick", "n3", 1), ("stabilize",),  # the commit index goes at n3's next tick
    ("expect", "n2", "max_commit", 3),
]


def test_figure_8_previous_term_entry_commits_only_with_a_current_term_entry():
    with probes.expect("raft.commit.prior_term_entries"):
        run(ScriptCluster(batch_bytes=1), FIGURE_8)


def test_figure_8_script_catches_counting_previous_term_entries(monkeypatch):
    def commit_by_counting(self):
        n = self._quorum_index()
        if n > self.commit:
            self._commit_to(n)
            self._on_leader_commit()

    monkeypatch.setattr(RaftCore, "_maybe_commit", commit_by_counting)
    with pytest.raises(AssertionError, match="n1 commit is 2, expected 0"):
        run(ScriptCluster(batch_bytes=1), FIGURE_8)


# n3 misses the entry committed at index 2, then the leader dies and n3 asks for votes. The
# log check refuses it; with the unsafe vote_skip_log_check (fault_vote_skip_log_check) n2
# elects it, and n3 commits its own entry at index 2, where n2 had committed another.
STALE_CANDIDATE = ELECTED + [
    ("isolate", "n3"),
    ("propose", "n1", b"x"), ("stabilize",),
    ("tick", "n1", 1), ("stabilize",),  # the commit index goes at the leader's next tick
    ("expect", "n2", "commit", 2),
    ("expect", "n3", "log_terms", [1]),
    ("crash", "n1"), ("heal",),
]


def test_a_candidate_missing_a_committed_entry_gets_no_vote():
    c = ScriptCluster()
    run(c, STALE_CANDIDATE + [
        ("refused", "n3", AssertionError, "elect"),
    ])
    refusals = [e for e in c.events["n2"] if isinstance(e, VoteCast) and e.candidate == "n3"]
    assert refusals and not any(e.granted for e in refusals)
    assert refusals[0].reason == "log behind ours (1, 2)"


def test_vote_skip_log_check_elects_a_stale_candidate_that_commits_over_a_committed_entry():
    c = ScriptCluster(vote_skip_log_check=True)
    run(c, STALE_CANDIDATE + [
        ("elect", "n3"), ("expect", "n3", "term", 2),
        ("stabilize",),
        ("expect", "n3", "max_commit", 2),  # index 2 committed twice, with different entries
        ("expect", "n3", "log_terms", [1, 2]),
        ("expect", "n2", "log_terms", [1, 1]),
    ])
    votes = [e for e in c.events["n2"] if isinstance(e, VoteCast) and e.candidate == "n3"]
    assert [(e.pre_vote, e.granted) for e in votes] == [(True, True), (False, True)]
    assert votes[-1].reason == "log behind ours (1, 2), not checked (vote_skip_log_check)"


CAS = ELECTED + [
    ("refused", "n1", CasMismatch, "change", ADD, "n4", 7, False),
    ("add_node", "n4"),
    ("change", "n1", ADD, "n4", 0, False),  # appended at index 2
    ("refused", "n1", ChangePending, "change", ADD, "n5", 0, False),
    ("expect", "n1", "learners", ["n4"]),  # in effect as soon as appended
    ("expect", "n1", "committed_config_index", 0),
    ("stabilize",),
    ("expect", "n1", "committed_config_index", 2),
    ("expect", "n4", "committed_config_index", 2),
    ("refused", "n1", CasMismatch, "change", REMOVE, "n4", 0),  # stale index
    ("change", "n1", REMOVE, "n4", 2),
    ("stabilize",),
    ("expect", "n1", "learners", []),
]


def test_config_change_is_refused_unless_cas_matches_and_nothing_is_pending():
    run(ScriptCluster(), CAS)


PROMOTION = ELECTED + [
    ("add_node", "n4"),
    ("change", "n1", ADD, "n4", 0, True),
    ("isolate", "n4"),
    ("propose", "n1", b"a"), ("propose", "n1", b"b"), ("stabilize",),
    ("expect", "n1", "learners", ["n4"]),  # not caught up: stays a learner
    ("expect", "n1", "commit", 4),  # and the three voters commit without it
    ("heal",), ("tick", "n1", 5), ("stabilize",),
    ("tick", "n1", 5), ("stabilize",),  # the next heartbeat carries the commit index
    ("expect", "n1", "voters", ["n1", "n2", "n3", "n4"]),
    ("expect", "n4", "committed_voters", ["n1", "n2", "n3", "n4"]),
    ("expect", "n4", "role", Role.FOLLOWER),
]


def test_learner_is_promoted_once_caught_up():
    run(ScriptCluster(), PROMOTION)


def test_learner_without_promote_flag_stays_a_learner():
    run(ScriptCluster(), ELECTED + [
        ("add_node", "n4"), ("change", "n1", ADD, "n4", 0, False), ("stabilize",),
        ("tick", "n1", 10), ("stabilize",),
        ("expect", "n1", "learners", ["n4"]),
        ("expect", "n4", "role", Role.LEARNER),
        ("tick", "n4", 300), ("expect", "n4", "term", 1),  # never campaigns
    ])


def test_learner_acknowledgement_does_not_make_a_quorum():
    c = ScriptCluster(voters=("n1", "n2", "n3"), learners=("n4",))
    c.elect("n1")
    c.stabilize()
    c.partition(("n1", "n4"), ("n2", "n3"))
    c.do("n1", "propose", b"w")
    c.stabilize()
    assert c.disks["n4"]["log"][-1].payload == b"w"  # the learner has it...
    assert c.core("n1").commit == c.core("n1").log.last_index() - 1  # ...but it is not committed


LEADER_REMOVAL = ELECTED + [
    ("refused", "n1", SteppingDown, "change", REMOVE, "n1", 0),
    ("stabilize",),  # TimeoutNow: the most up-to-date voter (n2, first in config order) takes over
    ("expect", "n2", "role", Role.LEADER),
    ("expect", "n1", "role", Role.FOLLOWER),
    ("change", "n2", REMOVE, "n1", 0),
    ("stabilize",),
    ("expect", "n2", "committed_voters", ["n2", "n3"]),
    ("expect", "n1", "role", Role.LEARNER),  # it applied its own removal: never campaigns
    ("tick", "n1", 300), ("stabilize",),
    ("expect", "n2", "role", Role.LEADER),
    ("expect", "n2", "term", 2),
]


def test_removing_the_leader_transfers_leadership_first():
    run(ScriptCluster(), LEADER_REMOVAL)


def _rounds(c: ScriptCluster, leader: str, n: int) -> None:
    """`n` check-quorum rounds of the leader, each heartbeat answered by whoever can."""
    for _ in range(n * c.core(leader).cfg.election_timeout_ticks):
        c.tick(leader)
        c.stabilize()


def test_a_removal_that_would_leave_no_live_majority_is_refused():
    """Kudu's SafeToEvict: with n3 silent, removing n2 would leave {n1, n3}, whose config can
    never commit; the leader refuses it, and the tablet keeps its quorum. Removing the silent
    n3 instead is safe. Found by the harness: a membership fault removed a running replica of a
    tablet whose third replica had just failed on a damaged WAL, and the tablet never again had
    a leader."""
    c = ScriptCluster()
    run(c, ELECTED)
    c.isolate("n3")
    _rounds(c, "n1", 2)
    assert c.core("n1").role == Role.LEADER  # n2 still answers: the quorum holds
    with pytest.raises(UnsafeChange, match="only 1 of the 2 remaining voters"):
        _change(c, "n1", REMOVE, "n2", 0)
    assert c.core("n1").active_config.voters() == ["n1", "n2", "n3"]
    _change(c, "n1", REMOVE, "n3", 0)
    c.stabilize()
    c.tick("n1")  # n2 hears that it committed at the leader's next tick
    c.stabilize()
    assert c.disks["n2"]["config"].voters() == ["n1", "n2"]


def test_a_pending_change_names_the_leader_that_appended_it_until_it_commits():
    """What the convergence check asks of a leaderless tablet: who appended the change in
    effect (its leader, if that one has since FAILED, failed after it). The leader and the
    follower that took the entry both say; once committed nobody does; after a restart the
    follower no longer knows, and says nothing rather than guess."""
    c = ScriptCluster()
    run(c, ELECTED)
    _change(c, "n1", REMOVE, "n3", 0)
    c.deliver("n1", "n2", limit=1)  # n2 appends the change; its answer is not yet back
    assert c.core("n1").status().config_appended_by == "n1"
    assert c.core("n2").status().config_appended_by == "n1"
    assert c.core("n2").status().last_term == c.core("n1").term
    c.crash("n2")
    c.restart("n2")
    assert c.core("n2").active_config.voters() == ["n1", "n2"]  # still pending, in effect
    assert c.core("n2").status().config_appended_by is None  # restarted: not known
    _rounds(c, "n1", 1)  # heartbeats bring n2 back in and commit the change
    assert c.disks["n2"]["config"].voters() == ["n1", "n2"]
    assert c.core("n1").status().config_appended_by is None  # committed: nothing pending


def test_a_peer_heard_in_the_last_round_still_counts_as_live():
    """A removal right after a round ends is judged on the round before too, not refused
    because nobody has answered in the few ticks of the new round."""
    c = ScriptCluster()
    run(c, ELECTED)
    for _ in range(c.core("n1").cfg.election_timeout_ticks - 1):
        c.tick("n1")
        c.stabilize()
    c.tick("n1")  # the round ends here, and this tick's heartbeats are lost
    c.drop("n1")
    assert not any(pr.recent_active for pr in c.core("n1").progress.values())
    _change(c, "n1", REMOVE, "n3", 0)
    c.stabilize()
    c.tick("n1")
    c.stabilize()
    assert c.disks["n2"]["config"].voters() == ["n1", "n2"]


def test_a_removed_member_is_told_its_removal_committed_and_then_forgotten():
    """The removal's entry reaches n3 with the commit index before it; the leader commits it on
    n2's answer. Dropping n3 then (as the leader once did) left n3 never committing its own
    removal: a removed master never reported itself REMOVED. The leader tells it (and n2) the
    commit index at its next tick, and forgets it once n3 answers a heartbeat saying it
    committed."""
    c = ScriptCluster()
    run(c, ELECTED)
    _change(c, "n1", REMOVE, "n3", 0)
    c.stabilize()
    assert c.core("n1").committed_config.voters() == ["n1", "n2"]
    assert c.core("n3").committed_config.voters() == ["n1", "n2", "n3"]  # not yet told
    assert c.core("n2").committed_config.voters() == ["n1", "n2", "n3"]  # nor n2
    with probes.expect("raft.leader.removed_member_told"):
        for _ in range(c.core("n1").cfg.heartbeat_interval_ticks):
            c.tick("n1")
        c.stabilize()
    assert c.disks["n3"]["config"].voters() == c.disks["n2"]["config"].voters() == ["n1", "n2"]
    assert c.core("n3").role == Role.LEARNER  # not a voter of its own config: never campaigns
    assert "n3" not in c.core("n1").progress
    assert "n3" not in c.core("n1").status().peers


def test_a_removed_member_that_answers_nothing_is_forgotten_and_told_when_it_campaigns():
    """Replacing a dead replica is the common removal: its leader must not heartbeat it forever.
    But if it comes back, it learns of its removal when it asks the leader for a vote."""
    c = ScriptCluster()
    run(c, ELECTED)
    c.isolate("n3")
    _rounds(c, "n1", 2)
    _change(c, "n1", REMOVE, "n3", 0)
    c.stabilize()
    assert "n3" in c.core("n1").progress
    with probes.expect("raft.leader.removed_member_silent"):
        _rounds(c, "n1", 2)
    assert "n3" not in c.core("n1").progress
    assert c.core("n1").role == Role.LEADER
    # Back, n3 still holds itself a voter and campaigns: its request tells the leader to tell it.
    c.heal()
    assert c.core("n3").committed_config.voters() == ["n1", "n2", "n3"]
    with probes.expect("raft.leader.removed_member_campaigned", "raft.leader.removed_member_told"):
        for _ in range(6 * c.core("n1").cfg.election_timeout_ticks):
            c.tick("n1")
            c.tick("n3")
            c.stabilize()
    assert c.disks["n3"]["config"].voters() == ["n1", "n2"]
    assert c.core("n3").role == Role.LEARNER
    assert "n3" not in c.core("n1").progress
    assert (c.core("n1").role, c.core("n1").term) == (Role.LEADER, 1)


@pytest.mark.parametrize(
    "response",
    [
        AppendResponse(7, "n2", "n1", False),
        AppendResponse(7, "n2", "n1", True, match_index=1),
        VoteResponse(7, "n2", "n1", False),
        HeartbeatResponse(7, "n2", "n1"),
    ],
    ids=lambda m: type(m).__name__,
)
def test_higher_term_response_makes_the_leader_step_down_and_persist_the_term(response):
    c = ScriptCluster()
    run(c, ELECTED)
    c.core("n1").step(response)
    c._drain("n1")
    run(c, [
        ("expect", "n1", "role", Role.FOLLOWER),
        ("expect", "n1", "term", 7),
        ("expect", "n1", "disk_term", 7),
        ("expect", "n1", "disk_vote", None),
    ])


def test_a_read_waiting_on_a_removed_voter_is_confirmed_by_the_smaller_quorum():
    """A read whose round only the removed voter could still answer: once the removal makes the
    acknowledgements it already has a quorum, it is confirmed then, not never (the leader of a
    one-voter config hears no more heartbeat answers to release it)."""
    c = ScriptCluster(("n1", "n2"))
    run(c, ELECTED)
    c.crash("n2")
    c.do("n1", "read_index", b"r1")
    c.stabilize()
    assert c.read_states["n1"] == []  # n2 is down: no quorum of {n1, n2}
    with probes.expect("raft.read_index.confirmed_by_config_change"):
        _change(c, "n1", REMOVE, "n2", 0)
        c.stabilize()
    assert c.core("n1").committed_config.voters() == ["n1"]
    assert [r.ctx for r in c.read_states["n1"]] == [b"r1"]
    c.tick("n1", 3 * c.core("n1").cfg.election_timeout_ticks)
    c.stabilize()
    assert [r.ctx for r in c.read_states["n1"]] == [b"r1"]  # once, not again


def test_a_duplicated_refusal_is_not_taken_for_a_follower_that_lost_entries():
    """A new leader probes a lagging follower at its own tail and is refused; the follower
    then catches up, one entry per append, to exactly that index. A duplicate of the old
    refusal arriving now names an index at the peer's match, as a refusal from a follower that
    lost entries would: it answers an append sent before the acknowledgement, so it is stale.
    (The core simulator, whose network duplicates messages, found this: the leader logged a
    SAFETY error and lowered the match of a healthy follower.)"""
    c = ScriptCluster(batch_bytes=1)  # one entry per append
    run(c, ELECTED)
    c.isolate("n3")
    for i in range(3):
        c.do("n1", "propose", f"v{i}".encode())
    c.stabilize()
    c.heal()
    c.elect("n2")  # its optimistic probe of n3 is at its tail
    tail = c.core("n2").log.last_index() - 1  # the NO_OP follows it
    c.deliver(src="n2", dst="n3", types=AppendEntries)
    [refusal] = [m for s, m in c.queue if s == "n3" and isinstance(m, AppendResponse)]
    assert (refusal.success, refusal.reject_index) == (False, tail)
    pr = c.core("n2").progress["n3"]
    while pr.match < tail:
        assert c.deliver(limit=1) == 1
    assert pr.match == tail and pr.next == tail + 1
    with probes.expect("raft.leader.stale_reject_below_match"):
        c.queue.insert(0, ("n3", refusal))
        c.deliver(limit=1)
    assert pr.match == tail
    c.stabilize()
    assert not [e for e in c.events["n2"] if isinstance(e, FollowerLostEntries)]
    assert c.core("n3").log.last_index() == c.core("n2").log.last_index()


def test_read_rounds_answered_while_an_append_is_written_do_not_send_it_again():
    """Heartbeats go out with every read round, and each answer used to free a peer's slot
    for a retry: under reads, an append whose answer had not come yet (a follower answers
    after its WAL's sync) was sent again at every round and dropped by the follower as below
    its commit. A retry waits until the append has been out a heartbeat interval: an append
    or answer really lost is still sent again, a heartbeat later than before."""
    c = ScriptCluster()
    run(c, ELECTED)
    c.do("n1", "propose", b"w")
    c.deliver(types=AppendEntries)  # the answers wait in the queue, as behind a slow sync
    resent = []
    for i in range(3):
        c.do("n1", "read_index", f"r{i}".encode())
        c.deliver(types=(Heartbeat, HeartbeatResponse))
        resent += [m for s, m in c.queue if isinstance(m, AppendEntries)]
        c.queue = [(s, m) for s, m in c.queue if not isinstance(m, AppendEntries)]
    assert resent == [] and len(c.read_states["n1"]) == 3
    # a heartbeat interval on, the answers still not come: it may be lost, and goes again
    c.tick("n1", c.core("n1").cfg.heartbeat_interval_ticks)
    c.deliver(types=(Heartbeat, HeartbeatResponse))
    again = [m for s, m in c.queue if isinstance(m, AppendEntries)]
    assert sorted(m.to_uuid for m in again) == ["n2", "n3"] and all(m.entries for m in again)
    c.stabilize()
    assert c.core("n1").commit == 2
