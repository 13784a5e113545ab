"""Seed 05's StartTabletCopy guards, on real tablet servers over loopback RPC: a copy never
wipes a running replica that the caller's retained log can still catch up, nor one in another
state than the caller expects; copies onto a tombstone, or over a replica that is really behind,
go ahead; and the leader restarts a copied peer's progress from what the copy installed."""

from __future__ import annotations

import asyncio
import os

import pytest
from tserver_helpers import (
    TABLET,
    create,
    direct,
    sole_leader,
    sole_replica_with_rows,
    start_server,
    wait_for,
    write_rows,
)

from harness.sim.script import ScriptCluster
from node import probes
from node.consensus import FollowerLostEntries, HardState
from node.protocol import DeleteTablet, Read, StartTabletCopy, TabletCopyResult
from node.rpc import ErrorCode, RpcError
from node.tablet.ops import Read as Get
from node.tablet.superblock import DataState, OpId, Superblock
from node.tserver.tablet_manager import TabletState
from node.wal import LogOptions


def guards(r) -> dict:
    """What a leader sends: the OpId its retained log starts at, its match for the peer."""
    log = r.core.log
    return {"retained_from": OpId(log.offset_term, log.offset), "peer_match": log.last_index()}


async def call_copy(ts, target, req: StartTabletCopy) -> TabletCopyResult:
    return await ts.rpc_client.call(target.me.addr, "ts.start_tablet_copy", req, TabletCopyResult,
                                    to_uuid=target.me.uuid, timeout=30.0)


def test_copy_onto_an_up_to_date_running_replica_is_refused_and_its_data_survives(tmp_path):
    """The bug: any caller whose term was not older tombstoned a RUNNING replica. Here the
    only replica of a tablet, leader and fully up to date, is told to copy (from itself, as a
    confused leader would send): before the fix it was tombstoned and, the copy failing, its
    rows were gone."""

    async def main():
        ts, r = await sole_replica_with_rows(tmp_path / "a")
        try:
            for req in (StartTabletCopy(TABLET, ts.me, r.term, "RUNNING", **guards(r)),
                        StartTabletCopy(TABLET, ts.me, r.term + 5)):  # no guards at all
                with pytest.raises(RpcError) as e:
                    await call_copy(ts, ts, req)
                assert e.value.code == ErrorCode.REPLICA_NOT_BEHIND, e.value
            assert ts.replicas.get(TABLET) is r and ts.tablets.state(TABLET) != TabletState.TOMBSTONED
            sb = Superblock.load(ts.tablets.paths(TABLET).superblock)
            assert sb.data_state == DataState.READY
            got = await direct(ts.service.on_read, Read(TABLET, Get("k2")))
            assert got.result.ok and got.result.value == 2
            # Kudu's tablet-copy design: expecting another state than the replica's is ILLEGAL_STATE
            with pytest.raises(RpcError) as e:
                await call_copy(ts, ts, StartTabletCopy(TABLET, ts.me, r.term, "TOMBSTONED",
                                                        **guards(r)))
            assert e.value.code == ErrorCode.ILLEGAL_STATE
            assert ts.replicas.get(TABLET) is r
        finally:
            await ts.stop()

    with probes.expect("copy.refused.not_behind", "copy.refused.state_mismatch"):
        asyncio.run(main())


async def _a_snapshotting_and_b(tmp_path) -> tuple:
    """Two tablet servers: a snapshots every 5 entries and keeps 2 behind its snapshot."""
    a = await start_server(tmp_path / "a", snapshot_interval_entries=5, log_retain_entries=2)
    return a, await start_server(tmp_path / "b")


async def _leading_with_12_rows(ts):
    """The tablet created on `ts` alone, its replica leading, 12 rows written; the replica."""
    await create(ts, [ts.me])
    r = await sole_leader(ts)
    await write_rows(ts, 12)
    return r


def test_copy_over_a_replica_behind_the_leaders_retained_log_goes_ahead(tmp_path):
    async def main():
        a, b = await _a_snapshotting_and_b(tmp_path)
        try:
            ra = await _leading_with_12_rows(a)
            await wait_for(lambda: ra.core.log.offset > 0, "the leader to compact its log")
            # b runs a replica of the tablet whose log does not hold a's first retained op
            await create(b, [b.me])
            await sole_leader(b)
            req = StartTabletCopy(TABLET, a.me, ra.term, "RUNNING", **guards(ra))
            res = await call_copy(a, b, req)
            assert res.installed.index >= ra.core.log.offset  # a's snapshot: the copy's base
            rb = b.replicas[TABLET]
            assert rb.state.last_applied_index == res.installed.index
            # ... and a's WAL after it, to its last op: pending on b until a leader commits it
            assert res.last_logged == OpId(*ra.log_bounds()[1])
            assert rb.holds(res.last_logged.index, res.last_logged.term)
        finally:
            await b.stop()
            await a.stop()

    asyncio.run(main())


def test_copy_onto_a_tombstone_goes_ahead_when_the_caller_expects_one(tmp_path):
    async def main():
        a = await start_server(tmp_path / "a")
        b = await start_server(tmp_path / "b")
        try:
            await create(a, [a.me])
            ra = await sole_leader(a)
            await write_rows(a, 4)
            await create(b, [b.me])
            await sole_leader(b)
            await b.service.on_delete_tablet(DeleteTablet(TABLET))
            assert b.tablets.state(TABLET) == TabletState.TOMBSTONED
            with pytest.raises(RpcError) as e:  # the caller thinks b has no replica at all
                await call_copy(a, b, StartTabletCopy(TABLET, a.me, ra.term, "MISSING", **guards(ra)))
            assert e.value.code == ErrorCode.ILLEGAL_STATE and b.tablets.state(TABLET) == TabletState.TOMBSTONED
            # the leader's own path: its copy loop's request, then its progress reset
            await a.copies.send(StartTabletCopy(TABLET, a.me, ra.term, "TOMBSTONED", **guards(ra)), b.me)
            rb = b.replicas[TABLET]
            assert b.tablets.state(TABLET) != TabletState.TOMBSTONED
            assert rb.log_bounds()[1] == ra.log_bounds()[1]  # a's whole log, all 4 rows in it
        finally:
            await b.stop()
            await a.stop()

    asyncio.run(main())


def _cut_snapshot(ra) -> str:
    snapshot = ra.snapshots.path_for(ra.snapshots.indexes()[-1])
    os.truncate(snapshot, os.path.getsize(snapshot) // 2)
    return "snapshot is damaged"


def _lost_snapshot(ra) -> str:
    """Every snapshot lost, and the log collected below the newest: nothing to send from 1."""
    assert ra.wal.segments() and ra.core.log.offset > 0
    for index in ra.snapshots.indexes():
        os.unlink(ra.snapshots.path_for(index))
    return "the WAL starts at"


def _snapshots_settled(ra) -> bool:
    """A snapshot saved, with its log collected, and no other due: one a write made due saved
    after the damage, and undid it (a copy then sent the new snapshot)."""
    return bool(ra.snapshots.indexes()) and not ra._snapshotting and (
        ra.state.last_applied_index - ra._last_snapshot < ra.options.snapshot_interval_entries)


def _closed_past_snapshot(ra) -> list:
    """The closed segments holding entries after the newest snapshot: ones a copy sends."""
    after = ra.snapshots.indexes()[-1]
    return [s for s in ra.wal._closed if s.footer.num_entries and s.footer.max_index > after]


def _lost_segment(ra) -> str:
    os.unlink(_closed_past_snapshot(ra)[0].path)
    return "segment of the log is missing"


def _lost_superblock(ra) -> str:
    os.unlink(ra.paths.superblock)
    return "superblock"


@pytest.mark.parametrize("damage, probe, source", [
    (_lost_superblock, "copy.source.superblock_unreadable", TabletState.FAILED),
    (_cut_snapshot, "copy.source.snapshot_damaged", TabletState.RUNNING),
    (_lost_snapshot, "copy.pins.wal_starts_after_snapshot", TabletState.RUNNING),
    (_lost_segment, "copy.pins.wal_segment_missing", TabletState.RUNNING),
], ids=["lost-superblock", "cut-snapshot", "lost-snapshot", "lost-segment"])
def test_a_source_refuses_to_send_files_damaged_at_rest_and_the_receiver_stays_a_tombstone(
        tmp_path, damage, probe, source):
    """The leader's superblock loses its name on disk, or its newest snapshot its second half
    or its name, or a WAL segment after it its name (a lost extent, a file system check, an
    operator's truncate or rm), while the leader runs from memory. A copy from it is refused
    at its source (ILLEGAL_STATE, saying what is damaged), and the receiver's tombstone stays
    as it was; the source's replica fails on its superblock, which nothing would rewrite.
    Before, the cut snapshot was sent with its cut length, and the receiver's open refused it:
    FAILED there, for an operator, on the source's damage (swarm seed 54000091); and a lost
    segment or superblock was a FileNotFoundError no guard answered (REMOTE_ERROR), found by
    copy-shrink's lost files and the lost-files bundle."""
    async def main():
        a = await start_server(tmp_path / "a", snapshot_interval_entries=5, log_retain_entries=2,
                               log=LogOptions(log_segment_size_mb=1 / 4096))
        b = await start_server(tmp_path / "b")
        try:
            ra = await _leading_with_12_rows(a)
            await wait_for(lambda: _snapshots_settled(ra), "the last snapshot due")
            for i in range(40 if damage is _lost_segment else 0):
                # a group commit may have put every row past the snapshot in the active segment
                if _closed_past_snapshot(ra):
                    break
                await write_rows(a, 1, prefix=f"more{i}-")
                await wait_for(lambda: _snapshots_settled(ra), "the last snapshot due")
            said = damage(ra)
            await create(b, [b.me])
            await sole_leader(b)
            await b.service.on_delete_tablet(DeleteTablet(TABLET))
            with probes.expect(probe), pytest.raises(RpcError) as e:
                await call_copy(a, b, StartTabletCopy(TABLET, a.me, ra.term, "TOMBSTONED",
                                                      **guards(ra)))
            assert e.value.code == ErrorCode.ILLEGAL_STATE, e.value
            assert said in str(e.value), e.value
            assert b.tablets.state(TABLET) == TabletState.TOMBSTONED
            # a superblock nothing rewrites fails the source (its next start would refuse it);
            # a snapshot or segment, which a later snapshot and GC supersede, does not
            await wait_for(lambda: a.tablets.state(TABLET) == source, f"the source {source}")
        finally:
            await b.stop()
            await a.stop()

    asyncio.run(main())


def _n3_acknowledged_five_then_crashed() -> tuple[ScriptCluster, object]:
    """n1 leads; n3 acknowledged index 5, then crashed. Returns (cluster, leader core)."""
    c = ScriptCluster()
    c.elect("n1")
    c.stabilize()
    for i in range(4):
        c.do("n1", "propose", b"w%d" % i)
    c.stabilize()
    leader = c.core("n1")
    assert leader.progress["n3"].match == 5
    c.crash("n3")
    return c, leader


def test_leader_restarts_a_copied_peers_progress_from_the_copy():
    """A peer that acknowledged index 5, was tombstoned (losing that log) and copied at index 3:
    the leader's old match (5) would count entries it no longer holds. The copy's completion
    (reset_progress) starts again from 3, so no loss is reported."""
    c, leader = _n3_acknowledged_five_then_crashed()
    c.restart_from_copy("n3", 3, leader.log.term_at(3), [], c.disks["n1"]["config"])
    c.do("n1", "reset_progress", "n3", 3, leader.term)
    c.do("n1", "propose", b"after the copy")
    c.stabilize()
    assert c.core("n3").log.last_index() == leader.log.last_index() == 6
    assert leader.progress["n3"].match == 6 and not leader.progress["n3"].needs_copy
    assert not [e for e in c.events["n1"] if isinstance(e, FollowerLostEntries)]
    c.do("n1", "reset_progress", "n3", 1, leader.term - 1)  # a copy from an older term: ignored
    assert leader.progress["n3"].match == 6


def test_a_follower_that_lost_acknowledged_entries_is_rebuilt_not_refused_forever():
    """n3 acknowledged index 5, then came back with a log ending at 3 (its storage lied: an
    fsync that was not, or the copy reset the leader never heard of). The leader probed only
    above the old match, so n1 and n3 bounced the same refused append at network speed, for
    ever (the whole-stack simulator spent 40 s of CPU on one seed). Now the leader reports the
    loss and rebuilds n3 from where it is."""
    c, leader = _n3_acknowledged_five_then_crashed()
    del c.disks["n3"]["log"][3:]  # entries 4 and 5, acknowledged, are gone
    c.restart("n3")
    c.do("n1", "propose", b"after the loss")
    with probes.expect("raft.leader.follower_lost_acknowledged"):
        c.deliver(limit=300)
    assert not c.queue, "the refused append keeps bouncing"
    assert c.core("n3").log.last_index() == leader.log.last_index() == 6
    assert leader.progress["n3"].match == 6
    lost = [e for e in c.events["n1"] if isinstance(e, FollowerLostEntries)]
    assert [(e.peer, e.acknowledged) for e in lost] == [("n3", 5)] and lost[0].has <= 3


def test_a_copy_that_brings_a_non_voter_up_to_the_commit_index_promotes_it():
    """A NON_VOTER (+promote) whose copy holds every committed entry is promoted as soon as it
    answers the append the leader sends it at the copy's end, not only after the next write
    commits. The copy's completion alone is no acknowledgement (the next test shows why)."""
    c = ScriptCluster(learners=("n4",))
    c.crash("n4")  # it never sees a thing: the leader copies it
    c.elect("n1")
    c.do("n1", "propose", b"w")
    c.stabilize()
    leader = c.core("n1")
    assert not leader.active_config.is_voter("n4")
    c.restart_from_copy("n4", leader.commit, leader.log.term_at(leader.commit), [],
                        c.disks["n1"]["config"])
    c.do("n1", "reset_progress", "n4", leader.commit, leader.term)
    assert not leader.active_config.is_voter("n4") and leader.progress["n4"].match == 0
    c.deliver(limit=2)  # the append just past the copy, and n4's answer
    assert leader.active_config.is_voter("n4")  # the promotion is proposed on that answer
    c.stabilize()
    assert leader.committed_config.is_voter("n4")


def test_a_finished_copy_is_no_acknowledgement_so_a_deposed_receiver_commits_nothing():
    """n1 leads term T; n2 is cut off, so n1's write X cannot commit; n3 is
    tombstoned and n1 copies the tablet to it, X included. Meanwhile n3, voting from its
    tombstone, helps another candidate win term T+1 (here: its term moves on). The copy's end
    used to set n3's match to the copy's last entry, and n1's next write committed X through a
    replica that follows another leader: an acknowledged write that term T+1 overwrites. Now
    the copy sets only where replication goes on, and n3's answer to it, in term T+1, deposes
    n1 before anything commits."""
    c = ScriptCluster()
    c.elect("n1")
    c.stabilize()
    leader = c.core("n1")
    term, committed = leader.term, leader.commit
    c.crash("n2")
    c.crash("n3")
    x = c.do("n1", "propose", b"X")
    c.stabilize()
    assert leader.commit == committed  # X waits for a second voter
    # n3 comes back by a copy holding X, but in term T+1: it voted for n2 while it was copied
    c.disks["n3"]["hard"] = HardState(term + 1, "n2", 0)
    c.restart_from_copy("n3", x, term, [], c.disks["n1"]["config"])
    assert c.core("n3").term == term + 1
    c.do("n1", "reset_progress", "n3", x, term)
    c.do("n1", "propose", b"after the copy")  # the next write: it used to commit X
    assert leader.commit == committed and leader.progress["n3"].match == 0
    c.stabilize()
    assert leader.commit == committed and leader.role.name != "LEADER"
