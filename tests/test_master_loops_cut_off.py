"""A leader master cut off from the tablet servers (not the servers from each other) must not
replace healthy replicas (node/master/ts_manager.py, reconciler.py).

The reconciler counted a member failed once ITS OWN view of the member's server was older than
follower_unavailable_considered_failed_sec. A master cut off from every server sees all of them
fall silent. With a limit above the master's 10 s unresponsive_after_s (production's 300 s), the
links come back and the heartbeats return one by one: a round after the tablet leader's and a
spare's heartbeat but before a healthy follower's counted that follower failed and added the
spare; once the follower's heartbeat came nothing was failed any more, so nothing was removed,
and the tablet kept RF+1 voters for good. With a limit below it (the simulator's 5 s), the round
decided while the master was still cut off (every member silent past the limit, the leader's
report still live) and the change went through as the links returned.

Now the master counts a server's silence only while it hears other servers, and only since it
has heard them again after hearing none for three heartbeat periods; and while the tablet
leader's own server has been silent past the limit, its report is as old and the tablet is
left alone. A master cut off from some servers only, which still hears the others, is the
simulator's `master-cut` fault (harness/sim/stack_master_cut.py): a member is silent only if
its tablet's leader does not hear it either.

Whole-stack simulator (virtual time): one master, four tablet servers, a table of one tablet at
RF 3, moved once first (an operator's add and remove) so the catalog follows a changed config."""

from __future__ import annotations

import asyncio

import pytest
from waiting import until_checked

from harness.sim import stack
from harness.sim.stack import CLIENT_HOST, MASTER_PORT, StackConfig, StackSim
from node import probes
from node.client import TesseraClient
from node.master.ts_manager import TSManager
from node.protocol import ServerStatus
from node.rpc import RpcClient


def _cut_off(tmp_path, staged: bool, limit_s: float) -> dict:
    """The master is cut off from all four servers for `limit_s` + 3 s; then its links come
    back: with `staged`, the leader's and the spare's first and the followers' 2.5 s later."""
    sim = StackSim(StackConfig(seed=11, masters=1, tservers=4), tmp_path)
    for h in sim.masters + sim.tservers:
        sim._boot(h)
    mhost = sim.masters[0]
    out: dict = {"changes": []}

    async def scenario():
        master = sim.servers[mhost]
        await until_checked(lambda: len(master.ts.live()) == 4, "4 live tablet servers", 60)
        client = TesseraClient([(mhost, MASTER_PORT)], timeout=30.0,
                               rpc=RpcClient(connect_timeout=1.0, local_host=CLIENT_HOST))
        locs = await client.create_table("t", num_tablets=1, replication_factor=3)
        tid = locs.tablets[0].tablet_id
        await until_checked(lambda: master.ts.leader_report(tid), "a tablet leader reported", 60)
        by_uuid = {sim.servers[h].uuid: h for h in sim.tservers}
        members = {p.uuid for p in locs.tablets[0].replicas}
        fourth = next(u for u in by_uuid if u not in members)
        await client.change_replica(tid, "add", fourth)

        def voters():
            rep = master.ts.leader_report(tid)
            return rep and {u for u, kind in rep[1].committed_config if kind == "VOTER"}
        await until_checked(lambda: fourth in (voters() or ()), "the fourth server promoted", 60)
        moved = next(u for u in members if u != master.ts.leader_report(tid)[0].uuid)
        await client.change_replica(tid, "remove", moved)
        await until_checked(lambda: (master._catalog().tablet(tid).config_index or 0) > 0
                            and moved not in master._catalog().tablet(tid).member_uuids,
                            "the catalog follows the move", 60)
        await asyncio.sleep(3.0)
        rep = master.ts.leader_report(tid)
        leader, spare = by_uuid[rep[0].uuid], by_uuid[moved]
        followers = [by_uuid[u] for u, _ in rep[1].committed_config if u != rep[0].uuid]

        orig = master.on_change_replica

        async def record(req):
            out["changes"].append((req.op, by_uuid.get(req.ts_uuid)))
            return await orig(req)
        master.on_change_replica = record
        for h in sim.tservers:  # the tablet servers still reach each other
            sim.net.cut(mhost, h)
        await asyncio.sleep(limit_s + 3.0)
        if staged:
            sim.net.uncut(mhost, leader)
            sim.net.uncut(mhost, spare)
            await asyncio.sleep(2.5)
            for h in followers:
                sim.net.uncut(mhost, h)
        else:
            for h in sim.tservers:
                sim.net.uncut(mhost, h)
        await asyncio.sleep(20.0)
        rep = master.ts.leader_report(tid)
        out["final_config"] = sorted((by_uuid[u], kind) for u, kind in rep[1].committed_config)
        out["all_heartbeating"] = all(master.ts.silent_for(sim.servers[h].uuid) < 2
                                      for h in sim.tservers)
        await client.close()

    try:
        sim.loop.run_until_complete(sim.loop.spawn(CLIENT_HOST, asyncio.wait_for(scenario(), 600)))
    finally:
        sim.loop.close()
        sim.loop.set_exception_handler(lambda _loop, _context: None)
    return out


@pytest.mark.parametrize("limit_s,staged,guard", [
    (12.0, True, "master.rereplication.own_deafness_not_counted"),
    (5.0, False, "master.rereplication.leader_report_stale")],
    ids=["limit-12s-links-back-one-by-one", "limit-5s-links-back-at-once"])
def test_a_master_cut_off_from_every_server_replaces_no_healthy_member(tmp_path, monkeypatch,
                                                                       limit_s, staged, guard):
    """`guard`: the rule that kept the change from being made. With the links back one by one
    the leader's report is fresh and a follower not back yet is not counted; with a limit below
    the cut, the round meets every member silent while the leader's report is as old."""
    monkeypatch.setattr(stack, "FAILED_AFTER_S", limit_s)
    with probes.expect("master.ts.hearing_resumed", guard):
        out = _cut_off(tmp_path, staged, limit_s)
        assert out["all_heartbeating"], out
        assert out["changes"] == [], (
            f"no server was ever down, yet the master changed the tablet's config: "
            f"{out['changes']}; committed config at the end: {out['final_config']}")


def test_silence_counts_only_while_and_since_the_master_hears_other_servers():
    clock = [100.0]
    ts = TSManager(unresponsive_after_s=10.0, now=lambda: clock[0], deaf_after_s=3.0)
    for uuid in "ab":
        ts.heard(ServerStatus(uuid, uuid, 1, []))
    clock[0] = 102.0
    ts.heard(ServerStatus("a", "a", 1, []))
    clock[0] = 150.0  # b heard last at 100, a at 102: the master heard no one since
    assert ts.silent_for("b") == 50.0 and ts.silence_heard("b") == 0.0
    for t in (150.0, 152.0, 154.0, 156.0):  # hearing a again from 150, every 2 s
        clock[0] = t
        ts.heard(ServerStatus("a", "a", 1, []))
    clock[0] = 157.0
    assert ts.silent_for("b") == 57.0 and ts.silence_heard("b") == 7.0
    assert ts.silence_heard("a") == 1.0
    clock[0] = 159.5  # nothing heard for 3.5 s: deaf again
    assert ts.silence_heard("b") == 0.0
