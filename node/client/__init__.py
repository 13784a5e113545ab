"""The Tessera client: finds the leader master, caches table locations, routes each key to its
tablet's leader and retries through leader changes until the operation's deadline.

Writes are exactly-once even across retries: each tablet gets a client session (opened through
the tablet's log), every write carries (session, seq), and a retry reuses its seq, so the tablet
answers a duplicate with the first result instead of applying it twice. That is what makes
retrying after a timeout safe. When the deadline passes, an operation that may have reached a
leader raises OpUnknown (a history's `info`); only one that certainly did not raises OpFailed.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

import crc32c

from node.errors import OpFailed, OpUnknown
from node.protocol import (
    Ack,
    ConfigState,
    CreateTable,
    Empty,
    MasterInfo,
    OpResult,
    Peer,
    Read,
    ReplicaChange,
    TableList,
    TableLocations,
    TableName,
    TabletLocation,
    Write,
)
from node.rpc import ErrorCode, RpcClient, RpcError
from node.tablet.ops import (
    Append,
    Cas,
    MicroOp,
    Op,
    OpenSession,
    Rejection,
    Result,
    Txn,
    is_read_only,
)
from node.tablet.ops import Read as ReadOp
from node.tablet.ops import Write as WriteOp

ATTEMPT_TIMEOUT = 1.0  # one RPC attempt; a partitioned replica must not eat the whole deadline


def parse_addrs(text: str, default_port: int) -> list[tuple[str, int]]:
    """'a:1,b,c:3' -> [(a, 1), (b, default), (c, 3)]; raises ValueError on nonsense."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        host, _, port = part.rpartition(":") if ":" in part else (part, "", str(default_port))
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad address {part!r}: want HOST:PORT")
        out.append((host, int(port)))
    if not out:
        raise ValueError("no addresses given")
    return out


class _Backoff:
    def __init__(self):
        self.delay = 0.01

    async def wait(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(min(self.delay * random.uniform(0.5, 1.5), max(0, deadline - loop.time())))
        self.delay = min(self.delay * 2, 0.5)


@dataclass
class _Session:
    id: int
    next_seq: int = 1
    inflight: set = field(default_factory=set)

    def acked_below(self) -> int:
        return min(self.inflight) if self.inflight else self.next_seq


class TesseraClient:
    def __init__(self, masters: list[tuple[str, int]], *, timeout: float = 5.0,
                 rpc: RpcClient | None = None):
        self.masters = list(masters)
        self.timeout = timeout
        self.rpc = rpc or RpcClient(connect_timeout=ATTEMPT_TIMEOUT)
        self._master_leader: tuple[str, int] | None = None
        self._master_book: dict[str, Peer] = {}
        self._locations: dict[str, TableLocations] = {}
        self._leaders: dict[str, str] = {}  # tablet -> leader uuid hint
        self._sessions: dict[str, _Session] = {}
        self._session_locks: dict[str, asyncio.Lock] = {}

    async def close(self) -> None:
        await self.rpc.close()

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self.timeout

    # -- masters -----------------------------------------------------------------------------
    async def master_call(self, method: str, req: Any, resp_type: type) -> Any:
        """Call the leader master, finding it first; RpcError if none answers in time."""
        deadline = self._deadline()
        backoff = _Backoff()
        last: Exception | None = None
        loop = asyncio.get_running_loop()
        while loop.time() < deadline:
            candidates = ([self._master_leader] if self._master_leader else []) + self.masters
            for addr in candidates:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    res = await self.rpc.call(addr, method, req, resp_type, to_uuid="",
                                              timeout=min(ATTEMPT_TIMEOUT * 3, remaining))
                    self._master_leader = addr
                    return res
                except RpcError as e:
                    last = e
                    if e.code == ErrorCode.NOT_LEADER:
                        hint = self._master_book.get(e.detail) if e.detail else None
                        if hint is None:
                            await self._learn_masters(addr)
                            hint = self._master_book.get(e.detail) if e.detail else None
                        if hint is not None:
                            self._master_leader = hint.addr
                            break
                    elif e.code in (ErrorCode.NOT_FOUND, ErrorCode.ALREADY_EXISTS,
                                    ErrorCode.INVALID_ARGUMENT, ErrorCode.ILLEGAL_STATE):
                        raise
                    if addr == self._master_leader:
                        self._master_leader = None
            await backoff.wait(deadline)
        raise last or RpcError(ErrorCode.NETWORK, "no master answered")

    async def _learn_masters(self, addr: tuple[str, int]) -> None:
        try:
            info = await self.rpc.call(addr, "master.info", Empty(), MasterInfo, to_uuid="",
                                       timeout=ATTEMPT_TIMEOUT)
            self._master_book.update({p.uuid: p for p in info.masters})
        except RpcError:
            pass

    async def create_table(self, name: str, num_tablets: int = 1,
                           replication_factor: int = 3) -> TableLocations:
        locs = await self.master_call("master.create_table",
                                      CreateTable(name, num_tablets, replication_factor),
                                      TableLocations)
        self._locations[name] = locs
        return locs

    async def change_replica(self, tablet_id: str, op: str, ts_uuid: str) -> ConfigState:
        """Add ("add") or remove ("remove") the replica of `tablet_id` on tablet server
        `ts_uuid`, through the leader master; returns the committed config."""
        return await self.master_call("master.change_replica", ReplicaChange(tablet_id, op, ts_uuid),
                                      ConfigState)

    async def delete_table(self, name: str) -> None:
        await self.master_call("master.delete_table", TableName(name), Ack)
        self._locations.pop(name, None)

    async def list_tables(self) -> list[str]:
        return (await self.master_call("master.list_tables", Empty(), TableList)).tables

    async def locations(self, name: str, refresh: bool = False) -> TableLocations:
        if refresh or name not in self._locations:
            self._locations[name] = await self.master_call("master.table_locations",
                                                           TableName(name), TableLocations)
            for t in self._locations[name].tablets:
                if t.leader:
                    self._leaders.setdefault(t.tablet_id, t.leader)
        return self._locations[name]

    def table(self, name: str, node_names: dict | None = None) -> Table:
        return Table(self, name, node_names)

    # -- tablets -----------------------------------------------------------------------------
    async def _tablet_for(self, table: str, key: str, refresh: bool = False) -> TabletLocation:
        locs = await self.locations(table, refresh)
        n = len(locs.tablets)
        bucket = crc32c.crc32c(key.encode()) % n
        for t in locs.tablets:
            if t.partition.contains(key):
                return t
        raise OpFailed(f"no tablet of {table} holds bucket {bucket} of {n}")

    def _replica_order(self, t: TabletLocation) -> list[Peer]:
        hint = self._leaders.get(t.tablet_id) or t.leader
        return sorted(t.replicas, key=lambda p: (p.uuid != hint, random.random()))

    async def _session(self, t: TabletLocation, deadline: float, on_peer=None) -> _Session:
        lock = self._session_locks.setdefault(t.tablet_id, asyncio.Lock())
        async with lock:
            s = self._sessions.get(t.tablet_id)
            if s is None:
                # An orphaned session from a lost reply is harmless, so this may be retried.
                res, _ = await self._send(t, OpenSession(), 0, 0, 0, deadline, on_peer)
                s = self._sessions[t.tablet_id] = _Session(res.value)
            return s

    async def _send(self, t: TabletLocation, op: Op, session: int, seq: int, acked_below: int,
                    deadline: float, on_peer=None) -> tuple[Result, bool]:
        """One op to the tablet's leader, retried across replicas until the deadline.
        Returns (result, uncertain) where uncertain means an earlier attempt may have applied.
        `on_peer(peer)` hears of every replica tried, so callers can tell who answered."""
        loop = asyncio.get_running_loop()
        backoff = _Backoff()
        uncertain = False
        read_only = is_read_only(op)
        last = "no attempt"
        while loop.time() < deadline:
            for peer in self._replica_order(t):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                if on_peer is not None:
                    on_peer(peer)
                try:
                    if read_only:
                        req = Read(t.tablet_id, op)
                        res = await self.rpc.call(peer.addr, "ts.read", req, OpResult,
                                                  to_uuid=peer.uuid,
                                                  timeout=min(ATTEMPT_TIMEOUT, remaining))
                    else:
                        req = Write(t.tablet_id, op, session, seq, acked_below)
                        res = await self.rpc.call(peer.addr, "ts.write", req, OpResult,
                                                  to_uuid=peer.uuid,
                                                  timeout=min(ATTEMPT_TIMEOUT, remaining))
                    self._leaders[t.tablet_id] = peer.uuid
                    return res.result, uncertain
                except RpcError as e:
                    last = f"{peer.host}:{peer.port}: {e}"
                    uncertain |= e.maybe_delivered and not read_only
                    if e.code == ErrorCode.NOT_LEADER:
                        if e.detail and e.detail != peer.uuid:
                            self._leaders[t.tablet_id] = e.detail
                            break  # go straight to the hinted leader
                    elif e.code in (ErrorCode.TABLET_NOT_FOUND, ErrorCode.WRONG_SERVER_UUID):
                        self._locations.pop(self._table_of(t), None)
            await backoff.wait(deadline)
        if uncertain:
            raise OpUnknown(f"outcome unknown after {self.timeout}s: {last}")
        raise OpFailed(f"not applied within {self.timeout}s: {last}")

    def _table_of(self, t: TabletLocation) -> str:
        for name, locs in self._locations.items():
            if any(x.tablet_id == t.tablet_id for x in locs.tablets):
                return name
        return ""

    async def op(self, table: str, key: str, op: Op, on_peer=None) -> Result:
        """Run one op on the tablet holding `key` and return its Result (ok or a rejection)."""
        deadline = self._deadline()
        t = await self._tablet_for(table, key)
        if is_read_only(op):
            return (await self._send(t, op, 0, 0, 0, deadline, on_peer))[0]
        for _ in range(3):  # a session evicted before our first attempt: reopen and retry
            s = await self._session(t, deadline, on_peer)
            seq = s.next_seq
            s.next_seq += 1
            s.inflight.add(seq)
            try:
                res, uncertain = await self._send(t, op, s.id, seq, s.acked_below(), deadline,
                                                  on_peer)
            finally:
                s.inflight.discard(seq)
            if res.ok or res.error not in (Rejection.NO_SESSION, Rejection.STALE_SEQ):
                return res
            self._sessions.pop(t.tablet_id, None)
            if uncertain or res.error == Rejection.STALE_SEQ:
                raise OpUnknown(f"session lost after an uncertain attempt: {res.detail}")
        raise OpFailed("could not keep a session open")


class Table:
    """One table's key-value operations; implements workloads.base.KVClient.

    `node` is the replica this handle last contacted (the one that answered, if any did),
    named by `node_names` (address -> host name) when given: what a history's `node` records.
    Give each concurrent caller its own handle for that to mean anything."""

    def __init__(self, client: TesseraClient, name: str, node_names: dict | None = None):
        self.client, self.name = client, name
        self.node_names = node_names or {}
        self.node: str | None = None

    def _saw(self, peer: Peer) -> None:
        self.node = self.node_names.get(peer.host, f"{peer.host}:{peer.port}")

    async def _ok(self, key: str, op: Op) -> Any:
        res = await self.client.op(self.name, key, op, self._saw)
        if not res.ok:
            raise OpFailed(f"{res.error}: {res.detail}")
        return res.value

    async def read(self, key: str) -> Any:
        return await self._ok(key, ReadOp(key))

    async def write(self, key: str, value: Any) -> None:
        await self._ok(key, WriteOp(key, value))

    async def cas(self, key: str, expected: Any, new: Any) -> bool:
        res = await self.client.op(self.name, key, Cas(key, expected, new), self._saw)
        if res.ok:
            return True
        if res.error == Rejection.CAS_MISMATCH:
            return False
        raise OpFailed(f"{res.error}: {res.detail}")

    async def append(self, key: str, element: Any) -> None:
        await self._ok(key, Append(key, element))

    async def txn(self, ops: list[list]) -> list[list]:
        """Micro-ops [f, key, value] on keys that must share one tablet."""
        if not ops:
            return []
        locs = await self.client.locations(self.name)
        if len(locs.tablets) != 1:
            first = await self.client._tablet_for(self.name, ops[0][1])
            for _, key, _ in ops:
                if not first.partition.contains(key):
                    raise OpFailed(f"transaction keys span tablets ({key!r}); "
                                   "use a single-tablet table for transactions")
        done = await self._ok(ops[0][1], Txn([MicroOp(*m) for m in ops]))
        return [list(m) for m in done]
