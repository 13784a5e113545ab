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
