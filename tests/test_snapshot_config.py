"""A snapshot never covers a committed config the consensus metadata does not hold yet.

Bootstrap rebuilds configs from the WAL entries after the snapshot, and takes the committed
one from the consensus metadata; a snapshot carries no config. A follower catching up receives
a config entry and a commit past it in one append: the Ready that writes and applies them cannot
hand the config over yet (it is handed once durable, the next Ready), and the snapshot that
Ready's apply made due was saved before the config was. A crash between the two, or a metadata
save that failed (the replica then FAILED, its snapshot still saved), restarted the replica with
the config entry gone from its log and an older committed config: it ran, and voted, in a config
the tablet had left. Found by a review of the recovery paths. Real replicas in one process
(tests/replica_net.py), real WAL and files."""

from __future__ import annotations

import asyncio
import dataclasses
import errno

from replica_net import Net, open_session, options
from tserver_helpers import wait_for

from node import probes
from node.consensus import (
    ChangeOp,
    ConfigChange,
    Member,
    MemberType,
    RaftConfig,
    decode_config,
    encode_config,
)
from node.consensus.messages import AppendEntries, Heartbeat, VoteRequest
from node.entry import Entry, EntryType
from node.replica.metadata_saves import MetadataSaves
from node.replica.replica import Replica, bootstrap_replica
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.ops import Write
from node.tablet.paths import TabletPaths


def test_a_follower_whose_config_save_fails_leaves_no_snapshot_past_the_config(tmp_path):
    async def main():
        net = Net(tmp_path)
        net.start()
        follower = "c"  # cut off from the start: it catches up on everything in one append
        net.cut.add(follower)
        leader = await net.leader(among=("a", "b"))
        f = net.replicas[follower]
        f.options = dataclasses.replace(f.options, snapshot_interval_entries=1)

        def save_fails(hs, config):
            if config is not None:
                raise OSError(errno.EIO, "Input/output error (the metadata's fsync)")
            return MetadataSaves._write(f.saves, hs, config)

        f.saves._write = save_fails
        session = await open_session(leader)
        await leader.change_config(ConfigChange(ChangeOp.ADD_NON_VOTER, "d"), 0)
        for seq in range(1, 4):
            await leader.write(Write("k", seq), session=session, seq=seq, acked_below=seq)
        net.cut.discard(follower)
        for _ in range(500):
            if f.failed:
                break
            await asyncio.sleep(0.01)
        assert f.failed and "Input/output" in f.failed, f.failed
        await asyncio.sleep(0.3)  # a snapshot started before the failure ends meanwhile
        await net.stop()

        again = Replica(follower, net.paths[follower], lambda *a: None, options())
        again.open()
        try:
            members = {m.uuid for m in again.core.active_config.members}
            assert "d" in members, (members, again.state.last_applied_index)
        finally:
            again.wal.close()

    with probes.expect("replica.snapshot.waits_for_config_save"):
        asyncio.run(main())


# -- a config saved behind that runs after a newer one ---------------------------------------

VOTERS = ("l", "g", "f")


def with_x(index: int, kind: MemberType) -> RaftConfig:
    return RaftConfig(index, tuple(Member(u, MemberType.VOTER) for u in VOTERS) + (Member("x", kind),))


async def follower_saving_two_configs_out_of_order(tmp_path, opts) -> tuple[Replica, TabletPaths]:
    """Follower f commits config 10 (x a learner), then writes entries 11..12 (x a voter at
    12). While it writes them, the old leader's heartbeat commits 12 and a leadership
    transfer's vote request for term 6 arrives: the Ready after the write saves config 10
    behind it, and the next (the new term, with config 12) saves both awaited, and took the
    save's turn before the task saving 10 first ran."""
    paths = TabletPaths(tmp_path / "f", "t")
    bootstrap_replica(paths, RaftConfig(0, tuple(Member(u, MemberType.VOTER) for u in VOTERS)))
    r = Replica("f", paths, lambda to, msgs: None, opts)
    r.open()
    r.start()
    first = tuple(Entry(5, i, EntryType.NO_OP) for i in range(1, 10)) + (
        Entry(5, 10, EntryType.CONFIG_CHANGE, encode_config(with_x(10, MemberType.NON_VOTER))),)
    r.step([AppendEntries(5, "l", "f", 0, 0, first, 0, seq=1)])
    await wait_for(lambda: r.core.log.stable >= 10, "the first append written")
    real_start = r.writes.start

    def start(entries):
        written = real_start(entries)
        if entries[-1].index == 12:
            r.step([Heartbeat(5, "l", "f", 12), VoteRequest(6, "g", "f", 12, 5, transfer=True)])
        return written

    r.writes.start = start
    second = (Entry(5, 11, EntryType.NO_OP),
              Entry(5, 12, EntryType.CONFIG_CHANGE, encode_config(with_x(12, MemberType.VOTER))))
    r.step([AppendEntries(5, "l", "f", 10, 5, second, 10, seq=2)])
    await wait_for(lambda: r.core.term == 6 and r.saves.saved_config_index >= 12
                   and not r.saves._turn.locked(), "both saves done")
    await asyncio.sleep(0.2)  # a save still to run would have run
    return r, paths


def test_a_config_saved_behind_never_goes_back_over_a_newer_one_on_disk(tmp_path):
    async def main():
        with probes.expect("replica.cmeta.older_config_not_saved"):
            r, paths = await follower_saving_two_configs_out_of_order(tmp_path, options())
        try:
            on_disk = decode_config(ConsensusMetadata.load(paths.consensus_meta).committed_config)
            assert (r.core.committed_config.opid_index, r.saves.saved_config_index) == (12, 12)
            assert on_disk.opid_index == 12, "the committed config on disk went back"
        finally:
            await r.stop()

    asyncio.run(main())


def test_a_restart_after_configs_saved_out_of_order_runs_the_newer_config(tmp_path):
    """With a snapshot at every entry: one past 12 is taken once 12 is believed saved, so
    the restart rebuilds the config only from the consensus metadata."""
    async def main():
        opts = dataclasses.replace(options(), snapshot_interval_entries=1)
        r, paths = await follower_saving_two_configs_out_of_order(tmp_path, opts)
        await r.stop()
        again = Replica("f", paths, lambda to, msgs: None, opts)
        again.open()
        again.wal.close()
        assert again.state.last_applied_index >= 12  # a snapshot holds entry 12
        assert again.core.committed_config.opid_index == 12
        assert again.core.active_config.member("x").member_type == MemberType.VOTER

    asyncio.run(main())
