"""The leader's view of one peer (etcd/raft's tracker.Progress), as bookkeeping only: the core
decides what to send and sends it; Progress says where a peer's log stands and whether an
AppendEntries may go out.

Kudu's peer queue keeps one request in flight per peer, so etcd's probe and replicate modes
collapse into one: the only flow-control state is whether a request is out. A peer whose next
entry is compacted away is a third state, because only a tablet copy can help it and sending it
entries is pointless until one lands.

Invariants: match < next; in NEEDS_COPY, next - 1 is below the leader's compaction point (the
log's offset only grows, and next only grows by an acknowledgement or a reset, both of which
leave NEEDS_COPY).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from node.probes import probe


class PeerState(enum.Enum):
    IDLE = "IDLE"  # nothing outstanding: the next AppendEntries may go out
    IN_FLIGHT = "IN_FLIGHT"  # one AppendEntries unanswered; no other until it is (or a heartbeat is)
    NEEDS_COPY = "NEEDS_COPY"  # its next entry is below our first retained index


@dataclass
class Progress:
    next: int
    match: int = 0
    state: PeerState = PeerState.IDLE
    # Answered since the last check-quorum round: a leader that hears from no majority for an
    # election timeout steps down rather than keep serving a minority.
    recent_active: bool = False
    # Answered in the round before: with `recent_active`, whether the peer answered within the
    # last one to two election timeouts (`heard_lately`), which a removal's safety check needs
    # at any point of a round, not only at its end.
    active_last_round: bool = False
    # Nonzero for a member whose removal committed: the index of the config that removed it.
    # The leader keeps telling it (entries up to there, then a commit index past there) until
    # it answers that it has committed its own removal, or until only a copy could reach it.
    removed_at: int = 0
    # The leader's count of appends sent (AppendEntries.seq) when `match` last rose: a refusal
    # at or below match answering an append up to this one may predate the acknowledgement.
    matched_at_seq: int = 0
    # The peer's own vote lease, as its last heartbeat answer said (RaftCore.voters_lease_ticks)
    lease_ticks: int = 0
    # The highest commit index sent to the peer (in an append or a heartbeat): one below ours
    # is told at the next tick (RaftCore._tell_commit), not by an append of its own at once.
    commit_sent: int = 0
    # The leader's tick (RaftCore.ticks) when the append now IN_FLIGHT went out
    sent_tick: int = 0
    # The leader's tick when the peer last answered, or when this leader began tracking it:
    # how long it has been silent to its tablet's leader, which the leader reports and the
    # master judges a replica's health by (Kudu's peer health report), not by its own view
    heard_tick: int = 0

    def told_of_removal(self, peer_commit: int) -> bool:
        """A removed member is told enough once it has committed the config that removed it
        (it then stops campaigning and reports itself removed), or cannot be told, because
        what it lacks is compacted away."""
        return peer_commit >= self.removed_at or self.needs_copy

    @property
    def heard_lately(self) -> bool:
        return self.recent_active or self.active_last_round

    def end_round(self) -> None:
        """A check-quorum round ended: start counting answers afresh."""
        self.active_last_round, self.recent_active = self.recent_active, False

    @property
    def needs_copy(self) -> bool:
        return self.state is PeerState.NEEDS_COPY

    def stale_ack(self, match: int) -> bool:
        """A success below what the peer already acknowledged is a reordered duplicate: the
        peer's log only gained entries since, so acting on it would move backwards."""
        return match < self.match

    def ack(self, match: int, seq_now: int) -> bool:
        """A (non-stale) success: the peer holds our log up to `match`. Returns whether match
        advanced, i.e. whether the commit index may move. `seq_now`: the last append's seq."""
        self.state = PeerState.IDLE
        advanced = match > self.match
        if advanced:
            self.match = match
            self.matched_at_seq = seq_now
        self.next = max(self.next, self.match + 1)
        return advanced

    def stale_reject(self, rejected: int) -> bool:
        """Only the answer to our outstanding request (prev index next - 1) moves `next`: an
        older rejection describes a probe we have already moved past."""
        return rejected != self.next - 1

    def lost_acknowledged(self, rejected: int, seq: int) -> bool | None:
        """Whether the peer's storage lost acknowledged entries (see FollowerLostEntries): it
        refused an append at or below an index it had acknowledged storing. Only an answer to
        an append sent after that acknowledgement arrived shows it; one to an earlier append
        (reordered, or a duplicate) says where the peer's log stood before: None, stale."""
        if rejected > self.match:
            return False
        return seq > self.matched_at_seq or None

    def reject(self, rejected: int, probe: int, lost: bool) -> None:
        """A (non-stale) rejection; `probe` is the leader's best guess of the last index where
        the logs agree (from the peer's hint). Back off to just above it, one entry at least,
        but never to or below match, unless the peer `lost` what it acknowledged: then match is
        no longer true and is lowered to the probe, since probing above a match the peer no
        longer has would resend the same refused append forever."""
        if self.state is PeerState.IN_FLIGHT:
            self.state = PeerState.IDLE
        if lost:
            self.match = min(self.match, probe)
        self.next = max(min(self.next - 1, probe + 1), self.match + 1)

    def heartbeat_answered(self, sent_by: int, now: int) -> None:
        """The peer answers heartbeats: an append out since tick `sent_by` or earlier (a
        heartbeat interval ago), or its answer, may have been lost: allow a retry. A younger one
        is most likely still being written by the peer (its answer waits for the WAL's sync),
        and heartbeats go out with every read round, many a tick under reads: each answer
        resending it sent the same entries again and again, which the peer then dropped."""
        self.recent_active, self.heard_tick = True, now
        if self.state is PeerState.IN_FLIGHT and self.sent_tick <= sent_by:
            self.state = PeerState.IDLE

    def start_append(self, compacted_to: int, copy_probe: bool, now: int) -> int | None:
        """May an AppendEntries go out now, and after which index? None: nothing may be sent.

        If what the peer needs is at or below `compacted_to` (the log's compaction point), the
        peer needs a tablet copy; then only a `copy_probe` (heartbeat pace) goes out, an empty
        append at the compaction point whose success shows that a copy has landed. A copy probe
        leaves the state NEEDS_COPY (status keeps reporting it) rather than IN_FLIGHT."""
        if self.state is PeerState.IN_FLIGHT:
            return None
        prev = self.next - 1
        if prev < compacted_to:
            probe("raft.leader.peer_needs_copy")
            self.state = PeerState.NEEDS_COPY
            return compacted_to if copy_probe else None
        self.state = PeerState.IN_FLIGHT
        self.sent_tick = now
        return prev

    def reset(self, copied_to: int) -> None:
        """A tablet copy replaced the peer's log with ours up to `copied_to`: what we knew of its
        old log (its match may even be higher, if it lost entries) no longer applies. Nor does
        the copy itself count as an acknowledgement: the receiver votes from its tombstone while
        the copy runs, so by its end it may be in a later term, with a vote for a leader that
        lacks our newest entries; counting `copied_to` as its match would commit them through
        a replica that no longer follows us. So the match is unknown (0), the
        next append goes just past the copy, and only the peer's answer to it, in our term,
        sets the match."""
        self.match = 0
        self.next = copied_to + 1
        self.state = PeerState.IDLE
