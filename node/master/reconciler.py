"""The leader master's background round (Kudu's CatalogManager background tasks): the catalog
follows each tablet's committed config as its leader reports it; a replica silent for
`follower_unavailable_considered_failed_sec` to its tablet's leader, and to this master too
unless its server reports it RUNNING, or one that reports FAILED, is replaced, add before
remove (3-4-3), and a voter beyond the replication factor is removed; replicas whose catalog
record is deleted, or whose config left them out, are deleted (`_deletion` says which, and why
a tablet the catalog never saw is left alone); and,
while a tablet has never reported a leader (Kudu's CREATING), its creation is sent again to the
live members that do not report it. Runs every `catalog_manager_bg_task_wait_ms` on every
master and does nothing unless this master leads."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import msgspec

from node.master.catalog import CATALOG, Catalog, TabletRecord, write_tablet
from node.probes import probe
from node.protocol import Ack, DeleteTablet, ReplicaChange, TabletReport
from node.rpc import RpcError

log = logging.getLogger("node.master.server")

# At most this many of a round's calls to tablet servers (deletions, creations) in flight at
# once. Made one after another, each call to a server that stopped answering cost the round its
# 5 s timeout, one per tablet, and everything else the round does waited behind them; all at
# once, a round over thousands of tablets would open thousands of calls.
ROUND_CALLS_IN_FLIGHT = 32



class Leader(Protocol):
    """What the round needs of the master (node.master.server.Master)."""

    tablets: Any  # TabletManager: the catalog replica
    ts: Any  # TSManager
    opts: Any  # ServerOptions
    rpc_client: Any
    book: Any  # PeerBook
    _catalog_lock: asyncio.Lock

    def _catalog(self) -> Catalog: ...

    async def _mutate(self, micro_ops: list[list]) -> None: ...

    async def _create_replicas(self, table: str, t: TabletRecord,
                               only: set[str] | None = None) -> None: ...

    async def on_change_replica(self, req: ReplicaChange) -> Any: ...


class Reconciler:
    def __init__(self, master: Leader):
        self.m = master
        self._unknown_reported: set[str] = set()  # tablets reported with no catalog key, logged
        # tablet -> servers whose replica of it reported FAILED: its damaged files stay there
        # for an operator, and a copy over a damaged superblock or cmeta would fail at every
        # try, so such a server is never picked to hold a replacement (forgotten on a restart)
        self._failed_on: dict[str, set[str]] = {}
        # tablet -> the members this master added a replacement for: once the replacement
        # votes, each is removed even if it was heard again meanwhile (3-4-3 carried through)
        self._replacing: dict[str, set[str]] = {}
        # tablet -> (committed config index, when this master first saw it): an excess voter
        # nobody here decided to replace is removed only once the config has stood for the
        # silence limit, so an operator's move (add, then remove) is not raced
        self._config_since: dict[str, tuple[int, float]] = {}

    async def run(self) -> None:
        """One round, on the leader master only (once its catalog replica has applied an entry
        of its term): follow committed config changes, replace failed replicas, delete what
        the catalog no longer has, and create again what a tablet that never had a leader
        lacks."""
        r = self.m.tablets.replicas.get(CATALOG)
        if r is None or not r.leader_ready:
            return
        await self._follow_config_changes()
        await self._replace_failed_replicas()
        catalog = Catalog(r.state.data)
        live = self.m.ts.live()
        reported: dict[str, set[str]] = {}
        calls = []
        for ts in live:
            for tid, rep in ts.tablets.items():
                if rep.state in ("TOMBSTONED", "COPYING"):
                    continue
                reported.setdefault(tid, set()).add(ts.peer.uuid)
                delete = self._deletion(catalog, tid, ts.peer.uuid)
                if delete is not None:
                    calls.append(functools.partial(
                        self.m.rpc_client.call, ts.peer.addr, "ts.delete_tablet", delete, Ack,
                        to_uuid=ts.peer.uuid, timeout=5.0))
        await _bounded(calls)
        live_uuids = {ts.peer.uuid for ts in live}
        calls = []
        for t in catalog.tablets():
            # Replicas of the creation config are (re)created here; after a config change, the
            # leader brings new members in by tablet copy instead.
            missing = t.member_uuids - reported.get(t.id, set())
            if t.config_index is not None or not missing:
                continue
            if t.id in self.m.ts.leaders:
                # Past Kudu's CREATING: the tablet has had a leader, which copies the tablet
                # to a member that lacks it. Sent again, the creation only cost a call (its
                # timeout, to a server that is away) for each such tablet, every round.
                probe("master.reconcile.creation_left_to_leader")
                continue
            # only to live members: one not heard from would cost the call's timeout
            if missing & live_uuids:
                probe("master.reconcile.recreate_replicas")
                calls.append(functools.partial(self.m._create_replicas, t.table, t,
                                               missing & live_uuids))
        await _bounded(calls)

    async def _replace_failed_replicas(self) -> None:
        """Re-replication, add before remove (Kudu's 3-4-3): a member whose tablet server has been
        silent for follower_unavailable_considered_failed_sec, or whose replica reports FAILED,
        gets a replacement on a live server outside the config; once that one is a voter, the
        failed member is removed (and then deleted by `_deletion`); with none failed, a voter
        beyond the replication factor is removed (`_excess_voter`). One change per tablet per
        round, only while its config is settled, guarded by the committed config it was decided
        from: a heartbeat may be older than the last change."""
        limit = self.m.opts.follower_unavailable_considered_failed_sec
        catalog = self.m._catalog()
        live = self.m.ts.live()
        maintenance = catalog.in_maintenance()
        for tid in sorted(self.m.ts.leaders):
            record, leader = catalog.tablet(tid), self.m.ts.leader_report(tid)
            if record is None or leader is None or leader[1].config != leader[1].committed_config:
                continue
            if self.m.ts.silent_for(leader[0].uuid) > limit:
                # its leader's report is as old: that leader is gone or cut off from this
                # master, and no change can go through it; a newer leader will report
                probe("master.rereplication.leader_report_stale")
                continue
            members = dict(leader[1].committed_config)  # uuid -> VOTER | NON_VOTER
            if tid in self._replacing:  # a member once removed is replaced for good
                self._replacing[tid] &= set(members)
            decided_from = leader[1].committed_config_index  # the change's guard
            failed = sorted(u for u in members if self._failed(tid, u, limit, leader[1]))
            if set(failed) & maintenance:  # Kudu's maintenance mode: the operator is on it
                probe("master.rereplication.maintenance_deferred")
                failed = [u for u in failed if u not in maintenance]
            if failed:
                change = self._replacement(tid, record, members, failed, live, maintenance,
                                           decided_from)
            elif (extra := self._excess_voter(tid, record.replication_factor, members,
                                              leader[0].uuid, maintenance, decided_from,
                                              limit)) is not None:
                probe("master.rereplication.excess_voter_removed")
                change = ReplicaChange(tid, "remove", extra, decided_from)
            else:
                continue
            if change is None:
                continue
            try:
                await self.m.on_change_replica(change)
                log.info("re-replication: tablet %s: %s %s", tid, change.op, change.ts_uuid)
            except RpcError as e:
                probe("master.rereplication.change_failed")
                log.info("re-replication: tablet %s: %s %s failed: %s", tid, change.op,
                         change.ts_uuid, e)

    def _replacement(self, tid: str, record: TabletRecord, members: dict[str, str],
                     failed: list[str], live: list, maintenance: set[str],
                     decided_from: int) -> ReplicaChange | None:
        """The next step of replacing `failed` members, add before remove, guarded by the
        committed config `decided_from`, or None for now."""
        healthy_voters = [u for u, kind in members.items() if kind == "VOTER" and u not in failed]
        if "NON_VOTER" in members.values():
            probe("master.rereplication.waits_for_promotion")
            return None  # a replacement is catching up; the leader promotes it
        if len(healthy_voters) >= record.replication_factor:
            probe("master.rereplication.remove_chosen")
            return ReplicaChange(tid, "remove", failed[0], decided_from)
        spare = sorted((t for t in live if t.peer.uuid not in members
                        and t.peer.uuid not in maintenance
                        and t.peer.uuid not in self._failed_on.get(tid, ())),
                       key=lambda t: (len(t.tablets), t.peer.uuid))
        if not spare:
            probe("master.rereplication.no_spare")
            return None
        probe("master.rereplication.add_chosen")
        self._replacing.setdefault(tid, set()).update(failed)
        return ReplicaChange(tid, "add", spare[0].peer.uuid, decided_from)

    def _excess_voter(self, tid: str, rf: int, members: dict[str, str], leader: str,
                      maintenance: set[str], index: int, limit: float) -> str | None:
        """A healthy voter beyond the replication factor to remove, or None. Add before remove
        left one whenever the member being replaced was heard again before its removal (an
        isolation past the silence limit; a master cut off from some servers, which judges
        them from its own view): nothing counted failed, the removal never came, and the tablet
        kept four voters for good. Kudu's master evicts an excess replica, healthy or not
        (ShouldEvictReplica). The member this master was replacing goes first, at once; any
        other excess (an operator's add-replica, a replacement a former leader master began)
        only once the committed config has stood for `limit`, so an operator's move-replica
        (add, then remove the source) is not raced: then a server not heard from, then the
        most loaded. Never the leader, and nobody while a replacement is catching up or a
        member's server is in maintenance (the operator is on it)."""
        now = self.m.ts.now()
        since = self._config_since.get(tid)
        if since is None or since[0] != index:
            since = self._config_since[tid] = (index, now)
        voters = [u for u, kind in members.items() if kind == "VOTER" and u != leader]
        if ("NON_VOTER" in members.values() or len(voters) + 1 <= rf
                or set(members) & maintenance):
            return None
        replacing = sorted(self._replacing.get(tid, set()) & set(voters))
        if replacing:
            return replacing[0]
        if now - since[1] < limit:
            return None
        live = {t.peer.uuid: len(t.tablets) for t in self.m.ts.live()}
        return min(voters, key=lambda u: (u in live, -live.get(u, 0), u))

    def _failed(self, tablet_id: str, uuid: str, limit: float, leader: TabletReport) -> bool:
        """A member to replace: silent for over `limit` seconds to its tablet's leader
        (`leader`, its report) and either to this master too or, heard by this master, with
        its replica reporting RUNNING; or its replica reporting FAILED (damaged data or
        metadata it refused to serve, a disk error). A FAILED replica never comes back by
        itself (it fails again at every start), so, as Kudu's leader reports such a peer
        FAILED_UNRECOVERABLE and the master replaces it at once, no silence is awaited.

        The leader's view decides, as Kudu's leader-side peer health report does. This
        master's alone moved the data of every server a partial partition cut it off from
        onto the ones it heard, each tablet a copy, while the tablets' leaders heard every
        member. But the leader's alone would count a member silent while a copy onto it runs
        (a COPYING replica answers Raft with a refusal the leader's core never sees): a member
        this master hears is replaced only while its server says the replica RUNS, so a
        member cut off from its leader by a partition between tablet servers is replaced, and
        a copy onto it is left to finish. A new leader counts its peers' silence from its own
        start, so the limit after an election is waited out too."""
        server = self.m.ts.servers.get(uuid)
        if server is None:
            return False
        leader_hears = leader.peers_silent_s.get(uuid, 0.0) <= limit
        report = server.tablets.get(tablet_id)
        if self.m.ts.silent_for(uuid) > limit:
            if self.m.ts.silence_heard(uuid) <= limit:
                # silent to this master because it heard no server for a while (cut off
                # itself): it judges the server once it has heard the others again for `limit`
                probe("master.rereplication.own_deafness_not_counted")
            elif leader_hears:
                probe("master.rereplication.silent_but_leader_hears")
            else:
                probe("master.rereplication.replace_silent")
                return True
        elif not leader_hears:
            if report is not None and report.state == "RUNNING":
                probe("master.rereplication.replace_unreachable_from_leader")
                return True
            if report is None or report.state != "FAILED":
                probe("master.rereplication.unreachable_from_leader_not_running")
        if report is None or report.state != "FAILED":
            return False
        probe("master.rereplication.replace_failed")
        self._failed_on.setdefault(tablet_id, set()).add(uuid)
        return True

    def _deletion(self, catalog: Catalog, tablet_id: str, ts_uuid: str) -> DeleteTablet | None:
        """The DeleteTablet a reported replica earns, if any (multi-master seed, Appendix A):
        - no catalog key at all: never deleted. Deleted records are kept forever (as None), so
          a key never seen means this master is behind, e.g. a deposed leader that has not
          noticed yet and is shown the tablets a newer leader created;
        - a deleted record: deleted, with no guard, since a deletion is never undone;
        - a replica the committed config left out: deleted only if its own committed config
          is no newer than the one the catalog recorded, so a member re-added since survives."""
        if not catalog.knows_tablet(tablet_id):
            probe("master.catalog.unknown_tablet_kept")
            if tablet_id not in self._unknown_reported:
                self._unknown_reported.add(tablet_id)
                log.warning("tablet %s reported by %s has no catalog record; not deleting it "
                            "(this master may be behind)", tablet_id, ts_uuid)
            return None
        record = catalog.tablet(tablet_id)
        if record is None:
            probe("master.reconcile.delete_deleted_tablet")
            return DeleteTablet(tablet_id)
        if self._evicted(record, tablet_id, ts_uuid):
            probe("master.reconcile.delete_evicted_replica")
            return DeleteTablet(tablet_id, cas_config_index=record.config_index)
        return None

    def _evicted(self, record: TabletRecord, tablet_id: str, ts_uuid: str) -> bool:
        """The catalog follows a committed config change that left `ts_uuid` out, and the
        leader's active config does not have it either."""
        if record.config_index is None or ts_uuid in record.member_uuids:
            return False
        leader = self.m.ts.leader_report(tablet_id)
        return leader is not None and ts_uuid not in {m[0] for m in leader[1].config}

    async def _follow_config_changes(self) -> None:
        """Write each tablet's newly committed config, as its leader reports it, to the catalog,
        so locations and the reconciler follow membership changes."""
        async with self.m._catalog_lock:
            catalog = self.m._catalog()
            ops = []
            for tid in list(self.m.ts.leaders):
                record = catalog.tablet(tid)
                leader = self.m.ts.leader_report(tid)
                if record is None or leader is None:
                    continue
                rep = leader[1]
                if rep.committed_config_index <= (record.config_index or 0):
                    continue
                servers = self.m.ts.servers
                peers = [servers[u].peer if u in servers else self.m.book.get(u)
                         for u, _ in rep.committed_config]
                if any(p is None for p in peers):
                    probe("master.catalog.follow_waits_for_address")
                    continue
                ops += write_tablet(msgspec.structs.replace(
                    record, config_index=rep.committed_config_index,
                    replicas=[[p.uuid, p.host, p.port] for p in peers]))
            if ops:
                probe("master.catalog.follows_config_change")
                await self.m._mutate(ops)
                log.info("catalog follows %d config change(s)", len(ops))


async def _quietly(coro) -> None:
    try:
        await coro
    except RpcError as e:
        log.debug("%s", e)


async def _bounded(calls: Sequence[Callable[[], Awaitable[Any]]]) -> None:
    """Makes `calls` at most ROUND_CALLS_IN_FLIGHT at a time, each quietly (a failed call is
    made again by a later round)."""
    gate = asyncio.Semaphore(ROUND_CALLS_IN_FLIGHT)

    async def one(call: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            await _quietly(call())
    await asyncio.gather(*(one(c) for c in calls))
