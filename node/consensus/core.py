"""RaftCore: one replica's Raft state machine, driven by inputs and drained through Ready.

See the package docstring for the driver contract. Method names follow the Raft paper; the
small `_`-methods that decide safety questions (log up to date, commit rule, quorum counting,
config-change gate, hard state) are separate so tests can substitute wrong variants; the rules
themselves live in quorum.py, progress.py and confchange.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import cast

from node.entry import Entry, EntryType
from node.probes import probe

from . import confchange, quorum
from .log import RaftLog
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
from .progress import PeerState, Progress
from .quorum import VoteResult
from .types import (
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
    PeerStatus,
    PersistedState,
    RaftConfig,
    ReadState,
    Ready,
    Role,
    SafetyError,
    SoftState,
    Status,
    SteppingDown,
    VoteCast,
    decode_config,
    encode_config,
)


@dataclass
class _PendingRead:
    ctx: bytes
    index: int
    acks: set[str] = field(default_factory=set)
    round: bool = False  # a heartbeat round was sent for this read (it gathers acks)


class RaftCore:
    def __init__(self, config: CoreConfig, rng: random.Random, persisted: PersistedState):
        self.cfg = config
        self.id = config.uuid
        self._rng = rng
        hs = persisted.hard_state
        self.term = hs.term
        self.voted_for = hs.voted_for
        self.log = RaftLog(persisted.snapshot_index, persisted.snapshot_term, persisted.entries)
        self.commit = min(hs.commit, self.log.last_index())
        self.applied = max(persisted.applied, persisted.snapshot_index)
        self.committed_config = persisted.committed_config
        # config entries above the committed config, oldest first: the last one is in effect
        self._pending_configs: list[RaftConfig] = []
        for e in self.log.entries:
            if e.type == EntryType.CONFIG_CHANGE and e.index > self.committed_config.opid_index:
                self._pending_configs.append(decode_config(e.payload))
        self._commit_configs()
        self.lead: str | None = None
        # (term, uuid) of the last leader this replica followed or was: who appended the entries
        # of that term (status's config_appended_by). Volatile: unknown after a restart.
        self.known_leader: tuple[int, str] | None = None
        self.role = Role.FOLLOWER
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.ticks = 0  # ticks since the core was made: when an append went out (Progress)
        self.failed_elections = 0
        self.randomized_timeout = 0
        self.votes: dict[str, bool] = {}
        self.progress: dict[str, Progress] = {}
        self.transferee: str | None = None
        self.transfer_elapsed = 0
        # Set once this leader starts a leadership transfer, cleared only by winning a new term:
        # the transferee's election ignores vote withholding (and a TimeoutNow may arrive late,
        # even after the attempt is abandoned), so the driver must not serve lease reads for the
        # rest of this term. See `lease_reads_allowed`.
        self.transfer_started = False
        self.misaddressed = 0
        self.withheld_votes = 0
        # A restart withholds votes for a vote lease from its start, as if it had just heard from
        # a leader: before the crash it may have acknowledged a leader round that the leader's
        # lease counts on, and that promise is not on disk. A core that never left term 0 has
        # acknowledged no leader (a term is persisted before any acknowledgement is sent), so a
        # brand-new replica does not wait. Counted down by tick(); see `_in_lease`.
        self.boot_withhold_ticks = self.vote_lease_ticks() if self.term > 0 else 0
        self._reads: list[_PendingRead] = []
        self._rounds_out = 0  # reads in _reads with a round sent
        self._reads_waiting: list[bytes] = []  # until an entry of this term commits
        self._read_states: list[ReadState] = []
        self._msgs: list[Message] = []
        self._append_seq = 0  # AppendEntries sent by this core, the last one's `seq`
        self._events: list[Event] = []
        self._prev_hard = HardState(self.term, self.voted_for, self.commit)
        self._prev_soft: SoftState | None = None
        self._reported_config = persisted.committed_config  # a config committed by the log is reported
        self._outstanding: Ready | None = None
        self._reset_election_timer()
        self._refresh_role()

    # ---------------------------------------------------------------- config helpers

    @property
    def active_config(self) -> RaftConfig:
        return self._pending_configs[-1] if self._pending_configs else self.committed_config

    def _commit_configs(self) -> None:
        while self._pending_configs and self._pending_configs[0].opid_index <= self.commit:
            probe("raft.config.committed")
            self.committed_config = self._pending_configs.pop(0)

    def _refresh_role(self) -> None:
        """A replica that is not a voter in its own active config is a LEARNER and never campaigns."""
        voter = self.active_config.is_voter(self.id)
        if not voter and self.role != Role.LEADER:
            if self.role != Role.LEARNER:
                self.role = Role.LEARNER
                self.votes = {}
        elif voter and self.role == Role.LEARNER:
            self.role = Role.FOLLOWER

    def _on_config_changed(self) -> None:
        self._refresh_role()
        if self.role != Role.LEADER:
            return
        self._sync_progress()
        if self.transferee is not None and not self.active_config.is_voter(self.transferee):
            self.transferee = None
        self._maybe_commit()
        self._release_reads_confirmed_by_new_quorum()

    def _release_reads_confirmed_by_new_quorum(self) -> None:
        """A removal can make the acknowledgements a read already has a quorum. Nothing else
        would release it then: it waits for an answer to its round, and a leader left as the
        only voter, its removed peer down, hears none."""
        for i in range(len(self._reads) - 1, -1, -1):
            if self._release_reads_through(i):
                probe("raft.read_index.confirmed_by_config_change")
                self._maybe_send_read_round()
                return

    def _sync_progress(self) -> None:
        """Track every member of the active config, and a removed member until it has committed
        its own removal. Dropping it when the removal commits here (as this once did) leaves it
        never hearing of that commit: it kept campaigning, refused by all, and a removed master
        never reported itself REMOVED. Kudu leaves a removed peer
        to the operator; etcd answers its messages with "removed". Here the leader keeps sending
        it heartbeats, whose commit index it applies, until its answer says it committed."""
        members = [m.uuid for m in self.active_config.members + self.committed_config.members]
        for uuid in list(self.progress):  # lists, not sets: the order messages go out in
            pr = self.progress[uuid]  # must not depend on string hashing
            if uuid in members:
                pr.removed_at = 0  # added back before it was told
            elif pr.needs_copy:
                del self.progress[uuid]
            elif not pr.removed_at:
                pr.removed_at = self.committed_config.opid_index
        for uuid in members:
            if uuid != self.id and uuid not in self.progress:
                self.progress[uuid] = Progress(next=self.log.last_index() + 1,
                                               heard_tick=self.ticks)

    def _tell_if_removed(self, uuid: str) -> None:
        """A vote request from a member of neither of our configs: a removed member that never
        heard its removal commit (its leader changed, or forgot it as silent, before telling
        it). It campaigns in vain for ever unless told, so it is told like one removed here."""
        if (uuid == self.id or uuid in self.progress or self.active_config.member(uuid)
                or self.committed_config.member(uuid)):
            return
        probe("raft.leader.removed_member_campaigned")
        self.progress[uuid] = Progress(next=self.log.last_index() + 1, recent_active=True,
                                       heard_tick=self.ticks,
                                       removed_at=self.committed_config.opid_index)

    # ---------------------------------------------------------------- timers

    def _reset_election_timer(self) -> None:
        base = self.cfg.election_timeout_ticks << min(self.failed_elections, self.cfg.max_backoff_exponent)
        spread = base * self.cfg.jitter
        # never before our own vote lease ends: a node that times out is free to vote for others
        self.randomized_timeout = max(self.vote_lease_ticks() + 1, round(base + self._rng.uniform(-spread, spread)))
        self.election_elapsed = 0

    def vote_lease_ticks(self) -> int:
        """Votes are withheld this long after hearing from a leader: the shortest election timeout.
        Counted in ticks from the last message of the leader, so in wall time the window can be
        one tick shorter (the first tick may come right after the message): the driver's leader
        lease (node.replica.read_only.leader_lease_s) is derived from this and must stay below it."""
        return self.cfg.vote_lease_ticks

    def voters_lease_ticks(self) -> int:
        """The shortest vote lease among the voters that have said theirs (in each answer to a
        heartbeat: HeartbeatResponse.lease_ticks) and ours: the leader lease is derived from
        this one. Each voter withholds votes for its own lease, set by its own flags; a lease
        from the leader's alone outlived the withholding of a voter whose election timeout was
        configured shorter, and a new leader could be elected under it. A voter that has not
        answered yet is not counted: a lease rests on the quorum that answered its round, and
        each of those said its lease in that answer, so a voter down does not end lease reads."""
        said = (self.progress[v].lease_ticks for v in self.active_config.voters()
                if v in self.progress and self.progress[v].lease_ticks)
        return min([self.vote_lease_ticks(), *said])

    def lease_reads_allowed(self) -> bool:
        """May the driver serve reads from a leader lease in the current term? Only a leader that
        has not started a leadership transfer in this term: TimeoutNow makes the transferee
        campaign with `transfer=True`, which followers grant without withholding, so nothing
        keeps a new leader from being elected while our lease still runs."""
        return self.role == Role.LEADER and self.transferee is None and not self.transfer_started

    def _in_lease(self) -> bool:
        if self.role == Role.LEADER or self.boot_withhold_ticks > 0:
            return True
        return self.lead is not None and self.election_elapsed < self.vote_lease_ticks()

    # ---------------------------------------------------------------- inputs

    def _check_idle(self) -> None:
        if self._outstanding is not None:
            raise RuntimeError("input while a Ready is outstanding: call advance() first")

    def tick(self) -> None:
        self._check_idle()
        self.ticks += 1
        if self.boot_withhold_ticks > 0:
            self.boot_withhold_ticks -= 1
        if self.role == Role.LEADER:
            self._tick_leader()
        else:
            self._tick_election()

    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self.role == Role.LEARNER or self.election_elapsed < self.randomized_timeout:
            return
        if self.role in (Role.PRE_CANDIDATE, Role.CANDIDATE):
            self._note_failed_election()
            self._election_event("lost", self.role == Role.PRE_CANDIDATE, "timed out")
            probe("raft.election.timed_out")
        self._campaign(pre_vote=self.cfg.pre_vote)

    def _tick_leader(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.transferee is not None:
            self.transfer_elapsed += 1
            if self.transfer_elapsed >= self.cfg.election_timeout_ticks:
                self.transferee = None  # the target did not take over in time
                probe("raft.transfer.timed_out")
        if self.election_elapsed >= self.cfg.election_timeout_ticks:
            self.election_elapsed = 0
            if self.cfg.check_quorum and not self._quorum_active():
                probe("raft.leader.stepped_down_lost_quorum")
                self._become_follower(self.term, None)  # check-quorum: we may be partitioned
                return
            for uuid, pr in list(self.progress.items()):
                if pr.removed_at and not pr.heard_lately:  # a removed member that is down
                    probe("raft.leader.removed_member_silent")  # is not told forever
                    del self.progress[uuid]
                    continue
                pr.end_round()
        if self.heartbeat_elapsed >= self.cfg.heartbeat_interval_ticks:
            self.heartbeat_elapsed = 0
            self._broadcast_heartbeat()
        self._tell_commit()

    def _tell_commit(self) -> None:
        """Each tick, an append to every idle peer not yet sent our commit index: followers
        apply a commit at most a tick after the leader when no write follows it."""
        for uuid, pr in self.progress.items():
            if pr.commit_sent < self.commit and pr.state is PeerState.IDLE:
                probe("raft.leader.commit_told_at_tick")
                self._send_append(uuid)

    def _quorum_active(self) -> bool:
        return quorum.has_quorum(
            self.active_config.voters(),
            lambda v: v == self.id or (v in self.progress and self.progress[v].recent_active),
        )

    def campaign(self) -> None:
        """Start an election now, as if the election timer fired (Kudu's RunLeaderElection)."""
        self._check_idle()
        if self.role not in (Role.LEADER, Role.LEARNER):
            self._campaign(pre_vote=self.cfg.pre_vote)

    def propose(self, payload: bytes) -> int:
        """Append a REPLICATE entry; returns its index. Raises NotLeader, or EntryTooLarge for
        a payload no AppendEntries could carry (nothing is appended)."""
        self._check_idle()
        self._require_leader()
        if len(payload) > self.cfg.max_entry_bytes:
            probe("raft.propose.too_large")
            raise EntryTooLarge(len(payload), self.cfg.max_entry_bytes)
        return self._append(EntryType.REPLICATE, payload)

    def propose_config_change(self, change: ConfigChange, cas_config_index: int) -> int:
        """One-by-one membership change, refused unless `cas_config_index` is the committed
        config's opid index. Removing the leader hands leadership to the most up-to-date voter
        and raises SteppingDown: the driver retries against the new leader."""
        self._check_idle()
        self._require_leader()
        confchange.check_cas(cas_config_index, self.committed_config.opid_index)
        self._check_change_allowed()
        new_config = self._changed_config(change)
        if change.op == ChangeOp.REMOVE:
            confchange.check_safe_removal(
                [m.uuid for m in new_config if m.member_type == MemberType.VOTER],
                lambda v: v == self.id or (v in self.progress and self.progress[v].heard_lately))
        if change.op == ChangeOp.REMOVE and change.uuid == self.id:
            target = self._most_up_to_date_voter()
            if target is None:
                raise InvalidChange("cannot remove the only voter")
            self.transfer_leadership(target)
            probe("raft.config_change.leader_removes_itself")
            raise SteppingDown(target)
        index = self.log.last_index() + 1
        return self._append(
            EntryType.CONFIG_CHANGE,
            encode_config(RaftConfig(opid_index=index, members=new_config)),
        )

    def unsafe_change_config(self, voters: tuple[str, ...]) -> int:
        """Seed 03's manual recovery after a majority is lost for good (Kudu's
        UnsafeChangeConfig): append a config of just `voters` at the next index in our term, as
        a leader would have sent it, so the survivors can elect a leader among themselves.
        Unsafe: what only the lost replicas held is gone. Refused while we lead, and unless we
        are one of `voters`."""
        self._check_idle()
        if self.role == Role.LEADER:
            probe("raft.unsafe_change.refused_leader")
            raise InvalidChange("this replica leads: change its config the safe way")
        if not voters or len(set(voters)) != len(voters) or self.id not in voters:
            raise InvalidChange(f"voters must be distinct and include this replica ({self.id})")
        index = self.log.last_index() + 1
        probe("raft.unsafe_change.appended")
        members = tuple(Member(u, MemberType.VOTER) for u in voters)
        return self._append(EntryType.CONFIG_CHANGE,
                            encode_config(RaftConfig(opid_index=index, members=members)))

    def _check_change_allowed(self) -> None:
        confchange.check_allowed(bool(self._pending_configs), self.log.term_at(self.commit), self.term)

    def _changed_config(self, change: ConfigChange) -> tuple[Member, ...]:
        return confchange.apply(self.active_config, change)

    def _most_up_to_date_voter(self) -> str | None:
        return confchange.successor(self.active_config.voters(), self.id, lambda u: self.progress[u].match)

    def transfer_leadership(self, to: str) -> None:
        """Bring `to` up to date, then tell it to campaign at once (TimeoutNow). Proposals are
        refused meanwhile; the attempt is abandoned after an election timeout."""
        self._check_idle()
        self._require_leader(allow_transfer=True)
        if to == self.id:
            return
        if not self.active_config.is_voter(to):
            raise InvalidChange(f"{to} is not a voter")
        self.transferee = to
        self.transfer_elapsed = 0
        self.transfer_started = True  # no lease reads for the rest of this term
        probe("raft.transfer.started")
        pr = self.progress[to]
        if pr.match == self.log.last_index():
            self._send(TimeoutNow(self.term, self.id, to))
        else:
            self._send_append(to)

    def step_down(self) -> None:
        """Leader gives up leadership without a successor; others elect after a timeout."""
        self._check_idle()
        if self.role == Role.LEADER:
            probe("raft.leader.step_down_requested")
            self._become_follower(self.term, None)

    def read_index(self, ctx: bytes) -> None:
        """etcd's ReadIndex: a ReadState(ctx, commit) is reported once a heartbeat round proves
        we are still leader; requests wait until an entry of this term is committed, as only then
        is our commit index at least every index committed before. Lost on leader change."""
        self._check_idle()
        self._require_leader(allow_transfer=True)
        if self.log.term_at(self.commit) != self.term:
            probe("raft.read_index.waits_for_term_commit")
            self._reads_waiting.append(ctx)
        else:
            self._start_read(ctx)

    def compact(self, index: int) -> None:
        """The driver snapshotted the state machine up to `index`: drop entries up to it."""
        self._check_idle()
        self.log.compact(min(index, self.applied, self.log.stable))

    def reset_progress(self, uuid: str, match: int, term: int) -> None:
        """The driver installed a tablet copy on `uuid` (ordered as leader in `term`) that holds
        our log up to `match`. Whatever we knew of that peer describes a log the copy replaced:
        its old match may even be above `match` (a tombstoned replica lost entries it had
        acknowledged), and trusting it would wedge the peer in a reject loop. Start again from
        the copy, with an append just past it at once; its answer, in our term, is the peer's
        acknowledgement (Progress.reset: the copy's completion is none, since the receiver may
        have voted for another leader while it ran). Ignored unless we still lead in `term`
        and track the peer."""
        self._check_idle()
        pr = self.progress.get(uuid)
        if self.role != Role.LEADER or term != self.term or pr is None:
            probe("raft.copy_installed.ignored")
            return
        probe("raft.leader.progress_reset_by_copy")
        pr.reset(min(match, self.log.last_index()))
        self._send_append(uuid)

    def _require_leader(self, allow_transfer: bool = False) -> None:
        if self.role != Role.LEADER:
            probe("raft.propose.refused_not_leader")
            raise NotLeader(self.lead)
        if self.transferee is not None and not allow_transfer:
            probe("raft.propose.refused_transferring")
            raise NotLeader(self.transferee)

    # ---------------------------------------------------------------- role transitions

    def _become_follower(self, term: int, lead: str | None) -> None:
        if term > self.term:
            self.term = term
            self.voted_for = None
        self.role = Role.FOLLOWER
        self.lead = lead
        if lead is not None:
            self.known_leader = (self.term, lead)
        self.votes = {}
        self.progress = {}
        self.transferee = None
        self.transfer_started = False
        self._reads = []
        self._rounds_out = 0
        self._reads_waiting = []
        self._reset_election_timer()
        self._refresh_role()

    def _campaign(self, pre_vote: bool, transfer: bool = False) -> None:
        if pre_vote:
            probe("raft.prevote.started")
            self.role = Role.PRE_CANDIDATE
            vote_term = self.term + 1
        else:
            probe("raft.election.started")
            self.role = Role.CANDIDATE
            self.term += 1
            self.voted_for = self.id
            vote_term = self.term
        self.lead = None
        self.votes = {self.id: True}
        self._reset_election_timer()
        self._election_event("started", pre_vote)
        if self._tally() is VoteResult.WON:
            self._election_won(pre_vote)
            return
        last_index, last_term = self.log.last_index(), self.log.last_term()
        for uuid in self.active_config.voters():
            if uuid != self.id:
                self._send(VoteRequest(vote_term, self.id, uuid, last_index, last_term, pre_vote, transfer))

    def _tally(self) -> VoteResult:
        return quorum.vote_result(self.active_config.voters(), self.votes)

    def _election_event(self, outcome: str, pre_vote: bool, reason: str = "") -> None:
        voters = self.active_config.voters()
        votes = tuple((v, self.votes[v]) for v in voters if v in self.votes)
        term = self.term + 1 if pre_vote else self.term
        self._events.append(Election(outcome, term, pre_vote, votes, tuple(voters), reason))

    def _election_won(self, pre_vote: bool) -> None:
        self._election_event("won", pre_vote)
        if pre_vote:
            probe("raft.prevote.won")
            self._campaign(pre_vote=False)
        else:
            probe("raft.election.won")
            self._become_leader()

    def _become_leader(self) -> None:
        self.role = Role.LEADER
        self.lead = self.id
        self.known_leader = (self.term, self.id)
        self.failed_elections = 0
        self.heartbeat_elapsed = 0
        self.election_elapsed = 0
        self.votes = {}
        self.transferee = None
        self.transfer_started = False
        self.progress = {}
        self._on_config_changed()  # builds progress for every member
        self._append(EntryType.NO_OP, b"")

    # ---------------------------------------------------------------- leader: log and replication

    def _append(self, type_: EntryType, payload: bytes) -> int:
        entry = Entry(self.term, self.log.last_index() + 1, type_, payload)
        self.log.append(entry)
        if type_ == EntryType.CONFIG_CHANGE:
            self._pending_configs.append(decode_config(payload))
            self._events.append(ConfigPending(self._pending_configs[-1]))
            self._on_config_changed()
        for uuid in self.progress:
            self._send_append(uuid)
        return entry.index

    def _send(self, msg: Message) -> None:
        self._msgs.append(msg)

    def _send_append(self, uuid: str, copy_probe: bool = False) -> None:
        pr = self.progress[uuid]
        prev = pr.start_append(self.log.offset, copy_probe, self.ticks)
        if prev is None:
            return
        # a peer that needs a tablet copy gets an empty probe at our compaction point
        entries = () if pr.needs_copy else self.log.batch(pr.next, self.cfg.max_batch_bytes)
        # prev is at or above our compaction point and, unless a peer acknowledged past our log
        # (only the unsafe test variants let it), at or below our last index: a term is there.
        # The cast claims nothing at run time: the message carries whatever term_at says.
        prev_term = cast(int, self.log.term_at(prev))
        self._append_seq += 1
        pr.commit_sent = self.commit
        self._send(AppendEntries(self.term, self.id, uuid, prev, prev_term, entries, self.commit,
                                 self._append_seq))

    def _broadcast_heartbeat(self) -> None:
        """Every heartbeat is a read round for the newest pending read, if any."""
        ctx = b""
        if self._reads:
            newest = self._reads[-1]
            ctx = newest.ctx
            if not newest.round:
                probe("raft.read_index.round_sent")
                newest.round = True
                self._rounds_out += 1
        for uuid, pr in self.progress.items():
            commit = min(pr.match, self.commit)
            pr.commit_sent = max(pr.commit_sent, commit)
            self._send(Heartbeat(self.term, self.id, uuid, commit, ctx))

    def _quorum_index(self) -> int:
        """Highest index stored by a majority of voters (our own entries count once durable;
        the unsafe count_unsynced_own_entries counts them once handed to the driver)."""
        own = self.log.handed if self.cfg.count_unsynced_own_entries else self.log.stable
        return quorum.committed_index(
            self.active_config.voters(),
            lambda v: own if v == self.id else self.progress[v].match,
        )

    def _maybe_commit(self) -> None:
        n = self._quorum_index()
        # Only an entry of the current term commits by counting (Raft §5.4.2, figure 8);
        # earlier entries commit with it. The unsafe commit_prior_term_by_count skips that check.
        if n > self.commit and (self.log.term_at(n) == self.term or self.cfg.commit_prior_term_by_count):
            if self.log.term_at(self.commit + 1) != self.term:
                probe("raft.commit.prior_term_entries")
            if n > self.log.stable:
                probe("raft.commit.before_own_write")
            self._commit_to(n)
            self._on_leader_commit()

    def _on_leader_commit(self) -> None:
        """A peer with entries still to receive gets them now, with the new commit index. One
        that holds them all is not sent an append only to carry the index: it hears of it with
        the next append (the next write) or at the next tick (`_tell_commit`). Kudu and etcd/raft
        send that append at once; here each is a round of RPC handling on every process, and
        on a lone writer's path it kept the faster follower busy (and IN_FLIGHT, so the next
        write's append to it waited) while the next write arrived
        (docs/decisions/commit-index-at-tick.md)."""
        last = self.log.last_index()
        for uuid, pr in self.progress.items():
            if pr.next <= last:
                self._send_append(uuid)
        if self._reads_waiting and self.log.term_at(self.commit) == self.term:
            waiting, self._reads_waiting = self._reads_waiting, []
            for ctx in waiting:
                self._start_read(ctx)
        self._maybe_promote()

    def _commit_to(self, index: int) -> None:
        if index > self.log.last_index():
            raise SafetyError(f"{self.id}: commit {index} beyond last log index {self.log.last_index()}")
        if index > self.commit:
            self.commit = index
            committed = self.committed_config
            self._commit_configs()
            if self.role == Role.LEADER and self.committed_config is not committed:
                self._sync_progress()

    def _maybe_promote(self) -> None:
        """Promote a NON_VOTER with `promote` once it holds every committed entry: what it still
        lacks is the tail the leader is replicating in the current round."""
        if self.transferee is not None:
            return
        uuid = confchange.promotion_candidate(self.active_config, lambda u: self.progress[u].match, self.commit)
        if uuid is None:
            return
        try:
            self._check_change_allowed()
        except ChangePending:
            return
        probe("raft.learner.promoted")
        self.propose_config_change(ConfigChange(ChangeOp.PROMOTE, uuid), self.committed_config.opid_index)

    def _start_read(self, ctx: bytes) -> None:
        """Reads are confirmed in rounds, at most `max_read_rounds` out at once: a read that
        arrives while they are all out waits for the next one, which goes out when one of them
        is confirmed (or at the next heartbeat tick if none is) and confirms every read that
        waited. Many reads share each confirmation, as in etcd's read loop, instead of a
        heartbeat broadcast per read; more than one round out pipelines them, so a read waits
        about one round trip instead of up to two."""
        self._reads.append(_PendingRead(ctx, self.commit, {self.id}))
        self._release_reads_through(len(self._reads) - 1)  # a single voter confirms at once
        self._maybe_send_read_round()

    def _maybe_send_read_round(self) -> None:
        if self._reads and not self._reads[-1].round and self._rounds_out < self.cfg.max_read_rounds:
            self._broadcast_heartbeat()

    def _release_reads_through(self, i: int) -> bool:
        """A quorum acknowledging read i's round also confirms every earlier read. Only the
        reads that rounds were sent for gather acks, so only they need counting, not every read
        waiting (hundreds, under load)."""
        if not quorum.has_quorum(self.active_config.voters(), self._reads[i].acks.__contains__):
            return False
        done, self._reads = self._reads[: i + 1], self._reads[i + 1 :]
        for r in done:
            self._rounds_out -= r.round
            self._read_states.append(ReadState(r.ctx, r.index))
        return True

    # ---------------------------------------------------------------- step

    def step(self, m: Message) -> None:
        """Handle one message from a peer."""
        self._check_idle()
        if m.to_uuid != self.id:
            probe("raft.step.misaddressed")
            self.misaddressed += 1
            return
        if type(m) is VoteRequest and self.role == Role.LEADER:
            self._tell_if_removed(m.from_uuid)
        if m.term > self.term:
            if type(m) is VoteRequest:
                if not m.transfer and self._in_lease():
                    probe("raft.vote.withheld_in_lease")
                    self.withheld_votes += 1  # a live leader exists: do not let this node disrupt it
                    self._vote_event(m, False, f"withheld: heard from leader {self.lead} within "
                                     f"the vote lease" if self.lead is not None else
                                     "withheld: restarted within a vote lease")
                    return
                if not m.pre_vote:
                    self._become_follower(m.term, None)
            elif type(m) is VoteResponse and m.pre_vote and m.granted:
                pass  # carries the term we would campaign in
            elif (type(m) in (VoteResponse, AppendResponse, HeartbeatResponse)
                  and self.role in (Role.FOLLOWER, Role.LEARNER) and self._in_lease()):
                # A late answer to something we sent before (a pre-vote, or appends while we
                # led). Taking its term would clear `lead` and with it the vote withholding
                # (and a restart's, boot_withhold_ticks), no tick having passed: we would then
                # grant a vote in that term while the leader's lease, resting on our
                # acknowledgement, still runs. A follower needs no answer; the new term comes
                # from its candidate (once the lease is out) or its leader.
                probe("raft.step.stale_answer_dropped_in_lease")
                return
            else:
                probe("raft.leader.stepped_down_higher_term") if self.role == Role.LEADER else probe(
                    "raft.term.adopted_from_message")
                leads = type(m) in (AppendEntries, Heartbeat, TimeoutNow)
                self._become_follower(m.term, m.from_uuid if leads else None)
        elif m.term < self.term:
            if type(m) in (AppendEntries, Heartbeat):
                # A deposed leader: tell it our term so it steps down.
                probe("raft.stale_leader.told_newer_term")
                self._send(AppendResponse(self.term, self.id, m.from_uuid, False))
            elif type(m) is VoteRequest:
                if m.pre_vote:
                    self._send(VoteResponse(self.term, self.id, m.from_uuid, False, True))
                probe("raft.vote.refused_stale_term")
                self._vote_event(m, False, f"term behind ours ({self.term})")
            return
        getattr(self, _HANDLERS[type(m)])(m)

    def _log_up_to_date(self, last_term: int, last_index: int) -> bool:
        mine = self.log.last_term()
        return last_term > mine or (last_term == mine and last_index >= self.log.last_index())

    def _on_vote_request(self, m: VoteRequest) -> None:
        can_vote = (
            self.voted_for == m.from_uuid
            or ((self.voted_for is None or self.cfg.vote_twice_in_term) and self.lead is None)
            or (m.pre_vote and m.term > self.term)
        )
        up_to_date = self._log_up_to_date(m.last_term, m.last_index)
        behind = f"log behind ours ({self.log.last_term()}, {self.log.last_index()})"
        if can_vote and (up_to_date or self.cfg.vote_skip_log_check):
            self._send(VoteResponse(m.term, self.id, m.from_uuid, True, m.pre_vote))
            if not m.pre_vote:
                probe("raft.vote.granted")
                self.voted_for = m.from_uuid
                self.election_elapsed = 0
            self._vote_event(m, True, "log up to date" if up_to_date else
                             f"{behind}, not checked (vote_skip_log_check)")
        else:
            probe("raft.vote.refused_log_behind") if can_vote else probe(
                "raft.vote.refused_voted_or_following")
            self._send(VoteResponse(self.term, self.id, m.from_uuid, False, m.pre_vote))
            self._vote_event(m, False, behind if can_vote else
                             f"already voted for {self.voted_for}" if self.voted_for is not None
                             else f"following leader {self.lead}")

    def _vote_event(self, m: VoteRequest, granted: bool, reason: str) -> None:
        self._events.append(VoteCast(m.from_uuid, m.term, m.pre_vote, m.last_term, m.last_index,
                                     granted, reason))

    def _on_vote_response(self, m: VoteResponse) -> None:
        if m.pre_vote:
            if self.role != Role.PRE_CANDIDATE or (m.granted and m.term != self.term + 1):
                return
        elif self.role != Role.CANDIDATE:
            return
        self.votes[m.from_uuid] = m.granted
        result = self._tally()
        if result is VoteResult.WON:
            self._election_won(m.pre_vote)
        elif result is VoteResult.LOST:
            self._note_failed_election()
            self._election_event("lost", m.pre_vote, "a majority refused")
            probe("raft.prevote.lost") if m.pre_vote else probe("raft.election.lost")
            self._become_follower(self.term, None)

    def _note_failed_election(self) -> None:
        """Each failed election doubles the next timeout (bounded), so competing candidates
        spread out instead of splitting votes forever."""
        self.failed_elections = min(self.failed_elections + 1, self.cfg.max_backoff_exponent)

    def _heard_from_leader(self, m: AppendEntries | Heartbeat) -> None:
        if self.role not in (Role.FOLLOWER, Role.LEARNER) or self.lead != m.from_uuid:
            self._become_follower(self.term, m.from_uuid)
        self.failed_elections = 0
        self.election_elapsed = 0

    def _log_matches(self, index: int, term: int) -> bool:
        t = self.log.term_at(index)
        if t is not None and self.cfg.keep_conflicting_suffix:
            # Unsafe: whatever entry we hold there is taken for the leader's, so we never ask
            # the leader to back off over entries we kept (no endless reject loop either).
            return True
        return t == term

    def _on_append(self, m: AppendEntries) -> None:
        self._heard_from_leader(m)
        if m.prev_index < self.commit:
            probe("raft.follower.append_below_commit")
            self._send(AppendResponse(self.term, self.id, m.from_uuid, True, match_index=self.commit,
                                      seq=m.seq))
            return
        if not self._log_matches(m.prev_index, m.prev_term):
            probe("raft.follower.append_rejected_mismatch")
            hint = self.log.find_conflict_by_term(min(m.prev_index, self.log.last_index()), m.prev_term)
            self._send(
                AppendResponse(
                    self.term, self.id, m.from_uuid, False,
                    reject_index=m.prev_index, hint_index=hint, hint_term=self.log.term_at(hint) or 0,
                    seq=m.seq,
                )
            )
            return
        self._append_from_leader(m.entries)
        last_new = m.prev_index + len(m.entries)
        self._commit_to(min(m.commit, last_new))
        self._send(AppendResponse(self.term, self.id, m.from_uuid, True, match_index=last_new,
                                  seq=m.seq))

    def _append_from_leader(self, entries: tuple[Entry, ...]) -> None:
        config_changed = False
        for pos, e in enumerate(entries):
            t = self.log.term_at(e.index)
            if t == e.term:
                continue
            if t is not None:
                if self.cfg.keep_conflicting_suffix:
                    continue  # unsafe: keep our conflicting entry instead of truncating
                if e.index <= self.commit:
                    probe("raft.safety.conflict_below_commit")
                    raise SafetyError(f"{self.id}: conflict at committed index {e.index}")
                probe("raft.follower.truncated_conflict")
                self.log.truncate_from(e.index)
                while self._pending_configs and self._pending_configs[-1].opid_index >= e.index:
                    # the change is rolled back with its entry
                    probe("raft.config.rolled_back")
                    self._events.append(ConfigRolledBack(self._pending_configs.pop()))
                    config_changed = True
            for new in entries[pos:]:
                self.log.append(new)
                if new.type == EntryType.CONFIG_CHANGE:
                    self._pending_configs.append(decode_config(new.payload))
                    self._events.append(ConfigPending(self._pending_configs[-1]))
                    config_changed = True
            break
        if config_changed:
            self._on_config_changed()

    def _on_append_response(self, m: AppendResponse) -> None:
        pr = self.progress.get(m.from_uuid)
        if pr is None or self.role != Role.LEADER:
            return
        pr.recent_active, pr.heard_tick = True, self.ticks
        if m.success:
            if pr.stale_ack(m.match_index):
                return
            if pr.ack(m.match_index, self._append_seq):
                self._maybe_commit()
                self._maybe_promote()
            if m.from_uuid == self.transferee and pr.match == self.log.last_index():
                self._send(TimeoutNow(self.term, self.id, m.from_uuid))
        else:
            if pr.stale_reject(m.reject_index):
                return
            guess = m.hint_index
            if m.hint_term > 0:
                guess = self.log.find_conflict_by_term(m.hint_index, m.hint_term)
            lost = pr.lost_acknowledged(m.reject_index, m.seq)
            if lost is None:
                # A duplicate, or a reordered answer to a request sent before the peer's
                # acknowledgement reached us: the peer had not stored the entries yet then.
                probe("raft.leader.stale_reject_below_match")
                return
            if lost:
                # The committed entries it lost are still on a majority (unless they lied too),
                # so it is rebuilt from where it now is.
                probe("raft.leader.follower_lost_acknowledged")
                self._events.append(FollowerLostEntries(m.from_uuid, pr.match, guess))
            pr.reject(m.reject_index, guess, lost)
        if pr.next <= self.log.last_index():
            self._send_append(m.from_uuid)

    def _on_heartbeat(self, m: Heartbeat) -> None:
        self._heard_from_leader(m)
        self._commit_to(min(m.commit, self.log.last_index()))
        self._send(HeartbeatResponse(self.term, self.id, m.from_uuid, m.ctx, self.commit,
                                     self.vote_lease_ticks()))

    def _on_heartbeat_response(self, m: HeartbeatResponse) -> None:
        pr = self.progress.get(m.from_uuid)
        if pr is None or self.role != Role.LEADER:
            return
        pr.heartbeat_answered(self.ticks - self.cfg.heartbeat_interval_ticks, self.ticks)
        pr.lease_ticks = m.lease_ticks
        if pr.removed_at and pr.told_of_removal(m.commit):
            probe("raft.leader.removed_member_told")
            del self.progress[m.from_uuid]
            return
        if pr.match < self.log.last_index() or pr.needs_copy:
            self._send_append(m.from_uuid, copy_probe=True)
        if m.ctx:
            for i, r in enumerate(self._reads):
                if r.ctx == m.ctx:
                    r.acks.add(m.from_uuid)
                    if self._release_reads_through(i):
                        self._maybe_send_read_round()  # for reads that came meanwhile
                    break

    def _on_timeout_now(self, m: TimeoutNow) -> None:
        if self.active_config.is_voter(self.id):
            probe("raft.transfer.timeout_now_campaign")
            self._campaign(pre_vote=False, transfer=True)

    # ---------------------------------------------------------------- Ready

    def _hard_state(self) -> HardState:
        return HardState(self.term, self.voted_for, self.commit)

    def _soft_state(self) -> SoftState:
        return SoftState(self.role, self.lead, self.term)

    def _hard_changed(self) -> bool:
        """Built by `_hard_state`, the one place that says what is persisted (unlike the soft
        state below, not compared field by field: a change there, a vote left out, must also
        change what counts as changed, or the driver is handed Readys for ever)."""
        return self._hard_state() != self._prev_hard

    def _soft_changed(self) -> bool:
        """`_soft_state() != _prev_soft` (None before the first Ready), as `_hard_changed`."""
        ps = self._prev_soft
        return ps is None or (self.role, self.lead, self.term) != (ps.role, ps.leader, ps.term)

    def has_ready(self) -> bool:
        return bool(
            self._msgs
            or self.log.handed < self.log.last_index()
            or self.applied < self.commit
            or self._read_states
            or self._hard_changed()
            or self._soft_changed()
            or self._config_to_persist() is not None
        )

    def _config_to_persist(self) -> RaftConfig | None:
        """The committed config, once it is new to the driver and its entry is durable here. A
        leader's own write runs behind its Ready, so its followers can commit a config entry it
        has not yet made durable; saved then, and the write lost in a power cut, the replica
        restarted with a committed config its log lacks, and a copy from it would hand that on.
        Until then the consensus metadata keeps the config before: the log's entry is replayed
        as pending at a restart, as any config entry above the committed one is."""
        c = self.committed_config
        if c is self._reported_config or c.opid_index > self.log.stable:
            return None
        return c

    def ready(self) -> Ready:
        """Everything the driver must do now; no input is accepted until advance(ready)."""
        self._check_idle()
        rd = Ready(
            messages=self._msgs,
            entries_to_persist=self.log.unstable(),
            hard_state=self._hard_state() if self._hard_changed() else None,
            committed_entries=self.log.slice(self.applied + 1, self.commit),
            committed_config=self._config_to_persist(),
            soft_state=self._soft_state() if self._soft_changed() else None,
            read_states=self._read_states,
            events=self._events,
        )
        self._msgs = []
        self._read_states = []
        self._events = []
        self._outstanding = rd
        return rd

    def advance(self, rd: Ready, written: bool = True) -> None:
        """The driver persisted, sent and applied `rd`. A driver still writing its entries in
        the background (a leader's write, ready_steps.Steps.write_behind) passes
        `written=False` and reports their durability later with `persisted`."""
        if rd is not self._outstanding:
            raise RuntimeError("advance() with a Ready that is not the outstanding one")
        self._outstanding = None
        if rd.entries_to_persist:
            last = rd.entries_to_persist[-1].index
            if written:
                self.log.stable_to(last)
            else:
                self.log.handed_to(last)
        if rd.hard_state is not None:
            self._prev_hard = rd.hard_state
        if rd.soft_state is not None:
            self._prev_soft = rd.soft_state
        if rd.committed_entries:
            self.applied = rd.committed_entries[-1].index
        if rd.committed_config is not None:
            self._reported_config = rd.committed_config
        if self.role == Role.LEADER and rd.entries_to_persist:
            self._maybe_commit()  # our own entries now count toward the quorum

    def persisted(self, index: int, term: int) -> None:
        """A background write (advance(written=False)) is durable through `index`, whose entry
        had `term`. Ignored when that entry has since been replaced (a new leader truncated it:
        a write of the same index and term holds the same entries, by log matching) or an
        earlier report already said so. The leader counts itself toward a commit only from
        here, so until then its followers alone may make a majority (Raft thesis 10.2.1)."""
        self._check_idle()
        if index <= self.log.stable or self.log.term_at(index) != term:
            probe("raft.persisted.stale_report")
            return
        self.log.stable_to(index)
        if self.role == Role.LEADER:
            self._maybe_commit()

    def status(self) -> Status:
        peers = {}
        for uuid, pr in self.progress.items():
            member = self.active_config.member(uuid) or self.committed_config.member(uuid)
            if member is None:  # removed, and still being told so
                continue
            peers[uuid] = PeerStatus(member.member_type, pr.match, pr.next, pr.needs_copy,
                                     self.ticks - pr.heard_tick)
        return Status(
            self.id, self.role, self.term, self.lead, self.commit, self.applied,
            self.log.last_index(), self.log.first_index(), self.active_config,
            self.committed_config, peers, self.misaddressed, self.log.last_term(),
            self._config_appended_by(),
        )

    def _config_appended_by(self) -> str | None:
        """The leader that appended the pending config in effect, when this replica knows it
        (it followed or was that entry's term's leader); None with no change pending."""
        if not self._pending_configs or self.known_leader is None:
            return None
        term, uuid = self.known_leader
        return uuid if self.log.term_at(self.active_config.opid_index) == term else None


_HANDLERS = {  # by name, so a test can substitute one handler on the class
    VoteRequest: "_on_vote_request",
    VoteResponse: "_on_vote_response",
    AppendEntries: "_on_append",
    AppendResponse: "_on_append_response",
    Heartbeat: "_on_heartbeat",
    HeartbeatResponse: "_on_heartbeat_response",
    TimeoutNow: "_on_timeout_now",
}
