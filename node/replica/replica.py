"""One running tablet replica: the pure Raft core driven with real I/O.

The core may not be fed while a Ready is in flight, and handling a Ready awaits fsyncs, so every
input (ticks, peer messages, proposals, read-index requests) goes through one inbox drained by a
single driver task. That task handles each Ready in the core's order: persist entries (WAL) and
hard state / committed config (consensus metadata), then send messages, then apply committed
entries and answer reads, then advance. Proposals that arrive during an fsync pile up in the
inbox and go to disk together in the next Ready: group commit at the replica level.

Writes are answered when their entry is applied here. If a different entry is applied at a
proposal's index, the proposal was overwritten by a new leader and definitely did not happen.
A leader accepts writes only once it has applied an entry of its own term: then every earlier
entry is applied, its hybrid clock has witnessed every earlier timestamp, and the timestamps it
assigns are greater than any its predecessors issued (Kudu's commit-wait rule). An ok write's
result carries its timestamp, and is returned only after commit-wait (node.replica.answers): once the
clock minus `clock_max_error_us` is past it, so later writes anywhere get larger timestamps.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from node.clock import HybridClock
from node.consensus import (
    TICK_MS,
    ChangeOp,
    ConfigChange,
    ConfigPending,
    ConfigRolledBack,
    CoreConfig,
    Election,
    EntryTooLarge,
    Event,
    FollowerLostEntries,
    HardState,
    NotLeader,
    PersistedState,
    ProposalError,
    RaftConfig,
    RaftCore,
    Ready,
    Role,
    VoteCast,
    decode_config,
    encode_config,
)
from node.consensus.ready_steps import steps
from node.entry import Entry, EntryType
from node.errors import CorruptionError, ReplicaError, is_disk_failure
from node.faults import Faults
from node.logfmt import SAFETY, TabletLog, log_failure
from node.probes import probe
from node.replica.answers import OpenGroup, WriteAnswers, answer_members
from node.replica.copy_pins import CopyPins
from node.replica.done import Done, finish, settle
from node.replica.inbox import Inbox, Refuse
from node.replica.leader_gate import LeaderGate
from node.replica.metadata_saves import MetadataSaves
from node.replica.read_only import ReadOnly
from node.replica.snapshot_policy import retain_from, snapshot_due
from node.replica.wal_writes import WalWrites
from node.rpc.wire import DEFAULT_MAX_FRAME, ENVELOPE_RESERVE
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.ops import (
    COMMAND_VERSION,
    ROW_OP_TYPES,
    Batch,
    Command,
    Group,
    Member,
    Op,
    Result,
    RowOp,
    command_payload,
    decode_command,
)
from node.tablet.paths import TabletPaths
from node.tablet.snapshot import SnapshotStore
from node.tablet.state import Limits, StateMachine
from node.tablet.superblock import OpId
from node.wal import Log, LogOptions

log = logging.getLogger(__name__)

Send = Callable[[str, list], None]  # (to_uuid, messages): queue for delivery, never block


class TooLarge(ReplicaError):
    """A write whose entry no AppendEntries could carry: refused before it was proposed, so it
    certainly did not apply, and no replica would take it."""


# The most single row ops one Group entry carries: a few hundred small writes make an entry of
# tens of kilobytes, and bound the burst of answers one apply sends.
MAX_GROUP = 256




@dataclass(frozen=True)
class ReplicaOptions:
    tick_ms: int = TICK_MS
    heartbeat_interval_ticks: int = 5  # raft_heartbeat_interval_ms = 500
    leader_failure_max_missed_heartbeat_periods: int = 3
    read_mode: str = "linearizable"  # or "lease": see `read`
    max_clock_drift: float = 0.05  # lease reads assume clocks run within ±5% of each other
    # Bound on how far any two clocks of the cluster may disagree, in µs. A write is acked only
    # once our clock minus it is past the write's timestamp (commit-wait, `Replica.write`), so
    # each write costs up to this much latency beyond its replication. Loopback and network-
    # namespace clusters share one kernel clock: 1 ms is ample there.
    clock_max_error_us: int = 1_000
    snapshot_interval_entries: int = 20_000  # applied entries between snapshots
    snapshot_interval_mb: float = 1024.0  # ... or MiB of them, first wins (snapshot_policy)
    log_retain_entries: int = 5_000  # entries kept after a snapshot for lagging followers
    log_retain_mb: float = 1024.0  # ... and at most this many MiB of them (snapshot_policy)
    log: LogOptions = field(default_factory=LogOptions)
    faults: Faults = field(default_factory=Faults)
    # The dedup table's bounds a new tablet starts with (a snapshot carries its own). They
    # decide results, so every server of a cluster must agree: no daemon flag sets them; the
    # simulator's swarm mixes shrink them so sessions are evicted (sessions=N).
    session_limits: Limits = field(default_factory=Limits)
    wall_ns: Callable[[], int] = time.time_ns  # the hybrid clock's physical source (simulator)
    # The RPC frame limit of this server and its peers (Kudu's rpc_max_message_size): what
    # the server's RPC endpoints accept and send. A proposal is refused (TooLarge) unless it
    # fits an AppendEntries within it, ENVELOPE_RESERVE kept for the envelope.
    rpc_max_message_size: int = DEFAULT_MAX_FRAME

    def core_config(self, uuid: str) -> CoreConfig:
        # An entry alone, or a batch of them, plus the AppendEntries' envelope fits the frame.
        max_entry = self.rpc_max_message_size - ENVELOPE_RESERVE
        return CoreConfig(
            uuid,
            max_batch_bytes=min(CoreConfig.max_batch_bytes, max_entry),
            max_entry_bytes=max_entry,
            heartbeat_interval_ticks=self.heartbeat_interval_ticks,
            leader_failure_max_missed_heartbeat_periods=self.leader_failure_max_missed_heartbeat_periods,
            check_quorum=not self.faults.fault_read_without_leadership,
            vote_skip_log_check=self.faults.fault_vote_skip_log_check,
            commit_prior_term_by_count=self.faults.fault_commit_prior_term_by_count,
            keep_conflicting_suffix=self.faults.fault_keep_conflicting_suffix,
            vote_twice_in_term=self.faults.fault_vote_twice_in_term,
            count_unsynced_own_entries=self.faults.fault_count_unsynced_own_entries,
        )


def _raise(err: BaseException) -> None:
    """Raise `err` in the driver (a write behind its Ready failed): the replica fails there."""
    raise err


def config_text(config: RaftConfig) -> str:
    """`index N [uuid VOTER, uuid NON_VOTER+promote, ...]`: a config as operators read it."""
    members = ", ".join(f"{m.uuid} {m.member_type.name}{'+promote' if m.promote else ''}"
                        for m in config.members)
    return f"index {config.opid_index} [{members}]"


def log_event(log: TabletLog, ev: Event) -> None:
    """One line per decision the core reports: votes, elections, config changes."""
    if isinstance(ev, VoteCast):
        log.info("%s %s to %s for term %d, its last op (%d, %d): %s",
                 "granted" if ev.granted else "denied",
                 "pre-vote" if ev.pre_vote else "vote", ev.candidate, ev.term,
                 ev.last_term, ev.last_index, ev.reason)
    elif isinstance(ev, Election):
        kind = "pre-election" if ev.pre_vote else "election"
        votes = ", ".join(f"{u}={'yes' if g else 'no'}" for u, g in ev.votes)
        log.info("%s %s for term %s: votes %s of voters %s%s", ev.outcome, kind,
                 ev.term, votes or "none", ", ".join(ev.voters),
                 f" ({ev.reason})" if ev.reason else "")
    elif isinstance(ev, ConfigPending):
        log.info("config change pending: %s", config_text(ev.config))
    elif isinstance(ev, ConfigRolledBack):
        log.info("config change rolled back (its entry was truncated): %s",
                 config_text(ev.config))
    elif isinstance(ev, FollowerLostEntries):
        log.error("%s follower %s lost acknowledged entries: it acknowledged index %d, "
                  "its log now ends at or before %d; replicating them again", SAFETY,
                  ev.peer, ev.acknowledged, ev.has)


def bootstrap_replica(paths: TabletPaths, config: RaftConfig) -> None:
    """Create the consensus metadata of a brand-new replica (its first config, term 0)."""
    ConsensusMetadata.create(paths.consensus_meta, paths.tablet_id, encode_config(config), paths.disk)


class Replica:
    def __init__(self, uuid: str, paths: TabletPaths, send: Send, options: ReplicaOptions,
                 rng: random.Random | None = None):
        """`rng` draws election timeouts: seeded by the simulator for replayable runs."""
        self.uuid = uuid
        self.tablet_id = paths.tablet_id
        self.paths = paths
        self.options = options
        self.log = TabletLog(log, paths.tablet_id, uuid)
        self._send = send
        self.clock = HybridClock(options.clock_max_error_us, options.wall_ns)
        self._rng = rng or random.Random()
        self.snapshots = SnapshotStore(paths.snapshot_dir, paths.tablet_id, paths.disk)
        self._wake = asyncio.Event()
        self._inbox = Inbox(self._wake)  # what the driver runs in its turn, and what it owes
        # Everything this replica runs in the background, so that stop() can end it all: tasks
        # (cancelled) and blocking calls in threads (awaited: a thread cannot be cancelled).
        self._tasks: set[asyncio.Task] = set()
        self._threads: set[asyncio.Future] = set()
        self._stopping: asyncio.Task | None = None
        self._waiters: dict[int, tuple[int, Done]] = {}  # index -> (term, its proposer's done)
        # index -> (term, Command) of the commands we proposed, so that applying them needs
        # no second decode; an entry of another term at that index is not ours and is decoded.
        self._proposed: dict[int, tuple[int, Command]] = {}
        self._open_group: OpenGroup | None = None  # queued, still taking writes
        # (index, then, refuse): callbacks for when `index` is applied, or the replica stops
        self._applied_waiters: list[tuple[int, Callable[[], None], Refuse]] = []
        self.gate = LeaderGate()  # what requests wait on until we lead with our term applied
        self.reads = ReadOnly(self)  # ReadIndex groups and the leader lease
        self._last_snapshot = 0
        self._bytes_since_snapshot = 0  # payload bytes applied since _last_snapshot
        self._snapshotting = False
        self.copy_pins = CopyPins(self)  # what tablet copies from us still send
        self.role, self.leader, self.term = Role.FOLLOWER, None, 0
        self.stats = {"leader_changes": 0, "applied": 0, "wal_groups": 0, "wal_entries": 0,
                      "wal_seconds": 0.0, "snapshots": 0, "commit_waits": 0,
                      "commit_wait_seconds": 0.0}
        self.answers = WriteAnswers(self.clock, self.stats)  # the modes: node.replica.answers
        self.failed: str | None = None
        # an error a background step raised that no guard handled and no disk explains: a bug
        self.unexpected: str | None = None

    # -- start-up ----------------------------------------------------------------------------
    def open(self) -> None:
        """Bootstrap from disk. Corruption anywhere raises CorruptionError naming the file."""
        cmeta = ConsensusMetadata.open(self.paths.consensus_meta, self.paths.disk)
        snap = self.snapshots.load_latest()
        faults = self.options.faults
        self.state = (StateMachine.from_snapshot(snap, faults) if snap
                      else StateMachine(self.tablet_id, self.options.session_limits, faults))
        self.clock.update(self.state.last_timestamp)
        self._last_snapshot = self.state.last_applied_index
        self.cmeta = cmeta
        self.wal = Log.open(str(self.paths.wal_dir), self.tablet_id, self.options.log,
                            disk=self.paths.disk)
        self.writes = WalWrites(self.wal, self.log, self.stats, self._spawn, self._wake.set)
        tail = self.wal.recovery.unclosed
        if tail is not None and tail.garbage_bytes:
            self.log.warning("bootstrap: cut a torn WAL tail of %s at offset %d (%d bytes: %s)",
                             tail.path, tail.offset, tail.garbage_bytes, tail.reason)
        entries = [e for e in self.wal.recovered if e.index > self.state.last_applied_index]
        _refuse_missing_entries(self.paths.wal_dir, self.wal.base_index, entries,
                                self.state.last_applied_index)
        snapshot_index, snapshot_term = self.state.last_applied_index, self.state.last_applied_term
        config = decode_config(cmeta.committed_config)
        self.saves = MetadataSaves(cmeta, config.opid_index, self._in_thread, self._spawn,
                                   self.fail, self._config_saved)
        self.log.info("bootstrap: term %d, voted for %s, committed config %s, snapshot at index "
                      "%d, %d WAL entries after it", cmeta.current_term, cmeta.voted_for,
                      config_text(config), snapshot_index, len(entries))
        if entries:
            probe("replica.bootstrap.uncommitted_entries_pending")
            # The commit index is not persisted: a leader re-establishes it, applying what it
            # commits and truncating whatever of this suffix it replaces.
            self.log.info("bootstrap: WAL entries %d..%d are not known committed: pending until "
                          "a leader commits or truncates them", entries[0].index, entries[-1].index)
        if faults.fault_apply_uncommitted_at_bootstrap and entries:
            for e in entries:
                self._apply(e)
            self.log.warning("bootstrap: applied WAL entries %d..%d without knowing they are "
                             "committed (fault_apply_uncommitted_at_bootstrap)",
                             entries[0].index, entries[-1].index)
        persisted = PersistedState(
            hard_state=HardState(cmeta.current_term, cmeta.voted_for, snapshot_index),
            committed_config=config,
            entries=tuple(entries),
            snapshot_index=snapshot_index,
            snapshot_term=snapshot_term,
            applied=self.state.last_applied_index,
        )
        self.core = RaftCore(self.options.core_config(self.uuid), self._rng, persisted)
        self.term = cmeta.current_term
        self.wal.register_anchor("core", snapshot_index + 1)

    def start(self) -> None:
        self._spawn(self._drive(), f"drive-{self.tablet_id}")
        self._spawn(self._ticker(), f"tick-{self.tablet_id}")

    @property
    def stopping(self) -> bool:
        """stop() was called: the replica is shutting down (or down), e.g. on its way to a
        tombstone, whatever its tablet's entry still says."""
        return self._stopping is not None

    async def stop(self) -> None:
        """End everything this replica runs and close its WAL. Once this returns nothing of the
        replica writes to its files any more (a tablet copy may replace them). Safe to call
        again or concurrently; a caller cancelled meanwhile does not cut the stop short."""
        if self._stopping is None:
            self._stopping = asyncio.create_task(self._stop(), name=f"stop-{self.tablet_id}")
            self.gate.lost()  # refused now, not once a slow disk's last save lets the stop end
        await asyncio.shield(self._stopping)

    async def _stop(self) -> None:
        while self._tasks:  # _spawn refuses new tasks from here on
            tasks = list(self._tasks)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        while self._threads:  # a save under way finishes before we return; none starts after
            await asyncio.gather(*list(self._threads), return_exceptions=True)
        self._fail_pending("replica shutting down")
        if hasattr(self, "wal"):
            await asyncio.to_thread(self.wal.close)

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task | None:
        """Run `coro` as a task of this replica: stop() cancels and awaits it."""
        if self._stopping is not None:
            coro.close()
            return None
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """asyncio.to_thread, tracked: cancelling the caller cannot stop a thread, so stop()
        waits for it rather than return while it may still write."""
        if self._stopping is not None:
            raise asyncio.CancelledError()
        fut = asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))
        self._threads.add(fut)
        fut.add_done_callback(self._threads.discard)
        return await asyncio.shield(fut)

    # -- inputs ------------------------------------------------------------------------------
    def _submit(self, fn: Callable[[], Any], want_result: bool = False) -> asyncio.Future | None:
        fut = asyncio.get_running_loop().create_future() if want_result else None
        self._inbox.put(fn, fut)
        return fut

    def _submit_write(self, propose: Callable[[], None], refuse: Refuse) -> None:
        """Parked while the WAL's queue is full (node.replica.wal_writes), in order; `refuse`
        answers the caller if the replica stops or fails before proposing it (node.replica.inbox)."""
        self._inbox.put_write(propose, refuse, self.writes.parks())

    def fail(self, err: BaseException) -> None:
        """Fail through the driver's own path: a write or save behind a Ready failed, or
        another reader found this replica's files damaged on disk, which its next start would
        refuse."""
        self._submit(functools.partial(_raise, err))

    def step(self, messages: list) -> None:
        for m in messages:
            self._submit(lambda m=m: self.core.step(m))

    async def _ticker(self) -> None:
        period = self.options.tick_ms / 1000
        while True:
            await asyncio.sleep(period)
            self._submit(self.core.tick)

    # -- the driver --------------------------------------------------------------------------
    async def _drive(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                self._inbox.run(self.writes.parks())
                while self.core.has_ready():
                    await self._handle(self.core.ready())
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a failed fsync or a safety violation: stop serving, loudly
            probe("replica.failed.while_running")
            self.failed = log_failure(self.log, "replica failed", e)
            self._fail_pending(f"replica failed: {self.failed}")

    async def _handle(self, rd: Ready) -> None:
        """Carry out a Ready in the order `ready_steps.steps` gives (the one the simulators
        run too). The commit index is not persisted (it is re-learned from the leader and the
        snapshot), so only a new term or vote, or a newly committed config, costs a metadata
        fsync."""
        hs = rd.hard_state
        st = steps(rd, unchanged_hard_state=hs is not None and (hs.term, hs.voted_for) == (
            self.cmeta.current_term, self.cmeta.voted_for))
        self._send_messages(st.send_early)
        for e in st.apply_early:
            self._apply(e)
        behind = st.write_behind  # a leader's own write: never awaited (node.replica.wal_writes)
        if st.entries:
            if st.send_early and self.wal.threaded:
                # One loop turn first: the early messages reach their sockets (flushed at the
                # turn's end) before the appender thread wakes and takes the GIL, which made the
                # followers' copies wait on the leader's own write (docs/benchmarks.md).
                await asyncio.sleep(0)
            written = self.writes.start(st.entries)
            if behind:
                last = st.entries[-1]
                self.writes.leave_behind(
                    written, functools.partial(self._submit, functools.partial(
                        self.core.persisted, last.index, last.term)),
                    self.fail)
            else:
                await written
        if st.hard_state is not None:
            await self.saves.save(st.hard_state, st.committed_config)
        elif st.committed_config is not None:  # saved behind: node.replica.metadata_saves
            self.saves.save_behind(st.committed_config)
        for ev in rd.events:
            log_event(self.log, ev)
        self._send_messages(st.send)
        if rd.soft_state is not None:
            self._on_soft_state(rd.soft_state)
        for e in st.apply:
            self._apply(e)
        self.reads.released(rd.read_states, self.core.term)
        self.core.advance(rd, written=not (st.entries and behind))
        self._wake_applied()
        self._maybe_snapshot()

    def _send_messages(self, messages: tuple) -> None:
        sent_at = asyncio.get_running_loop().time()
        for m in messages:
            self.reads.sent(m, sent_at)
            self._send(m.to_uuid, [m])

    def _config_saved(self, config: RaftConfig) -> None:
        self.log.info("config committed: %s", config_text(config))

    def _on_soft_state(self, ss) -> None:
        if ss.leader != self.leader:
            self.stats["leader_changes"] += 1
        if (ss.role, ss.leader, ss.term) != (self.role, self.leader, self.term):
            # One parseable line per change: the HTML report draws the leader/term track from it
            # (reports/html/raftlog.py).
            self.log.info("raft tablet=%s term=%d role=%s leader=%s", self.tablet_id, ss.term,
                          ss.role.name, ss.leader)
        leading_on = ss.role == Role.LEADER and ss.term == self.term
        if not leading_on:
            self.gate.lost()
        self.role, self.leader, self.term = ss.role, ss.leader, ss.term
        self.reads.leadership_changed(leading_on)

    def _apply(self, e: Entry) -> None:
        result = None
        proposed = self._proposed.pop(e.index, None)
        if e.type == EntryType.REPLICATE:
            result = self.state.apply(e, proposed[1] if proposed and proposed[0] == e.term else None)
            self.clock.update(self.state.last_timestamp)  # the highest timestamp applied so far
        elif e.type != EntryType.COMMIT:
            self.state.apply(e)  # NO_OP / CONFIG_CHANGE only advance the applied index
        self.stats["applied"] += 1
        self._bytes_since_snapshot += len(e.payload)
        waiter = self._waiters.pop(e.index, None)
        if waiter is not None:
            term, done = waiter
            if term == e.term:
                finish(done, result, None)
            else:
                finish(done, None, ReplicaError("overwritten by a new leader before commit",
                                                leader=self.leader))
        if self.role == Role.LEADER and e.term == self.term and self.gate.term != e.term:
            self.gate.opened(e.term)

    def _wake_applied(self) -> None:
        applied, waiters = self.state.last_applied_index, self._applied_waiters
        self._applied_waiters = [w for w in waiters if w[0] > applied]
        for i, then, _ in waiters:  # a `then` may wait again: it finds the new list
            if i <= applied:
                finish(then)

    def _maybe_snapshot(self) -> None:
        """One save at a time: two at once would each delete the other's temporary file."""
        applied = self.state.last_applied_index
        # Not past our own durable log: a snapshot ahead of the WAL's durable end would outlive
        # a crash that loses the write behind (Steps.write_behind); the next Ready tries again.
        if (applied > self.core.log.stable or self._snapshotting
                or not snapshot_due(applied - self._last_snapshot, self._bytes_since_snapshot,
                                    self.options)):
            return
        # Nor past a committed config the consensus metadata does not hold yet: a snapshot
        # carries no config, and bootstrap rebuilds configs only from the entries after it, so
        # a crash (or a failed metadata save) between the two forgot the config. A follower
        # catching up applies a config entry in the Ready that writes it; the config is handed
        # over once durable, in the next Ready, which saves it and then tries again here.
        if self.core.committed_config.opid_index > self.saves.saved_config_index:
            probe("replica.snapshot.waits_for_config_save")
            return
        self._last_snapshot, self._snapshotting = applied, True
        self._bytes_since_snapshot = 0
        snap = self.state.snapshot()

        async def save():
            try:
                if self.failed:  # a FAILED replica's files are evidence, left as they are
                    probe("replica.snapshot.skipped_failed")
                    return
                await self._in_thread(self.snapshots.save, snap)
                self.stats["snapshots"] += 1
                # read now, not when the save began: a tablet copy may have started meanwhile
                keep_from = self.copy_pins.floor(retain_from(self.core.log, applied, self.options))
                self._submit(lambda: self.core.compact(keep_from - 1))
                self.wal.register_anchor("core", keep_from)
                await self._in_thread(self.wal.gc)
            except Exception as e:  # the WAL keeps everything since the last good snapshot
                self.log.warning("snapshot at index %d failed: %s: %s", applied,
                                 type(e).__name__, e, exc_info=e)
                if not is_disk_failure(e):  # kept for the simulator's checks to fail on
                    self.unexpected = self.unexpected or f"snapshot at {applied}: {e!r}"
            finally:
                self._snapshotting = False

        self._spawn(save(), f"snapshot-{self.tablet_id}")

    def _fail_pending(self, why: str) -> None:
        """Answer what this replica owes once its driver runs nothing more: a write it proposed
        may still be committed by the next leader (maybe applied); a write never proposed, a
        request never run and a read waiting to apply did not happen (node.replica.inbox)."""
        self._proposed.clear()
        waiters, self._waiters = self._waiters, {}
        maybe = ReplicaError(why, maybe_applied=True)
        for _, done in waiters.values():
            finish(done, None, maybe)
        self.reads.fail_all(maybe)
        self._inbox.close(ReplicaError(why))
        self._open_group = None
        reads, self._applied_waiters = self._applied_waiters, []
        for _, _, refuse in reads:
            finish(refuse, ReplicaError(why))
        self.gate.lost()  # node.replica.leader_gate: its waiters' check now refuses them

    # -- client-facing -----------------------------------------------------------------------
    def _check_serving(self) -> None:
        if self.failed:
            raise ReplicaError(f"replica failed: {self.failed}")
        if self._stopping is not None:
            raise ReplicaError("replica shutting down")
        if self.role != Role.LEADER:
            raise ReplicaError("not the leader", leader=self.leader)

    @property
    def leader_ready(self) -> bool:
        """A leader that has applied an entry of its own term: it may take writes."""
        return self.role == Role.LEADER and self.gate.is_open()

    def last_logged(self) -> tuple[int, int]:
        """(term, index) of the last entry in this replica's log: what a tombstone keeps."""
        return self.core.log.last_term(), self.core.log.last_index()

    async def await_leader_ready(self) -> None:
        await self.gate.wait(self._check_serving)

    async def _replicate(self, append: Callable[[], int]) -> Any:
        """Run `append` (a core proposal returning its log index) in the driver, then wait until
        that entry is applied here: its result. The core's ProposalError passes through."""
        await self.await_leader_ready()
        fut = asyncio.get_running_loop().create_future()  # one future: refused, or applied

        def propose():  # in the driver: log order is the order proposals run in
            try:
                index = append()
            except ProposalError as e:
                settle(fut, None, e)
                return
            self._waiters[index] = (self.core.term, functools.partial(settle, fut))

        self._inbox.put(propose, refuse=functools.partial(settle, fut, None))
        return await fut

    def submit(self, op: Op, session: int, seq: int, acked_below: int, done: Done,
               owner: str = "", propagated: int = 0, commit_wait: bool = True) -> None:
        """Replicate one command (a row op, or a Batch as ONE entry: op i is seq + i) at the
        leader's hybrid time, above `propagated` (the client's highest observed timestamp,
        which the clock witnesses first). `done(result, None)` once it is applied here and,
        with `commit_wait` (Kudu's COMMIT_WAIT; without it, CLIENT_PROPAGATED), commit-waited
        (an ok result carries the command's timestamp and is answered only once every clock of
        the cluster is past it, `_commit_waited`); `done(None, ReplicaError)` if it was refused
        or may not have happened. No coroutine: this is the per-op path (`write` awaits it).
        Raises ReplicaError at once when not serving; a leader not yet ready refuses in the
        driver, so callers wait for `leader_ready` first. `owner`: the caller's authenticated
        identity (ops.Command.owner)."""
        self._check_serving()
        if not isinstance(op, ROW_OP_TYPES):
            self._submit_write(functools.partial(self._propose, op, session, seq, acked_below,
                                                 done, owner, propagated, commit_wait),
                               functools.partial(finish, done, None))
            return
        # A single row op joins the group still waiting to be proposed, if any: the writes that
        # arrive in one turn of the driver become one entry (ops.Group). The group keeps its
        # first member's place in the queue; the others were concurrent with whatever was
        # queued between them, so either order is one the clients could have seen.
        group = self._open_group
        if group is None or len(group.members) >= MAX_GROUP:
            group = self._open_group = OpenGroup()
            self._submit_write(functools.partial(self._propose_group, group), group.refuse)
        group.members.append((Member(op, session, seq, acked_below, owner), done, commit_wait))
        group.propagated = max(group.propagated, propagated)

    def _propose(self, op: Op, session: int, seq: int, acked_below: int, done: Done,
                 owner: str = "", propagated: int = 0, commit_wait: bool = True) -> None:
        """In the driver: log order is the order proposals run in, and timestamps taken here
        increase in log order, and exceed the timestamp the client propagated."""
        term = self.core.term
        if self.gate.term != term:
            # Leadership changed since the caller saw leader_ready: until an entry of this term
            # is applied, entries of earlier terms may sit in our log unapplied, and the clock
            # has not witnessed their timestamps. Nothing is appended: a retry is safe.
            finish(done, None, ReplicaError("not the leader", leader=self.core.lead))
            return
        self.answers.witness(propagated)
        command = Command(COMMAND_VERSION, op, session, seq, acked_below, self.clock.now(),
                          owner)
        try:
            index = self.core.propose(command_payload(command))
        except NotLeader as e:
            finish(done, None, ReplicaError("not the leader", leader=e.leader))
            return
        except EntryTooLarge as e:
            finish(done, None, TooLarge(f"write too large to replicate: {e}"))
            return
        except ProposalError as e:
            finish(done, None, ReplicaError(str(e), leader=self.leader))
            return
        self._proposed[index] = (term, command)
        self._waiters[index] = (term, self.answers.single(done, commit_wait))

    def _propose_group(self, group: OpenGroup) -> None:
        """In the driver: the single row ops gathered since this group was queued, as one
        entry. A lone op is proposed as the Command it always was; a group whose entry would
        be too large is proposed op by op, each then refused or taken on its own. The group's
        timestamp exceeds every timestamp its members' clients propagated; each member is
        answered in its own mode (node.replica.answers)."""
        if self._open_group is group:
            self._open_group = None
        members = group.members
        if len(members) == 1:
            (m, done, wait), = members
            self._propose(m.op, m.session, m.seq, m.acked_below, done, m.owner,
                          group.propagated, wait)
            return
        term = self.core.term
        dones = [done for _, done, _ in members]
        if self.gate.term != term:  # as in _propose: nothing appended, a retry is safe
            answer_members(dones, None, ReplicaError("not the leader", leader=self.core.lead))
            return
        self.answers.witness(group.propagated)
        command = Command(COMMAND_VERSION, Group([m for m, _, _ in members]),
                          timestamp=self.clock.now())
        try:
            index = self.core.propose(command_payload(command))
        except NotLeader as e:
            answer_members(dones, None, ReplicaError("not the leader", leader=e.leader))
            return
        except EntryTooLarge:
            for m, done, wait in members:
                self._propose(m.op, m.session, m.seq, m.acked_below, done, m.owner,
                              group.propagated, wait)
            return
        except ProposalError as e:
            answer_members(dones, None, ReplicaError(str(e), leader=self.leader))
            return
        self._proposed[index] = (term, command)
        self._waiters[index] = (term, self.answers.group(dones, [wait for _, _, wait in members]))

    async def write(self, op: Op, *, session: int, seq: int, acked_below: int,
                    owner: str = "", propagated: int = 0, commit_wait: bool = True) -> Result:
        """`submit`, awaited: the command's result once applied here (and commit-waited)."""
        await self.await_leader_ready()
        fut = asyncio.get_running_loop().create_future()
        self.submit(op, session, seq, acked_below, functools.partial(settle, fut), owner,
                    propagated, commit_wait)
        return await fut

    def batch(self, ops: list[RowOp]) -> Batch:
        """Many row ops of one session as ONE command (ops.Batch: op i is seq + i), to `submit`
        or `write`: one result per op, commit-waited once, since every op shares the entry's
        timestamp. Raises ValueError for a batch the session bound cannot keep
        (Limits.check_batch): nothing is proposed."""
        batch = Batch(ops)
        self.state.limits.check_batch(batch)
        return batch

    async def change_config(self, change: ConfigChange, cas_config_index: int) -> RaftConfig:
        """Propose a one-by-one membership change; return the new config once applied here.
        Raises the core's ProposalError (CasMismatch, ChangePending, InvalidChange, ...)."""
        promote = change.op == ChangeOp.ADD_NON_VOTER and change.promote
        what = f"{change.op.name} {change.uuid}{' +promote' if promote else ''}"
        self.log.info("proposing config change %s (cas config index %d)", what, cas_config_index)
        try:
            await self._replicate(lambda: self.core.propose_config_change(change, cas_config_index))
        except ProposalError as e:
            self.log.info("config change %s refused: %s: %s", what, type(e).__name__, e)
            raise
        return self.core.active_config

    async def step_down(self, new_leader: str | None) -> None:
        """Hand leadership to `new_leader` (graceful transfer; no lease reads for the rest of the
        term) or, with None, give it up. Raises the core's NotLeader or InvalidChange."""
        self._check_serving()
        self.log.info("stepping down as leader%s",
                      f": transferring leadership to {new_leader}" if new_leader else "")
        if new_leader is None:
            await self._submit(self.core.step_down, want_result=True)
        else:
            await self._submit(lambda: self.core.transfer_leadership(new_leader), want_result=True)

    async def unsafe_change_config(self, voters: tuple[str, ...]) -> int:
        """The core's unsafe_change_config (an operator's last resort); returns the new config's
        index. Raises the core's InvalidChange."""
        if self.failed:
            raise ReplicaError(f"replica failed: {self.failed}")
        self.log.warning("UNSAFE config change to voters %s, requested by an operator",
                         ", ".join(voters))
        return await self._submit(lambda: self.core.unsafe_change_config(voters), want_result=True)

    def copy_installed(self, peer: str, installed: OpId, last_logged: OpId, term: int) -> None:
        """As leader in `term`, we had `peer` copy this tablet: it holds our snapshot at
        `installed` and a WAL to `last_logged`. If our log holds that last op, the peer's log
        matches ours up to it (Log Matching); else replicate from the snapshot, which is
        committed. Either way the core's reset_progress starts that peer again from there."""
        match = last_logged.index if self.holds(last_logged.index, last_logged.term) \
            else installed.index
        self._submit(lambda: self.core.reset_progress(peer, match, term))

    async def read(self, op: Op) -> Result:
        """A linearizable read (`ReadOnly.submit`), awaited once this replica leads."""
        await self.await_leader_ready()
        fut = asyncio.get_running_loop().create_future()
        self.reads.submit(op, functools.partial(settle, fut))
        return await fut

    # -- read-only views for the server, the master and the simulator: not the core's insides --
    def log_bounds(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """((term, index) of the op our log starts after, i.e. the snapshot point, and (term,
        index) of the last op logged)."""
        log_ = self.core.log
        return (log_.offset_term, log_.offset), (log_.last_term(), log_.last_index())

    def holds(self, index: int, term: int) -> bool:
        """Whether our log (not compacted there) has the op (term, index)."""
        return self.core.log.term_at(index) == term

    def active_members(self) -> list[str]:
        return [m.uuid for m in self.core.active_config.members]

    def committed_members(self) -> list[str]:
        """Members of the committed config (index: `committed_config_index`): unlike the active
        config, one that can no longer be rolled back, so others may take it as settled."""
        return [m.uuid for m in self.core.committed_config.members]

    def peer_match(self, uuid: str) -> int:
        """As leader: the highest index `uuid` acknowledged (0 if unknown)."""
        pr = self.core.progress.get(uuid)
        return pr.match if pr is not None else 0

    @property
    def commit_index(self) -> int:
        return self.core.commit

    def durable_vote(self) -> tuple[int, str | None]:
        """(term, voted for) as saved in the consensus metadata: what this replica promised."""
        return self.cmeta.current_term, self.cmeta.voted_for

    @property
    def committed_config_index(self) -> int:
        """Opid index of the committed config: what a DeleteTablet's compare-and-set checks."""
        return self.core.committed_config.opid_index

    @property
    def active_config_index(self) -> int:
        """Opid index of the active config (`active_members`'): 0 until the first change."""
        return self.core.active_config.opid_index

    def committed_entries(self, above: int) -> list[tuple[int, int, int | None]]:
        """(index, term, hybrid timestamp) of each committed entry above `above` still in the
        in-memory log, the timestamp None for entries that carry no command (no-ops, configs):
        what the simulator compares across replicas (state-machine safety) and along the log
        (timestamps increase with the index, across leaders)."""
        log, commit = self.core.log, self.core.commit
        lo = max(above + 1, log.first_index())
        return [(e.index, e.term, decode_command(e.payload).timestamp
                 if e.type == EntryType.REPLICATE else None) for e in log.slice(lo, commit)]

    def status(self) -> dict:
        return _status(self)


def _status(r: Replica) -> dict:
    """What the server shows and reports of a replica (its status page, heartbeats, metrics)."""
    s = r.core.status()
    return {
        "tablet_id": r.tablet_id, "role": s.role.name, "term": s.term, "leader": s.leader,
        "commit": s.commit, "applied": r.state.last_applied_index,
        "last_index": s.last_index, "last_term": s.last_term, "first_index": s.first_index,
        "config_appended_by": s.config_appended_by,
        "config": [[m.uuid, m.member_type.name] for m in s.active_config.members],
        "committed_config": [[m.uuid, m.member_type.name] for m in s.committed_config.members],
        "committed_config_index": s.committed_config.opid_index,
        "peers": {u: {"match": p.match, "next": p.next, "needs_tablet_copy": p.needs_tablet_copy,
                      "silent_s": round(p.silent_ticks * r.options.tick_ms / 1000, 3)}
                  for u, p in s.peers.items()},
        "failed": r.failed,
    }


def _refuse_missing_entries(wal_dir, base_index: int, entries: list, snapshot_index: int) -> None:
    """CorruptionError unless the log goes on from the snapshot: its first entry after it is
    the next index, and its oldest segment began no later than the snapshot ends (what the
    segments before it held, log GC deletes only once a snapshot has it; node/wal/format.py)."""
    if base_index > snapshot_index:
        probe("replica.bootstrap.wal_base_past_snapshot")
        raise CorruptionError(wal_dir, None,
                              f"the oldest WAL segment began after index {base_index} but the "
                              f"snapshot ends at {snapshot_index}: segments holding the entries "
                              f"between are missing")
    if entries and entries[0].index != snapshot_index + 1:
        raise CorruptionError(wal_dir, None,
                              f"log starts at index {entries[0].index} but the snapshot ends "
                              f"at {snapshot_index}: entries are missing")
