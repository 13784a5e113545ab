"""What tablet servers and masters share: their identity on disk, the address book of peers,
the outbox that carries Raft messages to them, and hosting replicas by tablet id."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import random
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path

import msgspec

from node import durable
from node.disk import Disk
from node.errors import CorruptionError, TesseraError
from node.protocol import Ack, Consensus, Peer
from node.rpc import RpcClient, RpcError

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

    async def learn(self, peers: list[Peer]) -> None:
        changed = [p for p in peers if self.peers.get(p.uuid) != p]
        if not changed:
            return
        for p in changed:
            self.peers[p.uuid] = p
        snapshot = list(self.peers.values())
        await asyncio.to_thread(durable.save_struct, self.path, snapshot, self.disk)


class Outbox:
    """Delivers Raft messages: one sender task per (peer, tablet), each carrying everything queued
    since its last call in one RPC, so a slow peer batches instead of piling up calls."""

    def __init__(self, rpc: RpcClient, book: PeerBook, me: Peer, timeout: float = 2.0,
                 on_refused: Callable[[str, str, str], None] | None = None):
        """`on_refused(tablet, peer, reason)`: the peer answered that it has no replica
        ("missing"), or only a tombstone ("tombstoned"); not one that failed: copying over a
        damaged replica is an operator's call."""
        self.rpc, self.book, self.me, self.timeout = rpc, book, me, timeout
        self.on_refused = on_refused
        self._queues: dict[tuple[str, str], list] = {}
        self._events: dict[tuple[str, str], asyncio.Event] = {}
        self._tasks: dict[tuple[str, str], asyncio.Task] = {}

    def sender(self, tablet_id: str):
        return lambda to_uuid, messages: self.send(tablet_id, to_uuid, messages)

    def send(self, tablet_id: str, to_uuid: str, messages: list) -> None:
        key = (to_uuid, tablet_id)
        self._queues.setdefault(key, []).extend(messages)
        if key not in self._tasks:
            self._events[key] = asyncio.Event()
            self._tasks[key] = asyncio.create_task(self._run(key))
        self._events[key].set()

    async def _run(self, key: tuple[str, str]) -> None:
        to_uuid, tablet_id = key
        event = self._events[key]
        while True:
            await event.wait()
            event.clear()
            batch, self._queues[key] = self._queues[key], []
            peer = self.book.get(to_uuid)
            if not batch or peer is None:
                continue  # Raft resends what matters; an unknown peer is learned from masters
            try:
                ack = await self.rpc.call(peer.addr, "consensus",
                                          Consensus(tablet_id, batch, [self.me]), Ack,
                                          to_uuid=to_uuid, timeout=self.timeout)
                if ack.reason in ("missing", "tombstoned") and self.on_refused is not None:
                    self.on_refused(tablet_id, to_uuid, ack.reason)
            except RpcError as e:
                log.debug("consensus to %s for %s failed: %s", to_uuid, tablet_id, e)

    async def close(self) -> None:
        for t in self._tasks.values():
            t.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
