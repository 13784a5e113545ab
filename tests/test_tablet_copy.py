"""Tablet copy's files on the receiving side (Kudu's tablet-copy design): consensus-metadata merge
rules, the install sequence, file names from the source, and start-up's recovery of a copy that
died part-way. Real files, no processes (tests/test_tablet_copy_e2e.py runs whole copies)."""

import msgspec
import pytest

from harness.sim.disk import SimDisk
from node import durable
from node.consensus import Member, MemberType, RaftConfig, decode_config, encode_config
from node.protocol import CopyFile, CopySession
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.paths import TabletPaths
from node.tablet.snapshot import SnapshotStore
from node.tablet.state import StateMachine
from node.tablet.superblock import DataState, HashBucket, OpId, Superblock
from node.tserver import copy as copy_mod
from node.tserver.copy import (
    FileWriter,
    abandon_copy,
    complete_install,
    destination,
    merge_consensus_metadata,
    prepare_install,
    recover_unfinished_copy,
)

TABLET = "t-copy"
CONFIG = encode_config(RaftConfig(7, (Member("a", MemberType.VOTER), Member("b", MemberType.NON_VOTER))))


def session(term=4) -> CopySession:
    return CopySession("s-1", "tbl", HashBucket(0, 1), term, CONFIG, [], 600.0)


def install(paths: TabletPaths, index: int) -> None:
    """The receiver's sequence, with a snapshot file standing in for what the source sent."""
    prepare_install(paths, session())
    state = StateMachine(TABLET)
    state.last_applied_index, state.last_applied_term = index, 2
    data = durable.encode_envelope(msgspec.msgpack.encode(state.snapshot()))
    w = FileWriter(paths, destination(paths, CopyFile("snapshot", f"snapshot-{index}", len(data))))
    w.write(0, data)
    w.close(sync=True)
    complete_install(paths, session(), "src-uuid")


@pytest.mark.parametrize(("local", "remote_term", "want"), [
    ((5, "x"), 3, (5, "x")),  # our term is higher: keep it and our vote
    ((5, "x"), 5, (5, "x")),  # same term: our vote in it must survive
    ((5, "x"), 9, (9, None)),  # a newer term: adopt it, no vote in it yet
    (None, 6, (6, None)),  # a brand-new replica adopts the remote term
])
def test_consensus_metadata_merge_keeps_terms_monotonic_and_votes(tmp_path, local, remote_term, want):
    paths = TabletPaths(tmp_path, TABLET)
    if local is not None:
        cmeta = ConsensusMetadata.create(paths.consensus_meta, TABLET, b"old")
        cmeta.update(tuple(local))
    merge_consensus_metadata(paths, remote_term, CONFIG)
    merged = ConsensusMetadata.load(paths.consensus_meta)
    assert (merged.current_term, merged.voted_for) == want
    assert decode_config(merged.committed_config) == decode_config(CONFIG)  # always the remote's


@pytest.mark.parametrize(("local", "remote_term", "want"), [
    ((5, "x"), 3, (3, None)),  # the term goes back
    ((5, "x"), 5, (5, None)),  # the vote in term 5 is forgotten: it may vote again
])
def test_fault_copy_overwrite_cmeta_loses_term_and_vote(tmp_path, local, remote_term, want):
    from node.faults import Faults

    paths = TabletPaths(tmp_path, TABLET)
    cmeta = ConsensusMetadata.create(paths.consensus_meta, TABLET, b"old")
    cmeta.update(tuple(local))
    merge_consensus_metadata(paths, remote_term, CONFIG, Faults(fault_copy_overwrite_cmeta=True))
    merged = ConsensusMetadata.load(paths.consensus_meta)
    assert (merged.current_term, merged.voted_for) == want


def test_install_onto_a_tombstone_replaces_its_data_and_ends_ready(tmp_path):
    paths = TabletPaths(tmp_path, TABLET)
    Superblock(TABLET, "tbl", HashBucket(0, 1), DataState.TOMBSTONED, OpId(3, 40)).save(paths.superblock)
    ConsensusMetadata.create(paths.consensus_meta, TABLET, b"old")
    paths.wal_dir.mkdir(parents=True)
    (paths.wal_dir / "wal-000000001").write_bytes(b"stale")
    install(paths, 120)
    sb = Superblock.load(paths.superblock)
    assert sb.data_state == DataState.READY and sb.tombstone_last_opid is None
    assert sb.copied_from == "src-uuid"
    assert list(paths.wal_dir.iterdir()) == []  # the stale log went; the copy sent none
    assert SnapshotStore(paths.snapshot_dir, TABLET).load_latest().last_applied_index == 120


@pytest.mark.parametrize(("kind", "name"), [
    ("snapshot", "../../consensus-meta/t-copy"), ("wal", "/etc/passwd"), ("wal", "snapshot-1"),
    ("snapshot", "wal-000000001"), ("blocks", "wal-000000001"), ("wal", "wal-1"),
])
def test_a_file_name_from_the_source_that_is_not_ours_is_refused(tmp_path, kind, name):
    with pytest.raises(ValueError, match="the copy source sent"):
        destination(TabletPaths(tmp_path, TABLET), CopyFile(kind, name, 1))


def test_a_copy_that_dies_part_way_is_tombstoned_at_start_up_keeping_the_last_opid(tmp_path, monkeypatch):
    paths = TabletPaths(tmp_path, TABLET)
    Superblock(TABLET, "tbl", HashBucket(0, 1), DataState.TOMBSTONED, OpId(3, 40)).save(paths.superblock)

    def disk_full(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(FileWriter, "write", disk_full)
    with pytest.raises(OSError):
        install(paths, 120)
    sb = Superblock.load(paths.superblock)
    assert sb.data_state == DataState.COPYING
    recover_unfinished_copy(paths, sb)
    sb = Superblock.load(paths.superblock)
    assert sb.data_state == DataState.TOMBSTONED and sb.tombstone_last_opid == OpId(3, 40)
    assert not paths.snapshot_dir.exists() and not paths.wal_dir.exists()


def test_a_running_server_abandons_a_failed_copy_to_a_tombstone_it_can_copy_onto_again(tmp_path, monkeypatch):
    paths = TabletPaths(tmp_path, TABLET)
    real_write = FileWriter.write
    monkeypatch.setattr(FileWriter, "write", lambda *_: (_ for _ in ()).throw(OSError(28, "ENOSPC")))
    with pytest.raises(OSError):
        install(paths, 5)
    assert abandon_copy(paths) == "tbl"
    assert abandon_copy(paths) is None  # already a tombstone: nothing to abandon
    monkeypatch.setattr(FileWriter, "write", real_write)
    install(paths, 9)  # the leader's next attempt succeeds
    assert Superblock.load(paths.superblock).data_state == DataState.READY


def test_an_interrupted_copy_onto_a_new_replica_becomes_a_tombstone_that_logged_nothing(tmp_path, monkeypatch):
    paths = TabletPaths(tmp_path, TABLET)
    monkeypatch.setattr(FileWriter, "write", lambda *_: (_ for _ in ()).throw(OSError(5, "EIO")))
    with pytest.raises(OSError):
        install(paths, 3)
    recover_unfinished_copy(paths, Superblock.load(paths.superblock))
    sb = Superblock.load(paths.superblock)
    assert sb.data_state == DataState.TOMBSTONED and sb.tombstone_last_opid == OpId(0, 0)


def test_a_tombstones_removed_wal_stays_removed_across_a_power_cut():
    """The bug (found by the whole-stack simulator's review): the WAL and snapshot directories
    were removed without syncing their parent, so a power cut after a tombstone, or after a
    copy installed over one, brought the old log back under the new snapshot."""
    disk = SimDisk()
    paths = TabletPaths("/d", TABLET, disk)
    Superblock(TABLET, "tbl", HashBucket(0, 1), DataState.READY).save(paths.superblock, disk)
    for directory in (paths.wal_dir, paths.snapshot_dir):
        durable.ensure_dir(directory, disk)
        durable.write_atomic(directory / "old", b"old entries or rows", disk)
    copy_mod.tombstone(paths, OpId(2, 7))
    after = disk.crash()
    assert not after.exists(paths.wal_dir) and not after.exists(paths.snapshot_dir)
    assert Superblock.load(paths.superblock, after).data_state == DataState.TOMBSTONED
