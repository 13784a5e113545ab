"""Tessera's clients for a run: the test table made writable before the clock starts, and the
workload's clients over one TesseraClient. The chaos runs (TesseraDB.open_clients) and the
whole-stack simulator (harness.sim.stack) both open their clients here.

The workloads know no system: they take a client's outcome from workloads.outcomes, and what a
batching session and a key's tablet are from the system (`session_options`, `hash_placement`).
This module is where Tessera's client meets them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable
from typing import Any

from node import errors
from node.client import new_ddl_token
from node.rpc import ErrorCode, RpcError
from node.tablet.superblock import HashBucket
from workloads import outcomes


async def _outcome(call: Awaitable[Any]) -> Any:
    """The engine's outcome errors as the workloads' own, message and all (an error with no
    message keeps its class name, as a history recorded it); any other error passes through,
    and leaves the op's outcome unknown."""
    try:
        return await call
    except errors.WrongReply as e:
        raise outcomes.WrongReply(e.reply) from e
    except errors.OpFailed as e:
        raise outcomes.OpFailed(str(e) or type(e).__name__) from e
    except errors.OpUnknown as e:
        raise outcomes.OpUnknown(str(e) or type(e).__name__) from e


class TableClient:
    """A node.client.Table as a workload's KVClient (workloads.base). What the runner reads of
    a handle after its op (`node`, `hybrid_time`, `sent`) is the table's.

    With `buffers` (Workload.value_buffers) the worker is an application that builds each
    string value in a buffer of its own and reuses it once the client has the op: a write's
    or a cas's values go as bytearrays, which are overwritten (`reused`) as soon as the op's
    first step has run, and reads turn the bytes back into the string the workload wrote. A
    client that sent the buffer as it was later, not as it was when handed the op, writes
    bytes no worker wrote, and the checker sees a value never written.

    With `renewals` (Workload.session_ops) each write first counts toward its session's
    renewal, and each op tells the renewals which TesseraClient it runs on while it runs, so
    a client retired with its session is closed only once no op runs on it."""

    __slots__ = ("buffers", "key", "renewals", "table")

    def __init__(self, table, buffers: bool = False, renewals: Renewals | None = None,
                 key=None) -> None:
        self.table, self.buffers = table, buffers
        self.renewals, self.key = renewals, key  # the session key its renewals count

    @property
    def node(self) -> str | None:
        return self.table.node

    @property
    def hybrid_time(self) -> int | None:
        return self.table.hybrid_time

    @property
    def sent(self) -> dict | None:
        return self.table.sent

    async def _run(self, call, write: bool) -> Any:
        """`call(table)` on this worker's handle, its outcome as the workloads' (`_outcome`).
        A write first counts toward its session's renewal (Renewals.tick), which may move the
        handle to a new session, and a new client, before the op takes them."""
        renewals = self.renewals
        if renewals is None:
            return await _outcome(call(self.table))
        if write:
            renewals.tick(self.key)
        table = self.table
        with renewals.running_on(table.client):
            return await _outcome(call(table))

    async def read(self, key: str) -> Any:
        value = await self._run(lambda t: t.read(key), False)
        if self.buffers and isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return value

    async def write(self, key: str, value: Any) -> Any:
        if self.buffers and isinstance(value, str):
            buf = bytearray(value.encode())
            return await self._run(lambda t: reused(t.write(key, buf), buf), True)
        return await self._run(lambda t: t.write(key, value), True)

    async def cas(self, key: str, expected: Any, new: Any) -> bool:
        if self.buffers and isinstance(new, str):
            old = bytearray(expected.encode()) if isinstance(expected, str) else expected
            buf = bytearray(new.encode())
            return await self._run(lambda t: reused(t.cas(key, old, buf), buf, old), True)
        return await self._run(lambda t: t.cas(key, expected, new), True)

    async def append(self, key: str, element: Any) -> Any:
        return await self._run(lambda t: t.append(key, element), True)

    async def txn(self, ops: list[list]) -> list[list]:
        return await self._run(lambda t: t.txn(ops), any(op[0] != "r" for op in ops))


class Renewals:
    """The shared sessions' renewal (Workload.session_ops): after every `every` writes through
    a shared session, the writer about to make the next one closes it and opens a new one for
    every handle that shares it. The other writers may be in the middle of an apply on the old
    one (looking up their tablet, waiting for a buffer), as a program's callers are when it
    closes a session per unit of work: the session must refuse what it can no longer send,
    never buffer it unsent (node.probes.ALARMS). The closes run in the background, each until
    its flush ends, and `close` waits for them.

    With `new_client` (Workload.fresh_clients) each new session opens on a TesseraClient of its
    own, made then, as a program run once per unit of work opens one: it knows no table's
    locations yet, so the first applies on the new session wait for a lookup, and a renewal
    can close the session under them. A retired client is closed once its session's close has
    ended and no op runs on it (`running_on`)."""

    def __init__(self, every: int, sessions: dict, open_session, new_client=None) -> None:
        self.every, self.sessions, self.open_session = every, sessions, open_session
        self.new_client = new_client
        self.handles: dict = {}  # key -> the Table handles sharing its session
        self.writes: Counter = Counter()
        self.retired: list = []  # the sessions closed so far, for the run's batch counts
        self.closing: set = set()
        self.renewed = 0
        self.clients: list = []  # the clients this made, each closed once done with
        self.current: dict = {}  # key -> the client made for its session now (none: the run's)
        self.using: Counter = Counter()  # client -> ops running on it
        self.done: set = set()  # made clients whose session has been closed
        self.closed: set = set()  # made clients closed (or closing)

    def share(self, key, handle):
        self.handles.setdefault(key, []).append(handle)
        return handle

    def tick(self, key) -> None:
        self.writes[key] += 1
        if self.writes[key] % self.every:
            return
        old, old_client = self.sessions[key], self.current.get(key)
        fresh = self.new_client() if self.new_client is not None else None
        if fresh is not None:
            self.clients.append(fresh)
            self.current[key] = fresh
        self.sessions[key] = new = self.open_session(key, fresh)
        for handle in self.handles[key]:
            handle.session = new
            if fresh is not None:
                handle.client = fresh
        self.retired.append(old)
        self.renewed += 1
        self._background(self._retire(old, old_client))

    @contextlib.contextmanager
    def running_on(self, client):
        """Around one op on `client`: it is not closed while the op runs."""
        self.using[client] += 1
        try:
            yield
        finally:
            self.using[client] -= 1
            if not self.using[client]:
                del self.using[client]
                self._close_if_done(client)

    async def _retire(self, session, client) -> None:
        """Close `session`; then `client`, made here for it (None: the run's own), once no op
        runs on it."""
        await session.close()
        if client is not None:
            self.done.add(client)
            self._close_if_done(client)

    def _close_if_done(self, client) -> None:
        if client in self.done and client not in self.using:
            self.done.discard(client)
            self.closed.add(client)
            self._background(client.close())

    def _background(self, step) -> None:
        task = asyncio.ensure_future(step)
        self.closing.add(task)
        task.add_done_callback(self.closing.discard)

    async def close(self) -> None:
        """Once the current sessions are closed: wait for the closes under way, then close
        the clients made here that are still open (the current sessions')."""
        while self.closing:
            await asyncio.gather(*list(self.closing), return_exceptions=True)
        await asyncio.gather(*(c.close() for c in self.clients if c not in self.closed),
                             return_exceptions=True)


async def reused(call: Awaitable[Any], *buffers: Any) -> Any:
    """Run `call` (an op of the Table handle, whose first step takes the op: node.client's
    `Table._op` keeps a copy before it first waits) and, once that step has run, overwrite
    each bytearray of `buffers` with 0xFF bytes, as an application reusing its buffer does;
    then its outcome. Cancelled, the call is cancelled too."""
    task = asyncio.ensure_future(call)
    try:
        await asyncio.sleep(0)  # the task's first step runs before this resumes
        for buf in buffers:
            if isinstance(buf, bytearray):
                buf[:] = b"\xff" * len(buf)
        return await task
    except asyncio.CancelledError:
        task.cancel()
        raise


# The workers' external consistency when they differ, as a table's users' clients may: even
# threads write client-propagated, odd ones commit-wait, so one leader's group commits writes
# of both modes together (probe replica.write.group_modes_mixed).
MIXED = "mixed"


def client_modes() -> tuple[str, ...]:
    """What a run's --external-consistency may name: Kudu's two modes, or MIXED."""
    from node.protocol import EXTERNAL_CONSISTENCY

    return (*EXTERNAL_CONSISTENCY, MIXED)


def thread_mode(workload, thread: int) -> str | None:
    """The wire mode of `thread`'s writes when the workload mixes them, else None (the
    TesseraClient's own)."""
    if workload.external_consistency != MIXED:
        return None
    return mixed_thread_mode(thread)


def mixed_thread_mode(thread: int) -> str:
    """The wire mode of worker `thread`'s writes in a MIXED run."""
    from node.protocol import CLIENT_PROPAGATED, COMMIT_WAIT

    return (CLIENT_PROPAGATED, COMMIT_WAIT)[thread % 2]


def client_mode(chosen: str | None) -> str:
    """The TesseraClient's wire mode for a run's --external-consistency (None: the default)."""
    from node.protocol import CLIENT_PROPAGATED, EXTERNAL_CONSISTENCY

    return EXTERNAL_CONSISTENCY.get(chosen or "", CLIENT_PROPAGATED)


def hash_placement(key: str, groups: int) -> int:
    """Which of `groups` tablets of a hash-partitioned table holds `key` (the workloads'
    `Workload.placement`): a transaction must keep its keys in one tablet."""
    return next(b for b in range(groups) if HashBucket(b, groups).contains(key))


def session_options(workload):
    """The session's options for the workload's session modes (MANUAL_FLUSH for
    session-manual, AUTO_FLUSH_SYNC for session-sync), or None when each worker's writes go
    through its handle."""
    from node.client.session import FlushMode, SessionOptions
    from workloads.base import DEFAULT_BATCH, SESSION_MODES

    if workload.writes == "session-sync":
        return SessionOptions(FlushMode.AUTO_FLUSH_SYNC)
    if workload.writes not in SESSION_MODES:
        return None
    mode = (FlushMode.MANUAL_FLUSH if workload.writes == "session-manual"
            else FlushMode.AUTO_FLUSH_BACKGROUND)
    return SessionOptions(mode, max_batch_ops=workload.batch or DEFAULT_BATCH,
                          flush_interval_s=workload.batch_interval_ms / 1000)


def workload_clients(client, table: str, names: dict, binds: list[str] | None, workload,
                     new_client=None):
    """(clients(thread) for harness.runner.run, an async close for after it). Node-bound
    (`binds`): thread t talks to binds[t mod n]; else any replica. How the threads' writes reach
    the client is `workload.writes` (workloads.base.WRITE_MODES): `own`, a handle each; `shared`,
    the threads of one bind share one handle's client sessions, so the writes they issue in one
    loop turn leave as one ts.write_batch, each thread keeping a handle of its own, so each op's
    `node` is still the replica that answered it; `session-background` and `session-manual`,
    the threads of one bind share one batching session (AUTO_FLUSH_BACKGROUND or MANUAL_FLUSH:
    node.client.Table._op flushes after each apply), so their concurrent writes go out
    together; `session-sync`, each thread has a session of its own in AUTO_FLUSH_SYNC (Kudu's
    default flush mode), each apply sent alone. In every mode each op stays one op of the
    history (the runner records it).
    With the MIXED external consistency, sharing is among the threads of one mode."""
    import dataclasses

    from node.client.session import Sessions

    options = session_options(workload)  # the session modes'
    workload.placement = hash_placement
    sessions: dict = {}  # (bind, mode[, thread with session-sync]) -> Session
    shared: dict = {}  # (bind, mode) -> Sessions, with writes=shared

    def open_session(key, on=None):
        bind, mode = key[0], key[1]
        return (on or client).new_session(
            table, dataclasses.replace(options, external_consistency=mode), bind=bind)

    if workload.fresh_clients and new_client is None:
        raise ValueError("fresh_clients opens a client per renewed session: the system's "
                         "deployment gives no way to open one")
    renewals = (Renewals(workload.session_ops, sessions, open_session,
                         new_client if workload.fresh_clients else None)
                if workload.session_ops else None)

    def clients(thread: int):
        key, table_handle = handle(thread)
        return TableClient(table_handle, workload.value_buffers, renewals, key)

    def handle(thread: int):
        """(the session key, or None; the thread's Table handle)."""
        bind = binds[thread % len(binds)] if binds else None
        mode = thread_mode(workload, thread)
        if options is None:
            if workload.writes == "shared":
                mine = shared.setdefault((bind, mode), Sessions(mode))
                return None, client.table(table, names, bind=bind, sessions=mine)
            if mode is None:
                return None, client.table(table, names, bind=bind)
            return None, client.table(table, names, bind=bind, sessions=Sessions(mode))
        key = (bind, mode, thread) if workload.writes == "session-sync" else (bind, mode)
        if key not in sessions:
            sessions[key] = open_session(key)
        mine = client.table(table, names, bind=bind, session=sessions[key])
        return key, (mine if renewals is None else renewals.share(key, mine))

    async def close() -> dict | None:
        """Flush what is still buffered (ops whose callers gave up are dropped, never sent);
        with a batching session mode how many batches the sessions sent and why they were cut
        (with session-sync how many rows they applied ok), with
        `shared` how many requests carried the writes (None with `own`)."""
        await asyncio.gather(*(s.close() for s in sessions.values()), return_exceptions=True)
        every = list(sessions.values())
        if renewals is not None:
            await renewals.close()
            every += renewals.retired
        if shared:
            sent = sum((s.sent for s in shared.values()), Counter())
            requests, writes = sum(sent.values()), sum(n * k for n, k in sent.items())
            return {"coalesced": {
                "handles_sharing": len(shared), "requests": requests, "writes": writes,
                "mean_writes_per_request": round(writes / requests, 2) if requests else 0.0,
                "requests_with_several": sum(k for n, k in sent.items() if n > 1)}}
        if not sessions:
            return None
        if workload.writes == "session-sync":  # nothing batched: what the sessions applied
            return {"mode": workload.writes, "sessions": len(sessions),
                    "rows_ok": sum(s.rows_ok for s in sessions.values())}
        reasons = sum((s.flush_reasons for s in every), Counter())
        batches, ops = sum(reasons.values()), sum(s.ops_cut for s in every)
        return {"mode": workload.writes, "sessions": len(every), "batches": batches, "ops": ops,
                "mean_ops_per_batch": round(ops / batches, 2) if batches else 0.0,
                "cut_by": dict(reasons),
                **({"renewed": renewals.renewed} if renewals is not None else {})}

    return clients, close


async def accept_test_table(client, tablets: int, replication_factor: int,
                            timeout: float = 60.0):
    """Create the table `test` and wait until every tablet has a leader that accepts writes, so
    the clock (and the first fault) starts on a working cluster. Probe keys live outside every
    workload's keys. Returns the table's locations. Event-loop time: the simulator runs it too."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    token = new_ddl_token()  # each try is the same create: a landed one is answered
    while True:
        try:
            await client.create_table("test", num_tablets=tablets,
                                      replication_factor=replication_factor, token=token)
            break
        except Exception as e:
            if isinstance(e, RpcError) and e.code == ErrorCode.ALREADY_EXISTS:
                # another run's table: its rows would enter this run's history
                raise RuntimeError(f"the cluster already has a test table: {e}") from e
            if loop.time() > deadline:
                raise RuntimeError(f"cluster never accepted the test table: {e}") from e
            await asyncio.sleep(1)
    table = client.table("test")
    locs = await client.locations("test", refresh=True)
    probes = {}
    for i in range(10_000):
        key = f"_ready{i}"
        bucket = next(t.tablet_id for t in locs.tablets if t.partition.contains(key))
        probes.setdefault(bucket, key)
        if len(probes) == len(locs.tablets):
            break
    for key in probes.values():
        while True:
            try:
                await table.write(key, 1)
                break
            except Exception as e:
                if loop.time() > deadline:
                    raise RuntimeError(f"test table never became writable: {e}") from e
                await asyncio.sleep(0.5)
    return locs
