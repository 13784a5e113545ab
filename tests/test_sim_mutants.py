"""Mutation check: deliberately wrong variants of the core, patched in by these fixtures (never
flags in production code), must each make the simulator report a violation within the CI seed
budget. A simulator that misses them would be checking too little."""

import pytest

from harness.sim.runner import replay_report, run_seeds
from node.consensus import ChangePending, HardState, VoteResponse
from node.consensus.core import RaftCore

SEED_BUDGET = 500
STEPS = 4000


def commit_previous_term_by_counting(self):
    n = self._quorum_index()
    if n > self.commit:  # missing: self.log.term_at(n) == self.term
        self._commit_to(n)
        self._on_leader_commit()


def vote_without_up_to_date_check(self, last_term, last_index):
    return True


def allow_two_pending_config_changes(self):
    if self.log.term_at(self.commit) != self.term:  # missing: the pending-change check
        raise ChangePending("leader has not committed an entry in its term yet")


def do_not_persist_the_vote(self):
    return HardState(self.term, None, self.commit)


def count_learner_acks(self):
    members = [m.uuid for m in self.active_config.members]  # voters and learners alike
    matches = sorted(
        (self.log.stable if v == self.id else self.progress[v].match for v in members), reverse=True
    )
    return matches[len(self.active_config.voters()) // 2]


def skip_log_matching_check(self, index, term):
    return True


def vote_twice_in_a_term(self, m):
    if self._log_up_to_date(m.last_term, m.last_index):  # missing: the voted_for check
        self._send(VoteResponse(m.term, self.id, m.from_uuid, True, m.pre_vote))
        if not m.pre_vote:
            self.voted_for = m.from_uuid
    else:
        self._send(VoteResponse(self.term, self.id, m.from_uuid, False, m.pre_vote))


MUTANTS = [
    ("_maybe_commit", commit_previous_term_by_counting),
    ("_log_up_to_date", vote_without_up_to_date_check),
    ("_check_change_allowed", allow_two_pending_config_changes),
    ("_hard_state", do_not_persist_the_vote),
    ("_quorum_index", count_learner_acks),
    ("_log_matches", skip_log_matching_check),
    ("_on_vote_request", vote_twice_in_a_term),
]

INVARIANTS = (
    "election safety", "log matching", "leader completeness", "state machine safety",
    "commit monotonicity", "commit durability", "one change at a time", "quorum", "read index",
    "core raised",
)


@pytest.mark.slow
@pytest.mark.parametrize("attr,mutant", MUTANTS, ids=[m.__name__ for _, m in MUTANTS])
def test_simulator_catches_mutant(monkeypatch, attr, mutant):
    monkeypatch.setattr(RaftCore, attr, mutant)
    summary = run_seeds(SEED_BUDGET, nodes=3, steps=STEPS, stop_at_first=True)
    assert summary.failures, f"{mutant.__name__} survived {SEED_BUDGET} seeds"
    violation = summary.failures[0].violation
    assert violation.startswith(INVARIANTS), violation


def test_violation_report_names_the_seed_and_replays_the_trace(monkeypatch):
    monkeypatch.setattr(RaftCore, "_log_up_to_date", vote_without_up_to_date_check)
    [failure] = run_seeds(50, nodes=3, steps=STEPS, stop_at_first=True).failures
    report = replay_report(failure.seed, 3, STEPS)
    assert f"seed {failure.seed}" in report and failure.violation in report
    assert "leaders by term:" in report and "VIOLATION" in report
