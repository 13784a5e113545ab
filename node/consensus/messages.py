"""Wire messages between replicas: tagged msgspec Structs, so `msgspec.msgpack.decode(data,
type=Message)` recovers the right class. Every message names its sender and its intended
recipient; a replica drops messages addressed to another UUID (a wiped-and-replaced server must
never act on requests meant for its former self)."""

from __future__ import annotations

from typing import Union

import msgspec

from node.entry import Entry


class AppendEntries(msgspec.Struct, frozen=True, tag=True):
    """Kudu's UpdateConsensus: entries after (prev_index, prev_term), plus the leader's commit.
    `seq` numbers the leader's appends (its core's count, so it only grows while it leads) and
    comes back in the answer: Kudu's RPC pairs an answer with its request, a stream of messages
    that may be duplicated and reordered does not, and the leader must know whether a refusal
    answers a request sent before or after the peer's last acknowledgement."""

    term: int
    from_uuid: str
    to_uuid: str
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int
    seq: int = 0


class AppendResponse(msgspec.Struct, frozen=True, tag=True):
    """On success `match_index` is the follower's last index known to match the leader. On
    rejection of (reject_index, ...) the hint is the follower's best guess of where the logs may
    still agree, so the leader skips a whole divergent term per round trip. `seq`: the answered
    AppendEntries' own (0 for an answer to no append, e.g. a newer term's refusal)."""

    term: int
    from_uuid: str
    to_uuid: str
    success: bool
    match_index: int = 0
    reject_index: int = 0
    hint_index: int = 0
    hint_term: int = 0
    seq: int = 0


class VoteRequest(msgspec.Struct, frozen=True, tag=True):
    """RequestConsensusVote. With pre_vote the sender has not bumped its term: `term` is the one
    it would campaign in. `transfer` marks an election ordered by the leader (TimeoutNow), which
    voters must not withhold."""

    term: int
    from_uuid: str
    to_uuid: str
    last_index: int
    last_term: int
    pre_vote: bool = False
    transfer: bool = False


class VoteResponse(msgspec.Struct, frozen=True, tag=True):
    term: int
    from_uuid: str
    to_uuid: str
    granted: bool
    pre_vote: bool = False


class Heartbeat(msgspec.Struct, frozen=True, tag=True):
    """`commit` is capped at what the follower is known to hold; `ctx` names the newest pending
    ReadIndex request, which the follower's response confirms."""

    term: int
    from_uuid: str
    to_uuid: str
    commit: int
    ctx: bytes = b""


class HeartbeatResponse(msgspec.Struct, frozen=True, tag=True):
    """`commit` is the follower's commit index after the heartbeat: how a leader learns that a
    removed member has committed its own removal and need not be told any more."""

    term: int
    from_uuid: str
    to_uuid: str
    ctx: bytes = b""
    commit: int = 0
    lease_ticks: int = 0  # the sender's vote lease: the leader's lease is kept within it


class TimeoutNow(msgspec.Struct, frozen=True, tag=True):
    """Leadership transfer: the recipient campaigns at once, skipping the pre-vote."""

    term: int
    from_uuid: str
    to_uuid: str


Message = Union[  # noqa: UP007 - msgspec needs a Union object to decode tagged variants
    AppendEntries, AppendResponse, VoteRequest, VoteResponse, Heartbeat, HeartbeatResponse, TimeoutNow
]
