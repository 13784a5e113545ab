"""The pure Raft core: one replica's consensus state machine, with no I/O, clock, threads or
global randomness, so a simulator can run whole clusters deterministically.

Driver contract (the tablet server does this with asyncio and the WAL; harness.sim does it in memory):

    core = RaftCore(CoreConfig(uuid), random.Random(seed), persisted)   # persisted: from disk
    loop:
        feed inputs:  core.tick()                 every TICK_MS (100 ms) of real time
                      core.step(message)          for each message received from a peer
                      core.propose(payload)       -> index            (leader only)
                      core.propose_config_change(change, cas_config_index) -> index
                      core.transfer_leadership(uuid) / core.step_down()
                      core.read_index(ctx)        -> later a ReadState(ctx, index) in a Ready
                      core.campaign()             start an election now (RunLeaderElection)
                      core.compact(index)         after snapshotting the state machine
                      core.reset_progress(peer, index, term)   leader: a tablet copy landed
                      core.persisted(index, term) a write left behind its Ready is durable
        while core.has_ready():
            rd = core.ready()
            1. persist rd.entries_to_persist (an index already on disk replaces that entry and
               everything after it), rd.hard_state, rd.committed_config (consensus metadata);
            2. send rd.messages — ONLY after step 1 is durable: they may carry a vote, a term
               or an acknowledgement that promises step 1 survives a crash;
            3. apply rd.committed_entries in order; answer rd.read_states once applied that far;
               log rd.events if you like (votes, elections, config changes: the core logs
               nothing itself);
            4. core.advance(rd).
        No input may be fed between ready() and advance(): the core raises RuntimeError.
        A Ready that ready_steps.steps marks `write_behind` (a leader's own write) may be
        advanced before its entries are durable, with advance(rd, written=False); the driver
        then reports them with core.persisted(...) and the leader counts itself only from there.

Timing is in ticks (CoreConfig): heartbeats every 5 ticks (500 ms); a follower campaigns after
3 missed heartbeat periods ±25% jitter, doubled after each failed election (at most 8x); votes
are withheld for the shortest election timeout after hearing from a live leader, and for as long
after a restart (unless the replica never left term 0). Pre-vote is on.

Proposals the core refuses raise a ProposalError subclass (NotLeader, CasMismatch,
ChangePending, InvalidChange, SteppingDown). A follower whose next entry is below the leader's
first retained index shows `needs_tablet_copy` in `status().peers` instead of being retried.
Messages are msgspec Structs: encode with msgspec.msgpack, decode with `type=Message`.
quorum.py, progress.py and confchange.py hold the pure rules the core composes.
"""

from .core import RaftCore
from .messages import (
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    Message,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from .types import (
    TICK_MS,
    CasMismatch,
    ChangeOp,
    ChangePending,
    ConfigChange,
    ConfigPending,
    ConfigRolledBack,
    CoreConfig,
    Election,
    EntryTooLarge,
    Event,
    FollowerLostEntries,
    HardState,
    InvalidChange,
    Member,
    MemberType,
    NotLeader,
    PersistedState,
    ProposalError,
    RaftConfig,
    ReadState,
    Ready,
    Role,
    SafetyError,
    SoftState,
    Status,
    SteppingDown,
    UnsafeChange,
    VoteCast,
    decode_config,
    encode_config,
)

__all__ = [
    "TICK_MS", "AppendEntries", "AppendResponse", "CasMismatch", "ChangeOp", "ChangePending",
    "ConfigChange", "ConfigPending", "ConfigRolledBack", "CoreConfig", "Election",
    "EntryTooLarge", "Event",
    "FollowerLostEntries", "HardState", "Heartbeat", "HeartbeatResponse", "InvalidChange",
    "Member", "MemberType", "Message", "NotLeader", "PersistedState", "ProposalError", "RaftConfig",
    "RaftCore", "ReadState", "Ready", "Role", "SafetyError", "SoftState", "SteppingDown", "Status", "UnsafeChange",
    "TimeoutNow", "VoteCast", "VoteRequest", "VoteResponse", "decode_config", "encode_config",
]
