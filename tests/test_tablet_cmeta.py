"""Consensus metadata: durable term/vote/config that never regress, corruption names the file."""

import pytest

from node.errors import CorruptionError
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.paths import TabletPaths


@pytest.fixture
def path(tmp_path):
    return TabletPaths(tmp_path, "tablet-1").consensus_meta


def test_create_then_load_round_trip(path):
    cmeta = ConsensusMetadata.create(path, "tablet-1", b"config-v1")
    cmeta.set_hard_state(3, "peer-b")
    cmeta.committed_config = b"config-v2"
    cmeta.save()
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
    ConsensusMetadata.create(path, "tablet-1", b"c").set_hard_state(5, "me")
    with pytest.raises(FileExistsError):
        ConsensusMetadata.create(path, "tablet-1", b"c")


def test_term_never_goes_back_and_a_term_has_one_vote(path):
    cmeta = ConsensusMetadata.create(path, "tablet-1", b"c")
    cmeta.set_hard_state(4, "peer-a")
    cmeta.set_hard_state(4, "peer-a")  # repeating the same vote is fine
    with pytest.raises(ValueError, match="already voted"):
        cmeta.set_hard_state(4, "peer-b")
    with pytest.raises(ValueError, match="go back"):
        cmeta.set_hard_state(3, None)
    cmeta.set_hard_state(5, None)  # a new term clears the vote
    cmeta.set_hard_state(5, "peer-b")
    assert (cmeta.current_term, cmeta.voted_for) == (5, "peer-b")


def test_unsaved_changes_are_not_on_disk(path):
    cmeta = ConsensusMetadata.create(path, "tablet-1", b"c")
    cmeta.set_hard_state(9, "x")
    assert ConsensusMetadata.load(path).current_term == 0


def test_any_flipped_byte_refuses_to_load_naming_the_file(path):
    ConsensusMetadata.create(path, "tablet-1", b"config").save()
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
