"""What tablet servers and masters share: their identity on disk, the address book of peers,
the outbox that carries Raft messages to them, and hosting replicas by tablet id."""

from __future__ import annotations

import asyncio
import fcntl
import functools
import logging
import random
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path

import msgspec

from node import durable
from node.disk import Disk
from node.entry import ENTRY_OVERHEAD
from node.errors import CorruptionError, TesseraError
from node.probes import probe
from node.protocol import Consensus, ConsensusReply, Peer
from node.rpc import ErrorCode, RpcClient, RpcError
from node.rpc.server import DirectCall
from node.rpc.wire import ENVELOPE_RESERVE

log = logging.getLogger(__name__)


class Instance(msgspec.Struct, frozen=True):
    uuid: str
    kind: str  # "tserver" | "master": a data dir never changes role


def new_uuid(rng: random.Random) -> str:
    """A random UUID drawn from `rng`: the simulator seeds it, so ids replay with the seed."""
    return uuidlib.UUID(int=rng.getrandbits(128), version=4).hex


class DataDirLocked(TesseraError):
    pass


def lock_data_dir(data_dir: Path):
    """Hold `data_dir/instance.lock` (flock) for as long as the returned file stays open, as
    Kudu locks its data dirs: a second server, or an offline tool such as `tessera
    local-replica`, on a data dir in use is refused instead of corrupting it."""
    f = open(data_dir / "instance.lock", "a+b")  # noqa: SIM115 (held open on purpose)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise DataDirLocked(f"{data_dir} is in use by a running server (instance.lock is held); "
                            "stop it first") from None
    return f


def load_or_create_instance(data_dir: Path, kind: str, rng: random.Random, disk: Disk) -> str:
    """The server's permanent UUID, created with the data dir (tablet-copy seed: `instance`)."""
    path = data_dir / "instance"
    if disk.exists(path):
        inst = durable.load_struct(path, Instance, disk)
        if inst.kind != kind:
            raise CorruptionError(path, None, f"data dir belongs to a {inst.kind}, not a {kind}")
        # saved again: a first save whose directory sync failed is in the page cache only, and
        # a power loss would then give the server a second uuid after it had served as this one
        durable.save_struct(path, inst, disk)
        return inst.uuid
    durable.ensure_dir(data_dir, disk)
    inst = Instance(new_uuid(rng), kind)
    durable.save_struct(path, inst, disk)
    return inst.uuid


class PeerBook:
    """UUID -> address of every server we may need to reach, persisted so a restarted server can
    reach its peers before any master tells it where they are."""

    def __init__(self, path: Path, disk: Disk):
        self.path, self.disk = path, disk
        self.peers: dict[str, Peer] = {}
        if disk.exists(path):
            self.peers = {p.uuid: p for p in durable.load_struct(path, list[Peer], disk)}

    def get(self, uuid: str) -> Peer | None:
        return self.peers.get(uuid)

    def knows(self, peers: list[Peer]) -> bool:
        """Every one of `peers` is known, at its address: `learn` would change nothing. A
        plain loop, not all() over a generator: asked for every consensus request received."""
        get = self.peers.get
        for p in peers:
            if get(p.uuid) != p:
                return False
        return True

    async def learn(self, peers: list[Peer]) -> None:
        changed = [p for p in peers if self.peers.get(p.uuid) != p]
        if not changed:
            return
        for p in changed:
            self.peers[p.uuid] = p
        snapshot = list(self.peers.values())
        await asyncio.to_thread(durable.save_struct, self.path, snapshot, self.disk)


# Estimated bytes of a Raft message beside its entries' payloads (AppendEntries) or its read
# context (Heartbeat): its tag, field names, two UUIDs and a few integers take ~250.
MESSAGE_OVERHEAD = 512

# How long a consensus RPC's reply waits for the replica's answer to carry (Outbox.hold): well
# above a follower's WAL sync on a working disk, well below a heartbeat interval.
HOLD_S = 0.05


def message_bytes(msg) -> int:
    """At least what `msg` takes on the wire (an Outbox budget counts with it)."""
    size = MESSAGE_OVERHEAD + len(getattr(msg, "ctx", b""))
    entries = getattr(msg, "entries", None)
    if entries:  # the payloads summed by a list, not a generator: counted for every message
        size += ENTRY_OVERHEAD * len(entries) + sum([len(e.payload) for e in entries])
    return size


class Outbox:
    """Delivers Raft messages: at most one RPC in flight per (peer, tablet), each carrying
    what was queued since the last one left, so a slow peer batches instead of piling up
    calls. A batch leaves as soon as the one before it is answered (the peer answers on
    receipt), from the caller's turn of the loop: no sender task stands in between. A batch
    holds at most `budget` bytes of messages (the frame limit less ENVELOPE_RESERVE), or one
    message alone: several AppendEntries queued for a slow peer, each within the frame, go in
    several RPCs rather than one the peer would refuse as too large.

    A peer's own messages ride back in its reply (Kudu's UpdateConsensus answers in its RPC's
    response): the receiving side `hold`s the reply of a consensus RPC while its replica steps
    the messages, and what the replica next sends that peer for that tablet (the append's
    answer, once its WAL entry is durable) goes in it, not in an RPC of its own that would
    need a reply of its own. A lone write then costs each follower two frames, not four
    (docs/decisions/answers-in-the-reply.md). A reply held HOLD_S with nothing to carry goes
    out empty, so a message that gets no answer holds its sender's next batch that long at
    most."""

    def __init__(self, rpc: RpcClient, book: PeerBook, me: Peer, timeout: float = 2.0,
                 on_refused: Callable[[str, str, str], None] | None = None,
                 observe: Callable[[str, str, list], None] | None = None,
                 deliver: Callable[[str, list], None] | None = None):
        """`on_refused(tablet, peer, reason)`: the peer answered that it has no replica
        ("missing"), or only a tombstone ("tombstoned"); not one that failed: copying over a
        damaged replica is an operator's call. `observe(tablet, peer, messages)`: shown every
        message as it is queued (ServerOptions.observe_outgoing). `deliver(tablet, messages)`:
        hands our replica the messages a peer's reply carried."""
        self.rpc, self.book, self.me, self.timeout = rpc, book, me, timeout
        self.on_refused, self.observe, self.deliver = on_refused, observe, deliver
        self.budget = rpc.max_frame - ENVELOPE_RESERVE
        self._queues: dict[tuple[str, str], list] = {}
        self._busy: set[tuple[str, str]] = set()  # an RPC is in flight for these
        # (peer, tablet) -> the reply of its consensus RPC, with its release timer (None while
        # the handler still steps the messages: an answer made then needs no timer)
        self._held: dict[tuple[str, str], list] = {}
        self._tasks: set[asyncio.Task] = set()  # calls that had to connect first
        self._closed = False

    def sender(self, tablet_id: str):
        return lambda to_uuid, messages: self.send(tablet_id, to_uuid, messages)

    def send(self, tablet_id: str, to_uuid: str, messages: list) -> None:
        if self.observe is not None:
            self.observe(tablet_id, to_uuid, messages)
        key = (to_uuid, tablet_id)
        self._queues.setdefault(key, []).extend(messages)
        if key in self._held:
            self._answer_held(key)
        elif key not in self._busy:
            self._flush(key)

    # -- the receiving side: answers in the reply ------------------------------------------------
    def hold(self, tablet_id: str, from_uuid: str, reply: DirectCall) -> None:
        """Keep `reply`, the answer to `from_uuid`'s consensus RPC for `tablet_id`, for what
        our replica sends back; call `held` once the replica has stepped the messages."""
        key = (from_uuid, tablet_id)
        old = self._held.pop(key, None)
        if old is not None:  # its sender gave up on it (a deadline) and sent anew
            probe("rpc.outbox.held_reply_replaced")
            self._release(old)
        self._held[key] = [reply, None]

    def held(self, tablet_id: str, from_uuid: str) -> None:
        """The replica has stepped the held RPC's messages. What waits for that peer (queued
        behind our own RPC to it) leaves in the reply now; if nothing did, the reply waits
        HOLD_S for the replica's answer (an append's, once the entry is durable)."""
        key = (from_uuid, tablet_id)
        slot = self._held.get(key)
        if slot is None or slot[1] is not None:
            return
        if key in self._queues:  # queued behind our own RPC to that peer: it leaves now
            self._answer_held(key)
            if key not in self._held:
                return
        slot[1] = asyncio.get_running_loop().call_later(HOLD_S, self._expire_held, key, slot)

    def forget_held(self, tablet_id: str, from_uuid: str) -> None:
        """The held reply was answered otherwise (the handler raised): carry nothing in it."""
        self._held.pop((from_uuid, tablet_id), None)

    def _expire_held(self, key: tuple[str, str], slot: list) -> None:
        if self._held.get(key) is slot:
            probe("rpc.outbox.held_reply_released_empty")
            del self._held[key]
            slot[0](ConsensusReply(), None)

    def _release(self, slot: list, messages: list = ()) -> None:
        if slot[1] is not None:
            slot[1].cancel()
        slot[0](ConsensusReply(True, "", list(messages)), None)

    def _answer_held(self, key: tuple[str, str]) -> None:
        """Send what is queued for `key` in the reply held for it, as much as the budget takes
        (the rest leaves as an RPC of its own); one message over the budget alone leaves that
        way too, where the client refuses and reports it. A reply that can no longer reach
        the peer (its connection closed, or its deadline answered it) carries nothing: what
        is queued leaves as an RPC, on a connection of its own."""
        if not self._held[key][0].deliverable():
            probe("rpc.outbox.held_reply_dead_sent_as_rpc")
            slot = self._held.pop(key)
            if slot[1] is not None:
                slot[1].cancel()
            return self._flush(key) if key not in self._busy else None
        batch = self._queues[key]
        cut = self._fitting(batch, 0)
        if cut == 0:
            return self._flush(key) if key not in self._busy else None
        slot = self._held.pop(key)
        if cut < len(batch):
            self._queues[key] = batch[cut:]
            batch = batch[:cut]
        else:
            del self._queues[key]
        self._release(slot, batch)
        if key in self._queues and key not in self._busy:
            self._flush(key)

    def _fitting(self, batch: list, first: int) -> int:
        """How many of `batch`'s leading messages go in one frame: its first `first` whatever
        their size (an RPC carries at least one), then as many as keep within the budget."""
        cut, size = first, sum(message_bytes(m) for m in batch[:first])
        while cut < len(batch) and (size := size + message_bytes(batch[cut])) <= self.budget:
            cut += 1
        return cut

    def _flush(self, key: tuple[str, str]) -> None:
        batch = self._queues.pop(key, None)
        if not batch or self._closed:
            return
        cut = self._fitting(batch, 1)
        if cut < len(batch):  # the rest leaves when this batch is answered
            probe("rpc.outbox.batch_split")
            self._queues[key] = batch[cut:]
            batch = batch[:cut]
        to_uuid, tablet_id = key
        peer = self.book.get(to_uuid)
        if peer is None:
            probe("rpc.outbox.unknown_peer_dropped")
            return  # Raft resends what matters; an unknown peer is learned from masters
        self._busy.add(key)
        req = Consensus(tablet_id, batch, [self.me])
        done = functools.partial(self._answered, key)
        late = functools.partial(self._late, tablet_id)
        if not self.rpc.call_nowait(peer.addr, "consensus", req, ConsensusReply, to_uuid=to_uuid,
                                    timeout=self.timeout, done=done, late=late):
            task = asyncio.create_task(self._call(peer, req, done, late))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _call(self, peer: Peer, req: Consensus, done: Callable, late: Callable) -> None:
        """The way with a coroutine: connecting first, or waiting for room."""
        try:
            ack = await self.rpc.call(peer.addr, "consensus", req, ConsensusReply,
                                      to_uuid=peer.uuid, timeout=self.timeout, late=late)
        except RpcError as e:
            done(None, e)
        else:
            done(ack, None)

    def _late(self, tablet_id: str, ack: ConsensusReply) -> None:
        """The reply of an RPC we gave up on (its deadline) came after all: the peer answered
        in it, held back by a partition say, and Raft still wants the answer."""
        if ack.messages and self.deliver is not None and not self._closed:
            probe("rpc.outbox.late_reply_delivered")
            self.deliver(tablet_id, ack.messages)

    def _answered(self, key: tuple[str, str], ack: ConsensusReply | None,
                  error: BaseException | None) -> None:
        self._busy.discard(key)
        if ack is not None and ack.messages and self.deliver is not None:
            self.deliver(key[1], ack.messages)
        if isinstance(error, RpcError) and error.code == ErrorCode.TOO_LARGE:
            # Not sent (RpcClient refuses a frame over the limit): one message alone exceeds
            # the frame, an entry over the limit from before it was lowered. Proposals are
            # bounded so that it cannot happen otherwise (docs/decisions/entry-size-limit.md).
            probe("rpc.outbox.too_large_unsent")
            log.warning("consensus to %s for %s not sent: %s", key[0], key[1], error)
        elif error is not None:
            log.debug("consensus to %s for %s failed: %s", key[0], key[1], error)
        elif ack.reason in ("missing", "tombstoned") and self.on_refused is not None:
            self.on_refused(key[1], key[0], ack.reason)
        self._flush(key)

    async def close(self) -> None:
        self._closed = True
        for slot in self._held.values():  # the server is stopping: its connections close
            if slot[1] is not None:
                slot[1].cancel()
        self._held.clear()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
