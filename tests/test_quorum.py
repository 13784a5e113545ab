"""Majority arithmetic (node.consensus.quorum), table-driven like etcd/raft's majority_commit.txt:
a failing case prints the per-voter table, so the reason is visible, not just a wrong number."""

import pytest

from node.consensus.quorum import VoteResult, committed_index, has_quorum, majority, vote_result

WON, LOST, PENDING = VoteResult.WON, VoteResult.LOST, VoteResult.PENDING


def _table(acked: dict[str, int]) -> str:
    rows = sorted(acked.items(), key=lambda kv: -kv[1])
    return "\n".join(f"  {i + 1}. {v}: {idx}" for i, (v, idx) in enumerate(rows))


@pytest.mark.parametrize("n,q", [(0, 1), (1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)])
def test_majority_is_more_than_half(n, q):
    assert majority(n) == q


COMMIT_CASES = [
    # acked index per voter -> committed index
    ({}, 0),  # no voters: nothing commits
    ({"n1": 7}, 7),  # a config of one commits what it stored
    ({"n1": 0}, 0),
    ({"n1": 5, "n2": 3}, 3),  # two voters: both must hold it
    ({"n1": 5, "n2": 3, "n3": 1}, 3),
    ({"n1": 1, "n2": 3, "n3": 5}, 3),  # voter order does not matter
    ({"n1": 5, "n2": 5, "n3": 0}, 5),
    ({"n1": 5, "n2": 0, "n3": 0}, 0),  # one voter ahead is not a majority
    ({"n1": 9, "n2": 8, "n3": 2, "n4": 1}, 2),  # four voters: three must hold it
    ({"n1": 9, "n2": 8, "n3": 8, "n4": 1}, 8),
    ({"n1": 4, "n2": 4, "n3": 3, "n4": 2, "n5": 1}, 3),
    ({"n1": 4, "n2": 4, "n3": 4, "n4": 4, "n5": 4}, 4),
]


@pytest.mark.parametrize("acked,want", COMMIT_CASES, ids=[str(i) for i in range(len(COMMIT_CASES))])
def test_committed_index(acked, want):
    got = committed_index(list(acked), acked.__getitem__)
    assert got == want, f"committed {got}, expected {want}:\n{_table(acked)}"


def test_committed_index_asks_only_about_voters():
    """A non-voter's acknowledgement must never complete a quorum: only voters are consulted."""
    acked = {"n1": 5, "n2": 0, "n3": 0, "learner": 5}
    asked = []
    got = committed_index(["n1", "n2", "n3"], lambda v: asked.append(v) or acked[v])
    assert got == 0 and asked == ["n1", "n2", "n3"]


VOTE_CASES = [
    # voters, votes -> result
    ([], {}, PENDING),  # an empty config wins nothing
    (["n1"], {}, PENDING),
    (["n1"], {"n1": True}, WON),  # a config of one elects itself
    (["n1"], {"n1": False}, LOST),
    (["n1", "n2"], {"n1": True}, PENDING),  # two voters: both are needed
    (["n1", "n2"], {"n1": True, "n2": True}, WON),
    (["n1", "n2"], {"n1": True, "n2": False}, PENDING),  # half refused: not a majority
    (["n1", "n2", "n3"], {"n1": True}, PENDING),
    (["n1", "n2", "n3"], {"n1": True, "n2": True}, WON),
    (["n1", "n2", "n3"], {"n1": True, "n2": False}, PENDING),
    (["n1", "n2", "n3"], {"n1": True, "n2": False, "n3": False}, LOST),
    (["n1", "n2", "n3"], {"n2": False, "n3": False}, LOST),
    (["n1", "n2", "n3", "n4"], {"n1": True, "n2": True}, PENDING),
    (["n1", "n2", "n3", "n4"], {"n1": True, "n2": True, "n3": True}, WON),
    # 2 of 4 refused: winning is impossible, yet (unlike etcd) it is not LOST; it times out
    (["n1", "n2", "n3", "n4"], {"n1": True, "n2": True, "n3": False, "n4": False}, PENDING),
    (["n1", "n2", "n3", "n4"], {"n2": False, "n3": False, "n4": False}, LOST),
    # answers from non-members or non-voters do not count
    (["n1", "n2", "n3"], {"n1": True, "x": True, "y": True}, PENDING),
    (["n1", "n2", "n3"], {"n1": False, "x": False, "y": False}, PENDING),
]


@pytest.mark.parametrize("voters,votes,want", VOTE_CASES, ids=[str(i) for i in range(len(VOTE_CASES))])
def test_vote_result(voters, votes, want):
    assert vote_result(voters, votes) is want, f"voters {voters}, votes {votes}"


@pytest.mark.parametrize("voters,ok,want", [
    ([], set(), False),
    (["n1"], {"n1"}, True),
    (["n1"], set(), False),
    (["n1", "n2"], {"n1"}, False),
    (["n1", "n2", "n3"], {"n1", "n3"}, True),
    (["n1", "n2", "n3"], {"n1", "learner", "other"}, False),
    (["n1", "n2", "n3", "n4"], {"n1", "n2"}, False),
    (["n1", "n2", "n3", "n4"], {"n1", "n2", "n4"}, True),
])
def test_has_quorum(voters, ok, want):
    assert has_quorum(voters, ok.__contains__) is want
