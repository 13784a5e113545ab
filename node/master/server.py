"""The master: the catalog of tables and tablets, kept in one system tablet (`sys.catalog`) that
the masters replicate with Raft. One master is a config of one (f=0); three tolerate one failure.

The catalog is the ordinary tablet state machine (keys `table/<name>` and `tablet/<id>`), so the
masters reuse the replica, WAL and Raft code of the tablet servers. Only the leader master
mutates it, under one lock, in the multi-master seed's order: lock, check, replicate, commit,
then send RPCs to tablet servers. A reconciler on the leader re-sends creations that have not
been reported yet and deletes replicas whose catalog record is deleted or whose config left them
out (node/master/reconciler.py). The catalog's records are node/master/catalog.py's; what the
tablet servers report, node/master/ts_manager.py's.

On first start each master asks every other master for its UUID (they answer before they have a
catalog) and all of them build the same initial config from the sorted UUIDs. A master that
finds its peers already have a catalog without it joins it instead: it waits until the leader
adds it (`tessera master add`, Kudu's AddMaster) as a non-voter, copies it the catalog and
promotes it. So does one they list in a config past the initial one: it was added already.
A master removed from the catalog's config stops serving (it answers REMOVED / NOT_LEADER).
"""

from __future__ import annotations

import asyncio
import logging

from node.consensus import (
    ChangeOp,
    ConfigChange,
    Member,
    MemberType,
    ProposalError,
    RaftConfig,
    Role,
    SteppingDown,
)
from node.errors import ReplicaError
from node.master.catalog import (
    CATALOG,
    Catalog,
    TableRecord,
    TabletRecord,
    delete_table,
    place,
    write_table,
    write_tserver_state,
)
from node.master.reconciler import Reconciler
from node.master.ts_manager import TSManager
from node.probes import probe
from node.protocol import (
    Ack,
    AddMaster,
    ChangeConfig,
    ConfigState,
    CreateTable,
    CreateTablet,
    DropTable,
    Empty,
    MasterInfo,
    Peer,
    RemoveMaster,
    ReplicaChange,
    ServerStatus,
    TableList,
    TableLocations,
    TableName,
    TabletLocation,
    TabletReport,
    TServerState,
    TSHeartbeat,
    TSHeartbeatResponse,
)
from node.replica.replica import Replica
from node.rpc import ErrorCode, RpcError, RpcServer
from node.server.base import ServerBase, ServerOptions
from node.server.daemon import new_uuid
from node.server.replica_errors import proposal_error, replica_error
from node.tablet.ops import MicroOp, OpenSession, Read, Txn
from node.tablet.superblock import HashBucket, KeyRange

# How long a retried replica change waits for a pending change (its own first attempt, maybe)
# to commit before it is answered as refused: the leader's own wait for a commit is 30 s.
RETRY_PENDING_WAIT_S = 30.0

log = logging.getLogger(__name__)
# The key a membership answer's ReadIndex round reads (Master._still_leading): the round, not
# the value, is what counts, so any key does.
MEMBERSHIP_READ_KEY = "masters"



class Master(ServerBase):
    kind = "master"

    def __init__(self, opts: ServerOptions, *, unresponsive_after_s: float = 10.0):
        super().__init__(opts)
        self.reconcile_interval_s = opts.catalog_manager_bg_task_wait_ms / 1000
        # deaf after three heartbeat periods without any server's heartbeat: well below the
        # silence that counts a server failed (follower_unavailable_considered_failed_sec)
        self.ts = TSManager(unresponsive_after_s, lambda: asyncio.get_running_loop().time(),
                            deaf_after_s=3 * opts.heartbeat_interval_ms / 1000)
        self.reconciler = Reconciler(self)
        self._catalog_lock = asyncio.Lock()
        self._session: tuple[int, int] | None = None  # (term, session id) of our catalog session
        self._seq = 0
        self.master_peers: list[Peer] = []

    # -- lifecycle ---------------------------------------------------------------------------
    async def _started(self) -> None:
        self._keep(self._bootstrap_then_reconcile(), "reconcile")

    async def _bootstrap_then_reconcile(self) -> None:
        if self.tablets.get(CATALOG) is None:
            await self._create_catalog()
        while True:
            await asyncio.sleep(self.reconcile_interval_s)
            try:
                await self._learn_master_addresses()
                await self.reconciler.run()
            except (ReplicaError, RpcError) as e:
                log.debug("reconcile: %s", e)
            except Exception:
                # Nobody awaits this task: anything else leaving the loop (an OSError saving the
                # peer book, a bug) would end it unread, and this master would go on answering
                # DDL as leader but never reconcile again. The next round tries afresh (the
                # peer book keeps in memory what it failed to save).
                probe("master.reconcile.round_failed")
                log.exception("reconcile round failed; trying again next round")

    async def _learn_master_addresses(self) -> None:
        """Every master must reach every member of the catalog's config to campaign, but only
        the leader learned the address of a master added since we started (or were copied):
        ask the masters we can reach for the members they know."""
        r = self.tablets.replicas.get(CATALOG)
        if r is None or all(self.book.get(u) is not None for u in r.active_members()):
            return
        probe("master.learn_addresses")
        addrs = {p.addr for u in r.active_members() if (p := self.book.get(u)) is not None}
        addrs |= set(self.opts.masters)
        addrs.discard((self.me.host, self.me.port))
        for addr in sorted(addrs):
            try:
                info = await self.rpc_client.call(addr, "master.info", Empty(), MasterInfo,
                                                  to_uuid="", timeout=1.0)
            except RpcError:
                continue
            await self.book.learn(info.masters)
            if all(self.book.get(u) is not None for u in r.active_members()):
                return

    async def _create_catalog(self) -> None:
        peers: dict[tuple[str, int], Peer] = {}
        addrs = self.opts.masters or [(self.me.host, self.me.port)]
        while len(peers) < len(addrs):
            for addr in addrs:
                if addr in peers:
                    continue
                if addr == (self.me.host, self.me.port):
                    peers[addr] = self.me
                    continue
                try:
                    info = await self.rpc_client.call(addr, "master.info", Empty(), MasterInfo,
                                                      to_uuid="", timeout=1.0)
                    peers[addr] = Peer(info.uuid, addr[0], addr[1])
                except RpcError:
                    continue
                if self._joins_existing(info, addr):
                    return
            if len(peers) < len(addrs):
                log.info("waiting for masters: %d of %d answered", len(peers), len(addrs))
                await asyncio.sleep(0.5)
        members = sorted(peers.values(), key=lambda p: p.uuid)
        await self.book.learn(members)
        config = RaftConfig(0, tuple(Member(p.uuid, MemberType.VOTER) for p in members))
        try:
            await self.tablets.create(CATALOG, CATALOG, KeyRange(), config)
        except RpcError as e:
            # While we waited for the others, those already up formed the catalog with us in it
            # and its leader copied it here: it is ours now (or is arriving), not ours to create.
            # Before, this error ended the loop that reconciles, unseen (ServerBase._keep).
            if e.code != ErrorCode.ALREADY_EXISTS:
                raise
            probe("master.bootstrap.catalog_arrived_by_copy")
            log.info("catalog not created: %s (copied here by a master running it)", e)
            return
        log.info("catalog created with masters %s", [p.uuid for p in members])

    def _joins_existing(self, info: MasterInfo, addr: tuple[str, int]) -> bool:
        """Whether the master at `addr` holds a catalog this master must be copied rather than
        create. Only the first masters build the initial config, and only while it is the one
        in force: a master listed in a later config was added (maybe by a change not committed
        yet), and one it does not list is new to a running cluster."""
        if info.role == "INITIALIZING":
            return False
        if self.uuid not in info.members:
            probe("master.bootstrap.join_existing")
            log.info("master %s at %s:%d already has a catalog: joining it; waiting to be added "
                     "(tessera master add %s:%d)", info.uuid, addr[0], addr[1], self.me.host,
                     self.me.port)
            return True
        if info.config_index > 0:
            probe("master.bootstrap.member_awaits_copy")
            log.info("master %s at %s:%d lists this master in config %d, past the initial one: "
                     "waiting to be copied the catalog", info.uuid, addr[0], addr[1],
                     info.config_index)
            return True
        return False

    @property
    def catalog(self) -> Replica:
        e = self.tablets.get(CATALOG)
        if e is None or e.replica is None:
            reason = e.reason if e is not None else "not created yet"
            raise RpcError(ErrorCode.TABLET_NOT_RUNNING, f"catalog unavailable: {reason}")
        return e.replica

    # -- RPC ---------------------------------------------------------------------------------
    def _register(self, s: RpcServer) -> None:
        s.register("master.info", Empty, self.on_info)
        s.register("master.ts_heartbeat", TSHeartbeat, self.on_heartbeat)
        s.register("master.create_table", CreateTable, self.on_create_table)
        s.register("master.delete_table", DropTable, self.on_delete_table)
        s.register("master.list_tables", Empty, self.on_list_tables)
        s.register("master.table_locations", TableName, self.on_locations)
        s.register("master.change_replica", ReplicaChange, self.on_change_replica)
        s.register("master.tserver_state", TServerState, self.on_tserver_state)
        s.register("master.add_master", AddMaster, self.on_add_master)
        s.register("master.remove_master", RemoveMaster, self.on_remove_master)

    async def on_info(self, _req: Empty) -> MasterInfo:
        r = self.tablets.replicas.get(CATALOG)
        live = [t.peer for t in self.ts.live()]
        if r is None:
            return MasterInfo(self.uuid, "INITIALIZING", None, 0, [], live, [], -1)
        members = r.active_members()
        masters = [p for u in members if (p := self.book.get(u)) is not None]
        if len(masters) < len(members):
            probe("master.info.member_address_unknown")
        role = "REMOVED" if self._removed(r) else r.role.name
        return MasterInfo(self.uuid, role, r.leader, r.term, masters, live, members,
                          r.active_config_index)

    def _removed(self, r: Replica) -> bool:
        """The catalog's config has left this master out: it serves nothing more. The active
        config, so from the moment the removal reaches us; the leader goes on sending to a
        removed member until it has committed its removal (RaftCore._sync_progress)."""
        return self.uuid not in r.active_members()

    async def on_heartbeat(self, req: TSHeartbeat) -> TSHeartbeatResponse:
        """Followers answer with the masters too: the leader may be a master the server does
        not heartbeat (one added while the server was cut off), and then only followers can
        tell it of the new list."""
        await self.book.learn([self.ts.heard(req.server)])
        r = self.tablets.replicas.get(CATALOG)
        if r is None:
            return TSHeartbeatResponse(False)
        leader = r.role == Role.LEADER
        tservers = [t.peer for t in self.ts.servers.values()] if leader else []
        masters = self._committed_masters(r)
        if masters is None:  # the servers keep the list they have
            return TSHeartbeatResponse(leader, tservers, term=r.term)
        return TSHeartbeatResponse(leader, tservers, masters, r.committed_config_index, r.term)

    def _committed_masters(self, r: Replica) -> list[Peer] | None:
        """The committed config's masters, or None while an address is not learned yet. The
        committed config, not the active one: a pending change may still be rolled back. Its
        index lets the servers ignore it if they hold a newer one already, as they may when
        this master lags (a follower, or a deposed leader not told of its successor yet)."""
        members = r.committed_members()
        masters = [p for u in members if (p := self.book.get(u)) is not None]
        if len(masters) < len(members):
            probe("master.heartbeat.masters_not_learned")
            return None
        return masters

    def _leader_catalog(self) -> Replica:
        r = self.catalog
        if self._removed(r):
            probe("master.removed.refused")
            raise RpcError(ErrorCode.NOT_LEADER, "this master was removed from the masters")
        if r.role != Role.LEADER:
            raise RpcError(ErrorCode.NOT_LEADER, "not the leader master", detail=r.leader)
        return r

    # -- the masters' own membership (Kudu's AddMaster / RemoveMaster) --------------------------
    async def on_add_master(self, req: AddMaster) -> ConfigState:
        """The new master joins the catalog's config as a non-voter; the leader's copy trigger
        copies it the catalog, and the core promotes it once it has caught up."""
        async with self._catalog_lock:
            await self._await_ready()
            r = self._leader_catalog()
            if req.peer.uuid in r.active_members() and await self._still_leading(r):
                raise RpcError(ErrorCode.ALREADY_EXISTS, f"master {req.peer.uuid} is a member")
            probe("master.membership.add")
            await self.book.learn([req.peer])
            return await self._change_masters(
                r, ConfigChange(ChangeOp.ADD_NON_VOTER, req.peer.uuid, promote=True))

    async def on_remove_master(self, req: RemoveMaster) -> ConfigState:
        """Removing the leader itself hands leadership over first (NOT_LEADER with the new
        leader's UUID): the caller asks again there."""
        async with self._catalog_lock:
            await self._await_ready()
            r = self._leader_catalog()
            if req.uuid not in r.active_members() and await self._still_leading(r):
                raise RpcError(ErrorCode.NOT_FOUND, f"master {req.uuid} is not a member")
            probe("master.membership.remove")
            return await self._change_masters(r, ConfigChange(ChangeOp.REMOVE, req.uuid))

    async def _still_leading(self, r: Replica) -> bool:
        """True once a ReadIndex round proved this master still leads in its term, so its
        active config is the masters' newest; NOT_LEADER if it does not. Membership answered
        without a change (already a member, not a member) must not come from a deposed leader
        that has not heard of its successor: the tools take either answer for an earlier try
        done, and a removal told "not a member" by a config that predates an add would leave
        the added master a voter while its process is stopped and wiped."""
        try:
            await r.read(Read(MEMBERSHIP_READ_KEY))
        except ReplicaError as e:
            probe("master.membership.answer_not_confirmed")
            raise replica_error(e) from None
        return True

    async def _change_masters(self, r: Replica, change: ConfigChange) -> ConfigState:
        try:
            config = await r.change_config(change, r.committed_config_index)
        except SteppingDown as e:
            probe("master.membership.leader_hands_over")
            raise RpcError(ErrorCode.NOT_LEADER, f"leadership handed to {e} first",
                           detail=str(e)) from None
        except (ReplicaError, ProposalError) as e:
            raise proposal_error(e) from None
        log.info("masters changed: %s %s; config %d: %s", change.op.name, change.uuid,
                 config.opid_index, [m.uuid for m in config.members])
        return ConfigState(config.opid_index,
                           [[m.uuid, m.member_type.name] for m in config.members])

    async def _mutate(self, micro_ops: list[list]) -> None:
        """Replicate one catalog transaction through our session (opened once per term)."""
        r = self._leader_catalog()
        try:
            if self._session is None or self._session[0] != r.term:
                probe("master.catalog.session_opened_in_new_term")
                res = await r.write(OpenSession(), session=0, seq=0, acked_below=0)
                self._session, self._seq = (r.term, res.value), 0
            self._seq += 1
            res = await r.write(Txn([MicroOp(*m) for m in micro_ops]), session=self._session[1],
                                seq=self._seq, acked_below=self._seq)
        except ReplicaError as e:
            raise replica_error(e) from None
        if not res.ok:
            probe("master.catalog.write_refused")
            raise RpcError(ErrorCode.REMOTE_ERROR, f"catalog write refused: {res.error} {res.detail}")

    def _catalog(self) -> Catalog:
        """The catalog as this leader master has applied it."""
        return Catalog(self._leader_catalog().state.data)

    async def on_create_table(self, req: CreateTable) -> TableLocations:
        if not req.name or req.name.startswith("sys."):
            raise RpcError(ErrorCode.INVALID_ARGUMENT, f"invalid table name {req.name!r}")
        if not 1 <= req.num_tablets <= 1000 or req.replication_factor not in (1, 3, 5, 7):
            raise RpcError(ErrorCode.INVALID_ARGUMENT,
                           "num_tablets must be 1..1000 and replication_factor odd (1, 3, 5, 7)")
        async with self._catalog_lock:
            await self._await_ready()
            catalog = self._catalog()
            existing = catalog.table(req.name)
            if existing is not None and req.token and existing.creator == req.token:
                probe("master.create_table.retry_answered")
                return self._locations(req.name)
            if req.token and catalog.dropped_creator(req.name) == req.token:
                # this call's create landed and another call dropped the table since: making
                # it again would apply the create twice, and bring back what was dropped
                probe("master.create_table.retry_found_dropped")
                raise RpcError(ErrorCode.NOT_FOUND,
                               f"table {req.name} was made by this create and dropped since")
            if existing is not None:
                raise RpcError(ErrorCode.ALREADY_EXISTS, f"table {req.name} exists")
            live = self.ts.live()
            if len(live) < req.replication_factor:
                raise RpcError(ErrorCode.ILLEGAL_STATE,
                               f"need {req.replication_factor} live tablet servers, have {len(live)}")
            peers = {t.peer.uuid: t.peer for t in live}
            table_id = new_uuid(self.rng)
            placed = place({t.peer.uuid: len(t.tablets) for t in live}, req.num_tablets,
                           req.replication_factor, self.rng)
            tablets = [TabletRecord(f"{table_id[:12]}-{i:04d}", req.name, [i, req.num_tablets],
                                    [[u, peers[u].host, peers[u].port] for u in chosen],
                                    rf=req.replication_factor)
                       for i, chosen in enumerate(placed)]
            await self._mutate(write_table(TableRecord(table_id, req.name,
                                                       [t.id for t in tablets], req.token),
                                           tablets))
        await asyncio.gather(*(self._create_replicas(req.name, t) for t in tablets),
                             return_exceptions=True)
        return self._locations(req.name)

    async def _await_ready(self) -> None:
        r = self._leader_catalog()
        try:
            await r.await_leader_ready()
        except ReplicaError as e:
            raise replica_error(e) from None

    async def _create_replicas(self, table: str, t: TabletRecord,
                               only: set[str] | None = None) -> None:
        """Sends the creation to the tablet's servers, or to those of them in `only`; the
        request names every peer either way (it carries the initial config)."""
        peers = [Peer(*p) for p in t.replicas]
        req = CreateTablet(t.id, table, HashBucket(*t.bucket), peers)
        await asyncio.gather(*(self.rpc_client.call(p.addr, "ts.create_tablet", req, Ack,
                                                    to_uuid=p.uuid, timeout=5.0)
                               for p in peers if only is None or p.uuid in only),
                             return_exceptions=True)

    async def on_delete_table(self, req: DropTable) -> Ack:
        async with self._catalog_lock:
            await self._await_ready()
            catalog = self._catalog()
            # the token first: a retry of a drop that landed is that drop, done, even when
            # another call has re-created the name since (that table is not the one it named)
            if req.token and catalog.dropped_by(req.name) == req.token:
                probe("master.delete_table.retry_answered")
                return Ack(True)
            table = catalog.table(req.name)
            if table is None:
                raise RpcError(ErrorCode.NOT_FOUND, f"no table {req.name}")
            await self._mutate(delete_table(table, req.token))
        return Ack(True)

    async def on_list_tables(self, _req: Empty) -> TableList:
        await self._await_ready()
        return TableList(self._catalog().table_names())

    async def on_locations(self, req: TableName) -> TableLocations:
        await self._await_ready()
        return self._locations(req.name)

    def _locations(self, name: str) -> TableLocations:
        catalog = self._catalog()
        table = catalog.table(name)
        if table is None:
            raise RpcError(ErrorCode.NOT_FOUND, f"no table {name}")
        tablets = []
        for tid in table.tablets:
            t = catalog.tablet(tid)
            leader = self.ts.leaders.get(tid)
            tablets.append(TabletLocation(tid, HashBucket(*t.bucket), [Peer(*p) for p in t.replicas],
                                          leader[1] if leader else None))
        return TableLocations(name, table.id, tablets)

    async def on_tserver_state(self, req: TServerState) -> Ack:
        """Kudu's `kudu tserver state enter_maintenance` / `exit_maintenance`: recorded in the
        catalog, so every leader master after this one knows it (Reconciler skips its replicas)."""
        await self._await_ready()
        if req.ts_uuid not in self.ts.servers:
            raise RpcError(ErrorCode.NOT_FOUND, f"no tablet server {req.ts_uuid}")
        await self._mutate(write_tserver_state(req.ts_uuid, req.maintenance))
        log.info("tablet server %s %s maintenance", req.ts_uuid,
                 "entered" if req.maintenance else "left")
        return Ack(True)

    async def on_change_replica(self, req: ReplicaChange) -> ConfigState:
        """Seed 05's AddReplica / RemoveReplica: one compare-and-set guarded call to the tablet's
        leader (found from heartbeats), so a repeated or racing request cannot apply twice."""
        await self._await_ready()
        if self._catalog().tablet(req.tablet_id) is None:
            raise RpcError(ErrorCode.NOT_FOUND, f"no tablet {req.tablet_id}")
        leader = self.ts.leader_report(req.tablet_id)
        if leader is None:
            raise RpcError(ErrorCode.TABLET_NOT_RUNNING,
                           f"tablet {req.tablet_id}: no leader reported yet")
        leader_peer = leader[0]
        target = self.ts.servers.get(req.ts_uuid)
        if target is None:
            raise RpcError(ErrorCode.NOT_FOUND, f"no tablet server {req.ts_uuid}")
        # The guard is the config the caller decided from, when it says which: the reconciler
        # decides from a heartbeat, and a change committed since (a replacement added and
        # promoted) must fail the compare-and-set, or a second spare joins and the tablet stays
        # at RF+1. A caller that names none (an operator's add) is guarded by the config the
        # leader has committed now, so a change committed in between still fails it.
        report = await self._tablet_report(leader_peer, req.tablet_id)
        if report is None or report.role != "LEADER":
            probe("master.change_replica.leadership_moved")
            raise RpcError(ErrorCode.TABLET_NOT_RUNNING, f"tablet {req.tablet_id}: leadership moved")
        try:
            return await self.rpc_client.call(
                leader_peer.addr, "ts.change_config",
                ChangeConfig(req.tablet_id, req.op, target.peer,
                             report.committed_config_index if req.cas_config_index is None
                             else req.cas_config_index),
                ConfigState, to_uuid=leader_peer.uuid, timeout=30.0)
        except RpcError as e:
            if not req.retry or e.code != ErrorCode.ILLEGAL_STATE:
                raise
            made = await self._change_made(leader_peer, req)
            if made is None:
                raise
            return made

    async def _tablet_report(self, peer: Peer, tablet_id: str) -> TabletReport | None:
        """`tablet_id`'s report as `peer` gives it now (not as it last heartbeated)."""
        status = await self.rpc_client.call(peer.addr, "ts.status", Empty(), ServerStatus,
                                            to_uuid=peer.uuid, timeout=5.0)
        return next((t for t in status.tablets if t.tablet_id == tablet_id), None)

    async def _change_made(self, leader: Peer, req: ReplicaChange) -> ConfigState | None:
        """For a retried change the leader refused (its first attempt may be the change pending,
        or made): the committed config once no change is pending, if it is as `req` asks (an
        add's server a member, a removal's not); None if it is not, or if no leader showed a
        settled config within RETRY_PENDING_WAIT_S. Leadership may move meanwhile: the leader
        asked is `leader`, then the one the heartbeats name. The change is compare-and-set
        guarded, so this never applies it twice: it only tells the caller that the state it
        asked for holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RETRY_PENDING_WAIT_S
        report = None
        while loop.time() < deadline:
            try:
                report = await self._tablet_report(leader, req.tablet_id)
            except RpcError:
                report = None
            if report is not None and report.role == "LEADER" and (
                    report.config == report.committed_config):
                break
            probe("master.change_replica.retry_waited_pending")
            await asyncio.sleep(0.1)
            now = self.ts.leader_report(req.tablet_id)
            leader = now[0] if now is not None else leader
        else:
            return None
        if any(m[0] == req.ts_uuid for m in report.committed_config) != (req.op == "add"):
            return None
        probe("master.change_replica.retry_already_made")
        return ConfigState(report.committed_config_index, report.committed_config)
