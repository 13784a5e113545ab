"""A hand-driven cluster for scenario tests, in the spirit of etcd/raft's interaction tests:
messages wait in one FIFO queue until the script delivers them, and time passes only when the
script ticks. Disks keep exactly what each Ready asked to persist."""

from __future__ import annotations

import random

from node.consensus import (
    CoreConfig,
    HardState,
    Member,
    MemberType,
    PersistedState,
    RaftConfig,
    RaftCore,
    Role,
    VoteRequest,
    VoteResponse,
)
from node.consensus.ready_steps import steps
from node.entry import Entry


class ScriptCluster:
    def __init__(
        self,
        voters: tuple[str, ...] = ("n1", "n2", "n3"),
        *,
        learners: tuple[str, ...] = (),
        pre_vote: bool = True,
        batch_bytes: int = 1 << 20,
        seed: int = 0,
        write_behind: tuple[str, ...] = (),
        **core_options,
    ):
        """`core_options`: further CoreConfig fields for every node (e.g. an unsafe one).
        `write_behind`: nodes whose Readys that allow it (Steps.write_behind) leave their write
        pending, as production does, until the script calls `finish_write`."""
        members = tuple(Member(u, MemberType.VOTER) for u in voters)
        members += tuple(Member(u, MemberType.NON_VOTER, True) for u in learners)
        self.bootstrap = RaftConfig(0, members)
        self.pre_vote = pre_vote
        self.batch_bytes = batch_bytes
        self.seed = seed
        self.core_options = core_options
        self.cores: dict[str, RaftCore | None] = {}
        self.disks: dict[str, dict] = {}
        self.queue: list = []  # (src, msg) in send order
        self.groups: dict[str, int] = {}
        self.applied: dict[str, list[Entry]] = {}
        self.read_states: dict[str, list] = {}
        self.events: dict[str, list] = {}  # what each core reported deciding (Ready.events)
        self.max_commit: dict[str, int] = {}  # highest commit each node ever reported
        self.write_behind = set(write_behind)
        # uuid -> its writes behind their Readys, oldest first: [entries, whether they reached
        # the disk yet]. The disk takes a later write only after them (the WAL is FIFO), and
        # the core hears of each (RaftCore.persisted) only at finish_write, as the replica
        # hears late
        self.behind: dict[str, list[list]] = {}
        for u in voters + learners:
            self.add_node(u, self.bootstrap)

    # ------------------------------------------------------------ nodes

    def add_node(self, uuid: str, config: RaftConfig | None = None) -> None:
        """A server with an empty disk; `config` None means it knows no config yet (a new replica)."""
        self.disks[uuid] = {
            "hard": HardState(), "config": config or RaftConfig(0, ()), "log": [], "snapshot": (0, 0)
        }
        self.applied[uuid] = []
        self.read_states[uuid] = []
        self.events[uuid] = []
        self.max_commit[uuid] = 0
        self.restart(uuid)

    def restart(self, uuid: str) -> None:
        """Like Replica.open() (and harness.sim's Disk.persisted_state): term, vote, log and config
        come from disk, but commit and applied restart at the snapshot index; the state machine
        is rebuilt from the snapshot and the commit index is relearned from a leader."""
        d = self.disks[uuid]
        snapshot_index, snapshot_term = d["snapshot"]
        hard = HardState(d["hard"].term, d["hard"].voted_for, snapshot_index)
        persisted = PersistedState(
            hard, d["config"], tuple(d["log"]), snapshot_index, snapshot_term, snapshot_index
        )
        # the state machine is volatile: what was applied after the snapshot is applied again
        self.applied[uuid] = [e for e in self.applied[uuid] if e.index <= snapshot_index]
        cfg = CoreConfig(uuid, pre_vote=self.pre_vote, max_batch_bytes=self.batch_bytes,
                         **self.core_options)
        self.cores[uuid] = RaftCore(cfg, random.Random(f"{self.seed}/{uuid}"), persisted)
        self._drain(uuid)

    def restart_from_copy(self, uuid: str, index: int, term: int, entries: list[Entry], config: RaftConfig) -> None:
        """Stand-in for tablet copy: the replica restarts from a copied snapshot at (index, term)
        plus the source's log after it, keeping its own term and vote."""
        d = self.disks[uuid]
        d["snapshot"], d["log"], d["config"] = (index, term), list(entries), config
        d["hard"] = HardState(d["hard"].term, d["hard"].voted_for, index)
        self.restart(uuid)

    def crash(self, uuid: str) -> None:
        """Power loss: the process and its unsent or undelivered messages are gone."""
        self.cores[uuid] = None
        self.behind.pop(uuid, None)  # a write still behind its Ready never reached the disk
        self.queue = [(s, m) for s, m in self.queue if s != uuid and m.to_uuid != uuid]

    def core(self, uuid: str) -> RaftCore:
        core = self.cores[uuid]
        assert core is not None, f"{uuid} is down"
        return core

    def _drain(self, uuid: str) -> None:
        core = self.core(uuid)
        d = self.disks[uuid]
        while core.has_ready():
            rd = core.ready()
            st = steps(rd)  # the order production carries a Ready out in
            self.queue.extend((uuid, m) for m in st.send_early)
            self.applied[uuid].extend(st.apply_early)
            behind = st.write_behind and uuid in self.write_behind
            if st.entries:
                if behind:
                    self.behind.setdefault(uuid, []).append([list(st.entries), False])
                else:
                    self._flush_behind(uuid)
                    self._write(d, st.entries)
            if st.hard_state is not None:
                d["hard"] = st.hard_state
            if st.committed_config is not None:
                d["config"] = st.committed_config
            self.queue.extend((uuid, m) for m in st.send)
            self.applied[uuid].extend(st.apply)
            self.read_states[uuid].extend(rd.read_states)
            self.events[uuid].extend(rd.events)
            core.advance(rd, written=not (st.entries and behind))
        self.max_commit[uuid] = max(self.max_commit[uuid], core.commit)

    @staticmethod
    def _write(d: dict, entries) -> None:
        del d["log"][entries[0].index - d["snapshot"][0] - 1 :]
        d["log"].extend(entries)

    def _flush_behind(self, uuid: str, upto: int | None = None) -> None:
        """A later write waits behind the pending ones (the first `upto` of them, or all): they
        reach the disk first, in order."""
        for pending in self.behind.get(uuid, [])[:upto]:
            if not pending[1]:
                self._write(self.disks[uuid], pending[0])
                pending[1] = True

    def finish_write(self, uuid: str) -> None:
        """The oldest write `uuid` left behind its Ready is durable: the core hears of it now."""
        self._flush_behind(uuid, 1)
        entries = self.behind[uuid].pop(0)[0]
        if not self.behind[uuid]:
            del self.behind[uuid]
        self.do(uuid, "persisted", entries[-1].index, entries[-1].term)

    def do(self, uuid: str, method: str, *args):
        """Call an input of one core, then handle its Ready."""
        try:
            return getattr(self.core(uuid), method)(*args)
        finally:
            self._drain(uuid)

    # ------------------------------------------------------------ network and time

    def partition(self, *groups: tuple[str, ...]) -> None:
        self.groups = {u: i for i, g in enumerate(groups) for u in g}

    def isolate(self, uuid: str) -> None:
        self.partition((uuid,), tuple(u for u in self.cores if u != uuid))

    def heal(self) -> None:
        self.groups = {}

    def _connected(self, a: str, b: str) -> bool:
        return self.groups.get(a, -1) == self.groups.get(b, -1)

    def deliver(self, src: str | None = None, dst: str | None = None, types=None, limit: int | None = None) -> int:
        """Deliver queued messages matching the filter, in send order, including the ones they
        cause, until none match or `limit` were delivered; messages across a partition or to a
        crashed node are dropped. Returns how many were delivered."""
        delivered = 0
        while delivered < (limit or 10_000):
            for pos, (s, m) in enumerate(self.queue):
                if (src is None or s == src) and (dst is None or m.to_uuid == dst) and (
                    types is None or isinstance(m, types)
                ):
                    del self.queue[pos]
                    break
            else:
                return delivered
            target = self.cores.get(m.to_uuid)
            if target is None or not self._connected(s, m.to_uuid):
                continue
            target.step(m)
            self._drain(m.to_uuid)
            delivered += 1
        if limit is None:
            raise AssertionError("messages keep flowing: the cluster does not settle")
        return delivered

    def stabilize(self) -> int:
        return self.deliver()

    def drop(self, src: str) -> None:
        self.queue = [(s, m) for s, m in self.queue if s != src]

    def tick(self, uuid: str, times: int = 1) -> None:
        for _ in range(times):
            self.do(uuid, "tick")

    def elect(self, uuid: str) -> None:
        """Let the other followers' vote leases run out, then have `uuid` campaign and deliver
        only election traffic until it leads."""
        for _ in range(3):  # a stale term costs an attempt: the rejection teaches us the term
            for other, core in self.cores.items():
                if other != uuid and core is not None and core.role != Role.LEADER:
                    self.tick(other, core.vote_lease_ticks())
            self.do(uuid, "campaign")
            self.deliver(types=(VoteRequest, VoteResponse))
            if self.core(uuid).role == Role.LEADER:
                return
        raise AssertionError(f"{uuid} did not win: {self.core(uuid).role}")

    def log_terms(self, uuid: str) -> list[int]:
        """Terms of the persisted entries after the snapshot point."""
        return [e.term for e in self.disks[uuid]["log"]]
