"""Snapshots on disk: round trip equals the live state; damage is an error naming the file."""

import os

import pytest

from node import durable
from node.entry import Entry, EntryType
from node.errors import CorruptionError
from node.tablet.ops import Append, OpenSession, Write, encode_command
from node.tablet.paths import TabletPaths
from node.tablet.snapshot import SnapshotStore
from node.tablet.state import StateMachine


def busy_state(entries=20):
    sm = StateMachine("t1")
    session = sm.apply(Entry(1, 1, EntryType.REPLICATE, encode_command(OpenSession()))).value
    for i in range(2, entries + 1):
        op = Append("list", i) if i % 2 else Write(f"k{i % 5}", i)
        sm.apply(
            Entry(
                1,
                i,
                EntryType.REPLICATE,
                encode_command(op, session=session, seq=i, timestamp=100 + i),
            )
        )
    return sm, session


@pytest.fixture
def store(tmp_path):
    return SnapshotStore(TabletPaths(tmp_path, "t1").snapshot_dir, "t1")


def test_no_snapshot_yet(store):
    assert store.load_latest() is None


def test_round_trip_equals_the_live_state_and_keeps_dedup(store):
    sm, session = busy_state()
    path = store.save(sm.snapshot())
    assert path.name == "snapshot-20"
    restored = StateMachine.from_snapshot(store.load_latest())
    assert restored.snapshot() == sm.snapshot()
    assert (restored.last_applied_index, restored.last_applied_term, restored.last_timestamp) == (
        20,
        1,
        120,
    )
    retry = Entry(
        1, 21, EntryType.REPLICATE, encode_command(Append("list", 19), session=session, seq=19)
    )
    assert restored.apply(retry).ok
    assert restored.data["list"] == sm.data["list"]  # the retried append was not applied again


def test_only_the_newest_snapshot_and_no_leftovers_are_kept(store):
    sm, _ = busy_state(10)
    store.save(sm.snapshot())
    (store.directory / ".snapshot-99.abc.tmp").write_bytes(b"half written")  # a crashed save
    sm2, _ = busy_state(30)
    store.save(sm2.snapshot())
    assert os.listdir(store.directory) == ["snapshot-30"]
    assert store.load_latest() == sm2.snapshot()


def test_a_damaged_newest_snapshot_is_an_error_naming_it(store):
    sm, _ = busy_state()
    path = store.save(sm.snapshot())
    good = path.read_bytes()
    damages = [good[:n] for n in range(0, len(good), 7)]
    damages += [good[:n] + bytes([good[n] ^ 0x04]) + good[n + 1 :] for n in range(0, len(good), 3)]
    for damaged in damages:
        path.write_bytes(damaged)
        with pytest.raises(CorruptionError) as exc:
            store.load_latest()
        assert str(path) in str(exc.value)


def test_a_snapshot_under_the_wrong_name_is_refused(store):
    sm, _ = busy_state()
    path = store.save(sm.snapshot())
    path.rename(store.path_for(7))
    with pytest.raises(CorruptionError, match="index 20"):
        store.load_latest()


def test_a_snapshot_of_another_tablet_is_refused(tmp_path, store):
    with pytest.raises(ValueError):
        store.save(StateMachine("other").snapshot())
    durable.ensure_dir(store.directory)
    durable.save_struct(store.path_for(0), StateMachine("other").snapshot())
    with pytest.raises(CorruptionError, match="'other'"):
        store.load_latest()
