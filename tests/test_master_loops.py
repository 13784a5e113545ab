"""The masters' and tablet servers' background loops, and what the leader master makes of a
tablet's reports (node/master/server.py, reconciler.py, ts_manager.py, node/tserver/heartbeater.py).

- The leader master's reconcile loop caught only ReplicaError and RpcError. A follower master
  saves its peer book in that loop when it learns a new master's address, and an OSError from
  that save (EIO, ENOSPC) ended the task: nobody reads its exception, and the master, once it
  led the catalog, answered DDL but never reconciled again (a dropped table's replicas stayed).
- The tablet server's heartbeater had no guard at all: an OSError saving the peer book (a new
  tablet server's address, from the leader master's answer) ended it, and the server, healthy
  and serving, went silent to the masters, which then replaced every replica it held.
- The reconciler re-sent ts.create_tablet, one tablet after another, for every tablet still on
  its creation config that some member did not report, including members on servers the master
  cannot reach: each cost the call's 5 s timeout, every round, and everything else the round
  does (deleting a dropped table's replicas) waited behind them. As Kudu, the creation is now
  re-sent only while the tablet has never reported a leader (CREATING), only to live members
  that do not report it, and the round's calls go out concurrently (bounded).
- TSManager kept the highest term any server reported leading a tablet and ignored every
  lower-term LEADER report for good. After an unsafe config change the survivor leads in its own
  term, which may be lower: the master never had a leader for the tablet again (locations named
  the lost server, add-replica was refused, re-replication never ran).

Whole-stack simulator (virtual time), but for the round's concurrency, which runs the real
Reconciler against a stand-in master."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from waiting import until_checked

from harness.sim.stack import CLIENT_HOST, MASTER_PORT, StackConfig, StackSim
from harness.sim.stack_masters import TSERVER_PORT, boot_spare, fail_root_syncs, leader_master
from node import probes
from node.client import TesseraClient
from node.master import reconciler as reconciler_module
from node.master.catalog import CATALOG, Catalog, TabletRecord, write_tablet
from node.master.reconciler import Reconciler
from node.master.ts_manager import TSManager
from node.protocol import (
    Ack,
    AddMaster,
    ConfigState,
    LeaderStepDown,
    Peer,
    ServerStatus,
    TableLocations,
    TableName,
    TabletReport,
    UnsafeChangeConfig,
)
from node.rpc import RpcClient, RpcError
from node.tools.admin import started_master


def _run(sim: StackSim, scenario) -> None:
    try:
        sim.loop.run_until_complete(sim.loop.spawn(CLIENT_HOST, asyncio.wait_for(scenario, 600)))
    finally:
        sim.loop.close()
        sim.loop.set_exception_handler(lambda _loop, _context: None)


def _client(hosts: list[str]) -> TesseraClient:
    return TesseraClient([(h, MASTER_PORT) for h in hosts], timeout=30.0,
                         rpc=RpcClient(connect_timeout=1.0, local_host=CLIENT_HOST))


def test_a_failed_peer_book_save_does_not_end_the_masters_reconcile_loop(tmp_path):
    """Three masters, three tablet servers, a fourth master added; a follower's disk fails
    directory syncs for 3 s while it saves the new master's address. Later handed the catalog's
    leadership, it must still reconcile: a dropped table's replicas get deleted."""
    sim = StackSim(StackConfig(seed=7, masters=3, tservers=3), tmp_path)
    for h in sim.masters + sim.tservers:
        sim._boot(h)
    out: dict = {}

    async def scenario():
        leader = await until_checked(lambda: leader_master(sim), "a leader master", 60)
        follower = next(h for h in sim.masters if h != leader)
        f = sim.servers[follower]
        client = _client(sim.masters)
        locs = await client.create_table("t", num_tablets=2, replication_factor=3)
        ids = [t.tablet_id for t in locs.tablets]

        spare = boot_spare(sim)
        info = await started_master(client, (spare, MASTER_PORT), wait=30.0)
        await client.rpc.call((leader, MASTER_PORT), "master.add_master",
                              AddMaster(Peer(info.uuid, spare, MASTER_PORT)), ConfigState,
                              to_uuid="", timeout=10.0)
        await until_checked(lambda: any(m.uuid == info.uuid for m in
                                        f.replicas[CATALOG].core.active_config.members),
                            "the new master in the follower's config", 60, period=0.001)
        out["knew_already"] = f.book.get(info.uuid) is not None
        failing = fail_root_syncs(sim, follower)
        await asyncio.sleep(3.0)
        failing[0] = False
        out["catalog_failed"] = f.replicas[CATALOG].failed
        await asyncio.sleep(5.0)
        task = f._tasks[-1]  # appended by Master._started
        assert task.get_coro().__name__ == "_bootstrap_then_reconcile"
        out["task_error"] = repr(task.exception()) if task.done() else None

        # an operator hands the follower the catalog's leadership
        await client.rpc.call((leader, MASTER_PORT), "consensus.leader_step_down",
                              LeaderStepDown(CATALOG, f.uuid), Ack,
                              to_uuid=sim.servers[leader].uuid, timeout=10.0)
        await until_checked(lambda: f.replicas[CATALOG].leader_ready, "the follower leads", 60)
        await client.delete_table("t")

        def deleted():
            return all(sim.servers[h].tablets.state(tid) is None
                       or sim.servers[h].tablets.state(tid).name != "RUNNING"
                       for h in sim.tservers for tid in ids)
        try:
            await until_checked(deleted, "the dropped table's replicas deleted", 60)
            out["deleted"] = True
        except AssertionError:
            out["deleted"] = False
        await client.close()

    with probes.expect("master.reconcile.round_failed"):
        _run(sim, scenario())
        assert not out["knew_already"], "setup: the follower had learned the address already"
        assert not out["catalog_failed"], out
        assert out["task_error"] is None, f"the reconcile task died: {out['task_error']}"
        assert out["deleted"], f"the dropped table's replicas were never deleted: {out}"


def test_a_failed_peer_book_save_does_not_silence_a_tablet_server(tmp_path):
    """One master, four tablet servers, a fifth joining later; while the others learn its
    address, the first one's disk fails directory syncs for 3 s. It must go on heartbeating
    and keep its membership of every tablet."""
    sim = StackSim(StackConfig(seed=9, masters=1, tservers=5), tmp_path)
    mhost = sim.masters[0]
    first, late = sim.tservers[0], sim.tservers[4]
    for h in [mhost] + sim.tservers[:4]:
        sim._boot(h)
    out: dict = {}

    async def scenario():
        master = sim.servers[mhost]
        await until_checked(lambda: len(master.ts.live()) == 4, "4 live tablet servers", 60)
        client = _client([mhost])
        await client.create_table("t", num_tablets=4, replication_factor=3)
        ts = sim.servers[first]
        await asyncio.sleep(3.0)
        out["held"] = sorted(ts.tablets.entries)
        failing = fail_root_syncs(sim, first)
        sim._boot(late)
        await asyncio.sleep(3.0)
        failing[0] = False
        task = next(t for t in ts._tasks if t.get_coro().__name__ == "run"
                    and "Heartbeater" in t.get_coro().__qualname__)
        out["heartbeater_error"] = repr(task.exception()) if task.done() else None
        await asyncio.sleep(20.0)
        out["silent_for"] = master.ts.silent_for(ts.uuid)
        out["member_of"] = sorted(
            tid for tid in out["held"] if (rep := master.ts.leader_report(tid)) is not None
            and ts.uuid in {u for u, _ in rep[1].committed_config})
        await client.close()

    with probes.expect("tserver.heartbeat.beat_failed"):
        _run(sim, scenario())
        assert out["heartbeater_error"] is None, f"the heartbeater died: {out}"
        assert out["silent_for"] < 2.0, out
        assert out["member_of"] == out["held"], out


def _one_master_booted(tmp_path: Path, seed: int, tservers: int) -> tuple[StackSim, str]:
    """A simulated cluster of one master and `tservers` tablet servers, every host booted;
    the sim and the master's host."""
    sim = StackSim(StackConfig(seed=seed, masters=1, tservers=tservers), tmp_path)
    for h in sim.masters + sim.tservers:
        sim._boot(h)
    return sim, sim.masters[0]


def test_an_unreachable_member_does_not_stall_the_round(tmp_path):
    """One master, three tablet servers; the master is cut off from the third. The round must
    not re-send nine tablets' creations to it (5 s each): a table dropped now has its replicas
    on the two others deleted within a few round periods (2 s)."""
    sim, mhost = _one_master_booted(tmp_path, seed=5, tservers=3)
    t1, t2, t3 = sim.tservers
    out: dict = {}

    async def scenario():
        master = sim.servers[mhost]
        await until_checked(lambda: len(master.ts.live()) == 3, "3 live tablet servers", 60)
        client = _client([mhost])
        big = await client.create_table("big", num_tablets=8, replication_factor=3)
        small = await client.create_table("small", num_tablets=1, replication_factor=3)
        small_id = small.tablets[0].tablet_id
        every = big.tablets + small.tablets
        await until_checked(lambda: all(
            (s := sim.servers[h].tablets.state(t.tablet_id)) is not None and s.name == "RUNNING"
            for h in (t1, t2, t3) for t in every), "every replica running", 60)
        await until_checked(lambda: all(all(t.tablet_id in s.tablets for t in every)
                                        for s in master.ts.servers.values()),
                            "every replica reported to the master", 60)
        await asyncio.sleep(3)

        rounds = []
        run = master.reconciler.run

        async def timed():
            start = asyncio.get_running_loop().time()
            try:
                await run()
            finally:
                rounds.append(asyncio.get_running_loop().time() - start)
        master.reconciler.run = timed
        sim.net.cut(t3, mhost)
        await until_checked(lambda: t3 not in {s.peer.host for s in master.ts.live()},
                            "t3 no longer live", 60)
        await asyncio.sleep(5)
        started = asyncio.get_running_loop().time()
        await client.delete_table("small")

        def gone():
            return all((s := sim.servers[h].tablets.state(small_id)) is None
                       or s.name == "TOMBSTONED" for h in (t1, t2))
        try:
            await until_checked(gone, "the dropped table's replicas deleted on t1, t2", 200)
            out["delete_s"] = asyncio.get_running_loop().time() - started
        except AssertionError:
            out["delete_s"] = None
        out["longest_round_s"] = max(rounds)
        await client.close()

    with probes.expect("master.reconcile.creation_left_to_leader"):
        _run(sim, scenario())
        assert out["delete_s"] is not None and out["delete_s"] < 10.0, out
        assert out["longest_round_s"] < 5.0, out


def test_the_survivor_of_an_unsafe_recovery_is_taken_for_the_leader(tmp_path):
    """One master, four tablet servers, a tablet at RF 3. A follower is cut off from the two
    others while they change leaders twice; then they are lost for good and the operator runs
    unsafe_change_config on the survivor, which leads in a term below the last one reported.
    The master must take it for the leader: locations name it and add-replica goes through."""
    sim, mhost = _one_master_booted(tmp_path, seed=4, tservers=4)
    out: dict = {}

    async def scenario():
        master = sim.servers[mhost]
        await until_checked(lambda: len(master.ts.live()) == 4, "4 live tablet servers", 60)
        client = _client([mhost])
        locs = await client.create_table("t", num_tablets=1, replication_factor=3)
        tid = locs.tablets[0].tablet_id
        await until_checked(lambda: master.ts.leader_report(tid), "a leader reported", 60)
        by_uuid = {sim.servers[h].uuid: h for h in sim.tservers}
        members = [by_uuid[p.uuid] for p in locs.tablets[0].replicas]
        spare = next(h for h in sim.tservers if h not in members)
        first_leader = by_uuid[master.ts.leader_report(tid)[0].uuid]
        survivor = next(h for h in members if h != first_leader)
        lost = [h for h in members if h != survivor]
        for h in lost:
            sim.net.cut(survivor, h)
        for _ in range(2):  # two leader changes the survivor does not see
            rep = await until_checked(lambda: master.ts.leader_report(tid), "a leader", 60)
            before = rep[1].term
            await client.rpc.call((by_uuid[rep[0].uuid], TSERVER_PORT),
                                  "consensus.leader_step_down", LeaderStepDown(tid), Ack,
                                  to_uuid=rep[0].uuid, timeout=5.0)
            await until_checked(lambda before=before: (r := master.ts.leader_report(tid))
                                is not None and r[1].term > before,
                                "a new leader in a higher term", 60)
        out["reported_term"] = master.ts.leaders[tid][0]
        for h in lost:
            sim._crash(h)
            sim.net.uncut(survivor, h)
        su = sim.servers[survivor].uuid
        for _ in range(100):
            try:
                await client.rpc.call((survivor, TSERVER_PORT), "ts.unsafe_change_config",
                                      UnsafeChangeConfig(tid, [su]), ConfigState, to_uuid=su,
                                      timeout=5.0)
                break
            except RpcError:
                await asyncio.sleep(0.5)
        await until_checked(lambda: sim.servers[survivor].replicas[tid].leader_ready,
                            "the survivor leads its config of one", 60)
        out["survivor_term"] = sim.servers[survivor].replicas[tid].term
        await asyncio.sleep(10.0)
        rep = master.ts.leader_report(tid)
        out["leader"] = by_uuid[rep[0].uuid] if rep else None
        table = await client.rpc.call((mhost, MASTER_PORT), "master.table_locations",
                                      TableName("t"), TableLocations, to_uuid="", timeout=5.0)
        out["location_leader"] = by_uuid.get(table.tablets[0].leader)
        out["survivor"] = survivor
        try:
            await client.change_replica(tid, "add", sim.servers[spare].uuid)
            out["add"] = "ok"
        except RpcError as e:
            out["add"] = f"{e.code.name}: {e}"
        await client.close()

    with probes.expect("master.leader.lower_term_taken"):
        _run(sim, scenario())
        assert out["survivor_term"] < out["reported_term"], f"setup: {out}"
        assert out["leader"] == out["survivor"], out
        assert out["location_leader"] == out["survivor"], out
        assert out["add"] == "ok", out


# -- the round's calls, on the real Reconciler with a stand-in master ------------------------

class _Master:
    """What Reconciler.run reads of node.master.server.Master; its calls to tablet servers are
    counted (how many at once) and answered after a delay, as by a server that is slow."""

    def __init__(self, ts: TSManager, data: dict):
        self.ts, self.data = ts, data
        self.opts = SimpleNamespace(follower_unavailable_considered_failed_sec=300.0)
        replica = SimpleNamespace(leader_ready=True, state=SimpleNamespace(data=data))
        self.tablets = SimpleNamespace(replicas={CATALOG: replica})
        self._catalog_lock = asyncio.Lock()
        self.rpc_client = self
        self.in_flight = self.most_in_flight = 0
        self.deleted: list[tuple[str, str]] = []
        self.created: list[tuple[str, set[str]]] = []

    def _catalog(self) -> Catalog:
        return Catalog(self.data)

    async def _busy(self) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1

    async def call(self, addr, method, req, _answer, *, to_uuid, timeout):
        assert method == "ts.delete_tablet"
        await self._busy()
        self.deleted.append((to_uuid, req.tablet_id))

    async def _create_replicas(self, table, t, only=None):
        await self._busy()
        self.created.append((t.id, set(t.member_uuids if only is None else only)))


def test_the_rounds_calls_go_out_together_and_creations_only_where_they_are_missing():
    """40 dropped tablets' replicas to delete, and 40 tablets never reported by one live member
    (another member is not live): the round makes its calls at most ROUND_CALLS_IN_FLIGHT at a
    time, not one after another; it sends a creation only to the live member that lacks the
    tablet, and none for a tablet that has had a leader (that one's leader copies it)."""
    clock = [1000.0]
    ts = TSManager(unresponsive_after_s=10.0, now=lambda: clock[0])
    n = 40
    peers = [["a", "a", 1], ["b", "b", 1], ["c", "c", 1]]
    dropped = [f"d-{i:04d}" for i in range(n)]
    creating = [TabletRecord(f"c-{i:04d}", "t", [i, n], peers) for i in range(n)]
    led = TabletRecord("led-0000", "t", [0, 1], peers)
    data = {key: value for t in creating + [led] for _, key, value in write_tablet(t)}
    data.update({f"tablet/{tid}": None for tid in dropped})

    def report(tid: str, role: str = "FOLLOWER") -> TabletReport:
        return TabletReport(tid, "t", "RUNNING", role=role, term=1)
    clock[0] = 900.0  # c was last heard long ago: not live
    ts.heard(ServerStatus("c", "c", 1, []))
    clock[0] = 1000.0
    ts.heard(ServerStatus("a", "a", 1, [report(t) for t in dropped]
                          + [report(t.id) for t in creating] + [report(led.id, "LEADER")]))
    ts.heard(ServerStatus("b", "b", 1, []))  # b lacks every tablet
    master = _Master(ts, data)
    with probes.expect("master.reconcile.creation_left_to_leader",
                       "master.reconcile.recreate_replicas"):
        asyncio.run(Reconciler(master).run())
        assert sorted(master.deleted) == [("a", t) for t in dropped]
        assert sorted(master.created) == [(t.id, {"b"}) for t in creating]
        assert master.most_in_flight == reconciler_module.ROUND_CALLS_IN_FLIGHT
