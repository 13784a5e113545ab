"""Value types shared by the core and its driver: configs, durable state, Ready and errors.

Configs are msgspec Structs because they travel inside CONFIG_CHANGE log entries and are written to
consensus metadata by the caller; everything else is plain data the driver reads.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import msgspec

from node.entry import Entry

from .messages import Message


class Role(enum.Enum):
    FOLLOWER = "FOLLOWER"
    PRE_CANDIDATE = "PRE_CANDIDATE"  # running a pre-vote; term not bumped yet
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    LEARNER = "LEARNER"  # not a voter in its own active config: never campaigns


class MemberType(enum.IntEnum):
    VOTER = 1
    NON_VOTER = 2  # Kudu's PRE_VOTER/learner: replicates, never votes or counts in a quorum


class Member(msgspec.Struct, frozen=True, array_like=True):
    uuid: str
    member_type: MemberType
    promote: bool = False  # leader turns this NON_VOTER into a VOTER once it has caught up


class RaftConfig(msgspec.Struct, frozen=True, array_like=True):
    opid_index: int  # log index of the CONFIG_CHANGE entry that created it (0: bootstrap config)
    members: tuple[Member, ...]

    def member(self, uuid: str) -> Member | None:
        for m in self.members:
            if m.uuid == uuid:
                return m
        return None

    def voters(self) -> list[str]:
        return [m.uuid for m in self.members if m.member_type == MemberType.VOTER]

    def is_voter(self, uuid: str) -> bool:
        m = self.member(uuid)
        return m is not None and m.member_type == MemberType.VOTER


class ChangeOp(enum.IntEnum):
    ADD_NON_VOTER = 1
    PROMOTE = 2
    REMOVE = 3


class ConfigChange(msgspec.Struct, frozen=True):
    op: ChangeOp
    uuid: str
    promote: bool = True  # only for ADD_NON_VOTER


_config_encoder = msgspec.msgpack.Encoder()
_config_decoder = msgspec.msgpack.Decoder(RaftConfig)


def encode_config(config: RaftConfig) -> bytes:
    return _config_encoder.encode(config)


def decode_config(payload: bytes) -> RaftConfig:
    return _config_decoder.decode(payload)


@dataclass(frozen=True)
class CoreConfig:
    """Timing is in ticks so the core needs no clock. The driver calls tick() every TICK_MS."""

    uuid: str
    heartbeat_interval_ticks: int = 5  # Kudu: raft_heartbeat_interval_ms = 500
    leader_failure_max_missed_heartbeat_periods: int = 3
    jitter: float = 0.25  # election timeout is randomised by ±25%
    max_backoff_exponent: int = 3  # failed elections double the timeout, at most 2**3 times
    pre_vote: bool = True
    max_batch_bytes: int = 1 << 20  # AppendEntries payload bound (at least one entry is sent)
    # The largest payload `propose` takes: one entry alone in an AppendEntries must still fit
    # the RPC frame. ReplicaOptions derives both bounds from the frame limit.
    max_entry_bytes: int = (64 << 20) - (64 << 10)
    max_read_rounds: int = 2  # ReadIndex heartbeat rounds out at once (see RaftCore._start_read)
    # A leader that has not heard from a quorum for an election timeout steps down. Off only
    # for the unsafe fault_read_without_leadership: a partitioned leader then stays leader.
    check_quorum: bool = True
    # Unsafe (fault_vote_skip_log_check): grant votes to candidates whose log is behind ours.
    vote_skip_log_check: bool = False
    # Unsafe (fault_commit_prior_term_by_count): commit an earlier term's entry by counting replicas.
    commit_prior_term_by_count: bool = False
    # Unsafe (fault_keep_conflicting_suffix): on a conflict, keep our uncommitted entries, ack theirs.
    keep_conflicting_suffix: bool = False
    # Unsafe (fault_vote_twice_in_term): grant a vote in a term we already voted in.
    vote_twice_in_term: bool = False
    # Unsafe (fault_count_unsynced_own_entries): a leader counts its own entries toward a commit
    # once handed to its WAL, before they are durable.
    count_unsynced_own_entries: bool = False

    @property
    def election_timeout_ticks(self) -> int:
        return self.heartbeat_interval_ticks * self.leader_failure_max_missed_heartbeat_periods

    @property
    def vote_lease_ticks(self) -> int:
        """Votes are withheld this long after hearing from a leader: the shortest election
        timeout (RaftCore.vote_lease_ticks; a tombstone withholds as long, in time:
        TabletManager.vote_as_tombstone)."""
        return max(1, int(self.election_timeout_ticks * (1 - self.jitter)))


TICK_MS = 100


@dataclass(frozen=True)
class HardState:
    term: int = 0
    voted_for: str | None = None
    commit: int = 0


@dataclass(frozen=True)
class PersistedState:
    """What the driver read back from disk at start-up.

    `entries` are the durably stored log entries after the compaction point
    (`snapshot_index`, `snapshot_term`); `applied` is how far the state machine already is.
    """

    hard_state: HardState
    committed_config: RaftConfig
    entries: tuple[Entry, ...] = ()
    snapshot_index: int = 0
    snapshot_term: int = 0
    applied: int = 0


@dataclass(frozen=True)
class SoftState:
    role: Role
    leader: str | None
    term: int


@dataclass(frozen=True)
class ReadState:
    """A linearizable read may be served once the local state machine has applied `index`."""

    ctx: bytes
    index: int


@dataclass(frozen=True)
class VoteCast:
    """A vote or pre-vote request this replica answered or ignored, and why."""

    candidate: str
    term: int
    pre_vote: bool
    last_term: int  # the candidate's last logged op
    last_index: int
    granted: bool
    reason: str


@dataclass(frozen=True)
class Election:
    """An election (or pre-election) of ours started, was won or was lost. `votes` are the
    answers counted so far, ours included."""

    outcome: str  # "started" | "won" | "lost"
    term: int
    pre_vote: bool
    votes: tuple[tuple[str, bool], ...]
    voters: tuple[str, ...]
    reason: str = ""


@dataclass(frozen=True)
class ConfigPending:
    """A config-change entry entered our log: in effect at once, committed later."""

    config: RaftConfig


@dataclass(frozen=True)
class ConfigRolledBack:
    """A pending config change was truncated from our log with its entry (a new leader)."""

    config: RaftConfig


@dataclass(frozen=True)
class FollowerLostEntries:
    """A follower refused an append at an index it had acknowledged storing: its log is shorter
    than the match it reported, so its storage lost acknowledged entries (an fsync that lied, a
    disk that lost synced data). The leader starts over from what the follower now has."""

    peer: str
    acknowledged: int  # the follower's match index before
    has: int  # where the follower says its log now ends, at most


Event = VoteCast | Election | ConfigPending | ConfigRolledBack | FollowerLostEntries


@dataclass(frozen=True)
class Ready:
    """One batch of work for the driver. Handle it in this order, then call advance(ready):

    1. persist `entries_to_persist` (an entry whose index is already stored replaces that entry
       and everything after it) and `hard_state` if not None, and `committed_config` if not None;
    2. only then send `messages` (they may depend on the state just persisted: a vote, a term,
       an acknowledged entry — sending first would let a crash break Raft's promises);
    3. apply `committed_entries` in order and serve `read_states`.

    What may go before the write (a leader's own AppendEntries and heartbeats, and committed
    entries an earlier Ready made durable) is decided once, in `ready_steps.steps`, which every
    driver (production and both simulators) follows.

    `events` say what the core decided since the last Ready, for the driver's log. They never
    make a Ready on their own (has_ready() ignores them): they ride with the next one.
    """

    messages: list[Message] = field(default_factory=list)
    entries_to_persist: list[Entry] = field(default_factory=list)
    hard_state: HardState | None = None
    committed_entries: list[Entry] = field(default_factory=list)
    committed_config: RaftConfig | None = None
    soft_state: SoftState | None = None
    read_states: list[ReadState] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


@dataclass(frozen=True)
class PeerStatus:
    member_type: MemberType
    match: int
    next: int
    needs_tablet_copy: bool  # its next entry is below our first retained index
    silent_ticks: int = 0  # ticks since it last answered this leader (or since it led)


@dataclass(frozen=True)
class Status:
    uuid: str
    role: Role
    term: int
    leader: str | None
    commit: int
    applied: int
    last_index: int
    first_index: int
    active_config: RaftConfig
    committed_config: RaftConfig
    peers: dict[str, PeerStatus]  # filled only on the leader
    misaddressed: int  # messages dropped because to_uuid named someone else
    last_term: int = 0  # the term of the entry at last_index: (last_term, last_index) is the
    # log's recency, as a vote compares it
    config_appended_by: str | None = None  # the leader that appended the pending config in
    # effect, if known (RaftCore.known_leader)


class ProposalError(Exception):
    """A proposal the core refused; nothing was appended."""


class NotLeader(ProposalError):
    def __init__(self, leader: str | None):
        super().__init__(f"not the leader (leader: {leader})")
        self.leader = leader


class CasMismatch(ProposalError):
    def __init__(self, expected: int, committed: int):
        super().__init__(f"cas_config_index {expected} != committed config index {committed}")
        self.committed = committed


class ChangePending(ProposalError):
    """A config change is uncommitted, or the leader has not committed an entry of its term."""


class InvalidChange(ProposalError):
    pass


class UnsafeChange(InvalidChange):
    """A removal that would leave too few live voters to commit the new config."""


class SteppingDown(ProposalError):
    """The leader was asked to remove itself: it is handing leadership to `transferee` first."""

    def __init__(self, transferee: str | None):
        super().__init__(f"leader removal: transferring leadership to {transferee}")
        self.transferee = transferee


class EntryTooLarge(ProposalError):
    """A payload larger than one AppendEntries can carry: appended, it could never reach a
    follower, and every later entry would wait behind it."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"entry of {size} bytes exceeds the {limit}-byte limit of one "
                         f"replicated entry")
        self.size, self.limit = size, limit


class SafetyError(AssertionError):
    """The core was asked to do something Raft forbids (e.g. truncate a committed entry)."""
