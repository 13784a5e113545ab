"""Consensus metadata: durable term/vote/config that never regress, corruption names the file."""

import errno

import pytest

from harness.sim.disk import SimDisk, SimFaults
from node.consensus import SafetyError
from node.errors import CorruptionError
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.paths import TabletPaths


@pytest.fixture
def path(tmp_path):
    return TabletPaths(tmp_path, "tablet-1").consensus_meta


def test_create_then_load_round_trip(path):
    cmeta = ConsensusMetadata.create(path, "tablet-1", b"config-v1")
    cmeta.update((3, "peer-b"), b"config-v2")
    loaded = ConsensusMetadata.load(path)
    assert (loaded.tablet_id, loaded.current_term, loaded.voted_for, loaded.committed_config) == (
        "tablet-1",
        3,
        "peer-b",
        b"config-v2",
    )


def test_a_new_replica_starts_at_term_zero_without_a_vote(path):
    cmeta = ConsensusMetadata.load(ConsensusMetadata.create(path, "tablet-1", b"c").path)
    assert (cmeta.current_term, cmeta.voted_for) == (0, None)


def test_create_refuses_to_overwrite_existing_metadata(path):
    ConsensusMetadata.create(path, "tablet-1", b"c").update((5, "me"))
    with pytest.raises(FileExistsError):
        ConsensusMetadata.create(path, "tablet-1", b"c")


def test_term_never_goes_back_and_a_term_has_one_vote(path):
    cmeta = ConsensusMetadata.create(path, "tablet-1", b"c")
    cmeta.update((4, "peer-a"))
    cmeta.update((4, "peer-a"))  # repeating the same vote is fine
    with pytest.raises(SafetyError, match="already voted"):
        cmeta.update((4, "peer-b"))
    with pytest.raises(SafetyError, match="go back"):
        cmeta.update((3, None))
    assert ConsensusMetadata.load(path).voted_for == "peer-a"  # nothing refused was written
    cmeta.update((5, None))  # a new term clears the vote
    cmeta.update((5, "peer-b"))
    assert (cmeta.current_term, cmeta.voted_for) == (5, "peer-b")


def test_a_failed_save_leaves_memory_as_the_disk_has_it():
    """The bug: memory took the new vote before the save, so a replica whose save hit ENOSPC
    reported a vote that was never durable (the whole-stack simulator's vote-safety check saw
    it 'forget' the vote on restart)."""
    disk = SimDisk(faults=SimFaults())
    path = TabletPaths("/d", "tablet-1", disk).consensus_meta
    cmeta = ConsensusMetadata.create(path, "tablet-1", b"c", disk)
    disk.faults.quota_bytes = disk.usage()
    with pytest.raises(OSError) as e:
        cmeta.update((9, "x"), b"config-v2")
    assert e.value.errno == errno.ENOSPC
    assert (cmeta.current_term, cmeta.voted_for, cmeta.committed_config) == (0, None, b"c")
    assert ConsensusMetadata.load(path, disk.crash()).current_term == 0


def test_any_flipped_byte_refuses_to_load_naming_the_file(path):
    ConsensusMetadata.create(path, "tablet-1", b"config")
    good = path.read_bytes()
    for offset in range(len(good)):
        damaged = bytearray(good)
        damaged[offset] ^= 0x20
        path.write_bytes(damaged)
        with pytest.raises(CorruptionError) as exc:
            ConsensusMetadata.load(path)
        assert str(path) in str(exc.value)


def test_metadata_of_another_tablet_is_refused(tmp_path):
    a = TabletPaths(tmp_path, "a").consensus_meta
    ConsensusMetadata.create(a, "a", b"c")
    b = a.with_name("b")
    a.rename(b)
    with pytest.raises(CorruptionError, match="tablet 'a'"):
        ConsensusMetadata.load(b)


def test_unsafe_tablet_ids_are_refused(tmp_path):
    for bad in ("", "../x", ".hidden", "a/b", "x" * 200):
        with pytest.raises(ValueError):
            TabletPaths(tmp_path, bad)


def _vote_left_in_the_page_cache():
    """A SimDisk whose metadata was saved at (2, "a"), then saved at (3, "b") with the
    directory sync failing: the rename is in the cache only. (disk, paths)."""
    import random

    disk = SimDisk(random.Random(1), SimFaults())
    paths = TabletPaths("/data", "tablet-1", disk)
    cmeta = ConsensusMetadata.create(paths.consensus_meta, "tablet-1", b"c", disk)
    cmeta.update((2, "a"))
    disk.faults.fsync_dir_eio_rate = 1.0
    with pytest.raises(OSError):
        cmeta.update((3, "b"))
    disk.faults.fsync_dir_eio_rate = 0.0
    assert (cmeta.current_term, cmeta.voted_for) == (2, "a")  # memory follows the disk
    return disk, paths


def _after_power_loss(disk, paths):
    cmeta = ConsensusMetadata.load(paths.consensus_meta, disk.crash())
    return cmeta.current_term, cmeta.voted_for


def test_a_vote_whose_directory_sync_failed_is_made_durable_before_a_replica_acts_on_it():
    """A process restarted without a power loss reads the vote whose save failed at the
    directory sync (the rename is in the page cache); a power loss later takes it back, and a
    vote granted on it could be granted again in that term to another candidate. `open`, what
    a replica bootstraps with, saves the record again first; `load` alone (before) did not.
    Found by a review of the recovery paths."""
    disk, paths = _vote_left_in_the_page_cache()
    loaded = ConsensusMetadata.load(paths.consensus_meta, disk)  # the restarted process reads
    assert (loaded.current_term, loaded.voted_for) == (3, "b")
    assert _after_power_loss(disk, paths) == (2, "a")  # what a replica that only read it lost
    disk, paths = _vote_left_in_the_page_cache()
    opened = ConsensusMetadata.open(paths.consensus_meta, disk)
    assert (opened.current_term, opened.voted_for) == (3, "b")
    assert _after_power_loss(disk, paths) == (3, "b")


def test_a_tombstone_granting_its_recorded_vote_again_saves_it_first():
    """A tombstone votes from its metadata as read; granting the candidate the record already
    names changed nothing to save, so a record in the page cache only went out as a vote."""
    from node.consensus import VoteRequest
    from node.tablet.superblock import DataState, KeyRange, OpId, Superblock
    from node.tserver.copy import tombstone_vote

    disk, paths = _vote_left_in_the_page_cache()
    Superblock("tablet-1", "tbl", KeyRange(), DataState.TOMBSTONED,
               tombstone_last_opid=OpId(1, 5)).save(paths.superblock, disk)
    [(resp, why)] = tombstone_vote(paths, "me", [VoteRequest(3, "b", "me", 9, 2)])
    assert resp is not None and resp.granted, why
    assert _after_power_loss(disk, paths) == (3, "b")
