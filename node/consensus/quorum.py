"""Majority arithmetic over one voter set (etcd/raft's quorum.MajorityConfig).

Kept apart from the core so the rule every safety argument rests on (any two majorities of
the same voters intersect) is stated once and can be tested by table. Only voters count:
a non-voter's acknowledgement or vote must never complete a quorum, so callers pass
`config.voters()`, never all members. An empty voter set reaches no quorum at all: it commits
nothing and wins nothing, so a replica that knows no config cannot decide anything.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence


class VoteResult(enum.Enum):
    PENDING = "PENDING"  # neither a majority granted nor a majority refused yet
    LOST = "LOST"
    WON = "WON"


def majority(n: int) -> int:
    """Smallest count that intersects every other count of the same size: n // 2 + 1."""
    return n // 2 + 1


def committed_index(voters: Sequence[str], acked: Callable[[str], int]) -> int:
    """Highest index that a majority of `voters` acknowledged (`acked(voter)`): at least
    majority(n) voters hold it, so every future majority includes one that does. Sorting and
    taking the majority-th largest is the whole rule; 0 for an empty voter set."""
    if not voters:
        return 0
    matches = sorted((acked(v) for v in voters), reverse=True)
    return matches[len(voters) // 2]


def vote_result(voters: Sequence[str], votes: Mapping[str, bool]) -> VoteResult:
    """Tally an election: WON once a majority granted, LOST once a majority refused.

    Unlike etcd, a refusal by exactly half of an even voter set is still PENDING (the election
    then ends by timing out): LOST means a majority said no, not merely that winning became
    impossible. Answers from non-voters are ignored."""
    q = majority(len(voters))
    if sum(1 for v in voters if votes.get(v)) >= q:
        return VoteResult.WON
    if sum(1 for v in voters if votes.get(v) is False) >= q:
        return VoteResult.LOST
    return VoteResult.PENDING


def has_quorum(voters: Sequence[str], ok: Callable[[str], bool]) -> bool:
    """Does a majority of `voters` satisfy `ok`? (check-quorum activity, ReadIndex acks.)"""
    return sum(1 for v in voters if ok(v)) >= majority(len(voters))
