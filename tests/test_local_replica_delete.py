"""`tessera local-replica delete --keep-tombstone` on a replica stopped in the middle of a tablet
copy: its files are the copy's, cut off where the server stopped (a WAL segment whose header
never reached the disk), not the replica's log. The tool read them for the tombstone's last op
and failed on the cut header (found by the whole-stack simulator's unsafe fault, which it
stopped: `tessera sim --stack full --seeds 1 --seed 254 --workload list-append --seconds 20
--mix swarm`); it now tombstones as start-up does, keeping the last OpId the tombstone under the
copy held. Real files on disk."""

from __future__ import annotations

from node import probes
from node.consensus import Member, MemberType, RaftConfig
from node.replica.replica import bootstrap_replica
from node.tablet.paths import TabletPaths
from node.tablet.superblock import DataState, KeyRange, OpId, Superblock
from node.tools.local_replica import delete_replica


def test_an_unfinished_copy_is_tombstoned_with_the_last_op_the_copy_started_from(tmp_path):
    paths = TabletPaths(tmp_path, "t1")
    bootstrap_replica(paths, RaftConfig(0, (Member("a", MemberType.VOTER),)))
    Superblock("t1", "tbl", KeyRange(), DataState.COPYING,
               tombstone_last_opid=OpId(3, 17)).save(paths.superblock, paths.disk)
    paths.wal_dir.mkdir(parents=True)
    (paths.wal_dir / "wal-000000001").write_bytes(b"\x00" * 5)  # a header cut short
    with probes.expect("tools.delete.unfinished_copy_tombstoned"):
        said = delete_replica(tmp_path, "t1", keep_tombstone=True)
    assert "unfinished copy" in said, said
    sb = Superblock.load(paths.superblock)
    assert sb.data_state == DataState.TOMBSTONED and sb.tombstone_last_opid == OpId(3, 17), sb
    assert not paths.wal_dir.exists() or not any(paths.wal_dir.iterdir())
