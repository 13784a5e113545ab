"""Real Replicas (WAL, state machine, asyncio driver) of one tablet in one process, wired through
an in-memory network whose links can be cut: the fault-flag and engine-logging tests drive the
production replica this way without processes or sockets."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from node import faults
from node.consensus import Member, MemberType, RaftConfig
from node.consensus.types import ReadState
from node.entry import Entry, EntryType
from node.faults import Faults
from node.replica.replica import Replica, ReplicaOptions, bootstrap_replica
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.ops import OpenSession, Read, Write, encode_command
from node.tablet.paths import TabletPaths
from node.wal import Log, LogOptions

TABLET = "t"
FAST_TICK_MS = 10  # elections in ~150 ms instead of ~1.5 s


def options(bugs: Faults = faults.NO_FAULTS) -> ReplicaOptions:
    return ReplicaOptions(tick_ms=FAST_TICK_MS, faults=bugs,
                          log=LogOptions(log_preallocate_segments=False, faults=bugs))


class Net:
    """Replicas of one tablet in one process; `cut` holds the uuids whose links are down."""

    def __init__(self, root: Path, uuids=("a", "b", "c"), bugs: dict[str, Faults] | None = None):
        config = RaftConfig(0, tuple(Member(u, MemberType.VOTER) for u in uuids))
        self.cut: set[str] = set()
        self.replicas: dict[str, Replica] = {}
        self.paths = {u: TabletPaths(root / u, TABLET) for u in uuids}
        for u in uuids:
            bootstrap_replica(self.paths[u], config)
        self.bugs = bugs or {}

    def start(self, *uuids: str) -> None:
        for u in uuids or tuple(self.paths):
            r = Replica(u, self.paths[u], self._sender(u), options(self.bugs.get(u, faults.NO_FAULTS)))
            r.open()
            r.start()
            self.replicas[u] = r

    def _sender(self, src: str):
        def send(dst: str, messages: list) -> None:
            if src not in self.cut and dst not in self.cut and dst in self.replicas:
                self.replicas[dst].step(messages)
        return send

    async def leader(self, among=None, timeout: float = 10.0) -> Replica:
        """The replica that leads and may take writes, once there is one among `among`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            for u, r in self.replicas.items():
                if (among is None or u in among) and r.leader_ready:
                    return r
            await asyncio.sleep(0.01)
        raise AssertionError("no leader elected")

    async def stop(self) -> None:
        await asyncio.gather(*(r.stop() for r in self.replicas.values()))


async def read_waiting_for_next_entry(r: Replica) -> asyncio.Task:
    """A read on leader `r` confirmed at one index past its commit index, so that it waits for
    the next entry to apply; its task, once it waits (`r._applied_waiters`)."""
    real_start = r.core._start_read

    def start_read(ctx):
        real_start(ctx)
        for pending in r.core._reads:  # its round still out
            if pending.ctx == ctx:
                pending.index += 1
        r.core._read_states = [ReadState(s.ctx, s.index + 1) if s.ctx == ctx else s
                               for s in r.core._read_states]  # a lone voter confirmed it at once

    r.core._start_read = start_read
    task = asyncio.create_task(r.read(Read("k")))
    for _ in range(200):
        if r._applied_waiters:
            break
        await asyncio.sleep(0.005)
    del r.core._start_read
    assert r._applied_waiters, "the read did not wait for the next entry"
    return task


async def open_session(r: Replica) -> int:
    return (await r.write(OpenSession(), session=0, seq=0, acked_below=0)).value


def write_wal(paths: TabletPaths, entries: list[Entry]) -> None:
    with Log.open(str(paths.wal_dir), TABLET, LogOptions(log_preallocate_segments=False)) as wal:
        done = threading.Event()
        wal.async_append(wal.reserve(entries), lambda _err: done.set())
        assert done.wait(10)



TAIL = [Entry(1, 1, EntryType.REPLICATE, encode_command(OpenSession())),
        Entry(1, 2, EntryType.REPLICATE, encode_command(Write("k", "uncommitted"), session=1, seq=1))]


async def rejoin_with_uncommitted_tail(root: Path, bug: bool) -> tuple[Replica, Replica]:
    """`a`, leader of term 1, logged TAIL, which no one else has; b and c elect a leader of term
    2 without it, which commits other entries at those indexes; then `a` rejoins. Returns
    (a, the leader) once `a` has applied what the leader committed."""
    net = Net(root, bugs={"a": Faults(fault_apply_uncommitted_at_bootstrap=bug)})
    write_wal(net.paths["a"], TAIL)
    for paths in net.paths.values():  # everyone voted for a in term 1
        cmeta = ConsensusMetadata.load(paths.consensus_meta)
        cmeta.update((1, "a"))
    net.cut.add("a")
    net.start()
    try:
        leader = await net.leader(among=("b", "c"))
        session = await open_session(leader)
        await leader.write(Write("other", 1), session=session, seq=1, acked_below=0)
        net.cut.clear()
        a = net.replicas["a"]
        for _ in range(500):
            if a.core.commit >= leader.core.commit and a.state.last_applied_index >= 3:
                break
            await asyncio.sleep(0.01)
        return a, leader
    finally:
        await net.stop()
