"""The tablet server: hosts many tablet replicas, one Raft config each, behind one RPC port.

A replica whose files are corrupt is reported FAILED with the reason (naming the file) and
refuses requests; the server and its other tablets keep serving. Tablet servers heartbeat to
every master (multi-master seed) and learn their peers' addresses from the leader's answer.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from node.consensus import (
    ChangeOp,
    ConfigChange,
    Member,
    MemberType,
    NotLeader,
    ProposalError,
    RaftConfig,
    Role,
    SteppingDown,
    VoteRequest,
    encode_config,
)
from node.daemon import Outbox, PeerBook, load_or_create_instance
from node.disk import REAL, Disk
from node.http import StatusHttp
from node.logfmt import TabletLog, log_failure
from node.protocol import (
    Ack,
    ChangeConfig,
    ChecksumReport,
    ChecksumScan,
    ConfigState,
    Consensus,
    CreateTablet,
    DeleteTablet,
    Empty,
    LeaderStepDown,
    OpResult,
    Peer,
    Read,
    ServerStatus,
    StartTabletCopy,
    TabletChecksum,
    TabletCopyData,
    TabletCopyResult,
    TabletName,
    TabletReport,
    TSHeartbeat,
    TSHeartbeatResponse,
    Write,
)
from node.replica import Replica, ReplicaError, ReplicaOptions, bootstrap_replica, config_text
from node.rpc import ErrorCode, RpcClient, RpcError, RpcServer
from node.tablet.checksum import row_hashes, table_checksum
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.ops import is_read_only
from node.tablet.paths import TabletPaths
from node.tablet.superblock import DataState, OpId, Superblock
from node.tserver.copy import (
    abandon_copy,
    install_copy,
    recover_unfinished_copy,
    tombstone,
    tombstone_vote,
)

log = logging.getLogger(__name__)


@dataclass
class TServerOptions:
    data_dir: Path
    rpc_host: str = "127.0.0.1"
    rpc_port: int = 7050  # Kudu's tablet server RPC port
    http_port: int = 0  # 0: pick a free port (Kudu uses 8050)
    masters: list[tuple[str, int]] = field(default_factory=list)
    heartbeat_interval_ms: int = 1000  # Kudu: heartbeat_interval_ms
    replica: ReplicaOptions = field(default_factory=ReplicaOptions)
    # masters: a tablet server silent this long has failed; its replicas are replaced
    follower_unavailable_considered_failed_sec: float = 300.0  # Kudu's default
    seed: int | None = None  # every random choice of the server and its replicas (simulator)
    disk: Disk = REAL  # where the data dir lives: the simulator passes a SimDisk
    # Source address of outgoing connections (None: the kernel picks). The simulator's network
    # tells hosts apart by it.
    local_host: str | None = None


def replica_error(e: ReplicaError) -> RpcError:
    if e.maybe_applied:
        return RpcError(ErrorCode.REMOTE_ERROR, str(e))
    return RpcError(ErrorCode.NOT_LEADER, str(e), detail=e.leader)


class TabletServer:
    kind = "tserver"
    heartbeats_to_masters = True

    def __init__(self, opts: TServerOptions):
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.data_dir = Path(opts.data_dir)
        self.replicas: dict[str, Replica] = {}
        self.failed: dict[str, tuple[str, str]] = {}  # tablet -> (table, reason)
        self.tombstoned: dict[str, str] = {}  # tablet -> table
        self.tables: dict[str, str] = {}  # tablet -> table
        self._tasks: list[asyncio.Task] = []
        self._lock = asyncio.Lock()  # create/delete/copy of tablets
        self.copying: set[str] = set()  # tablets being copied here
        # (tablet, peer) that refused our Raft -> the state it said its replica is in
        self._copy_wanted: dict[tuple[str, str], str] = {}
        self._copies_sent: set[tuple[str, str]] = set()  # StartTabletCopy calls in flight

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self.uuid = load_or_create_instance(self.data_dir, self.kind, self.rng, self.opts.disk)
        self.book = PeerBook(self.data_dir / "peers", self.opts.disk)
        self.rpc_client = RpcClient(local_host=self.opts.local_host)
        self.server = RpcServer(self.uuid)
        self._register(self.server)
        host, port = await self.server.start(self.opts.rpc_host, self.opts.rpc_port)
        self.me = Peer(self.uuid, self.opts.rpc_host, port)
        await self.book.learn([self.me])
        self.outbox = Outbox(self.rpc_client, self.book, self.me, on_refused=self._on_refused)
        meta_dir = self.data_dir / "tablet-meta"
        names = self.opts.disk.listdir(meta_dir) if self.opts.disk.isdir(meta_dir) else []
        for name in names:
            if not name.startswith("."):
                self._open_existing(name)
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(self))
        self.http = StatusHttp(self.registry, self.status_dict)
        self.http_port = await self.http.start(self.opts.rpc_host, self.opts.http_port)
        if self.heartbeats_to_masters and self.opts.masters:
            self._tasks.append(asyncio.create_task(self._heartbeat_loop()))
        self._tasks.append(asyncio.create_task(self._copy_loop()))
        log.info("%s %s serving on %s:%d (http %d), %d tablets", self.kind, self.uuid, host, port,
                 self.http_port, len(self.replicas))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.stop()
        await asyncio.gather(*(r.stop() for r in self.replicas.values()), return_exceptions=True)
        await self.outbox.close()
        await self.rpc_client.close()
        await self.http.stop()

    def _paths(self, tablet_id: str) -> TabletPaths:
        return TabletPaths(self.data_dir, tablet_id, self.opts.disk)

    def _log(self, tablet_id: str) -> TabletLog:
        return TabletLog(log, tablet_id, self.uuid)

    def _open_existing(self, tablet_id: str) -> None:
        table = "?"
        try:
            sb = Superblock.load(self._paths(tablet_id).superblock, self.opts.disk)
            table = sb.table_name
            if sb.data_state == DataState.COPYING:
                self._log(tablet_id).warning("unfinished tablet copy: tombstoning it")
                recover_unfinished_copy(self._paths(tablet_id), sb)
                sb = Superblock.load(self._paths(tablet_id).superblock, self.opts.disk)
            if sb.data_state == DataState.TOMBSTONED:
                self.tombstoned[tablet_id] = table
                return
            self._start_replica(tablet_id, table)
        except Exception as e:  # corrupt or unreadable: this tablet fails, the server goes on
            self.failed[tablet_id] = (table, log_failure(self._log(tablet_id),
                                                         "cannot open the replica", e))

    def _start_replica(self, tablet_id: str, table: str) -> Replica:
        r = Replica(self.uuid, self._paths(tablet_id), self.outbox.sender(tablet_id),
                    self.opts.replica, rng=random.Random(self.rng.getrandbits(64)))
        r.open()
        r.start()
        self.replicas[tablet_id] = r
        self.tables[tablet_id] = table
        return r

    # -- RPC ---------------------------------------------------------------------------------
    def _register(self, s: RpcServer) -> None:
        s.register("consensus", Consensus, self.on_consensus)
        s.register("ts.create_tablet", CreateTablet, self.on_create_tablet)
        s.register("ts.delete_tablet", DeleteTablet, self.on_delete_tablet)
        s.register("ts.write", Write, self.on_write)
        s.register("ts.read", Read, self.on_read)
        s.register("ts.status", Empty, self.on_status)
        s.register("ts.checksum", ChecksumScan, self.on_checksum)
        s.register("ts.change_config", ChangeConfig, self.on_change_config)
        s.register("ts.leader_step_down", LeaderStepDown, self.on_leader_step_down)
        s.register("ts.start_tablet_copy", StartTabletCopy, self.on_start_tablet_copy)
        s.register("ts.fetch_tablet_copy", TabletName, self.on_fetch_tablet_copy)

    def _replica(self, tablet_id: str) -> Replica:
        r = self.replicas.get(tablet_id)
        if r is not None and not r.failed:
            return r
        if tablet_id in self.failed or (r is not None and r.failed):
            reason = self.failed[tablet_id][1] if tablet_id in self.failed else r.failed
            raise RpcError(ErrorCode.TABLET_NOT_RUNNING, f"tablet {tablet_id} failed: {reason}")
        raise RpcError(ErrorCode.TABLET_NOT_FOUND, f"tablet {tablet_id} is not on {self.uuid}")

    async def on_consensus(self, req: Consensus) -> Ack:
        if req.peers:
            await self.book.learn(req.peers)
        r = self.replicas.get(req.tablet_id)
        if r is None or r.failed:  # it takes no part; the leader may copy the tablet here
            tid = req.tablet_id
            reason = ("failed" if r is not None or tid in self.failed else "copying"
                      if tid in self.copying else "tombstoned" if tid in self.tombstoned
                      else "missing")
            if reason in ("copying", "tombstoned"):
                others = await self._vote_as_tombstone(tid, req.messages)
                if not others:
                    return Ack(True)  # only votes, all answered
            return Ack(False, reason)
        r.step(req.messages)
        return Ack(True)

    async def _vote_as_tombstone(self, tablet_id: str, messages: list) -> list:
        """Seed 05: a TOMBSTONED or COPYING replica still votes, from its consensus metadata and
        the tombstone's last OpId, so a voter being copied cannot leave its tablet leaderless.
        Everything else (AppendEntries above all: a copy is what brings it back) is refused;
        those messages are returned."""
        votes = [m for m in messages if isinstance(m, VoteRequest) and m.to_uuid == self.uuid]
        others = [m for m in messages if not isinstance(m, VoteRequest)]
        if not votes:
            return others
        paths = self._paths(tablet_id)
        async with self._lock:  # not while a copy installs (it merges the metadata)
            r = self.replicas.get(tablet_id)
            if r is not None and not r.failed:  # the copy finished meanwhile
                r.step(votes)
                return others
            if not (paths.disk.exists(paths.consensus_meta) and paths.disk.exists(paths.superblock)):
                return messages  # a copy onto a new replica: no metadata to vote with yet
            answers = await asyncio.to_thread(tombstone_vote, paths, self.uuid, votes)
        tlog = self._log(tablet_id)
        for m, (resp, why) in zip(votes, answers, strict=True):
            tlog.info("tombstoned replica %s %s to %s for term %d, its last op (%d, %d): %s",
                      "granted" if resp is not None and resp.granted else "denied",
                      "pre-vote" if m.pre_vote else "vote", m.from_uuid, m.term, m.last_term,
                      m.last_index, why)
            if resp is not None:
                self.outbox.send(tablet_id, m.from_uuid, [resp])
        return others

    async def on_create_tablet(self, req: CreateTablet) -> Ack:
        async with self._lock:
            if req.tablet_id in self.replicas or req.tablet_id in self.failed:
                return Ack(False)  # idempotent: the master retries creations
            if req.tablet_id in self.tombstoned:
                raise RpcError(ErrorCode.ALREADY_EXISTS, f"tablet {req.tablet_id} is tombstoned here")
            if self.uuid not in {p.uuid for p in req.peers}:
                raise RpcError(ErrorCode.INVALID_ARGUMENT, f"{self.uuid} is not among the peers")
            await self.book.learn(req.peers)
            paths = self._paths(req.tablet_id)
            config = RaftConfig(0, tuple(Member(p.uuid, MemberType.VOTER) for p in req.peers))

            def create():
                # cmeta first: the superblock's presence is what makes the tablet exist.
                if not paths.disk.exists(paths.consensus_meta):
                    bootstrap_replica(paths, config)
                Superblock(req.tablet_id, req.table_name, req.partition, DataState.READY).save(
                    paths.superblock, paths.disk)

            await asyncio.to_thread(create)
            self._start_replica(req.tablet_id, req.table_name)
            self._log(req.tablet_id).info("created replica of table %s with config %s",
                                          req.table_name, config_text(config))
            return Ack(True)

    async def on_delete_tablet(self, req: DeleteTablet) -> Ack:
        """Tombstone: the data and WAL go, the consensus metadata stays so the replica can never
        vote twice in a term; the last logged OpId is kept in the superblock."""
        async with self._lock:
            self.failed.pop(req.tablet_id, None)
            if req.tablet_id not in self.replicas:
                return Ack(req.tablet_id in self.tombstoned)
            await self._tombstone(req.tablet_id)
            return Ack(True)

    async def _tombstone(self, tablet_id: str) -> None:
        """Stop a running replica and tombstone it. Call under self._lock."""
        r = self.replicas.pop(tablet_id)
        last = OpId(*r.last_logged())
        await r.stop()
        await asyncio.to_thread(tombstone, self._paths(tablet_id), last)
        self.tombstoned[tablet_id] = self.tables.pop(tablet_id, "?")
        self._log(tablet_id).info("tombstoned; last logged op (%d, %d)", last.term, last.index)

    # -- membership and tablet copy (seeds 03 and 05) ------------------------------------------
    async def on_change_config(self, req: ChangeConfig) -> ConfigState:
        r = self._replica(req.tablet_id)
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
            raise RpcError(ErrorCode.NOT_LEADER, f"leader removed: handed over to {e}",
                           detail=None) from None
        except ReplicaError as e:
            raise replica_error(e) from None
        except NotLeader as e:
            raise RpcError(ErrorCode.NOT_LEADER, "not the leader", detail=e.leader) from None
        except ProposalError as e:
            raise RpcError(ErrorCode.ILLEGAL_STATE, f"{type(e).__name__}: {e}") from None
        self._log(req.tablet_id).info("config change %s %s done: %s", req.op, req.peer.uuid,
                                      config_text(config))
        return ConfigState(config.opid_index,
                           [[m.uuid, m.member_type.name] for m in config.members])

    async def on_leader_step_down(self, req: LeaderStepDown) -> Ack:
        r = self._replica(req.tablet_id)
        try:
            await r.step_down(req.new_leader)
        except ReplicaError as e:
            raise replica_error(e) from None
        except NotLeader as e:
            raise RpcError(ErrorCode.NOT_LEADER, "not the leader", detail=e.leader) from None
        except ProposalError as e:
            raise RpcError(ErrorCode.ILLEGAL_STATE, f"{type(e).__name__}: {e}") from None
        return Ack(True)

    async def on_fetch_tablet_copy(self, req: TabletName) -> TabletCopyData:
        r = self._replica(req.tablet_id)
        try:
            snap, config, term = await r.copy_source()
        except ReplicaError as e:
            raise replica_error(e) from None
        sb = await asyncio.to_thread(Superblock.load, self._paths(req.tablet_id).superblock,
                                     self.opts.disk)
        return TabletCopyData(sb.table_name, sb.partition, term, encode_config(config), snap)

    async def on_start_tablet_copy(self, req: StartTabletCopy) -> TabletCopyResult:
        """Seed 05's StartTabletCopy: idempotent for a copy in progress, refused for a caller in
        an older term or one that expects the replica in another state (ILLEGAL_STATE), and
        refused for a running replica the caller's retained log can still catch up
        (REPLICA_NOT_BEHIND): only a replica that is really behind is tombstoned first. Then the
        copy is fetched from `source` and installed."""
        tid, paths = req.tablet_id, self._paths(req.tablet_id)
        async with self._lock:
            if tid in self.copying:
                raise RpcError(ErrorCode.ILLEGAL_STATE, f"tablet {tid}: a copy is in progress")
            if tid in self.failed:
                raise RpcError(ErrorCode.ILLEGAL_STATE, f"tablet {tid} failed here: {self.failed[tid][1]}")
            state = ("RUNNING" if tid in self.replicas else "TOMBSTONED" if tid in self.tombstoned
                     else "MISSING")
            if req.current_state and req.current_state != state:
                raise RpcError(ErrorCode.ILLEGAL_STATE, f"tablet {tid} is {state} here, not "
                               f"{req.current_state} as the caller expects")
            if paths.disk.exists(paths.consensus_meta):
                cmeta = await asyncio.to_thread(ConsensusMetadata.load, paths.consensus_meta,
                                                paths.disk)
                if req.caller_term < cmeta.current_term:
                    raise RpcError(ErrorCode.ILLEGAL_STATE, f"caller's term {req.caller_term} is "
                                   f"older than ours, {cmeta.current_term}")
            if state == "RUNNING":
                up_to_date = self._not_behind(self.replicas[tid], req)
                if up_to_date is not None:
                    self._log(tid).info("refused tablet copy from %s (caller term %d): %s",
                                        req.source.uuid, req.caller_term, up_to_date)
                    raise RpcError(ErrorCode.REPLICA_NOT_BEHIND, f"tablet {tid}: {up_to_date}")
                await self._tombstone(tid)
            self.copying.add(tid)
        self._log(tid).info("tablet copy from %s starting (caller term %d, replica %s, the "
                            "caller believes it holds index %d)", req.source.uuid,
                            req.caller_term, state, req.peer_match)
        try:
            data = await self.rpc_client.call(req.source.addr, "ts.fetch_tablet_copy",
                                              TabletName(tid), TabletCopyData,
                                              to_uuid=req.source.uuid, timeout=60.0)
            async with self._lock:
                try:
                    await asyncio.to_thread(install_copy, paths, data,
                                            self.opts.replica.faults)
                except Exception:  # e.g. a full disk: back to a tombstone, as start-up would
                    table = await asyncio.to_thread(abandon_copy, paths)
                    if table is not None:
                        self.tombstoned[tid] = table
                    raise
                self.tombstoned.pop(tid, None)
                self._start_replica(tid, data.table_name)
        except Exception as e:
            self._log(tid).warning("tablet copy from %s failed: %s: %s", req.source.uuid,
                                   type(e).__name__, e)
            raise
        finally:
            self.copying.discard(tid)
        self._log(tid).info("tablet copy finished: copied from %s at index %d (term %d)",
                            req.source.uuid, data.snapshot.last_applied_index,
                            data.snapshot.last_applied_term)
        return TabletCopyResult(OpId(data.snapshot.last_applied_term,
                                     data.snapshot.last_applied_index))

    @staticmethod
    def _not_behind(r: Replica, req: StartTabletCopy) -> str | None:
        """Why a running replica must not be copied over, or None if it is really behind the
        caller's retained log (seed 05: only a replica AppendEntries cannot help is replaced)."""
        first = req.retained_from
        if first is None:
            return "the replica is running and the caller did not say which log it retains"
        if r.failed:
            return None  # a replica that stopped serving cannot be caught up either
        (start_term, start), (last_term, last) = r.log_bounds()
        mine = f"its log holds ({start_term}, {start})..({last_term}, {last})"
        if start >= first.index:
            return f"not behind: {mine}, its snapshot at or past the caller's first retained " \
                   f"op ({first.term}, {first.index})"
        if r.holds(first.index, first.term):
            return f"not behind: {mine}, including the caller's first retained op " \
                   f"({first.term}, {first.index}); AppendEntries can catch it up"
        return None

    def _on_refused(self, tablet_id: str, peer_uuid: str, reason: str = "missing") -> None:
        self._copy_wanted[(tablet_id, peer_uuid)] = reason.upper()

    async def _copy_loop(self) -> None:
        """As leader, start a tablet copy on each peer that refused our Raft messages (it has no
        replica, or only a tombstone) or is behind the log we retain."""
        while True:
            await asyncio.sleep(1.0)
            wanted: dict[tuple[str, str], str] = {}
            for tid, r in self.replicas.items():
                if r.role == Role.LEADER and not r.failed:
                    wanted |= {(tid, peer): "RUNNING" for peer, p in r.status()["peers"].items()
                               if p["needs_tablet_copy"]}
            # a peer's own answer (no replica, a tombstone) is fresher than our progress
            refused, self._copy_wanted = self._copy_wanted, {}
            wanted |= refused
            for (tid, peer_uuid), state in wanted.items():
                if (tid, peer_uuid) in self._copies_sent:
                    continue
                r = self.replicas.get(tid)
                peer = self.book.get(peer_uuid)
                if (r is None or r.role != Role.LEADER or peer is None
                        or peer_uuid not in r.active_members()):
                    continue
                (start_term, start), _ = r.log_bounds()
                req = StartTabletCopy(tid, self.me, r.term, state, OpId(start_term, start),
                                      r.peer_match(peer_uuid))
                self._copies_sent.add((tid, peer_uuid))
                task = asyncio.create_task(self._send_copy(req, peer))
                task.add_done_callback(lambda _t, k=(tid, peer_uuid): self._copies_sent.discard(k))

    async def _send_copy(self, req: StartTabletCopy, peer: Peer) -> None:
        tablet_id, term = req.tablet_id, req.caller_term
        self._log(tablet_id).info("starting tablet copy to %s (term %d, expecting its replica "
                                  "%s, our log from (%d, %d))", peer.uuid, term,
                                  req.current_state, req.retained_from.term,
                                  req.retained_from.index)
        try:
            res = await self.rpc_client.call(peer.addr, "ts.start_tablet_copy", req,
                                             TabletCopyResult, to_uuid=peer.uuid, timeout=90.0)
        except RpcError as e:
            self._log(tablet_id).info("tablet copy to %s failed: %s", peer.uuid, e)
            return
        self._log(tablet_id).info("tablet copy to %s finished at op (%d, %d): replicating to "
                                  "it from there", peer.uuid, res.installed.term,
                                  res.installed.index)
        r = self.replicas.get(tablet_id)
        if r is not None and not r.failed:
            r.copy_installed(peer.uuid, res.installed.index, term)

    async def on_write(self, req: Write) -> OpResult:
        r = self._replica(req.tablet_id)
        try:
            if is_read_only(req.op):
                return OpResult(await r.read(req.op))
            return OpResult(await r.write(req.op, session=req.session, seq=req.seq,
                                          acked_below=req.acked_below))
        except ReplicaError as e:
            raise replica_error(e) from None

    async def on_read(self, req: Read) -> OpResult:
        r = self._replica(req.tablet_id)
        if not is_read_only(req.op):
            raise RpcError(ErrorCode.INVALID_ARGUMENT, "ts.read takes read-only ops; use ts.write")
        try:
            return OpResult(await r.read(req.op))
        except ReplicaError as e:
            raise replica_error(e) from None

    async def on_status(self, _req: Empty) -> ServerStatus:
        return self.server_status()

    async def on_checksum(self, req: ChecksumScan) -> ChecksumReport:
        """Each replica's rows checksummed at its applied index. The rows are copied between two
        applies (values are never mutated in place, so a shallow copy is exact) and hashed in a
        thread, so a large tablet does not stall the event loop."""
        out = []
        for rep in self.reports():
            if req.tablet_id and rep.tablet_id != req.tablet_id:
                continue
            r = self.replicas.get(rep.tablet_id)
            if rep.state != "RUNNING" or r is None:
                out.append(TabletChecksum(rep.tablet_id, rep.state, error=rep.error))
                continue
            s, data = r.status(), dict(r.state.data)
            crc = await asyncio.to_thread(table_checksum, data)
            keys = await asyncio.to_thread(row_hashes, data) if req.with_keys else None
            out.append(TabletChecksum(rep.tablet_id, rep.state, s["role"], s["term"], s["commit"],
                                      s["applied"], crc, len(data),
                                      [m[0] for m in s["committed_config"]], keys))
        return ChecksumReport(self.uuid, out)

    # -- reporting ---------------------------------------------------------------------------
    def reports(self) -> list[TabletReport]:
        out = []
        for tid, r in sorted(self.replicas.items()):
            s = r.status()
            out.append(TabletReport(tid, self.tables.get(tid, "?"),
                                    "FAILED" if r.failed else "RUNNING", s["role"], s["term"],
                                    s["leader"], s["commit"], s["applied"], s["config"], r.failed,
                                    s["committed_config"], s["committed_config_index"]))
        for tid in sorted(self.copying):
            out.append(TabletReport(tid, self.tables.get(tid, "?"), "COPYING"))
        for tid, (table, reason) in sorted(self.failed.items()):
            out.append(TabletReport(tid, table, "FAILED", error=reason))
        for tid, table in sorted(self.tombstoned.items()):
            out.append(TabletReport(tid, table, "TOMBSTONED"))
        return out

    def server_status(self) -> ServerStatus:
        return ServerStatus(self.uuid, self.me.host, self.me.port, self.reports())

    def status_dict(self) -> dict:
        return {"uuid": self.uuid, "kind": self.kind, "rpc": f"{self.me.host}:{self.me.port}",
                "wall_time": time.time(),  # what this process believes the time is (clock faults)
                "tablets": {tid: r.status() for tid, r in self.replicas.items()},
                "failed": {tid: reason for tid, (_, reason) in self.failed.items()},
                "tombstoned": sorted(self.tombstoned)}

    async def _heartbeat_loop(self) -> None:
        period = self.opts.heartbeat_interval_ms / 1000
        while True:
            hb = TSHeartbeat(self.server_status(), self.http_port)
            results = await asyncio.gather(*(
                self.rpc_client.call(addr, "master.ts_heartbeat", hb, TSHeartbeatResponse,
                                     to_uuid="", timeout=max(period, 1.0))
                for addr in self.opts.masters), return_exceptions=True)
            for res in results:
                if isinstance(res, TSHeartbeatResponse) and res.leader:
                    await self.book.learn(res.tservers)
            await asyncio.sleep(period)


class _Collector:
    """Metrics read from live state at scrape time: nothing to update on the hot path."""

    def __init__(self, server: TabletServer):
        self.s = server

    def collect(self):
        term = GaugeMetricFamily("tessera_raft_term", "current Raft term", labels=["tablet"])
        leader = GaugeMetricFamily("tessera_raft_is_leader", "1 if this replica leads",
                                   labels=["tablet"])
        commit = GaugeMetricFamily("tessera_raft_commit_index", "commit index", labels=["tablet"])
        lag = GaugeMetricFamily("tessera_replica_lag_entries",
                                "leader: entries a peer is behind", labels=["tablet", "peer"])
        changes = CounterMetricFamily("tessera_leader_changes", "leader changes seen",
                                      labels=["tablet"])
        applied = CounterMetricFamily("tessera_ops_applied", "entries applied", labels=["tablet"])
        wal = SummaryMetricFamily("tessera_wal_append_seconds",
                                  "time to write and sync one WAL group", labels=["tablet"])
        entries = CounterMetricFamily("tessera_wal_entries", "WAL entries (entries / groups = "
                                      "mean group size)", labels=["tablet"])
        copy = GaugeMetricFamily("tessera_peer_needs_tablet_copy",
                                 "leader: 1 if a peer is behind the retained log", labels=["tablet", "peer"])
        snaps = CounterMetricFamily("tessera_snapshots", "state-machine snapshots taken",
                                    labels=["tablet"])
        failed = GaugeMetricFamily("tessera_tablets_failed", "replicas that failed to open")
        for tid, r in self.s.replicas.items():
            st = r.status()
            term.add_metric([tid], st["term"])
            leader.add_metric([tid], 1 if st["role"] == "LEADER" else 0)
            commit.add_metric([tid], st["commit"])
            for peer, p in st["peers"].items():
                lag.add_metric([tid, peer], max(0, st["last_index"] - p["match"]))
                copy.add_metric([tid, peer], 1 if p["needs_tablet_copy"] else 0)
            changes.add_metric([tid], r.stats["leader_changes"])
            applied.add_metric([tid], r.stats["applied"])
            wal.add_metric([tid], r.stats["wal_groups"], r.stats["wal_seconds"])
            entries.add_metric([tid], r.stats["wal_entries"])
            snaps.add_metric([tid], r.stats["snapshots"])
        failed.add_metric([], len(self.s.failed) + sum(1 for r in self.s.replicas.values() if r.failed))
        yield from (term, leader, commit, lag, copy, changes, applied, wal, entries, snaps, failed)
