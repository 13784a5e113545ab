"""One-by-one config-change rules (node.consensus.confchange): what is allowed and what is refused."""

import pytest

from node import probes
from node.consensus import (
    CasMismatch,
    ChangeOp,
    ChangePending,
    ConfigChange,
    InvalidChange,
    Member,
    MemberType,
    RaftConfig,
    confchange,
)

V, NV = MemberType.VOTER, MemberType.NON_VOTER
ADD, PROMOTE, REMOVE = ChangeOp.ADD_NON_VOTER, ChangeOp.PROMOTE, ChangeOp.REMOVE


def config(*members: tuple[str, MemberType] | tuple[str, MemberType, bool]) -> RaftConfig:
    return RaftConfig(4, tuple(Member(*m) for m in members))


THREE = config(("n1", V), ("n2", V), ("n3", V))
WITH_LEARNER = config(("n1", V), ("n2", V), ("n4", NV, True))
ONE = config(("n1", V))
ONE_AND_LEARNER = config(("n1", V), ("n2", NV, False))
EMPTY = RaftConfig(0, ())


@pytest.mark.parametrize("cfg,change,want", [
    (THREE, ConfigChange(ADD, "n4"), THREE.members + (Member("n4", NV, True),)),
    (THREE, ConfigChange(ADD, "n4", promote=False), THREE.members + (Member("n4", NV, False),)),
    (EMPTY, ConfigChange(ADD, "n1"), (Member("n1", NV, True),)),
    (WITH_LEARNER, ConfigChange(PROMOTE, "n4"), (Member("n1", V), Member("n2", V), Member("n4", V))),
    (THREE, ConfigChange(REMOVE, "n2"), (Member("n1", V), Member("n3", V))),
    (WITH_LEARNER, ConfigChange(REMOVE, "n4"), (Member("n1", V), Member("n2", V))),
    (WITH_LEARNER, ConfigChange(REMOVE, "n1"), (Member("n2", V), Member("n4", NV, True))),
    (ONE_AND_LEARNER, ConfigChange(REMOVE, "n2"), (Member("n1", V),)),
], ids=["add", "add-no-promote", "add-to-empty", "promote", "remove-voter", "remove-learner",
        "remove-leader-voter", "remove-learner-leaving-one"])
def test_allowed_changes(cfg, change, want):
    assert confchange.apply(cfg, change) == want


@pytest.mark.parametrize("cfg,change,message", [
    (THREE, ConfigChange(ADD, "n2"), "already a member"),
    (WITH_LEARNER, ConfigChange(ADD, "n4"), "already a member"),
    (THREE, ConfigChange(PROMOTE, "n2"), "already a voter"),
    (THREE, ConfigChange(PROMOTE, "n9"), "not a member"),
    (THREE, ConfigChange(REMOVE, "n9"), "not a member"),
    (EMPTY, ConfigChange(REMOVE, "n1"), "not a member"),
    (ONE, ConfigChange(REMOVE, "n1"), "last voter"),
    (ONE_AND_LEARNER, ConfigChange(REMOVE, "n1"), "last voter"),  # a learner cannot carry on
], ids=["add-voter-again", "add-learner-again", "promote-voter", "promote-stranger",
        "remove-stranger", "remove-from-empty", "remove-only-voter", "remove-only-voter-with-learner"])
def test_refused_changes(cfg, change, message):
    with pytest.raises(InvalidChange, match=message):
        confchange.apply(cfg, change)


@pytest.mark.parametrize("pending,commit_term,term,refusal", [
    (False, 3, 3, None),  # nothing pending, an entry of this term committed
    (True, 3, 3, "not committed yet"),  # one change at a time
    (False, 2, 3, "in its term"),  # a new leader first commits its own entry
    (False, None, 3, "in its term"),  # commit index compacted away: not provably this term
    (True, 2, 3, "not committed yet"),
])
def test_change_gate(pending, commit_term, term, refusal):
    if refusal is None:
        confchange.check_allowed(pending, commit_term, term)
    else:
        with pytest.raises(ChangePending, match=refusal):
            confchange.check_allowed(pending, commit_term, term)


def test_cas_must_name_the_committed_config():
    confchange.check_cas(4, 4)
    with probes.expect("raft.config_change.cas_mismatch"), pytest.raises(CasMismatch) as refused:
        confchange.check_cas(3, 4)
    assert refused.value.committed == 4


@pytest.mark.parametrize("voters,match,want", [
    (["n1", "n2", "n3"], {"n2": 4, "n3": 6}, "n3"),
    (["n1", "n2", "n3"], {"n2": 6, "n3": 6}, "n2"),  # a tie goes to the first in config order
    (["n2", "n1", "n3"], {"n2": 0, "n3": 0}, "n2"),
    (["n1"], {}, None),  # the only voter has no successor
    (["n1", "n2"], {"n2": 0}, "n2"),
])
def test_successor_is_the_most_up_to_date_other_voter(voters, match, want):
    assert confchange.successor(voters, "n1", match.__getitem__) == want


@pytest.mark.parametrize("cfg,match,commit,want", [
    (WITH_LEARNER, {"n4": 5}, 5, "n4"),  # holds every committed entry
    (WITH_LEARNER, {"n4": 7}, 5, "n4"),
    (WITH_LEARNER, {"n4": 4}, 5, None),  # still catching up
    (ONE_AND_LEARNER, {"n2": 9}, 5, None),  # added without promote
    (THREE, {}, 5, None),  # no learners
    (config(("n1", V), ("n5", NV, True), ("n4", NV, True)), {"n4": 5, "n5": 5}, 5, "n5"),  # config order
])
def test_promotion_candidate(cfg, match, commit, want):
    assert confchange.promotion_candidate(cfg, match.__getitem__, commit) == want
