"""A copy must never install a log that ends behind the last op the replica logged (and so may
have acknowledged) before the copy: TabletManager._install compares the copy with the last OpId
the COPYING superblock starts from, and a COPYING or TOMBSTONED replica votes from it. Three
paths lost that OpId, so the copy was installed unchecked, or the replica voted as if it had
logged nothing:

- a copy whose files do not open leaves the replica FAILED under the READY superblock
  complete_install wrote, and READY dropped the tombstone's last OpId; once the master deleted
  (forgot) the FAILED replica, the next copy started from no OpId at all and installed a log
  ending at (1, 5) after the replica had logged (1, 10);
- a replica that failed while it ran (a failed fsync) knew its last op in memory, but deleting
  it recorded that nowhere: the copy replacing it installed a log behind what it acknowledged;
- a superblock lost at rest, while the consensus metadata and WAL remained, was taken for a
  brand-new replica (no superblock: never logged), so the copy's COPYING superblock said
  (0, 0) and the replica granted its vote to a candidate with an empty log. Then, as unknown,
  it let any copy install, one ending behind what the replica's own log held too.

Real tablet servers on loopback, real files."""

from __future__ import annotations

import asyncio
import errno

import pytest
from test_tombstone_votes import FakePeer, past_vote_lease
from tserver_helpers import TABLET, create, sole_leader, start_server, wait_for, write_rows

from node import durable, probes
from node.consensus import VoteRequest
from node.protocol import Ack, CopySession, DeleteTablet, StartTabletCopy
from node.rpc import ErrorCode, RpcClient, RpcError
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.superblock import DataState, KeyRange, OpId, Superblock
from node.tserver.tablet_manager import TabletState


async def _logged_then(dst, rows: int = 8):
    """`dst`'s tablet, led alone, with `rows` rows written: its replica."""
    await create(dst, [dst.me])
    r = await sole_leader(dst)
    await write_rows(dst, rows)
    return r


async def _source_behind(src, last: tuple[int, int]):
    """`src`'s tablet, led alone, with 3 rows and a snapshot: a log ending before `last`."""
    await create(src, [src.me])
    r = await sole_leader(src)
    await write_rows(src, 3)
    await wait_for(lambda: r.snapshots.indexes() and not r._snapshotting, "a snapshot at the source")
    assert r.last_logged() < last
    return r


async def _copy_refused_behind(dst, req: StartTabletCopy, last: tuple[int, int]) -> None:
    """The copy is refused for ending behind `last`, and the tablet stays a tombstone of it."""
    with pytest.raises(RpcError, match="behind the last op this replica logged") as e:
        await dst.copy_service.on_start_tablet_copy(req)
    assert e.value.code == ErrorCode.ILLEGAL_STATE, e.value
    assert dst.tablets.state(TABLET) == TabletState.TOMBSTONED and dst.tablets.replica(TABLET) is None
    sb = Superblock.load(dst.tablets.paths(TABLET).superblock)
    assert sb.data_state == DataState.TOMBSTONED and sb.tombstone_last_opid == OpId(*last), sb


async def _refused_from_its_own_log(dst, src, logged: tuple[int, int]) -> None:
    """A copy from `src`, whose log ends behind `logged`, onto `dst`'s replica whose
    superblock is gone: refused for ending behind what the replica's own log holds."""
    r = await _source_behind(src, logged)
    with probes.expect("copy.prepare.superblock_lost", "copy.prepare.lost_superblocks_log_read",
                       "copy.refused.behind_tombstone"):
        await _copy_refused_behind(dst, StartTabletCopy(TABLET, src.me, r.term, ""), logged)


def test_a_copy_whose_files_do_not_open_keeps_the_tombstones_last_opid_for_the_next_copy(tmp_path):
    """A tombstone of (1, ~10) gets a copy of a snapshot damaged at rest at its source: FAILED
    here, its files kept READY for an operator, still with the tombstone's last OpId. The
    master deletes (forgets) the FAILED replica; the next copy, from a source whose log ends
    behind that OpId, is refused as it is onto the tombstone itself."""

    async def main():
        dst = await start_server(tmp_path / "dst")
        src = await start_server(tmp_path / "src", snapshot_interval_entries=3)
        try:
            await _logged_then(dst)
            await dst.service.on_delete_tablet(DeleteTablet(TABLET))
            paths = dst.tablets.paths(TABLET)
            last = Superblock.load(paths.superblock).tombstone_last_opid
            assert last is not None and last.index >= 9
            r = await _source_behind(src, (last.term, last.index))
            req = StartTabletCopy(TABLET, src.me, r.term, "")

            snap = r.snapshots.path_for(r.snapshots.indexes()[-1])
            good = snap.read_bytes()
            bad = bytearray(good)
            bad[durable.HEADER_SIZE + 2] ^= 0x10  # the payload, past the header the source checks
            snap.write_bytes(bytes(bad))
            with probes.expect("copy.install.open_failed", "copy.install.failed_open_keeps_last_op"):
                with pytest.raises(RpcError, match="does not open"):
                    await dst.copy_service.on_start_tablet_copy(req)
            assert dst.tablets.state(TABLET) == TabletState.FAILED
            sb = Superblock.load(paths.superblock)
            assert sb.data_state == DataState.READY and sb.copied_from == src.me.uuid
            assert sb.tombstone_last_opid == last, sb

            snap.write_bytes(good)
            assert not (await dst.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            assert dst.tablets.state(TABLET) is None  # forgotten, its files left
            with probes.expect("copy.refused.behind_tombstone"):
                await _copy_refused_behind(dst, req, (last.term, last.index))
        finally:
            await src.stop()
            await dst.stop()

    asyncio.run(main())


def test_a_copy_over_a_forgotten_replica_that_failed_while_running_compares_with_its_last_op(
        tmp_path):
    """The replica logged (1, ~10) and then failed as it ran (an fsync's EIO); the master
    deletes it (forgotten, its files left as they are). The copy replacing it, from a source
    whose log ends behind what it logged, is refused, and the tombstone it leaves votes from
    that last op; once the source has caught up, the copy installs."""

    async def main():
        dst = await start_server(tmp_path / "dst")
        src = await start_server(tmp_path / "src", snapshot_interval_entries=3)
        try:
            rd = await _logged_then(dst)
            logged = rd.last_logged()
            rd.fail(OSError(errno.EIO, "Input/output error"))  # a failed fsync, as the WAL reports it
            await wait_for(lambda: dst.tablets.state(TABLET) == TabletState.FAILED, "FAILED")
            paths = dst.tablets.paths(TABLET)
            with probes.expect("tablet.failed.forgotten", "tablet.failed.last_op_remembered"):
                assert not (await dst.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            sb = Superblock.load(paths.superblock)  # the evidence is left as it was
            assert sb.data_state == DataState.READY and sb.tombstone_last_opid is None

            r = await _source_behind(src, logged)
            req = StartTabletCopy(TABLET, src.me, r.term, "")
            with probes.expect("copy.prepare.forgotten_replicas_last_op",
                               "copy.refused.behind_tombstone"):
                await _copy_refused_behind(dst, req, logged)

            await write_rows(src, 10, prefix="more")
            assert r.last_logged() > logged
            await dst.copy_service.on_start_tablet_copy(req)
            assert dst.tablets.state(TABLET) == TabletState.RUNNING
            assert dst.replicas[TABLET].last_logged() == r.last_logged()
        finally:
            await src.stop()
            await dst.stop()

    asyncio.run(main())


def test_a_replica_forgotten_after_its_tombstone_failed_keeps_its_last_op_for_the_copy(tmp_path):
    """A running replica's superblock is lost (a stray rm): its delete cannot write the
    tombstone, so it is FAILED, and a second delete forgets it. It had logged (1, ~10) and
    said so as it failed: the copy replacing it, from a source behind that, is refused."""

    async def main():
        dst = await start_server(tmp_path / "dst")
        src = await start_server(tmp_path / "src", snapshot_interval_entries=3)
        try:
            rd = await _logged_then(dst)
            logged = rd.last_logged()
            dst.tablets.paths(TABLET).superblock.unlink()
            with pytest.raises(RpcError, match="cannot write the tombstone"):
                await dst.rpc_client.call(dst.me.addr, "ts.delete_tablet", DeleteTablet(TABLET),
                                          Ack, to_uuid=dst.me.uuid, timeout=10.0)
            assert dst.tablets.state(TABLET) == TabletState.FAILED
            with probes.expect("tablet.failed.last_op_remembered"):
                assert not (await dst.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            # the replica's own log, still on its disk, says as much as it knew in memory
            await _refused_from_its_own_log(dst, src, logged)
        finally:
            await src.stop()
            await dst.stop()

    asyncio.run(main())


async def _restarted_without_superblock(root, lose_cmeta: bool = False, rows: int = 3):
    """A server whose replica logged (1, `rows` + 2), restarted after its superblock (and,
    `lose_cmeta`, its consensus metadata) was lost at rest: the tablet is not open. (server,
    cmeta before)."""
    ts = await start_server(root)
    await _logged_then(ts, rows=rows)
    await ts.stop()
    paths = ts.tablets.paths(TABLET)
    cm = ConsensusMetadata.load(paths.consensus_meta)
    paths.superblock.unlink()  # a file system check, a stray rm
    if lose_cmeta:
        paths.consensus_meta.unlink()
    ts = await start_server(root)
    assert ts.tablets.state(TABLET) is None
    return ts, cm


async def _copy_prepared(ts, cm, source, read: str) -> Superblock:
    """A copy from `source` begun and prepared over `ts`'s replica whose superblock was lost
    (`cm`: its consensus metadata), firing `read` (whether its log read); the COPYING
    superblock it left."""
    await ts.tablets.begin_copy(StartTabletCopy(TABLET, source, cm.current_term, ""))
    session = CopySession("s", "tbl", KeyRange(), cm.current_term, cm.committed_config, [], 60.0)
    with probes.expect("copy.prepare.superblock_lost", read):
        await ts.tablets.prepare_copy(TABLET, session)
    return Superblock.load(ts.tablets.paths(TABLET).superblock)


def test_a_copy_over_a_replica_whose_superblock_was_lost_never_votes_from_an_empty_log(tmp_path):
    """Its consensus metadata reads, so the copy goes ahead, from the last OpId its own log
    holds (not (0, 0)): while it downloads it refuses a candidate with an empty log."""

    async def main():
        ts, cm = await _restarted_without_superblock(tmp_path / "a")
        cand = FakePeer("cand")
        rpc = RpcClient()
        try:
            await cand.start()
            sb = await _copy_prepared(ts, cm, cand.peer, "copy.prepare.lost_superblocks_log_read")
            assert ts.tablets.state(TABLET) == TabletState.COPYING
            assert sb.data_state == DataState.COPYING, sb
            assert sb.tombstone_last_opid is not None and sb.tombstone_last_opid.index >= 4, sb
            await past_vote_lease(ts)
            await cand.ask(rpc, ts, VoteRequest(cm.current_term + 1, cand.uuid, ts.uuid, 0, 0))
            resp = await cand.answer(1)
            assert not resp.granted, resp
        finally:
            await rpc.close()
            await cand.server.stop()
            await ts.stop()

    asyncio.run(main())


def test_a_copy_ending_behind_the_log_of_a_replica_whose_superblock_was_lost_is_refused(tmp_path):
    """The replica logged (1, ~10), lost its superblock at rest and restarted without the
    tablet; its leader, writing behind, copies it a log ending before that. The copy is
    refused for ending behind what the replica's own log held, read before the copy removed
    it. Before, the COPYING superblock's last OpId was unknown, the copy installed, and the
    replica voted with a log missing entries it had acknowledged (the simulator's
    superblock-behind fault: a log that regressed, then entries lost)."""

    async def main():
        ts, _ = await _restarted_without_superblock(tmp_path / "a", rows=8)
        src = await start_server(tmp_path / "src", snapshot_interval_entries=3)
        try:
            logged = _logged_at_rest(ts)
            assert logged[1] >= 9
            await _refused_from_its_own_log(ts, src, logged)
        finally:
            await src.stop()
            await ts.stop()

    asyncio.run(main())


def test_a_copy_onto_a_voter_whose_superblock_is_lost_and_log_does_not_read_is_refused(tmp_path):
    """With its log damaged too, nothing says what the replica logged and acknowledged: a copy
    onto it while it is a voter is refused before anything is written, and the replica is
    FAILED, its files kept, so the masters replace it. Before, the copy started with its last
    OpId unknown and installed whatever it brought (the simulator's superblock-behind fault
    with a flipped WAL bit: a log that regressed). A copy onto it as a non-voter (the masters
    re-adding the server) starts from no last OpId and may install."""
    from node.consensus.types import Member, MemberType, RaftConfig, encode_config

    async def main():
        ts, cm = await _restarted_without_superblock(tmp_path / "a", rows=8)
        try:
            paths = ts.tablets.paths(TABLET)
            segment = sorted(paths.wal_dir.iterdir())[0]
            data = bytearray(segment.read_bytes())
            data[:8] = bytes(8)  # the header's magic: no reader takes it for a segment
            segment.write_bytes(bytes(data))
            await ts.tablets.begin_copy(StartTabletCopy(TABLET, ts.me, cm.current_term, ""))
            voter = CopySession("s", "tbl", KeyRange(), cm.current_term, cm.committed_config, [],
                                60.0)
            with (probes.expect("copy.prepare.lost_superblocks_log_unreadable",
                                "copy.refused.last_op_unknown_voter"),
                  pytest.raises(RpcError, match="is a voter in the copied config") as e):
                await ts.tablets.prepare_copy(TABLET, voter)
            assert e.value.code == ErrorCode.ILLEGAL_STATE, e.value
            assert ts.tablets.state(TABLET) == TabletState.FAILED
            assert not paths.superblock.exists() and segment.read_bytes() == bytes(data)
            await ts.tablets.delete(TABLET)  # the masters, once they replaced it
            assert ts.tablets.state(TABLET) is None
            learner = encode_config(RaftConfig(0, (Member(ts.uuid, MemberType.NON_VOTER),)))
            await ts.tablets.begin_copy(StartTabletCopy(TABLET, ts.me, cm.current_term, ""))
            session = CopySession("s", "tbl", KeyRange(), cm.current_term, learner, [], 60.0)
            with probes.expect("copy.prepare.lost_superblocks_log_unreadable"):
                await ts.tablets.prepare_copy(TABLET, session)
            sb = Superblock.load(paths.superblock)
            assert sb.data_state == DataState.COPYING and sb.tombstone_last_opid is None, sb
        finally:
            await ts.stop()

    asyncio.run(main())


def _logged_at_rest(ts) -> tuple[int, int]:
    """(term, index) of the last entry in the tablet's WAL on `ts`'s disk."""
    from node.wal.reader import read_log

    last = read_log(str(ts.tablets.paths(TABLET).wal_dir), TABLET).entries[-1]
    return last.term, last.index


def test_a_copy_over_a_replica_whose_superblock_and_metadata_were_lost_is_refused(tmp_path):
    """Its WAL remains, so it logged, and may have voted: merging into fresh consensus metadata
    could vote twice in a term, as when the metadata alone is gone. Refused, for an operator."""

    async def main():
        ts, cm = await _restarted_without_superblock(tmp_path / "a", lose_cmeta=True)
        try:
            with probes.expect("copy.refused.log_without_metadata", "copy.refused.votes_lost"):
                with pytest.raises(RpcError, match="votes it held are lost") as e:
                    await ts.tablets.begin_copy(StartTabletCopy(TABLET, ts.me, cm.current_term, ""))
            assert e.value.code == ErrorCode.ILLEGAL_STATE and "log remains" in str(e.value)
            assert ts.tablets.state(TABLET) is None
            assert not ts.tablets.paths(TABLET).consensus_meta.exists()
        finally:
            await ts.stop()

    asyncio.run(main())
