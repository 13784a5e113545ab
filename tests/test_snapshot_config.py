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

from node import probes
from node.consensus import ChangeOp, ConfigChange
from node.replica.metadata_saves import MetadataSaves
from node.replica.replica import Replica
from node.tablet.ops import Write


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
