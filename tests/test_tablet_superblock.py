"""Tablet superblock: the tablet-copy seed's data states, partitions, and damage detection."""

import pytest

from node.errors import CorruptionError
from node.tablet.paths import TabletPaths
from node.tablet.superblock import DataState, HashBucket, KeyRange, OpId, Superblock


def ready(partition=None):
    return Superblock("t1", "accounts", partition or KeyRange("a", "m"), DataState.READY)


def test_round_trip_with_each_partition_kind(tmp_path):
    path = TabletPaths(tmp_path, "t1").superblock
    for partition in (KeyRange(), KeyRange("a", "m"), HashBucket(2, 8)):
        sb = ready(partition)
        sb.save(path)
        assert Superblock.load(path) == sb


def test_key_range_is_half_open():
    r = KeyRange("b", "d")
    assert [r.contains(k) for k in ("a", "b", "c", "czz", "d", "e")] == [
        False,
        True,
        True,
        True,
        False,
        False,
    ]
    assert KeyRange().contains("") and KeyRange("x").contains("zzz")


def test_hash_buckets_partition_every_key_exactly_once():
    buckets = [HashBucket(i, 4) for i in range(4)]
    keys = [f"key-{i}" for i in range(200)]
    for key in keys:
        assert sum(b.contains(key) for b in buckets) == 1
    assert all(any(b.contains(k) for k in keys) for b in buckets)


def test_tombstoning_needs_and_keeps_the_last_logged_opid():
    with pytest.raises(ValueError, match="last logged OpId"):
        ready().with_state(DataState.TOMBSTONED)
    tomb = ready().with_state(DataState.TOMBSTONED, OpId(3, 42))
    assert tomb.tombstone_last_opid == OpId(3, 42)
    copying = tomb.with_state(DataState.COPYING)
    assert copying.tombstone_last_opid == OpId(3, 42)  # a crash mid-copy must still know it
    assert copying.with_state(DataState.TOMBSTONED).tombstone_last_opid == OpId(3, 42)
    assert copying.with_state(DataState.READY).tombstone_last_opid is None


def test_transitions_outside_the_seed_are_refused():
    tomb = ready().with_state(DataState.TOMBSTONED, OpId(1, 1))
    with pytest.raises(ValueError, match="TOMBSTONED -> READY"):
        tomb.with_state(DataState.READY)
    with pytest.raises(ValueError, match="READY -> READY"):
        ready().with_state(DataState.READY)


def test_corrupt_or_truncated_superblock_names_the_file(tmp_path):
    path = TabletPaths(tmp_path, "t1").superblock
    ready().save(path)
    good = path.read_bytes()
    for damaged in (good[:-1], good[:10], good[:20] + bytes([good[20] ^ 1]) + good[21:]):
        path.write_bytes(damaged)
        with pytest.raises(CorruptionError) as exc:
            Superblock.load(path)
        assert str(path) in str(exc.value)


def test_superblock_of_another_tablet_is_refused(tmp_path):
    path = TabletPaths(tmp_path, "t2").superblock
    ready().save(path)
    with pytest.raises(CorruptionError, match="tablet 't1'"):
        Superblock.load(path)
