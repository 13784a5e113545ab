"""Seed 05: a TOMBSTONED or COPYING replica keeps voting, from its consensus metadata and the
tombstone's last OpId, while still refusing AppendEntries (a copy is what brings it back).
Without that, a voter being copied plus a leader crash leaves the tablet leaderless. Real
tablet servers on loopback; fake candidates are bare RPC servers recording what they get."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from tserver_helpers import (
    TABLET,
    create,
    create_on_all,
    sole_leader,
    start_server,
    wait_for,
    write_rows,
)

from node import probes
from node.consensus import AppendEntries, Heartbeat, Role, VoteRequest, VoteResponse
from node.protocol import Ack, BeginCopySession, Consensus, DeleteTablet, Peer, StartTabletCopy
from node.rpc import ErrorCode, RpcClient, RpcError, RpcServer
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.superblock import OpId, Superblock
from node.tserver.tablet_manager import TabletState
from node.wal import format as fmt


class FakePeer:
    """A candidate (or copy source) at its own address: records the Raft messages it receives."""

    def __init__(self, uuid: str):
        self.uuid = uuid
        self.got: list = []
        self.server = RpcServer(uuid)
        self.server.register("consensus", Consensus, self._on_consensus)
        self.fetch_started = asyncio.Event()
        self.release_fetch = asyncio.Event()
        self.server.register("ts.begin_copy_session", BeginCopySession, self._on_fetch)

    async def start(self) -> None:
        host, port = await self.server.start("127.0.0.1", 0)
        self.peer = Peer(self.uuid, host, port)

    async def _on_consensus(self, req: Consensus) -> Ack:
        self.got.extend(req.messages)
        return Ack(True)

    async def _on_fetch(self, _req: BeginCopySession):  # a copy source that stalls, then fails
        self.fetch_started.set()
        await self.release_fetch.wait()
        raise RpcError(ErrorCode.ILLEGAL_STATE, "source gave up")

    async def ask(self, rpc: RpcClient, ts, *messages) -> Ack:
        return await rpc.call(ts.me.addr, "consensus", Consensus(TABLET, list(messages), [self.peer]),
                              Ack, to_uuid=ts.uuid, timeout=5.0)

    async def answer(self, n: int) -> VoteResponse:
        await wait_for(lambda: len(self.got) >= n, f"answer {n} at {self.uuid}", timeout=5.0)
        return self.got[n - 1]


@contextlib.asynccontextmanager
async def sole_replica_and_candidate(root, **replica_options):
    """A real tablet server leading its tablet alone, a fake candidate and an RPC client."""
    ts = await start_server(root, **replica_options)
    cand = FakePeer("cand")
    rpc = RpcClient()
    try:
        await cand.start()
        await create(ts, [ts.me])
        yield ts, cand, rpc, await sole_leader(ts)
    finally:
        await rpc.close()
        await cand.server.stop()
        await ts.stop()


def vote_lease_s(ts) -> float:
    """A running follower's vote lease (the shortest election timeout), one tick longer: how long
    a tombstone withholds votes from its stop, so no leader is elected under a live lease."""
    opts = ts.tablets.options
    cfg = opts.core_config(ts.uuid)
    return (int(cfg.election_timeout_ticks * (1 - cfg.jitter)) + 1) * opts.tick_ms / 1000


async def past_vote_lease(ts) -> None:
    await asyncio.sleep(vote_lease_s(ts))


def hard_state(ts) -> tuple[int, str | None]:
    cmeta = ConsensusMetadata.load(ts.tablets.paths(TABLET).consensus_meta)
    return cmeta.current_term, cmeta.voted_for


def test_a_tombstoned_voter_votes_from_its_metadata_and_last_opid(tmp_path):
    async def main():
        ts = await start_server(tmp_path / "a")
        c1, c2 = FakePeer("cand-1"), FakePeer("cand-2")
        rpc = RpcClient()
        try:
            await c1.start()
            await c2.start()
            await create(ts, [ts.me])
            r = await sole_leader(ts)
            await write_rows(ts, 2)
            term = r.term
            await ts.service.on_delete_tablet(DeleteTablet(TABLET))
            await past_vote_lease(ts)
            last = Superblock.load(ts.tablets.paths(TABLET).superblock).tombstone_last_opid
            assert last is not None and last.index >= 4 and ts.tablets.state(TABLET) == TabletState.TOMBSTONED

            def vote(c, t, last_term, last_index, pre=False):
                return VoteRequest(t, c.uuid, ts.uuid, last_index, last_term, pre_vote=pre)

            # pre-vote for a later term, log up to date: granted, nothing persisted
            assert (await c1.ask(rpc, ts, vote(c1, term + 1, last.term, last.index, True))).ok
            resp = await c1.answer(1)
            assert resp.granted and resp.pre_vote and hard_state(ts) == (term, ts.uuid)
            # the real vote: granted and persisted before it was sent
            await c1.ask(rpc, ts, vote(c1, term + 1, last.term, last.index + 3))
            resp = await c1.answer(2)
            assert resp.granted and not resp.pre_vote and resp.term == term + 1
            assert hard_state(ts) == (term + 1, "cand-1")
            # never a second vote in that term
            await c2.ask(rpc, ts, vote(c2, term + 1, last.term + 1, last.index + 9))
            assert not (await c2.answer(1)).granted
            assert hard_state(ts) == (term + 1, "cand-1")
            # a candidate whose log is behind the tombstone's last op: the term moves on, no vote
            await c2.ask(rpc, ts, vote(c2, term + 2, last.term, last.index - 1))
            resp = await c2.answer(2)
            assert not resp.granted and hard_state(ts) == (term + 2, None)
            await c2.ask(rpc, ts, vote(c2, term + 3, last.term, last.index - 1, True))
            assert not (await c2.answer(3)).granted
            # AppendEntries and heartbeats are still refused: the leader copies the tablet here
            ack = await c1.ask(rpc, ts, AppendEntries(term + 2, c1.uuid, ts.uuid, 0, 0, (), 0),
                               Heartbeat(term + 2, c1.uuid, ts.uuid, 0))
            assert (ack.ok, ack.reason) == (False, "tombstoned")
            assert ts.tablets.state(TABLET) == TabletState.TOMBSTONED and TABLET not in ts.replicas
        finally:
            await rpc.close()
            await c1.server.stop()
            await c2.server.stop()
            await ts.stop()

    asyncio.run(main())


def test_a_replica_being_copied_onto_its_tombstone_still_votes(tmp_path):
    async def main():
        async with sole_replica_and_candidate(tmp_path / "a") as (ts, cand, rpc, r):
            term = r.term
            await ts.service.on_delete_tablet(DeleteTablet(TABLET))
            await past_vote_lease(ts)
            last = Superblock.load(ts.tablets.paths(TABLET).superblock).tombstone_last_opid
            copy = asyncio.create_task(ts.copy_service.on_start_tablet_copy(
                StartTabletCopy(TABLET, cand.peer, term + 1, "TOMBSTONED")))
            await asyncio.wait_for(cand.fetch_started.wait(), 5)
            assert ts.tablets.state(TABLET) == TabletState.COPYING
            ack = await cand.ask(rpc, ts, VoteRequest(term + 1, cand.uuid, ts.uuid, last.index,
                                                      last.term))
            assert ack.ok
            resp = await cand.answer(1)
            assert resp.granted and hard_state(ts) == (term + 1, "cand")
            cand.release_fetch.set()
            try:
                await copy
            except RpcError:
                pass  # the stalled source gave up: back to a tombstone
            assert ts.tablets.state(TABLET) == TabletState.TOMBSTONED and hard_state(ts) == (term + 1, "cand")

    asyncio.run(main())


def test_a_tablet_whose_leader_crashes_while_a_voter_is_tombstoned_elects_a_new_leader(tmp_path):
    """Three voters; one is tombstoned (as while being copied) and the leader crashes before it
    copies it back. The survivor needs the tombstoned voter's vote: before the fix nobody could
    ever win an election."""

    async def main():
        servers = [await start_server(tmp_path / n) for n in "abc"]

        async def no_copy(*_a, **_k):  # the leader crashes before its copy loop acts
            return None

        for s in servers:
            s.copies.send = no_copy
        stopped = set()
        try:
            leader = await create_on_all(servers)
            await write_rows(leader, 3)
            await wait_for(lambda: len({s.replicas[TABLET].last_logged() for s in servers}) == 1,
                           "every replica to log everything")
            survivor, victim = [s for s in servers if s is not leader]
            await victim.service.on_delete_tablet(DeleteTablet(TABLET))
            await leader.stop()
            stopped.add(leader)
            old_term = survivor.replicas[TABLET].term
            r = await wait_for(lambda: survivor.replicas[TABLET].role == Role.LEADER
                               and survivor.replicas[TABLET], "the survivor to win", timeout=15)
            assert r.term > old_term
            assert hard_state(victim) == (r.term, survivor.uuid)
            assert victim.tablets.state(TABLET) == TabletState.TOMBSTONED
        finally:
            for s in servers:
                if s not in stopped:
                    await s.stop()

    asyncio.run(main())


def test_a_tombstone_withholds_votes_for_a_vote_lease_from_its_stop(tmp_path):
    """A follower that acknowledged a leader's lease and was tombstoned a moment
    later voted at once for another candidate, so a new leader could be elected while the old
    one still served lease reads. A tombstone now withholds (pre-)votes for a vote lease from
    its stop, as a running follower does after it last heard from a leader; a leadership
    transfer's vote is not withheld; after the lease it votes."""

    async def main():
        # a lease of about 1.3 s
        async with sole_replica_and_candidate(tmp_path / "a", tick_ms=100) as (ts, cand, rpc, r):
            await write_rows(ts, 2)
            term = r.term
            await ts.service.on_delete_tablet(DeleteTablet(TABLET))
            stopped = asyncio.get_running_loop().time()
            last = Superblock.load(ts.tablets.paths(TABLET).superblock).tombstone_last_opid
            lease = vote_lease_s(ts)
            assert lease > 1.0

            def vote(t, pre=False, transfer=False):
                return VoteRequest(t, cand.uuid, ts.uuid, last.index, last.term, pre_vote=pre,
                                   transfer=transfer)

            await cand.ask(rpc, ts, vote(term + 1, pre=True), vote(term + 1))
            if asyncio.get_running_loop().time() - stopped >= lease:
                pytest.skip("the host took longer than the vote lease to ask: no verdict")
            # a transfer's vote goes through at once; the two before it got no answer at all
            await cand.ask(rpc, ts, vote(term + 2, transfer=True))
            resp = await cand.answer(1)
            assert resp.granted and resp.term == term + 2
            assert hard_state(ts) == (term + 2, "cand")
            # past the lease, an ordinary pre-vote is answered
            await asyncio.sleep(max(0.0, stopped + lease - asyncio.get_running_loop().time()))
            await cand.ask(rpc, ts, vote(term + 3, pre=True))
            resp = await cand.answer(2)
            assert resp.granted and resp.pre_vote

    asyncio.run(main())


def test_a_deleted_failed_voter_being_copied_never_votes_from_an_unknown_log(tmp_path):
    """A replica FAILED by a damaged WAL, deleted while still a voter, then
    copied: its superblock held no tombstone OpId, so while COPYING it voted as if its log were
    empty, and a candidate without the entries it had logged (and acknowledged) could win. Its
    last OpId is unknown now: no vote, while copying, after the copy is abandoned, or after a
    restart in the middle of one."""

    async def main():
        root = tmp_path / "a"
        ts = await start_server(root)
        cand = FakePeer("cand")
        rpc = RpcClient()
        await cand.start()
        try:
            await create(ts, [ts.me])
            r = await sole_leader(ts)
            await write_rows(ts, 3)
            term = r.term
            await ts.stop()
            wal = ts.tablets.paths(TABLET).wal_dir
            segment = sorted(wal.iterdir())[0]
            data = bytearray(segment.read_bytes())
            data[fmt.parse_segment_header(bytes(data)).size + 20] ^= 0x04  # inside the first batch
            segment.write_bytes(bytes(data))
            ts = await start_server(root)
            assert ts.tablets.state(TABLET) == TabletState.FAILED
            assert not (await ts.service.on_delete_tablet(DeleteTablet(TABLET))).ok
            assert ts.tablets.state(TABLET) is None
            copy = asyncio.create_task(ts.copy_service.on_start_tablet_copy(
                StartTabletCopy(TABLET, cand.peer, term + 1, "")))
            await asyncio.wait_for(cand.fetch_started.wait(), 5)
            assert ts.tablets.state(TABLET) == TabletState.COPYING
            await past_vote_lease(ts)

            def empty_log_vote(t, pre=False):
                return VoteRequest(t, cand.uuid, ts.uuid, 0, 0, pre_vote=pre)

            await cand.ask(rpc, ts, empty_log_vote(term + 1, pre=True), empty_log_vote(term + 1))
            answers = [await cand.answer(1), await cand.answer(2)]
            assert not any(a.granted for a in answers), answers
            assert Superblock.load(ts.tablets.paths(TABLET).superblock).tombstone_last_opid is None
            cand.release_fetch.set()
            with contextlib.suppress(RpcError):
                await copy
            assert ts.tablets.state(TABLET) is None  # abandoned before a file: back as it was
        finally:
            await rpc.close()
            await cand.server.stop()
            await ts.stop()

    with probes.expect("tablet.failed.at_open", "tablet.failed.forgotten",
                       "tombstone.vote.refused_unknown_last_op"):
        asyncio.run(main())


async def _stopped_with_three_rows(root):
    """A tablet server that led its tablet alone and wrote three rows, stopped."""
    ts = await start_server(root)
    await create(ts, [ts.me])
    await sole_leader(ts)
    await write_rows(ts, 3)
    await ts.stop()
    return ts


def test_a_copy_over_unknown_files_that_dies_leaves_a_tombstone_that_never_votes(tmp_path):
    """The same replica's copy cut short by a crash: start-up tombstones it with the last
    OpId still unknown (it used to write (0, 0), an empty log), and that tombstone refuses
    votes. A brand-new replica's copy starts from (0, 0), which it can prove."""
    from node.protocol import CopySession
    from node.tserver.copy import prepare_install, recover_unfinished_copy, tombstone_vote

    async def failed_and_deleted(root):
        ts = await _stopped_with_three_rows(root)
        segment = sorted(ts.tablets.paths(TABLET).wal_dir.iterdir())[0]
        data = bytearray(segment.read_bytes())
        data[fmt.parse_segment_header(bytes(data)).size + 20] ^= 0x04
        segment.write_bytes(bytes(data))
        ts = await start_server(root)
        assert ts.tablets.state(TABLET) == TabletState.FAILED
        await ts.service.on_delete_tablet(DeleteTablet(TABLET))
        await ts.stop()
        return ts.tablets.paths(TABLET)

    paths = asyncio.run(failed_and_deleted(tmp_path / "a"))
    sb = Superblock.load(paths.superblock)
    config = ConsensusMetadata.load(paths.consensus_meta).committed_config
    term = ConsensusMetadata.load(paths.consensus_meta).current_term
    session = CopySession("s", sb.table_name, sb.partition, term + 1, config, [], 60.0)
    prepare_install(paths, session)
    recover_unfinished_copy(paths, Superblock.load(paths.superblock))  # the crash's start-up
    after = Superblock.load(paths.superblock)
    assert after.data_state.name == "TOMBSTONED" and after.tombstone_last_opid is None
    vote = VoteRequest(term + 2, "cand", "me", 0, 0)
    ((resp, why),) = tombstone_vote(paths, "me", [vote])
    assert not resp.granted and "unknown" in why
    fresh = paths.__class__(tmp_path / "b", TABLET)
    prepare_install(fresh, session)
    assert Superblock.load(fresh.superblock).tombstone_last_opid == OpId(0, 0)


def test_a_tombstone_whose_consensus_metadata_does_not_read_answers_no_vote(tmp_path):
    """A bit flipped in a tombstone's consensus metadata: it knows neither its term nor its
    vote, so it sends nothing (any answer names a term) and says why, instead of raising out
    of the RPC handler (the whole-stack simulator's case: tests/test_sim_swarm.py)."""
    from node.tserver.copy import UNREADABLE_CMETA, tombstone, tombstone_vote

    paths = asyncio.run(_stopped_with_three_rows(tmp_path)).tablets.paths(TABLET)
    term = ConsensusMetadata.load(paths.consensus_meta).current_term
    tombstone(paths, OpId(term, 4))
    vote = VoteRequest(term + 1, "cand", "me", term, 9)
    ((resp, _),) = tombstone_vote(paths, "me", [vote])
    assert resp.granted  # the metadata reads: a candidate ahead of the tombstone gets the vote
    data = bytearray(paths.consensus_meta.read_bytes())
    data[-3] ^= 0x08
    paths.consensus_meta.write_bytes(bytes(data))
    with probes.expect("tombstone.vote.refused_corrupt_metadata"):
        answers = tombstone_vote(paths, "me", [vote, VoteRequest(term + 2, "c2", "me", 9, 9, pre_vote=True)])
    assert [resp for resp, _ in answers] == [None, None]
    assert all(why.startswith(UNREADABLE_CMETA) for _, why in answers)
