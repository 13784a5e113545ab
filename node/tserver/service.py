"""The RPC services of a server's tablets, as Kudu splits them: ConsensusService (Raft messages
and leader step-down, which masters serve too, for their catalog) and TabletService (writes,
reads, creation, deletion and membership; tablet servers only). Tablet copy has its own
(node.tserver.copy_service). They translate between the wire and the TabletManager; the state
and its rules live there."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable

from node.consensus import (
    ChangeOp,
    ConfigChange,
    Member,
    MemberType,
    ProposalError,
    RaftConfig,
    SteppingDown,
)
from node.errors import ReplicaError
from node.probes import probe
from node.protocol import (
    COMMIT_WAIT,
    Ack,
    BatchResult,
    ChangeConfig,
    ChecksumReport,
    ChecksumScan,
    ConfigState,
    Consensus,
    ConsensusReply,
    CreateTablet,
    DeleteTablet,
    Empty,
    LeaderStepDown,
    OpResult,
    Read,
    ServerStatus,
    TabletChecksum,
    UnsafeChangeConfig,
    Write,
    WriteBatch,
)
from node.replica.replica import Replica, config_text
from node.rpc import ErrorCode, RpcClient, RpcError, RpcServer
from node.rpc.server import Reply
from node.server.daemon import Outbox, PeerBook
from node.server.replica_errors import proposal_error, replica_error
from node.tablet.checksum import row_hashes, table_checksum
from node.tablet.ops import Batch, Group, Op, Result, is_read_only
from node.tserver.tablet_manager import TabletManager, TabletState

# The furthest ahead of this server's clock a propagated timestamp may be (`_submit`): far above
# any skew a clock nemesis makes (at most about two minutes), far below a forged one.
MAX_PROPAGATED_AHEAD_US = 3600 * 1_000_000

log = logging.getLogger(__name__)


def _answer(answer: type, reply: Reply, seq: int, result: Result | list[Result] | None,
            error: BaseException | None) -> None:
    """A replica's Done as the RPC answer: `answer(result, seq)` (OpResult, BatchResult), the
    request's seq echoed."""
    if error is None:
        reply(answer(result, seq), None)
    else:
        reply(None, replica_error(error) if isinstance(error, ReplicaError) else error)


async def _awaited(work: Callable[[], Awaitable], answer: type, seq: int = 0):
    """The awaited path of a direct handler (a leader not ready yet): `answer(await work(),
    seq)`. `work` is called here, not by the handler: a request whose task is cancelled before
    it starts (its connection closed, its server stopped in the same turn) then leaves no
    replica coroutine behind that nothing awaits (RpcServer closes this one)."""
    try:
        return answer(await work(), seq)
    except ReplicaError as e:
        raise replica_error(e) from None


class ConsensusService:
    def __init__(self, tablets: TabletManager, book: PeerBook):
        self.tablets, self.book = tablets, book
        # Set by the server once it knows its own address (ServerBase.start), before any
        # replica runs: until then every request takes the awaited path.
        self.outbox: Outbox | None = None
        self._tasks: set[asyncio.Task] = set()  # deliver's awaited way
        self._closed = False
        self._server: RpcServer | None = None  # where deliver's errors are reported

    def register(self, s: RpcServer) -> None:
        self._server = s
        s.register_direct("consensus", Consensus, self.on_consensus)
        s.register("consensus.leader_step_down", LeaderStepDown, self.on_leader_step_down)

    def on_consensus(self, req: Consensus, reply: Reply) -> Awaitable[ConsensusReply] | None:
        """Direct: a running replica takes the messages from this turn of the loop, and its
        answer to the sender goes back in this RPC's reply (Outbox.hold), or the reply goes
        empty after HOLD_S. Unknown peers (learning them writes the peer book) and replicas
        that do not run take the awaited path."""
        e = self.tablets.get(req.tablet_id)
        if e is None or e.state != TabletState.RUNNING or not self.book.knows(req.peers):
            return self._consensus(req)
        messages, outbox = req.messages, self.outbox
        if not messages or outbox is None:
            e.replica.step(messages)
            reply(ConsensusReply(), None)
            return None
        sender = messages[0].from_uuid  # one replica's batch: one sender
        outbox.hold(req.tablet_id, sender, reply)
        try:
            e.replica.step(messages)
        except BaseException:
            outbox.forget_held(req.tablet_id, sender)  # the error is the reply now
            raise
        outbox.held(req.tablet_id, sender)
        return None

    def deliver(self, tablet_id: str, messages: list) -> None:
        """Messages a peer's consensus reply carried (the Outbox's `deliver`), taken as a
        request's would be: by our replica if it runs, else the awaited way, where a
        tombstone still votes (a candidate's vote request rides in the reply to the
        tombstone's last vote). A refusal from there has no one to go to; the peer hears it
        with its next RPC."""
        e = self.tablets.get(tablet_id)
        if e is not None and e.state == TabletState.RUNNING:
            e.replica.step(messages)
            return
        if self._closed:  # the server is stopping: a reply still came before its client closed
            return
        probe("tserver.consensus.reply_for_a_replica_not_running")
        task = asyncio.create_task(self._consensus(Consensus(tablet_id, messages)))
        self._tasks.add(task)
        task.add_done_callback(self._delivered)

    def _delivered(self, task: asyncio.Task) -> None:
        """The awaited way for a reply's messages ended. An error there has no RPC to answer:
        it is reported as a handler's would be (RpcServer.handler_failed), not lost."""
        self._tasks.discard(task)
        if task.cancelled() or (e := task.exception()) is None or isinstance(e, RpcError):
            return  # a refusal: the peer hears it with its next RPC
        log.error("messages a consensus reply carried failed", exc_info=e)
        if self._server is not None:
            self._server.handler_failed(e, "consensus (messages a reply carried)")

    async def close(self) -> None:
        """Cancel what `deliver` still has running, and start nothing more (the server is
        stopping)."""
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def on_leader_step_down(self, req: LeaderStepDown) -> Ack:
        """Kudu's LeaderStepDown, a consensus call: on a master it moves the catalog's
        leadership (an operator's way to restart the leader master without an election's wait)."""
        r = self.tablets.serving(req.tablet_id)
        try:
            await r.step_down(req.new_leader)
        except (ReplicaError, ProposalError) as e:
            raise proposal_error(e) from None
        return Ack(True)

    async def _consensus(self, req: Consensus) -> ConsensusReply:
        if req.peers:
            await self.book.learn(req.peers)
        tid = req.tablet_id
        e = self.tablets.get(tid)
        state = e.state if e is not None else None
        if state == TabletState.RUNNING:
            e.replica.step(req.messages)
            return ConsensusReply()
        # It takes no part; the leader may copy the tablet here. A tombstone still votes.
        if state in (TabletState.COPYING, TabletState.TOMBSTONED):
            others = await self.tablets.vote_as_tombstone(tid, req.messages)
            if not others:
                return ConsensusReply()  # only votes, all answered
        probe("tserver.consensus.refused_failed") if state == TabletState.FAILED else probe(
            "tserver.consensus.refused_not_running")
        return ConsensusReply(False, state.value.lower() if state is not None else "missing")


class TabletService:
    def __init__(self, tablets: TabletManager, book: PeerBook, rpc_client: RpcClient,
                 status: Callable[[], ServerStatus]):
        self.tablets, self.book, self.rpc_client, self._status = tablets, book, rpc_client, status

    def register(self, s: RpcServer) -> None:
        s.register("ts.create_tablet", CreateTablet, self.on_create_tablet)
        s.register("ts.delete_tablet", DeleteTablet, self.on_delete_tablet)
        s.register_direct("ts.write", Write, self.on_write)
        s.register_direct("ts.write_batch", WriteBatch, self.on_write_batch)
        s.register_direct("ts.read", Read, self.on_read)
        s.register("ts.status", Empty, self.on_status)
        s.register("ts.checksum", ChecksumScan, self.on_checksum)
        s.register("ts.change_config", ChangeConfig, self.on_change_config)
        s.register("ts.unsafe_change_config", UnsafeChangeConfig, self.on_unsafe_change_config)

    # -- creation and deletion ------------------------------------------------------------------
    async def on_create_tablet(self, req: CreateTablet) -> Ack:
        if self.tablets.uuid not in {p.uuid for p in req.peers}:
            raise RpcError(ErrorCode.INVALID_ARGUMENT, f"{self.tablets.uuid} is not among the peers")
        await self.book.learn(req.peers)
        config = RaftConfig(0, tuple(Member(p.uuid, MemberType.VOTER) for p in req.peers))
        return Ack(await self.tablets.create(req.tablet_id, req.table_name, req.partition, config))

    async def on_delete_tablet(self, req: DeleteTablet) -> Ack:
        return Ack(await self.tablets.delete(req.tablet_id, req.cas_config_index))

    # -- writes and reads ---------------------------------------------------------------------
    def on_write(self, req: Write, reply: Reply) -> Awaitable[OpResult] | None:
        """Direct (RpcServer.register_direct): a leader ready for writes proposes at once and
        answers from the driver. Reads, and a leader not ready yet, take the awaited path."""
        r = self.tablets.serving(req.tablet_id)
        if isinstance(req.op, Batch):  # one result per op does not fit an OpResult
            raise RpcError(ErrorCode.INVALID_ARGUMENT, "batches go through ts.write_batch")
        if isinstance(req.op, Group):  # many sessions' ops: only a leader builds one
            raise RpcError(ErrorCode.INVALID_ARGUMENT, "a group of sessions' ops is the "
                           "leader's to build; send each op with its own session")
        if is_read_only(req.op):
            return self.on_read(Read(req.tablet_id, req.op), reply)
        return self._submit(r, req, req.op, OpResult, reply)

    def on_write_batch(self, req: WriteBatch, reply: Reply) -> Awaitable[BatchResult] | None:
        """One WriteRequest: every op replicated in one entry, each with its own result.
        Direct, as ts.write."""
        r = self.tablets.serving(req.tablet_id)
        try:
            batch = r.batch(req.ops)
        except ValueError as e:  # empty, or more ops than the session bound keeps: not proposed
            probe("tserver.write_batch.refused_invalid")
            raise RpcError(ErrorCode.INVALID_ARGUMENT, str(e)) from None
        return self._submit(r, req, batch, BatchResult, reply)

    def _submit(self, r: Replica, req: Write | WriteBatch, op: Op, answer: type,
                reply: Reply) -> Awaitable | None:
        """Propose `op` for `req`'s session and answer `answer(result)`: from the driver, or
        once the leader is ready (the awaited path)."""
        owner = _owner(reply)
        propagated, wait = req.propagated_timestamp, req.external_consistency == COMMIT_WAIT
        if propagated and r.clock.ahead_us(propagated) > MAX_PROPAGATED_AHEAD_US:
            # A client cannot have observed a timestamp an hour ahead of this clock from a
            # cluster whose clocks are anywhere near each other: witnessing it would push every
            # later timestamp of this server out of reach of the others' clocks.
            probe("tserver.write.propagated_too_far_ahead")
            raise RpcError(ErrorCode.INVALID_ARGUMENT,
                           f"propagated timestamp {propagated} is more than "
                           f"{MAX_PROPAGATED_AHEAD_US // 1_000_000} s ahead of this server's clock")
        if not r.leader_ready:
            probe("tserver.write.not_ready_awaited")
            return _awaited(functools.partial(
                r.write, op, session=req.session, seq=req.seq, acked_below=req.acked_below,
                owner=owner, propagated=propagated, commit_wait=wait), answer, req.seq)
        try:
            r.submit(op, req.session, req.seq, req.acked_below,
                     functools.partial(_answer, answer, reply, req.seq), owner, propagated, wait)
        except ReplicaError as e:
            raise replica_error(e) from None
        return None

    def on_read(self, req: Read, reply: Reply) -> Awaitable[OpResult] | None:
        """Direct, as ts.write: a ready leader answers from its lease or from the driver once
        the read's ReadIndex round confirmed it."""
        r = self.tablets.serving(req.tablet_id)
        if not is_read_only(req.op):
            raise RpcError(ErrorCode.INVALID_ARGUMENT, "ts.read takes read-only ops; use ts.write")
        if not r.leader_ready:
            return _awaited(functools.partial(r.read, req.op), OpResult)
        try:
            r.reads.submit(req.op, functools.partial(_answer, OpResult, reply, 0))
        except ReplicaError as e:
            raise replica_error(e) from None
        return None

    # -- membership and leadership (Kudu's Raft configuration-change design) ---------------------
    async def on_change_config(self, req: ChangeConfig) -> ConfigState:
        r = self.tablets.serving(req.tablet_id)
        if req.op == "add":
            await self.book.learn([req.peer])
            change = ConfigChange(ChangeOp.ADD_NON_VOTER, req.peer.uuid, promote=True)
        elif req.op == "remove":
            change = ConfigChange(ChangeOp.REMOVE, req.peer.uuid)
        else:
            raise RpcError(ErrorCode.INVALID_ARGUMENT, f"op must be add or remove, not {req.op!r}")
        try:
            config = await r.change_config(change, req.cas_config_index)
        except SteppingDown as e:
            probe("tserver.change_config.leader_removed")
            raise RpcError(ErrorCode.NOT_LEADER, f"leader removed: handed over to {e}",
                           detail=None) from None
        except (ReplicaError, ProposalError) as e:
            raise proposal_error(e) from None
        self.tablets.log(req.tablet_id).info("config change %s %s done: %s", req.op,
                                             req.peer.uuid, config_text(config))
        return ConfigState(config.opid_index,
                           [[m.uuid, m.member_type.name] for m in config.members])

    async def on_unsafe_change_config(self, req: UnsafeChangeConfig) -> ConfigState:
        r = self.tablets.serving(req.tablet_id)
        try:
            index = await r.unsafe_change_config(tuple(req.voters))
        except (ReplicaError, ProposalError) as e:
            raise proposal_error(e) from None
        return ConfigState(index, [[u, "VOTER"] for u in req.voters])

    # -- status -----------------------------------------------------------------------------------
    async def on_status(self, _req: Empty) -> ServerStatus:
        return self._status()

    async def on_checksum(self, req: ChecksumScan) -> ChecksumReport:
        """Each replica's rows checksummed at its applied index. The rows are copied between two
        applies (values are never mutated in place, so a shallow copy is exact) and hashed in a
        thread, so a large tablet does not stall the event loop."""
        out = []
        for rep in self._status().tablets:
            if req.tablet_id and rep.tablet_id != req.tablet_id:
                continue
            e = self.tablets.get(rep.tablet_id)
            if rep.state != "RUNNING" or e is None or e.replica is None:
                out.append(TabletChecksum(rep.tablet_id, rep.state, error=rep.error))
                continue
            r = e.replica
            s, data = r.status(), dict(r.state.data)
            crc = await asyncio.to_thread(table_checksum, data)
            keys = await asyncio.to_thread(row_hashes, data) if req.with_keys else None
            out.append(TabletChecksum(rep.tablet_id, rep.state, s["role"], s["term"], s["commit"],
                                      s["applied"], crc, len(data),
                                      [m[0] for m in s["committed_config"]], keys,
                                      voters=[m[0] for m in s["committed_config"]
                                              if m[1] == "VOTER"],
                                      active_voters=[m[0] for m in s["config"] if m[1] == "VOTER"],
                                      pending_by=s["config_appended_by"] or "",
                                      last_op=[s["last_term"], s["last_index"]]))
        return ChecksumReport(self.tablets.uuid, out)


def _owner(reply: Reply) -> str:
    """Whose session a write may use: the caller's authenticated identity (its certificate's
    common name), or "" for an unauthenticated one. Taken from the connection, never from the
    request, so a client cannot name another's (ops.Command.owner)."""
    conn = getattr(reply, "conn", None)  # a plain callback: an in-process caller
    identity = conn.admission.identity if conn is not None else None
    return identity.name if identity is not None and identity.authenticated else ""
