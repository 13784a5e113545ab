"""One simulated cluster run: cores on a virtual clock, a seeded scheduler of faults.

Everything random comes from one `random.Random(seed)` (and per-core RNGs derived from the seed),
and events are ordered by (virtual time, sequence number), so a seed replays bit for bit.

A node's "disk" holds what the real driver (node.replica.replica) makes durable: the term and vote
(consensus metadata), the committed config, the log (WAL) and the latest snapshot (index, term:
the simulated state machine is just "applied up to here"). Not the commit index, and not how
far the state machine got beyond the snapshot: a restarted core starts with commit = applied =
the snapshot index and learns the rest from a leader, exactly as Replica.open() rebuilds it.
Readys are handled atomically (persist, send, apply, advance), so a crash between events loses
everything else; except, in half the seeds, a leader's writes behind their Readys
(ready_steps.Steps.write_behind), each reaching the disk (and the core, RaftCore.persisted) a
few virtual ms later, in the order they were made, unless a crash comes first, while the core
steps the followers' answers and makes further Readys, as the replica's driver does.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from dataclasses import dataclass, field

from node.consensus import (
    TICK_MS,
    CasMismatch,
    ChangeOp,
    ConfigChange,
    CoreConfig,
    FollowerLostEntries,
    HardState,
    Member,
    MemberType,
    PersistedState,
    ProposalError,
    RaftConfig,
    RaftCore,
    Role,
    VoteResponse,
)
from node.consensus.ready_steps import steps
from node.entry import Entry, EntryType

from .invariants import Invariants, Violation

_TICK, _DELIVER, _NEMESIS, _CLIENT, _RESTART, _CRASH, _ISOLATE, _HEAL, _MEMBERSHIP, _WRITTEN = range(10)
LIVENESS_BOUND_MS = 60_000


@dataclass
class Disk:
    """What survives a crash, as node.replica.replica persists it (cmeta: term, vote, committed config;
    the WAL; snapshots). Deliberately no commit index and no applied index beyond the snapshot."""

    term: int = 0
    voted_for: str | None = None
    config: RaftConfig = field(default_factory=lambda: RaftConfig(0, ()))
    # The whole log ever persisted, from index 1: the invariants look at it. The real WAL drops
    # entries below a snapshot; a restart hands the core only those after `snapshot_index`.
    log: list[Entry] = field(default_factory=list)
    snapshot_index: int = 0
    snapshot_term: int = 0
    config_indexes: list[int] = field(default_factory=list)  # CONFIG_CHANGE entries in `log`

    def persisted_state(self) -> PersistedState:
        """What Replica.open() hands RaftCore: commit and applied start at the snapshot."""
        return PersistedState(
            hard_state=HardState(self.term, self.voted_for, self.snapshot_index),
            committed_config=self.config,
            entries=tuple(self.log[self.snapshot_index :]),
            snapshot_index=self.snapshot_index,
            snapshot_term=self.snapshot_term,
            applied=self.snapshot_index,
        )


@dataclass
class Node:
    slot: int
    uuid: str
    disk: Disk
    core: RaftCore | None = None
    commit: int = 0  # the running core's commit index (volatile: restarts at the snapshot)
    applied: int = 0  # the running core's state machine (volatile too)
    applied_max: int = 0  # the highest index this replica ever applied, across restarts
    term: int = 0
    leader_since: int = 0
    power_cycles: int = 0  # messages sent before a power loss never leave the machine
    starts: int = 0  # incarnations: a write behind a crashed one never completes
    # the writes behind their Readys, oldest first: each one's entries, and whether a later
    # write already put them on disk (the WAL is FIFO), until its end reaches the core
    behind: list[list] = field(default_factory=list)


@dataclass
class RunResult:
    seed: int
    steps: int
    violation: str | None
    leader_ms: int | None  # after the final heal: until the committing leader was elected
    commit_ms: int | None  # after the final heal: until a fresh proposal committed
    digest: str = ""
    trace: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)


class Simulation:
    def __init__(self, seed: int, nodes: int = 3, steps: int = 3000, trace: bool = False,
                 core_options: dict | None = None):
        """`core_options`: further CoreConfig fields for every node (e.g. an unsafe one)."""
        self.seed = seed
        self.core_options = dict(core_options or {})
        self.rng = random.Random(seed)
        self.steps = steps
        self.tracing = trace
        self.trace: list[str] = []
        self.now = 0
        self._seq = 0
        self._events: list = []
        self.inv = Invariants()
        uuids = [f"n{i + 1}" for i in range(nodes)]
        bootstrap = RaftConfig(0, tuple(Member(u, MemberType.VOTER) for u in uuids))
        self.nodes = [Node(i, u, Disk(config=bootstrap)) for i, u in enumerate(uuids)]
        self.slot_of = {u: i for i, u in enumerate(uuids)}
        self.min_voters = 2 if nodes <= 3 else 3
        # small batches make a new leader's old-term entries travel apart from its NO_OP
        self.batch_bytes = self.rng.choice((1, 1, 64, 1 << 20))
        # how often a fresh leader, a commit or a vote is followed at once by a crash or cut
        self.targeted = self.rng.choice((0.02, 0.1, 0.3))
        # network state, changed by the nemesis
        self.partition: list[int] | None = None  # group id per slot
        self.drop = 0.0
        self.dup = 0.0
        self.slow = 0.0  # share of messages delayed long enough to be reordered
        self.faults = True
        self.read_anchor: dict[bytes, int] = {}
        self.stats = {k: 0 for k in ("crashes", "partitions", "proposals", "config_changes",
                                     "cas_refused", "transfers", "reads", "dropped", "duplicated", "compactions")}
        self.probe: tuple[int, int] | None = None  # (term, index) of the liveness proposal
        # Whether leaders write behind their Readys, and how long those writes take: from a
        # stream of its own, so the seeds that do not write behind keep their schedules bit for
        # bit.
        self._disk_rng = random.Random(f"{seed}/write-behind")
        self.write_behind = self._disk_rng.random() < 0.5
        for node in self.nodes:
            self._start(node)
            self._schedule(self.rng.randrange(TICK_MS), _TICK, node.slot)
        self._schedule(self.rng.randrange(500, 2000), _NEMESIS)
        self._schedule(self.rng.randrange(50, 300), _CLIENT)
        self._schedule(self.rng.randrange(100, 1000), _MEMBERSHIP)

    # ------------------------------------------------------------ plumbing

    def _schedule(self, delay: int, kind: int, a=None, b=None) -> None:
        self._seq += 1
        heapq.heappush(self._events, (self.now + delay, self._seq, kind, a, b))

    def _log(self, text: str) -> None:
        self.trace.append(f"{self.now:>8}ms {text}")

    def _start(self, node: Node) -> None:
        d = node.disk
        node.starts += 1
        node.behind = []
        rng = random.Random(self.seed * 7919 + node.slot * 104729 + self._seq)
        cfg = CoreConfig(node.uuid, max_batch_bytes=self.batch_bytes, **self.core_options)
        node.core = RaftCore(cfg, rng, d.persisted_state())
        node.commit = node.core.commit
        node.applied = node.core.applied
        node.term = node.core.term
        self._drain(node)

    def _leaders(self) -> list[Node]:
        return [n for n in self.nodes if n.core is not None and n.core.role == Role.LEADER]

    # ------------------------------------------------------------ handling one node's output

    def _send_all(self, node: Node, messages: tuple) -> None:
        for msg in messages:
            self._send(node, msg)
            if type(msg) is VoteResponse and msg.granted and not msg.pre_vote:
                self._maybe_crash_soon(node)

    def _apply(self, node: Node, entries: tuple) -> None:
        for e in entries:
            self.inv.on_apply(node.uuid, e)
        if entries:
            node.applied = entries[-1].index
            node.applied_max = max(node.applied_max, node.applied)

    def _drain(self, node: Node) -> None:
        core = node.core
        pre_config = core.active_config
        rounds = 0
        while core.has_ready():
            rounds += 1
            if rounds > 1000:
                raise Violation(f"progress: {node.uuid} keeps producing Readys without settling")
            rd = core.ready()
            st = steps(rd)  # the order production carries a Ready out in
            d = node.disk
            self._send_all(node, st.send_early)
            self._apply(node, st.apply_early)
            behind = bool(st.entries) and st.write_behind and self.write_behind
            if behind:
                node.behind.append([list(st.entries), False])
                self._schedule(self._disk_rng.randrange(1, 30), _WRITTEN, node.slot, node.starts)
            elif st.entries:
                self._flush_behind(node)
                self._persist(node, st.entries)
            if st.hard_state is not None:  # cmeta keeps term and vote; the commit is not persisted
                d.term, d.voted_for = st.hard_state.term, st.hard_state.voted_for
            if st.committed_config is not None:
                d.config = st.committed_config
                if d.config.opid_index > max(len(d.log), d.snapshot_index):
                    # a power cut now would restart it with a config its log lacks
                    raise Violation(f"config logged: {node.uuid} saved committed config "
                                    f"{d.config.opid_index}, its durable log ends at {len(d.log)}")
            self._send_all(node, st.send)
            self._apply(node, st.apply)
            for ev in rd.events:
                if type(ev) is FollowerLostEntries:
                    peer = next((n for n in self.nodes if n.uuid == ev.peer), None)
                    self.inv.on_loss_claim(node.uuid, ev.peer, ev.acknowledged, core.log.term_at,
                                           peer.disk.log if peer is not None else None)
            for rs in rd.read_states:
                self.inv.on_read(node.uuid, rs.ctx, rs.index, self.read_anchor.pop(rs.ctx))
            core.advance(rd, written=not behind)
            if rd.soft_state is not None:
                if self.tracing:
                    self._log(f"{node.uuid} is {rd.soft_state.role.name} term {rd.soft_state.term} "
                              f"(leader {rd.soft_state.leader}, log {core.log.last_index()}/{core.log.last_term()})")
                if rd.soft_state.role == Role.LEADER:
                    node.leader_since = self.now
                    if self.faults and self.rng.random() < self.targeted:
                        # a fresh leader lost before its NO_OP spreads leaves a divergent tail
                        kind = _ISOLATE if self.rng.random() < 0.5 else _CRASH
                        self._schedule(self.rng.randrange(0, 10), kind, node.slot, node.uuid)
                self.inv.on_role(node.uuid, core.role, core.term, core.log.term_at, core.log.first_index())
        if core.term < node.term:
            raise Violation(f"term monotonicity: {node.uuid} term {node.term} -> {core.term}")
        node.term = core.term
        if core.commit != node.commit:
            if core.role == Role.LEADER:
                self._maybe_crash_soon(node)
            old, node.commit = node.commit, core.commit
            self.inv.on_commit(node.uuid, old, core.commit, core.log.term_at, core.term)
            if core.role == Role.LEADER:
                self.inv.on_leader_commit(
                    node.uuid, core.commit, core.log.term_at(core.commit),
                    (pre_config, core.active_config), self._holds,
                )
                self.inv.on_commit_electable(
                    node.uuid, core.commit, core.log.term_at(core.commit),
                    (pre_config, core.active_config), {n.uuid: n.disk.log for n in self.nodes},
                )
        if core.role == Role.LEADER:
            self.inv.on_leader_configs(node.uuid, node.disk.config_indexes)

    def _persist(self, node: Node, entries) -> None:
        d = node.disk
        first = entries[0].index
        del d.log[first - 1 :]
        d.log.extend(entries)
        while d.config_indexes and d.config_indexes[-1] >= first:
            d.config_indexes.pop()
        d.config_indexes.extend(e.index for e in entries if e.type == EntryType.CONFIG_CHANGE)
        self.inv.on_persist(node.uuid, d.log, first)

    def _flush_behind(self, node: Node, upto: int | None = None) -> None:
        """A later write waits behind the pending ones (the first `upto` of them, or all): they
        reach the disk first, in order (the WAL is FIFO)."""
        for pending in node.behind[:upto]:
            if not pending[1]:
                self._persist(node, pending[0])
                pending[1] = True

    def _written(self, slot: int, starts: int) -> None:
        """The oldest write behind its Ready ends (one event per write; the disk ends them in
        the order they were queued): on disk, then the core hears of it."""
        node = self.nodes[slot]
        if node.core is None or node.starts != starts or not node.behind:
            return  # crashed (or replaced) first: the write never completed
        self._flush_behind(node, 1)
        last = node.behind.pop(0)[0][-1]
        if self.tracing:
            self._log(f"{node.uuid} wrote through {last.index} (term {last.term})")
        node.core.persisted(last.index, last.term)
        self._drain(node)

    def _maybe_crash_soon(self, node: Node) -> None:
        """Targeted faults: crash right after a vote or a commit, where Raft's durability
        promises matter most, and come back quickly enough to take part again."""
        if self.faults and self.rng.random() < self.targeted:
            self._schedule(self.rng.randrange(0, 30), _CRASH, node.slot, node.uuid)

    def _isolate(self, slot: int) -> None:
        """Cut one node off (a fresh leader, typically) until a scheduled heal."""
        if not self.faults:
            return
        self.partition = [1 if i == slot else 0 for i in range(len(self.nodes))]
        self.stats["partitions"] += 1
        self._log_if(f"isolate {self.nodes[slot].uuid}")
        self._schedule(self.rng.randrange(100, 3000), _HEAL)

    def _heal_partition(self) -> None:
        if self.partition is not None:
            self.partition = None
            self._log_if("heal partition")

    def _crash(self, slot: int, uuid: str) -> None:
        node = self.nodes[slot]
        if node.core is None or node.uuid != uuid:
            return
        node.core = None
        self.stats["crashes"] += 1
        if self.rng.random() < 0.5:
            node.power_cycles += 1
        self._log_if(f"crash {node.uuid} (power cycles {node.power_cycles})")
        self._schedule(self.rng.randrange(1, 3000), _RESTART, slot)

    def _holds(self, uuid: str, index: int, term: int) -> bool:
        slot = self.slot_of.get(uuid)
        if slot is None or self.nodes[slot].uuid != uuid:
            return False
        log = self.nodes[slot].disk.log
        return len(log) >= index and log[index - 1].term == term

    def _send(self, src: Node, msg) -> None:
        rng = self.rng
        if self.faults and rng.random() < self.drop:
            self.stats["dropped"] += 1
            return
        dst = self.slot_of[msg.to_uuid]
        copies = 1
        if self.faults and rng.random() < self.dup:
            copies = 2
            self.stats["duplicated"] += 1
        for _ in range(copies):
            delay = rng.randrange(1, 20)
            if self.faults and rng.random() < self.slow:
                delay += rng.randrange(100, 1500)
            self._schedule(delay, _DELIVER, dst, (src.slot, src.power_cycles, msg))

    # ------------------------------------------------------------ events

    def _deliver(self, slot: int, payload) -> None:
        src, cycles, msg = payload
        node = self.nodes[slot]
        if node.core is None or self.nodes[src].power_cycles != cycles:
            return
        if self.partition is not None and self.partition[src] != self.partition[slot]:
            return
        if self.tracing:
            self._log(f"{msg.from_uuid}->{msg.to_uuid} {_describe(msg)}")
        node.core.step(msg)
        self._drain(node)

    def _tick(self, slot: int) -> None:
        self._schedule(TICK_MS, _TICK, slot)
        node = self.nodes[slot]
        if node.core is not None:
            node.core.tick()
            self._drain(node)

    def _restart(self, slot: int) -> None:
        node = self.nodes[slot]
        if node.core is None:
            if self.tracing:
                self._log(f"restart {node.uuid} (disk: term {node.disk.term}, "
                          f"vote {node.disk.voted_for}, log {len(node.disk.log)}, "
                          f"snapshot {node.disk.snapshot_index})")
            self._start(node)

    def _nemesis(self) -> None:
        self._schedule(self.rng.randrange(200, 2000), _NEMESIS)
        if not self.faults:
            return
        rng = self.rng
        action = rng.randrange(7)
        if action == 0:
            groups = [rng.randrange(2) for _ in self.nodes]
            self.partition = groups
            self.stats["partitions"] += 1
            self._log_if(f"partition {groups}")
            self._schedule(rng.randrange(100, 5000), _HEAL)
        elif action == 1:
            leaders = self._leaders()
            if leaders:
                node = rng.choice(leaders)
                self._isolate(node.slot)
        elif action in (2, 3):
            up = [n for n in self.nodes if n.core is not None]
            if up:
                node = rng.choice(up)
                self._crash(node.slot, node.uuid)
        elif action == 4:
            self.drop = rng.choice((0.0, 0.0, 0.05, 0.2, 0.4))
            self.dup = rng.choice((0.0, 0.05, 0.2))
            self.slow = rng.choice((0.0, 0.05, 0.3))
            self._log_if(f"network drop {self.drop} dup {self.dup} slow {self.slow}")
        elif action == 5:
            self._transfer()
        else:
            leaders = self._leaders()
            if leaders:
                node = rng.choice(leaders)
                self._log_if(f"step down {node.uuid}")
                node.core.step_down()
                self._drain(node)

    def _log_if(self, text: str) -> None:
        if self.tracing:
            self._log(text)

    def _transfer(self) -> None:
        leaders = self._leaders()
        if not leaders:
            return
        node = self.rng.choice(leaders)
        voters = [v for v in node.core.active_config.voters() if v != node.uuid]
        if not voters:
            return
        to = self.rng.choice(voters)
        self._log_if(f"transfer leadership {node.uuid} -> {to}")
        try:
            node.core.transfer_leadership(to)
            self.stats["transfers"] += 1
        except ProposalError:
            pass
        self._drain(node)

    def _config_change(self) -> None:
        self._schedule(self.rng.randrange(100, 1000), _MEMBERSHIP)
        if not self.faults:
            return
        leaders = self._leaders()
        if not leaders:
            return
        rng = self.rng
        node = rng.choice(leaders)
        core = node.core
        committed = core.committed_config
        config = core.active_config
        right = committed.opid_index
        cas = right if rng.random() < 0.8 else right + rng.choice((-1, 1, 2))
        voters = config.voters()
        outside = [n for n in self.nodes if config.member(n.uuid) is None and committed.member(n.uuid) is None]
        choice = rng.randrange(3)
        if choice == 0 and outside:
            slot = rng.choice(outside)
            if cas == right and config == committed:
                self._replace(slot, node)
            change = ConfigChange(ChangeOp.ADD_NON_VOTER, slot.uuid, promote=rng.random() < 0.8)
        elif choice == 1 and len(voters) > self.min_voters:
            change = ConfigChange(ChangeOp.REMOVE, rng.choice(voters))
        else:
            learners = [m.uuid for m in config.members if m.member_type == MemberType.NON_VOTER]
            if not learners:
                return
            op = ChangeOp.PROMOTE if rng.random() < 0.5 else ChangeOp.REMOVE
            change = ConfigChange(op, rng.choice(learners))
        self._log_if(f"config change at {node.uuid}: {change.op.name} {change.uuid} cas {cas} (committed {right})")
        try:
            core.propose_config_change(change, cas)
            self.stats["config_changes"] += 1
            if cas != right:
                raise Violation(f"config change with cas {cas} accepted; committed config is {right}")
        except CasMismatch:
            self.stats["cas_refused"] += 1
        except ProposalError as e:
            self._log_if(f"  refused: {e}")
        self._drain(node)

    def _compact(self) -> None:
        """Every running replica snapshots up to what all replicas have ever applied and logged
        (so each one's log reaches at least that far and no one ever needs a tablet copy, which is not
        simulated) and drops the entries below from memory. The snapshot is durable: a restart
        starts from it, with commit = applied = its index. (The disk log is kept whole for the
        invariants; a restart hands the core only what follows the snapshot, as the real driver
        reads only WAL entries after it.)"""
        # Not past any replica's durable log either: a leader that applied entries while its
        # own write was behind, and lost that write in a crash, has applied beyond its log.
        index = min(min(n.applied_max, len(n.disk.log)) for n in self.nodes)
        for node in self.nodes:
            if node.core is not None and index > node.core.log.offset:
                node.core.compact(index)
                log = node.core.log
                if log.offset > node.disk.snapshot_index:
                    self.inv.on_snapshot(node.uuid, log.offset, log.offset_term, node.disk.snapshot_index)
                    node.disk.snapshot_index, node.disk.snapshot_term = log.offset, log.offset_term
                self.stats["compactions"] += 1

    def _replace(self, node: Node, source: Node) -> None:
        """A replacement server (new UUID: its old self's messages must not reach it) seeded by a
        tablet copy from the leader, as the config-change seed adds servers: the copy carries
        the leader's log and applied state (a snapshot at what the leader applied), its term and
        committed config, but no vote; it starts, like any restart, knowing nothing committed
        beyond that snapshot."""
        gen = 2
        while f"n{node.slot + 1}.{gen}" in self.slot_of:
            gen += 1
        node.uuid = f"n{node.slot + 1}.{gen}"
        self.slot_of[node.uuid] = node.slot
        src = source.disk
        index = min(source.applied, len(src.log))  # a snapshot holds only what its source logged
        node.disk = Disk(
            src.term, None, src.config, list(src.log), index, src.log[index - 1].term if index else 0,
            list(src.config_indexes),
        )
        node.applied_max = index
        node.core = None
        self._log_if(f"replace slot {node.slot}: new replica {node.uuid} copied from {source.uuid}")
        self._start(node)

    def _client(self) -> None:
        self._schedule(self.rng.randrange(50, 300), _CLIENT)
        if self.rng.random() < 0.05:
            self._compact()
        leaders = self._leaders()
        if not leaders:
            return
        node = self.rng.choice(leaders)
        core = node.core
        try:
            if self.probe is None and not self.faults:
                self.probe = (core.term, core.propose(b"probe"))
                self._log_if(f"liveness probe at {node.uuid}: index {self.probe[1]} term {self.probe[0]}")
            elif self.rng.random() < 0.2:
                ctx = b"r%d" % self._seq
                self.read_anchor[ctx] = self.inv.max_commit
                core.read_index(ctx)
                self.stats["reads"] += 1
            else:
                core.propose(b"w%d" % self._seq)
                self.stats["proposals"] += 1
        except ProposalError:
            pass
        self._drain(node)

    # ------------------------------------------------------------ run

    def _step(self) -> None:
        self.now, _, kind, a, b = heapq.heappop(self._events)
        if kind == _TICK:
            self._tick(a)
        elif kind == _DELIVER:
            self._deliver(a, b)
        elif kind == _NEMESIS:
            self._nemesis()
        elif kind == _CLIENT:
            self._client()
        elif kind == _CRASH:
            self._crash(a, b)
        elif kind == _ISOLATE:
            if self.nodes[a].uuid == b:
                self._isolate(a)
        elif kind == _HEAL:
            self._heal_partition()
        elif kind == _MEMBERSHIP:
            self._config_change()
        elif kind == _WRITTEN:
            self._written(a, b)
        else:
            self._restart(a)

    def _heal(self) -> None:
        self.faults = False
        self.partition = None
        self._log_if("heal everything: restart all, reliable network")
        for node in self.nodes:
            if node.core is None:
                self._start(node)

    def _probe_committed(self) -> Node | None:
        if self.probe is None:
            return None
        term, index = self.probe
        for node in self._leaders():
            if node.core.commit >= index and node.core.log.term_at(index) == term:
                return node
        if not any(n.core.term == term and n.core.role == Role.LEADER for n in self._leaders()):
            self.probe = None  # its leader is gone: propose again at the next leader
        return None

    def run(self) -> RunResult:
        violation = None
        leader_ms = commit_ms = None
        steps = 0
        try:
            while steps < self.steps:
                self._step()
                steps += 1
            self._heal()
            healed_at = self.now
            while self.now - healed_at < LIVENESS_BOUND_MS:
                self._step()
                steps += 1
                winner = self._probe_committed()
                if winner is not None:
                    leader_ms = max(0, winner.leader_since - healed_at)
                    commit_ms = self.now - healed_at
                    break
        except Violation as e:
            violation = str(e)
        except Exception as e:  # the core raising is itself a failure worth a trace
            violation = f"core raised {type(e).__name__}: {e}"
        digest = hashlib.sha256("\n".join(self.trace).encode()).hexdigest() if self.tracing else ""
        if violation and self.tracing:
            self._log(f"VIOLATION: {violation}")
        return RunResult(self.seed, steps, violation, leader_ms, commit_ms, digest, self.trace, self.stats)

    def leaders_by_term(self) -> dict[int, str]:
        return dict(sorted(self.inv.leader_of_term.items()))


def _describe(msg) -> str:
    name = type(msg).__name__
    fields = {k: getattr(msg, k) for k in msg.__struct_fields__ if k not in ("from_uuid", "to_uuid")}
    if "entries" in fields:
        es = fields.pop("entries")
        fields["entries"] = f"[{es[0].index}..{es[-1].index}]" if es else "[]"
    return name + " " + " ".join(f"{k}={v}" for k, v in fields.items() if v is not False and v != b"")
