"""The Tessera client: finds the leader master, caches table locations, routes each key to its
tablet's leader and retries through leader changes until the operation's deadline.

Writes are exactly-once even across retries: each tablet gets a client session (opened through
the tablet's log), every write carries (session, seq), and a retry reuses its seq, so the tablet
answers a duplicate with the first result instead of applying it twice. That is what makes
retrying after a timeout safe. When the deadline passes, an operation that may have reached a
leader raises OpUnknown (a history's `info`); only one that certainly did not raises OpFailed.

Node-bound handles (`table(name, names, bind=HOST)`) exist because Jepsen binds each worker
process to one node: a smart client that always finds the newest leader would hide a deposed
leader's stale answers, the very bug a test looks for. A bound handle sends every operation on a
tablet first to that tablet's replica on HOST (or HOST:PORT, to tell apart servers sharing an
address, as on loopback). That replica answers if it believes it leads, deposed or not; or
answers NOT_LEADER with a hint, which the handle follows at once, as Kudu's client does; or does
not answer, and the handle moves on to the other replicas. A tablet with no replica on HOST is
routed as the shared smart handle (`bind=None`) routes everything.

Batching sessions (`new_session`, node.client.session) send many writes of one tablet as one
`ts.write_batch`, one Raft entry, with Kudu's flush modes; each op keeps its own seq and result.
Without a session, the writes a handle's callers issue in one turn of the loop travel together
the same way (`_corked`), and a lone write goes alone.

Faults must not starve a run of operations, so a replica that stopped answering (paused,
partitioned, down) gets only SILENT_TIMEOUT per attempt, doubling each round up to
ATTEMPT_TIMEOUT, and goes last in the order unless bound; one that answers gets ATTEMPT_TIMEOUT,
long enough for a loaded leader's commit, so a slow leader is not retried into more load. Hints
are followed at once; only a round that found no leader backs off. Locations a replica
contradicts (a leader we do not know of, a tablet that moved) are fetched again in the
background while ops go on, and each handle keeps its own sessions, so one op stalled by a
fault neither waits on an unavailable master nor loses its dedup record to other callers.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import ssl
from collections.abc import Callable
from typing import Any

import crc32c
import msgspec

from node.client import faults
from node.client.session import (
    MAX_BATCH_OPS,
    Answered,
    Sent,
    Session,
    SessionOptions,
    Sessions,
    TabletSession,
    all_ok,
    answer,
    check_mode,
    kept,
)
from node.client.session import BufferFull as BufferFull
from node.client.session import FlushMode as FlushMode
from node.client.session import RowResult as RowResult
from node.consensus.confchange import ALREADY_MEMBER, NOT_MEMBER
from node.errors import OpFailed, OpUnknown, TooLarge, WrongReply
from node.probes import probe
from node.protocol import (
    CLIENT_PROPAGATED,
    COMMIT_WAIT,
    Ack,
    BatchResult,
    ConfigState,
    CreateTable,
    DropTable,
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
    TServerState,
    Write,
    WriteBatch,
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
    RowOp,
    Txn,
    is_read_only,
)
from node.tablet.ops import Read as ReadOp
from node.tablet.ops import Write as WriteOp

CONNECT_TIMEOUT = 0.25  # a reachable LAN or loopback host completes a TCP handshake in < 1 ms
ATTEMPT_TIMEOUT = 1.0  # one RPC to a replica that has been answering: a loaded leader's commit
SILENT_TIMEOUT = 0.25  # one RPC to a replica whose last attempt got no reply
_NO_REPLY = (ErrorCode.NETWORK, ErrorCode.DEADLINE_EXCEEDED)


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


def parse_bind(bind: str | None) -> tuple[str, int | None] | None:
    """'10.0.0.2' -> ('10.0.0.2', None): any port; '127.0.0.1:7051' -> that server only."""
    if bind is None:
        return None
    host, sep, port = bind.rpartition(":")
    if sep and port.isdigit() and host.count(":") == 0:
        return host, int(port)
    return bind, None


def new_ddl_token() -> str:
    """A CreateTable or DropTable token: the same for every try of one call, unlike any other
    call's."""
    return secrets.token_hex(8)


def _ddl_token(given: str | None) -> str:
    if faults.FAULTS.no_ddl_token:
        return ""
    return given or new_ddl_token()


class _Backoff:
    def __init__(self, rng: random.Random):
        self.delay = 0.01
        self.rng = rng

    async def wait(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(min(self.delay * self.rng.uniform(0.5, 1.5), max(0, deadline - loop.time())))
        self.delay = min(self.delay * 2, 0.5)


class TesseraClient:
    def __init__(self, masters: list[tuple[str, int]], *, timeout: float = 5.0,
                 rpc: RpcClient | None = None, rng: random.Random | None = None,
                 tls: ssl.SSLContext | None = None, time_scale: float = 1.0,
                 external_consistency: str = CLIENT_PROPAGATED):
        """`rng` (jitter, replica order): seeded by the simulator for replayable runs. `tls`:
        connect with TLS as this identity (node.security.tls.client_tls). `time_scale`
        multiplies the connect and attempt timeouts, for servers on slow hosts (TCG guests).
        `external_consistency`: Kudu's mode for this client's writes (node.protocol says what
        each promises); a session may ask for the other (SessionOptions)."""
        if check_mode(external_consistency) is None:
            raise ValueError(f"external_consistency is {CLIENT_PROPAGATED} or {COMMIT_WAIT}, "
                             "not None")
        self.external_consistency = external_consistency
        self.masters = list(masters)
        self.rng = rng or random.Random()
        self.timeout = timeout
        self.attempt_timeout = ATTEMPT_TIMEOUT * time_scale
        self.silent_timeout = SILENT_TIMEOUT * time_scale
        self.rpc = rpc or RpcClient(connect_timeout=CONNECT_TIMEOUT * time_scale, tls=tls)
        self._master_leader: tuple[str, int] | None = None
        self._master_book: dict[str, Peer] = {}
        self._locations: dict[str, TableLocations] = {}
        self._leaders: dict[str, str] = {}  # tablet -> leader uuid hint
        self._silent: set[tuple[str, int]] = set()  # addresses whose last attempt got no reply
        self._refreshing: dict[str, asyncio.Task] = {}  # table -> background locations fetch
        self._sessions = Sessions()  # for op() calls that bring none
        self._uncorking: set[asyncio.Task] = set()  # batches of writes being sent (_corked)
        self._loop: asyncio.AbstractEventLoop | None = None  # see _now

    async def close(self) -> None:
        for task in self._refreshing.values():
            task.cancel()
        await asyncio.gather(*self._refreshing.values(), return_exceptions=True)
        await self.rpc.close()

    def _now(self) -> float:
        """The running loop's time. The loop is kept, not looked up per op (that lookup is a
        system call, getpid, asyncio's fork check); a client runs on one loop at a time, and
        once that loop is closed the next one is looked up."""
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        return loop.time()

    def _deadline(self) -> float:
        return self._now() + self.timeout

    @staticmethod
    def _propagated(sessions: Sessions) -> int:
        """The timestamp a write carries: the highest its writer observed (Sessions; 0 under
        the `drop-propagated` mutant, node.client.faults)."""
        return 0 if faults.FAULTS.drop_propagated else sessions.last_observed

    @staticmethod
    def _observe(sessions: Sessions, results: list) -> None:
        """Keep the highest timestamp among a reply's ok results."""
        for r in results:
            if isinstance(r, Result) and r.ok and r.timestamp > sessions.last_observed:
                sessions.last_observed = r.timestamp

    # -- masters -----------------------------------------------------------------------------
    async def master_call(self, method: str, req: Any, resp_type: type,
                          deadline: float | None = None,
                          retry_as: Callable[[Any], Any] | None = None) -> Any:
        """Call the leader master, finding it first; RpcError if none answers in time. The
        error raised is the last one a master gave that was not a redirect, if any: a
        follower's "not the leader master" would hide what the leader said. `retry_as`: the
        request to send instead once an attempt may have landed (its reply lost or late)."""
        deadline = deadline or self._deadline()
        backoff = _Backoff(self.rng)
        last: Exception | None = None
        said: Exception | None = None  # the last answer that was not a redirect
        loop = asyncio.get_running_loop()
        while loop.time() < deadline:
            candidates = ([self._master_leader] if self._master_leader else []) + self.masters
            for addr in candidates:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    res = await self.rpc.call(addr, method, req, resp_type, to_uuid="",
                                              timeout=min(self.attempt_timeout * 3, remaining))
                    self._master_leader = addr
                    return res
                except RpcError as e:
                    last = e
                    if e.code != ErrorCode.NOT_LEADER:
                        said = e
                    if retry_as is not None and e.maybe_delivered:
                        req = retry_as(req)
                    if e.code == ErrorCode.NOT_LEADER:
                        hint = self._master_book.get(e.detail) if e.detail else None
                        if hint is None:
                            probe("client.master.hint_unknown_learning")
                            await self._learn_masters(addr)
                            hint = self._master_book.get(e.detail) if e.detail else None
                        if hint is not None:
                            probe("client.master.hint_followed")
                            self._master_leader = hint.addr
                            break
                    elif e.code in (ErrorCode.NOT_FOUND, ErrorCode.ALREADY_EXISTS,
                                    ErrorCode.INVALID_ARGUMENT, ErrorCode.ILLEGAL_STATE,
                                    ErrorCode.NOT_AUTHORIZED):
                        raise
                    if addr == self._master_leader:
                        self._master_leader = None
            await backoff.wait(deadline)
        raise said or last or RpcError(ErrorCode.NETWORK, "no master answered")

    async def _learn_masters(self, addr: tuple[str, int]) -> None:
        try:
            info = await self.rpc.call(addr, "master.info", Empty(), MasterInfo, to_uuid="",
                                       timeout=self.attempt_timeout)
            self._master_book.update({p.uuid: p for p in info.masters})
            self.masters += [p.addr for p in info.masters if p.addr not in self.masters]
        except RpcError:
            pass

    async def create_table(self, name: str, num_tablets: int = 1, replication_factor: int = 3,
                           token: str | None = None) -> TableLocations:
        """Create the table; its locations. An attempt can land and lose its reply (a master slow
        to create the replicas outlasts the attempt's timeout), so every attempt carries one
        token: the master answers a retry of a create that landed with the table, and
        ALREADY_EXISTS means another create made it; NOT_FOUND, "dropped since", means this call
        made it and another user's drop has removed it. A caller that retries the call itself
        passes the same `token` (`new_ddl_token()`) to each. The token comes from the OS,
        not `rng`, so a seeded client draws the same numbers it did before."""
        locs = await self.master_call("master.create_table",
                                      CreateTable(name, num_tablets, replication_factor,
                                                  _ddl_token(token)),
                                      TableLocations)
        self._locations[name] = locs
        return locs

    async def change_replica(self, tablet_id: str, op: str, ts_uuid: str) -> ConfigState:
        """Add ("add") or remove ("remove") the replica of `tablet_id` on tablet server
        `ts_uuid`, through the leader master; returns the committed config. The master waits
        for the tablet's leader to commit, which can outlast an attempt: an attempt after one
        that may have landed says it is a retry, and the master answers it with the committed
        config when its change is made (or pending, then committed), where a first attempt is
        told the config already is as asked (`change_already_made`)."""
        return await self.master_call("master.change_replica", ReplicaChange(tablet_id, op, ts_uuid),
                                      ConfigState,
                                      retry_as=lambda r: msgspec.structs.replace(r, retry=True))

    @staticmethod
    def change_already_made(e: Exception, op: str) -> bool:
        """Whether `change_replica` failed only because the config already is as asked: an
        add of a member, a removal of a non-member. The change is compare-and-set guarded, so
        it never applies twice. Within one call the master answers a retry itself; a caller
        that calls again after a call failed (its deadline passed while the master waited for
        the commit) gets this on the new call's first attempt."""
        done = ALREADY_MEMBER if op == "add" else NOT_MEMBER
        made = isinstance(e, RpcError) and e.code == ErrorCode.ILLEGAL_STATE and done in e.message
        if made:
            probe("client.change_replica.already_made")
        return made

    async def tserver_state(self, ts_uuid: str, maintenance: bool) -> None:
        """Put tablet server `ts_uuid` in maintenance (its replicas are not replaced while it
        is), or take it out of it, through the leader master."""
        await self.master_call("master.tserver_state", TServerState(ts_uuid, maintenance), Ack)

    async def delete_table(self, name: str, token: str | None = None) -> None:
        """Drop the table. As `create_table`, one token for every attempt: the retry of a drop
        that landed is answered ok, and NOT_FOUND means no drop of ours took it."""
        await self.master_call("master.delete_table", DropTable(name, _ddl_token(token)),
                               Ack)
        self._locations.pop(name, None)

    async def list_tables(self) -> list[str]:
        return (await self.master_call("master.list_tables", Empty(), TableList)).tables

    async def locations(self, name: str, refresh: bool = False,
                        deadline: float | None = None) -> TableLocations:
        if refresh or name not in self._locations:
            self._locations[name] = await self.master_call(
                "master.table_locations", TableName(name), TableLocations, deadline)
            for t in self._locations[name].tablets:
                if t.leader:
                    self._leaders.setdefault(t.tablet_id, t.leader)
        return self._locations[name]

    def _refresh_soon(self, name: str) -> None:
        """A replica contradicted our locations: fetch them again in the background, one fetch
        at a time. Ops go on with the old ones meanwhile rather than stall on the master,
        which may be unavailable too; each retry round picks up the new ones (`_latest`)."""
        task = self._refreshing.get(name)
        if task is None or task.done():
            self._refreshing[name] = asyncio.create_task(self._refresh(name))

    async def _refresh(self, name: str) -> None:
        try:
            await self.locations(name, refresh=True)
        except RpcError:
            pass  # the replicas will contradict us again

    def _latest(self, table: str, t: TabletLocation) -> TabletLocation:
        locs = self._locations.get(table)
        if locs is not None:
            for x in locs.tablets:
                if x.tablet_id == t.tablet_id:
                    return x
        return t

    def table(self, name: str, names: dict | None = None, bind: str | None = None,
              session: Session | None = None, sessions: Sessions | None = None) -> Table:
        """A handle on table `name`; `names` maps addresses to host names for `Table.node`, and
        `bind` (a tablet server's host, or host:port) makes the handle node-bound (see above).
        With a batching `session` (`new_session`), the handle's writes go through it. Handles
        given the same `sessions` write in the same client sessions, and the writes their
        callers issue in one loop turn travel together (`_corked`), as one handle's do."""
        return Table(self, name, names, bind, session, sessions)

    # -- tablets -----------------------------------------------------------------------------
    async def _tablet_for(self, table: str, key: str,
                          deadline: float | None = None) -> TabletLocation:
        locs = await self.locations(table, deadline=deadline)  # cached after the first call
        t = self.cached_tablet(table, key)
        if t is not None:
            return t
        bucket = crc32c.crc32c(key.encode()) % len(locs.tablets)
        raise OpFailed(f"no tablet of {table} holds bucket {bucket} of {len(locs.tablets)}")

    def cached_tablet(self, table: str, key: str) -> TabletLocation | None:
        """The tablet holding `key` by the locations we have, without a coroutine: callers on
        the per-op path try this first and await `_tablet_for` only when it is None (the
        table's locations not known yet)."""
        locs = self._locations.get(table)
        if locs is not None:
            for t in locs.tablets:
                if t.partition.contains(key):
                    return t
        return None

    def _replica_order(self, t: TabletLocation, bind: tuple[str, int | None] | None) -> list[Peer]:
        """The bound replica, then the believed leader, then the rest; silent ones last."""
        hint = self._leaders.get(t.tablet_id) or t.leader
        return sorted(t.replicas, key=lambda p: (not _on(p, bind), p.addr in self._silent,
                                                 p.uuid != hint, self.rng.random()))

    def _believed_leader(self, t: TabletLocation) -> Peer | None:
        """What `_replica_order` puts first when nothing is bound, if not silent: the per-op
        path tries it before sorting anything."""
        hint = self._leaders.get(t.tablet_id) or t.leader
        for p in t.replicas:
            if p.uuid == hint:
                return None if p.addr in self._silent else p
        return None

    async def _session(self, sessions: Sessions, table: str, t: TabletLocation, deadline: float,
                       bind: tuple[str, int | None] | None) -> TabletSession:
        s = sessions.by_tablet.get(t.tablet_id)
        if s is not None:
            return s  # the lock below is for opening one, once
        lock = sessions.locks.setdefault(t.tablet_id, asyncio.Lock())
        try:  # another caller may be opening it: wait no longer than our own deadline
            async with asyncio.timeout_at(deadline):
                await lock.acquire()
        except TimeoutError:
            raise OpFailed(f"no session for tablet {t.tablet_id} within {self.timeout}s") from None
        try:
            s = sessions.by_tablet.get(t.tablet_id)
            if s is None:
                # An orphaned session from a lost reply is harmless, so this may be retried;
                # the op itself was not sent, so a failure here is OpFailed.
                try:
                    method, req, _ = _request(t, OpenSession())
                    res, _, _ = await self._to_leader(table, t, method, req, OpResult, True,
                                                      deadline, bind)
                except OpUnknown as e:
                    probe("client.session.open_failed")
                    raise OpFailed(f"could not open a session: {e}") from None
                s = sessions.by_tablet[t.tablet_id] = TabletSession(res.result.value)
            return s
        finally:
            lock.release()

    async def _to_leader(self, table: str, t: TabletLocation, method: str, req: Any,
                         resp_type: type, mutating: bool, deadline: float,
                         bind: tuple[str, int | None] | None) -> tuple[Any, bool, Peer]:
        """`req` to the tablet's leader, retried unchanged (same session and seqs) across
        replicas until the deadline: (response, uncertain, the replica that answered).

        The common case first, without a plan: one call to the leader we believe in. Only if
        it fails does `_retry` order the replicas, starting from that failure."""
        first = None if bind is not None else self._believed_leader(self._latest(table, t))
        failed = None
        if first is not None:
            remaining = deadline - self._now()
            if remaining > 0:
                try:
                    res = await self.rpc.call(first.addr, method, req, resp_type,
                                              to_uuid=first.uuid,
                                              timeout=min(self.attempt_timeout, remaining))
                except RpcError as e:
                    failed = (first, e.with_traceback(None))  # kept: see _retry
                else:
                    self._leaders[t.tablet_id] = first.uuid
                    return res, False, first
        return await self._retry(table, t, method, req, resp_type, mutating, deadline, bind,
                                 failed)

    async def _retry(self, table: str, t: TabletLocation, method: str, req: Any,
                     resp_type: type, mutating: bool, deadline: float,
                     bind: tuple[str, int | None] | None,
                     failed: tuple[Peer, RpcError] | None) -> tuple[Any, bool, Peer]:
        """`_to_leader` past its first try: rounds over the replicas (the bound one, the
        believed leader, the rest; silent ones last), following hints, backing off between
        rounds. `failed`: the believed leader's first try and how it failed, which the first
        round takes as its own first attempt."""
        loop = asyncio.get_running_loop()
        backoff = None
        # Counted before the loops: a first try that timed out at the deadline leaves no time
        # for them, and it may have been applied (a definite failure was reported for it)
        uncertain = failed is not None and failed[1].maybe_delivered and mutating
        last = "no attempt" if failed is None else f"{failed[0].host}:{failed[0].port}: {failed[1]}"
        if failed is not None and deadline - loop.time() <= 0:
            probe("client.retry.first_try_ended_at_deadline")
        rounds = 0
        while loop.time() < deadline:
            t = self._latest(table, t)
            bound = bind if rounds == 0 else None
            first = None if bound is not None else self._believed_leader(t)
            order = [first] if first is not None else self._replica_order(t, bound)
            complete = first is None  # else the rest is ordered only if `first` fails
            tried: set[str] = set()
            if failed is not None:  # that first attempt was made already
                order, tried = [], {failed[0].uuid}
            while (remaining := deadline - loop.time()) > 0:
                if failed is not None:
                    (peer, e), failed = failed, None
                else:
                    if not order:
                        if complete:
                            break
                        order = [p for p in self._replica_order(t, bound) if p.uuid not in tried]
                        complete = True
                        continue
                    peer = order.pop(0)
                    if peer.uuid in tried:
                        continue
                    tried.add(peer.uuid)
                    patience = (min(self.attempt_timeout, self.silent_timeout * 2 ** rounds)
                                if peer.addr in self._silent else self.attempt_timeout)
                    try:
                        # bounded as a whole, connecting included (RpcClient.call)
                        res = await self.rpc.call(peer.addr, method, req, resp_type,
                                                  to_uuid=peer.uuid,
                                                  timeout=min(patience, remaining))
                        self._silent.discard(peer.addr)
                        self._leaders[t.tablet_id] = peer.uuid
                        return res, uncertain, peer
                    except RpcError as caught:
                        # Kept past the except, with no traceback: its traceback holds this
                        # frame, whose `e` holds it (a cycle only a full collection frees),
                        # and the call's frame with the encoded request, up to a frame's size
                        e = caught.with_traceback(None)
                last = f"{peer.host}:{peer.port}: {e}"
                uncertain |= e.maybe_delivered and mutating
                if e.code in _NO_REPLY:
                    probe("client.retry.no_reply")
                    self._silent.add(peer.addr)
                    if self._leaders.get(t.tablet_id) == peer.uuid:
                        del self._leaders[t.tablet_id]
                    continue
                self._silent.discard(peer.addr)
                if e.code == ErrorCode.NOT_LEADER and e.detail and e.detail not in tried:
                    self._leaders[t.tablet_id] = e.detail
                    hinted = [p for p in t.replicas if p.uuid == e.detail]
                    if hinted:
                        probe("client.retry.not_leader_hint_followed")
                        order.insert(0, hinted[0])  # straight to the hinted leader
                    else:  # a leader we do not know of: the config changed
                        probe("client.retry.not_leader_unknown_leader")
                        self._refresh_soon(table)
                elif e.code in (ErrorCode.TABLET_NOT_FOUND, ErrorCode.WRONG_SERVER_UUID):
                    probe("client.retry.tablet_moved")
                    self._refresh_soon(table)
                elif e.code in (ErrorCode.INVALID_ARGUMENT, ErrorCode.NOT_AUTHORIZED):
                    probe("client.retry.refused")
                    if uncertain:  # an earlier attempt may still have applied
                        raise OpUnknown(f"outcome unknown, then refused: {last}") from None
                    raise OpFailed(f"refused: {last}") from None  # no replica will differ
                elif e.code == ErrorCode.TOO_LARGE:
                    probe("client.retry.too_large")
                    # Refused unsent (over the frame) or unproposed (over what one entry
                    # may hold): this attempt did nothing, nor would a retry anywhere.
                    if uncertain:  # an earlier attempt may still have applied
                        raise OpUnknown(f"outcome unknown, then refused: {last}") from None
                    raise TooLarge(f"too large: {last}") from None
            rounds += 1
            backoff = backoff or _Backoff(self.rng)
            await backoff.wait(deadline)
        if uncertain:
            probe("client.retry.deadline_unknown")
            raise OpUnknown(f"outcome unknown after {self.timeout}s: {last}")
        probe("client.retry.deadline_failed")
        raise OpFailed(f"not applied within {self.timeout}s: {last}")

    async def op(self, table: str, key: str, op: Op, bind: tuple[str, int | None] | None = None,
                 sessions: Sessions | None = None) -> RowResult:
        """Run one op on the tablet holding `key`: its Result (ok or a rejection), the
        replica that gave it and, for a write, what ties the answer to its request (Sent).
        `bind` is a parse_bind() value. A write shares its request with the writes other
        callers of `sessions` issue in the same loop turn (`_corked`)."""
        sessions = sessions or self._sessions
        deadline = self._deadline()
        t = self.cached_tablet(table, key) or await self._tablet_for(table, key, deadline=deadline)
        if is_read_only(op):
            method, req, _ = _request(t, op)
            res, _, peer = await self._to_leader(table, t, method, req, OpResult, False,
                                                 deadline, bind)
            return RowResult(res.result, peer)
        return await self._corked(table, t, op, bind, sessions, deadline)

    def _corked(self, table: str, t: TabletLocation, op: RowOp,
                bind: tuple[str, int | None] | None, sessions: Sessions,
                deadline: float) -> asyncio.Future:
        """A write joins the other writes its callers (one handle's `sessions`) issue to the
        same tablet in the same turn of the loop, and they go out together as ONE
        `ts.write_batch` (`_uncork`), as TiKV's client coalesces the concurrent requests of its
        callers into one batch-commands message. Nothing waits for company: the batch leaves
        at the end of the turn its first write was issued in, so a lone writer's op goes out
        alone, as `ts.write`, one loop turn later. Each write keeps its own seq and its own
        result, so it is one op of a history exactly as before; only the RPC, the frame and the
        leader's work per request are paid once per batch (docs/decisions/coalesced-writes.md)."""
        key = (t.tablet_id, bind)
        cork = sessions.corked.get(key)
        if cork is None or len(cork[0]) == MAX_BATCH_OPS:
            cork = sessions.corked[key] = ([], [])
            # a task's first step runs after the callbacks already due this turn: the callers
            # woken with this one (by one batch's answer) join before it sends
            task = asyncio.ensure_future(self._uncork(key, cork, table, t, bind, sessions,
                                                      deadline))
            self._uncorking.add(task)
            task.add_done_callback(self._uncorking.discard)
        fut = asyncio.get_running_loop().create_future()
        cork[0].append(op)
        cork[1].append(fut)
        return fut

    async def _uncork(self, key: tuple, cork: tuple[list, list], table: str, t: TabletLocation,
                      bind: tuple[str, int | None] | None, sessions: Sessions,
                      deadline: float) -> None:
        """Send one turn's writes (`_corked`) and answer each caller's future: its RowResult,
        or the OpUnknown / OpFailed that op would raise on its own."""
        if sessions.corked.get(key) is cork:
            del sessions.corked[key]
        ops, futures = cork
        sessions.sent[len(ops)] += 1
        outcomes: list = []
        try:
            if len(ops) == 1:
                outcomes = [await self._write(table, t, ops[0], bind, sessions, deadline)]
            else:
                probe("client.batch.coalesced_sent")
                try:
                    answered = await self.write_batch(table, t, ops, deadline, bind, sessions)
                    outcomes = answered.rows(ops)
                except TooLarge:  # nothing applied; each alone may still fit
                    probe("client.batch.split_after_too_large")
                    outcomes = await asyncio.gather(
                        *(self._write(table, t, op, bind, sessions, deadline) for op in ops),
                        return_exceptions=True)
        except Exception as e:  # OpUnknown, OpFailed: the batch's, so each op's
            outcomes = [e] * len(ops)
        finally:
            if outcomes and len(outcomes) != len(ops):  # never leave a caller waiting
                probe("client.uncork.result_count_mismatch")
                outcomes = [OpUnknown(f"{len(outcomes)} results came back for {len(ops)} "
                                      "writes")] * len(ops)
            # no outcomes: this task was cancelled, and so are the writes it carried
            answer(futures, outcomes or [None] * len(futures))

    async def _write(self, table: str, t: TabletLocation, op: RowOp,
                     bind: tuple[str, int | None] | None, sessions: Sessions,
                     deadline: float) -> RowResult:
        """One write alone, as `ts.write`, in its handle's session for the tablet."""
        for _ in range(3):  # a session evicted before our first attempt: reopen and retry
            s = (sessions.by_tablet.get(t.tablet_id)
                 or await self._session(sessions, table, t, deadline, bind))
            seq = s.begin()
            req = Write(t.tablet_id, op, s.id, seq, s.acked_below(), self._propagated(sessions),
                        sessions.external_consistency or self.external_consistency)
            try:
                reply, uncertain, peer = await self._to_leader(table, t, "ts.write", req,
                                                               OpResult, True, deadline, bind)
            finally:
                s.end(seq)
            res = reply.result
            self._observe(sessions, [res])
            if res.ok or res.error not in (Rejection.NO_SESSION, Rejection.STALE_SEQ):
                return RowResult(res, peer, Sent(op, t.tablet_id, s.id, seq, seq, 1, reply.seq))
            probe("client.write.session_lost")
            sessions.by_tablet.pop(t.tablet_id, None)
            if uncertain:
                probe("client.write.session_lost_unknown")
                raise OpUnknown(f"session lost after an uncertain attempt: {res.detail}")
            # no attempt before this one can have arrived, so the op was not applied: a seq
            # refused as stale (the session's kept results moved past it while it waited)
            # goes again in a new session, as one whose session was evicted does
            probe("client.write.session_reopened")
        raise OpFailed("could not keep a session open")

    async def write_batch(self, table: str, t: TabletLocation, ops: list[RowOp],
                          deadline: float, bind: tuple[str, int | None] | None = None,
                          sessions: Sessions | None = None,
                          external_consistency: str | None = None) -> Answered:
        """Row ops of one tablet as ONE `ts.write_batch` (one Raft entry), retried unchanged
        (same session, same seqs: exactly-once) through leader changes until `deadline`.

        Answers one item per op: its Result (ok or a row error such as CAS_MISMATCH), or
        OpUnknown where the tablet forgot whether it applied (a session evicted or results
        forgotten after an uncertain attempt); the replica that answered; the session and
        seqs the batch went as, and the seq the answer echoed (Answered.rows). Raises OpUnknown
        (the whole batch may have applied) or OpFailed (it certainly did not) when no replica
        answered by the deadline, as `op` does for one op. `external_consistency`: a session's
        own mode; None, the sessions' (Sessions.external_consistency), else the client's."""
        sessions = sessions or self._sessions
        mode = external_consistency or sessions.external_consistency or self.external_consistency
        if faults.FAULTS.new_seqs:
            return await self._batch_with_new_seqs(table, t, ops, deadline, bind, sessions, mode)
        for _ in range(3):  # a session evicted before our first attempt: reopen and retry
            s = await self._session(sessions, table, t, deadline, bind)
            first = s.begin(len(ops))
            try:
                req = WriteBatch(t.tablet_id, ops, s.id, first, s.acked_below(),
                                 self._propagated(sessions), mode)
                res, uncertain, peer = await self._to_leader(table, t, "ts.write_batch", req,
                                                             BatchResult, True, deadline, bind)
            finally:
                s.end(first)
            results = res.results
            self._observe(sessions, results)
            if all_ok(results):  # the usual answer, checked without a loop in Python
                return Answered(results, peer, t.tablet_id, s.id, first, res.seq)
            lost = [not r.ok and r.error in (Rejection.NO_SESSION, Rejection.STALE_SEQ)
                    for r in results]
            if not any(lost):
                return Answered(results, peer, t.tablet_id, s.id, first, res.seq)
            sessions.by_tablet.pop(t.tablet_id, None)
            if uncertain or not all(lost):  # else none applied: all go again (as in _write)
                probe("client.write_batch.lost_session_unknown")
                return Answered([OpUnknown(f"session lost after an uncertain attempt: {r.detail}")
                                 if gone else r for r, gone in zip(results, lost, strict=True)],
                                peer, t.tablet_id, s.id, first, res.seq)
            probe("client.write_batch.session_reopened")
        raise OpFailed("could not keep a session open")

    async def _batch_with_new_seqs(self, table: str, t: TabletLocation, ops: list[RowOp],
                                   deadline: float, bind: tuple[str, int | None] | None,
                                   sessions: Sessions, mode: str) -> Answered:
        """The `new-seqs` fault (node.client.faults), a deliberate bug: a retry loop of its own
        in which every attempt of the batch, to each replica in turn, is a new request with new
        seqs, so a retry after a lost answer applies the batch again."""
        last: Exception | str = "no attempt"
        backoff = _Backoff(self.rng)
        while (remaining := deadline - self._now()) > 0:
            for peer in self._replica_order(self._latest(table, t), bind):
                s = await self._session(sessions, table, t, deadline, bind)
                first = s.begin(len(ops))
                req = WriteBatch(t.tablet_id, ops, s.id, first, s.acked_below(),
                                 self._propagated(sessions), mode)
                try:
                    res = await self.rpc.call(peer.addr, "ts.write_batch", req, BatchResult,
                                              to_uuid=peer.uuid,
                                              timeout=min(self.attempt_timeout, remaining))
                    self._observe(sessions, res.results)
                    return Answered(res.results, peer, t.tablet_id, s.id, first, res.seq)
                except RpcError as e:
                    last = e
                finally:
                    s.end(first)
            await backoff.wait(deadline)
        raise OpUnknown(f"outcome unknown: {last}")

    def new_session(self, table: str, options: SessionOptions | None = None,
                    bind: str | None = None) -> Session:
        """A batching session on `table` (see node.client.session)."""
        return Session(self, table, options or SessionOptions(), parse_bind(bind))


def _request(t: TabletLocation, op: Op) -> tuple[str, Read | Write, bool]:
    """(method, request, mutating) that carries `op`, outside any session, to tablet `t`."""
    if is_read_only(op):
        return "ts.read", Read(t.tablet_id, op), False
    return "ts.write", Write(t.tablet_id, op), True


def _on(peer: Peer, bind: tuple[str, int | None] | None) -> bool:
    return bind is not None and peer.host == bind[0] and bind[1] in (None, peer.port)


class Table:
    """One table's key-value operations; implements workloads.base.KVClient.

    `node` is the host name of the replica that answered this handle's last op (after any
    hints and moves), or None if none did: what a history's `node` records. `names` maps an
    address ("host:port", or just "host") to its host name. Give each concurrent caller its own
    handle for that to mean anything."""

    def __init__(self, client: TesseraClient, name: str, names: dict | None = None,
                 bind: str | None = None, session: Session | None = None,
                 sessions: Sessions | None = None):
        if session is not None and session.table != name:
            raise ValueError(f"a session on {session.table} cannot write to {name}")
        self.client, self.name = client, name
        self.session = session
        self.names = names or {}
        self.bind = parse_bind(bind)
        self.sessions = sessions if sessions is not None else Sessions()
        self.node: str | None = None
        self._nodes: dict[Peer, str] = {}  # what `node` says of a replica, made once each
        # The hybrid timestamp of this handle's last op if it was an ok write, else None.
        self.hybrid_time: int | None = None
        # What tied this handle's last write to its request (Sent.evidence), else None: a
        # history records it on the op's completion (Op.sent).
        self.sent: dict | None = None

    def new_session(self, options: SessionOptions | None = None) -> Session:
        """A batching session on this table, bound as this handle is."""
        return Session(self.client, self.name, options or SessionOptions(), self.bind)

    async def _op(self, key: str, op: Op) -> Result:
        """One op and its own Result. A write of a handle with a batching session goes through
        the session, and comes back with this op's own result whoever shared its batch; reads
        are never buffered (Kudu's sessions carry writes only).

        On a MANUAL_FLUSH session nothing is sent until someone flushes, and this caller waits
        for its result, so it flushes itself: apply, flush, then await the op's future. Before
        flushing it yields one turn of the loop, so the session's other callers woken in the
        same turn apply theirs first and one flush carries them all; without that each flush
        held its caller's op alone (apply does not yield when the tablet's location is
        cached), and as `flush` waits for every batch in flight, one caller's flush could be
        kept waiting for the whole run by callers that cut new batches before it looked again.
        An apply refused with BufferFull (the others filled the tablet's buffer) flushes and
        applies again; one refused on an empty buffer (the op alone exceeds the buffer space)
        fails, never sent. A caller that gives up (a timeout) cancels only its wait on the flush,
        never the batches, which carry other callers' ops (Session.flush); its own op, if not
        yet sent, is dropped (its future cancelled), as a background session drops it."""
        self.node = self.hybrid_time = self.sent = None
        if not is_read_only(op) and type(op) is not Txn:  # `txn` keeps its own before it waits
            # taken as the caller's values are now, before the first wait (a location lookup,
            # a connection, a batch's buffer or a retry): what the caller changes after is not
            # what this op sends
            op = kept(op)
        if self.session is not None and not is_read_only(op):
            mode = self.session.options.mode
            if mode == FlushMode.MANUAL_FLUSH:
                row = await self._flushed(key, op)
            else:
                row = await (await self.session.apply(key, op))
        else:
            row = await self.client.op(self.name, key, op, self.bind, self.sessions)
        res, peer, sent = row
        if sent is not None:
            self.sent = sent.evidence()
            if sent.wrong(op):
                probe("client.wrong_reply")
                raise WrongReply({"sent": self.sent, "result": msgspec.to_builtins(res),
                                  "answers": msgspec.to_builtins(sent.op)})
        node = self._nodes.get(peer)
        if node is None:
            hostport = f"{peer.host}:{peer.port}"
            node = self._nodes[peer] = (self.names.get(hostport) or self.names.get(peer.host)
                                        or hostport)
        self.node = node
        self.hybrid_time = res.timestamp if res.ok and res.timestamp else None
        return res

    async def _flushed(self, key: str, op: Op) -> RowResult:
        """`op` through this handle's MANUAL_FLUSH session, flushed by this caller (`_op`)."""
        session = self.session
        while True:
            try:
                future = await session.apply(key, op)
                break
            except BufferFull as e:
                if not session.buffered:
                    probe("client.manual_flush.op_exceeds_buffer")
                    raise OpFailed(str(e)) from None
                probe("client.manual_flush.buffer_full_reflush")
                await session.flush()
        try:
            await asyncio.sleep(0)  # the callers woken in this turn apply theirs first
            await session.flush()
            return await future
        except asyncio.CancelledError:
            probe("client.manual_flush.caller_cancelled")
            future.cancel()  # not sent yet: dropped from its batch, never applied
            raise

    @staticmethod
    def _ok(res: Result) -> Any:
        if not res.ok:
            raise OpFailed(f"{res.error}: {res.detail}")
        return res.value

    async def read(self, key: str) -> Any:
        return self._ok(await self._op(key, ReadOp(key)))

    async def write(self, key: str, value: Any) -> int:
        """Returns the write's hybrid timestamp."""
        self._ok(await self._op(key, WriteOp(key, value)))
        return self.hybrid_time or 0

    async def cas(self, key: str, expected: Any, new: Any) -> bool:
        res = await self._op(key, Cas(key, expected, new))
        if res.ok:
            return True
        if res.error == Rejection.CAS_MISMATCH:
            return False
        raise OpFailed(f"{res.error}: {res.detail}")

    async def append(self, key: str, element: Any) -> int:
        """Returns the append's hybrid timestamp."""
        self._ok(await self._op(key, Append(key, element)))
        return self.hybrid_time or 0

    async def txn(self, ops: list[list]) -> list[list]:
        """Micro-ops [f, key, value] on keys that must share one tablet."""
        if not ops:
            return []
        self.node = self.hybrid_time = None
        txn = kept(Txn([MicroOp(*m) for m in ops]))  # the steps as they are now (`_op`)
        locs = await self.client.locations(self.name)
        if len(locs.tablets) != 1:
            first = await self.client._tablet_for(self.name, txn.ops[0].key)
            for step in txn.ops:
                if not first.partition.contains(step.key):
                    raise OpFailed(f"transaction keys span tablets ({step.key!r}); "
                                   "use a single-tablet table for transactions")
        done = self._ok(await self._op(txn.ops[0].key, txn))
        return [list(m) for m in done]
